"""The first entry of a catalog file with a given id, found by the file's bytes.

The team index keeps no id column, and its ``raw`` copy of each line is database
input (an edited ``raw`` hid entries from ``show``).  The file itself is searched
instead, at byte-search speed: a line holds the id's UTF-8 literally unless it
escapes something (a backslash), so only lines holding either are parsed, each
exactly as a catalog parse reads it (:func:`~memstore.index.lines.parse_range`:
a blank line or one that does not decode is no entry).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from memstore.files import READ_CHUNK, iter_raw_lines
from memstore.index.catalog_index import entry_at
from memstore.index.lines import parse_range
from memstore.index.sqltext import encodable
from memstore.jsonl import parse_json_bytes
from memstore.models import MemoryEntry, memory_entry_from_payload

_BACKSLASH = b"\\"


def first_entry_with_id(fd: int, memory_id: str) -> MemoryEntry | None:
    """The first entry in file order whose id is ``memory_id``; None when the file holds none."""
    needles = [memory_id.encode("utf-8"), _BACKSLASH] if encodable(memory_id) else [_BACKSLASH]
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        data = os.pread(fd, min(READ_CHUNK, size - pos), pos)
        if not data:
            break
        cut = len(data) if pos + len(data) >= size else data.rfind(b"\n") + 1
        if cut == 0:  # one line longer than a chunk: parsed on its own
            stop = next(iter_raw_lines(fd, start=pos, stop=size)).end
            found = _entry_in(fd, pos, stop, memory_id)
            if found is not None:
                return found
            pos = stop
            continue
        for start, stop in _candidates(data, cut, needles):
            # Within a chunk, so shorter than MAX_LINE_BYTES: decoded as parse_range decodes a line.
            line = data[start : stop - 1] if data[stop - 1 : stop] == b"\n" else data[start:stop]
            entry = _with_id(line, memory_id)
            if entry is not None:
                return entry
        pos += cut
    return None


def _candidates(data: bytes, cut: int, needles: list[bytes]) -> Iterator[tuple[int, int]]:
    """(start, stop) of each line in ``data[:cut]`` holding a needle, in order (whole lines: ``cut`` ends one)."""
    next_at = [data.find(needle, 0, cut) for needle in needles]
    pos = 0
    while True:
        found = [at for at in next_at if at >= 0]
        if not found:
            return
        at = min(found)
        start = data.rfind(b"\n", 0, at) + 1
        newline = data.find(b"\n", at, cut)
        stop = cut if newline < 0 else newline + 1
        yield start, stop
        pos = stop
        next_at = [
            old if old < 0 or old >= pos else data.find(needle, pos, cut)
            for old, needle in zip(next_at, needles, strict=True)
        ]


def _with_id(line: bytes, memory_id: str) -> MemoryEntry | None:
    """``decode_entry(line)`` when its id is ``memory_id``, else None (the id read first: most lines differ)."""
    try:
        payload = parse_json_bytes(line)
    except ValueError:
        return None
    found = payload.get("memory_id") if isinstance(payload, Mapping) else None
    if not isinstance(found, str) or found.strip() != memory_id:
        return None
    entry = memory_entry_from_payload(payload)
    return entry if entry is not None and entry.memory_id == memory_id else None


def _entry_in(fd: int, start: int, stop: int, memory_id: str) -> MemoryEntry | None:
    parsed = parse_range(fd, start, stop)
    rows = parsed.rows if parsed.tail is None else [*parsed.rows, parsed.tail]
    for row in rows:
        entry = entry_at(fd, row[0], row[1])
        if entry.memory_id == memory_id:
            return entry
    return None
