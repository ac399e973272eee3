"""Which lines a delete or quarantine drops from memory.jsonl, found without looking at most of them.

A rewrite keeps every other line byte for byte, so the scan only has to find the
lines that go: entries whose ``branch_name`` (or ``run_id``) equals a value, and blank
lines.  It searches each block of lines in C (``bytes.find``, one regular expression)
and looks in Python only at the lines those searches name:

* lines holding the value's UTF-8 bytes;
* lines with an escape that can stand for a character of the value (``\\u``, and
  ``\\/`` for a slash, ``\\n`` for a newline and so on only when the value holds that
  character) where a backslash lies outside the string that follows ``"content": "``.
  A string without escapes decodes to its own bytes, and a string holding the value
  spells each of its escaped characters with one of those escapes; the content string
  is no key's ``branch_name`` or ``run_id``, so a line whose escapes all sit in it
  (non-ASCII or quoted text, the common case), or that escapes only characters the
  value lacks (real text escapes a newline or a quote in nearly every line), matches
  only if it holds the value's bytes.  The bytes ``"content": "`` cannot occur inside
  a string (its quotes would be escaped);
* lines that start like a blank line.

Those lines are parsed, but only the one field is compared before an entry is built
and validated.  What is kept is described as byte ranges, for
:meth:`memstore.files.Replacement.copy` to copy byte for byte.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from memstore import files
from memstore.files import BLOCK_BYTES, iter_line_blocks
from memstore.jsonl import BOM, parse_json_bytes
from memstore.kept_copy import KeptCopy
from memstore.models import MemoryEntry, memory_entry_from_payload

_BLANK_START = frozenset(b" \t\r\x0b\x0c\xef")
"""First bytes a blank line can start with (``\\xef`` for a byte order mark)."""
_BLANK_START_OR_EMPTY = _BLANK_START | {0x0A}


@dataclass(slots=True)
class RemovalScan:
    """The outcome of a scan: what goes, and the byte ranges of what stays."""

    removed: list[MemoryEntry] = field(default_factory=list)
    removed_starts: set[int] = field(default_factory=set)
    dropped: list[tuple[int, int]] = field(default_factory=list)
    """(start, length) of every dropped line (a removed entry, or a run of blank lines), in file order."""
    kept: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) runs of kept lines, in file order."""
    tail: bytes = b""
    """``\\n`` when the last kept line had none (every rewrite ends with a newline)."""
    candidates: int = 0
    """Lines the byte prefilter could not rule out (parsed)."""

    def _keep(self, start: int, end: int) -> None:
        if self.kept and self.kept[-1][1] == start:
            self.kept[-1] = (self.kept[-1][0], end)
        else:
            self.kept.append((start, end))


def scan_for_removal(
    fd: int,
    size: int,
    *,
    key: str,
    value: str,
    start: int = 0,
    block: int = BLOCK_BYTES,
    copy: KeptCopy | None = None,
) -> RemovalScan:
    """Scan bytes ``[start, size)`` of an open catalog for entries whose ``key`` field equals ``value``.

    Lines that do not parse are kept (they are someone's data), as are lines longer
    than a reader accepts; blank lines are dropped.  ``start`` is the start of a line;
    ``block`` is the read size.  With ``copy`` the kept lines are written out from the
    very bytes scanned, block by block (no second read).
    """
    try:
        needle: bytes | None = value.encode("utf-8")
    except UnicodeEncodeError:
        needle = None  # only a line with escapes can hold a lone surrogate
    scan = RemovalScan()
    scanned = False
    try:
        for piece in iter_line_blocks(fd, start=start, stop=size, block=block):
            if piece.data is None:
                if copy is not None:
                    copy.long_line(piece.start, piece.start + piece.length)
                scan._keep(piece.start, piece.start + piece.length)
                continue
            first_drop = len(scan.dropped)
            _scan_block(scan, piece.start, piece.data, piece.length, needle, key, value)
            if copy is not None:
                copy.block(memoryview(piece.data)[: piece.length], piece.start, scan.dropped[first_drop:])
        scanned = True
    finally:
        if copy is not None:
            copy.wait(check=scanned)  # the copy is complete (or stopped) when the scan returns
    if scan.kept and scan.kept[-1][1] == size and size > start and os.pread(fd, 1, size - 1) != b"\n":
        scan.tail = b"\n"
    return scan


_BLANKISH = re.compile(rb"\n(?=[\n \t\r\x0b\x0c\xef])")
"""A newline before a byte a blank line (or the line itself, empty) can start with."""
_NOT_SPACE = re.compile(rb"[^ \t\r\x0b\x0c\n]")
"""A byte that is no ASCII whitespace: the first of the first line after a run of blank ones."""
_EVERY_LINE = re.compile(rb"\n(?=.)", re.DOTALL)
_CONTENT_KEY = b'"content": "'


