"""What the team index tells its callers: typed reports whose ``to_dict()`` is the ``--json`` document.

Frozen dataclasses, as :mod:`memstore.reports` and :mod:`memstore.index.report`:
the faces read their fields and only they turn a report into JSON.  No password
ever reaches a report: URLs are stored redacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstore.cards import FailureCard
    from memstore.models import MemoryEntry


@dataclass(frozen=True)
class SourceFreshness:
    """How current one source is in the team index: what its last catch-up saw.

    ``caught_up_at`` is ISO 8601 in UTC, None for a source registered but never loaded.
    A source answered from its local files (the team index unavailable) has
    ``entries`` None, its file's size as ``bytes_indexed`` and the search's time.
    """

    name: str
    entries: int | None
    bytes_indexed: int
    caught_up_at: str | None
    cards: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "entries": self.entries,
            "bytes_indexed": self.bytes_indexed,
            "caught_up_at": self.caught_up_at,
            "cards": self.cards,
        }


@dataclass(frozen=True)
class TeamHit:
    """One search hit, labelled with the source it came from."""

    source: str
    score: int
    entry: MemoryEntry

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "source": self.source, "score": self.score}


@dataclass(frozen=True)
class TeamSearchResult:
    """The spec's ranking over the union of the chosen sources, and how current each one is.

    ``fallback`` names what answered instead of the team index ('local index': each
    chosen source's own SQLite index or a scan of its file, as of now), None when the
    team index did; ``warnings`` then holds the one-line reason.  The ``--json``
    document is the local search's (``query``, ``count``, ``entries``), each entry
    with its ``source`` and ``score``, plus ``sources``, ``fallback`` and ``warnings``.
    """

    query: str
    hits: tuple[TeamHit, ...]
    sources: tuple[SourceFreshness, ...]
    fallback: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def entries(self) -> list[MemoryEntry]:
        return [hit.entry for hit in self.hits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "count": len(self.hits),
            "entries": [hit.to_dict() for hit in self.hits],
            "sources": [source.to_dict() for source in self.sources],
            "fallback": self.fallback,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class TeamCardHit:
    source: str
    card: FailureCard

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, **self.card.to_dict(), "effective_behavior": self.card.effective_behavior()}


@dataclass(frozen=True)
class TeamCardResult:
    """``find_matching`` across the chosen sources, best first."""

    hits: tuple[TeamCardHit, ...]
    sources: tuple[SourceFreshness, ...]

    @property
    def cards(self) -> list[FailureCard]:
        return [hit.card for hit in self.hits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.hits),
            "cards": [hit.to_dict() for hit in self.hits],
            "sources": [source.to_dict() for source in self.sources],
        }


@dataclass(frozen=True)
class TeamSourceReport:
    """What one source's catch-up did.

    ``action``: 'none', 'appended', 'rebuilt', 'built' (first load) or 'missing' (no file;
    its rows are left as they were).  ``cards`` is the new card count when the cards changed.
    """

    name: str
    root: str
    action: str
    entries: int
    added: int
    bytes_indexed: int
    seconds: float
    cards: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "root": self.root,
            "action": self.action,
            "entries": self.entries,
            "added": self.added,
            "bytes_indexed": self.bytes_indexed,
            "cards": self.cards,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class TeamReindexReport:
    """``memstore reindex --index-url``: the schema step, then one report per source."""

    url: str
    schema: str
    """'created', 'migrated' or 'current'."""
    sources: tuple[TeamSourceReport, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "schema": self.schema,
            "sources": [source.to_dict() for source in self.sources],
            "seconds": self.seconds,
        }
