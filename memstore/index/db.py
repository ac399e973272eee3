"""Opening the index file: fast when it is current, self-healing when it is not.

The warm path is one ``sqlite3.connect``, a ``PRAGMA user_version`` read and the
checks of :mod:`memstore.index.trust` (exact schema, built here).  A missing index is
built in a temp file under ``build.lock`` (its schema replayed from ``schema_sql.py``)
and renamed into place; an older schema
this machine built is migrated with Alembic; a newer, corrupt, unreadable, foreign
or linked one is set aside for inspection and a new file is built (never in place).
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import errno
import fcntl
import io
import os
import sqlite3
import stat
import sys
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from memstore.errors import IndexMigrationPendingError, IndexUnavailableError, LockError, MemstoreError
from memstore.files import DEFAULT_FILE_MODE, PRIVATE_FILE_MODE, FileLock, ensure_dir, fsync_dir
from memstore.index import fork_state
from memstore.index.schema_sql import CREATE_STATEMENTS
from memstore.index.settings import BUSY_TIMEOUT_MS, SCHEMA_REVISION, SCHEMA_VERSION
from memstore.index.trust import Generation, old_schema_problem, origin_problem, record_origin, schema_problem
from memstore.logger import LazyLogger

log = LazyLogger(__name__)

INDEX_DIRNAME = "index"
INDEX_FILENAME = "memstore.sqlite3"
CACHE_KIB = 64 * 1024
"""SQLite's page cache per connection once it is reused (see :func:`grow_cache`)."""
FIRST_CACHE_KIB = 2000
"""The cache of a connection's first read: SQLite's own default (about 2 MiB).

A large cache makes that read slower, not faster: every page it reads lands in memory the
process has never touched, and each 4 KiB costs a page fault (1M entries, 'memory python',
5,217 rows scored: 5,600 page faults against 2,200; the first search 46-72 ms against 32-52 ms).
A small cache recycles the same few buffers.  A handle that searches again keeps hot pages
only with the large cache, so it grows after the first read.
"""
KEEP_DAMAGED = 3
OPEN_ATTEMPTS = 4
SIDECARS = ("-wal", "-shm", "-journal")
LOGS = ("-wal", "-journal")
"""Sidecars SQLite replays into the file when the first connection opens it."""
OPEN_LOCK = "open.lock"
"""Held shared by every memstore connection to the index: taken exclusively, it proves none is open."""

Populate = Callable[[sqlite3.Connection], None]


class IndexBusyError(IndexUnavailableError):
    """Another process holds the index for longer than the busy timeout (e.g. a big rebuild)."""


def is_busy(exc: Exception) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


DatabaseFault = (sqlite3.Error, UnicodeDecodeError)
"""What a damaged database file can raise: SQLite errors, and messages or text that are not UTF-8."""

BUILD_FAULTS = (OSError, sqlite3.Error, ValueError, MemstoreError)
"""What opening or building an index can raise besides IndexUnavailableError (the folder removed
meanwhile, a full disk, a damaged file, a source that changed): all mean "answer from a scan"."""

CORRUPTION_MARKERS = ("malformed", "not a database", "corrupt", "no such table", "no such column", "no such index")