def _scan_block(
    scan: RemovalScan, offset: int, data: bytes, size: int, needle: bytes | None, key: str, value: str
) -> None:
    """Scan the lines in ``data[:size]`` (which start at file offset ``offset``)."""
    starts = set()
    if needle:
        hit = data.find(needle, 0, size)
        while hit >= 0:
            starts.add(data.rfind(b"\n", 0, hit) + 1)
            end = data.find(b"\n", hit, size)
            # Past the newline: a value that starts with one (a raw newline is never inside a
            # line, so such a match is no line's) found itself there again, for ever.
            hit = data.find(needle, end + 1, size) if end >= 0 else -1
    letters, escape = _escapes_for(value)
    hit = data.find(b"\\", 0, size)  # memchr over the stretches without escapes, then the pattern
    while hit >= 0:
        if hit + 1 < size and data[hit + 1] in letters:
            at = hit
        elif (found := escape(data, hit, size)) is not None:
            at = found.start()
        else:
            break
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at, size)
        end = size if end < 0 else end
        if not _escapes_only_in_content(data, start, end):
            starts.add(start)
        hit = data.find(b"\\", end, size)
    if needle == b"" and size:  # an empty value is in every line
        starts.add(0)
        starts.update(match.end() for match in _EVERY_LINE.finditer(data, 0, size))
    limit = files.MAX_LINE_BYTES if size > files.MAX_LINE_BYTES else None
    runs = _blank_lines(data, size, starts, runs=limit is None)
    keep_from = 0
    for start in sorted(starts):
        if start < keep_from:
            continue  # inside a run of blank lines, dropped with it
        end = data.find(b"\n", start, size)
        length = (size if end < 0 else end + 1) - start
        line = data[start : start + length].removesuffix(b"\n")
        if limit is not None and len(line) > limit:
            continue  # readers skip it unread: so does the rewrite, keeping it
        if start in runs:
            drop = True
            length = runs[start]  # one range for the run: a file of blank lines costs no memory per line
        elif not line.removeprefix(BOM).strip():
            drop = True
        elif (needle is not None and needle in line) or not _escapes_only_in_content(line, 0, len(line)):
            scan.candidates += 1
            drop = _matches(scan, offset + start, line, key, value)
        else:
            drop = False
        if drop:
            if keep_from < start:
                scan._keep(offset + keep_from, offset + start)
            scan.dropped.append((offset + start, length))
            keep_from = start + length
    if keep_from < size:
        scan._keep(offset + keep_from, offset + size)


def _blank_lines(data: bytes, size: int, starts: set[int], *, runs: bool) -> dict[int, int]:
    """Add to ``starts`` the lines of ``data[:size]`` that start like a blank line; with ``runs``,
    the start and length of each run of blank lines among them, which goes as one range.

    A file of blank lines then costs no memory per line.  Without ``runs`` (a block may hold
    lines longer than a reader takes, which are kept even when blank) each line is looked at.
    """
    found: dict[int, int] = {}
    start = 0 if size and data[0] in _BLANK_START_OR_EMPTY else -1
    search_from = 0
    while True:
        if start < 0:
            newline = _BLANKISH.search(data, search_from, size)
            if newline is None:
                return found
            start = newline.end()
        starts.add(start)
        end = _blank_run_end(data, start, size) if runs else start
        if end > start:
            found[start] = end - start
            search_from = end - 1  # the newline before the next line, if any
        else:
            search_from = start
        start = -1


def _blank_run_end(data: bytes, start: int, size: int) -> int:
    """Where the blank lines from ``start`` on end (``start`` when its line is not blank).

    Blank as :func:`memstore.jsonl.is_blank` has it: ASCII whitespace after at most one byte
    order mark.  Searched in C, a stretch of whitespace at a time, not line by line.
    """
    if data[start] == 0x0A and (start + 1 == size or data[start + 1] not in _BLANK_START_OR_EMPTY):
        return start + 1  # one empty line, the common case: no search
    pos = start
    while pos < size:
        line = pos
        if data.startswith(BOM, pos, size):
            pos += len(BOM)
        other = _NOT_SPACE.search(data, pos, size)
        if other is None:
            return size  # whitespace to the end: the last line may have no newline
        newline = data.rfind(b"\n", pos, other.start())
        if newline < 0:
            return line  # this line holds more than whitespace
        pos = newline + 1
    return pos


_STANDS_FOR = {b"\"": '"', b"\\": "\\", b"/": "/", b"b": "\b", b"f": "\f", b"n": "\n", b"r": "\r", b"t": "\t"}
"""The character each two-character JSON escape stands for (``\\u`` stands for any)."""


@functools.lru_cache(maxsize=16)
def _escapes_for(value: str) -> tuple[bytes, Callable[[bytes, int, int], re.Match[bytes] | None]]:
    """The escapes that can stand for a character of ``value``: a line without the value's
    bytes holds it only through one of them, in the string that holds it.

    Real text escapes a newline or a quote in nearly every line; neither stands for a
    character of a branch name or a run id, so such lines are not looked at one by one.
    """
    letters = b"u" + b"".join(letter for letter, char in _STANDS_FOR.items() if char in value)
    return letters, re.compile(b"\\\\[" + re.escape(letters) + b"]").search


def _escapes_only_in_content(data: bytes, start: int, end: int) -> bool:
    """Every backslash of the line ``data[start:end]`` lies inside the string after ``"content": "``."""
    key = data.find(_CONTENT_KEY, start, end)
    if key < 0:
        return data.find(b"\\", start, end) < 0
    opened = key + len(_CONTENT_KEY)
    if data.find(b"\\", start, opened) >= 0:
        return False
    quote = data.find(b'"', opened, end)
    while quote >= 0:
        slashes = quote
        while slashes > opened and data[slashes - 1] == 0x5C:
            slashes -= 1
        if (quote - slashes) % 2 == 0:
            return data.find(b"\\", quote, end) < 0  # the closing quote: nothing escaped after it
        quote = data.find(b'"', quote + 1, end)
    return False  # the string never closes: not JSON, but let the parser say so


def _matches(scan: RemovalScan, start: int, line: bytes, key: str, value: str) -> bool:
    """Whether a candidate line is an entry to remove; records it if so."""
    try:
        payload = parse_json_bytes(line)
    except ValueError:
        return False
    if not isinstance(payload, dict) or payload.get(key) != value:
        return False
    entry = memory_entry_from_payload(payload)
    if entry is None:
        return False
    scan.removed.append(entry)
    scan.removed_starts.add(start)
    return True
