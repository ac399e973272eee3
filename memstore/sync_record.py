"""The record group commit shares between writers: what fsyncs made durable, per inode.

It lives in the sync lock file (see :mod:`memstore.group_commit`) as one fixed-size
block with a CRC, rewritten in place by the holder of the sync lock.  It is a hint
between live processes, never needed after a crash: every claim it makes was true
when written (a claim is recorded after the fsync it reports), and a claim about
offsets the file no longer has is lowered before the next append.  The lock file is
untrusted like every lock file: a block that does not check out reads as empty,
which only costs fsyncs.

Per inode (the two most recent; older ones fall out):

* ``durable``: a successful fsync began when the file had this many bytes;
* ``lost``: ``[from, to)`` an fsync failed while these bytes waited: never durable;
* ``unsure``: ``[from, to)`` a leader died during an fsync while these bytes waited:
  only each writer's own fsync can vouch for them.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass, field
from enum import Enum

NEVER = 1 << 62
"""An offset past the end of any file: "to wherever the file ends"."""
SLOTS = 2
MAGIC = b"msgc\x01\x00\x00\x00"
_SLOT = struct.Struct("<QQqqqqq")
_SYNCING = struct.Struct("<QQq")
_CRC = struct.Struct("<I")
RECORD_BYTES = len(MAGIC) + SLOTS * _SLOT.size + _SYNCING.size + _CRC.size


class Verdict(Enum):
    COVERED = "covered"
    """An fsync that began after these bytes were written succeeded."""
    LOST = "lost"
    """An fsync failed while these bytes waited: they may never reach the disk."""
    NEEDS_FSYNC = "needs fsync"


@dataclass(slots=True)
class InodeState:
    dev: int
    ino: int
    durable: int = 0
    lost_from: int = 0
    lost_to: int = 0
    unsure_from: int = 0
    unsure_to: int = 0

    def offsets(self) -> tuple[int, ...]:
        return (self.durable, self.lost_from, self.lost_to, self.unsure_from, self.unsure_to)


def _overlaps(start: int, end: int, low: int, high: int) -> bool:
    return low < high and start < high and end > low


@dataclass(slots=True)
class SyncRecord:
    inodes: list[InodeState] = field(default_factory=list)
    """Most recently added first."""
    syncing: tuple[int, int, int] | None = None
    """(dev, ino, size) of an fsync announced and not yet reported: in flight, or its leader died."""

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
        if end <= state.durable and not _overlaps(start, end, state.unsure_from, state.unsure_to):
            return Verdict.COVERED
        return Verdict.NEEDS_FSYNC

    def reaches_past(self, dev: int, ino: int, size: int) -> bool:
        """Some offset recorded for this inode lies past ``size``: the file shrank or the inode is new."""
        state = self.find(dev, ino)
        if state is not None and max(state.offsets()) > size:
            return True
        return self.syncing is not None and self.syncing[:2] == (dev, ino) and self.syncing[2] > size

    # ------------------------------------------------------------- updates (sync lock held)

    def _state(self, dev: int, ino: int) -> InodeState:
        state = self.find(dev, ino)
        if state is None:
            state = InodeState(dev, ino)
            self.inodes = [state, *self.inodes][:SLOTS]
        return state

    def mark_durable(self, dev: int, ino: int, synced_to: int) -> None:
        state = self._state(dev, ino)
        state.durable = max(state.durable, synced_to)

    def mark_lost(self, dev: int, ino: int, held: int) -> None:
        """An fsync failed when the file had ``held`` bytes: everything not yet durable is lost.

        Ranges merge: a second failure widens the range rather than forgetting the first.
        """
        state = self._state(dev, ino)
        if state.lost_from < state.lost_to:
            state.lost_from = min(state.lost_from, state.durable)
            state.lost_to = max(state.lost_to, held)
        else:
            state.lost_from, state.lost_to = state.durable, held

    def mark_unsure(self, dev: int, ino: int, held: int) -> None:
        """A leader died mid-fsync when the file had at most ``held`` bytes."""
        state = self._state(dev, ino)
        if state.unsure_from < state.unsure_to:
            state.unsure_from = min(state.unsure_from, state.durable)
            state.unsure_to = max(state.unsure_to, held)
        else:
            state.unsure_from, state.unsure_to = state.durable, held

    def clamp(self, dev: int, ino: int, size: int) -> None:
        """Lower every offset of this inode to ``size`` (the file is that long now)."""
        state = self.find(dev, ino)
        if state is not None:
            state.durable = min(state.durable, size)
            state.lost_from, state.lost_to = min(state.lost_from, size), min(state.lost_to, size)
            state.unsure_from, state.unsure_to = min(state.unsure_from, size), min(state.unsure_to, size)
        if self.syncing is not None and self.syncing[:2] == (dev, ino):
            self.syncing = (dev, ino, min(self.syncing[2], size))

    # ------------------------------------------------------------- bytes

    def pack(self) -> bytes:
        slots = [*self.inodes, *(InodeState(0, 0) for _ in range(SLOTS - len(self.inodes)))]
        body = MAGIC + b"".join(_SLOT.pack(s.dev, s.ino, *s.offsets()) for s in slots[:SLOTS])
        body += _SYNCING.pack(*(self.syncing or (0, 0, 0)))
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def unpack(cls, data: bytes) -> SyncRecord | None:
        """The record in ``data``; an empty record for no bytes; None for bytes that do not check out."""
        if not data:
            return cls()
        if len(data) < RECORD_BYTES or not data.startswith(MAGIC):
            return None
        body, (crc,) = data[: RECORD_BYTES - _CRC.size], _CRC.unpack_from(data, RECORD_BYTES - _CRC.size)
        if zlib.crc32(body) != crc:
            return None
        inodes = []
        for n in range(SLOTS):
            dev, ino, *offsets = _SLOT.unpack_from(body, len(MAGIC) + n * _SLOT.size)
            if ino:
                if min(offsets) < 0:
                    return None
                inodes.append(InodeState(dev, ino, *offsets))
        dev, ino, size = _SYNCING.unpack_from(body, len(MAGIC) + SLOTS * _SLOT.size)
        return cls(inodes, (dev, ino, size) if ino else None)

    @classmethod
    def read(cls, fd: int) -> SyncRecord | None:
        try:
            return cls.unpack(os.pread(fd, RECORD_BYTES, 0))
        except OSError:
            return None

    def write(self, fd: int) -> None:
        data = self.pack()
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.EIO, "short write of the sync record")
