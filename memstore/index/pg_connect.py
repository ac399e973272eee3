"""Connecting to a PostgreSQL index: an engine with bounded waits, and errors a person can read.

Every wait has a limit, so a hung server or a stuck lock holder turns into a typed
error instead of a frozen agent: the connection attempt (``connect_timeout``), each
statement (``statement_timeout``), each lock wait, advisory locks included
(``lock_timeout``), and a client that sits idle inside a transaction while holding
locks (``idle_in_transaction_session_timeout``).  Plans are made for each query's own
terms (``plan_cache_mode``), and never JIT-compiled (``jit``).  The settings travel in libpq's startup ``options``, so
they cost no round trip; settings the URL already names win.

The server enforces those, so a server that stops answering (stopped processes, a
network partition with no reset) enforces none of them.  Two client-side limits
cover that:

- TCP keepalives and ``tcp_user_timeout``: the kernel closes a TCP connection whose
  peer stopped acknowledging (idle: after about ``keepalives_idle`` plus
  ``keepalives_interval`` times ``keepalives_count`` seconds; with data unacknowledged:
  after ``tcp_user_timeout``).  libpq ignores them on Unix sockets, and a stopped
  server process on a live host still has its kernel acknowledging.
- Every connection is a :class:`~memstore.index.pg_deadline.BoundedConnection`: a read
  (one checkout through :func:`connect` or :func:`memstore.index.pg.conn.raw_connection`)
  ends within ``read_deadline_s`` (default: the statement timeout plus 5 s;
  ``$MEMSTORE_PG_READ_DEADLINE``), whatever the server does, and its broken connection
  is discarded, never pooled again.  An engine with no statement timeout (a load's)
  bounds each single wait by ``load_wait_s`` instead (600 s; ``$MEMSTORE_PG_LOAD_WAIT``).

Failures become :class:`~memstore.errors.IndexServerError` (down, unreachable, too
slow, silent) or :class:`~memstore.errors.IndexAuthError` (the server said no), with a
one-line message that names the URL without its password.  Imported only when a
PostgreSQL URL is used: it loads SQLAlchemy and psycopg.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url

from memstore.errors import IndexAuthError, IndexExtensionError, IndexServerError, IndexUrlError
from memstore.index.pg_deadline import (
    BoundedConnection,
    ServerSilentError,
    default_load_wait,
    default_read_deadline,
    read_deadline,
)
from memstore.index_url import IndexUrl, parse_index_url, redact

APPLICATION_NAME = "memstore"
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION_TIMEOUT_MS = 300_000
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 15, "keepalives_interval": 5, "keepalives_count": 3}
"""A dead TCP peer of an idle connection is found in about 30 s (the kernel's default: over 2 hours)."""
TCP_USER_TIMEOUT_MS = 30_000
"""Data the peer has not acknowledged for this long closes the TCP connection (overrides keepalives' count)."""
TCP_USER_TIMEOUT_MAX_MS = 2**31 - 1
"""libpq takes an int: a longer load wait (``1e7`` meant as "never") is clamped, not refused."""
CLIENT_CHECK_MS = 2_000
"""How often the server checks, during a statement, that its client is still there."""
MIN_SERVER_VERSION = 150_000
"""PostgreSQL 15: the version the issue targets (pg_trgm is a trusted extension from 13 on)."""
TRGM = "pg_trgm"

_AUTH_MARKERS = (
    "authentication failed",
    "no password supplied",
    "password is required",
    "does not exist",  # role or database
    "permission denied for database",
    "no pg_hba.conf entry",
    "not permitted to log in",
)
_PREFIXES = re.compile(r"^(?:connection (?:failed|is bad):\s*)+", re.IGNORECASE)

TrgmState = Literal["installed", "available", "missing"]

_URLS: weakref.WeakKeyDictionary[Engine, IndexUrl] = weakref.WeakKeyDictionary()
"""Each engine's URL as the user wrote it: messages show that, not SQLAlchemy's re-encoding."""
_DEADLINES: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
"""Each engine's read deadline in seconds (0: none, a load engine)."""


@dataclass(frozen=True)
class ServerInfo:
    """What a successful check saw: who we are, where, and whether pg_trgm can be used."""

    url: str
    """Redacted."""
    server_version: int
    role: str
    database: str
    trgm: TrgmState
    read_only: bool
    """The role's default_transaction_read_only (set for the documented reader role)."""


def create_engine(
    url: IndexUrl | str,
    *,
    connect_timeout_s: int = CONNECT_TIMEOUT_S,
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    idle_in_transaction_timeout_ms: int = IDLE_IN_TRANSACTION_TIMEOUT_MS,
    pool_size: int = 5,
    max_overflow: int = 5,
    read_deadline_s: float | None = None,
    load_wait_s: float | None = None,
) -> Engine:
    """An engine for ``url`` with memstore's connection settings; nothing is connected yet.

    A timeout of 0 means none (a bulk ``reindex`` may want ``statement_timeout_ms=0``).
    Pooled connections are pinged before use, so a restarted server costs one retry,
    not an error.  ``read_deadline_s`` bounds each read on the client (None: the
    default, see the module; 0: none); an engine without one bounds each wait by
    ``load_wait_s``.
    """
    if read_deadline_s is None:
        read_deadline_s = default_read_deadline(statement_timeout_ms)
    wait_limit = read_deadline_s or (default_load_wait() if load_wait_s is None else load_wait_s)
    index_url = parse_index_url(url) if isinstance(url, str) else url
    try:
        sa_url = make_url(index_url.sqlalchemy_url)
    except (ValueError, sa.exc.ArgumentError):
        raise IndexUrlError(f"index URL: malformed: {index_url.redacted()!r}") from None
    query = dict(sa_url.query)
    settings: dict[str, object] = {
        "statement_timeout": statement_timeout_ms,
        "lock_timeout": lock_timeout_ms,
        "idle_in_transaction_session_timeout": idle_in_transaction_timeout_ms,
        # psycopg prepares a statement after 5 runs; a generic plan cannot see that this
        # term is rare and that one common (docs/postgres-notes.md: 30x slower top-k).
        "plan_cache_mode": "force_custom_plan",
        # A walk's cursor is planned for all its rows (cost in the hundreds of thousands at 1M
        # entries), so the server JIT-compiles it on the first FETCH: 60 ms to return 16 rows
        # that take 0.5 ms without (docs/postgres-notes.md).  No statement here gains from it.
        "jit": "off",
        # A read given up on by the client (its deadline) closes its socket; without this the
        # server notices only when it next writes, so a read queued behind a lock would hold
        # its backend, and a connection slot, until the lock timeout.
        "client_connection_check_interval": CLIENT_CHECK_MS,
    }
    options = " ".join(f"-c {name}={value}" for name, value in settings.items())
    given = query.get("options")
    if given:
        # Later -c settings win in libpq's options, so the user's own come last.
        options = f"{options} {given if isinstance(given, str) else ' '.join(given)}"
    connect_args: dict[str, Any] = {"options": options}
    if "connect_timeout" not in query:
        connect_args["connect_timeout"] = connect_timeout_s
    if "application_name" not in query:
        connect_args["application_name"] = APPLICATION_NAME
    if "client_encoding" not in query:
        # The index's texts are Unicode: the database must be UTF8 (checked on connect), and
        # the session speaks it too, so psycopg never decodes text as bytes (SQL_ASCII).
        connect_args["client_encoding"] = "UTF8"
    # Linux applies tcp_user_timeout to a peer that acknowledges but does not read too: a
    # load (no read deadline) may wait for a stalled server up to its own per-wait limit.
    user_timeout = TCP_USER_TIMEOUT_MS if read_deadline_s else min(int(wait_limit * 1000), TCP_USER_TIMEOUT_MAX_MS)
    tcp: dict[str, int] = {**KEEPALIVES, "tcp_user_timeout": user_timeout}
    connect_args.update({name: value for name, value in tcp.items() if name not in query})
    engine = sa.create_engine(
        sa_url,
        connect_args=connect_args,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        hide_parameters=True,
    )
    _URLS[engine] = index_url
    _DEADLINES[engine] = read_deadline_s

    @sa.event.listens_for(engine, "do_connect")
    def bounded(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> BoundedConnection:
        conn = BoundedConnection.connect_bounded(wait_limit, *cargs, **cparams)
        encoding = conn.info.parameter_status("server_encoding") or "?"
        if encoding != "UTF8":
            conn.close()
            raise IndexExtensionError(
                f"PostgreSQL index {index_url.redacted()}: the database's encoding is {encoding}, not UTF8"
                " (create it with ENCODING 'UTF8')"
            )
        return conn

    return engine


def read_deadline_of(engine: Engine) -> float | None:
    """The client-side deadline of one read on ``engine`` (None or 0: it has none)."""
    return _DEADLINES.get(engine)


def engine_deadline(engine: Engine) -> contextlib.AbstractContextManager[None]:
    """The deadline of one read on ``engine``: wrap the whole checkout in it (none for a load engine)."""
    return read_deadline(_DEADLINES.get(engine))


def server_error(exc: BaseException, url: IndexUrl | str) -> IndexServerError:
    """``exc`` (from SQLAlchemy or psycopg) as a typed one-line error naming the redacted URL."""
    index_url = url if isinstance(url, IndexUrl) else None
    shown = index_url.redacted() if index_url is not None else redact(str(url))
    original = getattr(exc, "orig", None) or exc
    text = " ".join(str(original).split()) or type(original).__name__
    text = _PREFIXES.sub("", text).replace("FATAL: ", "")
    for secret in _secrets(index_url):
        text = text.replace(secret, "***")
    text = redact(text)
    lowered = text.lower()
    if isinstance(original, ServerSilentError):
        return IndexServerError(f"PostgreSQL index {shown}: {text}")
    if type(original).__name__ == "ConnectionTimeout" or "timeout expired" in lowered:
        return IndexServerError(f"PostgreSQL index {shown}: no answer within the connect timeout ({text})")
    if any(marker in lowered for marker in _AUTH_MARKERS):
        return IndexAuthError(f"PostgreSQL index {shown}: refused: {text}")
    return IndexServerError(f"PostgreSQL index {shown}: unreachable: {text}")


def _secrets(url: IndexUrl | None) -> list[str]:
    if url is None:
        return []
    with contextlib.suppress(ValueError, sa.exc.ArgumentError):
        parsed = make_url(url.sqlalchemy_url)
        found = [parsed.password] if parsed.password else []
        for key, value in parsed.query.items():
            if "password" in key.lower():
                found.extend([value] if isinstance(value, str) else list(value))
        return [str(s) for s in found if s and len(str(s)) >= 3]
    return []


@contextlib.contextmanager
def connect(engine: Engine) -> Iterator[Connection]:
    """A pooled connection, within the engine's read deadline; any failure to reach or log in becomes a typed error."""
    with engine_deadline(engine):
        try:
            conn = engine.connect()
        except (sa.exc.DBAPIError, OSError) as exc:
            raise server_error(exc, _engine_url(engine)) from None
        with conn:
            yield conn


@contextlib.contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A REPEATABLE READ, READ ONLY transaction: every statement in it sees one committed state.

    A search reads the sources' states and then their rows; under READ COMMITTED a
    catch-up committing in between would pair an old state with new rows.
    """
    with connect(engine) as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        with conn.begin():
            yield conn


def trgm_state(conn: Connection) -> TrgmState:
    """Whether ``pg_trgm`` is installed in this database, only available to install, or missing."""
    row = conn.execute(
        sa.text("SELECT installed_version FROM pg_available_extensions WHERE name = :name"), {"name": TRGM}
    ).first()
    if row is None:
        return "missing"
    return "installed" if row[0] is not None else "available"


def check_server(engine: Engine, *, need_trgm: bool = True) -> ServerInfo:
    """Connect once and check version and pg_trgm; typed errors for each way this fails.

    ``pg_trgm`` must at least be available (contrib installed); the writer installs it
    with :func:`ensure_trgm`.
    """
    url = _engine_url(engine)
    with connect(engine) as conn:
        try:
            version = int(conn.execute(sa.text("SHOW server_version_num")).scalar_one())
            role, database, read_only = conn.execute(
                sa.text("SELECT current_user, current_database(), current_setting('default_transaction_read_only')")
            ).one()
            trgm = trgm_state(conn)
        except sa.exc.DBAPIError as exc:
            raise server_error(exc, url) from None
    shown = url.redacted()
    if version < MIN_SERVER_VERSION:
        raise IndexExtensionError(f"PostgreSQL index {shown}: server {version // 10000} is older than 15")
    if need_trgm and trgm == "missing":
        raise IndexExtensionError(
            f"PostgreSQL index {shown}: no pg_trgm extension on the server (Debian: postgresql-contrib)"
        )
    return ServerInfo(
        url=shown,
        server_version=version,
        role=str(role),
        database=str(database),
        trgm=trgm,
        read_only=read_only == "on",
    )


def ensure_trgm(conn: Connection) -> None:
    """``CREATE EXTENSION IF NOT EXISTS pg_trgm``: a trusted extension, so the database's owner may."""
    try:
        conn.execute(sa.text(f"CREATE EXTENSION IF NOT EXISTS {TRGM}"))
    except sa.exc.DBAPIError as exc:
        raise IndexExtensionError(f"cannot install {TRGM}: {' '.join(str(exc.orig).split())}") from None


def _engine_url(engine: Engine) -> IndexUrl:
    """The URL an engine was made from (as given, for messages), or its own rendering."""
    known = _URLS.get(engine)
    if known is not None:
        return known
    return IndexUrl(sqlalchemy_url=engine.url.render_as_string(hide_password=False), database=engine.url.database or "")
