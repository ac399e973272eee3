"""Durable file primitives: the cross-process lock, appends, atomic rewrites, line reading.

The canonical files are the only thing that must survive, so every write here is
either a whole-line append followed by fsync, or a rewrite through a unique temp
file, fsync, ``os.replace`` and a directory fsync.  A failed fsync is an error,
never retried: after it the kernel may have dropped the dirty pages.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from memstore.block_digest import PrefixDigest
from memstore.errors import LockError, NotRegularFileError, StorageError
from memstore.lines_seen import LineRecorder

if TYPE_CHECKING:
    from memstore.direct_io import DirectWriter

T = TypeVar("T")

MAX_LINE_BYTES = 64 * 1024 * 1024
LOCK_POLL_SECONDS = 0.02
"""How often a bounded wait for a lock tries again."""
"""Lines longer than this are skipped (and counted as corrupt) without being held in memory."""

READ_CHUNK = 1024 * 1024
MAX_JSON_FILE_BYTES = 256 * 1024 * 1024
"""failures.json and pinned.json larger than this read as unreadable (bounded memory)."""
RACY_WINDOW_NS = 100_000_000
"""A file modified this close to when its state was recorded is re-verified (as git does):
filesystem timestamps are coarse, so a same-size change within one tick keeps the mtime."""
DEFAULT_FILE_MODE = 0o644
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def storage_error(action: str, path: Path | str, exc: OSError) -> StorageError:
    """Wrap an OSError in the memstore root while keeping errno for callers."""
    err = StorageError(exc.errno or errno.EIO, f"cannot {action} {path}: {exc.strerror or exc}")
    err.filename = str(path)
    return err


def not_regular(path: Path | str, what: str) -> NotRegularFileError:
    err = NotRegularFileError(
        errno.ELOOP if what == "a symbolic link" else errno.EINVAL,
        f"{path} is {what}, not a regular file: memstore neither follows nor replaces it",
    )
    err.filename = str(path)
    return err


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def open_regular(
    path: Path,
    flags: int = os.O_RDONLY,
    mode: int = DEFAULT_FILE_MODE,
    *,
    follow_symlinks: bool = False,
    max_bytes: int | None = None,
) -> int:
    """Open ``path`` only if it is a regular file (of at most ``max_bytes``, when given).

    The one way memstore opens a file it did not create this moment.  A symbolic link
    is not followed (``O_NOFOLLOW``): a link committed to a repository could point
    anywhere, and replacing it on a rewrite would fork the data into a private copy.
    ``follow_symlinks=True`` is for files memstore only reads (MEMORY.md) that may be
    a link to a regular file.  ``O_NONBLOCK`` keeps a named pipe from blocking the
    open, and the checks are made on the opened descriptor, so what is read is what
    was checked: a FIFO, device, socket or directory raises NotRegularFileError, a
    larger file StorageError (EFBIG).  Other OSErrors (``FileNotFoundError``
    included) propagate for the caller to map.
    """
    open_flags = flags | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, open_flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):
            try:
                st_mode = os.lstat(path).st_mode
            except OSError:
                raise exc from None
            if stat.S_ISREG(st_mode) or (follow_symlinks and stat.S_ISLNK(st_mode)):
                raise  # a loop of links (in a parent directory, or followed here)
            raise not_regular(path, _kind(st_mode)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, _kind(st.st_mode))
        if max_bytes is not None and st.st_size > max_bytes:
            raise storage_error("read", path, OSError(errno.EFBIG, f"larger than {max_bytes} bytes"))
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_dir(path: Path, *, private: bool = False) -> None:
    """Create a directory (and parents); private directories get 0700 regardless of umask.

    Each directory created is made durable by an fsync of its parent, so a file
    acknowledged inside it cannot vanish with the directory on power loss.
    """
    try:
        missing: list[Path] = []
        current = path
        while not current.is_dir() and current.parent != current:
            missing.append(current)
            current = current.parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not directory.is_dir():
                    raise
            fsync_dir(directory.parent)
        if private:
            os.chmod(path, PRIVATE_DIR_MODE)
    except OSError as exc:
        raise storage_error("create directory", path, exc) from exc


class FileLock:
    """An exclusive ``flock`` on a lock file that is never replaced or deleted.

    Each thread locks through its own file description, so threads of one process
    exclude each other as well as other processes.  The lock refuses to be
    released from a forked child, which would otherwise drop the parent's lock.
    With ``keep_open`` each thread keeps its descriptor between acquisitions (for a
    lock taken on every add: an open and a close of the lock file saved each time);
    it is used again only in the process that opened it and while the lock path still
    names that file, and closes when the thread or the lock goes away.
    """

    def __init__(self, path: Path, *, mode: int = DEFAULT_FILE_MODE, keep_open: bool = False) -> None:
        self.path = Path(path)
        self._name = os.fspath(self.path)
        self._mode = mode
        self._keep_open = keep_open
        self._local = threading.local()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self, *, wait: float | None = None) -> None:
        """Take the lock; with ``wait``, give up after that many seconds (:class:`LockError`, EAGAIN)."""
        local = self._local
        if getattr(local, "fd", None) is not None:
            raise LockError(errno.EDEADLK, f"lock {self.path} is already held by this thread")
        kept: _KeptDescriptor | None = getattr(local, "kept", None)
        if kept is not None:
            local.kept = None
            if kept.pid == os.getpid():
                fd = kept.take()
                # Hidden while this thread waits too: a child forked meanwhile would share the lock taken next.
                hide_from_children(fd)
                self._lock(fd, wait)
                if self._names(kept.key):
                    local.fd, local.pid, local.key = fd, kept.pid, kept.key
                    return
                # Deleted, replaced or moved since it was opened: a lock nobody who opens the name sees.
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                unhide_from_children(fd)
                os.close(fd)
            # A forked child's copy shares the parent's file description: closed (dropped), never unlocked.
        try:
            # Never through a link: a lock file is untrusted and may point out of the store.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, self._mode)
        except OSError as exc:
            raise LockError(exc.errno or errno.EIO, f"cannot open lock {self.path}: {exc.strerror}") from exc
        hide_from_children(fd)
        self._lock(fd, wait)
        local.fd = fd
        local.pid = os.getpid()
        local.key = None

    def _names(self, key: tuple[int, int] | None) -> bool:
        """Whether the lock's path still names the file of ``key`` (device, inode).

        A link count alone misses a file renamed away, or linked elsewhere before its name
        was removed.  The kept descriptor holds its inode open, so the number is never reused.
        """
        try:
            named = os.lstat(self._name)
        except OSError:
            return False
        return key == (named.st_dev, named.st_ino)

    def _lock(self, fd: int, wait: float | None) -> None:
        """``flock`` ``fd``; the descriptor is closed when that fails."""
        deadline = None if wait is None else time.monotonic() + wait
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if deadline is None else fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except InterruptedError:
                    continue
                except BlockingIOError:
                    if deadline is None or time.monotonic() >= deadline:
                        raise
                    time.sleep(LOCK_POLL_SECONDS)
        except BaseException as exc:
            unhide_from_children(fd)
            os.close(fd)
            if isinstance(exc, OSError):
                raise LockError(exc.errno or errno.EIO, f"cannot lock {self.path}: {exc.strerror}") from exc
            raise

    def release(self) -> None:
        local = self._local
        fd = getattr(local, "fd", None)
        if fd is None:
            return
        local.fd = None
        if local.pid != os.getpid():
            # A forked child shares the open file description: closing ours is fine,
            # unlocking it would release the parent's lock.
            os.close(fd)
            return
        unhide_from_children(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        if not self._keep_open:
            os.close(fd)
            return
        key = local.key
        if key is None:  # opened by this acquisition: identified once
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                return
            key = (st.st_dev, st.st_ino)
        local.kept = _KeptDescriptor(fd, local.pid, key)


class _KeptDescriptor:
    """An unlocked lock descriptor kept for a thread's next acquisition; closed when dropped.

    A forked child closes every kept descriptor at once (``_close_kept_in_child``): left open
    there, it would keep the parent's file description, and with it a lock the parent takes
    later, alive after the parent dies.
    """

    __slots__ = ("fd", "key", "pid")

    def __init__(self, fd: int, pid: int, key: tuple[int, int]) -> None:
        self.fd = fd
        self.pid = pid
        self.key = key
        """The file's (device, inode), compared with what the lock's path names at each reuse."""
        _KEPT_FDS.add(fd)

    def take(self) -> int:
        fd, self.fd = self.fd, -1
        _KEPT_FDS.discard(fd)
        return fd

    def __del__(self) -> None:
        # Closing never unlocks a description another descriptor (a forked parent's) still has.
        fd, self.fd = self.fd, -1
        # Not contextlib.suppress, and all of it inside: at interpreter exit this module's
        # globals (os, the set) may already be gone.
        try:
            if fd >= 0 and self.pid == os.getpid():  # a forked child closed its copy when it forked
                _KEPT_FDS.discard(fd)
                os.close(fd)
        except Exception:
            pass


_KEPT_FDS: set[int] = set()
"""The descriptors every thread's ``_KeptDescriptor`` holds in this process."""
_HIDDEN_FDS: set[int] = set()
"""Descriptors whose open file description a forked child must not share: the locks this
process holds, and the group commit's descriptors of the sync lock and the file."""


