"""What the index remembers about a canonical file, and how it decides what changed.

Staleness is decided by (device, inode, size, mtime_ns) plus fingerprints of the
file's head and of the bytes just before the indexed offset, never by mtime alone.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from enum import Enum

from memstore.files import RACY_WINDOW_NS

FINGERPRINT_BYTES = 4096


def fingerprint(fd: int, start: int, length: int) -> bytes:
    data = os.pread(fd, length, start) if length > 0 else b""
    return hashlib.blake2b(data, digest_size=16).digest()


def head_fingerprint(fd: int, indexed_to: int) -> bytes:
    return fingerprint(fd, 0, min(FINGERPRINT_BYTES, indexed_to))


def edge_fingerprint(fd: int, indexed_to: int) -> bytes:
    length = min(FINGERPRINT_BYTES, indexed_to)
    return fingerprint(fd, indexed_to - length, length)


class Change(Enum):
    NONE = "none"
    GROWN = "grown"
    REPLACED = "replaced"


@dataclass(frozen=True, slots=True)
class SourceState:
    """One row of the ``source`` table."""

    name: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    indexed_to: int
    tail_end: int | None
    head_hash: bytes
    edge_hash: bytes
    recorded_ns: int
    rows: int
    corrupt: int
    blank: int

    @classmethod
    def load(cls, conn: sqlite3.Connection, name: str) -> SourceState | None:
        row = conn.execute(
            "SELECT name, dev, ino, size, mtime_ns, indexed_to, tail_end, head_hash, edge_hash, recorded_ns,"
            " rows, corrupt, blank FROM source WHERE name = ?",
            (name,),
        ).fetchone()
        return None if row is None else cls(*row)

    def save(self, conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO source(name, dev, ino, size, mtime_ns, indexed_to, tail_end, head_hash,"
            " edge_hash, recorded_ns, rows, corrupt, blank) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.name,
                self.dev,
                self.ino,
                self.size,
                self.mtime_ns,
                self.indexed_to,
                self.tail_end,
                self.head_hash,
                self.edge_hash,
                self.recorded_ns,
                self.rows,
                self.corrupt,
                self.blank,
            ),
        )

    @classmethod
    def of_file(
        cls,
        name: str,
        fd: int,
        st: os.stat_result,
        *,
        indexed_to: int,
        tail_end: int | None,
        rows: int,
        corrupt: int,
        blank: int,
    ) -> SourceState:
        return cls(
            name=name,
            dev=st.st_dev,
            ino=st.st_ino,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            indexed_to=indexed_to,
            tail_end=tail_end,
            head_hash=head_fingerprint(fd, indexed_to),
            edge_hash=edge_fingerprint(fd, indexed_to),
            recorded_ns=time.time_ns(),
            rows=rows,
            corrupt=corrupt,
            blank=blank,
        )

    def same_identity(self, st: os.stat_result) -> bool:
        return self.dev == st.st_dev and self.ino == st.st_ino

    def prefix_intact(self, fd: int) -> bool:
        """The indexed bytes still start and end the way they did (cheap: two 4 KiB reads)."""
        return head_fingerprint(fd, self.indexed_to) == self.head_hash and (
            edge_fingerprint(fd, self.indexed_to) == self.edge_hash
        )

    def classify(self, fd: int, st: os.stat_result) -> Change:
        """How the open file differs from what was indexed."""
        if not self.same_identity(st):
            return Change.REPLACED
        if st.st_size == self.size and st.st_mtime_ns == self.mtime_ns:
            racy = st.st_mtime_ns >= self.recorded_ns - RACY_WINDOW_NS
            if racy and not self.prefix_intact(fd):
                return Change.REPLACED
            return Change.NONE
        if st.st_size <= self.size:
            # Same size with a new mtime, or shrunk: edited in place or truncated.
            return Change.REPLACED
        if not self.prefix_intact(fd):
            return Change.REPLACED
        return Change.GROWN
