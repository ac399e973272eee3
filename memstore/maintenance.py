"""Index maintenance across a workspace's indexed sources (the catalog and the failure cards).

``memstore reindex``, ``memstore status`` and ``memstore watch`` act on every
indexed file of a workspace at once; this module is the one place that knows
which sources those are.
"""

from __future__ import annotations

from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.index.report import IndexState, Progress
from memstore.layout import FAILURES_FILE, memory_dir
from memstore.reports import WorkspaceReindex, WorkspaceStatus


def reindex_workspace(
    catalog: MemoryCatalog, *, full: bool = False, progress: Progress | None = None
) -> WorkspaceReindex:
    """Catch up (or rebuild) the catalog's index and, when there are cards, the card index."""
    report = catalog.reindex(full=full, progress=progress)
    if not catalog.readonly:
        cards = FailureCardStorage(catalog.root)
        if cards.path.exists():
            # A full rebuild swaps in a new file: when the cards share it, their rows are built
            # into it by the catch-up (rebuilding again would drop the catalog's new rows).
            shared = catalog.directory == cards.path.parent.parent
            return WorkspaceReindex(report, cards.reindex(full=full and not shared))
    return WorkspaceReindex(report)


def workspace_index_status(catalog: MemoryCatalog) -> WorkspaceStatus:
    """One row per indexed source: entries, bytes indexed and behind, file and index sizes."""
    sources: list[IndexState] = [catalog.health().index]
    # Opening the card storage creates its folder: a status read looks for the file first.
    if not catalog.readonly and (memory_dir(catalog.root) / FAILURES_FILE).exists():
        sources.append(FailureCardStorage(catalog.root).index_status())
    return WorkspaceStatus(tuple(sources))
