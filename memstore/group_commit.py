"""Group commit: appends made durable by fsyncs that overlap, with a shared record of their outcome.

An append is written under the file group's writer lock (``memory.lock``), which is
released before the bytes are made durable, so the next writer appends while this
one waits on the disk.  Each writer then fsyncs its own descriptor, with no lock
held: concurrent fsyncs of one file are merged by the file system into one journal
commit (ext4's jbd2 joins every fsync that arrives while a commit is being written),
which is the group commit.  On this project's 2-core machine that beat a leader
holding a sync lock during its fsync for followers to queue behind (measured in
``benchmarks/writers.py``): each hand-over of the lock is a wake-up, and on a busy
machine a wake-up can cost a scheduler tick, several times per batch.  Measured again
with the leaner code of stop 22 (4 writer processes, old and new interleaved, load
3-4.5): a leader holding the sync lock through its fsync, followers blocking on it and
then returning on its claim (claims widened to every byte written since the leader's
descriptor was opened, so a leader that took the lock again still covered them), halved
the fsyncs (about 1,050 per 2,000 adds) yet ran at 0.66x the adds/s (median of 18
interleaved pairs, 15 of them slower).  Fsyncs serialised behind a lock cannot
overlap; fsyncs issued freely do: jbd2 fills the next transaction while one commits.

The file's *sync lock* (``memory.sync.lock`` beside ``memory.jsonl``; never replaced
or deleted) holds a small record about the inode (see :mod:`memstore.sync_record`),
taken only to update it, briefly.  A writer whose bytes may have waited on a failed
fsync fails; a writer whose bytes a claim in the record vouches for returns without an
fsync of its own.  memstore no longer records claims: a claim could spare only a
writer that reaches its commit a whole fsync after its append, which 4 writer processes
never did (0 fsyncs spared in 4,000 adds, 1 in 8,000 with 8), while recording them cost
each commit a lock, a read and a write of the sync lock, and every other writer a fresh
parse of the record.  Claims older versions record are still honoured, so the rules for
them stay.  Why all of this is safe:

* A claim vouches only for bytes written after the claiming descriptor was opened and
  before its fsync began.  Linux reports a writeback error to every descriptor that
  was open when it happened (each hears of it once), so an error on those bytes would
  have failed that fsync, whichever process saw the error first and whatever became
  of it: a writer killed mid-fsync leaves nothing to clean up.  Each writer's
  descriptor is open from before its write until its fsync, for the same reason; once
  an append is durable, the same process's next append may use its descriptors again
  (never two appends at once, never after a failure, never in a forked child).
* A failed fsync is never retried and never trusted again for what it covered: Linux
  may mark the pages clean, so a later fsync succeeds without the bytes.  The writer
  that sees the error marks the bytes from its own (or from the end of the last
  claim, if earlier) to the end of the file as lost; any writer whose bytes overlap
  that range fails, even after its own fsync succeeds (the record is read again after
  every successful fsync).  This also holds where errors are reported once to a single
  caller.
* Offsets only mean something while the file only grows.  Rewrites replace it (a new
  inode, so the record no longer applies); memstore's own truncations (a torn tail set
  aside, a failed write cut back) happen under the sync lock, lower the record and
  count the cut (always under the writer lock too), so that an older version's claim
  made from a size read before the cut is refused; before every append the writer
  checks, under the writer lock, that no recorded offset lies past the end of the
  file, which catches truncations by others and a recycled inode number, and lowers
  the record first.  A record whose bytes have not changed since the append checked it
  is not parsed again: it cannot say anything about bytes appended after it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

from memstore.append_chain import CHAIN_BYTES, CHAIN_OFFSET, AppendChain, sync_lock_path
from memstore.errors import LockError, StorageError
from memstore.files import (
    DEFAULT_FILE_MODE,
    fsync_dir,
    hide_from_children,
    keep_torn_tail,
    open_for_append,
    open_own_file,
    open_regular,
    storage_error,
    torn_tail_start,
    unhide_from_children,
    write_all,
)
from memstore.logger import LazyLogger
from memstore.sync_record import NEVER, RECORD_BYTES, SyncRecord, Verdict

log = LazyLogger(__name__)

T = TypeVar("T")

IDLE_DESCRIPTORS = 4
"""Descriptor pairs a group keeps for later appends: one per thread appending at once, up to this."""

TORN_TAIL_TRIES = 3
"""Reads of a file whose torn last line another program kept changing before it is given up (EAGAIN)."""


class GroupCommit:
    """Appends to one file, made durable by fsyncs shared between writers and processes."""

    def __init__(self, path: Path, *, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = Path(path)
        self.sync_path = sync_lock_path(self.path)
        self._names = (os.fspath(self.path), os.fspath(self.sync_path))
        """Both paths as strings, for the stat of each name on every add."""
        self._mode = mode
        self._idle: list[_Descriptors] = []
        self._retired: list[_Descriptors] = []
        self._records = _LastParsed(SyncRecord.unpack)
        self._chains = _LastParsed(AppendChain.unpack)

    # ------------------------------------------------------------- descriptors kept between appends

    def _checkout(self) -> tuple[_Descriptors, bool]:
        """Descriptors of the file and its sync lock for one append; True when this call created the file.

        A successful commit hands its descriptors back for the next append, which saves
        two opens and closes per add.  They are used again only while both names still
        lead to the same files (a rewrite renames a new file in; a planted link shows in
        ``lstat``) and in the process that opened them: a forked child shares the open
        file description, and with it the error cursor its fsync reads.  Each append
        owns its descriptors until it is durable, as if it had opened them itself.
        """
        while self._idle:
            try:
                held = self._idle.pop()
            except IndexError:  # taken by another thread in between
                break
            if held.still_names(*self._names):
                return held, False
            # Closed after the writer lock is released: the last descriptor of a file a
            # rewrite replaced frees all of its blocks, which can take a while.
            self._retired.append(held)
        sync_fd = self._open_sync()
        # Hidden from the open on: a child forked while the file opens would share the sync lock.
        hide_from_children(sync_fd)
        try:
            fd, created = open_for_append(self.path, self._mode)
        except BaseException as exc:
            unhide_from_children(sync_fd)
            os.close(sync_fd)
            if isinstance(exc, OSError) and not isinstance(exc, StorageError):
                raise storage_error("open", self.path, exc) from exc
            raise
        hide_from_children(fd)
        return _Descriptors(fd, sync_fd), created

    def _checkin(self, held: _Descriptors) -> None:
        """Keep a durable append's descriptors for the next one (a few, for concurrent threads)."""
        if len(self._idle) < IDLE_DESCRIPTORS:
            self._idle.append(held)
        else:
            held.close()
        self._close_retired()

    def _close_retired(self) -> None:
        while self._retired:
            try:
                self._retired.pop().close()
            except IndexError:  # closed by another thread in between
                break

    def release_descriptors(self) -> None:
        """Close every kept descriptor now; the next append opens the file again.

        For the writer that just replaced the file: a kept descriptor of the old one
        would hold all of its blocks until the next append.
        """
        for kept in (self._idle, self._retired):
            while kept:
                try:
                    kept.pop().close()
                except IndexError:
                    break

    # ------------------------------------------------------------- under the writer lock

    def append(self, data: bytes, *, is_whole: Callable[[bytes], bool] | None = None) -> PendingAppend:
        """Write whole lines at the end of the file; the caller holds the writer lock.

        Returns before the bytes are durable: release the writer lock, then call
        :meth:`PendingAppend.commit`.  A last line without a newline gets one first;
        when ``is_whole`` rejects it (a write cut short), it is set aside instead.
        A file this call creates is made durable, with its directory, before it returns,
        since later appends by others depend on its name.
        """
        held, created = self._checkout()
        fd, sync_fd = held.fd, held.sync_fd
        try:
            st, size, unterminated, _aside = self._settle_tail(sync_fd, fd, is_whole)
            if unterminated:
                data = b"\n" + data
            chain, seen = self._check_record(sync_fd, fd, st, size)
            try:
                # Stat again just before the write: the chain's "before" must be the file as the
                # write found it.  The first stat is older by the torn-tail check and the record's
                # read, which may wait on the sync lock: another tool's edit meanwhile would hide
                # inside a chain that starts from it.
                before: os.stat_result | None = os.fstat(fd)
                write_all(fd, data)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self._truncate(sync_fd, fd, st, size)
                raise storage_error("append to", self.path, exc) from exc
            if size != st.st_size:
                before = None  # cut by memstore first: the chain restarts after this append
            self._extend_chain(sync_fd, fd, chain, before, end=size + len(data))
            pending = PendingAppend(self, held, st.st_dev, st.st_ino, size, size + len(data), seen)
        except BaseException:
            held.close()
            raise
        if created:
            with pending:
                pending.commit()
                try:
                    fsync_dir(self.path.parent)
                except OSError as exc:
                    raise storage_error("fsync directory of", self.path, exc) from exc
        return pending

    def _extend_chain(
        self, sync_fd: int, fd: int, chain: AppendChain | None, before: os.stat_result | None, *, end: int
    ) -> None:
        """Record that this append, and nothing else, took the file from ``before`` to now.

        ``chain`` is the chain as this writer found it, read under the writer lock (only
        writers holding it write the chain).  A file that is not ``end`` bytes long now
        was changed by someone else too: the chain restarts at the file as it is.  Only a
        hint for the index (see :mod:`memstore.append_chain`): if it cannot be written,
        the chain no longer ends at the file, and the index re-reads the prefix.
        """
        try:  # not contextlib.suppress: this runs under the writer lock on every add
            after = os.fstat(fd)
            if after.st_size != end:
                before = None
            extended = AppendChain.after_append(chain, before, after)
            # The sync lock was proven linked nowhere else when this append took its descriptors.
            self._chains.remember(extended.write(sync_fd, checked=True), extended)
        except OSError:
            pass

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
                return self._settle_tail(sync_fd, fd, is_whole)[3]
            finally:
                os.close(fd)
        finally:
            os.close(sync_fd)

    def _settle_tail(
        self, sync_fd: int, fd: int, is_whole: Callable[[bytes], bool] | None
    ) -> tuple[os.stat_result, int, bool, Path | None]:
        """The file's stat, where to append, whether its last line lacks a newline, and a torn line's copy.

        An unterminated last line ``is_whole`` rejects is copied aside and cut off.  Another
        program writing at that very moment makes the cut refuse (it may have appended past
        the copied bytes): the copy is dropped, since the bytes are all still in the file,
        and the file is read again, up to TORN_TAIL_TRIES times, so the fragment ends up in
        exactly one place and the append lands after whatever the other program wrote.
        """
        refused: OSError | None = None
        for _attempt in range(TORN_TAIL_TRIES):
            try:
                st = os.fstat(fd)
                size = st.st_size
                unterminated = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                start = None
                if unterminated and is_whole is not None:
                    start = torn_tail_start(fd, size, is_whole=is_whole)
            except OSError as exc:
                raise storage_error("read the last line of", self.path, exc) from exc
            if start is None:
                return st, size, unterminated, None  # no torn line, or a whole one kept
            aside = keep_torn_tail(self.path, fd, start, size)
            try:
                self._truncate(sync_fd, fd, st, start, unless_changed_since=st)
            except StorageError:
                raise
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise storage_error("truncate the torn last line of", self.path, exc) from exc
                refused = exc
                with contextlib.suppress(OSError):
                    os.unlink(aside)
                continue
            log.warning("set aside a torn last line of %s in %s", self.path, aside)
            return st, start, False, aside
        assert refused is not None
        raise storage_error("truncate the torn last line of", self.path, refused)

    def _check_record(
        self, sync_fd: int, fd: int, st: os.stat_result, size: int
    ) -> tuple[AppendChain | None, bytes]:
        """Lower any recorded offset past the end of the file before appending at ``size``.

        Returns the append chain (read with the record in one read) and the record's
        bytes as they stand once checked: a record that still reads so at the commit says
        nothing about this append's bytes (see :meth:`_make_durable`).  Read without the
        sync lock: writers only ever record offsets the file already had, so a record that
        looks stale (or torn, or foreign) is re-read under it.
        """
        try:
            block = os.pread(sync_fd, CHAIN_OFFSET + CHAIN_BYTES, 0)
        except OSError:
            block = None
        record = None if block is None else self._records.of(block[:RECORD_BYTES])
        chain = None if block is None else self._chains.of(block[CHAIN_OFFSET:])
        if block is not None and record is not None and not record.reaches_past(st.st_dev, st.st_ino, size):
            return chain, block[:RECORD_BYTES]
        with _Locked(sync_fd, self.sync_path):
            record = SyncRecord.read(sync_fd) or SyncRecord()
            record.cut(st.st_dev, st.st_ino, size)
            try:
                record.write(sync_fd)
            except OSError as exc:  # left high, the record could vouch for these bytes: do not append
                raise storage_error("update the sync record", self.sync_path, exc) from exc
        return chain, record.pack()

    def _truncate(
        self,
        sync_fd: int,
        fd: int,
        st: os.stat_result,
        size: int,
        *,
        unless_changed_since: os.stat_result | None = None,
    ) -> None:
        """Cut the file back to ``size`` under the sync lock, lowering the record with it.

        A writer records a claim under the lock; lowered under it too, no claim on the cut
        bytes can land after the cut, where new lines will take their offsets.  With
        ``unless_changed_since``, a file another tool changed since that stat is not cut:
        it may have appended past the bytes the caller copied aside.  That check comes last,
        right before the cut: another program's append after it is lost with the cut, and
        no system call truncates only a file that did not change, so the window is kept to
        the two calls.  A record lowered for a cut then refused costs nothing: memstore's
        own appends all end before the torn line (they are made under the writer lock, which
        the caller holds), so no offset past it is one of theirs.
        """
        with _Locked(sync_fd, self.sync_path):
            record = SyncRecord.read(sync_fd) or SyncRecord()
            record.cut(st.st_dev, st.st_ino, size)
            try:
                # Counted before the cut: if the count cannot be recorded, or this process dies
                # after it, no claim made from a size read before the cut is ever accepted.
                record.write(sync_fd)
            except OSError as exc:
                raise storage_error("update the sync record", self.sync_path, exc) from exc
            if unless_changed_since is not None:
                now = os.fstat(fd)
                if (now.st_size, now.st_ctime_ns) != (unless_changed_since.st_size, unless_changed_since.st_ctime_ns):
                    raise OSError(errno.EAGAIN, "changed by another program while its torn last line was set aside")
            os.ftruncate(fd, size)

    # ------------------------------------------------------------- after the writer lock

    def _make_durable(self, pending: PendingAppend) -> None:
        record = self._changed_record(pending)
        if record is not None:
            verdict = record.verdict(pending.dev, pending.ino, pending.start, pending.end)
            if verdict is Verdict.LOST:
                raise _lost(self.path)
            if verdict is Verdict.COVERED:
                return
        try:
            os.fsync(pending.fd)
        except OSError as exc:
            self._record_failure(pending)
            raise storage_error("fsync", self.path, exc) from exc
        if self._is_lost(pending):  # a failure another writer saw may have dropped these pages
            raise _lost(self.path)

    def _changed_record(self, pending: PendingAppend) -> SyncRecord | None:
        """The record if it changed since the append checked it, else None: it has nothing to say.

        Checked under the writer lock before these bytes existed, the record held no offset
        past them, so it could neither vouch for them nor count them lost; the same bytes
        now still cannot.  Comparing bytes saves parsing the record on every commit.
        """
        try:
            data = os.pread(pending.sync_fd, RECORD_BYTES, 0)
        except OSError:
            data = None
        if data is not None and data == pending.seen_record:
            return None
        record = None if data is None else self._records.of(data)
        if record is None:  # torn by a writer updating it: read again under the lock
            with _Locked(pending.sync_fd, self.sync_path):
                record = SyncRecord.read(pending.sync_fd) or SyncRecord()
        return record

    def _is_lost(self, pending: PendingAppend) -> bool:
        record = self._changed_record(pending)
        if record is None:
            return False
        return record.verdict(pending.dev, pending.ino, pending.start, pending.end) is Verdict.LOST

    def _record_failure(self, pending: PendingAppend) -> None:
        """Mark what may have been waiting on the failed fsync as lost, for every writer to see."""
        try:
            held = os.fstat(pending.fd).st_size
        except OSError:
            held = NEVER
        with contextlib.suppress(OSError), _Locked(pending.sync_fd, self.sync_path):
            record = SyncRecord.read(pending.sync_fd) or SyncRecord()
            record.mark_lost(pending.dev, pending.ino, pending.start, held)
            record.write(pending.sync_fd)

    def _open_sync(self) -> int:
        try:
            # Never through a link, soft or hard: the record is written, and could land in the catalog.
            return open_own_file(self.sync_path, mode=self._mode)
        except OSError as exc:
            raise LockError(exc.errno or errno.EIO, f"cannot open lock {self.sync_path}: {exc.strerror}") from exc


