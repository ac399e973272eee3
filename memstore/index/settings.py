"""What both the opener (db.py) and the migrator (migrate.py) must agree on, in one place of its own.

Kept apart so that neither imports the other: the per-query path never loads Alembic,
and the migrator never loads the opener.
"""

from __future__ import annotations

SCHEMA_VERSION = 5
"""``PRAGMA user_version`` of an index at the newest schema."""
SCHEMA_REVISION = "0005"
"""The Alembic revision of that schema (the SQLite branch of migrations/versions)."""
BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for another process's write lock before the call answers from a scan."""
