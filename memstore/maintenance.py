"""Index maintenance across a workspace's indexed sources (the catalog and the failure cards).

``memstore reindex``, ``memstore status`` and ``memstore watch`` act on every
indexed file of a workspace at once; this module is the one place that knows
which sources those are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.layout import FAILURES_FILE, memory_dir

Progress = Callable[[int, int], None]


def reindex_workspace(
    catalog: MemoryCatalog, *, full: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Catch up (or rebuild) the catalog's index and, when there are cards, the card index."""
    report: dict[str, Any] = {"catalog": catalog.reindex(full=full, progress=progress)}
    if not catalog.readonly:
        cards = FailureCardStorage(catalog.root)
        if cards.path.exists():
            # A full rebuild swaps in a new file: when the cards share it, their rows are built
            # into it by the catch-up (rebuilding again would drop the catalog's new rows).
            shared = catalog.directory == cards.path.parent.parent
            report["failure_cards"] = cards.reindex(full=full and not shared)
    return report


def workspace_index_status(catalog: MemoryCatalog) -> dict[str, Any]:
    """One row per indexed source: entries, bytes indexed and behind, file and index sizes."""
    sources = [catalog.health_report()["index"]]
    # Opening the card storage creates its folder: a status read looks for the file first.
    if not catalog.readonly and (memory_dir(catalog.root) / FAILURES_FILE).exists():
        sources.append(FailureCardStorage(catalog.root).index_status())
    return {"sources": sources}
