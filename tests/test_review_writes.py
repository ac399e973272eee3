"""Adversarial review of the write path (group commit, rewrites, index follow-up).

Each test records one defect, found and fixed; it failed on the code it was written against.  The
oracle is a scan (``MemoryCatalog(root, use_index=False, readonly=True)``), the
writes that were acknowledged, or the spec/DESIGN.
"""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest

from memstore import MemoryCatalog
from memstore.errors import MemstoreError


def _scan(root: Path) -> MemoryCatalog:
    return MemoryCatalog(root, use_index=False, readonly=True)


def _ids(entries) -> list[str]:
    return [entry.memory_id for entry in entries]


def test_sync_lock_hardlinked_to_catalog_overwrites_first_entry(tmp_path: Path) -> None:
    """memstore/group_commit.py GroupCommit._open_sync + sync_record.SyncRecord.write: the sync
    lock is untrusted (DESIGN §9) and opened with O_NOFOLLOW only, which does not catch a *hard*
    link.  ``memory.sync.lock`` hard-linked to ``memory.jsonl`` gets the record pwritten at
    offset 0 of the canonical file: the first acknowledged entry is overwritten with binary.
    Severity: data loss."""
    catalog = MemoryCatalog(tmp_path)
    added = [catalog.add(f"entry number {i} with some text") for i in range(5)]
    store = tmp_path / ".teaagent"
    os.unlink(store / "memory.sync.lock")
    os.link(store / "memory.jsonl", store / "memory.sync.lock")
    with contextlib.suppress(MemstoreError):  # refusing the add would be fine; losing old entries is not
        added.append(catalog.add("after the link"))
    assert set(_ids(added)) <= set(_ids(_scan(tmp_path).list(limit=100)))


def test_index_shm_hardlinked_to_catalog_destroys_catalog(tmp_path: Path) -> None:
    """memstore/index/db.py IndexFile._drop_linked_sidecars: sidecars are checked with
    ``S_ISREG`` only, so a hard link at ``index/memstore.sqlite3-shm`` to ``memory.jsonl``
    passes; SQLite truncates and initialises the -shm as its wal-index, i.e. overwrites the
    canonical catalog.  Every acknowledged entry is lost (and the next add's torn-tail logic
    sets the binary aside).  Severity: data loss."""
    catalog = MemoryCatalog(tmp_path)
    added = [catalog.add(f"entry number {i} with some text") for i in range(5)]
    assert len(catalog.search("entry")) == 5
    del catalog
    gc.collect()
    index_dir = tmp_path / ".teaagent" / "index"
    shm = index_dir / "memstore.sqlite3-shm"
    if shm.exists():
        os.unlink(shm)
    os.link(tmp_path / ".teaagent" / "memory.jsonl", shm)
    catalog = MemoryCatalog(tmp_path)
    found = catalog.search("entry")
    assert set(_ids(added)) <= set(_ids(_scan(tmp_path).list(limit=100)))
    assert sorted(_ids(found)) == sorted(_ids(added))


