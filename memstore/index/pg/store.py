"""One store's own source in the shared PostgreSQL index, answered only when proven current.

A store opened with ``index_url`` reads its own source of the team index.  Every
answer comes from one REPEATABLE READ snapshot in which that source's recorded state
is current for the local file: :meth:`SourceState.is_current` for memory.jsonl (the
SQLite index's check), the SHA-256 of failures.json for the cards.  A stale source is
caught up first with the team loader (the writer role); when that fails the read
raises the typed error and the store answers from its local files instead.  Entries
are read back from the local file at the rows' offsets, so an answer only ever holds
what the file holds.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from memstore.errors import IndexServerError, IndexUnavailableError, InvalidArgumentError, MemstoreError, describe
from memstore.files import open_for_read
from memstore.index.base import StaleRowError
from memstore.index.db import IndexBusyError
from memstore.index.pg.cards import card_bytes, cards_digest
from memstore.index.pg.conn import raw_connection
from memstore.index.pg.loader import PgConn, SourceRow, read_source
from memstore.index.pg.schema import TEAM_REVISION
from memstore.index.pg_connect import read_deadline_of
from memstore.index.pg_deadline import wait_cap
from memstore.index_url import IndexUrl, redact

T = TypeVar("T")
ATTEMPTS = 3
"""Catch-ups tried in one read while other writers keep changing the file."""
_STALE = object()


def _held_by_file(found: object, data: bytes) -> None:
    """Every card answered is one the local file holds: a row is only a claim (StaleRowError if not).

    The recorded digest proves the rows were made from these bytes, unless someone with
    the writer role edited them since; the cards are compared with the file's own.
    """
    from memstore.cards import FailureCard
    from memstore.failure_cards import records_from_bytes

    if not isinstance(found, list) or not found:
        return
    held: dict[str, list[FailureCard]] = {}
    for record in records_from_bytes(data):
        card = FailureCard.from_dict(record)
        if card is not None:
            held.setdefault(card.id, []).append(card)
    for card in found:
        if not isinstance(card, FailureCard) or card not in held.get(card.id, []):
            raise StaleRowError("a card row is not what failures.json holds")
"""The snapshot did not prove the source current: catch up and look again."""

SOURCE_SQL = (
    "SELECT sid, (SELECT min(version_num) FROM alembic_version WHERE version_num LIKE 't%%'), cards_hash"
    " FROM team_source WHERE name = %s"
)


_ENGINES: dict[tuple[int, str, str], Any] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(url: IndexUrl, purpose: str) -> Any:
    """One engine per URL and purpose in this process: every store handle shares its small pool.

    A long-lived process (the MCP server, ``memstore watch``) opens many handles; a pool each
    would hold idle connections the server counts against ``max_connections``.  Keyed by
    process id too: a pool inherited across ``fork()`` is never used.
    """
    key = (os.getpid(), url.sqlalchemy_url, purpose)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            from memstore.index.pg_connect import create_engine

            # A catch-up may load a whole file: no statement timeout for it (as TeamIndex.reindex).
            timeout = {"statement_timeout_ms": 0} if purpose == "load" else {}
            # Two idle connections kept; any number more while busy (max_overflow=-1): a catch-up
            # holds two at once, so a bounded pool deadlocks when enough catch-ups start together.
            engine = create_engine(url, pool_size=2, max_overflow=-1, **timeout)
            _ENGINES[key] = engine
        return engine


class SharedSource:
    """The connection side of one named source: engines, catch-ups and proven snapshots."""

    def __init__(self, url: IndexUrl, name: str, path: Path) -> None:
        self.url = url
        self.name = name
        self.path = Path(path)
        self._schema_checked = False
        self._tried = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url.redacted()!r}, {self.name!r})"

    def _engine(self, purpose: str) -> Any:
        return shared_engine(self.url, purpose)

    def _ensure_schema(self) -> Any:
        """The load engine, the schema created or migrated first (once per handle)."""
        engine = self._engine("load")
        if not self._schema_checked:
            from memstore.index.pg.migrate import upgrade_team

            upgrade_team(engine)
            self._schema_checked = True
        return engine

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Any failure as a typed one-line IndexUnavailableError: the index never breaks a read."""
        try:
            yield
        except IndexUnavailableError:
            raise
        except InvalidArgumentError as exc:  # a bad setting ($MEMSTORE_PG_READ_DEADLINE): say so, back off
            raise IndexServerError(f"PostgreSQL index {self.url.redacted()}: {describe(exc)}") from None
        except MemstoreError as exc:  # the file kept changing under the catch-up: this call only
            raise IndexBusyError(f"{self.path}: {describe(exc)}") from None
        except Exception as exc:  # psycopg, SQLAlchemy or Alembic outside the typed paths
            raise IndexServerError(f"PostgreSQL index {self.url.redacted()}: {redact(describe(exc))}") from None

    def _answer(self, attempt: Callable[[], Any], catch_up: Callable[[bool], None]) -> Any:
        """``attempt()`` until it proves the source current, catching up in between.

        The first read of a handle catches up before it looks (that creates the schema
        and registers the source); a failed catch-up is raised only if the snapshot
        then cannot prove the source current by itself (a reader role, say).
        """
        failure: IndexUnavailableError | None = None
        stale: StaleRowError | None = None
        with self._guarded():
            if not self._tried:
                self._tried = True
                failure = self._try(catch_up, full=False)
            for _attempt in range(ATTEMPTS):
                stale = None
                try:
                    found = attempt()
                except StaleRowError as exc:
                    found, stale = _STALE, exc  # a row the file does not hold: reload the source
                if found is not _STALE:
                    return found
                if failure is not None:
                    raise failure
                failure = self._try(catch_up, full=stale is not None)
            if stale is not None:
                raise IndexServerError(f"PostgreSQL index {self.url.redacted()}: {self.name}: {stale} (after a reload)")
            raise IndexBusyError(f"{self.path} kept changing while the shared index caught up with it")

    def _try(self, catch_up: Callable[[bool], None], *, full: bool) -> IndexUnavailableError | None:
        """``catch_up(full)``, each of its waits for the server no longer than a read's deadline.

        The catch-up runs on the load engine (no statement timeout: it may load a whole
        file), but it runs on behalf of a read: a server that stops answering must turn
        into the read's fallback, not a wait of the load's own limit.
        """
        try:
            with self._guarded(), wait_cap(read_deadline_of(self._engine("read"))):
                catch_up(full)
        except IndexUnavailableError as exc:
            return exc
        return None

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[tuple[PgConn, tuple[Any, ...] | None]]:
        """A read-only snapshot and this source's (sid, schema revision, cards hash) row, if any."""
        with raw_connection(self._engine("read")) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # Before the snapshot: a concurrent rebuild cannot drop a partition it still reads.
            conn.execute("LOCK TABLE team_doc IN ACCESS SHARE MODE")
            row = conn.execute(SOURCE_SQL, (self.name,)).fetchone()
            if row is not None and row[1] != TEAM_REVISION:
                raise IndexServerError(
                    f"PostgreSQL index {self.url.redacted()}: team schema {row[1]!r}, this memstore reads"
                    f" {TEAM_REVISION!r}"
                )
            yield conn, row
            conn.execute("COMMIT")

    # ------------------------------------------------------------------ memory.jsonl

    def read_lines(self, answer: Callable[[PgConn, int, SourceRow], T], empty: T) -> T:
        """``answer(conn, fd, source)`` on a snapshot proven current for the open file; ``empty`` without one."""

        def attempt() -> Any:
            fd = open_for_read(self.path)
            if fd is None:
                return empty
            try:
                with self._snapshot() as (conn, row):
                    source = None if row is None else read_source(conn, int(row[0]))
                    if source is None or source.state is None or not source.state.is_current(fd, os.fstat(fd)):
                        return _STALE
                    return answer(conn, fd, source)
            finally:
                os.close(fd)

        found: T = self._answer(attempt, self._catch_up_lines)
        return found

    def _catch_up_lines(self, full: bool) -> None:
        from memstore.index.pg.loader import SourceLoader

        SourceLoader(self._ensure_schema(), self.name, self.path).catch_up(full=full)

    # ------------------------------------------------------------------ failures.json

    def read_cards(self, answer: Callable[[PgConn, int], T]) -> T:
        """``answer(conn, sid)`` on a snapshot whose cards were made from exactly the local file's bytes."""

        def attempt() -> Any:
            data = card_bytes(self.path)
            digest = cards_digest(data)
            with self._snapshot() as (conn, row):
                if row is None or row[2] is None or bytes(row[2]) != digest:
                    return _STALE
                found = answer(conn, int(row[0]))
            _held_by_file(found, data)
            return found

        found: T = self._answer(attempt, self._sync_cards)
        return found

    def _sync_cards(self, full: bool) -> None:
        from memstore.failure_cards import records_from_bytes
        from memstore.index.pg.cards import sync_cards
        from memstore.index.pg.loader import register, source_lock

        with raw_connection(self._ensure_schema()) as conn:
            sid = register(conn, self.name)
            with source_lock(conn, self.name):
                sync_cards(conn, sid, self.path, records_from_bytes, full=full)
