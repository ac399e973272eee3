"""Review 25b: the rewrite's held index transaction (935fd93) and its retries (e41804d, 4f0ebb0).

Each test forces one exit path of ``MemoryCatalog._rewrite_once`` between taking the index's
write transaction and the follow-up, then asks: did the call end with memstore's own error
(or none), is the index's write lock and the handle's mutex free again, and does the index
answer exactly what a scan of the file does.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from memstore import files
from memstore.catalog import MemoryCatalog
from memstore.group_commit import GroupCommit
from memstore.index.catalog_index import CatalogIndex
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


def _gone(count: int) -> int:
    return len([n for n in range(count) if n % 7 == 3])


def _as_a_scan(root: Path) -> None:
    fresh = MemoryCatalog(root)
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ("note", "word3", "word0 note"):
        assert fresh.search(query, limit=10_000) == scan.search(query, limit=10_000), query
    assert fresh.check_index().equal


def _index_write_is_free(catalog: MemoryCatalog) -> None:
    """Another connection gets the index's write lock at once, and another thread this handle's mutex."""
    index = catalog._index.index()
    assert index is not None
    other = sqlite3.connect(index.file.path, isolation_level=None, timeout=0.5)
    try:
        other.execute("BEGIN IMMEDIATE")  # raises 'database is locked' while a transaction is held
        other.execute("ROLLBACK")
    finally:
        other.close()
    answered = threading.Event()

    def search() -> None:
        catalog.search("note", limit=1)
        answered.set()

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    thread.join(5)
    assert answered.is_set(), "the handle's index mutex is still held"


@pytest.mark.parametrize("how", ["reindex --full", "set aside"])
def test_index_file_swapped_between_the_hold_and_the_follow_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Another handle (another process alike) swaps the index file in after the hold: the
    follow-up reconnects, and the held transaction's connection is closed by then.  Releasing
    it must not raise (it raised sqlite3.ProgrammingError out of delete_by_branch, after the
    entries were removed)."""
    catalog = _seed(tmp_path, 600)
    other = MemoryCatalog(tmp_path)
    assert other.search("note", limit=1)
    real_replace = files.os.replace

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path:
            index = other._index.index()
            assert index is not None
            if how == "reindex --full":
                other.reindex(full=True)
            else:
                index.file.set_aside("review 25b")

    monkeypatch.setattr(files.os, "replace", replace)
    assert catalog.delete_by_branch("gone") == _gone(600)
    monkeypatch.undo()
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def test_index_damaged_during_the_follow_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follow-up finds the index damaged: it is set aside (its connection closed) and the
    delete, done and durable, returns normally instead of raising sqlite3.ProgrammingError."""
    catalog = _seed(tmp_path, 600)

    def damaged(*_args: Any) -> bool:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(CatalogIndex, "_apply_rewrite", damaged)
    assert catalog.delete_by_branch("gone") == _gone(600)
    monkeypatch.undo()
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_error_after_the_lock_but_before_the_follow_up_releases_the_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """An error in the cleanup between the writer lock and the follow-up (a Ctrl-C while the old
    file's descriptors close, which frees its blocks and takes a while) left the index's write
    transaction open and the handle's mutex held: every other writer of the index waited its
    busy timeout and gave up, and every other thread of the handle waited forever."""
    catalog = _seed(tmp_path, 600)
    real_release = GroupCommit.release_descriptors
    raised: list[bool] = []

    def release_descriptors(group: GroupCommit) -> None:
        real_release(group)
        if not raised:
            raised.append(True)
            raise error(5, "interrupted") if error is OSError else error()

    monkeypatch.setattr(GroupCommit, "release_descriptors", release_descriptors)
    with pytest.raises(error):
        catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert raised
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)
    assert catalog.delete_by_branch("gone") == 0
