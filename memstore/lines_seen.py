"""Proof that bytes read into an index earlier are the bytes a file holds now.

A build parses a file while other tools may write to it; the digest the index keeps
must describe the bytes that were parsed, not whatever the file holds by the time it
is taken.  A reader records what it saw of a byte range (a digest of every line it
read, and where the lines too long to read lay); one later pass over the file, the
same pass that digests it for the index, checks that record.  If they differ the
file changed under the build and its rows cannot be trusted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from memstore.digests import sha256

Hasher = Any
"""A running hashlib digest (hashlib names its type only privately)."""

PROOF_CHUNK = 1024 * 1024
NEWLINE = b"\n"


class LinesSeen(NamedTuple):
    """What a line reader saw of bytes ``[start, stop)`` of a file (picklable: workers return it)."""

    start: int
    stop: int
    digest: bytes
    skipped: tuple[tuple[int, int], ...] = ()
    """Lines too long to read, as ``(start, end)``: only where their newline lay was seen."""

    @classmethod
    def of_bytes(cls, start: int, data: bytes) -> LinesSeen:
        """All of ``data``, read whole from ``start``."""
        return cls(start, start + len(data), sha256(data).digest())


class LineRecorder:
    """Collects what a reader sees, line by line, into a :class:`LinesSeen`."""

    __slots__ = ("_hash", "_skipped", "start", "stop")

    def __init__(self, start: int) -> None:
        self.start = start
        self.stop = start
        self._hash: Hasher = sha256()
        self._skipped: list[tuple[int, int]] = []

    def read(self, data: bytes | memoryview, end: int, *, terminated: bool) -> None:
        """A line read, ending at ``end`` (``data`` without its newline when ``terminated``)."""
        self._hash.update(data)
        if terminated:
            self._hash.update(NEWLINE)
        self.stop = end

    def skip(self, start: int, end: int) -> None:
        """A line ``[start, end)`` too long to read: only its extent was seen."""
        self._skipped.append((start, end))
        self.stop = end

    def seen(self) -> LinesSeen:
        return LinesSeen(self.start, self.stop, self._hash.digest(), tuple(self._skipped))


Feed = Callable[[memoryview, int], None]
"""Told of every chunk the proof reads, with its file offset (the index digest rides along)."""


def still_holds(fd: int, seen: Sequence[LinesSeen], feed: Feed | None = None) -> bool:
    """Whether the file holds, in each recorded range, the bytes its reader saw then.

    Every byte of the ranges is read once, in order, and handed to ``feed`` as well, so a
    digest taken by ``feed`` describes exactly the bytes proven equal to those parsed.
    """
    for part in seen:
        hasher = sha256()
        skipped = list(part.skipped)
        pos = part.start
        while pos < part.stop:
            chunk = os.pread(fd, min(PROOF_CHUNK, part.stop - pos), pos)
            if not chunk:
                return False
            view = memoryview(chunk)
            if feed is not None:
                feed(view, pos)
            if not _take(hasher, view, pos, skipped):
                return False
            pos += len(chunk)
        if skipped or hasher.digest() != part.digest:
            return False
    return True


def _take(hasher: Hasher, view: memoryview, at: int, skipped: list[tuple[int, int]]) -> bool:
    """Hash the chunk's bytes outside skipped lines; a skipped line holds one newline, its last byte."""
    cursor = 0
    size = len(view)
    while cursor < size:
        if not skipped or skipped[0][0] >= at + size:
            hasher.update(view[cursor:])
            return True
        start, end = skipped[0]
        inside = max(start - at, cursor)
        hasher.update(view[cursor:inside])
        stop = min(end - at, size)
        line_end = end - at - 1
        body_stop = min(stop, line_end)
        if view[inside:body_stop].tobytes().find(NEWLINE) >= 0:
            return False
        if line_end < size:
            if view[line_end] != NEWLINE[0]:
                return False
            skipped.pop(0)
        cursor = stop
    return True