def is_corruption(exc: Exception) -> bool:
    """Errors that mean the index file itself is bad, as opposed to busy, full, or a query SQLite refused."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    message = str(exc).lower()
    return any(marker in message for marker in CORRUPTION_MARKERS)


def configure(conn: sqlite3.Connection) -> None:
    # The file is input: its schema may not run SQL functions with side effects.
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = NORMAL")
    # Small until the connection is used again: see FIRST_CACHE_KIB and grow_cache().
    conn.execute(f"PRAGMA cache_size = -{FIRST_CACHE_KIB}")


def grow_cache(conn: sqlite3.Connection) -> None:
    """Give ``conn`` its full page cache (CACHE_KIB), once: before a write, or a second read.

    Scoring reads rows scattered over the file, so a long-lived handle keeps the hot ones;
    a write gets the full cache from its first statement so a large catch-up never spills.
    Pages already cached stay; only the bound moves.  Answers never depend on it.
    """
    if not isinstance(conn, LockedConnection) or conn.cache_grown:
        return  # grown already, or not a connection configure() set up
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.cache_grown = True


def _create_schema(conn: sqlite3.Connection) -> None:
    """Give an empty database the newest schema, stamped as the migrations stamp it.

    Replays the DDL the migrations leave (``schema_sql.py``, which a test keeps equal to
    them) instead of running Alembic: a build's first half-second went to importing
    SQLAlchemy and Alembic.  The result is the very reference ``schema_problem`` compares
    every index with, and it is checked against it before any row goes in.
    """
    conn.execute("BEGIN")
    for statement in CREATE_STATEMENTS:
        conn.execute(statement)
    conn.execute("INSERT INTO alembic_version(version_num) VALUES (?)", (SCHEMA_REVISION,))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute("COMMIT")


def _identity(st: os.stat_result) -> Generation:
    return (st.st_dev, st.st_ino)


def _log_state(path: Path) -> tuple[int, int, int] | None:
    """The write-ahead log's identity, size and mtime (pages it holds are read too); None when it is
    missing or empty, as a reader's own open leaves it (created, then removed by the last close).
    Not its ctime: SQLite running as root gives the log its database's owner on every open."""
    try:
        st = os.lstat(f"{path}-wal")
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if st.st_size else None


