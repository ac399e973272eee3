"""What the index remembers about a canonical file, and how it decides what changed.

Staleness is decided by (device, inode, size, mtime, ctime) plus fingerprints of
the indexed bytes, never by mtime alone: the file head, the 4 KiB just before the
indexed offset, and a *body* fingerprint (the whole indexed prefix while it is
small, evenly spaced 4 KiB samples of it beyond that).  ctime cannot be set back
by a user, so an in-place edit that restores mtime is still seen; the body
samples catch a grown file whose middle was rewritten in place (which shifts the
bytes after the edit).  A same-size edit inside one timestamp tick that touches
no sampled block is the remaining blind spot; ``memstore reindex --check`` finds it.
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
WHOLE_BODY_BYTES = 1024 * 1024
"""Indexed prefixes up to this size are fingerprinted whole; larger ones by samples."""
BODY_SAMPLES = 16


def _digest(*chunks: bytes) -> bytes:
    hasher = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.digest()


def fingerprint(fd: int, start: int, length: int) -> bytes:
    return _digest(os.pread(fd, length, start) if length > 0 else b"")


def head_fingerprint(fd: int, indexed_to: int) -> bytes:
    return fingerprint(fd, 0, min(FINGERPRINT_BYTES, indexed_to))


def edge_fingerprint(fd: int, indexed_to: int) -> bytes:
    length = min(FINGERPRINT_BYTES, indexed_to)
    return fingerprint(fd, indexed_to - length, length)


def body_fingerprint(fd: int, indexed_to: int) -> bytes:
    """The whole prefix when small; otherwise BODY_SAMPLES blocks at positions fixed by its length."""
    if indexed_to <= WHOLE_BODY_BYTES:
        return fingerprint(fd, 0, indexed_to)
    span = indexed_to - FINGERPRINT_BYTES
    return _digest(*(os.pread(fd, FINGERPRINT_BYTES, span * i // (BODY_SAMPLES - 1)) for i in range(BODY_SAMPLES)))


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
    ctime_ns: int
    indexed_to: int
    tail_end: int | None
    head_hash: bytes
    edge_hash: bytes
    body_hash: bytes
    recorded_ns: int
    rows: int
    corrupt: int
    blank: int

    _COLUMNS = (
        "name, dev, ino, size, mtime_ns, ctime_ns, indexed_to, tail_end, head_hash, edge_hash, body_hash,"
        " recorded_ns, rows, corrupt, blank"
    )

    @classmethod
    def load(cls, conn: sqlite3.Connection, name: str) -> SourceState | None:
        row = conn.execute(f"SELECT {cls._COLUMNS} FROM source WHERE name = ?", (name,)).fetchone()
        return None if row is None else cls(*row)

    def save(self, conn: sqlite3.Connection) -> None:
        values = (
            self.name, self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns, self.indexed_to, self.tail_end,
            self.head_hash, self.edge_hash, self.body_hash, self.recorded_ns, self.rows, self.corrupt, self.blank,
        )  # fmt: skip
        marks = ",".join("?" * len(values))
        conn.execute(f"INSERT OR REPLACE INTO source({self._COLUMNS}) VALUES ({marks})", values)

    @staticmethod
    def forget(conn: sqlite3.Connection, name: str) -> None:
        """Drop the recorded state so the next catch-up rebuilds this source."""
        conn.execute("DELETE FROM source WHERE name = ?", (name,))

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
            ctime_ns=st.st_ctime_ns,
            indexed_to=indexed_to,
            tail_end=tail_end,
            head_hash=head_fingerprint(fd, indexed_to),
            edge_hash=edge_fingerprint(fd, indexed_to),
            body_hash=body_fingerprint(fd, indexed_to),
            recorded_ns=time.time_ns(),
            rows=rows,
            corrupt=corrupt,
            blank=blank,
        )

    def prefix_intact(self, fd: int) -> bool:
        """The indexed bytes still look as they did: head, edge and body fingerprints."""
        return (
            head_fingerprint(fd, self.indexed_to) == self.head_hash
            and edge_fingerprint(fd, self.indexed_to) == self.edge_hash
            and body_fingerprint(fd, self.indexed_to) == self.body_hash
        )

    def classify(self, fd: int, st: os.stat_result) -> Change:
        """How the open file differs from what was indexed."""
        if (self.dev, self.ino) != (st.st_dev, st.st_ino):
            return Change.REPLACED
        if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (self.size, self.mtime_ns, self.ctime_ns):
            racy = max(st.st_mtime_ns, st.st_ctime_ns) >= self.recorded_ns - RACY_WINDOW_NS
            if racy and not self.prefix_intact(fd):
                return Change.REPLACED
            return Change.NONE
        if st.st_size <= self.size:
            # Same size with new times, or shrunk: edited in place, truncated or touched.
            return Change.REPLACED
        if not self.prefix_intact(fd):
            return Change.REPLACED
        return Change.GROWN