def test_edit_of_oversized_line_during_delete_is_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memstore/catalog_rewrite.py finish/_unchanged + lines_seen.still_holds/_take: a line too
    long to read (longer than MAX_LINE_BYTES and than a scan block) is recorded as *skipped*:
    the proof checks only where its newline lies, not its bytes.  The copy made without the lock
    (prepare) is then trusted although another tool rewrote that line in place meanwhile, and
    the replace throws the other tool's edit away.  (Real size 64 MiB; MAX_LINE_BYTES is lowered
    here.)  Severity: data loss (an external edit)."""
    from memstore import catalog_rewrite, files

    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1024 * 1024)
    catalog = MemoryCatalog(tmp_path, use_index=False)
    keep = catalog.add("kept entry")
    catalog.add("goes away", branch_name="gone")
    path = catalog.path
    big = b'{"other tool": "' + b"a" * (9 * 1024 * 1024) + b'"}\n'
    with path.open("ab") as handle:
        handle.write(big)
    start = path.stat().st_size - len(big)
    real_prepare = catalog_rewrite.prepare

    def prepare_then_edit(*args, **kwargs):
        prepared = real_prepare(*args, **kwargs)
        fd = os.open(path, os.O_WRONLY)  # another tool saves its edit in place (same inode)
        try:
            os.pwrite(fd, b"EDITED" * 1000, start + 4 * 1024 * 1024)
        finally:
            os.close(fd)
        return prepared

    monkeypatch.setattr(catalog_rewrite, "prepare", prepare_then_edit)
    assert catalog.delete_by_branch("gone") == 1
    data = path.read_bytes()
    assert b"EDITED" * 1000 in data, "the other tool's edit of the long line was lost"
    assert keep.memory_id.encode() in data


def test_index_not_current_after_own_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memstore/index/catalog_index.py CatalogIndex._apply_rewrite: the state recorded after a
    rewrite is built from ``after`` (fstat of the temp file *before* os.replace), but rename
    updates the inode's ctime, so ``SourceState.is_current`` fails on the very next query: it
    takes a BEGIN IMMEDIATE write transaction and re-hashes the whole file
    (``verified_prefix``) after every delete/quarantine, which the write-through was meant to
    avoid.  Severity: perf."""
    from memstore.index.source import SourceState

    catalog = MemoryCatalog(tmp_path)
    for i in range(6):
        catalog.add(f"entry number {i}", branch_name="b" if i % 2 else None)
    assert len(catalog.search("entry")) == 6
    assert catalog.delete_by_branch("b") == 3
    calls = []
    real = SourceState.verified_prefix
    monkeypatch.setattr(SourceState, "verified_prefix", lambda self, fd: calls.append(1) or real(self, fd))
    assert len(catalog.search("entry")) == 3
    assert catalog.health_report()["index"]["state"] == "fresh"
    assert calls == [], "the index re-verified the whole file after its own rewrite"


def test_index_corrupt_count_after_rewrite_of_unterminated_json_tail(tmp_path: Path) -> None:
    """memstore/index/catalog_index.py CatalogIndex._apply_rewrite: ``corrupt=state.corrupt`` is
    carried over, but an unterminated last line that is JSON and no entry (``{"x": 1}``; kept
    by ``_is_whole_line``) is not counted by the index while unterminated, and the rewrite
    terminates it, making it a corrupt line for every reader.  The index then reports
    ``corrupt_lines`` 0 while the scan reports 1 (status/health disagree).  Severity: wrong
    answer (health/status)."""
    catalog = MemoryCatalog(tmp_path)
    for i in range(5):
        catalog.add(f"entry number {i}", branch_name="b" if i % 2 else None)
    with catalog.path.open("ab") as handle:
        handle.write(b'{"x": 1}')
    assert len(catalog.search("entry")) == 5
    assert catalog.delete_by_branch("b") == 2
    assert len(catalog.search("entry")) == 3
    report = catalog.health_report()
    assert report["corrupt_entries"] == _scan(tmp_path).health_report()["corrupt_entries"] == 1
    assert report["index"]["corrupt_lines"] == report["corrupt_entries"]


