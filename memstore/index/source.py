"""What the index remembers about a canonical file, and how it decides what changed.

Staleness is decided by (device, inode, size, mtime, ctime) plus fingerprints of
the indexed bytes, never by mtime alone.

* A grown file is taken as an append only when a digest of *every* byte before
  the old indexed offset equals the one recorded: an edit anywhere in the indexed
  prefix, whatever its length, makes it a rebuild.  The digest is extended over
  the new bytes by the same catch-up that reads them, so an append costs one
  sequential read of the file (about 1.5 GB/s hashed; 8 MB at 20k entries, a few
  milliseconds) and no second pass.
* A file whose size and times are unchanged is current.  When its times are so
  close to the moment it was indexed that a same-size edit could hide inside one
  timestamp tick ("racy", as git calls it), the cheap sampled fingerprints are
  compared on each read: the head, the 4 KiB before the indexed offset and the
  sampled *body* (the whole prefix while it is small, evenly spaced 4 KiB blocks
  beyond that).  A same-size edit inside one tick that touches no sampled block is
  the one remaining blind spot; ``memstore reindex --check`` finds it.

The ``body_hash`` column holds the sampled body digest, the nonce of memstore's
append chain the state was recorded on, and the packed block digest of the whole
prefix (:mod:`memstore.block_digest`); no schema change: an index recorded before
holds another form, so its next append is a rebuild.  After memstore's own appends
(:mod:`memstore.append_chain`) the block digest is resumed rather than re-read: a
catch-up then reads the new lines, the last partial block and the samples.
"""

from __future__ import annotations

import functools
import itertools
import os
import sqlite3
import struct
import time
from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

from memstore.append_chain import AppendChain
from memstore.block_digest import PrefixDigest as PrefixDigest
from memstore.digests import blake2b
from memstore.files import RACY_WINDOW_NS
from memstore.lines_seen import LinesSeen, still_holds

FINGERPRINT_BYTES = 4096
WHOLE_BODY_BYTES = 1024 * 1024
"""Indexed prefixes up to this size are fingerprinted whole; larger ones by samples."""
BODY_SAMPLES = 16
DIGEST_BYTES = 16


ANCHOR = struct.Struct(">QI")
"""The nonce of the append chain whose end this state was recorded at (0: none), and how many
catch-ups in a row resumed the prefix digest on a chain rather than reading it."""
FULL_PROOF_EVERY = 64
"""Every so many chained catch-ups, the whole prefix is proven again: an edit another tool made
during one of memstore's appends (inside the write itself), or a forged chain, is found then."""


def _digest(*chunks: bytes) -> bytes:
    hasher = blake2b(digest_size=16)
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


