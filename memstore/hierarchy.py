"""MemoryHierarchy: the three memory tiers an agent reads together.

- ``project``: ``<root>/.teaagent/memory.jsonl`` (git-tracked);
- ``personal``: ``~/.config/teaagent/memory.jsonl`` (user-wide, files 0600 in a
  0700 directory; the home directory is ``Path.home()`` at construction time);
- ``auto_memory``: Claude Code's ``<root>/.claude/MEMORY.md``, read-only, split
  into items (see :mod:`memstore.auto_memory`).

A readonly hierarchy creates nothing on disk: no ``.teaagent``, no
``~/.config/teaagent``.  A missing or unwritable home directory never fails a read:
the personal tier is skipped (or read-only) with a warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memstore.auto_memory import (
    STARTUP_BYTE_BUDGET,
    STARTUP_LINE_BUDGET,
    AutoMemory,
    AutoMemoryItem,
    search_entries,
)
from memstore.catalog import MemoryCatalog
from memstore.checks import check_limit, check_readonly, optional_str
from memstore.errors import StorageError
from memstore.logger import LazyLogger
from memstore.models import MemoryEntry, query_tokens

logger = LazyLogger(__name__)

PERSONAL_DIR_PARTS = (".config", "teaagent")
AUTO_MEMORY_PARTS = (".claude", "MEMORY.md")
TIERS = ("project", "personal", "auto_memory")
DEFAULT_PROMPT_CHARS = 8192
"""About 2,048 tokens at 4 characters per token (the estimate TeamMemory uses)."""

_TIER_LABELS = {
    "project": "project memory",
    "personal": "personal memory",
    "auto_memory": "auto-memory",
}


class MemoryHierarchy:
    """Project, personal and auto-memory tiers with one search and one prompt block."""

    def __init__(self, root: str | os.PathLike[str] = ".", *, readonly: bool = False) -> None:
        self.root = Path(root)
        self.readonly = check_readonly(readonly)
        self.project = MemoryCatalog(self.root, readonly=readonly)
        home = _home()
        self.personal_available = home is not None and home.is_dir()
        self.personal_directory = (home or Path(os.devnull)).joinpath(*PERSONAL_DIR_PARTS)
        self.personal = self._personal_catalog(readonly=readonly or not self.personal_available)
        self.auto_memory_path = self.root.joinpath(*AUTO_MEMORY_PARTS)
        self.auto_memory = AutoMemory(self.auto_memory_path)

    def _personal_catalog(self, *, readonly: bool) -> MemoryCatalog:
        """The personal catalog; read-only (with a warning) when its folder cannot be created."""
        if not self.personal_available:
            logger.warning("no home directory: the personal memory tier is skipped")
        try:
            return MemoryCatalog.in_directory(self.personal_directory, private=True, readonly=readonly)
        except StorageError as exc:
            logger.warning("personal memory is read-only: %s", exc)
            return MemoryCatalog.in_directory(self.personal_directory, private=True, readonly=True)

    def _personal(self, read: Callable[[MemoryCatalog], list[MemoryEntry]]) -> list[MemoryEntry]:
        """A read of the personal tier; empty (with a warning) when HOME is missing or unreadable.

        Project reads never fail because of the personal tier.
        """
        if not self.personal_available:
            return []
        try:
            return read(self.personal)
        except StorageError as exc:
            logger.warning("personal memory skipped: %s", exc)
            return []

    def search_all(self, query: str, *, limit: int = 10) -> dict[str, list[MemoryEntry]]:
        """Search every tier; the result always has the keys project, personal and auto_memory.

        Each tier is ranked on its own with the catalog's scoring and order; an empty
        query gives three empty lists.
        """
        tokens = query_tokens(query)
        limit = check_limit(limit)
        return {
            "project": self.project.search(query, limit=limit),
            "personal": self._personal(lambda tier: tier.search(query, limit=limit)),
            "auto_memory": search_entries(self.auto_memory.entries(), tokens, limit) if tokens else [],
        }

    def to_prompt_context(
        self, query: str | None = None, *, limit: int = 10, max_chars: int = DEFAULT_PROMPT_CHARS
    ) -> str:
        """A prompt-ready block of the three tiers, at most ``max_chars`` characters.

        Format: one section per tier, in the order project, personal, auto-memory::

            [project memory] 2 entries
            - first entry content (tags: a, b)
            - second entry
            [personal memory] none
            [auto-memory] 1 entry
            - [Heading > Subheading] item text

        Multi-line content continues on lines indented by two spaces.  With a
        query (non-blank), each tier holds its best ``limit`` matches in search
        order; with no query (None or blank) it holds the newest ``limit``
        entries of each catalog (``list`` order) and the first ``limit``
        auto-memory items Claude Code would load at startup.  Auto-memory text
        stays within Claude Code's budget (200 lines, 25 KB).  When the
        characters run out, entries are taken rank by rank across the tiers
        (first of each tier, then second, ...), a tier stops at its first entry
        that does not fit, and its header says how many were left out
        (``[project memory] 3 entries (2 more omitted)``).
        """
        limit = check_limit(limit)
        max_chars = check_limit(max_chars, name="max_chars")
        optional_str("query", query)
        snapshot = self.auto_memory.read()
        items_by_id = {item.item_id: item for item in snapshot.items}
        if query is not None and query.strip():
            project = self.project.search(query, limit=limit)
            personal = self._personal(lambda tier: tier.search(query, limit=limit))
            auto = search_entries(snapshot.entries(), query_tokens(query), limit)
        else:
            project = self.project.list(limit=limit)
            personal = self._personal(lambda tier: tier.list(limit=limit))
            auto = [item.to_entry(snapshot.created_at) for item in snapshot.items if item.in_startup_window]
            auto = auto[:limit]
        auto_lines = _within_startup_budget([_auto_line(items_by_id[e.memory_id]) for e in auto])
        tiers = {
            "project": [_entry_line(entry) for entry in project],
            "personal": [_entry_line(entry) for entry in personal],
            "auto_memory": auto_lines,
        }
        return _render(tiers, max_chars)


def _home() -> Path | None:
    """The home directory, or None when there is none (HOME unset and no passwd entry).

    A home folder that does not exist is not created (the personal tier is skipped):
    that is not memstore's to decide.
    """
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        return None
    return home if str(home) not in ("", "~") else None


def _entry_line(entry: MemoryEntry) -> str:
    text = _indent_continuation(entry.content)
    if entry.tags:
        text += f" (tags: {', '.join(entry.tags)})"
    return f"- {text}"


def _auto_line(item: AutoMemoryItem) -> str:
    text = _indent_continuation(item.text)
    if item.heading_path:
        return f"- [{' > '.join(item.heading_path)}] {text}"
    return f"- {text}"


def _indent_continuation(text: str) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first, *(f"  {line}" if line else "" for line in rest)])


def _within_startup_budget(lines: Sequence[str]) -> list[str]:
    """The leading lines whose total stays within 200 lines and 25 KB."""
    kept: list[str] = []
    line_count = byte_count = 0
    for line in lines:
        line_count += line.count("\n") + 1
        byte_count += len(line.encode("utf-8", "surrogatepass")) + 1
        if line_count > STARTUP_LINE_BUDGET or byte_count > STARTUP_BYTE_BUDGET:
            break
        kept.append(line)
    return kept


@dataclass
class _TierBlock:
    name: str
    lines: list[str]
    taken: int = 0
    closed: bool = False

    def header(self) -> str:
        label = _TIER_LABELS[self.name]
        if not self.lines:
            return f"[{label}] none"
        noun = "entry" if self.taken == 1 else "entries"
        header = f"[{label}] {self.taken} {noun}"
        omitted = len(self.lines) - self.taken
        if omitted:
            header += f" ({omitted} more omitted)"
        return header


def _render(tiers: dict[str, list[str]], max_chars: int) -> str:
    blocks = [_TierBlock(name, tiers[name]) for name in TIERS]

    def size() -> int:
        parts = [block.header() for block in blocks]
        parts += [line for block in blocks for line in block.lines[: block.taken]]
        return sum(len(part) for part in parts) + len(parts) - 1

    # Taking an entry can shorten the text (an "omitted" note disappears from a header),
    # so a greedy pass may stop short of a text that fits whole: try the whole text first.
    for block in blocks:
        block.taken = len(block.lines)
    if size() <= max_chars:
        return _joined(blocks)
    for block in blocks:
        block.taken = 0
    rank = 0
    while any(not block.closed and rank < len(block.lines) for block in blocks):
        for block in blocks:
            if block.closed or rank >= len(block.lines):
                continue
            block.taken += 1
            if size() > max_chars:
                block.taken -= 1
                block.closed = True
        rank += 1
    return _joined(blocks)[:max_chars]


def _joined(blocks: Sequence[_TierBlock]) -> str:
    return "\n".join("\n".join([block.header(), *block.lines[: block.taken]]) for block in blocks)
