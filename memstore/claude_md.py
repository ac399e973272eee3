"""Export the most useful memories as a section of Claude Code's MEMORY.md.

Claude Code loads the first 200 lines / 25 KB of MEMORY.md, so the whole file,
text a person wrote included, is kept within that budget.  memstore owns only the
lines between its two markers: a second export replaces them and leaves
everything else byte for byte.  The section depends only on the files (no export
time is written), so the same files give the same bytes; only cards that expired
in between can change it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memstore.auto_memory import STARTUP_BYTE_BUDGET, STARTUP_LINE_BUDGET
from memstore.errors import InvalidArgumentError
from memstore.files import MAX_JSON_FILE_BYTES, atomic_write, ensure_dir, read_regular_file
from memstore.hierarchy import AUTO_MEMORY_PARTS
from memstore.models import AUTO_CURATED_TAG, MemoryEntry

BEGIN_MARKER = "<!-- memstore:begin (written by `memstore export claude-md`; edits inside are replaced) -->"
END_MARKER = "<!-- memstore:end -->"
ITEM_CHARS = 300
RECENT_ENTRIES = 200


@dataclass(frozen=True)
class ClaudeMdExport:
    """Where the section was written, the file's size afterwards, and how many items it holds."""

    path: Path
    lines: int
    bytes: int
    items: int

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "lines": self.lines, "bytes": self.bytes, "items": self.items}


def _flat(text: str) -> str:
    """One line of at most ITEM_CHARS; an HTML comment opener is escaped so no item can end the section."""
    flat = " ".join(text.split()).encode("utf-8", "replace").decode("utf-8").replace("<!--", "&lt;!--")
    return flat if len(flat) <= ITEM_CHARS else flat[: ITEM_CHARS - 1] + "…"


def _entry_item(entry: MemoryEntry) -> str:
    tags = f" [{_flat(', '.join(entry.tags))}]" if entry.tags else ""
    return f"- {_flat(entry.content)}{tags}"


def candidate_sections(root: Path) -> list[tuple[str, list[str]]]:
    """Headings with their items, most useful first; what fits the budget is taken in this order."""
    from memstore.catalog import MemoryCatalog
    from memstore.failure_cards import FailureCardStorage
    from memstore.pinned import PinnedFileStorage
    from memstore.team import TeamMemory

    catalog = MemoryCatalog(root, readonly=True)
    pins = [f"- `{_flat(pin.file_path)}`" for pin in PinnedFileStorage(root).list_all()]
    cards = []
    for card in FailureCardStorage(root).list_active():
        if card.effective_behavior() == "block":
            where = card.file_path if card.line_number is None else f"{card.file_path}:{card.line_number}"
            cards.append(f"- {_flat(f'{card.error_type} in {where}: {card.error_message}')}")
    notes = [f"- {_flat(line.removeprefix('- '))}" for line in reversed(TeamMemory(root).list())]
    recent = catalog.list(limit=RECENT_ENTRIES)
    curated = [_entry_item(entry) for entry in recent if AUTO_CURATED_TAG in entry.tags]
    others = [_entry_item(entry) for entry in recent if AUTO_CURATED_TAG not in entry.tags]
    return [
        ("## Pinned files", pins),
        ("## Failures that block", cards),
        ("## Team notes (newest first)", notes),
        ("## Curated memories", curated),
        ("## Recent memories", others),
    ]


def render_section(sections: list[tuple[str, list[str]]], *, lines_left: int, bytes_left: int) -> tuple[str, int]:
    """The marked section within the budget left by the rest of the file; also the item count."""
    head = [BEGIN_MARKER, "# Project memory (memstore)"]
    tail = [END_MARKER]

    def cost(lines: list[str]) -> tuple[int, int]:
        return len(lines), sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines)

    used_lines, used_bytes = cost(head + tail)
    body: list[str] = []
    items = 0
    for heading, entries in sections:
        block: list[str] = []
        for item in entries:
            trial = ["", heading, *block, item] if not block else [item]
            extra_lines, extra_bytes = cost(trial)
            if used_lines + extra_lines > lines_left or used_bytes + extra_bytes > bytes_left:
                break
            if not block:
                block = ["", heading]
            block.append(item)
            used_lines += extra_lines
            used_bytes += extra_bytes
            items += 1
        body.extend(block)
    return "\n".join(head + body + tail) + "\n", items


def _split(existing: str) -> tuple[str, str]:
    """The person's text before and after memstore's section (the section itself dropped)."""
    begin = existing.find(BEGIN_MARKER.split(" (", 1)[0])
    if begin < 0:
        return existing, ""
    end = existing.find(END_MARKER, begin)
    if end < 0:
        raise InvalidArgumentError("MEMORY.md has memstore's begin marker but no end marker; fix it by hand first")
    after = existing[end + len(END_MARKER) :]
    return existing[:begin], after.removeprefix("\n")


def export_claude_md(
    root: str | os.PathLike[str] = ".", *, output: str | os.PathLike[str] | None = None
) -> ClaudeMdExport:
    """Write (or refresh) memstore's section of MEMORY.md; default ``<root>/.claude/MEMORY.md``."""
    workspace = Path(root)
    path = Path(output) if output is not None else workspace.joinpath(*AUTO_MEMORY_PARTS)
    try:
        # Never through a link, never blocking on a FIFO, never unbounded.
        existing = read_regular_file(path, max_bytes=MAX_JSON_FILE_BYTES).decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        existing = ""
    before, after = _split(existing)
    if before and not before.endswith("\n"):
        before += "\n"
    if before and not before.endswith("\n\n"):
        before += "\n"
    kept = before + after
    kept_lines = kept.count("\n") + (0 if not kept or kept.endswith("\n") else 1)
    kept_bytes = len(kept.encode("utf-8", "surrogateescape"))
    section, items = render_section(
        candidate_sections(workspace),
        lines_left=STARTUP_LINE_BUDGET - kept_lines,
        bytes_left=STARTUP_BYTE_BUDGET - kept_bytes,
    )
    text = before + section + after
    data = text.encode("utf-8", "surrogateescape")
    ensure_dir(path.parent)
    atomic_write(path, data)
    return ClaudeMdExport(path=path, lines=text.count("\n"), bytes=len(data), items=items)
