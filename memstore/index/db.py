"""Opening the index file: fast when it is current, self-healing when it is not.

The warm path is one ``sqlite3.connect`` and a ``PRAGMA user_version`` read.  A
missing index is built in a temp file under ``build.lock`` and renamed into place
(no other process can have it open yet); an older schema is migrated with Alembic;
a newer, corrupt or unreadable one is set aside for inspection and rebuilt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from memstore.errors import IndexUnavailableError
from memstore.files import DEFAULT_FILE_MODE, PRIVATE_FILE_MODE, FileLock, ensure_dir, fsync_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SCHEMA_REVISION = "0001"
INDEX_DIRNAME = "index"
INDEX_FILENAME = "memstore.sqlite3"
BUSY_TIMEOUT_MS = 10_000
KEEP_DAMAGED = 3

Populate = Callable[[sqlite3.Connection], None]


class IndexBusyError(IndexUnavailableError):
    """Another process holds the index for longer than the busy timeout (e.g. a big rebuild)."""


class IndexCorruptError(IndexUnavailableError):
    """The index file is damaged; it will be set aside and rebuilt."""


def is_busy(exc: Exception) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


DatabaseFault = (sqlite3.Error, UnicodeDecodeError)
"""What a damaged database file can raise: SQLite errors, and messages or text that are not UTF-8."""

CORRUPTION_MARKERS = ("malformed", "not a database", "corrupt", "no such table", "no such column", "no such index")


def is_corruption(exc: Exception) -> bool:
    """Errors that mean the index file itself is bad, as opposed to busy, full, or a query SQLite refused."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    message = str(exc).lower()
    return any(marker in message for marker in CORRUPTION_MARKERS)


def configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = NORMAL")


class IndexFile:
    """The index database beside the canonical files of one directory."""

    def __init__(self, store_dir: Path, *, readonly: bool = False, private: bool = False) -> None:
        self.directory = store_dir / INDEX_DIRNAME
        self.path = self.directory / INDEX_FILENAME
        self.readonly = readonly
        self.private = private
        self._mode = PRIVATE_FILE_MODE if private else DEFAULT_FILE_MODE

    def connect(self, *, populate: Populate | None = None) -> sqlite3.Connection:
        """A configured connection to a current index, creating or repairing it when needed."""
        for _attempt in range(3):
            if not self.path.exists():
                self._create(populate)
                continue
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            except DatabaseFault as exc:
                self.set_aside(f"cannot open: {exc}")
                continue
            try:
                configure(conn)
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            except DatabaseFault as exc:
                conn.close()
                if is_busy(exc):
                    raise IndexBusyError(f"index busy: {exc}") from exc
                self.set_aside(f"unreadable: {exc}")
                continue
            if version == SCHEMA_VERSION:
                return conn
            conn.close()
            if 0 < version < SCHEMA_VERSION:
                self._migrate()
            else:
                self.set_aside(f"schema version {version}, expected {SCHEMA_VERSION}")
        raise IndexUnavailableError(f"cannot open or rebuild the index at {self.path}")

    def _build_lock(self) -> FileLock:
        return FileLock(self.directory / "build.lock", mode=self._mode)

    def _ensure_directory(self) -> None:
        if self.readonly and not self.directory.is_dir():
            raise IndexUnavailableError("readonly catalog: the index does not exist and is not created")
        if not self.directory.is_dir():
            ensure_dir(self.directory, private=self.private)
            ignore = self.directory / ".gitignore"
            with contextlib.suppress(FileExistsError):
                fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, DEFAULT_FILE_MODE)
                try:
                    os.write(fd, b"# memstore's derived index: rebuilt from the canonical files\n*\n")
                finally:
                    os.close(fd)

    def _create(self, populate: Populate | None) -> None:
        """Build a fresh index in a temp file and rename it into place (under build.lock)."""
        try:
            self._ensure_directory()
            with self._build_lock():
                if self.path.exists():
                    return
                # Builds cut short by a killed process; none can be running while we hold the lock.
                for leftover in self.directory.glob(f"{INDEX_FILENAME}.build-*"):
                    with contextlib.suppress(OSError):
                        leftover.unlink()
                tmp = self.path.with_name(f"{INDEX_FILENAME}.build-{os.getpid()}-{os.urandom(4).hex()}")
                try:
                    self._build_into(tmp, populate)
                    for suffix in ("-wal", "-shm", "-journal"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(f"{self.path}{suffix}")
                    os.replace(tmp, self.path)
                    fsync_dir(self.directory)
                finally:
                    for leftover in (tmp, Path(f"{tmp}-journal")):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(leftover)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot create the index at {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise IndexUnavailableError(f"cannot build the index at {self.path}: {exc}") from exc

    def _build_into(self, tmp: Path, populate: Populate | None) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self._mode)
        os.close(fd)
        from memstore.index.migrate import upgrade_to_head

        upgrade_to_head(tmp)
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = OFF")
            conn.execute("PRAGMA synchronous = OFF")
            if populate is not None:
                populate(conn)
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _migrate(self) -> None:
        if self.readonly:
            raise IndexUnavailableError("readonly catalog: the index schema is old and is not migrated")
        from memstore.index.migrate import upgrade_to_head

        with self._build_lock():
            try:
                upgrade_to_head(self.path)
            except Exception as exc:  # a failed migration of a derived index: rebuild instead
                log.warning("index migration failed (%s); rebuilding %s", exc, self.path)
                self._set_aside_locked(f"migration failed: {exc}")

    def set_aside(self, reason: str) -> None:
        """Move a damaged index out of the way (kept for inspection) so the next open rebuilds it."""
        if self.readonly:
            raise IndexUnavailableError(f"readonly catalog: the index is damaged ({reason})")
        try:
            with self._build_lock():
                self._set_aside_locked(reason)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot set aside the damaged index {self.path}: {exc}") from exc

    def _set_aside_locked(self, reason: str) -> None:
        if not self.path.exists():
            return
        log.warning("memstore index %s is unusable (%s); rebuilding it from the files", self.path, reason)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        damaged = self.path.with_name(f"{INDEX_FILENAME}.damaged-{stamp}-{os.urandom(2).hex()}")
        os.replace(self.path, damaged)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{self.path}{suffix}", f"{damaged}{suffix}")
        damaged_files = sorted(
            p for p in self.directory.glob(f"{INDEX_FILENAME}.damaged-*") if not p.name.endswith(("-wal", "-shm"))
        )
        for old in damaged_files[:-KEEP_DAMAGED]:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{old}{suffix}")

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total
