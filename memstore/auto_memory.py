"""Claude Code's auto-memory (``<root>/.claude/MEMORY.md``) read as searchable items.

Claude Code keeps its own notes in one Markdown file.  Returning that file as one
blob would make every search match all of it or nothing, so it is split into
items: each bullet (``-``, ``*``, ``+``, ``1.``, ``1)``) with its continuation
lines, and each plain paragraph.  Every item remembers the headings above it.

Item ids are ``sha256(json.dumps([heading_path, normalised_text, occurrence]))``
truncated to 32 hex digits, where the normalised text is the item text with all
whitespace runs collapsed to one space and ``occurrence`` counts earlier items
with the same heading path and text (0 for the first).  An id therefore survives
edits anywhere else in the file, re-indentation and re-wrapping of the item
itself, and moves within its section; it changes when the item's words or its
headings change.

As :class:`~memstore.models.MemoryEntry` an item carries:
- ``content``: the item text (bullet marker removed, lines stripped);
- ``tags``: ``auto-memory`` plus each heading of its path, lowercased (a whole
  heading per tag; search matches substrings of tags, so heading words match);
- ``created_at``: the file's mtime as a UTC isoformat timestamp, the same for
  every item of the file, so ranking ties fall back to file order;
- ``branch_name`` and ``run_id``: None.

Claude Code only loads the first 200 lines / 25 KB of MEMORY.md into a session.
Search here covers every item (the rest of the file is still the user's memory);
:attr:`AutoMemoryItem.in_startup_window` says whether an item starts inside that
window, and prompt building (``MemoryHierarchy.to_prompt_context``) keeps the
auto-memory part within the same budget.

Not handled (rare in MEMORY.md): setext headings (``Title`` over ``===``),
HTML blocks and ``@imports``, which stay plain text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from memstore.checks import check_limit
from memstore.files import open_regular, read_capped
from memstore.logger import LazyLogger
from memstore.models import MemoryEntry, query_tokens
from memstore.scan import ScannedEntry, ScanResult, scan_search

logger = LazyLogger(__name__)

AUTO_MEMORY_TAG = "auto-memory"
STARTUP_LINE_BUDGET = 200
"""Claude Code loads this many lines of MEMORY.md at startup."""
STARTUP_BYTE_BUDGET = 25 * 1024
"""... and at most this many bytes."""

MAX_AUTO_MEMORY_BYTES = 4 * 1024 * 1024
"""A larger MEMORY.md is not read (logged, read as empty): Claude Code itself loads 25 KB."""

# Only patterns anchored at the start whose repeats cannot overlap, so a match costs
# linear time whatever the line holds; headings and thematic breaks are parsed by
# hand (a committed file with a 1 MB run of spaces must not stall a recall).
_BULLET = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BLANKS = " \t"


@dataclass(frozen=True, slots=True)
class AutoMemoryItem:
    """One bullet item or paragraph of MEMORY.md.

    ``line`` is the 1-based line its first line sits on; ``offset`` that line's
    byte offset in the file.
    """

    item_id: str
    text: str
    heading_path: tuple[str, ...]
    line: int
    offset: int

    @property
    def in_startup_window(self) -> bool:
        """Whether Claude Code's startup load (200 lines / 25 KB) includes this item's start."""
        return self.line <= STARTUP_LINE_BUDGET and self.offset < STARTUP_BYTE_BUDGET

    def to_entry(self, created_at: str) -> MemoryEntry:
        return MemoryEntry(
            memory_id=self.item_id,
            content=self.text,
            tags=(AUTO_MEMORY_TAG, *(heading.lower() for heading in self.heading_path)),
            created_at=created_at,
        )


@dataclass
class _Block:
    line: int
    offset: int
    heading_path: tuple[str, ...]
    lines: list[str] = field(default_factory=list)


def normalise_item_text(text: str) -> str:
    """The text an item id is computed from: whitespace runs collapsed to one space."""
    return " ".join(text.split())


def auto_memory_item_id(heading_path: Sequence[str], text: str, occurrence: int = 0) -> str:
    key = json.dumps([list(heading_path), normalise_item_text(text), occurrence], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _block_start(line: str) -> str | None:
    """The line after up to three leading spaces; None when it is indented further."""
    body = line.lstrip(" ")
    return body if len(line) - len(body) <= 3 else None


def parse_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` of an ATX heading line (``## Title ##``), else None.

    Up to three spaces of indent, one to six ``#``, then a space or tab (or the end);
    the title loses a closing run of ``#`` that follows a space or tab, and its
    whitespace runs collapse to one space.  Linear in the line's length.
    """
    body = _block_start(line)
    if body is None:
        return None
    rest = body.lstrip("#")
    level = len(body) - len(rest)
    if not 1 <= level <= 6 or (rest and rest[0] not in _BLANKS):
        return None
    title = rest.strip()
    unhashed = title.rstrip("#")
    if not unhashed:
        title = ""
    elif len(unhashed) < len(title) and unhashed[-1] in _BLANKS:
        title = unhashed.rstrip(_BLANKS)
    return level, " ".join(title.split())


