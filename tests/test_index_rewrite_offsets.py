"""The index follows memstore's own rewrites: offsets shifted by id ranges, blank lines placed by search."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog
from memstore.index import catalog_index


def _line(i: int, branch: str) -> str:
    return json.dumps(
        {
            "memory_id": f"m{i}",
            "content": f"entry {i} word{i % 7}",
            "tags": [],
            "created_at": f"2026-01-{1 + i % 28:02d}",
            "branch_name": branch,
            "run_id": None,
        }
    )


def _check(root: Path, catalog: MemoryCatalog) -> None:
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ("entry", "word3", "word0 entry"):
        assert catalog.search(query, limit=500) == scan.search(query, limit=500), query
    assert catalog.check_index().equal


@settings(max_examples=25, deadline=None)
@given(
    layout=st.lists(st.sampled_from(["keep", "gone", "blank"]), min_size=1, max_size=40),
    sparse=st.sampled_from([0, catalog_index.SPARSE_DROPS]),
)
def test_offsets_after_a_rewrite_match_the_file(
    tmp_path_factory: pytest.TempPathFactory, layout: list[str], sparse: int
) -> None:
    """Any mix of kept, removed and blank lines: the followed index answers as a scan does,
    with the blank lines placed by search (or, past the threshold, the per-row update)."""
    root = tmp_path_factory.mktemp("rw")
    catalog = MemoryCatalog(root)
    lines = ["" if kind == "blank" else _line(i, kind) for i, kind in enumerate(layout)]
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_text("".join(line + "\n" for line in lines))
    assert catalog.search("entry", limit=500) is not None  # built
    followed: list[bool] = []
    real = catalog_index.CatalogIndex.apply_rewrite

    def apply_rewrite(
        self: catalog_index.CatalogIndex, plan: catalog_index.RewritePlan, after: object, **held: Any
    ) -> bool:
        followed.append(real(self, plan, after, **held))  # type: ignore[arg-type]
        return followed[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(catalog_index.CatalogIndex, "apply_rewrite", apply_rewrite)
        patch.setattr(catalog_index, "SPARSE_DROPS", sparse)
        removed = catalog.delete_by_branch("gone")
    assert removed == layout.count("gone")
    if removed:
        assert followed == [True], "the index followed the rewrite instead of rebuilding"
        # Read before any query could notice a wrong offset and rebuild.
        data = catalog.path.read_bytes()
        starts, at = [], 0
        for line in data.split(b"\n")[:-1]:
            if line.strip():
                starts.append((at, len(line)))
            at += len(line) + 1
        with sqlite3.connect(catalog.index_path) as conn:
            held = conn.execute("SELECT off, len FROM pos ORDER BY id").fetchall()
        assert held == starts
    _check(root, catalog)


def test_the_query_after_a_followed_rewrite_reads_no_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index records the rewritten file as it is after the rename (which changes its ctime),
    so the next query finds it current instead of digesting the whole file again."""
    from memstore.index import source

    catalog = MemoryCatalog(tmp_path)
    for i in range(30):
        catalog.add(f"entry {i}", branch_name="gone" if i % 3 == 0 else "stay")
    assert catalog.search("entry", limit=100)
    assert catalog.delete_by_branch("gone") == 10
    reads: list[int] = []
    real = source.PrefixDigest.extend

    def counting(self: source.PrefixDigest, fd: int, end: int) -> None:
        reads.append(end)
        real(self, fd, end)

    monkeypatch.setattr(source.PrefixDigest, "extend", counting)
    assert len(catalog.search("entry", limit=100)) == 20
    assert reads == []
    _check(tmp_path, catalog)


def test_removed_rows_are_found_by_their_value_and_by_offset_when_that_misses(tmp_path: Path) -> None:
    """The follow-up finds the removed rows through the value's index; any offset it does not
    account for sends it to compare every row's offset, so the answer never depends on the hint."""
    catalog = MemoryCatalog(tmp_path)
    lines = [_line(i, "gone" if i % 3 == 0 else "keep") for i in range(12)]
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_text("".join(line + "\n" for line in lines))
    assert catalog.search("entry", limit=500)
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    gone = frozenset(start for start, line in zip(starts, lines, strict=True) if '"gone"' in line)
    conn = sqlite3.connect(f"file:{catalog.directory / 'index' / 'memstore.sqlite3'}?mode=ro", uri=True)
    try:
        rows = dict(conn.execute("SELECT off, id FROM pos").fetchall())
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        plan = catalog_index.RewritePlan(
            before=catalog.path.stat(), removed=gone, dropped=(), key="branch_name", value="gone"
        )
        assert catalog_index._rows_removed(conn, plan) == {off: rows[off] for off in gone}
        assert not any("json_each" in statement for statement in statements)
        for removed, key, value in [
            (gone | {starts[1]}, "branch_name", "gone"),  # a line the value does not name
            (gone - {starts[0]}, "branch_name", "gone"),  # a row with the value not removed
            (gone, "run_id", "gone"),
            (gone, "branch_name", "\ud800"),  # no SQLite text
            (gone, "", ""),
        ]:
            statements.clear()
            plan = catalog_index.RewritePlan(
                before=catalog.path.stat(), removed=removed, dropped=(), key=key, value=value
            )
            assert catalog_index._rows_removed(conn, plan) == {off: rows[off] for off in removed}
            assert any("json_each" in statement for statement in statements)
    finally:
        conn.close()
