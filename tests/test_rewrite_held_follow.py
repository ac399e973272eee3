"""A rewrite takes the index's write transaction before its replace and follows in it.

Between the replace and the follow-up, a reader elsewhere finds a file that is no append of
the indexed one.  Without the held transaction it rebuilt the index from the whole file (about
20 s at 1M entries) while the follow-up waited for that build and gave up; with it the reader
waits for the follow-up and then finds the index level.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from memstore import files
from memstore.catalog import MemoryCatalog
from memstore.index import base
from memstore.index.catalog_index import CatalogIndex, RewritePlan
from memstore.jsonl import encode_entries


def _seed(root: Path, count: int) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    entries = [
        catalog._new_entry(f"note {n} word{n % 5}", (), "gone" if n % 7 == 3 else "kept", None) for n in range(count)
    ]
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    with open(catalog.path, "ab") as handle:
        handle.write(encode_entries(entries))
    assert catalog.search("note", limit=1)  # built
    return catalog


def _as_a_scan(root: Path, catalog: MemoryCatalog) -> None:
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ("note", "word3", "word0 note"):
        assert catalog.search(query, limit=10_000) == scan.search(query, limit=10_000), query
    assert catalog.check_index().equal


class _Rebuilds:
    """Counts the index being emptied to be filled again from the whole file."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = CatalogIndex._clear

        def clear(index: CatalogIndex, conn: Any) -> None:
            self.count += 1
            real(index, conn)

        monkeypatch.setattr(CatalogIndex, "_clear", clear)


def test_a_reader_between_the_replace_and_the_follow_up_waits_instead_of_rebuilding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _seed(tmp_path, 2000)
    reader = MemoryCatalog(tmp_path)  # another handle: its own connection, as another process has
    assert reader.search("note", limit=1)
    rebuilds = _Rebuilds(monkeypatch)
    answers: list[list[str]] = []
    real_replace = files.os.replace

    def search_elsewhere() -> None:
        answers.append([entry.content for entry in reader.search("word3", limit=10_000)])

    searcher = threading.Thread(target=search_elsewhere)

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path:
            searcher.start()  # finds the new file and an index that has not followed it yet
            searcher.join(0.5)
            assert searcher.is_alive(), "the reader did not wait for the follow-up"

    monkeypatch.setattr(files.os, "replace", replace)
    gone = catalog.delete_by_branch("gone")
    monkeypatch.undo()
    searcher.join(30)
    assert not searcher.is_alive()
    assert gone == len([n for n in range(2000) if n % 7 == 3])
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert answers == [[entry.content for entry in scan.search("word3", limit=10_000)]]
    assert rebuilds.count == 0
    _as_a_scan(tmp_path, catalog)
    _as_a_scan(tmp_path, reader)


def test_a_busy_index_leaves_the_follow_up_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another connection writing the index: the hold is not waited for, the follow-up runs after."""
    catalog = _seed(tmp_path, 500)
    holds: list[object] = []
    real_hold = CatalogIndex.hold_write

    def hold_write(index: CatalogIndex) -> base.HeldWrite | None:
        import sqlite3

        other = sqlite3.connect(index.file.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            held = real_hold(index)
        finally:
            other.execute("ROLLBACK")
            other.close()
        holds.append(held)
        return held

    monkeypatch.setattr(CatalogIndex, "hold_write", hold_write)
    followed: list[bool] = []
    real_apply = CatalogIndex.apply_rewrite

    def apply_rewrite(index: CatalogIndex, plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
        followed.append(real_apply(index, plan, after, **held))
        return followed[-1]

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)
    assert catalog.delete_by_branch("gone")
    assert holds == [None]
    assert followed == [True]
    monkeypatch.undo()
    _as_a_scan(tmp_path, catalog)


@pytest.mark.parametrize("where", ["before", "replace"])
def test_a_failed_rewrite_releases_the_held_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The rewrite fails after the hold (quarantine's records, or the replace itself): the index's
    transaction is rolled back and its mutex freed, so this handle and others go on at once."""
    catalog = _seed(tmp_path, 500)
    before = catalog.path.read_bytes()

    def refuse(*_args: Any) -> None:
        raise OSError(5, "Input/output error")

    if where == "replace":
        monkeypatch.setattr(files.os, "replace", refuse)
        with pytest.raises(Exception):  # noqa: B017 - the typed error of a failed replace
            catalog.delete_by_branch("gone")
    else:
        from memstore import catalog_rewrite

        real_finish = catalog_rewrite.finish

        def finish(*args: Any, **kwargs: Any) -> Any:
            kwargs["before"] = refuse
            return real_finish(*args, **kwargs)

        monkeypatch.setattr(catalog_rewrite, "finish", finish)
        with pytest.raises(OSError):
            catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert catalog.path.read_bytes() == before
    other = MemoryCatalog(tmp_path)
    done = threading.Event()

    def write_elsewhere() -> None:
        other.reindex()  # needs the index's write lock
        done.set()

    thread = threading.Thread(target=write_elsewhere)
    thread.start()
    thread.join(5)
    assert done.is_set(), "the failed rewrite kept the index's write transaction"
    assert catalog.search("note", limit=1)  # and this handle's mutex is free
    assert catalog.delete_by_branch("gone") == len([n for n in range(500) if n % 7 == 3])
    _as_a_scan(tmp_path, catalog)


def test_nothing_to_remove_releases_the_held_transaction(tmp_path: Path) -> None:
    catalog = _seed(tmp_path, 200)
    assert catalog.delete_by_branch("absent") == 0
    other = MemoryCatalog(tmp_path)
    thread = threading.Thread(target=other.reindex)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    _as_a_scan(tmp_path, catalog)
