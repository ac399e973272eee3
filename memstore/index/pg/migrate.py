"""Create or migrate the team index schema with Alembic (``team@head``), once per database.

Run by ``reindex`` only: a search reads ``alembic_version`` with one query and never
imports Alembic.  Two indexers starting at once take turns on an advisory lock, so
the schema is created once.
"""

from __future__ import annotations

import time
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memstore.errors import IndexServerError
from memstore.index.pg.conn import SCHEMA_LOCK, database_error
from memstore.index.pg.schema import TEAM_REVISION
from memstore.index.pg_connect import connect, ensure_trgm
from memstore.index.pg_deadline import wait_cap

Outcome = Literal["current", "created", "migrated"]


def schema_revision(conn: Connection) -> str | None:
    """The team branch's revision stamped in this database; None when there is none."""
    if conn.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return None
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    team = [str(row) for row in rows if str(row).startswith("t")]
    return team[0] if team else None


def stamped_current(engine: Engine) -> bool:
    """Whether the team branch is stamped at head: one statement, no lock, no Alembic.

    Alembic's DDL and its stamp commit in one transaction, so a stamp at head means the
    schema is there; the lock only keeps two creators apart.
    """
    import psycopg

    from memstore.index.pg.conn import raw_connection

    with raw_connection(engine) as conn:
        try:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        except psycopg.errors.UndefinedTable:
            return False
    return TEAM_REVISION in {str(row[0]) for row in rows}


MIGRATE_LOCK_WAIT_MS = 1_000
"""Longest one lock wait of Alembic's DDL on the server while this process's ALEMBIC_LOCK is held."""
MIGRATE_WAIT_S = 30.0
"""Longest any one wait for the server then (a frozen server must not hold ALEMBIC_LOCK for long)."""
MIGRATE_TRIES = 10
"""A migration that met a lock tries again this many times, releasing ALEMBIC_LOCK in between."""


def upgrade_team(engine: Engine) -> Outcome:
    """Bring the database to ``team@head``; what was done ('current' when nothing was).

    Alembic's shared module state needs ALEMBIC_LOCK (one Alembic run at a time in a
    process), and a local SQLite index's first build waits for it: so while it is held
    each lock wait on the server is short and each wait for the server bounded; a
    migration that meets a lock releases ALEMBIC_LOCK and tries again.
    """
    if stamped_current(engine):
        return "current"
    for attempt in range(1, MIGRATE_TRIES + 1):
        try:
            return _upgrade_team(engine)
        except _GaveWay as gave_way:
            if attempt == MIGRATE_TRIES:
                raise database_error(gave_way.error, engine) from None
        except sa.exc.DBAPIError as exc:
            raise database_error(exc, engine) from None
        time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


class _GaveWay(Exception):
    """Alembic's DDL met a server lock while ALEMBIC_LOCK was held: released, to be tried again."""

    def __init__(self, error: sa.exc.DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


def _upgrade_team(engine: Engine) -> Outcome:
    import psycopg
    from alembic import command
    from alembic.config import Config
    from alembic.util import CommandError

    from memstore.index.migrate import ALEMBIC_LOCK, migrations_dir

    with connect(engine) as conn:
        try:
            with conn.begin():
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k, 0)"), {"k": SCHEMA_LOCK})
                current = schema_revision(conn)
                if current == TEAM_REVISION:
                    return "current"
                ensure_trgm(conn)
                config = Config()
                config.set_main_option("script_location", str(migrations_dir()))
                config.attributes["connection"] = conn
                conn.execute(sa.text(f"SET LOCAL lock_timeout = {MIGRATE_LOCK_WAIT_MS}"))
                # Taken after the schema lock (a thread holding ALEMBIC_LOCK never waits for it).
                with ALEMBIC_LOCK, wait_cap(MIGRATE_WAIT_S):
                    try:
                        command.upgrade(config, "team@head")
                    except sa.exc.DBAPIError as exc:
                        if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                            raise _GaveWay(exc) from None
                        raise
        except CommandError as exc:
            raise IndexServerError(f"cannot migrate the team index schema: {exc}") from None
    return "created" if current is None else "migrated"
