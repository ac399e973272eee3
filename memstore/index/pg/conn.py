"""Raw psycopg connections from memstore's engine, and database errors as typed one-line errors.

The team index speaks psycopg directly (COPY, cursors, arrays) on connections the
SQLAlchemy pool hands out (:mod:`memstore.index.pg_connect` sets their timeouts).
Each is used in autocommit mode with explicit ``BEGIN``/``COMMIT``, so no
transaction characteristic survives its return to the pool, and returned with no
transaction open; a connection that broke is discarded, never pooled again.  One
checkout is one read: it runs within the engine's read deadline
(:mod:`memstore.index.pg_deadline`), checkout and return included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import sqlalchemy as sa
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from sqlalchemy.engine import Engine

from memstore.errors import IndexAuthError, IndexServerError, MemstoreError
from memstore.index.pg_connect import _engine_url, engine_deadline, server_error
from memstore.index_url import redact

LOCK_SPACE = 0x6D656D73
"""The first key of memstore's advisory locks ("mems"): keeps them apart from other applications'."""
SCHEMA_LOCK = LOCK_SPACE + 1


def database_error(exc: BaseException, engine: Engine) -> IndexServerError:
    """A psycopg or SQLAlchemy error raised while talking to the server, as one typed line."""
    original = getattr(exc, "orig", None) or exc
    url = _engine_url(engine)
    if isinstance(original, psycopg.OperationalError) and not isinstance(original, pg_errors.QueryCanceled):
        return server_error(original, url)
    text = redact(" ".join(str(original).split()) or type(original).__name__)
    shown = url.redacted()
    if isinstance(original, pg_errors.InsufficientPrivilege | pg_errors.ReadOnlySqlTransaction):
        return IndexAuthError(f"PostgreSQL index {shown}: refused: {text} (this role may only read)")
    if isinstance(original, pg_errors.QueryCanceled):
        return IndexServerError(f"PostgreSQL index {shown}: too slow: {text}")
    if isinstance(original, pg_errors.UndefinedTable):
        return IndexServerError(
            f"PostgreSQL index {shown}: no team index schema in this database yet"
            " (memstore reindex --index-url URL --source NAME=ROOT creates it)"
        )
    return IndexServerError(f"PostgreSQL index {shown}: {text}")


DB_ERRORS = (psycopg.Error, sa.exc.DBAPIError, OSError)


@contextlib.contextmanager
def raw_connection(engine: Engine) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A pooled psycopg connection in autocommit mode, within the read deadline; errors become typed errors."""
    with engine_deadline(engine):
        try:
            fairy = engine.raw_connection()
        except DB_ERRORS as exc:
            raise database_error(exc, engine) from None
        conn = fairy.driver_connection
        assert isinstance(conn, psycopg.Connection)
        broken = False
        try:
            conn.autocommit = True
            yield conn
        except MemstoreError:
            raise  # already typed (a StorageError is an OSError, and not the server's)
        except DB_ERRORS as exc:
            broken = conn.closed or conn.broken
            raise database_error(exc, engine) from None
        finally:
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    broken = True
            if broken or conn.closed:
                fairy.invalidate()
            else:
                conn.autocommit = False
            fairy.close()
