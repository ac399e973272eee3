"""Writing a big new file around the page cache (``O_DIRECT``), and reading it once so, for a rewrite.

A rewrite writes a whole new copy of the catalog, and its fsync sends all of it to the
disk anyway.  Through the page cache every byte first needs a fresh page; on a virtual
machine whose host takes free guest memory back, that costs several seconds for
400 MB, many times what the disk itself takes.  Staged in one aligned buffer and
written ``O_DIRECT``, whole blocks go to the disk once.  Only whole aligned blocks go
direct: the last partial block and everything after it are written through the page
cache as usual (the flag cleared first), so any length works.  Where the file system
refuses ``O_DIRECT`` the writes are the ordinary ones.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import mmap
import os
import stat
from collections.abc import Callable, Sequence

from memstore.background import Background

ALIGN = 4096
"""Offset, length and buffer alignment of a direct write (a multiple of every common logical block size)."""
STAGE_BYTES = 1024 * 1024
"""Bytes staged per direct write (a multiple of ``ALIGN``)."""
O_DIRECT: int = getattr(os, "O_DIRECT", 0)
"""0 where the platform has no such flag (macOS): every write and read is then an ordinary one."""


class DirectWriter:
    """Appends to a new file, from offset 0, with whole-block direct writes while it can.

    Not thread-safe: one caller at a time (a rewrite hands its writes from thread to
    thread, never two at once).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer: mmap.mmap | None = None
        self._view = memoryview(b"")
        self._filled = 0
        self.direct_bytes = 0
        """Bytes written around the page cache so far."""
        if not O_DIRECT:
            return
        try:
            buffer = mmap.mmap(-1, STAGE_BYTES)  # page-aligned
        except OSError:
            return  # no memory for the stage (a low RLIMIT_AS): ordinary writes
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | O_DIRECT)
        except OSError:
            buffer.close()
            return  # the file system has no direct I/O: ordinary writes
        self._buffer = buffer
        self._view = memoryview(buffer)

    @property
    def direct(self) -> bool:
        """Whether writes still go around the page cache."""
        return self._buffer is not None

    def write(self, parts: Sequence[bytes | memoryview]) -> None:
        """Write the parts after what was written before, in order."""
        if self._buffer is None:
            from memstore.files import writev_all

            writev_all(self._fd, [memoryview(part) for part in parts])
            return
        for index, part in enumerate(parts):
            view = memoryview(part)
            pos = 0
            while pos < len(view):
                take = min(STAGE_BYTES - self._filled, len(view) - pos)
                self._view[self._filled : self._filled + take] = view[pos : pos + take]
                self._filled += take
                pos += take
                if self._filled == STAGE_BYTES:
                    self._write_staged(STAGE_BYTES)
                    if self._buffer is None:  # the file system refused: the rest goes buffered
                        self.write([view[pos:], *parts[index + 1 :]])
                        return

    def finish(self) -> bool:
        """Write out what is staged and go on with ordinary writes (before an fsync, or a discard).

        True when bytes were written (the file's times moved).
        """
        if self._buffer is None:
            return False
        staged = self._filled > 0
        whole = self._filled - self._filled % ALIGN
        if whole:
            self._write_staged(whole)
        if self._buffer is not None:
            rest = bytes(self._view[: self._filled])  # the partial block, moved to the front
            self._stop()
            from memstore.files import write_all

            write_all(self._fd, rest)
        return staged

    def close(self) -> None:
        """Free the buffer (the file itself is the caller's)."""
        buffer, view = self._buffer, self._view
        self._buffer, self._view = None, memoryview(b"")
        if buffer is not None:
            view.release()
            with contextlib.suppress(BufferError):  # a slice still held (an error's traceback): freed with it
                buffer.close()

    def _write_staged(self, size: int) -> None:
        """Write the first ``size`` staged bytes (a multiple of ``ALIGN``) directly; keep the rest staged."""
        from memstore.files import write_all

        try:
            written = os.write(self._fd, self._view[:size])
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            written = 0  # direct I/O accepted at open, refused here (alignment): write it the usual way
        self.direct_bytes += max(written, 0)
        if written < size:
            rest = bytes(self._view[written : self._filled])
            self._stop()
            write_all(self._fd, rest)
            return
        leftover = self._filled - size
        if leftover:
            self._view[:leftover] = self._view[size : self._filled]
        self._filled = leftover

    def _stop(self) -> None:
        """Clear ``O_DIRECT`` and drop the buffer (the staged bytes were taken out first)."""
        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~O_DIRECT)
        self._filled = 0
        self.close()


