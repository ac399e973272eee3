"""Which of the entries a quarantine moves the quarantine file records already: none is recorded twice.

``quarantine_by_branch`` appends the entries durably before it replaces memory.jsonl.
When the replace is refused (another tool kept writing the file) or the process dies in
between, the entries are in both files, and the caller tries again: the second call must
find them recorded and only remove them from memory.jsonl.

An entry is "the same" when its fields are: the canonical encoding of the entry parsed
from a quarantine line, with the line's own ``quarantine`` and ``provenance`` (and any key
an entry does not have) left out.  So a record written by an older memstore or another
tool, with other spacing or key order, counts; an entry with the same id but other
content does not (moving it records it, nothing is lost).  Records are counted, not just
noted: memory.jsonl may hold byte-identical copies of an entry, and each copy moved has
its record.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from memstore.errors import StorageError
from memstore.files import MAX_LINE_BYTES, iter_line_blocks, open_for_read, storage_error
from memstore.jsonl import decode_entry, encode_entry
from memstore.models import MemoryEntry

_ID = re.compile(rb'"memory_id"[ \t\r]*:[ \t\r]*"([^"\\\n]*)(["\\])')
"""A ``memory_id`` key and its string, up to its closing quote or its first escape.

The key's quotes are bare, so these bytes are never inside a JSON string (whose quotes
would be escaped): they are a key of the line's object or of an object nested in it.
Never past a newline: a line cut short inside its id ran on to the next line's first
quote, and the search went on past the quote that opens that line's own key."""


def _escaped_key() -> re.Pattern[bytes]:
    """The ``memory_id`` key spelled with at least one ``\\u`` escape (the only escape that spells a letter)."""
    units = []
    for char in "memory_id":
        hex_digits = b"".join(b"[%s%s]" % (d.encode(), d.upper().encode()) for d in f"{ord(char):04x}")
        units.append(b"(?:" + re.escape(char.encode()) + rb"|\\u" + hex_digits + b")")
    return re.compile(b'"' + b"".join(units) + b'"')


_ESCAPED_KEY = _escaped_key()
"""Lines it finds are parsed whatever their plain ``memory_id`` keys name (a nested object's, or
a key that only ends in those letters): the escaped key may be the line's own."""


def entry_key(entry: MemoryEntry) -> bytes:
    """What identifies an entry in both files: its canonical line, without quarantine fields."""
    return encode_entry(entry)


def recorded_among(path: Path, entries: Sequence[MemoryEntry]) -> Counter[bytes]:
    """The records in the quarantine file at ``path`` of any of ``entries``, by :func:`entry_key`.

    Read under the writer lock (every writer of the file takes it).  A line is parsed
    only when it may hold the id of one of ``entries`` (ids are random: few do), found
    by one regular expression over each block of lines, so the cost is about one pass
    over the file; the lines parsed are read as every reader reads them.
    """
    wanted = {entry.memory_id for entry in entries}
    keys = {entry_key(entry) for entry in entries}
    fd = open_for_read(path)
    if fd is None:
        return Counter()
    found: Counter[bytes] = Counter()
    try:
        for piece in iter_line_blocks(fd, stop=os.fstat(fd).st_size):
            if piece.data is None:
                continue  # longer than any reader reads
            for line in _lines_that_may_hold(piece.data, piece.length, wanted):
                entry = decode_entry(line) if len(line) <= MAX_LINE_BYTES else None
                if entry is not None and (key := entry_key(entry)) in keys:
                    found[key] += 1
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    finally:
        os.close(fd)
    return found


def _lines_that_may_hold(data: bytes, size: int, wanted: set[str]) -> list[bytes]:
    """The lines of ``data[:size]`` that may be an entry with one of the ``wanted`` ids.

    A line is passed over only when it cannot be one: it spells no ``memory_id`` key with an
    escape, and every plain one it has names another id without escapes.
    """
    starts: set[int] = set()
    for match in _ID.finditer(data, 0, size):
        # An id spelled with escapes is compared once parsed; ids are read stripped.
        if match.group(2) == b"\\" or match.group(1).decode("utf-8", "replace").strip() in wanted:
            starts.add(data.rfind(b"\n", 0, match.start()) + 1)
    for match in _ESCAPED_KEY.finditer(data, 0, size):
        if b"\\" in match.group():  # the plain key was looked at above
            starts.add(data.rfind(b"\n", 0, match.start()) + 1)
    lines = []
    for start in sorted(starts):
        end = data.find(b"\n", start, size)
        lines.append(data[start : size if end < 0 else end])
    return lines


def not_yet_recorded(entries: Iterable[MemoryEntry], recorded: Counter[bytes]) -> list[MemoryEntry]:
    """``entries`` less one of each that a record in ``recorded`` already stands for."""
    left = recorded.copy()
    fresh = []
    for entry in entries:
        key = entry_key(entry)
        if left[key] > 0:
            left[key] -= 1
        else:
            fresh.append(entry)
    return fresh
