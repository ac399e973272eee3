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
from typing import Any

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

    def apply_rewrite(self: CatalogIndex, plan: object, after: os.stat_result, **held: Any) -> bool:
        edited = self.source_path.read_bytes().replace(b"apple pie", b"grape pie")
        with open(self.source_path, "r+b") as handle:  # another tool, same inode, same length
            handle.write(edited)
        return real_apply(self, plan, after, **held)  # type: ignore[arg-type]

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)
    assert catalog.delete_by_branch("gone") == 1
    monkeypatch.setattr(CatalogIndex, "apply_rewrite", real_apply)
    scan = _scan(tmp_path)
    assert [entry.content for entry in scan.search("grape")] == ["grape pie"]
    assert catalog.search("grape") == scan.search("grape")


# ----------------------------------------------------------------------------- odd rows


def test_show_of_an_ordinary_entry_does_not_decode_every_odd_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show(id)`` reads and decodes every odd row of the file, whatever the id (perf).

    CatalogIndex.show (memstore/index/catalog_index.py) looks the id up in ``doc`` and then calls
    ``self._odd_rows`` unconditionally, which preads and JSON-decodes every odd row (odd rows have
    ``mid`` NULL, so SQL cannot find them by id).  Long CJK notes are odd (a run of 8000 term
    characters: CJK punctuation is non-ASCII, so a long note is one run), and so are entries with a
    NUL or a newline inside a tag.  Measured: 2,000 such notes in a 20,000-entry catalog make
    ``show`` 151 ms instead of 0.1 ms, on every call (ids_from and id_neighbours do the same).
    Here: 40 odd rows, and ``show`` of an ordinary id decodes all 40 of them.
    """
    from memstore.index.catalog_index import CatalogIndex

    lines = [_line(f"n{i}", "".join(chr(0x4E00 + (i * 7 + j) % 2000) for j in range(8000))) for i in range(40)]
    lines += [_line(f"m{i}", f"ordinary note {i}") for i in range(200)]
    catalog = MemoryCatalog(tmp_path)
    _write_lines(catalog.path, lines)
    assert catalog.show("m199").content == "ordinary note 199"
    decoded: list[int] = []
    real_entry_at = CatalogIndex._entry_at

    def counting(self: CatalogIndex, fd: int, off: int, length: int, *rest: object):  # type: ignore[no-untyped-def]
        decoded.append(off)
        return real_entry_at(self, fd, off, length, *rest)

    monkeypatch.setattr(CatalogIndex, "_entry_at", counting)
    assert catalog.show("m199") == _scan(tmp_path).show("m199")
    assert len(decoded) <= 1, f"show of one ordinary id decoded {len(decoded)} lines of the file"


# ----------------------------------------------------------------------------- a build in another process


def test_a_search_during_another_process_first_build_answers_from_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process builds the first index, every other search blocks until the build ends (perf).

    IndexFile._build (memstore/index/db.py) takes ``build.lock`` with FileLock.acquire, a blocking
    ``flock`` with no time limit, and holds it for the whole populate; an opener that finds no
    index file goes through ``_create`` -> ``_build`` and waits there.  Busy SQLite locks give up
    after BUSY_TIMEOUT_MS and answer from a scan ("how long a connection waits for another
    process's write lock before the call answers from a scan"); the build lock has no such bound.
    Measured on 150k entries (26 MB): a scan answers in 5 s, a search started while another
    process builds waits 19.7 s.  Here the test holds ``build.lock`` as a building process does
    (busy timeout lowered to 0.5 s) and the search must answer, from a scan, well within 8 s.
    """
    import fcntl
    import threading

    import memstore.index.db as db
    import memstore.index.settings as settings

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 500)
    monkeypatch.setattr(settings, "BUSY_TIMEOUT_MS", 500)
    _write_lines(MemoryCatalog(tmp_path).path, [_line("m1", "grape pie"), _line("m2", "plain")])
    index_dir = MemoryCatalog(tmp_path).index_path.parent
    index_dir.mkdir(parents=True, exist_ok=True)
    holder = os.open(index_dir / "build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a process building the first index
    answers: list[list[str]] = []
    try:
        search = threading.Thread(
            target=lambda: answers.append([e.memory_id for e in MemoryCatalog(tmp_path).search("grape")]),
            daemon=True,
        )
        search.start()
        search.join(8)
        finished = not search.is_alive()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    search.join(30)
    assert finished, "the search waited for another process's build instead of answering from a scan"
    assert answers == [["m1"]]


# ----------------------------------------------------------------------------- damaged rows in a trusted index file


def _damaged_catalog(tmp_path: Path, damage: str) -> tuple[MemoryCatalog, list[str]]:
    catalog = MemoryCatalog(tmp_path)
    ids = [catalog.add(f"pie number {i}", tags=["t"]).memory_id for i in range(5)]
    assert len(catalog.search("pie")) == 5
    conn = sqlite3.connect(catalog.index_path)
    with conn:
        conn.execute(damage)
    conn.close()
    return MemoryCatalog(tmp_path), ids


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM pos WHERE id = 2",
        "UPDATE pos SET len = -1 WHERE id = 2",
        "UPDATE pos SET len = 'abc' WHERE id = 2",
    ],
    ids=["pos-row-missing", "negative-length", "text-length"],
)
def test_a_damaged_row_in_the_index_is_not_a_crash(tmp_path: Path, damage: str) -> None:
    """search / list / show raise KeyError, OSError or TypeError on an index file with a damaged row (crash).

    The file passes every check at open (exact schema, origin row of this file on this machine), so
    its rows are used as they are: CatalogIndex.search (memstore/index/catalog_index.py) indexes
    ``places[hit.row_id]`` (KeyError when pos lacks the row) and CatalogIndex._entry_at calls
    ``os.pread(fd, length, off)`` with whatever pos holds (OSError for a negative value, TypeError
    for text).  Only StaleRowError and DatabaseFault are taken as damage (rebuild, or scan), and
    IndexPolicy.ask only catches IndexUnavailableError: the exception reaches the caller (the CLI,
    the MCP server).  A damaged index must never change an answer, let alone fail the call.
    """
    catalog, ids = _damaged_catalog(tmp_path, damage)
    scan = _scan(tmp_path)
    assert catalog.search("pie") == scan.search("pie")
    assert catalog.list(limit=10) == scan.list(limit=10)
    assert [catalog.show(memory_id) for memory_id in ids] == [scan.show(memory_id) for memory_id in ids]


