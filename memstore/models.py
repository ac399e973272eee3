"""Memory entries and the pure helpers that define search semantics.

Everything here is deterministic and free of I/O: the scan, the index and the
tests all share these definitions, which is what keeps them in agreement.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.checks import non_empty_str, optional_str, require_str, str_items
from memstore.errors import EmptyContentError, InvalidArgumentError

AUTO_CURATED_TAG = "auto-curated"
RUN_SUMMARY_TAG = "run-summary"
AUTO_CURATED_BONUS = 4
RUN_SUMMARY_BONUS = 2
CONTENT_POINTS = 3
TAG_POINTS = 2


def normalize_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Lowercase, strip, drop empties, deduplicate and sort tags.

    A bare string is refused: iterating it would silently store one tag per character.
    """
    return tuple(sorted({value for value in tag_values(tags) if value}))


def tag_values(tags: Iterable[str]) -> list[str]:
    """Each tag stripped and lowercased, in order (empties kept); type errors are ArgumentTypeError."""
    return [tag.strip().lower() for tag in str_items("tags", tags)]


def utc_now_iso() -> str:
    """The timestamp format of existing files: ``datetime.now(timezone.utc).isoformat()``."""
    from datetime import UTC, datetime  # only a write stamps a time; a search never loads datetime

    return datetime.now(UTC).isoformat()


def new_memory_id() -> str:
    """``uuid.uuid4().hex``, built straight from the random bytes (RFC 4122 version 4, its variant)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


@dataclass(frozen=True)
class MemoryEntry:
    """One catalog line. Construction enforces the spec's invariants 1–3."""

    memory_id: str
    content: str
    tags: tuple[str, ...] = ()
    created_at: str = field(default_factory=utc_now_iso)
    branch_name: str | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        memory_id = non_empty_str("memory_id", self.memory_id)
        content = require_str("content", self.content).strip()
        if not content:
            raise EmptyContentError("memory content cannot be empty")
        if not require_str("created_at", self.created_at):
            raise InvalidArgumentError("created_at cannot be empty")
        optional_str("branch_name", self.branch_name)
        optional_str("run_id", self.run_id)
        object.__setattr__(self, "memory_id", memory_id)
        object.__setattr__(self, "content", content)
        object.__setattr__(self, "tags", normalize_tags(self.tags))

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "content": self.content,
            "tags": list(self.tags),
            "created_at": self.created_at,
            "branch_name": self.branch_name,
            "run_id": self.run_id,
        }


def memory_entry_from_payload(payload: object) -> MemoryEntry | None:
    """Rebuild an entry from a parsed line; ``None`` when the line breaks an invariant.

    Deterministic on purpose: a missing ``created_at`` is invalid rather than "now",
    so the scan and the index always read the same entries from the same bytes.
    This is the hot path of every scan and index build, so it validates inline and
    skips the constructor's re-validation (the checks are the same).
    """
    if not isinstance(payload, Mapping):
        return None
    memory_id = payload.get("memory_id")
    content = payload.get("content")
    created_at = payload.get("created_at")
    if not isinstance(memory_id, str) or not isinstance(content, str):
        return None
    if not isinstance(created_at, str) or not created_at:
        return None
    memory_id = memory_id.strip()
    content = content.strip()
    if not memory_id or not content:
        return None
    branch_name = payload.get("branch_name")
    run_id = payload.get("run_id")
    if (branch_name is not None and not isinstance(branch_name, str)) or (
        run_id is not None and not isinstance(run_id, str)
    ):
        return None
    raw_tags = payload.get("tags", ())
    if raw_tags is None:
        raw_tags = ()
    if not isinstance(raw_tags, (list, tuple)):
        return None
    if raw_tags:
        cleaned: set[str] = set()
        for tag in raw_tags:
            if not isinstance(tag, str):
                return None
            cleaned.add(tag.strip().lower())
        cleaned.discard("")
        tags = tuple(sorted(cleaned))
    else:
        tags = ()
    entry = object.__new__(MemoryEntry)
    entry.__dict__.update(
        memory_id=memory_id, content=content, tags=tags, created_at=created_at, branch_name=branch_name, run_id=run_id
    )
    return entry


def query_tokens(query: str) -> list[str]:
    """The spec's tokenisation: strip, lowercase, split on whitespace, duplicates kept."""
    return require_str("query", query).strip().lower().split()


def tag_bonus(tags: Sequence[str]) -> int:
    """The score every match of an entry gets from its special tags."""
    bonus = 0
    if AUTO_CURATED_TAG in tags:
        bonus += AUTO_CURATED_BONUS
    if RUN_SUMMARY_TAG in tags:
        bonus += RUN_SUMMARY_BONUS
    return bonus


def memory_matches(entry: MemoryEntry, query: str | Sequence[str]) -> bool:
    """True when every token is a substring of the lowered content or of some tag."""
    tokens = query_tokens(query) if isinstance(query, str) else list(query)
    if not tokens:
        return False
    content = entry.content.lower()
    return all(token in content or any(token in tag for tag in entry.tags) for token in tokens)


def memory_relevance_score(entry: MemoryEntry, tokens: Sequence[str]) -> int:
    """+3 per token in the content, +2 per token in some tag, plus the tag bonus."""
    content = entry.content.lower()
    score = 0
    for token in tokens:
        if token in content:
            score += CONTENT_POINTS
        if any(token in tag for tag in entry.tags):
            score += TAG_POINTS
    return score + tag_bonus(entry.tags)


def memory_entries_to_prompt(entries: Iterable[MemoryEntry]) -> list[dict[str, Any]]:
    return [entry.to_dict() for entry in entries]


def rank_matches(scored: Iterable[tuple[int, str, int, MemoryEntry]], limit: int) -> list[MemoryEntry]:
    """Order (score, created_at, file_order, entry) as the spec does and take ``limit``.

    Score and created_at descending, then file order ascending (a stable sort).
    """
    ordered = sorted(scored, key=lambda item: (-item[0], Descending(item[1]), item[2]))
    return [item[3] for item in ordered[:limit]]


class Descending:
    """Sort key wrapper that reverses string order (for created_at descending)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return self.value > other.value

    def __gt__(self, other: Descending) -> bool:
        return self.value < other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)
