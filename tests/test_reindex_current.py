"""``reindex`` of an index that is already current reads; it does not queue behind a writer.

The interactive ``memstore search`` catches up through ``reindex`` (for its progress bar),
so taking the index's write lock there made every such read wait behind another
process's write transaction and fold the WAL.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from memstore.catalog import MemoryCatalog


def test_reindex_of_a_current_index_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha beta")
    assert [e.content for e in catalog.search("alpha")] == ["alpha beta"]  # built and current
    writer = sqlite3.connect(tmp_path / ".teaagent" / "index" / "memstore.sqlite3", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(MemoryCatalog(tmp_path).reindex().action), daemon=True)
    try:
        reader.start()
        reader.join(timeout=10)
        assert outcome == ["none"], "reindex of a current index waited for the write lock"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        reader.join(timeout=30)


def test_reindex_still_catches_up_what_was_appended(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha")
    catalog.search("alpha")
    with open(catalog.path, "ab") as handle:  # another tool's append
        handle.write(b'{"branch_name": null, "content": "alpha two", "created_at": "2026-01-01T00:00:00Z", '
                     b'"memory_id": "m2", "run_id": null, "tags": []}\n')
    report = MemoryCatalog(tmp_path).reindex()
    assert report.action == "appended"
    assert sorted(e.content for e in MemoryCatalog(tmp_path).search("alpha")) == ["alpha", "alpha two"]