def test_two_index_rows_naming_one_line_do_not_return_an_entry_twice(tmp_path: Path) -> None:
    """An index whose pos table names one line for two rows answers with that entry twice (wrong answer).

    CatalogIndex.search and .list (memstore/index/catalog_index.py) read each hit at its pos offset
    and only check that the entry read back matches the tokens (search) or nothing (list); no check
    that the rows name distinct lines, or that the line read is the row's entry (its memory_id).
    With row 2 pointing at row 3's line, ``search("pie")`` returns entry 3 twice and never entry 2,
    and ``list`` does the same, from a file that passed the open checks.
    """
    catalog, _ids = _damaged_catalog(tmp_path, "UPDATE pos SET off = (SELECT off FROM pos WHERE id = 3) WHERE id = 2")
    scan = _scan(tmp_path)
    assert catalog.search("pie") == scan.search("pie")
    assert catalog.list(limit=10) == scan.list(limit=10)


def test_a_search_that_opened_the_file_before_a_rewrite_does_not_rebuild_the_index_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read racing another handle's delete rebuilds the whole index to the old file, then again (perf).

    IndexedSource._read (memstore/index/base.py) opens the catalog, then _query compares the index
    with that descriptor.  When a rewrite replaced the file and followed it in the index
    (apply_rewrite) in between, which includes a catch-up that waited behind apply_rewrite's
    transaction, the state names the new inode and the descriptor the old one: _catch_up takes
    Change.REPLACED and rebuilds every row from the *replaced* file, undoing the write-through.  The
    next query, on the current file, rebuilds everything once more.  DESIGN.md §5: memstore's own
    rewrites update the index "instead of forcing a rebuild"; here each costs two full rebuilds
    (minutes on a large catalog).  The rewrite is placed between the open and the check.
    """
    from memstore.index.base import IndexedSource
    from memstore.index.catalog_index import CatalogIndex

    reader, writer = MemoryCatalog(tmp_path), MemoryCatalog(tmp_path)
    for i in range(20):
        writer.add(f"note {i}", branch_name="gone" if i % 2 else "stay")
    assert len(reader.search("note", limit=50)) == 20
    clears: list[int] = []
    real_clear = CatalogIndex._clear

    def counting_clear(self: CatalogIndex, conn: sqlite3.Connection) -> None:
        clears.append(1)
        real_clear(self, conn)

    monkeypatch.setattr(CatalogIndex, "_clear", counting_clear)
    real_query = IndexedSource._query
    raced: list[int] = []

    def query(self: IndexedSource, fd: int, answer):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(-1)
            raced[0] = writer.delete_by_branch("gone")  # another handle, after this read opened the file
        return real_query(self, fd, answer)

    monkeypatch.setattr(IndexedSource, "_query", query)
    reader.search("note", limit=50)
    monkeypatch.setattr(IndexedSource, "_query", real_query)
    assert raced == [10]
    assert reader.search("note", limit=50) == _scan(tmp_path).search("note", limit=50)
    assert clears == [], f"{len(clears)} full rebuilds of the index for one delete followed by the index"


def test_cutting_a_torn_tail_the_index_never_read_does_not_rebuild_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first add after a writer was killed mid-line costs a full rebuild of the index (perf).

    A torn last line is never indexed (``indexed_to`` stops before it; ``size`` includes it).  The
    next add sets it aside and truncates the file back to ``indexed_to`` (GroupCommit.append), then
    appends a line shorter than the fragment.  SourceState.classify (memstore/index/source.py)
    calls any file no larger than the recorded size REPLACED, without checking that every indexed
    byte is intact (the same ``verified_prefix`` an append gets), so _catch_up rebuilds every row.
    A 3 KB fragment and a small add rebuild a 50-entry index here; on a large catalog, minutes.
    """
    from memstore.index.catalog_index import CatalogIndex

    catalog = MemoryCatalog(tmp_path)
    for i in range(50):
        catalog.add(f"note {i}")
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"content": "' + b"x" * 3000)  # a writer killed in the middle of its line
    assert len(catalog.search("note", limit=100)) == 50
    clears: list[int] = []
    real_clear = CatalogIndex._clear

    def counting_clear(self: CatalogIndex, conn: sqlite3.Connection) -> None:
        clears.append(1)
        real_clear(self, conn)

    monkeypatch.setattr(CatalogIndex, "_clear", counting_clear)
    catalog.add("after the crash")
    assert catalog.search("note crash") == _scan(tmp_path).search("note crash")
    assert [entry.content for entry in catalog.search("crash")] == ["after the crash"]
    assert clears == [], "the index was rebuilt although every indexed byte is unchanged"