class LockedConnection(sqlite3.Connection):
    """A connection that holds ``open.lock`` shared for as long as it lives (closed or collected)."""

    open_lock: io.FileIO | None = None
    owner_pid: int = 0
    cache_grown: bool = False
    """Whether :func:`grow_cache` has run on this connection."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.open_lock is not None:
                self.open_lock.close()


_LIVE: weakref.WeakSet[LockedConnection] = weakref.WeakSet()
_EXIT_HOOK_PID = 0


def _close_live_connections() -> None:
    """Close this process's index connections at its exit, so SQLite folds their log back.

    A log left beside an index that no connection holds is treated as planted and costs
    a rebuild; a process that ends without closing (a multiprocessing child ends with
    ``os._exit``) would leave one.  Connections inherited across fork are never touched.
    """
    for conn in list(_LIVE):
        if conn.owner_pid == os.getpid():
            with contextlib.suppress(Exception):
                conn.close()


def _track(conn: LockedConnection) -> None:
    global _EXIT_HOOK_PID
    conn.owner_pid = os.getpid()
    _LIVE.add(conn)
    if conn.owner_pid != _EXIT_HOOK_PID:
        _EXIT_HOOK_PID = conn.owner_pid
        atexit.register(_close_live_connections)
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:  # a multiprocessing child runs these finalizers, not atexit
            mp_util.Finalize(None, _close_live_connections, exitpriority=0)


class _Verdict(enum.Enum):
    MIGRATE = "migrate"


class IndexFile:
    """The index database beside the canonical files of one directory.

    Nothing in the index folder is trusted: links are never followed, and a file is
    used only when it passes :mod:`memstore.index.trust`; anything else is set aside
    and a new file is built and renamed into place (never rebuilt in place).
    """

    def __init__(self, store_dir: Path, *, readonly: bool = False, private: bool = False) -> None:
        self.directory = store_dir / INDEX_DIRNAME
        self.path = self.directory / INDEX_FILENAME
        self.readonly = readonly
        self.private = private
        self.patient = False
        """Whether building waits for another process's build however long it takes (``reindex``)."""
        self._mode = PRIVATE_FILE_MODE if private else DEFAULT_FILE_MODE
        self._sound_old: tuple[object, ...] | None = None
        """The state of an older file whose ``quick_check`` passed (see :meth:`_old_file_problem`)."""

    # ------------------------------------------------------------------ opening

    def connect(self, *, populate: Populate | None = None) -> tuple[sqlite3.Connection, Generation]:
        """A configured connection to a verified, current index, and the generation it has open.

        Every failure to open, verify or build becomes :class:`IndexUnavailableError`
        (the caller answers from a scan).
        """
        try:
            return self._connect(populate)
        except IndexUnavailableError:
            raise
        except BUILD_FAULTS as exc:
            raise IndexUnavailableError(f"cannot open the index at {self.path}: {exc}") from exc

    def _connect(self, populate: Populate | None) -> tuple[sqlite3.Connection, Generation]:
        for _attempt in range(OPEN_ATTEMPTS):
            self._check_directory()
            st = self._lstat(self.path)
            if st is None:
                self._create(populate)
                continue
            if not stat.S_ISREG(st.st_mode):
                self.set_aside("not a regular file (a symlink is never followed)", expected=_identity(st))
                continue
            if not fork_state.may_open(_identity(st)):
                raise IndexBusyError(
                    f"the index at {self.path} was in use by the process this one was forked from; "
                    "its locks cannot be told from this process's (answering from a scan)"
                )
            self._drop_linked_sidecars()
            held, leftover = self._hold_open_lock()
            if leftover is not None:
                held.close()
                self.set_aside(f"{leftover} that no open connection wrote (a crash left it, or it was planted)",
                               expected=_identity(st))
                continue
            try:
                conn = sqlite3.connect(
                    f"file:{urllib.parse.quote(str(self.path))}?mode=rw",
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    factory=LockedConnection,
                )
            except BaseException as exc:
                held.close()
                if not isinstance(exc, DatabaseFault):
                    raise
                if self._lstat(self.path) is None:
                    continue  # removed meanwhile: build it
                self.set_aside(f"cannot open: {exc}", expected=_identity(st))
                continue
            conn.open_lock = held
            _track(conn)
            try:
                configure(conn)
                verdict = self._verify(conn, st)
            except DatabaseFault as exc:
                conn.close()
                if is_busy(exc):
                    raise IndexBusyError(f"index busy: {exc}") from exc
                self.set_aside(f"unreadable: {exc}", expected=_identity(st))
                continue
            after = self._lstat(self.path)
            if after is None or _identity(after) != _identity(st):
                conn.close()  # another process swapped a file in while this one was read: look again
                continue
            if verdict is None:
                fork_state.track(conn, _identity(st))
                return conn, _identity(st)
            conn.close()
            if verdict is _Verdict.MIGRATE:
                self._migrate(_identity(st))
            else:
                self.set_aside(verdict, expected=_identity(st))
        raise IndexUnavailableError(f"cannot open or rebuild the index at {self.path}")

    def _verify(self, conn: sqlite3.Connection, st: os.stat_result) -> str | _Verdict | None:
        """None when the file may be used; else what to do with it (migrate, or why it is set aside)."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return schema_problem(conn) or origin_problem(conn, st)
        if 0 < version < SCHEMA_VERSION:
            # Only a sound file this machine built, holding what its version's migrations left,
            # is worth migrating; anything else is rebuilt.
            problem = old_schema_problem(conn, version) or origin_problem(conn, st)
            return problem or self._old_file_problem(conn, st) or _Verdict.MIGRATE
        return f"schema version {version}, expected {SCHEMA_VERSION}"

    def _old_file_problem(self, conn: sqlite3.Connection, st: os.stat_result) -> str | None:
        """SQLite's ``quick_check`` of an older file, before it is migrated or called 'old schema'.

        A migration reads only the tables it rebuilds: a file cut short elsewhere migrated
        and stayed damaged, and a read-only handle (which never writes, so never migrates)
        called such a file healthy.  Every page is read instead (0.6 s at 1M entries, warm;
        a migration takes about 7 s), once per state of the file and its log: the answer
        is kept while neither changes.
        """
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, _log_state(self.path))
        if self._sound_old == key:
            return None
        found = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if found != ["ok"]:
            return f"damaged: {'; '.join(str(line) for line in found)[:500]}"
        self._sound_old = key
        return None

    def _hold_open_lock(self) -> tuple[io.FileIO, str | None]:
        """``open.lock`` held shared for the connection about to open; and a log nobody open wrote.

        A -wal or -journal is replayed by SQLite into whatever file it sits beside, before
        any check can look at the file.  While a memstore connection is open its log is its
        own; when none is (the lock is free to take exclusively), a log is either what a
        killed process left or something planted: the file is then set aside, never replayed.
        """
        lock = self.directory / OPEN_LOCK
        st = self._lstat(lock)
        if st is not None and not stat.S_ISREG(st.st_mode):
            if self.readonly:
                raise IndexUnavailableError(f"readonly catalog: {lock} is not a regular file")
            log.warning("removing %s: not a regular file (a lock is never taken through a link)", lock)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        # Created even by a readonly catalog: like SQLite's own -shm, it is part of an open index.
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, self._mode)
        held = io.FileIO(fd, "r", closefd=True)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            else:
                for suffix in LOGS:
                    log_st = self._lstat(Path(f"{self.path}{suffix}"))
                    if log_st is not None and log_st.st_size > 0:
                        return held, f"a {suffix} log"
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            held.close()
            raise
        return held, None

    def generation(self) -> Generation | None:
        """(dev, ino) of the regular file now at the index path; None when there is none."""
        st = self._lstat(self.path)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        return _identity(st)

    @staticmethod
    def _lstat(path: Path) -> os.stat_result | None:
        try:
            return os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _check_directory(self) -> None:
        """The index folder must be a real directory: a link (e.g. committed) is never followed."""
        st = self._lstat(self.directory)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            # Callers log this with a warning when they answer from a scan instead.
            raise IndexUnavailableError(f"the index folder {self.directory} is {kind}; it is not followed")

    def _drop_linked_sidecars(self) -> None:
        """SQLite opens -wal, -shm and -journal itself, following links and writing into them:
        remove any that is not a file of its own (a symbolic link, or hard-linked elsewhere)."""
        for suffix in SIDECARS:
            path = Path(f"{self.path}{suffix}")
            st = self._lstat(path)
            if st is None or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                continue
            if self.readonly:
                raise IndexUnavailableError(f"readonly catalog: {path} is not a regular file")
            log.warning("removing %s: not a regular file (SQLite would follow it)", path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise IndexUnavailableError(f"{path} is not a regular file and cannot be removed: {exc}") from exc

    # ------------------------------------------------------------------ building

    @contextlib.contextmanager
    def _building(self, *, replacing: bool) -> Iterator[None]:
        """Hold build.lock.  A query that finds no index (or one to set aside or migrate) does
        not wait out another process's build (a minute at 1M entries), nor a stuck holder of
        this untrusted lock file: it answers from a scan instead.  ``reindex`` (patient) and a
        rebuild asked for wait."""
        lock = self._build_lock()
        try:
            lock.acquire(wait=None if self.patient or replacing else BUSY_TIMEOUT_MS / 1000)
        except LockError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise IndexBusyError(f"another process is building the index at {self.path}") from exc
            raise
        try:
            yield
        finally:
            lock.release()

    def _build_lock(self) -> FileLock:
        lock = self.directory / "build.lock"
        st = self._lstat(lock)
        if st is not None and not stat.S_ISREG(st.st_mode):
            log.warning("removing %s: not a regular file (a lock is never taken through a link)", lock)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        return FileLock(lock, mode=self._mode)

    def _ensure_directory(self) -> None:
        if self.readonly and self._lstat(self.directory) is None:
            raise IndexUnavailableError("readonly catalog: the index does not exist and is not created")
        if self._lstat(self.directory) is None:
            ensure_dir(self.directory, private=self.private)
            self._check_directory()
            ignore = self.directory / ".gitignore"
            with contextlib.suppress(FileExistsError):
                fd = os.open(
                    ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, DEFAULT_FILE_MODE
                )
                try:
                    os.write(fd, b"# memstore's derived index: rebuilt from the canonical files\n*\n")
                finally:
                    os.close(fd)
        self._check_directory()

    def _create(self, populate: Populate | None) -> None:
        """Build a fresh index in a temp file and rename it into place (under build.lock)."""
        self._build(populate, replace=None)

    def rebuild(self, populate: Populate | None) -> None:
        """Build a new file and swap it in atomically (``reindex --full``): never rebuilt in place.

        Handles holding the old file notice the new generation on their next query.
        """
        if self.readonly:
            raise IndexUnavailableError("readonly catalog: the index is not rebuilt")
        self._build(populate, replace=self.generation())

    def _build(self, populate: Populate | None, *, replace: Generation | None) -> None:
        try:
            self._ensure_directory()
            with self._building(replacing=replace is not None):
                current = self._lstat(self.path)
                if current is not None and (replace is None or _identity(current) != replace):
                    return  # another process built (or swapped in) a file meanwhile
                # Builds cut short by a killed process; none can be running while we hold the lock.
                for leftover in self.directory.glob(f"{INDEX_FILENAME}.build-*"):
                    with contextlib.suppress(OSError):
                        leftover.unlink()
                tmp = self.path.with_name(f"{INDEX_FILENAME}.build-{os.getpid()}-{os.urandom(4).hex()}")
                try:
                    self._build_into(tmp, populate)
                    if current is not None:
                        # New openers find no file (and wait for this lock) until the new one is in place.
                        os.unlink(self.path)
                    for suffix in SIDECARS:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(f"{self.path}{suffix}")
                    os.replace(tmp, self.path)
                    fsync_dir(self.directory)
                finally:
                    for leftover in (tmp, Path(f"{tmp}-journal")):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(leftover)
        except IndexUnavailableError:
            raise
        except BUILD_FAULTS as exc:
            raise IndexUnavailableError(f"cannot build the index at {self.path}: {exc}") from exc

    def _build_into(self, tmp: Path, populate: Populate | None) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, self._mode)
        os.close(fd)
        with fork_state.building(_identity(os.lstat(tmp))):
            self._populate_into(tmp, populate)
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _populate_into(tmp: Path, populate: Populate | None) -> None:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA trusted_schema = OFF")
            _create_schema(conn)
            conn.execute("PRAGMA journal_mode = OFF")
            conn.execute("PRAGMA synchronous = OFF")
            record_origin(conn, os.stat(tmp))
            problem = schema_problem(conn)
            if problem is not None:  # schema_sql.py fell behind the migrations: a bug, never a wrong answer
                log.error("a freshly built index fails verification (%s); answering from the files", problem)
                raise IndexUnavailableError(f"freshly built index fails verification: {problem}")
            if populate is not None:
                populate(conn)
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()

    def _migrate(self, expected: Generation) -> None:
        if self.readonly:
            raise IndexMigrationPendingError("readonly catalog: the index schema is old and is not migrated")
        from memstore.index.migrate import upgrade_to_head

        with self._building(replacing=False):
            if self.generation() != expected:
                return
            try:
                upgrade_to_head(self.path)
            except Exception as exc:  # a failed migration of a derived index: rebuild instead
                log.warning("index migration failed (%s); rebuilding %s", exc, self.path)
                self._set_aside_locked(f"migration failed: {exc}", expected)

    # ------------------------------------------------------------------ setting aside

    def set_aside(self, reason: str, *, expected: Generation | None = None) -> None:
        """Move an unusable index out of the way (kept for inspection) so the next open builds a new one.

        With ``expected``, only that very file is moved: one another process swapped in meanwhile stays.
        """
        if self.readonly:
            raise IndexUnavailableError(f"readonly catalog: the index is unusable ({reason})")
        try:
            with self._building(replacing=False):
                self._set_aside_locked(reason, expected)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot set aside the damaged index {self.path}: {exc}") from exc

    def _set_aside_locked(self, reason: str, expected: Generation | None = None) -> None:
        current = self._lstat(self.path)
        if current is None or (expected is not None and _identity(current) != expected):
            return
        log.warning("memstore index %s is unusable (%s); building a new one from the files", self.path, reason)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        damaged = self.path.with_name(f"{INDEX_FILENAME}.damaged-{stamp}-{os.urandom(2).hex()}")
        os.replace(self.path, damaged)
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{self.path}{suffix}", f"{damaged}{suffix}")
        damaged_files = sorted(
            p for p in self.directory.glob(f"{INDEX_FILENAME}.damaged-*") if not p.name.endswith(SIDECARS)
        )
        for old in damaged_files[:-KEEP_DAMAGED]:
            for suffix in ("", *SIDECARS):
                with contextlib.suppress(OSError):
                    os.unlink(f"{old}{suffix}")

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                total += os.lstat(f"{self.path}{suffix}").st_size
        return total
