"""What every indexed source shares: the connection, consistent snapshots, catch-up, recovery.

A subclass says how to bring its rows level with the file (``_apply_change``);
this class makes sure that happens inside one ``BEGIN IMMEDIATE`` transaction that
re-reads the source row, that answers are read from a snapshot in which the index
matches the open file, and that a damaged index is set aside and rebuilt.

A handle keeps nothing it read from the index beyond the transaction it read it in
(the source row, tag ids and every other lookup are read again each time): another
handle or process may rebuild the index between two calls, and a value remembered
from before would file new rows under ids that now mean something else.  The only
per-handle state is the connection itself, tied to the generation (dev, inode) of
the index file it opened: when a new file replaces it, the next call reconnects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

from memstore.append_chain import AppendChain
from memstore.errors import IndexUnavailableError
from memstore.files import open_for_read
from memstore.index import fork_state
from memstore.index.db import (
    DatabaseFault,
    IndexBusyError,
    IndexFile,
    Populate,
    grow_cache,
    is_busy,
    is_corruption,
)
from memstore.index.settings import BUSY_TIMEOUT_MS
from memstore.index.source import Change, PrefixDigest, SourceState
from memstore.index.trust import Generation
from memstore.logger import LazyLogger

if TYPE_CHECKING:
    from memstore.index.report import Progress, RefreshReport, SourceStatus

# The reports (memstore.index.report) load when a catch-up, refresh or status first builds one:
# a search of a current index builds none.

log = LazyLogger(__name__)

T = TypeVar("T")
ATTEMPTS = 4

FREE_SHARE = 10
"""A rebuild that leaves more than 1/FREE_SHARE of the file's pages free compacts the file."""


def compact(conn: sqlite3.Connection) -> None:
    """VACUUM after a rebuild in place when the rows it dropped left much of the file free.

    Deleting a source's rows frees their pages but never shrinks the file; without this a
    file bloated by churn stays bloated through ``reindex --full``.  Best effort: a busy
    or refused VACUUM leaves a correct, merely larger file.
    """
    try:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        if free * FREE_SHARE > pages:
            conn.execute("VACUUM")
    except sqlite3.Error as exc:
        log.info("index not compacted after a rebuild: %s", exc)


def fold_wal(conn: sqlite3.Connection) -> None:
    """Fold the WAL back into the index after a write, without waiting for readers.

    A WAL that no open connection holds cannot be told from a planted one, so the next
    opener sets the index aside and rebuilds it: an empty WAL is what a process stopped
    with SIGTERM or SIGKILL (no atexit) should leave.  A rebuild's WAL is as large as the
    index, too.  When a reader is in the way the WAL simply stays for the next write.
    """
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        pass
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection, *, begun: bool = False) -> Iterator[list[bool]]:
    """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends normally and the flag it
    yields is still true, rolled back when the block sets it false or raises.  ``begun``: the
    connection already holds it (:meth:`IndexedSource.hold_write`)."""
    grow_cache(conn)  # a write never runs with the small first-read cache
    if not begun:
        conn.execute("BEGIN IMMEDIATE")
    keep = [True]
    try:
        yield keep
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT" if keep[0] else "ROLLBACK")


class SourceChangedError(Exception):
    """The file changed while a catch-up read it: its rows are rolled back and it is read again."""


class SourceMovedError(Exception):
    """The open descriptor is of a file that has since been replaced at the path."""


