"""memstore: persistent memory for AI coding agents, canonical in plain files.

The public names load lazily so that ``import memstore`` stays cheap: SQLAlchemy,
Alembic and watchdog are only imported by the code paths that need them.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "AutoInvalidationRule": "memstore.cards",
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
    "memory_entries_to_prompt": "memstore.models",
    "memory_entry_from_payload": "memstore.models",
    "memory_matches": "memstore.models",
    "memory_relevance_score": "memstore.models",
    "normalize_tags": "memstore.models",
}

__all__ = sorted(_EXPORTS)
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