def test_forged_odd_row_on_an_indexed_line_duplicates_a_search_hit(tmp_path: Path) -> None:
    """memstore/index/catalog_index.py CatalogIndex.search (and list with a filter): the index is
    input (DESIGN §9); rows are checked to name distinct lines with ``_distinct_lines``, but only
    among the planner's hits: odd rows (``known``) are left out of the check, so an odd row
    (``odd = 1``, ``mid`` NULL) pointing at a line a normal row already names passes
    ``_entry_at`` and the same entry is returned twice, unlike the scan.  Severity: wrong answer
    (damaged/forged index)."""
    import sqlite3

    catalog = MemoryCatalog(tmp_path)
    added = [catalog.add(f"entry number {i}") for i in range(3)]
    assert len(catalog.search("entry")) == 3
    catalog._index.index().close()
    del catalog
    gc.collect()
    conn = sqlite3.connect(tmp_path / ".teaagent" / "index" / "memstore.sqlite3")
    off, length = conn.execute("SELECT off, len FROM pos WHERE id = 1").fetchone()
    conn.execute(
        "INSERT INTO doc(id, mid, c, t, created_at, bonus, br, run, mc, mt, odd)"
        " VALUES (100, NULL, '', '', NULL, 0, NULL, NULL, '', '', 1)"
    )
    conn.execute("INSERT INTO pos(id, off, len) VALUES (100, ?, ?)", (off, length))
    conn.commit()
    conn.close()
    catalog = MemoryCatalog(tmp_path)
    expected = _ids(_scan(tmp_path).search("entry"))
    assert sorted(expected) == sorted(_ids(added))
    assert _ids(catalog.search("entry")) == expected


def test_in_place_edit_with_mtime_kept_before_rewrite_leaves_index_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memstore/index/catalog_index.py CatalogIndex._apply_rewrite: whether the index was level
    with the file the rewriter read is decided by (dev, ino, size, mtime_ns) only — no ctime
    (which ``is_current`` does compare, and no tool can set) and no fingerprint.  Another tool
    saving a same-size edit in place with its mtime kept (``rsync --inplace -t``, ``touch -r``)
    after the index caught up under the lock and before the rewrite: the rewrite copies the
    edited bytes, but the index keeps the old rows, shifted, under a state that matches the
    new file's digest, so the next catch-up finds nothing to do.  search misses the edited
    entry for good.  Severity: wrong answer."""
    from memstore import catalog_rewrite

    catalog = MemoryCatalog(tmp_path)
    for i in range(6):
        catalog.add(f"entry apple {i}", branch_name="b" if i % 2 else None)
    assert len(catalog.search("apple")) == 6
    path = catalog.path
    real_finish = catalog_rewrite.finish

    def edit_then_finish(*args, **kwargs):
        st = os.stat(path)
        data = path.read_bytes()
        at = data.index(b"entry apple 0")
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"entry grape 0", at)
        finally:
            os.close(fd)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(catalog_rewrite, "finish", edit_then_finish)
    assert catalog.delete_by_branch("b") == 3
    monkeypatch.undo()
    expected = _ids(_scan(tmp_path).search("grape"))
    assert len(expected) == 1
    assert _ids(catalog.search("grape")) == expected
    assert _ids(MemoryCatalog(tmp_path).search("apple")) == _ids(_scan(tmp_path).search("apple"))


def test_cut_whose_record_update_is_lost_lets_a_stale_claim_cover_new_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memstore/group_commit.py GroupCommit._truncate: the cut is counted only *after* the
    ftruncate, and the record write is wrapped in ``suppress(OSError)``.  When that write fails
    (EIO) or the cutting writer is SIGKILLed between ftruncate and the write, the count never
    moves; a writer W1 that measured ``synced_to`` before the cut (torn bytes included) then
    records a claim past the cut, over offsets a later writer W3 reuses after W1's fsync was
    done, and W3 returns COVERED without any fsync of its bytes.  Acknowledged, not durable.
    Severity: data loss (durability)."""
    import errno

    from memstore import sync_record
    from memstore.catalog import _is_whole_line
    from memstore.errors import StorageError
    from memstore.group_commit import GroupCommit

    path = tmp_path / "memory.jsonl"
    group = GroupCommit(path)
    group.append(b'{"a": 0}\n', is_whole=_is_whole_line).commit()
    w1 = group.append(b'{"a": 1}\n', is_whole=_is_whole_line)
    with path.open("ab") as handle:  # another writer's line, cut short
        handle.write(b'{"torn": "' + b"x" * 300)
    real_fsync = os.fsync
    real_write = sync_record.SyncRecord.write
    fsyncs: list[int] = []
    later: dict[str, object] = {}

    def failing_write(self, fd):
        raise OSError(errno.EIO, "record write failed (or the writer was killed here)")

    def fsync(fd):
        real_fsync(fd)
        fsyncs.append(fd)
        if "w3" in later:
            return
        later["w3"] = None
        # W1's fsync is done.  W2 sets the torn tail aside; its record update is lost.
        monkeypatch.setattr(sync_record.SyncRecord, "write", failing_write)
        # The cut is counted before it is made: a count that cannot be recorded means no cut.
        size = path.stat().st_size
        with pytest.raises(StorageError):
            group.cut_torn_tail(is_whole=_is_whole_line)
        assert path.stat().st_size == size
        monkeypatch.setattr(sync_record.SyncRecord, "write", real_write)
        # W3 appends after every fsync so far.
        later["w3"] = group.append(b'{"a": 3, "pad": "' + b"y" * 100 + b'"}\n', is_whole=_is_whole_line)

    monkeypatch.setattr(os, "fsync", fsync)
    w1.commit()
    w3 = later["w3"]
    fsyncs.clear()
    w3.commit()
    assert fsyncs, "W3 was acknowledged although no fsync began after its write"


