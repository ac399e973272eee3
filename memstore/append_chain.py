"""What memstore's own writers did to a file since a known state: appended, and nothing else.

The index proves a grown file's indexed prefix unchanged before it reads only the new
lines.  Re-reading the prefix costs a pass over the whole file (half a second at a
million entries) for every catch-up.  memstore's writers know better: each append is
made under the writer lock, which sees the file's size and ctime before and after.
They keep one *chain* per file in the sync lock file (beside the sync record):

* an append whose "before" equals the chain's end extends it to its "after";
* any other append starts a new chain (a fresh random nonce) at its "before", or at
  its "after" when it cut a torn tail first.

ctime cannot be set by other programs: every write, truncation or attribute change
moves it.  So when the file now is the chain's end, and the state the index recorded
is the chain's start or was its end when recorded (the index keeps the nonce), every
change between them was one of memstore's appends.  The writer stats the file right
before and right after its write, and a file longer than its append made it restarts
the chain.  What remains unseen: another tool's same-size edit made during the write
itself, or within one timestamp tick of it, and a chain forged by a local program
(which could as well forge the index).  So a chain is accepted only with the sampled
fingerprints intact, and every ``FULL_PROOF_EVERY`` chained catch-ups the whole prefix
is proven again (see :mod:`memstore.index.source`); ``memstore reindex --check`` finds
such an edit at once.  The record is a hint, like every lock file: it carries a CRC,
a record that does not check out reads as none, and with none the index re-reads the
prefix as before.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

from memstore.errors import StorageError
from memstore.files import open_regular, still_own_file

SYNC_LOCK_SUFFIX = ".sync.lock"


def sync_lock_path(path: Path) -> Path:
    """``memory.jsonl`` → ``memory.sync.lock``, which holds the chain: ignored by the store's ``*.lock`` rule."""
    return path.with_name(path.stem + SYNC_LOCK_SUFFIX)


CHAIN_OFFSET = 512
"""Where the chain lives in the sync lock file: past the sync record (offset 0, 124 bytes)."""
MAGIC = b"msac\x01\x00\x00\x00"
_BODY = struct.Struct("<8sQQQqqqq")
_CRC = struct.Struct("<I")
CHAIN_BYTES = _BODY.size + _CRC.size


def _nonce() -> int:
    """63 random bits, odd (never 0): from os.urandom, as ``secrets`` would, without importing it."""
    return (int.from_bytes(os.urandom(8), "little") >> 1) | 1


class AppendChain(NamedTuple):
    dev: int
    ino: int
    nonce: int
    start_size: int
    start_ctime_ns: int
    end_size: int
    end_ctime_ns: int

    @classmethod
    def after_append(
        cls, previous: AppendChain | None, before: os.stat_result | None, after: os.stat_result
    ) -> AppendChain:
        """The chain once an append took the file from ``before`` (None: it also cut it) to ``after``."""
        if previous is not None and before is not None and previous.ends_at(before):
            return cls(
                previous.dev, previous.ino, previous.nonce, previous.start_size, previous.start_ctime_ns,
                after.st_size, after.st_ctime_ns,
            )  # fmt: skip
        start = before if before is not None else after
        return cls(
            after.st_dev, after.st_ino, _nonce(), start.st_size, start.st_ctime_ns,
            after.st_size, after.st_ctime_ns,
        )  # fmt: skip

    def ends_at(self, st: os.stat_result) -> bool:
        return (self.dev, self.ino, self.end_size, self.end_ctime_ns) == (
            st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns,
        )  # fmt: skip

    def starts_at(self, dev: int, ino: int, size: int, ctime_ns: int) -> bool:
        return (self.dev, self.ino, self.start_size, self.start_ctime_ns) == (dev, ino, size, ctime_ns)

    def pack(self) -> bytes:
        body = _BODY.pack(
            MAGIC, self.dev, self.ino, self.nonce, self.start_size, self.start_ctime_ns,
            self.end_size, self.end_ctime_ns,
        )  # fmt: skip
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def unpack(cls, data: bytes) -> AppendChain | None:
        if len(data) < CHAIN_BYTES:
            return None
        body = data[: _BODY.size]
        (crc,) = _CRC.unpack_from(data, _BODY.size)
        if zlib.crc32(body) != crc:
            return None
        magic, *fields = _BODY.unpack(body)
        chain = cls(*fields)
        if magic != MAGIC or chain.nonce <= 0 or min(chain.start_size, chain.end_size) < 0:
            return None
        if chain.end_size < chain.start_size:
            return None
        return chain

    @classmethod
    def read(cls, fd: int) -> AppendChain | None:
        try:
            return cls.unpack(os.pread(fd, CHAIN_BYTES, CHAIN_OFFSET))
        except OSError:
            return None

    def write(self, fd: int, *, checked: bool = False) -> bytes:
        """Written by the writer holding the writer lock, into the sync lock file it owns; returns the bytes.

        ``checked``: the caller proved, holding the lock, that no other name links to the file.
        """
        if not checked and not still_own_file(fd):
            raise OSError(errno.EMLINK, "the sync lock was linked to another file: chain not written")
        data = self.pack()
        if os.pwrite(fd, data, CHAIN_OFFSET) != len(data):
            raise OSError(errno.EIO, "short write of the append chain")
        return data


def read_chain(sync_lock: Path) -> AppendChain | None:
    """The chain recorded beside a file, or None (no lock file, not a regular file, unreadable)."""
    try:
        fd = open_regular(sync_lock)
    except (OSError, StorageError):
        return None
    try:
        return AppendChain.read(fd)
    finally:
        os.close(fd)