def read_direct(fd: int, start: int, end: int, feed: Callable[[memoryview], None]) -> int:
    """Hand ``feed`` bytes ``[start, end)`` of the open file, in order, read around the page cache.

    For one pass over a big file just written around it (a rewrite's proof): read
    through the cache, every byte would need a fresh page again.  The file is reopened
    ``O_DIRECT`` through ``/proc/self/fd`` (the very inode, checked); each block is read
    on a second thread while ``feed`` digests the one before (both release the GIL).
    Where the reopen or a read is refused the rest is read the ordinary way.  Returns
    where the reads ended (short of ``end`` at the end of the file).
    """
    direct = _reopen_direct(fd)
    pos = start
    if direct is not None:
        try:
            pos = _feed_direct(direct, start, end, feed)
        finally:
            os.close(direct)
    while pos < end:
        chunk = os.pread(fd, min(STAGE_BYTES, end - pos), pos)
        if not chunk:
            break
        feed(memoryview(chunk))
        pos += len(chunk)
    return pos


READ_BYTES = 4 * 1024 * 1024
"""Bytes per direct read (fewer, larger requests: measured faster than 1 MiB on a virtual disk)."""


PROC_FD = "/proc/self/fd/{}"
"""Where an open descriptor is opened again (procfs's link to the very file)."""


def _reopen_direct(fd: int) -> int | None:
    """A second, ``O_DIRECT`` descriptor of ``fd``'s file; None where that cannot be had safely.

    The link is resolved and compared with ``fd`` before it is opened: where ``/proc`` is
    not procfs, opening whatever is there (a FIFO blocks the open forever) is not safe.
    """
    if not O_DIRECT:
        return None
    path = PROC_FD.format(fd)
    try:
        if not _same_regular_file(os.fstat(fd), os.stat(path)):
            return None
    except OSError:
        return None
    try:
        direct = os.open(path, os.O_RDONLY | O_DIRECT | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:  # the link may have changed between the check and the open
        same = _same_regular_file(os.fstat(fd), os.fstat(direct))
    except OSError:
        same = False
    if not same:
        os.close(direct)
        return None
    return direct


def _same_regular_file(mine: os.stat_result, theirs: os.stat_result) -> bool:
    """Whether ``theirs`` is the very regular file that ``mine`` describes."""
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) and stat.S_ISREG(theirs.st_mode)


def _feed_direct(direct: int, start: int, end: int, feed: Callable[[memoryview], None]) -> int:
    """Read aligned blocks from ``start`` (rounded down) while they come whole; returns where feeding stopped."""
    buffers: list[mmap.mmap] = []
    try:
        buffers.extend(mmap.mmap(-1, READ_BYTES) for _ in range(2))  # page-aligned
    except OSError:  # no memory for them (a low RLIMIT_AS): the caller reads the ordinary way
        for buffer in buffers:
            buffer.close()
        return start
    views = [memoryview(buffer) for buffer in buffers]
    at = start - start % ALIGN
    pos = start

    def read(turn: int, offset: int) -> Background[int]:
        return Background(functools.partial(os.preadv, direct, [views[turn]], offset), name="memstore-direct-read")

    turn = 0
    reading = read(turn, at)
    try:
        while pos < end:
            try:
                got = reading.result()
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                return pos  # refused: the caller reads on the ordinary way
            whole = got == READ_BYTES and at + got < end
            if whole:  # the next block is read while this one is fed
                reading = read(1 - turn, at + got)
            stop = min(at + got, end)
            if stop > pos:
                feed(views[turn][pos - at : stop - at])
                pos = stop
            if not whole:
                return pos  # the end of the file or of the range (a short read: the rest the ordinary way)
            at += got
            turn = 1 - turn
        return pos
    finally:
        reading.abandon()  # a read in flight finishes before its buffer is freed
        for view, buffer in zip(views, buffers, strict=True):
            view.release()
            with contextlib.suppress(BufferError):  # ``feed`` kept a slice: freed with it
                buffer.close()
