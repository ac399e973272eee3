"""A full scan of a catalog file: the reference the index must always agree with.

The scan is also the fallback whenever the index cannot be used, so it is kept
exact and reasonably quick (a cache keyed on the file's identity and size).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from memstore.entry_filter import NO_FILTER, EntryFilter
from memstore.files import RACY_WINDOW_NS, iter_raw_lines, open_for_read
from memstore.jsonl import decode_entry, is_blank
from memstore.models import MemoryEntry, memory_relevance_score, rank_matches


class ScannedEntry(NamedTuple):
    """An entry with its position: ``order`` is its line's start offset (file order)."""

    order: int
    entry: MemoryEntry


class ScanResult(NamedTuple):
    entries: tuple[ScannedEntry, ...]
    corrupt: int
    blank: int
    size: int


EMPTY_SCAN = ScanResult(entries=(), corrupt=0, blank=0, size=0)


def scan_fd(fd: int, *, size: int | None = None) -> ScanResult:
    """Read every line of an open catalog file (its first ``size`` bytes) into entries, counting corrupt lines."""
    entries: list[ScannedEntry] = []
    corrupt = blank = 0
    if size is None:
        size = os.fstat(fd).st_size
    for raw in iter_raw_lines(fd, stop=size):
        if is_blank(raw.data):
            blank += 1
            continue
        entry = decode_entry(raw.data)
        if entry is None:
            corrupt += 1
        else:
            entries.append(ScannedEntry(raw.start, entry))
    return ScanResult(tuple(entries), corrupt, blank, size)


class ScanCache:
    """Caches the last scan of one file, keyed on (dev, inode, size, mtime_ns, ctime_ns).

    The ctime is in the key because anyone can set the mtime back (``os.utime``,
    ``touch -r``, tools that preserve times), while the kernel moves the ctime on
    every change.  A file whose mtime or ctime lies within RACY_WINDOW_NS of the
    moment the cache was filled is scanned again (as git does): timestamps are
    coarse, so a same-size change in the same tick leaves every stat field as it was.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, int, int, int, int] | None = None
        self._filled_ns = 0
        self._result = EMPTY_SCAN

    def read(self) -> ScanResult:
        fd = open_for_read(self.path)
        if fd is None:
            return EMPTY_SCAN
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            racy = max(st.st_mtime_ns, st.st_ctime_ns) >= self._filled_ns - RACY_WINDOW_NS
            if key != self._key or racy:
                filled_ns = time.time_ns()  # before reading: a change during the scan stays racy
                self._result = scan_fd(fd, size=st.st_size)
                self._key = key
                self._filled_ns = filled_ns
            return self._result
        finally:
            os.close(fd)


def scan_search(
    result: ScanResult, tokens: Sequence[str], limit: int, entry_filter: EntryFilter = NO_FILTER
) -> list[MemoryEntry]:
    """The spec's search over scanned entries: match all tokens, score, order, take ``limit``."""
    if not tokens or limit == 0:
        return []
    scored = []
    for item in result.entries:
        entry = item.entry
        if not entry_filter.admits(entry):
            continue
        content = entry.content.lower()
        if all(token in content or any(token in tag for tag in entry.tags) for token in tokens):
            scored.append((memory_relevance_score(entry, tokens), entry.created_at, item.order, entry))
    return rank_matches(scored, limit)


def scan_list(result: ScanResult, limit: int, entry_filter: EntryFilter = NO_FILTER) -> list[MemoryEntry]:
    """Newest line first (reverse file order), not sorted by time."""
    if limit == 0:
        return []
    if entry_filter.empty:
        return [item.entry for item in reversed(result.entries[-limit:])]
    found: list[MemoryEntry] = []
    for item in reversed(result.entries):
        if entry_filter.admits(item.entry):
            found.append(item.entry)
            if len(found) == limit:
                break
    return found


def scan_show(result: ScanResult, memory_id: str) -> MemoryEntry | None:
    for item in result.entries:
        if item.entry.memory_id == memory_id:
            return item.entry
    return None