class SourceState(NamedTuple):
    """One row of the ``source`` table: its fields are the table's columns, in order."""

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

    @classmethod
    def load(cls, conn: sqlite3.Connection, name: str) -> SourceState | None:
        row = conn.execute(f"SELECT {SOURCE_COLUMNS} FROM source WHERE name = ?", (name,)).fetchone()
        return None if row is None else cls(*row)

    def save(self, conn: sqlite3.Connection) -> None:
        marks = ",".join("?" * len(self))
        conn.execute(f"INSERT OR REPLACE INTO source({SOURCE_COLUMNS}) VALUES ({marks})", self)

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
        prefix: PrefixDigest | None = None,
        seen: Sequence[LinesSeen] = (),
        expected: bytes | None = None,
        chain: AppendChain | None = None,
        direct: bool = False,
    ) -> SourceState | None:
        """The state of the open file indexed up to ``indexed_to``; None if it no longer holds what was read.

        ``prefix`` is a digest already covering a leading part of the file (the
        verified old prefix of an append); only the bytes after it are read.  ``seen``
        is what the parse read: the pass that digests the file proves those bytes are
        still there, so the digest never vouches for bytes the rows were not made from.
        ``expected`` is the packed block digest the bytes before ``indexed_to`` must
        have (a file memstore wrote).  The sampled fingerprints are taken first: bytes
        changed after them fail the proof.  ``chain`` is memstore's append chain for the
        file: when it ends at ``st``, its nonce is kept, so later appends on it are
        known to be appends (:mod:`memstore.append_chain`).  ``direct``: the bytes not yet
        digested are read around the page cache (a file just written around it).
        """
        head_hash = head_fingerprint(fd, indexed_to)
        edge_hash = edge_fingerprint(fd, indexed_to)
        body_hash = body_fingerprint(fd, indexed_to)
        if prefix is None or prefix.end > indexed_to or expected is not None:
            prefix = PrefixDigest()
        if seen:
            if any(a.stop != b.start for a, b in itertools.pairwise(seen)) or seen[-1].stop < indexed_to:
                return None
            if prefix.end > seen[0].start:
                prefix = PrefixDigest()
            if prefix.end < seen[0].start:
                prefix.extend(fd, seen[0].start)
            if not still_holds(fd, seen, functools.partial(prefix.take, end=indexed_to)):
                return None
        if prefix.end < indexed_to:
            prefix.extend(fd, indexed_to, direct=direct)
        if prefix.end != indexed_to or (expected is not None and prefix.pack() != expected):
            return None
        nonce = chain.nonce if chain is not None and chain.ends_at(st) else 0
        return cls(
            name=name,
            dev=st.st_dev,
            ino=st.st_ino,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
            indexed_to=indexed_to,
            tail_end=tail_end,
            head_hash=head_hash,
            edge_hash=edge_hash,
            body_hash=body_hash + ANCHOR.pack(nonce, prefix.resumes) + prefix.pack(),
            recorded_ns=time.time_ns(),
            rows=rows,
            corrupt=corrupt,
            blank=blank,
        )

    def consistent(self) -> bool:
        """The recorded numbers can describe a file at all (a damaged or forged row cannot be followed).

        An unterminated tail lies after the indexed bytes and within the file; a catch-up
        would otherwise drop the newest row for a tail that is not there.
        """
        numbers = (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns, self.indexed_to, self.rows,
                   self.corrupt, self.blank, self.recorded_ns)  # fmt: skip
        if any(type(value) is not int for value in numbers) or min(self.size, self.indexed_to, self.rows) < 0:
            return False
        if not isinstance(self.body_hash, bytes) or self.indexed_to > self.size:
            return False
        return self.tail_end is None or (type(self.tail_end) is int and self.indexed_to < self.tail_end <= self.size)

    def samples_intact(self, fd: int) -> bool:
        """The sampled fingerprints (head, edge, body samples) still match: the cheap racy check."""
        return (
            head_fingerprint(fd, self.indexed_to) == self.head_hash
            and edge_fingerprint(fd, self.indexed_to) == self.edge_hash
            and body_fingerprint(fd, self.indexed_to) == self.body_hash[:DIGEST_BYTES]
        )

    def _anchor(self) -> tuple[int, int]:
        """(chain nonce, chained catch-ups since the prefix was last read); (0, 0) when unreadable."""
        part = self.body_hash[DIGEST_BYTES : DIGEST_BYTES + ANCHOR.size] if isinstance(self.body_hash, bytes) else b""
        if len(part) != ANCHOR.size:
            return 0, 0
        nonce, resumes = ANCHOR.unpack(part)
        return int(nonce), int(resumes)

    @property
    def anchor(self) -> int:
        """The nonce of the append chain this state was recorded on; 0 for none."""
        return self._anchor()[0]

    @property
    def resumes(self) -> int:
        return self._anchor()[1]

    @property
    def _packed_prefix(self) -> bytes:
        if not isinstance(self.body_hash, bytes):
            return b""  # a damaged row: no digest, so the next change is a rebuild
        return self.body_hash[DIGEST_BYTES + ANCHOR.size :]

    def verified_prefix(self, fd: int) -> PrefixDigest | None:
        """The digest of every byte before ``indexed_to`` when it equals the recorded one, else None."""
        if not self.samples_intact(fd):
            return None
        prefix = PrefixDigest.of(fd, self.indexed_to)
        if prefix.end != self.indexed_to or prefix.pack() != self._packed_prefix:
            return None
        return prefix

    def appended_since(self, chain: AppendChain | None, st: os.stat_result) -> bool:
        """memstore's append chain says only its appends came between this state and ``st``."""
        if chain is None or not chain.ends_at(st) or (self.dev, self.ino) != (st.st_dev, st.st_ino):
            return False
        return (self.anchor != 0 and chain.nonce == self.anchor) or chain.starts_at(
            self.dev, self.ino, self.size, self.ctime_ns
        )

    def resumed_prefix(self, fd: int) -> PrefixDigest | None:
        """The recorded digest, resumed at ``indexed_to`` (re-reading its partial block), if the samples hold.

        None also when the prefix is due for its periodic full proof (``FULL_PROOF_EVERY``).
        """
        if self.resumes + 1 >= FULL_PROOF_EVERY or not self.samples_intact(fd):
            return None
        prefix = PrefixDigest.resume(self._packed_prefix, fd, self.indexed_to)
        if prefix is not None:
            prefix.resumes = self.resumes + 1
        return prefix

    def is_current(self, fd: int, st: os.stat_result) -> bool:
        """The open file is exactly what was indexed, as far as a read can afford to check."""
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (
            self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns,
        ):  # fmt: skip
            return False
        racy = max(st.st_mtime_ns, st.st_ctime_ns) >= self.recorded_ns - RACY_WINDOW_NS
        return not racy or self.samples_intact(fd)

    def classify(
        self, fd: int, st: os.stat_result, *, chain: AppendChain | None = None
    ) -> tuple[Change, PrefixDigest | None]:
        """How the open file differs from what was indexed.

        GROWN comes with the verified digest of the old prefix, for the catch-up to extend.
        After memstore's own appends (``chain``) that digest is resumed, not re-read.
        """
        if not self.consistent():
            return Change.REPLACED, None
        if self.is_current(fd, st):
            return Change.NONE, None
        if (self.dev, self.ino) != (st.st_dev, st.st_ino) or st.st_size < self.indexed_to:
            # Replaced, or cut back into what was indexed.
            return Change.REPLACED, None
        if self.appended_since(chain, st):
            prefix = self.resumed_prefix(fd)
            if prefix is not None:
                return Change.GROWN, prefix
        # Grown, touched, or changed only after the indexed bytes (a torn tail cut and a new
        # line appended): when every indexed byte is proven intact, only the rest is read.
        prefix = self.verified_prefix(fd)
        if prefix is None:
            return Change.REPLACED, None
        return Change.GROWN, prefix


