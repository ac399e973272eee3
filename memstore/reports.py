"""The JSON documents memstore answers with, shared by both faces, and the typed reports behind them.

``memstore <command> --json`` prints these documents and the MCP server returns
them as tool results, so an entry or a card has one shape wherever a program
reads it.  The stores' own reports (a catalog's health, a workspace's index
state) are frozen dataclasses whose ``to_dict()`` is that document; the index's
reports live in :mod:`memstore.index.report`.  No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstore.cards import FailureCard
    from memstore.index.report import IndexState, RefreshReport
    from memstore.models import MemoryEntry
    from memstore.pinned import PinnedFile


def json_text(payload: object, *, indent: int | None = 2) -> str:
    """The document as JSON text: keys sorted, ASCII only (lone surrogates survive as escapes)."""
    return json.dumps(payload, indent=indent, sort_keys=True, ensure_ascii=True, default=_json_default)


def _json_default(value: object) -> object:
    """Library objects by their to_dict(); anything else in a report (a Path, say) as a string."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else str(value)


def entry_report(entry: MemoryEntry, **extra: Any) -> dict[str, Any]:
    """One entry: ``{"entry": Entry, ...extra}``."""
    return {**extra, "entry": entry.to_dict()}


def entries_report(entries: Sequence[MemoryEntry], **extra: Any) -> dict[str, Any]:
    """A ranked or listed run of entries: ``{"count": n, "entries": [Entry], ...extra}``."""
    return {**extra, "count": len(entries), "entries": [entry.to_dict() for entry in entries]}


def recall_report(query: str, results: Mapping[str, Iterable[MemoryEntry]]) -> dict[str, Any]:
    """Every tier's matches: ``{"query": q, "project": [Entry], "personal": [...], "auto_memory": [...]}``."""
    return {"query": query, **{tier: [entry.to_dict() for entry in entries] for tier, entries in results.items()}}


def card_report(card: FailureCard) -> dict[str, Any]:
    """One failure card: ``{"card": Card}``."""
    return {"card": card.to_dict()}


def cards_report(cards: Sequence[FailureCard]) -> dict[str, Any]:
    """Failure cards as stored: ``{"count": n, "cards": [Card]}``."""
    return {"count": len(cards), "cards": [card.to_dict() for card in cards]}


def matching_cards_report(cards: Sequence[FailureCard]) -> dict[str, Any]:
    """Cards matched to a task, best first, each with how loudly it should warn now.

    ``{"count": n, "cards": [Card + {"effective_behavior": "block"|"warning"|"info"}]}``.
    """
    return {
        "count": len(cards),
        "cards": [{**card.to_dict(), "effective_behavior": card.effective_behavior()} for card in cards],
    }


def pins_report(pins: Sequence[PinnedFile]) -> dict[str, Any]:
    """The pinned-file list: ``{"count": n, "pinned": [{"file_path", "pinned_at", "last_modified"}]}``."""
    return {"count": len(pins), "pinned": [pin.to_dict() for pin in pins]}


@dataclass(frozen=True)
class HealthReport:
    """``MemoryCatalog.health()``: the lines of memory.jsonl by kind, and the state of its index.

    ``healthy`` while no line is corrupt.
    """

    path: str
    exists: bool
    total_entries: int
    corrupt_entries: int
    blank_lines: int
    bytes: int
    quarantined_entries: int
    index: IndexState

    @property
    def healthy(self) -> bool:
        return self.corrupt_entries == 0

    def to_dict(self) -> dict[str, Any]:
        return {**self.file_dict(), "index": self.index.to_dict()}

    def file_dict(self) -> dict[str, Any]:
        """The document without its ``index`` part (``memory_status`` gives that per source)."""
        return {
            "path": self.path,
            "exists": self.exists,
            "total_entries": self.total_entries,
            "corrupt_entries": self.corrupt_entries,
            "blank_lines": self.blank_lines,
            "bytes": self.bytes,
            "quarantined_entries": self.quarantined_entries,
            "healthy": self.healthy,
        }


@dataclass(frozen=True)
class MaintenancePreview:
    """``MemoryCatalog.maintenance_preview()``: what a maintenance pass would clean up (nothing is changed)."""

    total_entries: int
    corrupt_lines: int
    blank_lines: int
    duplicate_ids: int
    missing_final_newline: bool
    stale_temp_files: int

    @property
    def would_change(self) -> bool:
        return bool(
            self.corrupt_lines
            or self.blank_lines
            or self.duplicate_ids
            or self.missing_final_newline
            or self.stale_temp_files
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "total_entries": self.total_entries,
            "corrupt_lines": self.corrupt_lines,
            "blank_lines": self.blank_lines,
            "duplicate_ids": self.duplicate_ids,
            "missing_final_newline": self.missing_final_newline,
            "stale_temp_files": self.stale_temp_files,
            "would_change": self.would_change,
        }


@dataclass(frozen=True)
class WorkspaceReindex:
    """``reindex_workspace``: what was done to each indexed source (the cards only when they exist)."""

    catalog: RefreshReport
    failure_cards: RefreshReport | None = None

    def to_dict(self) -> dict[str, Any]:
        document = {"catalog": self.catalog.to_dict()}
        if self.failure_cards is not None:
            document["failure_cards"] = self.failure_cards.to_dict()
        return document


@dataclass(frozen=True)
class WorkspaceStatus:
    """``workspace_index_status``: one state per indexed source, the catalog first."""

    sources: tuple[IndexState, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"sources": [source.to_dict() for source in self.sources]}
