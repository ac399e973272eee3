"""Migrate an index file with Alembic (run only when the schema version differs).

A new index file does not come here: it replays ``schema_sql.py`` (``db._create_schema``).

SQLAlchemy owns the engine here, with the pragmas set in a connect listener;
the per-query path never imports this module.
"""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path
from typing import Any

from memstore.errors import IndexUnavailableError
from memstore.index.settings import BUSY_TIMEOUT_MS, SCHEMA_REVISION


def _set_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite opens a transaction only before DML, so a migration's DDL (DROP, CREATE) each
    # committed at once: another process with the file open read a word index dropped and not
    # yet refilled.  SQLAlchemy's own BEGIN (:func:`_begin`) makes one run one transaction.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA trusted_schema = OFF")
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.close()


def _begin(connection: Any) -> None:
    """The whole Alembic run in one write transaction: readers see the old file or the new one."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


ALEMBIC_LOCK = threading.Lock()
"""Held around every Alembic run in this process, SQLite's and PostgreSQL's.

Alembic's ``context`` and ``op`` are module-level proxies shared by the whole process: two
threads migrating at once (two projects' first index builds) ran one thread's DDL on the
other's connection after it closed, and sqlite3 then crashed the process (SIGSEGV)."""


def migrations_dir() -> Path:
    return Path(str(resources.files("memstore._migrations")))


def upgrade_to_head(db_path: Path) -> None:
    """Bring the schema of ``db_path`` to the newest revision and stamp ``user_version``.

    Any failure (the folder removed meanwhile, a full disk, a damaged file) is an
    :class:`IndexUnavailableError`: SQLAlchemy's and Alembic's own errors never reach callers.
    """
    upgrade_to(db_path, SCHEMA_REVISION)


def upgrade_to(db_path: Path, revision: str) -> None:
    """:func:`upgrade_to_head`, stopping at ``revision`` (stamped as ``user_version`` ``int(revision)``).

    Only the newest revision is ever used on a real index; an older one makes the file an
    earlier release left, which is what :mod:`memstore.index.old_schemas` is checked against.
    """
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        _upgrade(db_path, revision)
    except (SQLAlchemyError, CommandError, OSError) as exc:
        raise IndexUnavailableError(f"cannot create or migrate the index schema in {db_path}: {exc}") from exc


def _upgrade(db_path: Path, revision: str) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, event, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(f"sqlite:///{db_path}", poolclass=NullPool)
    event.listen(engine, "connect", _set_pragmas)
    event.listen(engine, "begin", _begin)
    try:
        config = Config()
        config.set_main_option("script_location", str(migrations_dir()))
        with ALEMBIC_LOCK, engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            connection.execute(text(f"PRAGMA user_version = {int(revision)}"))
    finally:
        engine.dispose()
