"""The record group commit shares between writers: what fsyncs made durable, per inode.

It lives in the sync lock file (see :mod:`memstore.group_commit`) as one fixed-size
block with a CRC, rewritten in place under the sync lock.  It is a hint between live
processes, never needed after a crash: every claim it makes was true when written
(a claim is recorded after the fsync it reports), and a claim about offsets the file
no longer has is lowered before the next append.  The lock file is untrusted like
every lock file: a block that does not check out reads as empty, which only costs
fsyncs.

Per inode (the two most recent; older ones fall out):

* ``cuts``: how many times memstore has cut the file back (a claim is recorded only if
  no cut came between the writer looking at the file's size and recording it);
* ``durable``: ``[from, to)`` bytes a successful fsync vouches for: written after its
  descriptor was opened (``from``), and before it began (``to``); recorded by older
  versions only, still honoured (see :mod:`memstore.group_commit`);
* ``lost``: ``[from, to)`` bytes that may have been waiting when an fsync failed:
  never acknowledged, whatever fsync succeeds later.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass, field
from enum import Enum

from memstore.files import still_own_file

NEVER = 1 << 62
"""An offset past the end of any file: "to wherever the file ends"."""
SLOTS = 2
MAGIC = b"msgc\x02\x00\x00\x00"
_SLOT = struct.Struct("<QQqqqqq")
_CRC = struct.Struct("<I")
RECORD_BYTES = len(MAGIC) + SLOTS * _SLOT.size + _CRC.size


class Verdict(Enum):
    COVERED = "covered"
    """A successful fsync vouches for these bytes."""
    LOST = "lost"
    """An fsync failed while these bytes waited: they may never reach the disk."""
    NEEDS_FSYNC = "needs fsync"


@dataclass(slots=True)
class InodeState:
    dev: int
    ino: int
    cuts: int = 0
    durable_from: int = 0
    durable_to: int = 0
    lost_from: int = 0
    lost_to: int = 0

    def offsets(self) -> tuple[int, ...]:
        return (self.durable_from, self.durable_to, self.lost_from, self.lost_to)


def _overlaps(start: int, end: int, low: int, high: int) -> bool:
    return low < high and start < high and end > low


@dataclass(slots=True)
class SyncRecord:
    inodes: list[InodeState] = field(default_factory=list)
    """Most recently added first."""

    # ------------------------------------------------------------- questions

    def find(self, dev: int, ino: int) -> InodeState | None:
        for state in self.inodes:
            if (state.dev, state.ino) == (dev, ino):
                return state
        return None

    def verdict(self, dev: int, ino: int, start: int, end: int) -> Verdict:
        """What the record says about the bytes ``[start, end)`` of this inode."""
        state = self.find(dev, ino)
        if state is None:
            return Verdict.NEEDS_FSYNC
        if _overlaps(start, end, state.lost_from, state.lost_to):
            return Verdict.LOST
        if state.durable_from <= start and end <= state.durable_to:
            return Verdict.COVERED
        return Verdict.NEEDS_FSYNC

    def reaches_past(self, dev: int, ino: int, size: int) -> bool:
        """Some offset recorded for this inode lies past ``size``: the file shrank or the inode is new."""
        state = self.find(dev, ino)
        return state is not None and max(state.offsets()) > size

    def cuts(self, dev: int, ino: int) -> int:
        state = self.find(dev, ino)
        return 0 if state is None else state.cuts

    # ------------------------------------------------------------- updates (sync lock held)

    def _state(self, dev: int, ino: int) -> InodeState:
        state = self.find(dev, ino)
        if state is None:
            state = InodeState(dev, ino)
            self.inodes = [state, *self.inodes][:SLOTS]
        return state

    def mark_durable(self, dev: int, ino: int, opened_at: int, synced_to: int) -> None:
        """An fsync through a descriptor opened at ``opened_at`` bytes, begun at ``synced_to``, succeeded.

        Two claims that touch merge (every byte of the union is vouched for by one of
        them); otherwise the later one replaces the earlier, whose writers are done.
        """
        state = self._state(dev, ino)
        if state.durable_from < state.durable_to and opened_at <= state.durable_to and synced_to >= state.durable_from:
            state.durable_from = min(state.durable_from, opened_at)
            state.durable_to = max(state.durable_to, synced_to)
        elif synced_to > state.durable_to:
            state.durable_from, state.durable_to = opened_at, synced_to

    def mark_lost(self, dev: int, ino: int, opened_at: int, held: int) -> None:
        """An fsync through a descriptor opened at ``opened_at`` failed when the file had ``held`` bytes.

        Lost: every byte from the failing writer's own, or from the end of what a claim
        vouches for if that is earlier, to the end of the file.  A second failure widens
        the range rather than forgetting the first.
        """
        state = self._state(dev, ino)
        low = min(opened_at, state.durable_to)
        if state.lost_from < state.lost_to:
            state.lost_from, state.lost_to = min(state.lost_from, low), max(state.lost_to, held)
        else:
            state.lost_from, state.lost_to = low, held

    def cut(self, dev: int, ino: int, size: int) -> None:
        """The file is ``size`` bytes now, perhaps shorter than before: lower every offset, count the cut."""
        state = self._state(dev, ino)
        state.cuts += 1
        state.durable_from, state.durable_to = min(state.durable_from, size), min(state.durable_to, size)
        state.lost_from, state.lost_to = min(state.lost_from, size), min(state.lost_to, size)

    # ------------------------------------------------------------- bytes

    def pack(self) -> bytes:
        slots = [*self.inodes, *(InodeState(0, 0) for _ in range(SLOTS - len(self.inodes)))]
        body = MAGIC + b"".join(_SLOT.pack(s.dev, s.ino, s.cuts, *s.offsets()) for s in slots[:SLOTS])
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def unpack(cls, data: bytes) -> SyncRecord | None:
        """The record in ``data``; an empty record for no bytes; None for bytes that do not check out.

        Zeros read as no record too: the append chain, written further into the lock file,
        leaves them in front of it until the first record is written.
        """
        if not data.strip(b"\0"):
            return cls()
        if len(data) < RECORD_BYTES or not data.startswith(MAGIC):
            return None
        body, (crc,) = data[: RECORD_BYTES - _CRC.size], _CRC.unpack_from(data, RECORD_BYTES - _CRC.size)
        if zlib.crc32(body) != crc:
            return None
        inodes = []
        for n in range(SLOTS):
            dev, ino, cuts, *offsets = _SLOT.unpack_from(body, len(MAGIC) + n * _SLOT.size)
            if ino:
                if min(offsets) < 0:
                    return None
                inodes.append(InodeState(dev, ino, cuts, *offsets))
        return cls(inodes)

    @classmethod
    def read(cls, fd: int) -> SyncRecord | None:
        try:
            return cls.unpack(os.pread(fd, RECORD_BYTES, 0))
        except OSError:
            return None

    def write(self, fd: int) -> None:
        if not still_own_file(fd):
            raise OSError(errno.EMLINK, "the sync record was linked to another file: not written")
        data = self.pack()
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.EIO, "short write of the sync record")