def test_a_delete_whose_inode_number_came_back_keeps_acknowledged_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete prepared on a file that was replaced meanwhile loses acknowledged adds and resurrects deletes.

    catalog_rewrite.prepare (memstore/catalog_rewrite.py) copies the file without the lock and then
    *closes* it, remembering only (dev, ino, upto); catalog_rewrite.finish takes the stale copy
    whenever the file now at the path has the same (dev, ino) and is at least ``upto`` long.  Once
    the prepared file is replaced and closed, its inode number is free, and ext4 hands it to the
    next new file: here another handle's second rewrite.  After more adds the file is long enough,
    and finish writes the old bytes ``[0, upto)`` (entries of branches "b" and "c", deleted by the
    other handle, come back) followed by what lies past ``upto`` in the new file (the adds that
    landed before ``upto`` are gone).  Another handle stands in for other processes.
    """
    from memstore import catalog_rewrite

    real_prepare = catalog_rewrite.prepare

    def attempt(root: Path) -> tuple[bool, int, list[str | None]]:
        # Without the index only the catalog's own files take inode numbers (the outcome is the same with it).
        catalog, other = MemoryCatalog(root, use_index=False), MemoryCatalog(root, use_index=False)
        for i in range(30):
            catalog.add(f"entry {i}", branch_name=("a", "b", "c")[i % 3])
        acknowledged: list[str] = []
        reused: list[bool] = []

        def prepare(path: Path, *, key: str, value: str) -> catalog_rewrite.Prepared | None:
            prepared = real_prepare(path, key=key, value=value)
            if not reused:
                reused.append(False)  # the other handle's own rewrites prepare plainly
                assert prepared is not None
                other.delete_by_branch("b")  # other processes' rewrites
                other.delete_by_branch("c")
                for _ in range(30):
                    if os.stat(path).st_ino == prepared.ino:
                        break
                    other.add("scratch", branch_name="t")
                    other.delete_by_branch("t")
                reused[0] = os.stat(path).st_ino == prepared.ino
                for k in range(40):
                    acknowledged.append(other.add(f"acknowledged add {k}", branch_name="z").memory_id)
            return prepared

        monkeypatch.setattr(catalog_rewrite, "prepare", prepare)
        catalog.delete_by_branch("a")
        monkeypatch.setattr(catalog_rewrite, "prepare", real_prepare)
        entries = _scan(root).list(limit=1000)
        lost = len(set(acknowledged) - {entry.memory_id for entry in entries})
        return reused[0], lost, sorted({entry.branch_name for entry in entries} - {"z"})

    for n in range(5):  # another program may take the freed inode number first: try again
        reused, lost, back = attempt(tmp_path / f"try{n}")
        if reused:
            break
    else:
        pytest.skip("this file system did not reuse the inode number")
    assert (lost, back) == (0, []), f"{lost} of 40 acknowledged adds lost; deleted branches back: {back}"


def test_an_index_left_by_a_process_ended_with_sigterm_is_not_rebuilt(tmp_path: Path) -> None:
    """Every process that used the index and then got SIGTERM (or SIGKILL, OOM) costs a full rebuild (perf).

    IndexFile._hold_open_lock (memstore/index/db.py) takes any non-empty ``-wal`` beside an index no
    connection holds for planted, and the file is set aside ("damaged") and rebuilt.  But the WAL of
    a connection that wrote stays non-empty until its last connection closes (checkpoints do not
    truncate it), and only atexit closes connections: SIGTERM, the default way to stop a process
    (systemd, docker stop, ``timeout``, an editor stopping its MCP server), ends Python without
    atexit.  So the next command after such a stop rebuilds the whole index (20 s for 150k
    entries, measured) and warns that the index is unusable.
    """
    import signal
    import subprocess
    import sys

    catalog = MemoryCatalog(tmp_path)
    for i in range(30):
        catalog.add(f"note {i}")
    assert len(catalog.search("note", limit=50)) == 30
    index = catalog._index.index()
    assert index is not None
    index.close()  # this process holds the index no longer: only the child will
    code = (
        "import sys, time\n"
        "from memstore.catalog import MemoryCatalog\n"
        "c = MemoryCatalog(sys.argv[1]); c.add('one more note'); c.search('note')\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    fresh = MemoryCatalog(tmp_path)
    assert len(fresh.search("note", limit=50)) == 31
    set_aside = sorted(path.name for path in fresh.index_path.parent.glob("*.damaged-*"))
    assert set_aside == [], f"the index was set aside and rebuilt: {set_aside}"
