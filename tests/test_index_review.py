"""Adversarial review of the word index, its builds and rewrites: each test pins one defect found and fixed.

Every test here failed on the code it was written against, for the reason its docstring gives; the
answers are always compared with a scan of the canonical file (``use_index=False``), which is the
spec's behaviour.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from memstore.catalog import MemoryCatalog


def _line(memory_id: str, content: str, *, tags: list[str] | None = None, created_at: str = "2026-01-01") -> str:
    payload = {
        "memory_id": memory_id,
        "content": content,
        "tags": tags or [],
        "created_at": created_at,
        "branch_name": None,
        "run_id": None,
    }
    return json.dumps(payload, sort_keys=True)


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _scan(root: Path) -> MemoryCatalog:
    return MemoryCatalog(root, use_index=False, readonly=True)


# ----------------------------------------------------------------------------- search --explain


def test_explain_of_a_token_with_two_separators_side_by_side_answers(tmp_path: Path) -> None:
    """``explain("->")`` raises ValueError (``memstore search --explain -- '->'`` exits 1, no answer).

    Since marks include adjacent pairs, a mark code can be ``x2dx3e``; TracedPlanner._mark
    (memstore/index/trace.py:168) still decodes every code as one ``x`` and two hex digits.
    """
    catalog = MemoryCatalog(tmp_path)
    entry = catalog.add("call a -> b")
    assert catalog.search("->") == [entry]
    plan = catalog.explain("->")
    assert plan.memory_ids == (entry.memory_id,)


# ----------------------------------------------------------------------------- builds and external writers


@pytest.mark.parametrize("build", ["first build", "rebuild after a checkout"])
def test_an_in_place_save_during_a_build_is_not_taken_for_an_append(tmp_path: Path, build: str) -> None:
    """An editor saving in place (same inode, longer file) while the index is being built leaves stale rows.

    The build parses the bytes it read, then ``SourceState.of_file`` (memstore/index/source.py,
    called at the end of CatalogIndex._ingest) fingerprints and digests the bytes the file holds
    *now*, next to the size and mtime of the stat taken before the parse.  The next query sees a
    grown file whose whole prefix digest matches, takes it for an append, and keeps the rows of
    the old first line: ``search("grape")`` finds nothing although the file holds "grape pie".
    The progress callback only marks a moment inside the build at which another process writes.
    """
    catalog = MemoryCatalog(tmp_path)
    _write_lines(catalog.path, [_line("m1", "apple pie"), _line("m2", "plain")])
    if build == "rebuild after a checkout":
        assert [entry.memory_id for entry in catalog.search("plain")] == ["m2"]
        checkout = catalog.path.with_name("checkout.tmp")
        checkout.write_text(catalog.path.read_text(encoding="utf-8") + _line("m0", "x") + "\n")
        os.replace(checkout, catalog.path)
    saved: list[int] = []

    def save_in_place(done: int, total: int) -> None:
        if saved:
            return
        saved.append(done)
        # Same length first line, one entry added: what `cp`, shell `>` or an in-place editor save does.
        with open(catalog.path, "r+b") as handle:
            handle.truncate(0)
            lines = [_line("m1", "grape pie"), _line("m2", "plain"), _line("m3", "an extra, longer entry")]
            handle.write("".join(line + "\n" for line in lines).encode())

    catalog.reindex(progress=save_in_place)
    assert saved, "the build reported progress"
    scan = _scan(tmp_path)
    assert [entry.memory_id for entry in scan.search("grape")] == ["m1"]
    assert catalog.search("grape") == scan.search("grape")


# ----------------------------------------------------------------------------- the vocabulary


@pytest.mark.parametrize("table", ["term_tri", "term_gram"])
def test_check_index_sees_a_term_its_lookup_table_no_longer_finds(tmp_path: Path, table: str) -> None:
    """A damaged lookup table hides a term from every search, and ``check_index`` calls the index equal.

    vocabulary.differences (memstore/index/vocabulary.py, the ``lookups`` sum) compares only the
    number of rows and the sum of rowids of term_tri / term_gram with the term table, never the
    text filed under each rowid: the same rowid filed under other text passes.  The search for
    "elt" (term_tri) or "lt" (term_gram) then misses "beta delta" until something else rebuilds.
    """
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha beta")
    catalog.add("beta delta")
    assert catalog.check_index().equal
    query = "elt" if table == "term_tri" else "lt"
    with sqlite3.connect(catalog.index_path) as conn:
        (term_id,) = conn.execute("SELECT id FROM term WHERE kind = 0 AND text = 'delta'").fetchone()
        if table == "term_tri":
            filed, other = "delta", "qqqqq"
        else:
            from memstore.index.terms import gram_text

            filed, other = gram_text("delta"), gram_text("qqqqq")
        conn.execute(f"INSERT INTO {table}({table}, rowid, c, t) VALUES ('delete', ?, ?, '')", (term_id, filed))
        conn.execute(f"INSERT INTO {table}(rowid, c, t) VALUES (?, ?, '')", (term_id, other))
    report = catalog.check_index()
    assert not report.equal, "the index hides an entry from a search, yet the check calls it equal"
    assert catalog.search(query) == _scan(tmp_path).search(query)


def test_deleted_entries_leave_no_terms_behind(tmp_path: Path) -> None:
    """Terms of deleted rows stay in the vocabulary for good: it grows with every add/delete cycle.

    vocabulary.remove (memstore/index/vocabulary.py) only lowers counts ("the terms stay"), and
    nothing but a full rebuild ever drops a term or its term_tri / term_gram entries.  After 250
    cycles of an entry with a unique word added and deleted (run summaries, scratch notes), the
    term table holds 250 dead terms more than a rebuild of the same file; and a piece that only one
    live row holds now names more terms than TERM_CAP, so the planner treats it as dense and walks
    instead of narrowing to that row (the trace says "more than 200 terms").
    """
    catalog = MemoryCatalog(tmp_path)
    for i in range(20):
        catalog.add(f"steady note {i}")
    live = catalog.add("job7x is the only live job")
    for i in range(250):
        catalog.add(f"scratch job{i} output", run_id="scratch")
        assert catalog.delete_by_run_id("scratch") == 1
    assert catalog.search("job") == [live]
    with sqlite3.connect(catalog.index_path) as conn:
        churned = conn.execute("SELECT count(*) FROM term").fetchone()[0]
    plan = catalog.explain("job")
    catalog.reindex(full=True)
    with sqlite3.connect(catalog.index_path) as conn:
        rebuilt = conn.execute("SELECT count(*) FROM term").fetchone()[0]
    assert churned == rebuilt, f"{churned - rebuilt} terms of deleted rows left in the vocabulary"
    assert not any("more than" in step.outcome for step in plan.steps if step.step == "terms"), plan.steps


# ----------------------------------------------------------------------------- rewrites and other tools


def test_an_in_place_edit_between_rewrite_prepare_and_finish_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tool's in-place save made while a delete prepares is silently reverted by the delete.

    catalog_rewrite.prepare (memstore/catalog_rewrite.py) copies bytes ``[0, upto)`` without the
    lock, and catalog_rewrite.finish reuses that copy whenever the inode is the same and the file
    did not shrink, on the premise "writers only ever append".  An editor saving in place (same
    inode, same length: "apple pie" -> "grape pie") in between is thrown away: the rewritten file
    holds the old line, and no reader ever sees the edit.
    """
    from memstore import catalog_rewrite

    catalog = MemoryCatalog(tmp_path)
    catalog.add("apple pie", branch_name="stay")
    catalog.add("to go", branch_name="gone")
    real_prepare = catalog_rewrite.prepare

    def prepare(path: Path, *, key: str, value: str) -> catalog_rewrite.Prepared | None:
        prepared = real_prepare(path, key=key, value=value)
        edited = path.read_bytes().replace(b"apple pie", b"grape pie")
        with open(path, "r+b") as handle:  # same inode, same length
            handle.write(edited)
        return prepared

    monkeypatch.setattr(catalog_rewrite, "prepare", prepare)
    assert catalog.delete_by_branch("gone") == 1
    assert [entry.content for entry in _scan(tmp_path).search("pie")] == ["grape pie"], catalog.path.read_text()


