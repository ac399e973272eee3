"""A client-side limit on every wait for the PostgreSQL server, so a frozen server cannot hang a read.

``statement_timeout`` and ``lock_timeout`` are enforced by the server: a server that
stops answering (its processes stopped, a network partition with no TCP reset)
enforces neither, and psycopg would wait for its answer forever.  TCP keepalives
and ``tcp_user_timeout`` (set in :mod:`memstore.index.pg_connect`) only help on TCP,
and only when the peer's kernel stops answering too; a Unix socket has neither.

So every connection memstore's engines make is a :class:`BoundedConnection`.  Each
of its waits for the server (psycopg's ``Connection.wait``: every execute, fetch,
COPY, commit and rollback, SQLAlchemy's pool ping too) ends at the earlier of

- the deadline of the read it belongs to, set by :func:`read_deadline` around one
  whole read (checkout, ping, every statement, the return to the pool), and
- the connection's own ``wait_limit_s`` for any one wait (the load engines, which
  run statements with no statement timeout, have only this).

psycopg resumes a waiting generator every 0.1 s even when the socket is silent (to
notice Ctrl-C); that is where the limit is checked, so no thread is needed.  Past
the limit the connection is closed at once (libpq drops the socket; nothing waits
for the server), so the pool discards it, and the wait raises
:class:`ServerSilentError`, an ``OperationalError`` the callers turn into a typed
:class:`~memstore.errors.IndexServerError`.

Rejected: ``Connection.cancel()`` opens a second connection to the postmaster,
which is frozen too (measured: it times out, and the query is not cancelled); a
watchdog thread that shuts the socket down works (the blocked call raises within
milliseconds) but costs a thread, must be armed before the pool's ping, and must
never touch a socket number after the connection that owned it is closed.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Generator, Iterator
from contextvars import ContextVar
from typing import Any

import psycopg

from memstore.errors import InvalidArgumentError

READ_MARGIN_S = 5.0
"""A read's default deadline is the statement timeout plus this: a server that answers never hits it."""
LOAD_WAIT_S = 600.0
"""Longest one wait of a load (COPY, index builds: no statement timeout) before the server counts as gone.

A whole 1M-row full load took 158 s on the shared 2-core machine (benchmarks/results/team-1m.md),
so no single statement of it comes near this."""
READ_DEADLINE_ENV = "MEMSTORE_PG_READ_DEADLINE"
LOAD_WAIT_ENV = "MEMSTORE_PG_LOAD_WAIT"
"""Seconds, overriding the defaults above for every engine this process makes (0: no limit)."""

_READ: ContextVar[tuple[float, float] | None] = ContextVar("memstore_pg_read", default=None)
"""(monotonic end, seconds) of the read this thread is in, if any."""
_CAP: ContextVar[float] = ContextVar("memstore_pg_wait_cap", default=0.0)
"""Longest any one wait may last in this block (0: no cap): a load run on behalf of a read."""


class ServerSilentError(psycopg.OperationalError):
    """The server did not answer within the client-side limit; the connection is closed."""


class DeadlinePassed(Exception):
    """Raised inside psycopg's wait when a limit passes (psycopg names it if it logs the wait)."""


def _until(gen: Generator[Any, Any, Any], end: float) -> Generator[Any, Any, Any]:
    """``gen``, ended with :class:`DeadlinePassed` the first time it is resumed at or after ``end``."""
    try:
        waiting = next(gen)
        while True:
            ready = yield waiting
            if time.monotonic() >= end:
                raise DeadlinePassed
            waiting = gen.send(ready)
    except StopIteration as done:
        return done.value