def test_delete_waits_forever_on_a_held_build_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memstore/catalog.py MemoryCatalog._index_for_rewrite -> CatalogIndex.prepare_rewrite ->
    IndexedSource.refresh, which sets ``IndexFile.patient``: a rewrite waits *without bound* on
    ``index/build.lock`` (untrusted derived state, DESIGN §9) when the index is missing, where a
    query gives up after BUSY_TIMEOUT_MS and scans.  A stuck or hostile holder of build.lock (or
    a minute-long first build elsewhere) hangs delete_by_branch / quarantine_by_branch, and when
    the wait happens under the writer lock, every add behind it.  The rewrite does not need
    the index (it is followed lazily).  Severity: hang (availability)."""
    import fcntl
    import threading

    from memstore.index import db

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    catalog = MemoryCatalog(tmp_path)
    for i in range(4):
        catalog.add(f"entry {i}", branch_name="b" if i % 2 else None)
    index_dir = tmp_path / ".teaagent" / "index"
    index_dir.mkdir(exist_ok=True)
    holder = os.open(index_dir / "build.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert len(catalog.search("entry")) == 4  # a query gives up on the lock and scans
        outcome: list[object] = []
        worker = threading.Thread(target=lambda: outcome.append(catalog.delete_by_branch("b")), daemon=True)
        worker.start()
        worker.join(timeout=12)
        hung = worker.is_alive()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    worker.join(timeout=30)
    assert not hung, "delete_by_branch waited on the index build lock without bound"
    assert outcome == [2]


def test_file_replaced_by_another_tool_during_rewrite_is_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memstore/catalog_rewrite.py finish: under the writer lock the rewrite scans and copies
    from the descriptor it opened, then ``Replacement.commit`` renames over the path without
    checking that the path still names that file.  Another tool (git checkout / pull, an
    editor saving by rename) that replaced memory.jsonl meanwhile loses its version: the
    entries it brought are gone, silently.  Severity: data loss (an external write)."""
    import json

    from memstore import catalog_rewrite

    catalog = MemoryCatalog(tmp_path, use_index=False)
    for i in range(4):
        catalog.add(f"entry {i}", branch_name="b" if i % 2 else None)
    path = catalog.path
    theirs = {
        "memory_id": "f" * 32, "content": "from the checkout", "tags": [], "created_at": "2026-01-01T00:00:00+00:00",
        "branch_name": None, "run_id": None,
    }  # fmt: skip
    real_scan = catalog_rewrite.scan_for_removal

    def scan_then_checkout(fd, size, **kwargs):
        found = real_scan(fd, size, **kwargs)
        if not kwargs.get("prove"):  # the scan under the lock, in finish
            new = path.with_name("checkout.tmp")
            new.write_bytes(path.read_bytes() + (json.dumps(theirs, sort_keys=True) + "\n").encode())
            os.replace(new, path)
        return found

    monkeypatch.setattr(catalog_rewrite, "scan_for_removal", scan_then_checkout)
    with contextlib.suppress(MemstoreError):  # refusing (or retrying) is fine; overwriting the checkout is not
        catalog.delete_by_branch("b")
    monkeypatch.undo()
    assert "f" * 32 in _ids(_scan(tmp_path).list(limit=100)), "the other tool's file was replaced away"