def _lost(path: Path) -> StorageError:
    return storage_error("fsync", path, OSError(errno.EIO, "an fsync this append waited on failed: it may be lost"))


class _LastParsed(Generic[T]):
    """The last bytes of one kind (sync record, append chain) this group parsed, with what they
    said: bytes that come back unchanged are not parsed again.

    Most appends find the block as the last one left it (their own chain, an unchanged
    record).  The objects kept here are only read, never updated: an update reads the
    record afresh under the sync lock.  The pair is replaced whole, so threads sharing the
    group see one pair or the other.
    """

    __slots__ = ("_kept", "_unpack")

    def __init__(self, unpack: Callable[[bytes], T | None]) -> None:
        self._unpack = unpack
        self._kept: tuple[bytes, T | None] | None = None

    def of(self, data: bytes) -> T | None:
        kept = self._kept
        if kept is not None and kept[0] == data:
            return kept[1]
        value = self._unpack(data)
        self._kept = (data, value)
        return value

    def remember(self, data: bytes, value: T) -> None:
        """``data`` is what this group just wrote for ``value``."""
        self._kept = (data, value)


class _Descriptors:
    """A file's append descriptor and its sync lock's, opened together by one process.

    Kept between appends, so the opener hides both from forked children
    (:func:`hide_from_children`) as it opens them; :meth:`close` undoes that.
    """

    __slots__ = ("fd", "key", "pid", "sync_fd", "sync_key")

    def __init__(self, fd: int, sync_fd: int) -> None:
        self.fd = fd
        self.sync_fd = sync_fd
        self.pid = os.getpid()
        try:
            st, ss = os.fstat(fd), os.fstat(sync_fd)
        except OSError:
            self.key = self.sync_key = (-1, -1)  # never matches: not kept
        else:
            self.key, self.sync_key = (st.st_dev, st.st_ino), (ss.st_dev, ss.st_ino)

    def still_names(self, path: str, sync_path: str) -> bool:
        """Both names still lead to these files (regular, the lock unlinked elsewhere), in this process."""
        if self.pid != os.getpid() or self.fd < 0:
            return False
        try:
            st, ss = os.lstat(path), os.lstat(sync_path)
        except OSError:
            return False
        return (
            stat.S_ISREG(st.st_mode)
            and (st.st_dev, st.st_ino) == self.key
            and stat.S_ISREG(ss.st_mode)
            and ss.st_nlink == 1
            and (ss.st_dev, ss.st_ino) == self.sync_key
        )

    def close(self) -> None:
        """Close both (in a forked child: the copies that point at /dev/null)."""
        fds, self.fd, self.sync_fd = (self.fd, self.sync_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                unhide_from_children(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        # Not contextlib.suppress: at interpreter exit the modules it needs may be gone.
        try:  # noqa: SIM105
            self.close()
        except Exception:
            pass


class PendingAppend:
    """Bytes ``[start, end)`` appended through their own descriptor, not yet known to be durable.

    The descriptor stays open until :meth:`commit`: the kernel reports a writeback
    error to every descriptor that was open when it happened, so this one hears of
    any error on these bytes even when another process's fsync saw it first.  Once
    durable, the descriptors go back to the group for its next append; after a
    failure they are closed.
    """

    def __init__(
        self,
        group: GroupCommit,
        held: _Descriptors,
        dev: int,
        ino: int,
        start: int,
        end: int,
        seen_record: bytes,
    ) -> None:
        self.group = group
        self._held: _Descriptors | None = held
        self.fd = held.fd
        self.sync_fd = held.sync_fd
        self.dev = dev
        self.ino = ino
        self.start = start
        self.end = end
        self.seen_record = seen_record
        """The sync record's bytes as the append left them."""
        self._durable = False

    def commit(self) -> None:
        """Return once these bytes are durable (a StorageError if they may not be), then close."""
        if self._durable:
            self.close()
            return
        held = self._held
        if held is None:
            raise storage_error(
                "fsync", self.group.path, OSError(errno.EBADF, "the append was closed before it was durable")
            )
        try:
            self.group._make_durable(self)
        except BaseException:
            self.close()
            raise
        self._durable = True
        self._held = None
        self.fd = self.sync_fd = -1
        self.group._checkin(held)

    def close(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()
        self.fd = self.sync_fd = -1
        self.group._close_retired()

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
