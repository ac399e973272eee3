"""Group commit: one fsync makes durable every append that was queued behind it.

An append is written under the file group's writer lock (``memory.lock``), which is
then released; the writer makes its bytes durable under a second lock, the file's
*sync lock* (``memory.sync.lock`` beside ``memory.jsonl``; never replaced or
deleted).  The sync lock file also holds a small shared record about the file's
inode (see :mod:`memstore.sync_record`): how long the file was when a successful
fsync began ("durable up to"), the bytes an fsync failed for ("lost"), the bytes
whose fate a leader killed mid-fsync took with it ("unsure"), and the fsync in flight.

Under the sync lock a writer whose bytes end at or before "durable up to" returns
without an fsync of its own.  Otherwise it leads: it notes the file's size, announces
the fsync, makes it, and records the result, which covers every append that had
completed when it looked.  Why that is safe:

* Offsets only mean something while the file only grows.  Rewrites replace it
  (a new inode, so the record no longer applies); memstore's own truncations (a torn
  tail set aside, a failed write cut back) happen under the sync lock and lower the
  record; before every append the writer checks, under the writer lock, that no
  recorded offset lies past the end of the file, which catches truncations by others
  and a recycled inode number, and lowers the record first.  So a recorded offset at
  or past the end of an append was taken after the append completed.
* A failed fsync is never retried and never trusted again for what it covered.  Linux
  may report a writeback error once, to one caller, and mark the pages clean, so a
  later fsync succeeds without the bytes.  The leader that sees the error marks every
  byte the file held as lost; any writer whose bytes overlap that range fails, even
  after a later fsync succeeds.
* A leader killed during its fsync may have taken an error with it.  Its announcement
  stays in the record; the next holder of the sync lock turns it into an "unsure"
  range: the writers whose bytes lie there fsync their own descriptor, opened before
  their write, to which the kernel reports any error on those pages since then.
  Nobody waits on a dead leader: flock locks go with the process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from memstore.errors import LockError, StorageError
from memstore.files import (
    DEFAULT_FILE_MODE,
    fsync_dir,
    keep_torn_tail,
    open_for_append,
    open_regular,
    storage_error,
    torn_tail_start,
    write_all,
)
from memstore.sync_record import NEVER, SyncRecord, Verdict

log = logging.getLogger(__name__)

SYNC_LOCK_SUFFIX = ".sync.lock"


def sync_lock_path(path: Path) -> Path:
    """``memory.jsonl`` → ``memory.sync.lock``: ignored by the store's ``*.lock`` rule."""
    return path.with_name(path.stem + SYNC_LOCK_SUFFIX)