def _identity_at(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class StaleRowError(Exception):
    """A row's bytes no longer decode: the file changed under the index (rebuild and retry)."""


class HeldWrite:
    """An index write transaction taken ahead of a change to its source (:meth:`IndexedSource.hold_write`)."""

    def __init__(self, conn: sqlite3.Connection, mutex: threading.RLock) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._mutex = mutex

    def holds(self, conn: sqlite3.Connection) -> bool:
        """Whether ``conn`` is the connection this holds, still inside its transaction."""
        return self._conn is conn and conn.in_transaction

    def release(self) -> None:
        """Roll back what was not committed and let the handle's other threads in (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            # Closed already when the follow-up set a damaged index aside or followed a swapped file.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        finally:
            self._mutex.release()


_SOURCES: weakref.WeakSet[IndexedSource] = weakref.WeakSet()


def _free_mutexes_in_child() -> None:
    """A fork copies each handle's mutex as it was: one another thread held (a rewrite holds it
    from before its replace to the end of its follow-up) would never be released in the child.

    That thread was using the index file, maybe mid-statement: the child does not open it
    (:mod:`memstore.index.fork_state`).
    """
    for source in list(_SOURCES):
        mutex, source._mutex = source._mutex, threading.RLock()
        if mutex.acquire(blocking=False):  # free, or held by the thread that forked (it goes on here)
            mutex.release()
            continue
        fork_state.in_use_at_fork(source._generation)
        with contextlib.suppress(OSError):
            fork_state.in_use_at_fork(source.file.generation())  # being connected to


os.register_at_fork(after_in_child=_free_mutexes_in_child)


class IndexedSource:
    """One canonical file mirrored into the shared index database."""

    SOURCE_NAME: ClassVar[str]

    def __init__(self, source_path: Path, index_file: IndexFile) -> None:
        self.source_path = Path(source_path)
        self.file = index_file
        self._conn: sqlite3.Connection | None = None
        self._generation: Generation | None = None
        self._pid = 0
        self._mutex = threading.RLock()
        self._progress: Progress | None = None
        _SOURCES.add(self)

    # ------------------------------------------------------------------ hooks

    def _apply_change(
        self,
        conn: sqlite3.Connection,
        fd: int,
        st: os.stat_result,
        change: Change,
        state: SourceState | None,
        prefix: PrefixDigest | None,
        *,
        chain: AppendChain | None = None,
    ) -> int:
        """Bring this source's rows level with the open file; returns the row count.

        ``prefix`` (GROWN only) is the verified digest of the old indexed prefix; ``chain`` the
        append chain read once for this catch-up, right after ``st`` was taken.
        """
        raise NotImplementedError

    def _populate(self, conn: sqlite3.Connection) -> None:
        """Fill a brand-new index file (optional bulk path)."""

    def _reset_caches(self) -> None:
        """Forget per-connection caches (after a reconnect); the built-in sources keep none."""

    # ------------------------------------------------------------------ connection

    def _populate_hook(self) -> Populate | None:
        return self._populate

    @property
    def generation(self) -> Generation | None:
        """(dev, ino) of the index file this handle's connection has open: key per-handle caches on it."""
        return self._generation if self._conn is not None else None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            # One lstat per query: another handle or process may have swapped in a new file
            # (reindex --full, a rebuild after damage, a checkout); follow it, with fresh caches.
            if self.file.generation() == self._generation:
                # Used again: from now on it keeps the hot pages (see db.FIRST_CACHE_KIB).
                grow_cache(self._conn)
                return self._conn
            log.info("index file %s was replaced; reconnecting", self.file.path)
            self._drop_connection()
        # A connection inherited across fork() must never be used (or closed) here.
        self._conn = None
        self._generation = None
        self._reset_caches()
        self._conn, self._generation = self.file.connect(populate=self._populate_hook())
        self._pid = os.getpid()
        return self._conn

    def close(self) -> None:
        with self._mutex:
            self._drop_connection()

    def _drop_connection(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
        self._generation = None
        self._reset_caches()

    def _on_sqlite_error(self, exc: Exception) -> None:
        """A damaged index is set aside (and rebuilt by the retry); anything else ends this call.

        Busy, a full disk, an I/O error or a statement SQLite refuses are not the index
        file's fault: the caller answers this call from a scan and keeps the index.
        """
        if is_busy(exc):
            raise IndexBusyError(f"index busy: {exc}") from exc
        if not is_corruption(exc):
            raise IndexBusyError(f"index unavailable for this call: {exc}") from exc
        generation = self._generation
        self._drop_connection()
        self.file.set_aside(str(exc), expected=generation)

    @contextlib.contextmanager
    def _open_source(self) -> Iterator[int | None]:
        fd = open_for_read(self.source_path)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    # ------------------------------------------------------------------ reads

    def _read(self, answer: Callable[[sqlite3.Connection, int, SourceState], T], empty: T) -> T:
        """``answer`` on a fresh snapshot of the open source file; ``empty`` when there is no file."""
        with self._mutex:
            for _attempt in range(ATTEMPTS):
                with self._open_source() as fd:
                    if fd is None:
                        return empty
                    try:
                        return self._query(fd, answer)
                    except SourceMovedError:
                        continue  # the file was replaced after it was opened: open the new one
        raise IndexBusyError(f"{self.source_path} kept being replaced while it was being read")

    def _query(self, fd: int, answer: Callable[[sqlite3.Connection, int, SourceState], T]) -> T:
        """Run ``answer`` on a snapshot in which the index matches the open file exactly."""
        force = False
        for _attempt in range(ATTEMPTS):
            try:
                conn = self._connection()
                if not force:
                    conn.execute("BEGIN")
                    try:
                        state = SourceState.load(conn, self.SOURCE_NAME)
                        if state is not None and state.is_current(fd, os.fstat(fd)):
                            return answer(conn, fd, state)
                    finally:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                self._catch_up(conn, fd, force=force)
                force = False
            except StaleRowError:
                force = True
            except SourceChangedError:
                force = False
            except DatabaseFault as exc:
                self._on_sqlite_error(exc)
        raise IndexBusyError(f"{self.source_path} kept changing while it was being indexed")

    # ------------------------------------------------------------------ writes

    def append_chain(self) -> AppendChain | None:
        """memstore's append chain for the source (:mod:`memstore.append_chain`); None where it keeps none."""
        return None


    def _catch_up(self, conn: sqlite3.Connection, fd: int, *, force: bool = False) -> RefreshReport:
        from memstore.index.report import RefreshReport

        started = time.perf_counter()
        with immediate(conn):
            st = os.fstat(fd)
            state = SourceState.load(conn, self.SOURCE_NAME)
            if state is not None and not force and (state.dev, state.ino) != (st.st_dev, st.st_ino):
                # The index already follows a newer file at the path (another handle replaced the
                # file after this descriptor was opened, and the index followed): never rebuild it
                # back to the old one.
                current = _identity_at(self.source_path)
                if current is not None and current != (st.st_dev, st.st_ino):
                    raise SourceMovedError(self.source_path)
            chain = self.append_chain()
            if state is None or force:
                change, prefix = Change.REPLACED, None
            else:
                change, prefix = state.classify(fd, st, chain=chain)
            if change is Change.NONE:
                return RefreshReport(str(self.source_path), "none", state.rows if state else 0, seconds=0.0)
            rows = self._apply_change(conn, fd, st, change, state, prefix, chain=chain)
            if SourceState.load(conn, self.SOURCE_NAME) is None:
                raise SourceChangedError(self.source_path)
        if change is Change.REPLACED:
            compact(conn)
        fold_wal(conn)
        seconds = round(time.perf_counter() - started, 6)
        action = "rebuilt" if change is Change.REPLACED else "appended"
        return RefreshReport(str(self.source_path), action, rows, seconds=seconds, catch_up_seconds=seconds)

    def _write(self, change: Callable[[sqlite3.Connection, int], bool], *, held: HeldWrite | None = None) -> bool:
        """Run a write-through ``change`` in one immediate transaction; False leaves a lazy rebuild.

        With ``held`` (from :meth:`hold_write`), in the transaction it holds when that is still
        this handle's connection's; it is released either way.
        """
        try:
            with self._mutex, self._open_source() as fd:
                if fd is None:
                    return False
                try:
                    conn = self._connection()
                    begun = held is not None and held.holds(conn)
                    with immediate(conn, begun=begun) as keep:
                        keep[0] = change(conn, fd)
                    fold_wal(conn)
                    return keep[0]
                except DatabaseFault as exc:
                    self._on_sqlite_error(exc)
                    return False
        finally:
            if held is not None:
                held.release()

    def hold_write(self) -> HeldWrite | None:
        """Take the index's write transaction now, for a change the source is about to get.

        A rewrite replaces the file before the index follows it: a reader in another process
        that looks in between finds the index behind a file that is no append of the indexed
        one, and rebuilds it from the whole file (about 20 s at 1M entries), while the
        follow-up waits for that build and gives up.  Held from before the replace, the
        transaction makes such a reader wait for the follow-up instead, and then find the
        index level.  Never waits for it: None when another connection is writing the index
        (the follow-up then runs as before).  The handle's mutex is held until
        :meth:`HeldWrite.release`.
        """
        self._mutex.acquire()
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connection()
            if conn.in_transaction:
                self._mutex.release()
                return None
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except BaseException as exc:
            # Begun already when restoring the timeout failed: never leave it open behind the mutex.
            if conn is None:
                self._mutex.release()
            else:
                HeldWrite(conn, self._mutex).release()
            if isinstance(exc, (*DatabaseFault, OSError, IndexUnavailableError)):
                return None  # busy (another writer), or unusable: the follow-up runs as before
            raise
        return HeldWrite(conn, self._mutex)

    def refresh(self, *, full: bool = False, progress: Progress | None = None, patient: bool = True) -> RefreshReport:
        """Catch up now (or rebuild with ``full``); returns what was done.

        ``patient``: wait for another process's build however long it takes (``reindex``);
        otherwise give up after the busy timeout (:class:`IndexBusyError`).
        """
        return self._refresh(full=full, progress=progress, moves=0, patient=patient)

    def _refresh(self, *, full: bool, progress: Progress | None, moves: int, patient: bool) -> RefreshReport:
        from memstore.index.report import RefreshReport

        with self._mutex, self._open_source() as fd:
            started = time.perf_counter()
            self._progress = progress
            self.file.patient = patient
            try:
                if fd is None:
                    return RefreshReport(str(self.source_path), "missing", 0, seconds=0.0)
                creating = self.file.generation() is None
                if not full and not creating:
                    rows = self._rows_if_current(fd)
                    if rows is not None:  # nothing to do: no write transaction, no wait for a writer
                        return RefreshReport(str(self.source_path), "none", rows, seconds=0.0)
                if full:
                    # A new file, built aside and swapped in: a file is never rebuilt in place.
                    self._drop_connection()
                    self.file.rebuild(self._populate)
                for _attempt in range(ATTEMPTS):
                    try:
                        conn = self._connection()
                        # A brand-new index file was just built from the file: do not build it twice.
                        report = self._catch_up(conn, fd)
                        if (creating or full) and report.action == "none":
                            report = dataclasses.replace(report, action="rebuilt" if full else "built")
                        break
                    except SourceChangedError:
                        continue
                    except SourceMovedError:
                        if moves >= ATTEMPTS:
                            raise IndexBusyError(f"{self.source_path} kept being replaced") from None
                        # on the file now at the path
                        return self._refresh(full=False, progress=progress, moves=moves + 1, patient=patient)
                    except DatabaseFault as exc:
                        self._on_sqlite_error(exc)
                else:
                    raise IndexUnavailableError(f"cannot refresh the index at {self.file.path}")
            finally:
                self._progress = None
                self.file.patient = False
            return dataclasses.replace(report, seconds=round(time.perf_counter() - started, 6))

    def _rows_if_current(self, fd: int) -> int | None:
        """The indexed rows when the index already matches the open file, read in a read transaction."""
        try:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                state = SourceState.load(conn, self.SOURCE_NAME)
                if state is not None and state.consistent() and state.is_current(fd, os.fstat(fd)):
                    return state.rows
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except (*DatabaseFault, OSError):
            pass  # the catch-up that follows meets the same fault and handles it
        return None

    def source_status(self) -> SourceStatus:
        """Entries, bytes indexed and bytes behind for ``memstore status``."""
        from memstore.index.report import SourceStatus

        with self._mutex, self._open_source() as fd:
            size = os.fstat(fd).st_size if fd is not None else 0
            index_bytes = self.file.size_bytes()

            def status(state: str, entries: int, indexed: int, behind: int, corrupt: int | None = None) -> SourceStatus:
                source, index_path = str(self.source_path), str(self.file.path)
                return SourceStatus(source, size, index_path, index_bytes, state, entries, indexed, behind, corrupt)

            if fd is None:
                return status("missing", 0, 0, 0)
            state: SourceState | None = None
            if self.file.generation() is not None:
                try:
                    state = SourceState.load(self._connection(), self.SOURCE_NAME)
                except DatabaseFault as exc:
                    self._on_sqlite_error(exc)
            if state is None:
                return status("not indexed", 0, 0, size)
            indexed = state.tail_end if state.tail_end is not None else state.indexed_to
            fresh = state.is_current(fd, os.fstat(fd))
            behind = 0 if fresh else max(0, size - indexed)
            return status("fresh" if fresh else "behind", state.rows, indexed, behind, corrupt=state.corrupt)
