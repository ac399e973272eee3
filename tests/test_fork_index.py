"""A process forked while its parent was using the index (memstore.index.fork_state).

SQLite's per-process record of the index file's locks is copied into the child with the
parent's connections in it; a lock they held exclusively stays held there for ever, and
one they held shared is not the child's at the kernel.  Such a child answers from a scan
at once (exact) instead of waiting the busy timeout on every catch-up; a child forked
while the index was idle keeps using it, and the parent is untouched either way.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstore.catalog import MemoryCatalog
from memstore.index import fork_state
from memstore.index.catalog_index import CatalogIndex
from tests.test_rewrite_held_follow import _seed

Child = Callable[[], dict[str, Any]]


def _in_child(tmp_path: Path, work: Child) -> dict[str, Any]:
    """Run ``work`` in a forked child (20 s at most); its result, or the failure it raised."""
    out = tmp_path / f"child-{time.monotonic_ns()}.json"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(20)
        code = 3
        try:
            out.write_text(json.dumps(work()))
            code = 0
        except BaseException as exc:
            out.write_text(json.dumps({"error": repr(exc)}))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child was killed by signal {os.WTERMSIG(status)}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert os.WEXITSTATUS(status) == 0, result
    return result


def _searches(catalog: MemoryCatalog, root: Path) -> dict[str, Any]:
    """The child's answers through ``catalog`` against a scan's, timed; then after an add."""
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    started = time.monotonic()
    same = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
    mark = f"pid{os.getpid()}"
    added = catalog.add(f"added by the child word3 {mark}", branch_name="child")
    same = same and catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
    same = same and MemoryCatalog(root).search(mark, limit=10) == [added]
    index = catalog._index.index()
    generation = index.file.generation() if index is not None else None
    return {
        "same": same,
        "seconds": time.monotonic() - started,
        "refused": generation is not None and fork_state.refuses(generation),
        "connected": index is not None and index._conn is not None and index._pid == os.getpid(),
    }


def _aside(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".teaagent" / "index").iterdir() if "aside" in p.name or "build-" in p.name)


def _held_read(catalog: MemoryCatalog) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """Another thread holds a read transaction on the handle's connection until released."""
    index = catalog._index.index()
    assert index is not None
    inside, done = threading.Event(), threading.Event()

    def read() -> None:
        with index._mutex:
            conn = index._connection()
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM doc").fetchone()
            inside.set()
            done.wait(30)
            conn.execute("ROLLBACK")

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert inside.wait(30)
    return inside, done, thread


def test_a_child_forked_during_a_read_transaction_answers_from_a_scan_at_once(tmp_path: Path) -> None:
    catalog = _seed(tmp_path, 700)
    _inside, done, thread = _held_read(catalog)
    try:
        found = _in_child(tmp_path, lambda: _searches(catalog, tmp_path))
    finally:
        done.set()
        thread.join(30)
    assert found["same"] and found["refused"] and not found["connected"]
    assert 0 <= found["seconds"] < 5
    assert _aside(tmp_path) == []
    parent = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert catalog.search("word3", limit=10_000) == parent.search("word3", limit=10_000)  # the child's add too
    assert catalog.check_index().equal


def test_a_child_forked_while_the_index_is_idle_keeps_using_it(tmp_path: Path) -> None:
    catalog = _seed(tmp_path, 700)
    found = _in_child(tmp_path, lambda: _searches(catalog, tmp_path))
    assert found["same"] and not found["refused"] and found["connected"]
    assert catalog.check_index().equal


def test_a_grandchild_inherits_the_refusal_and_a_new_index_file_ends_it(tmp_path: Path) -> None:
    """The refusal is per index file: ``reindex --full`` swaps a new one in, and the child uses that."""
    catalog = _seed(tmp_path, 700)
    _inside, done, thread = _held_read(catalog)

    def child() -> dict[str, Any]:
        grandchild = _in_child(tmp_path, lambda: _searches(catalog, tmp_path))
        catalog.reindex(full=True)
        return {"grandchild": grandchild, "after": _searches(catalog, tmp_path)}

    try:
        found = _in_child(tmp_path, child)
    finally:
        done.set()
        thread.join(30)
    assert found["grandchild"]["same"] and found["grandchild"]["refused"]
    assert found["after"]["same"] and not found["after"]["refused"] and found["after"]["connected"]
    assert catalog.search("child", limit=10) == MemoryCatalog(tmp_path, use_index=False).search("child", limit=10)
    assert catalog.check_index().equal


def test_a_child_forked_during_the_first_build_does_not_open_the_file_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's connection (inside its transaction) is in the child's record of the file
    renamed into place: without the refusal the child waited the busy timeout on each read."""
    _seed(tmp_path, 700)
    for leftover in (tmp_path / ".teaagent" / "index").iterdir():
        leftover.unlink()
    catalog = MemoryCatalog(tmp_path)
    real_ingest = CatalogIndex._ingest
    inside, go = threading.Event(), threading.Event()

    def ingest(*args: Any, **kwargs: Any) -> Any:
        found = real_ingest(*args, **kwargs)
        inside.set()
        go.wait(30)
        return found

    monkeypatch.setattr(CatalogIndex, "_ingest", ingest)
    building = threading.Thread(target=lambda: catalog.search("note", limit=1), daemon=True)
    building.start()
    assert inside.wait(30)
    out = tmp_path / "child-result.json"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(20)
        try:
            deadline = time.monotonic() + 15
            while not catalog.index_path.exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # the parent renames the file into place
            time.sleep(0.2)
            out.write_text(json.dumps(_searches(MemoryCatalog(tmp_path), tmp_path)))
        finally:
            os._exit(0)
    go.set()
    building.join(30)
    monkeypatch.undo()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    found = json.loads(out.read_text())
    assert found["same"] and found["refused"]
    assert 0 <= found["seconds"] < 5
    assert catalog.check_index().equal


def test_a_connection_in_a_transaction_at_the_fork_is_never_closed_in_the_child(tmp_path: Path) -> None:
    """The thread that forked had the transaction open itself: no other thread's frame keeps the
    connection, and the handle forgets it in the child.  Closing it would roll back a write
    transaction, rewinding the -shm every process shares; it stays open (and unused)."""
    import gc
    import weakref

    catalog = _seed(tmp_path, 300)
    index = catalog._index.index()
    assert index is not None
    conn = index._connection()
    conn.execute("BEGIN IMMEDIATE")
    watched = weakref.ref(conn)
    del conn

    def child() -> dict[str, Any]:
        found = _searches(catalog, tmp_path)  # the handle lets go of the inherited connection
        gc.collect()
        inherited = watched()
        return {**found, "alive": inherited is not None and inherited.in_transaction}

    try:
        found = _in_child(tmp_path, child)
    finally:
        index._conn.execute("ROLLBACK")  # type: ignore[union-attr]
    assert found["alive"] and found["refused"] and found["same"]
    assert 0 <= found["seconds"] < 5
    assert catalog.check_index().equal