def test_an_in_place_edit_before_the_index_follows_a_rewrite_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-place save landing between a rewrite's replace and the index follow-up is never indexed.

    MemoryCatalog._rewrite_without (memstore/catalog.py) calls ``index.apply_rewrite`` after the
    writer lock is released; CatalogIndex._apply_rewrite (memstore/index/catalog_index.py) accepts
    the file when its (dev, ino, size) equal the replacement's, ignoring mtime/ctime and content, and
    then records ``SourceState.of_file`` of the bytes now on disk.  A same-length edit in that window
    ("apple pie" -> "grape pie") is thus recorded as indexed: ``search("grape")`` misses the entry
    from then on (until ``check_index`` happens to run), while a scan finds it.
    """
    from memstore.index.catalog_index import CatalogIndex

    catalog = MemoryCatalog(tmp_path)
    catalog.add("apple pie", branch_name="stay")
    catalog.add("to go", branch_name="gone")
    assert catalog.search("pie")
    real_apply = CatalogIndex.apply_rewrite

    def apply_rewrite(self: CatalogIndex, plan: object, after: os.stat_result) -> bool:
        edited = self.source_path.read_bytes().replace(b"apple pie", b"grape pie")
        with open(self.source_path, "r+b") as handle:  # another tool, same inode, same length
            handle.write(edited)
        return real_apply(self, plan, after)  # type: ignore[arg-type]

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)
    assert catalog.delete_by_branch("gone") == 1
    monkeypatch.setattr(CatalogIndex, "apply_rewrite", real_apply)
    scan = _scan(tmp_path)
    assert [entry.content for entry in scan.search("grape")] == ["grape pie"]
    assert catalog.search("grape") == scan.search("grape")
