"""memstore: persistent memory for AI coding agents, canonical in plain files.

The public names load lazily so that ``import memstore`` stays cheap: SQLAlchemy,
Alembic and watchdog are only imported by the code paths that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers see the real names; at run time they load on first use
    from memstore.auto_invalidation import AutoInvalidationRule
    from memstore.cards import FailureCard
    from memstore.catalog import MemoryCatalog
    from memstore.errors import MemstoreError
    from memstore.failure_cards import FailureCardStorage
    from memstore.hierarchy import MemoryHierarchy
    from memstore.models import (
        MemoryEntry,
        memory_entries_to_prompt,
        memory_entry_from_payload,
        memory_matches,
        memory_relevance_score,
        normalize_tags,
    )
    from memstore.pinned import PinnedFile, PinnedFileStorage
    from memstore.plan_mode import PlanMode, PlanModeState
    from memstore.root import find_root
    from memstore.team import TeamMemory
    from memstore.watcher import FileWatcher

_EXPORTS: dict[str, str] = {
    "AutoInvalidationRule": "memstore.auto_invalidation",
    "FailureCard": "memstore.cards",
    "FailureCardStorage": "memstore.failure_cards",
    "FileWatcher": "memstore.watcher",
    "MemoryCatalog": "memstore.catalog",
    "MemoryEntry": "memstore.models",
    "MemoryHierarchy": "memstore.hierarchy",
    "MemstoreError": "memstore.errors",
    "PinnedFile": "memstore.pinned",
    "PinnedFileStorage": "memstore.pinned",
    "PlanMode": "memstore.plan_mode",
    "PlanModeState": "memstore.plan_mode",
    "TeamMemory": "memstore.team",
    "find_root": "memstore.root",
    "memory_entries_to_prompt": "memstore.models",
    "memory_entry_from_payload": "memstore.models",
    "memory_matches": "memstore.models",
    "memory_relevance_score": "memstore.models",
    "normalize_tags": "memstore.models",
}

__all__ = [
    "AutoInvalidationRule",
    "FailureCard",
    "FailureCardStorage",
    "FileWatcher",
    "MemoryCatalog",
    "MemoryEntry",
    "MemoryHierarchy",
    "MemstoreError",
    "PinnedFile",
    "PinnedFileStorage",
    "PlanMode",
    "PlanModeState",
    "TeamMemory",
    "find_root",
    "memory_entries_to_prompt",
    "memory_entry_from_payload",
    "memory_matches",
    "memory_relevance_score",
    "normalize_tags",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