def is_thematic_break(line: str) -> bool:
    """``---``, ``* * *``, ``___``: three or more of one marker, blanks allowed between."""
    body = _block_start(line)
    if not body or body[0] not in "-*_":
        return False
    marker = body[0]
    count = 0
    for char in body:
        if char == marker:
            count += 1
        elif char not in _BLANKS:
            return False
    return count >= 3


class _Parser:
    """A small line-based Markdown reader: headings, bullets, paragraphs, fences."""

    def __init__(self) -> None:
        self.headings: list[tuple[int, str]] = []
        self.blocks: list[_Block] = []
        self.current: _Block | None = None
        self.after_blank = False
        self.fence: str | None = None

    def heading_path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self.headings if title)

    def close(self) -> None:
        if self.current is not None:
            self.blocks.append(self.current)
            self.current = None

    def start(self, number: int, offset: int, first: str) -> None:
        self.close()
        self.current = _Block(number, offset, self.heading_path(), [first])

    def feed(self, number: int, offset: int, line: str) -> None:
        if self.fence is not None:
            self._feed_fenced(number, offset, line)
            return
        if not line.strip():
            self.after_blank = True
            return
        after_blank, self.after_blank = self.after_blank, False
        fence = _FENCE.match(line)
        if fence:
            self.fence = fence.group(1)
            if self.current is None or (after_blank and not line[:1].isspace()):
                self.start(number, offset, line.rstrip())
            else:
                self._continue(line.rstrip(), after_blank)
            return
        heading = parse_heading(line)
        if heading is not None:
            self.close()
            level, title = heading
            self.headings = [(lvl, text) for lvl, text in self.headings if lvl < level]
            self.headings.append((level, title))
            return
        if is_thematic_break(line):
            self.close()
            return
        bullet = _BULLET.match(line)
        if bullet:
            self.start(number, offset, (bullet.group(2) or "").strip())
            return
        indented = line[:1] in (" ", "\t")
        if self.current is not None and (not after_blank or indented):
            self._continue(line.strip(), after_blank)
        else:
            self.start(number, offset, line.strip())

    def _continue(self, text: str, after_blank: bool) -> None:
        assert self.current is not None
        if after_blank:
            self.current.lines.append("")
        self.current.lines.append(text)

    def _feed_fenced(self, number: int, offset: int, line: str) -> None:
        if self.current is None:  # pragma: no cover - a fence always opens a block
            self.start(number, offset, "")
        assert self.current is not None
        self.current.lines.append(line.rstrip())
        closing = line.strip()
        if self.fence and closing.startswith(self.fence[0] * len(self.fence)) and not closing.strip(self.fence[0]):
            self.fence = None