class GroupCommit:
    """Appends to one file, made durable by fsyncs shared between writers and processes."""

    def __init__(self, path: Path, *, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = Path(path)
        self.sync_path = sync_lock_path(self.path)
        self._mode = mode

    # ------------------------------------------------------------- under the writer lock

    def append(self, data: bytes, *, is_whole: Callable[[bytes], bool] | None = None) -> PendingAppend:
        """Write whole lines at the end of the file; the caller holds the writer lock.

        Returns before the bytes are durable: release the writer lock, then call
        :meth:`PendingAppend.commit`.  A last line without a newline gets one first;
        when ``is_whole`` rejects it (a write cut short), it is set aside instead.
        A file this call creates is made durable, with its directory, before it returns,
        since later appends by others depend on its name.
        """
        sync_fd = self._open_sync()
        fd = -1
        try:
            try:
                fd, created = open_for_append(self.path, self._mode)
                st = os.fstat(fd)
            except StorageError:
                raise
            except OSError as exc:
                raise storage_error("open", self.path, exc) from exc
            size = st.st_size
            if size and is_whole is not None:
                size, _aside = self._set_aside_torn_tail(sync_fd, fd, st, is_whole)
            try:
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data
            except OSError as exc:
                raise storage_error("read the last line of", self.path, exc) from exc
            self._check_record(sync_fd, fd, st, size)
            try:
                write_all(fd, data)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self._truncate(sync_fd, fd, st, size)
                raise storage_error("append to", self.path, exc) from exc
            pending = PendingAppend(self, fd, sync_fd, st.st_dev, st.st_ino, size, size + len(data))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            os.close(sync_fd)
            raise
        if created:
            with pending:
                pending.commit()
                try:
                    fsync_dir(self.path.parent)
                except OSError as exc:
                    raise storage_error("fsync directory of", self.path, exc) from exc
        return pending

    def cut_torn_tail(self, *, is_whole: Callable[[bytes], bool]) -> Path | None:
        """Set aside an unterminated last line ``is_whole`` rejects; the caller holds the writer lock.

        Returns where the fragment was copied, or None when there was none.
        """
        sync_fd = self._open_sync()
        try:
            try:
                fd = open_regular(self.path, os.O_RDWR)
            except FileNotFoundError:
                return None
            except StorageError:
                raise
            except OSError as exc:
                raise storage_error("open", self.path, exc) from exc
            try:
                st = os.fstat(fd)
                return self._set_aside_torn_tail(sync_fd, fd, st, is_whole)[1]
            except StorageError:
                raise
            except OSError as exc:
                raise storage_error("read the last line of", self.path, exc) from exc
            finally:
                os.close(fd)
        finally:
            os.close(sync_fd)

    def _set_aside_torn_tail(
        self, sync_fd: int, fd: int, st: os.stat_result, is_whole: Callable[[bytes], bool]
    ) -> tuple[int, Path | None]:
        """Copy a torn last line aside and cut it off; returns the size afterwards and the copy."""
        try:
            start = torn_tail_start(fd, st.st_size, is_whole=is_whole)
        except OSError as exc:
            raise storage_error("read the last line of", self.path, exc) from exc
        if start is None:
            return st.st_size, None
        aside = keep_torn_tail(self.path, fd, start, st.st_size)
        try:
            self._truncate(sync_fd, fd, st, start)
        except OSError as exc:
            raise storage_error("truncate the torn last line of", self.path, exc) from exc
        log.warning("set aside a torn last line of %s in %s", self.path, aside)
        return start, aside

    def _check_record(self, sync_fd: int, fd: int, st: os.stat_result, size: int) -> None:
        """Lower any recorded offset past the end of the file before appending at ``size``.

        Read without the sync lock: leaders only ever record offsets the file already
        had, so a record that looks stale (or torn, or foreign) is re-read under it.
        """
        record = SyncRecord.read(sync_fd)
        if record is not None and not record.reaches_past(st.st_dev, st.st_ino, size):
            return
        with _Locked(sync_fd, self.sync_path):
            record = SyncRecord.read(sync_fd) or SyncRecord()
            self._settle_dead_leader(record, fd, st.st_dev, st.st_ino)
            record.clamp(st.st_dev, st.st_ino, size)
            try:
                record.write(sync_fd)
            except OSError as exc:  # left high, the record could vouch for these bytes: do not append
                raise storage_error("update the sync record", self.sync_path, exc) from exc

    def _truncate(self, sync_fd: int, fd: int, st: os.stat_result, size: int) -> None:
        """Cut the file back to ``size`` under the sync lock, lowering the record with it.

        Under the lock no leader is between looking at the size and recording it, so no
        fsync that saw the cut bytes can later claim the offsets new lines will take.
        """
        with _Locked(sync_fd, self.sync_path):
            record = SyncRecord.read(sync_fd) or SyncRecord()
            self._settle_dead_leader(record, fd, st.st_dev, st.st_ino)
            try:
                os.ftruncate(fd, size)
            finally:
                record.clamp(st.st_dev, st.st_ino, size)
                with contextlib.suppress(OSError):
                    record.write(sync_fd)

    # ------------------------------------------------------------- after the writer lock

    def _make_durable(self, pending: PendingAppend) -> None:
        with _Locked(pending.sync_fd, self.sync_path):
            record = SyncRecord.read(pending.sync_fd) or SyncRecord()
            settled = self._settle_dead_leader(record, pending.fd, pending.dev, pending.ino)
            verdict = record.verdict(pending.dev, pending.ino, pending.start, pending.end)
            if verdict is Verdict.LOST:
                if settled:
                    with contextlib.suppress(OSError):
                        record.write(pending.sync_fd)
                raise storage_error(
                    "fsync", self.path, OSError(errno.EIO, "an fsync covering this append failed: it may be lost")
                )
            if verdict is Verdict.COVERED:
                if settled:
                    with contextlib.suppress(OSError):
                        record.write(pending.sync_fd)
                return
            self._lead(pending, record)

    def _lead(self, pending: PendingAppend, record: SyncRecord) -> None:
        """fsync this writer's descriptor on behalf of every append completed before it looked."""
        fd, sync_fd = pending.fd, pending.sync_fd
        try:
            synced_to = os.fstat(fd).st_size
        except OSError as exc:
            raise storage_error("stat", self.path, exc) from exc
        record.syncing = (pending.dev, pending.ino, synced_to)
        try:
            record.write(sync_fd)
            announced = True
        except OSError:
            announced = False  # make the fsync, but claim nothing for others
        try:
            os.fsync(fd)
        except OSError as exc:
            try:
                held = os.fstat(fd).st_size
            except OSError:
                held = NEVER
            record.syncing = None
            record.mark_lost(pending.dev, pending.ino, held)
            with contextlib.suppress(OSError):
                record.write(sync_fd)
            raise storage_error("fsync", self.path, exc) from exc
        if announced:
            record.syncing = None
            record.mark_durable(pending.dev, pending.ino, synced_to)
            with contextlib.suppress(OSError):
                record.write(sync_fd)  # unwritten, the announcement stays: others just fsync themselves

    @staticmethod
    def _settle_dead_leader(record: SyncRecord, fd: int, dev: int, ino: int) -> bool:
        """Turn an fsync announced by a holder that is gone into an "unsure" range. Sync lock held.

        Whoever holds the lock finds only announcements of dead (or interrupted) leaders.
        The range runs to the file's current size when ``fd`` is that file, else to the end.
        """
        if record.syncing is None:
            return False
        dead_dev, dead_ino, _size = record.syncing
        held = NEVER
        if (dead_dev, dead_ino) == (dev, ino):
            with contextlib.suppress(OSError):
                held = os.fstat(fd).st_size
        record.syncing = None
        record.mark_unsure(dead_dev, dead_ino, held)
        return True

    def _open_sync(self) -> int:
        try:
            # Never through a link: a lock file is untrusted and may point out of the store.
            return os.open(self.sync_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, self._mode)
        except OSError as exc:
            raise LockError(exc.errno or errno.EIO, f"cannot open lock {self.sync_path}: {exc.strerror}") from exc


class PendingAppend:
    """Bytes ``[start, end)`` appended through their own descriptor, not yet known to be durable.

    The descriptor stays open until :meth:`commit`: the kernel reports a writeback
    error to every descriptor that was open when it happened, so this one hears of
    any error on these bytes even when another process's fsync saw it first.
    """

    def __init__(self, group: GroupCommit, fd: int, sync_fd: int, dev: int, ino: int, start: int, end: int) -> None:
        self.group = group
        self.fd = fd
        self.sync_fd = sync_fd
        self.dev = dev
        self.ino = ino
        self.start = start
        self.end = end
        self._durable = False

    def commit(self) -> None:
        """Return once these bytes are durable (a StorageError if they may not be), then close."""
        if self._durable:
            self.close()
            return
        if self.fd < 0:
            raise storage_error(
                "fsync", self.group.path, OSError(errno.EBADF, "the append was closed before it was durable")
            )
        try:
            self.group._make_durable(self)
            self._durable = True
        finally:
            self.close()

    def close(self) -> None:
        for fd in (self.fd, self.sync_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.sync_fd = -1

    def __enter__(self) -> PendingAppend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Locked:
    """``flock`` held on an already open descriptor (the sync lock), retried on EINTR."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def __enter__(self) -> None:
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                return
            except InterruptedError:
                continue
            except OSError as exc:
                raise LockError(exc.errno or errno.EIO, f"cannot lock {self.path}: {exc.strerror}") from exc

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
