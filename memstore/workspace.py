"""The stores of one workspace root, opened the way both faces (CLI and MCP server) open them.

``open_catalog`` is the catalog a command reads or writes; ``status_report``
assembles counts, health and index state of every store in one document;
:class:`Workspace` keeps the stores of a long-lived process (the MCP server)
open between calls, each created on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstore.errors import StorageError
from memstore.layout import has_store

if TYPE_CHECKING:
    from memstore.catalog import MemoryCatalog
    from memstore.failure_cards import FailureCardStorage
    from memstore.hierarchy import MemoryHierarchy
    from memstore.pinned import PinnedFileStorage
    from memstore.team import TeamMemory


def workspace_root(root: str | os.PathLike[str] | None) -> Path:
    """The root a command works on (see :func:`memstore.root.find_root`).

    The one place the faces resolve ``--root``: the one given (which must exist),
    else ``$MEMSTORE_ROOT``, the nearest ``.teaagent/`` upwards, the git top, the cwd.
    """
    from memstore.root import find_root

    found = find_root(root)
    # Paths in the output stay short when the root is where the command runs.
    return Path(".") if root is None and found == Path.cwd() else found


def open_catalog(root: Path, *, for_reading: bool = False) -> MemoryCatalog:
    """The project catalog; a read falls back to readonly when the store exists but cannot be written."""
    from memstore.catalog import MemoryCatalog

    try:
        return MemoryCatalog(root)
    except StorageError:
        if for_reading and has_store(root):
            return MemoryCatalog(root, readonly=True)
        raise


class Workspace:
    """Lazily opened, reused stores of one root (a long-lived process keeps their caches warm)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._catalog: MemoryCatalog | None = None
        self._hierarchy: MemoryHierarchy | None = None
        self._cards: FailureCardStorage | None = None
        self._pins: PinnedFileStorage | None = None
        self._team: TeamMemory | None = None

    @property
    def catalog(self) -> MemoryCatalog:
        if self._catalog is None:
            self._catalog = open_catalog(self.root, for_reading=True)
        return self._catalog

    def has_store(self) -> bool:
        return has_store(self.root)

    @property
    def reading_catalog(self) -> MemoryCatalog:
        """The catalog for a read: on a root without a store a readonly one, which creates nothing (DESIGN §9)."""
        if self._catalog is None and not self.has_store():
            from memstore.catalog import MemoryCatalog

            return MemoryCatalog(self.root, readonly=True)
        return self.catalog

    @property
    def reading_failure_cards(self) -> FailureCardStorage | None:
        """The failure cards for a read; None on a root without a store (the answer is empty)."""
        if self._cards is None and not self.has_store():
            return None
        return self.failure_cards

    @property
    def hierarchy(self) -> MemoryHierarchy:
        """Every tier, for reads only: readonly, so neither ``.teaagent`` nor the personal folder is created."""
        if self._hierarchy is None:
            from memstore.hierarchy import MemoryHierarchy

            self._hierarchy = MemoryHierarchy(self.root, readonly=True)
        return self._hierarchy

    @property
    def failure_cards(self) -> FailureCardStorage:
        if self._cards is None:
            from memstore.failure_cards import FailureCardStorage

            self._cards = FailureCardStorage(self.root)
        return self._cards

    @property
    def pins(self) -> PinnedFileStorage:
        if self._pins is None:
            from memstore.pinned import PinnedFileStorage

            self._pins = PinnedFileStorage(self.root)
        return self._pins

    @property
    def team(self) -> TeamMemory:
        if self._team is None:
            from memstore.team import TeamMemory

            self._team = TeamMemory(self.root)
        return self._team


def status_report(workspace: Workspace) -> dict[str, Any]:
    """Counts of every store, the catalog's health and the index state per source, in one document.

    ``{"root": str, "counts": {...}, "health": {...}, "index": {"sources": [...]}}``; ``health``
    is the catalog's health report without its index part, which ``index`` gives per source.
    """
    from memstore.maintenance import workspace_index_status

    catalog = workspace.reading_catalog
    health = catalog.health()
    storage = workspace.reading_failure_cards
    cards = storage.list_all() if storage is not None else []
    counts = {
        "entries": health.total_entries,
        "corrupt_entries": health.corrupt_entries,
        "quarantined_entries": health.quarantined_entries,
        "failure_cards": len(cards),
        "active_failure_cards": sum(1 for card in cards if card.is_active()),
        "pinned_files": len(workspace.pins.list_all()),
        "team_notes": len(workspace.team.list()),
    }
    return {
        "root": str(workspace.root),
        "counts": counts,
        "health": health.file_dict(),
        "index": workspace_index_status(catalog).to_dict(),
    }