def _silent(seconds: float) -> ServerSilentError:
    return ServerSilentError(
        f"no answer from the server within {seconds:g} s (the server is stopped or the network is down)"
    )


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server ends by its read's deadline or its own limit."""

    wait_limit_s: float = 0.0
    """Longest any one wait may last (0: only a read's deadline bounds it)."""

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        end, seconds = self._end()
        if end == math.inf:
            return super().wait(gen, *args, **kwargs)
        try:
            return super().wait(_until(gen, end), *args, **kwargs)
        except DeadlinePassed:
            # The protocol is mid-exchange: the connection cannot be used again.
            self.pgconn.finish()
            raise _silent(seconds) from None

    def _end(self) -> tuple[float, float]:
        """(monotonic end, its length) of the wait starting now: the read's end or the per-wait limit."""
        read = _READ.get()
        end, seconds = read if read is not None else (math.inf, 0.0)
        limit = self.wait_limit_s
        cap = _CAP.get()
        if cap and (not limit or cap < limit):
            limit = cap
        if limit and time.monotonic() + limit < end:
            end, seconds = time.monotonic() + limit, limit
        return end, seconds

    def _try_cancel(self, *, timeout: float = 5.0) -> None:
        """Ctrl-C's cancel request (a new connection to the server) within what is left of the limit."""
        end, _seconds_left = self._end()
        left = end - time.monotonic()
        super()._try_cancel(timeout=max(0.1, min(timeout, left)))

    @classmethod
    def connect_bounded(cls, wait_limit_s: float, *args: Any, **kwargs: Any) -> BoundedConnection:
        """``connect()``, its connect timeout cut to what is left of the read's deadline.

        The pool reconnects when its ping finds a connection silent; past the deadline that
        is not tried (the server that stopped answering would only be asked again).
        """
        read = _READ.get()
        cap = _CAP.get()
        if read is not None or cap:
            left = read[0] - time.monotonic() if read is not None else math.inf
            if left <= 0 and read is not None:
                raise _silent(read[1])
            given = _seconds(kwargs.get("connect_timeout"))
            # libpq's smallest connect timeout is 2 s.
            kwargs["connect_timeout"] = max(2, math.ceil(min(left, cap or math.inf, given or math.inf)))
        conn = cls.connect(*args, **kwargs)
        conn.wait_limit_s = wait_limit_s
        return conn


def _seconds(value: object) -> float | None:
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if number > 0 else None


@contextlib.contextmanager
def read_deadline(seconds: float | None) -> Iterator[None]:
    """Every wait for the server in this block (this thread) ends within ``seconds`` of its start.

    None or 0 sets nothing; inside another read the earlier deadline stays.
    """
    if not seconds:
        yield
        return
    end = time.monotonic() + seconds
    outer = _READ.get()
    token = _READ.set((end, seconds) if outer is None or end < outer[0] else outer)
    try:
        yield
    finally:
        _READ.reset(token)


@contextlib.contextmanager
def wait_cap(seconds: float | None) -> Iterator[None]:
    """Every single wait for the server in this block (this thread) ends within ``seconds``.

    For a load run on behalf of a read (a store's catch-up): the load may take longer in
    all, but a server that stops answering is given up on as a read would give up.
    None or 0 sets nothing; inside another cap the smaller stays.
    """
    if not seconds:
        yield
        return
    outer = _CAP.get()
    token = _CAP.set(min(outer, seconds) if outer else seconds)
    try:
        yield
    finally:
        _CAP.reset(token)


@contextlib.contextmanager
def uncapped() -> Iterator[None]:
    """Lift :func:`wait_cap` in this block: a catch-up's load work, once its source lock is held.

    A legitimate statement of a load (a large COPY, an index build) may run longer than a
    read's deadline; cutting it would leave a large source never indexed from reads.  The
    load's own per-wait limit still bounds it.
    """
    token = _CAP.set(0.0)
    try:
        yield
    finally:
        _CAP.reset(token)


def seconds_setting(name: str, default: float) -> float:
    """``$name`` as a non-negative number of seconds, or ``default`` when unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"${name} must be a number of seconds (0 for no limit): {text!r}")
    return value


def default_read_deadline(statement_timeout_ms: int) -> float:
    """A read's deadline: ``$MEMSTORE_PG_READ_DEADLINE``, else the statement timeout plus a margin.

    None for an engine with no statement timeout (a load's): its waits have only the load limit.
    """
    if statement_timeout_ms <= 0:
        return 0.0
    return seconds_setting(READ_DEADLINE_ENV, statement_timeout_ms / 1000 + READ_MARGIN_S)


def default_load_wait() -> float:
    """One wait's limit for an engine with no read deadline: ``$MEMSTORE_PG_LOAD_WAIT``, else LOAD_WAIT_S."""
    return seconds_setting(LOAD_WAIT_ENV, LOAD_WAIT_S)