def hide_from_children(fd: int) -> None:
    """Point ``fd`` at /dev/null in every child forked while it is open here.

    A child that shares a lock's open file description keeps a lock the parent takes on
    it alive after the parent dies.  The number stays valid in the child, so code there
    that closes it never closes an unrelated descriptor.
    """
    _HIDDEN_FDS.add(fd)


def unhide_from_children(fd: int) -> None:
    """Undo :func:`hide_from_children`; called before ``fd`` is closed or handed on."""
    _HIDDEN_FDS.discard(fd)


def _close_kept_in_child() -> None:
    """After a fork, in the child: let go of the parent's lock descriptions.

    A kept descriptor is closed (its owner closes it only in the process that kept it).
    A hidden one is pointed at /dev/null: a parent locks that very description again.
    """
    for fd in list(_KEPT_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _KEPT_FDS.clear()
    if _HIDDEN_FDS:
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for fd in list(_HIDDEN_FDS):
                    with contextlib.suppress(OSError):
                        os.dup2(null, fd, inheritable=False)
            finally:
                os.close(null)
    _HIDDEN_FDS.clear()


os.register_at_fork(after_in_child=_close_kept_in_child)


def open_own_file(path: Path, *, mode: int) -> int:
    """Open (creating it) a file memstore itself writes beside the canonical ones, read-write.

    Never through a symbolic link, and never a file hard-linked elsewhere: a planted hard
    link could make its bytes a canonical file's.  Such a name is removed (which leaves the
    other file alone) and a file of memstore's own is created in its place.
    """
    for _attempt in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    raise OSError(errno.EMLINK, f"{path} keeps being linked to another file")


def still_own_file(fd: int) -> bool:
    """The open file is still one memstore may write: a regular file no other name links to."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (``os.write`` may be short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


WRITEV_PARTS = 1024
"""Parts per ``writev`` (Linux's IOV_MAX)."""


def writev_all(fd: int, parts: Sequence[memoryview]) -> None:
    """Write every byte of the parts, in order (``os.writev`` may be short)."""
    pending = [part for part in parts if len(part)]
    index = 0
    while index < len(pending):
        written = os.writev(fd, pending[index : index + WRITEV_PARTS])
        if written <= 0:
            raise OSError(errno.EIO, "the file accepted no bytes")
        while written and written >= len(pending[index]):
            written -= len(pending[index])
            index += 1
        if written:
            pending[index] = pending[index][written:]


class AppendResult(NamedTuple):
    """Where an appended line landed: ``[start, end)`` in bytes, and the file size after."""

    start: int
    end: int


def open_for_append(path: Path, mode: int) -> tuple[int, bool]:
    """Open (or create) a regular file for appending; True when this call created it."""
    flags = os.O_RDWR | os.O_APPEND
    while True:
        try:
            return open_regular(path, flags), False
        except FileNotFoundError:
            pass
        try:
            return open_regular(path, flags | os.O_CREAT | os.O_EXCL, mode), True
        except FileExistsError:
            continue  # created by someone else in between: open theirs


def append_line(path: Path, line: bytes, *, mode: int = DEFAULT_FILE_MODE) -> AppendResult:
    """Append one whole line durably. The caller holds the file group's lock.

    If the file does not end with a newline, one is written first so the new line
    is never glued onto a torn or unterminated last line.  On a failed write the
    file is truncated back to its old size; on a failed fsync the error propagates
    and nothing is acknowledged.  A file this call creates has its directory fsynced
    too: otherwise the new name, and with it the first entry, may not survive a
    power loss.  Anything but a regular file at ``path`` is refused.
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    try:
        fd, created = open_for_append(path, mode)
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("open", path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        glued = line.startswith(b"\n") and size > 0
        try:
            write_all(fd, line)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise storage_error("append to", path, exc) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise storage_error("fsync", path, exc) from exc
        if created:
            try:
                fsync_dir(path.parent)
            except OSError as exc:
                raise storage_error("fsync directory of", path, exc) from exc
        return AppendResult(start=size + 1 if glued else size, end=size + len(line))
    finally:
        os.close(fd)


def torn_tail_start(fd: int, size: int, *, is_whole: Callable[[bytes], bool]) -> int | None:
    """Where an unterminated last line that ``is_whole`` rejects begins (a write cut short by a crash).

    ``None`` when the file ends with a newline, when the tail parses, and when it is
    longer than MAX_LINE_BYTES (readers skip it anyway).  The caller holds the file
    group's lock and sets the tail aside (:func:`keep_torn_tail`) before truncating it:
    appending after it would bury a corrupt line in the middle of the file.
    """
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start = 0
    pos = size
    while pos > 0 and size - pos <= MAX_LINE_BYTES:
        chunk_start = max(0, pos - READ_CHUNK)
        newline = os.pread(fd, pos - chunk_start, chunk_start).rfind(b"\n")
        if newline >= 0:
            start = chunk_start + newline + 1
            break
        pos = chunk_start
    if size - start > MAX_LINE_BYTES:
        return None
    if is_whole(os.pread(fd, size - start, start)):
        return None
    return start


def keep_torn_tail(path: Path, fd: int, start: int, size: int) -> Path:
    """Copy bytes ``[start, size)`` durably to ``<name>.torn-<ns>`` beside the file (never lost)."""
    aside = path.with_name(f"{path.name}.torn-{time.time_ns()}")
    try:
        tail = os.pread(fd, size - start, start)
        mode = os.fstat(fd).st_mode & 0o777
    except OSError as exc:
        raise storage_error("read the last line of", path, exc) from exc
    atomic_write(aside, tail, mode=mode)
    return aside


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> os.stat_result:
    """Replace ``path`` with ``data`` so readers see the old or the new bytes, never a mix.

    Returns the stat of the new file (taken from the temp file's descriptor before the
    replace), which the index records so it can recognise its own rewrite.  Anything
    but a regular file at ``path`` (a symbolic link above all) is refused, not replaced.
    """
    with Replacement(path, mode=mode) as replacement:
        replacement.write(data)
        return replacement.commit()


class Replacement:
    """A temp file beside ``path`` that will replace it: filled in steps, then swapped in or discarded.

    The temp file is created ``O_EXCL`` and held under ``flock`` until it is renamed or
    removed, so :func:`remove_stale_temps` can tell it from one a crashed writer left
    behind, and a rewrite can prepare most of the new file without the writer lock.
    A rewrite that keeps most lines byte for byte copies the runs between the lines it
    drops (:meth:`copy`), digesting them on the way when asked (``digest``), so the
    index can later prove the file holds what was written.  Anything but a regular file at
    ``path`` (a symbolic link above all) is refused, not replaced.  Used as a context
    manager, the temp file is removed unless :meth:`commit` succeeded.  With ``direct``
    the bytes go to the disk around the page cache (:mod:`memstore.direct_io`): for
    a rewrite of a big file, whose every byte is new.
    """

    def __init__(self, path: Path, *, mode: int | None = None, digest: bool = False, direct: bool = False) -> None:
        self.path = path
        self.hasher: PrefixDigest | None = PrefixDigest() if digest else None
        """With ``digest``: the block digest of every byte written so far, in order (the index's form)."""
        try:
            current: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            current = None
        except OSError as exc:
            raise storage_error("stat", path, exc) from exc
        if current is not None and not stat.S_ISREG(current.st_mode):
            raise not_regular(path, _kind(current.st_mode))
        if mode is None:
            mode = DEFAULT_FILE_MODE if current is None else current.st_mode & 0o777
        self.temp, self.fd = self._create(mode)
        self._fine_ctime = False
        """Whether this file system's ctime vouches for "unchanged since" (probed here, on the temp
        file nobody else holds: on the file in place the probe's chmod could undo another's).
        Only a digested replacement asks: nothing else reads :attr:`renamed`."""
        self._wrote: os.stat_result | None = None
        """With ``digest``: the temp file's stat right after memstore last wrote to it (created it, at first)."""
        if digest:
            with contextlib.suppress(OSError):  # a refused chmod only forgoes the index's shortcut
                self._fine_ctime = ctime_moves_at_once(self.fd)
            try:
                self._note_write()
            except OSError as exc:
                self.discard()
                raise storage_error("stat", self.temp, exc) from exc
        self._direct: DirectWriter | None = None
        self.direct_bytes = 0
        """Bytes that went to the disk around the page cache (a reader of the new file may read them so too)."""
        self.renamed: os.stat_result | None = None
        """The new file's stat right after :meth:`commit` renamed it into place."""
        if direct:
            from memstore.direct_io import DirectWriter

            try:
                self._direct = DirectWriter(self.fd)
            except BaseException:
                self.discard()  # nobody else holds the temp file: remove it, free its descriptor
                raise

    def _create(self, mode: int) -> tuple[Path, int]:
        while True:
            temp = temp_path_for(self.path)
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            except OSError as exc:
                raise storage_error("create temp file for", self.path, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.lstat(temp).st_ino == os.fstat(fd).st_ino:
                    return temp, fd
            except OSError:
                pass  # a cleaner took it between the create and the lock: try another name
            os.close(fd)

    def write(self, data: bytes) -> None:
        if self._direct is not None:
            self.write_parts([memoryview(data)])
            return
        self._do(lambda: self._wrote_after(write_all, self.fd, data) if data else None)
        if self.hasher is not None:
            self.hasher.update(data)

    def write_parts(self, parts: Sequence[memoryview]) -> None:
        """Write the parts in order, in few system calls (the kept runs of a block a scan read)."""
        self._do(lambda: self._put(parts) if any(parts) else None)
        if self.hasher is not None:
            for part in parts:
                self.hasher.update(part)

    def copy(self, source: int, ranges: Sequence[tuple[int, int]]) -> None:
        self._do(lambda: _copy_ranges(source, self._put, ranges, self.hasher))

    def sync(self) -> None:
        """Make what is written so far durable (a last, shorter fsync at :meth:`commit` then suffices)."""
        self._do(self._fsync)

    def _put(self, parts: Sequence[memoryview]) -> None:
        if self._direct is not None:
            self._direct.write(parts)  # staged bytes move the times again when written: see _fsync
        else:
            writev_all(self.fd, parts)
        self._note_write()

    def _wrote_after(self, step: Callable[..., object], *args: object) -> None:
        step(*args)
        self._note_write()

    def _note_write(self) -> None:
        """Remember the temp file's stat after memstore's own write (only a digested replacement checks it)."""
        if self.hasher is not None:
            self._wrote = os.fstat(self.fd)

    def _fsync(self) -> None:
        if self._direct is not None:
            if self._direct.finish():  # what follows is short: written through the page cache
                self._note_write()
            self.direct_bytes = self._direct.direct_bytes
            self._direct = None
        os.fsync(self.fd)

    def commit(self, *, before_rename: Callable[[], None] | None = None) -> os.stat_result:
        """fsync, rename over ``path``, fsync the folder; the stat of the new file after its last write.

        ``before_rename`` runs after the fsync, right before the rename; a StorageError it
        raises discards the temp file and leaves ``path`` as it was.

        With ``digest``, :attr:`renamed` is its stat after the rename (which moves its ctime
        on Linux), left None when the temp file's size, mtime or ctime moved after memstore's
        last write to it (something else wrote to it, and only a read can tell what it
        holds), when anything but the ctime moved between that write and the stat after the
        rename, or when the file system's ctime is coarse (see :func:`ctime_moves_at_once`).
        """

        def swap() -> os.stat_result:
            self._fsync()
            written = os.fstat(self.fd)
            if before_rename is not None:
                before_rename()
            os.replace(self.temp, self.path)
            return written

        written = self._do(swap)
        if self._fine_ctime and _same_times(self._wrote, written):
            with contextlib.suppress(OSError):  # the file is in place: only the index's shortcut needs this stat
                renamed = os.fstat(self.fd)
                if _same_content_stat(renamed, written):
                    self.renamed = renamed
        self._close()
        try:
            fsync_dir(self.path.parent)
        except OSError as exc:
            raise storage_error("fsync directory of", self.path, exc) from exc
        return written

    def discard(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.temp)
            self._close()

    def _do(self, step: Callable[[], T]) -> T:
        if self.fd < 0:
            raise storage_error("rewrite", self.path, OSError(errno.EBADF, "the replacement was discarded"))
        try:
            return step()
        except StorageError:
            self.discard()
            raise
        except OSError as exc:
            self.discard()
            raise storage_error("rewrite", self.path, exc) from exc

    def _close(self) -> None:
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Replacement:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.discard()


CTIME_PROBES = 2
CTIME_ATTEMPTS = 3
"""Probes tried while each is inconclusive (a slow second step)."""
CTIME_STEP_NS = 500_000
"""Under any clock tick (1 ms at HZ=1000): a coarse ctime moves by whole ticks, a fine one by µs."""


def _same_times(before: os.stat_result | None, after: os.stat_result) -> bool:
    """Nothing but memstore's own writes changed the file between the two stats (size, mtime, ctime)."""
    if before is None:
        return False
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns) == (
        after.st_size, after.st_mtime_ns, after.st_ctime_ns,
    )  # fmt: skip


def _same_content_stat(after: os.stat_result, before: os.stat_result) -> bool:
    """The same file with the same size and mtime: only its ctime may have moved (a rename moves it)."""
    return (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns,
    )  # fmt: skip


def ctime_moves_at_once(fd: int) -> bool:
    """Whether a change made right after a stat of ``fd``'s file moves its ctime.

    A ctime that nothing else can set vouches for "unchanged since" only where every
    change moves it.  With fine-grained (multigrain) timestamps, as Linux 6.13+ gives
    ext4, XFS, btrfs and tmpfs, a change after a stat always gets a later ctime.  With
    coarse ones a change within the same clock tick (1–10 ms) leaves it as it was.  So a
    stat, a change that alters nothing (a chmod to the mode the file has) and a stat are
    tried twice: coarse timestamps keep a pair equal unless a tick ends in between, and
    then move it by a whole tick.  So after the first pair (whose ctime before may be a
    rename's, journaled a while ago) only a step under CTIME_STEP_NS counts: a preempted
    probe crossed a tick in both pairs 46 times in 1.5M on a loaded ext2.  Raises OSError
    as the calls do.
    """
    for _ in range(CTIME_ATTEMPTS):
        verdict = _ctime_probe(fd)
        if verdict is not None:
            return verdict
    return False


def _ctime_probe(fd: int) -> bool | None:
    """One probe of :func:`ctime_moves_at_once`; None when only the second step was slow.

    A slow second step is what a coarse ctime crossing a tick shows, but also what a fine one
    shows when this thread waited between the calls (preempted, or for the GIL while another
    thread runs Python: a rewrite's index follow-up runs beside the copy).  It proves nothing
    either way, so the probe is tried again; a coarse ctime then keeps a pair equal.
    """
    most = None  # the first pair: any step
    for _ in range(CTIME_PROBES):
        before = os.fstat(fd)
        os.fchmod(fd, stat.S_IMODE(before.st_mode))
        step = os.fstat(fd).st_ctime_ns - before.st_ctime_ns
        if step <= 0:
            return False
        if most is not None and step >= most:
            return None
        most = CTIME_STEP_NS
    return True


def _copy_ranges(
    source: int,
    put: Callable[[Sequence[memoryview]], None],
    ranges: Sequence[tuple[int, int]],
    hasher: PrefixDigest | None = None,
) -> None:
    # Through this process, not copy_file_range: a rewrite digests every byte it writes.
    for start, end in ranges:
        offset = start
        while offset < end:
            chunk = os.pread(source, min(READ_CHUNK, end - offset), offset)
            if not chunk:
                raise OSError(errno.EIO, "the file shrank while it was being copied")
            put([memoryview(chunk)])
            if hasher is not None:
                hasher.update(chunk)
            offset += len(chunk)


def temp_in_use(temp: Path) -> bool:
    """A temp file whose writer is alive holds it under ``flock`` (see :class:`Replacement`)."""
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def remove_stale_temps(path: Path) -> int:
    """Delete temp files a crashed rewrite of ``path`` left behind (not those a live writer holds). Lock held."""
    removed = 0
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp") and not temp_in_use(path.parent / name):
            try:
                os.unlink(path.parent / name)
                removed += 1
            except OSError:
                pass
    return removed


class RawLine(NamedTuple):
    """One line of a file: its bytes without the newline and where it sits.

    ``data`` is ``None`` for a line longer than MAX_LINE_BYTES, which is skipped.
    ``terminated`` is False only for a final line with no newline.
    """

    start: int
    end: int
    data: bytes | None
    terminated: bool


def iter_raw_lines(
    fd: int, *, start: int = 0, stop: int | None = None, recorder: LineRecorder | None = None
) -> Iterator[RawLine]:
    """Split bytes ``[start, stop)`` of an open file on ``\\n`` only, in bounded memory.

    A line within one read chunk is sliced from it; a longer one is read in one
    ``pread`` once its newline is found, and only when it is at most MAX_LINE_BYTES,
    so an oversized line never costs more than a chunk of memory.  A ``recorder`` is
    told of every line before it is yielded (the bytes the caller gets, and its newline).
    """
    if stop is None:
        stop = os.fstat(fd).st_size
    pos = start
    line_start = start
    chunk = b""
    chunk_pos = start
    while pos < stop:
        chunk = os.pread(fd, min(READ_CHUNK, stop - pos), pos)
        if not chunk:
            break
        chunk_pos = pos
        pos += len(chunk)
        cursor = 0
        while True:
            newline = chunk.find(b"\n", cursor)
            if newline < 0:
                break
            end = chunk_pos + newline + 1
            data = _line_bytes(fd, line_start, end - 1, chunk, chunk_pos)
            if recorder is not None:
                _record(recorder, data, line_start, end, terminated=True)
            yield RawLine(line_start, end, data, True)
            line_start = end
            cursor = newline + 1
    if pos > line_start:
        data = _line_bytes(fd, line_start, pos, chunk, chunk_pos)
        if recorder is not None:
            _record(recorder, data, line_start, pos, terminated=False)
        yield RawLine(line_start, pos, data, False)


def _record(recorder: LineRecorder, data: bytes | None, start: int, end: int, *, terminated: bool) -> None:
    if data is None:
        if terminated:  # an oversized unterminated tail is never indexed: nothing to prove
            recorder.skip(start, end)
    else:
        recorder.read(data, end, terminated=terminated)


def _line_bytes(fd: int, start: int, stop: int, chunk: bytes, chunk_pos: int) -> bytes | None:
    """Bytes ``[start, stop)``: from the current chunk when it holds them, else one read; None if too long."""
    if stop - start > MAX_LINE_BYTES:
        return None
    if start >= chunk_pos:
        return chunk[start - chunk_pos : stop - chunk_pos]
    return os.pread(fd, stop - start, start)


BLOCK_BYTES = 8 * 1024 * 1024


class LineBlock(NamedTuple):
    """Whole lines of a file in one piece: ``data[:length]`` holds bytes ``[start, start + length)``.

    Every line there ends with ``\n`` except, in the last block, an unterminated final
    line; ``data`` may run on past ``length`` (the start of the next block's first
    line, not copied off).  ``data`` is ``None`` for a single line longer than
    MAX_LINE_BYTES without its newline (``length`` bytes, never read into memory).
    """

    start: int
    data: bytes | None
    length: int


def iter_line_blocks(fd: int, *, start: int = 0, stop: int, block: int = BLOCK_BYTES) -> Iterator[LineBlock]:
    """Bytes ``[start, stop)`` of an open file as blocks of whole lines, for scans that split lines themselves.

    Per-line objects cost more than the work a fast scan does per line, so this hands
    out large blocks cut at newlines; a line longer than ``block`` comes alone (or as
    a data-less block when longer than MAX_LINE_BYTES), found in bounded memory.
    ``start`` must be the start of a line.
    """
    pos = start
    while pos < stop:
        data = os.pread(fd, min(block, stop - pos), pos)
        if not data:
            return
        cut = data.rfind(b"\n") + 1
        if pos + len(data) >= stop:
            cut = len(data)  # the unterminated last line belongs to the last block
        if cut:
            yield LineBlock(pos, data, cut)
            pos += cut
            continue
        end = next_line_end(fd, pos + len(data), stop)  # one line longer than the block
        length = end - pos
        # A reader's limit leaves the newline out: a line of MAX_LINE_BYTES and its newline is read.
        text = length - 1 if os.pread(fd, 1, end - 1) == b"\n" else length
        yield LineBlock(pos, os.pread(fd, length, pos) if text <= MAX_LINE_BYTES else None, length)
        pos = end


def last_line_end(fd: int, size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes (0 when there is none)."""
    pos = size
    while pos > 0:
        chunk_start = max(0, pos - READ_CHUNK)
        newline = os.pread(fd, pos - chunk_start, chunk_start).rfind(b"\n")
        if newline >= 0:
            return chunk_start + newline + 1
        pos = chunk_start
    return 0


def next_line_end(fd: int, pos: int, stop: int) -> int:
    """The offset just after the next newline at or after ``pos``: ``stop`` when there is none, or
    where the file ends when it is shorter (it shrank)."""
    while pos < stop:
        chunk = os.pread(fd, min(READ_CHUNK, stop - pos), pos)
        if not chunk:
            return pos
        newline = chunk.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(chunk)
    return stop


def read_fd(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of an open file (fewer when it is shorter), read by position."""
    chunks = []
    position = 0
    while position < size:
        chunk = os.pread(fd, min(READ_CHUNK, size - position), position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def open_for_read(path: Path) -> int | None:
    """Open a canonical file for reading; ``None`` when it does not exist.

    Anything but a regular file at ``path`` raises NotRegularFileError (see open_regular).
    """
    try:
        return open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("open", path, exc) from exc


def read_regular_file(path: Path, *, max_bytes: int, follow_symlinks: bool = False) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see :func:`open_regular`).

    Repository content is input: the path may name a FIFO, a device such as
    ``/dev/zero``, a link or a huge file.  Raises ``FileNotFoundError`` when it does
    not exist, NotRegularFileError for anything but a regular file, StorageError
    otherwise (too large included).
    """
    try:
        fd = open_regular(path, os.O_RDONLY, follow_symlinks=follow_symlinks, max_bytes=max_bytes)
    except StorageError:
        raise
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path)) from exc
    except OSError as exc:
        raise storage_error("open", path, exc) from exc
    try:
        return read_capped(fd, path, max_bytes=max_bytes)
    finally:
        os.close(fd)


def read_capped(fd: int, path: Path, *, max_bytes: int) -> bytes:
    """Read an open file to its end, refusing it once it passes ``max_bytes`` (it may grow meanwhile)."""
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, min(READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise storage_error("read", path, OSError(errno.EFBIG, f"larger than {max_bytes} bytes"))
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