def parse_auto_memory(data: str | bytes) -> list[AutoMemoryItem]:
    """Split MEMORY.md into items, in file order.

    Lines split on ``\\n`` only (a trailing ``\\r`` is dropped); a UTF-8 BOM is
    ignored.  Bytes must be valid UTF-8 (``UnicodeDecodeError`` otherwise).
    Items whose text is empty (a bare ``-``) are skipped.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    raw.decode("utf-8")  # validate once, so a bad byte anywhere rejects the file
    offset = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    parser = _Parser()
    for number, line_bytes in enumerate(raw[offset:].split(b"\n"), start=1):
        line = line_bytes.decode("utf-8")
        if line.endswith("\r"):
            line = line[:-1]
        parser.feed(number, offset, line)
        offset += len(line_bytes) + 1
    parser.close()
    items: list[AutoMemoryItem] = []
    seen: dict[tuple[tuple[str, ...], str], int] = {}
    for block in parser.blocks:
        text = "\n".join(block.lines).strip()
        if not text:
            continue
        key = (block.heading_path, normalise_item_text(text))
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        items.append(
            AutoMemoryItem(
                item_id=auto_memory_item_id(block.heading_path, text, occurrence),
                text=text,
                heading_path=block.heading_path,
                line=block.line,
                offset=block.offset,
            )
        )
    return items


@dataclass(frozen=True, slots=True)
class AutoMemorySnapshot:
    """The items of one read of MEMORY.md and the timestamp their entries carry."""

    items: tuple[AutoMemoryItem, ...]
    created_at: str

    def entries(self) -> list[MemoryEntry]:
        return [item.to_entry(self.created_at) for item in self.items]


EMPTY_SNAPSHOT = AutoMemorySnapshot(items=(), created_at="")


class AutoMemory:
    """Read-only access to one MEMORY.md file.  It never writes or creates anything."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> AutoMemorySnapshot:
        """The file's items now; empty when it is missing, unreadable or not UTF-8.

        Only a regular file of at most MAX_AUTO_MEMORY_BYTES is read (a symlink to one
        is followed); a FIFO, a device or a larger file reads as empty with a warning,
        and opening never waits.
        """
        try:
            fd = open_regular(self.path, follow_symlinks=True, max_bytes=MAX_AUTO_MEMORY_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return EMPTY_SNAPSHOT
        except OSError as exc:
            logger.warning("auto-memory not read: %s", exc)
            return EMPTY_SNAPSHOT
        try:
            mtime = os.fstat(fd).st_mtime
            data = read_capped(fd, self.path, max_bytes=MAX_AUTO_MEMORY_BYTES)
        except OSError as exc:
            logger.warning("auto-memory not read: %s", exc)
            return EMPTY_SNAPSHOT
        finally:
            os.close(fd)
        try:
            items = parse_auto_memory(data)
        except UnicodeDecodeError:
            return EMPTY_SNAPSHOT
        created_at = datetime.fromtimestamp(mtime, UTC).isoformat()
        return AutoMemorySnapshot(tuple(items), created_at)

    def items(self) -> list[AutoMemoryItem]:
        return list(self.read().items)

    def entries(self) -> list[MemoryEntry]:
        return self.read().entries()

    def search(self, query: str, *, limit: int = 10) -> list[MemoryEntry]:
        """Matching items as entries, scored and ordered exactly as MemoryCatalog.search."""
        tokens = query_tokens(query)
        limit = check_limit(limit)
        if not tokens or limit == 0:
            return []
        return search_entries(self.entries(), tokens, limit)


def search_entries(entries: Sequence[MemoryEntry], tokens: Sequence[str], limit: int) -> list[MemoryEntry]:
    """The catalog's search (matching, score, created_at, file order) over entries in file order."""
    scanned = tuple(ScannedEntry(order, entry) for order, entry in enumerate(entries))
    return scan_search(ScanResult(entries=scanned, corrupt=0, blank=0, size=0), tokens, limit)