def test_index_wal_hardlinked_to_catalog_while_another_process_is_open_truncates_catalog(tmp_path: Path) -> None:
    """memstore/index/db.py IndexFile._hold_open_lock / _drop_linked_sidecars: the check for a
    log nobody wrote runs only when ``open.lock`` can be taken exclusively, and sidecars are
    vetted by ``S_ISREG`` only.  While another process holds a connection (an MCP server, a
    watcher), a hard link at ``index/memstore.sqlite3-wal`` to ``memory.jsonl`` is opened by
    SQLite as the WAL of the next connection: its writes and ``fold_wal``'s
    ``wal_checkpoint(TRUNCATE)`` truncate the canonical catalog to 0 bytes.  Every entry is
    lost.  (Same family as the -shm test; a different path.)  Severity: data loss."""
    import subprocess
    import sys

    catalog = MemoryCatalog(tmp_path)
    added = [catalog.add(f"entry number {i}") for i in range(5)]
    assert len(catalog.search("entry")) == 5
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time; from memstore import MemoryCatalog\n"
            f"c = MemoryCatalog({str(tmp_path)!r}); c.search('entry'); print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        wal = tmp_path / ".teaagent" / "index" / "memstore.sqlite3-wal"
        if wal.exists():
            os.unlink(wal)
        os.link(tmp_path / ".teaagent" / "memory.jsonl", wal)
        other = MemoryCatalog(tmp_path)
        found = other.search("entry")
        with contextlib.suppress(MemstoreError):
            added.append(other.add("entry more"))
    finally:
        holder.kill()
        holder.wait()
    assert set(_ids(added)) <= set(_ids(_scan(tmp_path).list(limit=100)))
    assert sorted(_ids(found)) == sorted(_ids(added[:5]))


def test_query_waits_forever_on_build_lock_when_index_must_be_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memstore/index/db.py IndexFile.set_aside (and _migrate): ``with self._build_lock()`` takes
    ``build.lock`` with no bound, although ``_building`` promises a query waits at most
    BUSY_TIMEOUT_MS for another process and then answers from a scan.  With an unusable file at
    the index path (committed, copied, damaged) and build.lock held by another process (a long
    build, a stopped or hostile process), search() hangs instead of scanning.  Severity: hang
    (availability)."""
    import fcntl
    import threading

    from memstore.index import db

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    catalog = MemoryCatalog(tmp_path, use_index=False)
    for i in range(3):
        catalog.add(f"entry {i}")
    index_dir = tmp_path / ".teaagent" / "index"
    index_dir.mkdir()
    (index_dir / "memstore.sqlite3").write_bytes(b"this is not an index, someone committed it\n" * 100)
    holder = os.open(index_dir / "build.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    reader = MemoryCatalog(tmp_path, readonly=False)
    outcome: list[object] = []
    try:
        worker = threading.Thread(target=lambda: outcome.append(reader.search("entry")), daemon=True)
        worker.start()
        worker.join(timeout=12)
        hung = worker.is_alive()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    worker.join(timeout=30)
    assert not hung, "search waited on build.lock without bound instead of scanning"
    assert [_ids(found) for found in outcome] == [_ids(_scan(tmp_path).search("entry"))]
