"""A rewrite's copy of the lines it keeps, written from the scan's own reads, and the proof of it.

A rewrite reads the file once without the writer lock: each block the scan reads is
the block whose kept lines are written to the new file, so the copy is exactly what
the scan saw (a second read could see another tool's edit the scan did not).  That
one pass also records what it saw, in two digests: the block digest of the kept
bytes, which is the new file's own digest (the index compares it later), and a
SHA-256 of the dropped lines.  The dropped lines' places are known, so the two
digests together pin every byte read: under the lock, :meth:`CopySeen.holds` reads
the file again and proves it still holds those bytes before the copy is used.
"""

from __future__ import annotations

import errno
import functools
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memstore.background import Background
from memstore.block_digest import PrefixDigest
from memstore.digests import sha256
from memstore.files import BLOCK_BYTES, Replacement

NEWLINE = b"\n"
Ranges = Sequence[tuple[int, int]]
"""Sorted ``(start, length)`` of dropped lines."""


def split(view: memoryview, at: int, dropped: Ranges, index: int) -> tuple[list[memoryview], list[memoryview], int]:
    """The parts of a chunk read at file offset ``at`` outside and inside the dropped lines.

    ``dropped[index]`` is the first dropped line not wholly before the chunk; the
    index returned is the one to pass with the next chunk.
    """
    kept: list[memoryview] = []
    gone: list[memoryview] = []
    end = at + len(view)
    pos = at
    while index < len(dropped):
        start, length = dropped[index]
        if start >= end:
            break
        if start > pos:
            kept.append(view[pos - at : start - at])
            pos = start
        stop = min(start + length, end)
        gone.append(view[pos - at : stop - at])
        pos = stop
        if start + length > end:
            break  # the line goes on in the next chunk
        index += 1
    if pos < end:
        kept.append(view[pos - at :])
    return kept, gone, index


@dataclass(frozen=True, slots=True)
class CopySeen:
    """What the copy of bytes ``[0, upto)`` was made from."""

    upto: int
    dropped: tuple[tuple[int, int], ...]
    kept: bytes
    """The packed block digest of the kept bytes (the new file's digest so far)."""
    gone: bytes
    """SHA-256 of the dropped lines' bytes, in order."""

    def holds(self, fd: int) -> bool:
        """Whether the open file still holds, in ``[0, upto)``, every byte the copy was made from."""
        kept = PrefixDigest()
        gone = sha256()
        buffer = bytearray(BLOCK_BYTES)
        view = memoryview(buffer)
        index = pos = 0
        while pos < self.upto:
            got = os.preadv(fd, [view[: min(BLOCK_BYTES, self.upto - pos)]], pos)
            if got <= 0:
                return False
            kept_parts, gone_parts, index = split(view[:got], pos, self.dropped, index)
            for part in kept_parts:
                kept.update(part)
            for part in gone_parts:
                gone.update(part)
            pos += got
        return kept.pack() == self.kept and gone.digest() == self.gone


class KeptCopy:
    """Writes the kept parts of each block a scan reads into a new file, which digests them.

    The new file is opened (``open_replacement``) only at the first block that drops a
    line: a scan that finds nothing to drop writes nothing.  The kept bytes before that
    block are then read again and copied, and must digest as they did when scanned.
    The writing and digesting run on one worker thread, in block order, while the scan
    reads and looks at the next block: both release the GIL, the scan mostly holds it.
    At most ``AHEAD`` blocks wait for the worker, so memory stays bounded.
    """

    AHEAD = 2

    def __init__(self, fd: int, start: int, open_replacement: Callable[[], Replacement]) -> None:
        self.replacement: Replacement | None = None
        """The new file, once a block dropped a line (its digest then continues ``_digest``)."""
        self._fd = fd
        self._start = start
        self._open = open_replacement
        self._digest = PrefixDigest()
        self._gone: Any = sha256()
        self._changed = False
        """Bytes read again differ from what the scan read: the file changed under the copy."""
        self._pending: deque[Background[None]] = deque()

    @classmethod
    def into(cls, fd: int, replacement: Replacement) -> KeptCopy:
        """A copy that continues ``replacement`` (already holding what precedes the scan)."""
        copy = cls(fd, 0, lambda: replacement)
        copy.replacement = replacement
        return copy

    def block(self, view: memoryview, at: int, dropped: Ranges) -> None:
        """A block read at ``at``, with the lines the scan dropped from it (all inside it)."""
        self._submit(self._block, view, at, tuple(dropped))

    def long_line(self, start: int, end: int) -> None:
        """A line too long to hold in memory, kept: copied in chunks, each read once."""
        self._submit(self._long_line, start, end)

    def wait(self, *, check: bool = True) -> None:
        """Wait until every block handed over is written; with ``check``, raise the first error."""
        try:
            while self._pending:
                step = self._pending[0]  # left pending until it ended, so the finally waits for it
                if check:
                    step.result()
                else:
                    step.abandon()
                self._pending.popleft()
        finally:
            while self._pending:
                self._pending.popleft().abandon()

    def seen(self, upto: int, dropped: Ranges) -> CopySeen | None:
        """The record of the copy of ``[0, upto)``, for :meth:`CopySeen.holds` under the lock."""
        self.wait()
        digest = self._digest if self.replacement is None else self.replacement.hasher
        if digest is None or self._changed:
            return None
        return CopySeen(upto, tuple(dropped), digest.pack(), self._gone.digest())

    def _submit(self, step: Callable[..., None], *args: Any) -> None:
        while len(self._pending) >= self.AHEAD:
            self._pending[0].result()  # an error or a Ctrl-C leaves it for wait() to join
            self._pending.popleft()
        before = self._pending[-1] if self._pending else None
        # A thread per block, each starting once the one before has ended: block order, as
        # on one worker thread, without an executor (see :mod:`memstore.background`).
        self._pending.append(Background(functools.partial(_after, before, step, *args), name="memstore-rewrite-copy"))

    def _block(self, view: memoryview, at: int, dropped: Ranges) -> None:
        if dropped and self.replacement is None:
            self._open_at(at)
        kept, gone, _index = split(view, at, dropped, 0)
        self._keep(kept)
        for part in gone:
            self._gone.update(part)

    def _open_at(self, at: int) -> None:
        """Open the new file and copy the bytes before ``at`` into it (all kept), proving them again."""
        replacement = self._open()
        self.replacement = replacement
        replacement.copy(self._fd, [(self._start, at)])
        if replacement.hasher is None or replacement.hasher.pack() != self._digest.pack():
            self._changed = True

    def _keep(self, parts: Sequence[memoryview]) -> None:
        if self.replacement is not None:
            self.replacement.write_parts(parts)
        else:
            for part in parts:
                self._digest.update(part)

    def _long_line(self, start: int, end: int) -> None:
        pos = start
        while pos < end:
            chunk = os.pread(self._fd, min(BLOCK_BYTES, end - pos), pos)
            if not chunk:
                raise OSError(errno.EIO, "the file shrank while it was being copied")
            newline = chunk.find(NEWLINE)
            if 0 <= newline < end - pos - 1:
                self._changed = True  # a newline inside: a line the scan never looked at
            self._keep([memoryview(chunk)])
            pos += len(chunk)


def _after(before: Background[None] | None, step: Callable[..., None], *args: Any) -> None:
    """``step(*args)`` once ``before`` has ended, whatever its outcome (reported by its own result)."""
    if before is not None:
        before.wait()
    step(*args)
