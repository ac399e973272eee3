"""Rows walked newest first must tile the file back from its end.

A row of the team index names a line (checked by ``entry_at``), but the rows
themselves are input: an edited row id, a deleted or duplicated row, or a state that
claims the file current while rows are missing would reorder or hide entries.  The
local file is what proves them: walking the rows in id order downwards from the size
the snapshot was just proven current for (``SourceState.is_current`` compared it with the
open file's fstat; a line appended after that proof is not the index's), each row's line must end exactly where the
previous one began, or the bytes between must hold no entry (blank and corrupt lines
have no row).  A walk that passes has read, in file order, every entry of the file
after the last row it reached, so a list answered from those rows is the scan's.
"""

from __future__ import annotations

import os

from memstore.files import MAX_LINE_BYTES
from memstore.index.base import StaleRowError
from memstore.index.lines import parse_range


def whole_line(fd: int, off: object, length: object) -> None:
    """The row names one whole line of the file (a newline or the start before it, a newline or
    the end after it, none inside): what the walk needs of a row it does not decode."""
    if not (type(off) is int and type(length) is int and off >= 0 and 0 <= length <= MAX_LINE_BYTES):
        raise StaleRowError(f"a row names no line ({off!r}, {length!r})")
    before = 1 if off > 0 else 0
    data = os.pread(fd, length + before + 1, off - before)
    if (
        len(data) < before + length
        or (before and data[:1] != b"\n")
        or b"\n" in data[before : before + length]
        or data[before + length :] not in (b"\n", b"")
    ):
        raise StaleRowError(f"no line of {length} bytes at {off}")


class RowChain:
    """The walk down one open file; ``start`` is where the rows walked so far begin."""

    def __init__(self, fd: int, size: int) -> None:
        """``size``: the file's size the snapshot was proven current for (what was indexed), not a
        later fstat: a line appended meanwhile is not the index's and must not fail the walk."""
        self.fd = fd
        self.size = size
        self.start = self.size

    def below(self, off: int) -> None:
        """Walk on below a row already checked at ``off`` (a walk that starts inside the file)."""
        self.start = off

    def down(self, off: int, length: int) -> None:
        """The next older row, whose line ``entry_at`` or :func:`whole_line` has already checked."""
        end = off + length + (1 if off + length < self.size else 0)
        if end > self.start:
            raise StaleRowError(f"the row at {off} is out of file order")
        if end < self.start:
            self._no_entry(end, self.start)
        self.start = off

    def bottom(self) -> None:
        """Every row was walked: nothing before the oldest one is an entry."""
        if self.start > 0:
            self._no_entry(0, self.start)
        self.start = 0

    def _no_entry(self, start: int, stop: int) -> None:
        parsed = parse_range(self.fd, start, stop)
        if parsed.rows or parsed.tail is not None:
            raise StaleRowError(f"an entry of the file between {start} and {stop} has no row")
