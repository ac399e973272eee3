"""A digest of a file's leading bytes, kept per 1 MiB block so it can be extended without a re-read.

The index proves that the bytes it was built from are still the file's bytes by a
digest of every indexed byte.  One running SHA-256 over the whole prefix can only be
extended by the process that holds its state; kept per block, a later catch-up
resumes it from the recorded block digests and re-reads only the last, partial
block (which also checks the bytes just before the indexed end).  A rewrite digests
what it writes the same way, so the index can compare the two.

Packed form: ``FORMAT`` then one 16-byte digest per block, the last one of a
partial block when the length is not a whole number of blocks.
"""

from __future__ import annotations

import os
from typing import Any

from memstore.digests import sha256

BLOCK_BYTES = 1024 * 1024
DIGEST_BYTES = 16
FORMAT = b"mbd1"
READ_CHUNK = 1024 * 1024


def _blocks_for(length: int) -> int:
    return -(-length // BLOCK_BYTES)


class PrefixDigest:
    """The block digests of a file's first ``end`` bytes, fed in order."""

    __slots__ = ("_blocks", "_hasher", "end", "resumes")

    def __init__(self) -> None:
        self._blocks: list[bytes] = []
        self._hasher: Any = sha256()
        self.end = 0
        self.resumes = 0
        """How many catch-ups in a row resumed this digest instead of reading the bytes it covers."""

    @classmethod
    def of(cls, fd: int, end: int) -> PrefixDigest:
        digest = cls()
        digest.extend(fd, end)
        return digest

    @classmethod
    def resume(cls, packed: bytes, fd: int, end: int) -> PrefixDigest | None:
        """The digest of the first ``end`` bytes from its packed form, re-reading only the partial block.

        None when the packed form does not describe ``end`` bytes, or the partial block
        no longer holds what was digested.
        """
        blocks = _unpack(packed)
        if blocks is None or len(blocks) != _blocks_for(end):
            return None
        whole = end // BLOCK_BYTES
        digest = cls()
        digest._blocks = blocks[:whole]
        digest.end = whole * BLOCK_BYTES
        if digest.end < end:
            digest.extend(fd, end)
            if digest.end != end or digest._partial() != blocks[whole]:
                return None
        return digest

    @classmethod
    def sampled(cls, packed: bytes, fd: int, end: int, *, samples: int) -> PrefixDigest | None:
        """The digest of the first ``end`` bytes from its packed form, checked at a few blocks only.

        For a file whose writer digested it and whose stat says nobody wrote to it since
        (:func:`memstore.index.source.rewritten_prefix`): ``samples`` whole blocks, evenly
        spaced from the first to the last, and the partial block are read and must digest
        as packed.  None on any difference.
        """
        digest = cls.resume(packed, fd, end)
        if digest is None:
            return None
        whole = len(digest._blocks)
        picks = {(whole - 1) * i // max(1, samples - 1) for i in range(samples)} if whole else set()
        for block in sorted(picks):
            probe = cls()
            probe.end = block * BLOCK_BYTES
            probe.extend(fd, probe.end + BLOCK_BYTES)
            if probe._blocks != [digest._blocks[block]]:
                return None
        return digest

    def update(self, data: bytes | memoryview) -> None:
        """Digest ``data``, the bytes that follow the current end."""
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            room = BLOCK_BYTES - self.end % BLOCK_BYTES
            part = view[pos : pos + room]
            self._hasher.update(part)
            self.end += len(part)
            pos += len(part)
            if self.end % BLOCK_BYTES == 0:
                self._blocks.append(self._hasher.digest()[:DIGEST_BYTES])
                self._hasher = sha256()

    def extend(self, fd: int, end: int, *, direct: bool = False) -> None:
        """Digest the bytes from the current end up to ``end`` (stops early if the file is shorter).

        ``direct``: read around the page cache (:func:`memstore.direct_io.read_direct`).
        """
        if direct:
            from memstore.direct_io import read_direct

            read_direct(fd, self.end, end, self.update)
            return
        buffer = bytearray(READ_CHUNK)
        view = memoryview(buffer)
        while self.end < end:
            got = os.preadv(fd, [view[: min(READ_CHUNK, end - self.end)]], self.end)
            if got <= 0:
                break
            self.update(view[:got])

    def take(self, view: memoryview, at: int, *, end: int) -> None:
        """Digest the part of a chunk read at ``at`` that continues the digest, up to byte ``end``."""
        if at <= self.end < min(end, at + len(view)):
            stop = min(end, at + len(view)) - at
            self.update(view[self.end - at : stop])

    def _partial(self) -> bytes:
        digest: bytes = self._hasher.copy().digest()
        return digest[:DIGEST_BYTES]

    def pack(self) -> bytes:
        partial = [self._partial()] if self.end % BLOCK_BYTES else []
        return FORMAT + b"".join([*self._blocks, *partial])


def _unpack(packed: bytes) -> list[bytes] | None:
    if not packed.startswith(FORMAT) or (len(packed) - len(FORMAT)) % DIGEST_BYTES:
        return None
    return [packed[i : i + DIGEST_BYTES] for i in range(len(FORMAT), len(packed), DIGEST_BYTES)]
