"""The JSON documents memstore answers with, shared by both faces.

``memstore <command> --json`` prints these documents and the MCP server returns
them as tool results, so an entry or a card has one shape wherever a program
reads it.  Pure functions over library objects: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstore.cards import FailureCard
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
