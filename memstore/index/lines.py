"""Parsing a byte range of a catalog file into index rows: one definition, here or in a worker.

A full build of a large file spends most of its time in Python turning lines into
rows, while SQLite's share (inserts, the word index) runs in C.  The parse of disjoint
byte ranges is independent, so a build hands ranges to a worker process and inserts
what comes back, in file order, while the worker parses the next range: both cores
work.  The worker runs exactly :func:`parse_range`, the function an in-process catch-up
runs, so the rows never depend on where they were parsed.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memstore.files import iter_raw_lines, next_line_end
from memstore.index.sqltext import encodable, sql_safe
from memstore.index.terms import has_long_run, marks_text
from memstore.jsonl import decode_entry, is_blank
from memstore.lines_seen import LineRecorder, LinesSeen
from memstore.logger import LazyLogger
from memstore.models import MemoryEntry, tag_bonus

log = LazyLogger(__name__)

RANGE_BYTES = 8 * 1024 * 1024
"""Bytes a worker parses per task: large enough to amortise the hand-over, small enough to stream."""
PARALLEL_BYTES = 48 * 1024 * 1024
"""A build parses in a worker process only when at least this much is to be read."""
IN_FLIGHT = 2
"""Ranges handed to each worker ahead of the one being inserted (bounds the memory parsed rows take)."""
WORKERS = 2
"""Parse workers: parsing costs about twice what inserting the rows does, so two keep this process busy."""

Row = tuple[Any, ...]
"""(offset, length, the doc columns of :func:`row_values`)."""


class ParsedRange:
    """The rows of one byte range, in file order, and what else its lines were.

    ``end`` is where the last complete line of the range ends (the source is indexed up to
    here); ``tail`` an unterminated last line that parses (the end of the file only);
    ``seen`` what the parse read, for the build to prove the file still holds it when it is
    digested.
    """

    __slots__ = ("blank", "corrupt", "end", "rows", "seen", "tail", "tail_end")

    def __init__(self, *, end: int = 0) -> None:
        self.rows: list[Row] = []
        self.end = end
        self.blank = 0
        self.corrupt = 0
        self.tail: Row | None = None
        self.tail_end: int | None = None
        self.seen: LinesSeen | None = None

    def plain(self) -> tuple[Any, ...]:
        """Builtins only (lists, tuples, str, bytes, int, None): what ``marshal`` carries from a worker.

        Unmarshalling a range costs the parent less CPU than unpickling it, and marshalling
        costs the worker a quarter of pickling (both ends are this module, and marshal keeps
        lone surrogates: odd rows' ids survive the trip).
        """
        seen = None if self.seen is None else (*self.seen[:3], tuple(self.seen.skipped))
        return (self.rows, self.end, self.blank, self.corrupt, self.tail, self.tail_end, seen)

    @classmethod
    def from_plain(cls, plain: tuple[Any, ...]) -> ParsedRange:
        """The range :meth:`plain` described (TypeError or ValueError when it is not such a tuple)."""
        rows, end, blank, corrupt, tail, tail_end, seen = plain
        if not isinstance(rows, list) or not all(type(row) is tuple for row in rows):
            raise TypeError("parsed rows are not a list of tuples")
        # Every other field is checked too: one of another type would fail later, deep in the build.
        if not all(type(count) is int for count in (end, blank, corrupt)):
            raise TypeError("a parsed range's end or counts are not integers")
        if (tail is not None and type(tail) is not tuple) or (tail_end is not None and type(tail_end) is not int):
            raise TypeError("a parsed range's tail is not a row and its end")
        if seen is not None and not _plain_seen(seen):
            raise TypeError("what a parsed range saw is not (start, stop, digest, skipped lines)")
        parsed = cls(end=end)
        parsed.rows, parsed.blank, parsed.corrupt = rows, blank, corrupt
        parsed.tail, parsed.tail_end = tail, tail_end
        parsed.seen = None if seen is None else LinesSeen(*seen)
        return parsed


def _plain_seen(seen: object) -> bool:
    """Whether ``seen`` is what :meth:`ParsedRange.plain` makes of a LinesSeen."""
    if type(seen) is not tuple or len(seen) != 4:
        return False
    start, stop, digest, skipped = seen
    return (
        type(start) is int
        and type(stop) is int
        and type(digest) is bytes
        and type(skipped) is tuple
        and all(type(line) is tuple and len(line) == 2 and all(type(at) is int for at in line) for line in skipped)
    )


RowValues = tuple[str | None, str, str, str | None, int, str | None, str | None, str, str, int]


def row_values(entry: MemoryEntry) -> RowValues:
    """The ``doc`` columns (mid, c, t, created_at, bonus, br, run, mc, mt, odd) an entry is indexed as.

    ``c`` is Python's ``content.lower()`` and ``t`` the tags joined by newlines (a
    token never holds whitespace, so it cannot span two tags).  Entries SQLite cannot
    hold exactly (lone surrogates, NUL), entries with a newline inside a tag (``t``
    would not say where one tag ends, which the tag filter needs) and entries with a run
    of term characters too long for one FTS5 term become *odd* rows, scored and filtered
    in Python (their ``mid`` is kept when it is encodable).
    """
    content = entry.content.lower()
    tags = "\n".join(entry.tags)
    if (
        sql_safe(content)
        and sql_safe(tags)
        and not any("\n" in tag for tag in entry.tags)
        and encodable(entry.memory_id)
        and encodable(entry.created_at)
        and sql_safe(entry.branch_name)
        and sql_safe(entry.run_id)
        and not has_long_run((content, tags))
    ):
        return (
            entry.memory_id,
            content,
            tags,
            entry.created_at,
            tag_bonus(entry.tags),
            entry.branch_name,
            entry.run_id,
            marks_text(content),
            marks_text(tags),
            0,
        )
    # An odd row keeps its id when SQLite can hold it, so that ``show`` finds it without decoding.
    return (entry.memory_id if encodable(entry.memory_id) else None, "", "", None, 0, None, None, "", "", 1)


def parse_range(fd: int, start: int, stop: int) -> ParsedRange:
    """The index rows of the lines in bytes ``[start, stop)`` of an open catalog file."""
    parsed = ParsedRange(end=start)
    recorder = LineRecorder(start)
    for raw in iter_raw_lines(fd, start=start, stop=stop, recorder=recorder):
        if not raw.terminated:
            entry = None if is_blank(raw.data) else decode_entry(raw.data)
            if entry is not None:
                parsed.tail = (raw.start, raw.end - raw.start, *row_values(entry))
                parsed.tail_end = raw.end
            break
        parsed.end = raw.end
        if is_blank(raw.data):
            parsed.blank += 1
            continue
        entry = decode_entry(raw.data)
        if entry is None:
            parsed.corrupt += 1
            continue
        parsed.rows.append((raw.start, raw.end - raw.start - 1, *row_values(entry)))
    parsed.seen = recorder.seen()
    return parsed


def boundaries(fd: int, start: int, stop: int, step: int) -> list[int]:
    """Line starts from ``start`` to ``stop``, about ``step`` bytes apart (each just after a newline)."""
    edges = [start]
    target = start + step
    while target < stop:
        found = next_line_end(fd, target, stop)
        if found >= stop:
            break
        edges.append(found)
        target = found + step
    edges.append(stop)
    return edges


def parsed_ranges(path: Path, fd: int, start: int, stop: int) -> Iterator[ParsedRange]:
    """The rows of bytes ``[start, stop)`` of the open file ``fd``, range by range, in file order.

    Large files are parsed by worker processes ahead of the caller (range i by worker
    i mod WORKERS); any trouble with a worker (it cannot start, dies, or finds another
    file at the path) only means its ranges are parsed here instead, so the result is the
    same either way.
    """
    cores = os.cpu_count() or 1
    if stop - start < PARALLEL_BYTES or cores < 2:
        yield parse_range(fd, start, stop)
        return
    from memstore.index.line_worker import LineWorker

    ranges = list(itertools.pairwise(boundaries(fd, start, stop, RANGE_BYTES)))
    st = os.fstat(fd)
    workers: list[LineWorker | None] = [
        LineWorker.start(path, (st.st_dev, st.st_ino)) for _ in range(min(WORKERS, cores))
    ]
    asked = 0
    try:
        for index, (low, high) in enumerate(ranges):
            while asked < min(len(ranges), index + IN_FLIGHT * len(workers)):
                slot = asked % len(workers)
                worker = workers[slot]
                if worker is not None and not worker.ask(*ranges[asked]):
                    workers[slot] = None
                asked += 1
            slot = index % len(workers)
            worker = workers[slot]
            parsed = worker.answer() if worker is not None else None
            if parsed is None and worker is not None:
                log.info("a parse worker for %s stopped; parsing here from byte %d", path, low)
                worker.stop()
                workers[slot] = None
            yield parsed if parsed is not None else parse_range(fd, low, high)
    finally:
        for worker in workers:
            if worker is not None:
                worker.stop()