REWRITE_SAMPLES = 8
"""Whole blocks of a file memstore just rewrote that are read to check the digest it computed."""


def rewritten_prefix(
    written: bytes, fd: int, st: os.stat_result, *, renamed: os.stat_result | None, resumes: int
) -> PrefixDigest | None:
    """The digest memstore's rewrite computed of the bytes it wrote, taken without reading them back.

    The rule of :mod:`memstore.append_chain`, applied to a rewrite: ctime cannot be set by
    other programs, and ``renamed`` is the new file's stat right after the rename that
    followed its last write and fsync.  When the open file still has that device, inode,
    size, mtime and ctime, nothing wrote to it since, so it holds the bytes the rewrite
    digested as it wrote them.  What remains unseen is the same as for a chain: another
    tool's same-size edit made within one timestamp tick of memstore's last write or of
    the rename (between the stat after the fsync and the one after the rename; with coarse
    timestamps any time within that tick, so there the rewrite records no ``renamed``:
    :func:`memstore.files.ctime_moves_at_once`), one written into the temp
    file between two of memstore's own writes to it (one after its last write refuses
    ``renamed``: :meth:`memstore.files.Replacement.commit`), and a local program forging
    stat values.  So
    the digest is accepted only where ``REWRITE_SAMPLES`` of its blocks and the partial
    block read back intact, and it counts as one of the ``FULL_PROOF_EVERY`` chained
    catch-ups (``resumes``: those of the state the rewrite replaced): when that many are
    due, None, and the caller reads the whole file.  ``memstore reindex --check`` finds
    such an edit at once.
    """
    if renamed is None or resumes + 1 >= FULL_PROOF_EVERY:
        return None
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (
        renamed.st_dev, renamed.st_ino, renamed.st_size, renamed.st_mtime_ns, renamed.st_ctime_ns,
    ):  # fmt: skip
        return None
    prefix = PrefixDigest.sampled(written, fd, st.st_size, samples=REWRITE_SAMPLES)
    if prefix is not None:
        prefix.resumes = resumes + 1
    return prefix


SOURCE_COLUMNS = ", ".join(SourceState._fields)
"""The columns of the ``source`` table."""


def record_state(conn: sqlite3.Connection, name: str, state: SourceState | None) -> bool:
    """Record a proven state, or none at all (the next catch-up then rebuilds); whether one was."""
    if state is None:
        SourceState.forget(conn, name)
        return False
    state.save(conn)
    return True
