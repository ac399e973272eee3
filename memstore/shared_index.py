"""The ``index_url=`` keyword of the stores: their own source of a shared PostgreSQL index.

A store given a URL answers its reads from the team index, restricted to its own
source (``source_name``, by default the name the CLI gives it:
:func:`memstore.source_name.default_source_name`), and from its local files
(the SQLite index or a scan) whenever the shared index cannot prove that source
current.  This module only checks the arguments and builds the policy: the
PostgreSQL modules, SQLAlchemy and psycopg load on the first read, so
``import memstore`` and the SQLite path never pay for them.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from memstore.checks import optional_str
from memstore.errors import IndexUnavailableError, InvalidArgumentError
from memstore.index_policy import IndexPolicy

if TYPE_CHECKING:
    from memstore.entry_filter import EntryFilter
    from memstore.index.pg.store_cards import PgCardIndex
    from memstore.index.pg.store_reads import PgCatalogIndex
    from memstore.index.search import PlannerFactory
    from memstore.index_url import IndexUrl
    from memstore.models import MemoryEntry

IndexT = TypeVar("IndexT")
FALLBACK = "the local files"
"""What answers when the shared index cannot (named in the warning)."""


class CatalogReads(Protocol):
    """The reads a catalog asks of an index, whichever backend holds it."""

    def search(
        self, tokens: Sequence[str], limit: int, entry_filter: EntryFilter = ..., *, planner: PlannerFactory = ...
    ) -> builtins.list[MemoryEntry]: ...

    def list(self, limit: int, entry_filter: EntryFilter = ...) -> builtins.list[MemoryEntry]: ...

    def show(self, memory_id: str) -> builtins.list[MemoryEntry]: ...


def check_index_url(index_url: object, *, use_index: bool) -> IndexUrl | None:
    """The URL a store was given, parsed; None for none (or an empty string, as ``--index-url ""``)."""
    text = optional_str("index_url", index_url)
    if text is None or not text.strip():
        return None
    if not use_index:
        raise InvalidArgumentError("index_url needs use_index=True (use_index=False forces a scan)")
    from memstore.index_url import parse_index_url  # only a catalog given a URL needs the parser

    return parse_index_url(text, origin="index_url")


def check_name(source_name: object) -> str | None:
    """The ``source_name`` keyword: None (the default name) or a valid source name."""
    if optional_str("source_name", source_name) is None:
        return None
    from memstore.team_index import check_source_name

    return check_source_name(source_name)


def _policy(
    load: Callable[[], Callable[[IndexUrl, str, Path], IndexT]],
    url: IndexUrl | None,
    name: str | None,
    root: Path,
    path: Path,
) -> IndexPolicy[IndexT] | None:
    """A policy whose index is opened on first use by the class ``load`` imports then; None without a URL."""
    if url is None:
        return None

    def open_index() -> IndexT:
        from memstore.source_name import default_source_name

        try:
            make = load()
        except ImportError as exc:
            raise IndexUnavailableError(
                f"the PostgreSQL index needs memstore[pg] (psycopg 3, SQLAlchemy): {exc}"
            ) from None
        return make(url, name or default_source_name(root), path)

    return IndexPolicy(open_index, source=path, fallback=FALLBACK)


def _catalog_class() -> type[PgCatalogIndex]:
    from memstore.index.pg.store_reads import PgCatalogIndex

    return PgCatalogIndex


def _cards_class() -> type[PgCardIndex]:
    from memstore.index.pg.store_cards import PgCardIndex

    return PgCardIndex


def catalog_policy(
    url: IndexUrl | None, name: str | None, *, root: Path, path: Path
) -> IndexPolicy[PgCatalogIndex] | None:
    """The shared index of a catalog's memory.jsonl, opened on first use; None without a URL."""
    return _policy(_catalog_class, url, name, root, path)


def cards_policy(url: IndexUrl | None, name: str | None, *, root: Path, path: Path) -> IndexPolicy[PgCardIndex] | None:
    """The shared index of a workspace's failures.json, opened on first use; None without a URL."""
    return _policy(_cards_class, url, name, root, path)
