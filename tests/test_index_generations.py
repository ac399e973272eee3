"""The index across handles, rebuilds and other tools' edits (issue 9: items 1, 2, 12, 15, 16).

* Nothing a handle read from the index outlives the transaction it was read in: a
  second handle, a ``memstore reindex --full`` process or a replaced file may rebuild
  the index between two calls of a long-lived handle.
* A grown file is an append only when no byte before the old end changed.
* Deleted rows take their tag rows with them; a full rebuild leaves a compact file.
* Any limit gives the scan's answer; the search does linear work whatever the limit.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.cli import main as cli_main
from memstore.failure_cards import FailureCardStorage
from memstore.index import search, source, sqlite_search
from memstore.index.catalog_index import row_values
from memstore.index.db import INDEX_DIRNAME, INDEX_FILENAME
from memstore.index.terms import TAGS, text_terms


def index_path(root: Path) -> Path:
    return root / ".teaagent" / INDEX_DIRNAME / INDEX_FILENAME


def scan_of(root: Path) -> MemoryCatalog:
    return MemoryCatalog(root, use_index=False, readonly=True)


def tag_table(root: Path) -> tuple[dict[str, int], int]:
    """Tag term -> rows holding it, from the word index's vocabulary, and the sum of those counts."""
    with sqlite3.connect(index_path(root)) as conn:
        vocab = dict(conn.execute("SELECT text, n FROM term WHERE kind = ? AND n != 0", (TAGS,)))
    return vocab, sum(vocab.values())


def live_tags(root: Path) -> dict[str, int]:
    """Tag term -> entries carrying it, over the entries SQL holds (odd rows, such as entries with a
    newline inside a tag, are scored and filtered in Python and are in no term's count)."""
    counts: dict[str, int] = {}
    for entry in scan_of(root).list(limit=10**9):
        if row_values(entry)[-1]:
            continue
        for term in text_terms("\n".join(entry.tags)):
            counts[term] = counts.get(term, 0) + 1
    return counts


# ---------------------------------------------------------------- 1: stale tag ids


def _replace_file_then_query(root: Path) -> None:
    """Another tool rewrites the file (new inode) without the 'zz' entry; a second handle reads it."""
    path = root / ".teaagent" / "memory.jsonl"
    kept = [line for line in path.read_bytes().splitlines(keepends=True) if b'"zz"' not in line]
    tmp = path.with_name("rewritten.tmp")
    tmp.write_bytes(b"".join(kept))
    os.replace(tmp, path)
    assert MemoryCatalog(root).search("ab", limit=5)


def _second_handle_reindexes(root: Path) -> None:
    MemoryCatalog(root).delete_by_branch("old")
    MemoryCatalog(root).reindex(full=True)


def _cli_process_reindexes(root: Path) -> None:
    MemoryCatalog(root).delete_by_branch("old")
    subprocess.run(
        [sys.executable, "-m", "memstore", "reindex", "--full", "--root", str(root)],
        check=True,
        capture_output=True,
    )


@pytest.mark.parametrize("rebuild", [_replace_file_then_query, _second_handle_reindexes, _cli_process_reindexes])
def test_long_lived_handle_files_new_tags_under_current_ids(tmp_path: Path, rebuild: object) -> None:
    """A handle that caught up before another one rebuilt must not reuse the tag ids it saw then."""
    catalog = MemoryCatalog(tmp_path)
    catalog.add("zero", tags=["zz"], branch_name="old")
    assert catalog.search("zero")  # builds the index
    catalog.add("ab one", tags=["ab"])
    assert catalog.search("ab", limit=1)  # catches up: 'ab' gets an id after 'zz'
    rebuild(tmp_path)  # type: ignore[operator]  # 'zz' is gone, so the rebuild gives 'ab' another id
    newest = catalog.add("ab two", tags=["ab"])
    catalog.add("ab three later filler", tags=["other"])
    # Both 'ab' entries score 5; the newer one wins the tie.
    assert catalog.search("ab", limit=1) == [newest]
    for query in ("ab", "two", "zz", "other", "ab two"):
        for limit in (1, 3):
            assert catalog.search(query, limit=limit) == scan_of(tmp_path).search(query, limit=limit), query
            assert MemoryCatalog(tmp_path).search(query, limit=limit) == scan_of(tmp_path).search(query, limit=limit)
    report = catalog.check_index()
    assert report.equal, report.summary


def test_check_index_compares_the_tag_terms(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one", tags=["ab"])
    catalog.add("two", tags=["cd"])
    assert catalog.check_index().equal
    with sqlite3.connect(index_path(tmp_path)) as conn:
        conn.execute("UPDATE term SET n = n + 1 WHERE kind = ? AND text = 'cd'", (TAGS,))
    report = catalog.check_index()
    assert not report.equal
    assert "tag" in report.summary or "differ" in report.summary
    assert catalog.check_index().equal  # the failed check dropped the state: rebuilt


# ---------------------------------------------------------------- 2: edit + append in one save


def _lines(count: int, word: str = "alpha") -> bytes:
    rows = [
        json.dumps(
            {"memory_id": f"m{i:06d}", "content": f"entry {i} {word} " + "x" * 300, "tags": ["t"],
             "created_at": f"2024-01-01T00:00:{i % 60:02d}+00:00", "branch_name": None, "run_id": None},
            sort_keys=True,
        )
        for i in range(count)
    ]  # fmt: skip
    return ("\n".join(rows) + "\n").encode()


def _edit_and_append(path: Path, at: int, old: bytes, new: bytes, appended: bytes) -> None:
    """One save by another tool: a same-length edit in place, then an appended line."""
    assert len(old) == len(new)
    with open(path, "r+b") as handle:
        handle.seek(at)
        assert handle.read(len(old)) == old
        handle.seek(at)
        handle.write(new)
        handle.seek(0, os.SEEK_END)
        handle.write(appended)


def test_same_length_edit_plus_append_on_a_big_file_is_not_taken_for_an_append(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(_lines(4000))  # about 1.4 MB: past the whole-prefix sampling threshold
    assert catalog.path.stat().st_size > source.WHOLE_BODY_BYTES
    assert len(catalog.search("alpha", limit=5000)) == 4000
    data = catalog.path.read_bytes()
    # A line between two sampled blocks, far from the head and the edge.
    span = len(data) - source.FINGERPRINT_BYTES
    target = (span * 1 // (source.BODY_SAMPLES - 1) + span * 2 // (source.BODY_SAMPLES - 1)) // 2
    at = data.index(b"alpha", target)
    _edit_and_append(catalog.path, at, b"alpha", b"omega", _lines(1, "appended").replace(b"m000000", b"n000000"))
    assert catalog.search("omega", limit=10) == scan_of(tmp_path).search("omega", limit=10) != []
    assert len(catalog.search("alpha", limit=5000)) == 3999
    assert catalog.check_index().equal


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(5, 60),
    data=st.data(),
    appended=st.integers(0, 3),
)
def test_append_is_accepted_only_when_the_old_bytes_are_unchanged(
    monkeypatch: pytest.MonkeyPatch, count: int, data: st.DataObject, appended: int
) -> None:
    """Property: after any same-length edit plus appends in one save, the index equals the scan.

    The sampling threshold is lowered so every file is past it (only a few bytes are sampled).
    """
    monkeypatch.setattr(source, "WHOLE_BODY_BYTES", 64)
    monkeypatch.setattr(source, "FINGERPRINT_BYTES", 8)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        catalog = MemoryCatalog(root)
        catalog.path.write_bytes(_lines(count))
        assert len(catalog.search("alpha", limit=100)) == count
        raw = catalog.path.read_bytes()
        spots = [i for i in range(len(raw)) if raw.startswith(b"alpha", i)]
        edited = data.draw(st.lists(st.sampled_from(spots), min_size=1, max_size=3, unique=True))
        tail = b"".join(_lines(1, f"new{i}").replace(b"m000000", f"n{i:06d}".encode()) for i in range(appended))
        with open(catalog.path, "r+b") as handle:
            for at in edited:
                handle.seek(at)
                handle.write(b"omega")
            handle.seek(0, os.SEEK_END)
            handle.write(tail)
        scan = scan_of(root)
        for query in ("alpha", "omega", "new0", "entry"):
            assert catalog.search(query, limit=100) == scan.search(query, limit=100), query
        assert catalog.check_index().equal


def test_an_unchanged_file_is_not_reread_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-prefix digest is read at catch-up only, never by a query of an unchanged file."""
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(_lines(200))
    assert catalog.search("alpha", limit=1)
    catalog.add("one more")
    assert catalog.search("more")
    reads: list[int] = []
    real = source.PrefixDigest.extend

    def counting(self: source.PrefixDigest, fd: int, end: int) -> None:
        reads.append(end)
        real(self, fd, end)

    monkeypatch.setattr(source.PrefixDigest, "extend", counting)
    for _ in range(5):
        assert catalog.search("alpha", limit=1)
    assert reads == []
    catalog.add("and another")
    assert catalog.search("another")
    # The old prefix is verified (one read); the new line is digested by the same pass that
    # proves it is what was parsed, never by a second read of the prefix.
    assert len(reads) == 1


# ---------------------------------------------------------------- 16: tag rows follow deletes


def test_tag_counts_stay_exact_through_add_delete_cycles(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("keeper", tags=["keep", "shared"])
    for cycle in range(40):
        catalog.add(f"temp {cycle}", tags=[f"once-{cycle}", "shared"], branch_name="tmp")
        assert catalog.search("temp", limit=1)  # indexed before the delete
        assert catalog.delete_by_branch("tmp") == 1
    vocab, pairs = tag_table(tmp_path)
    assert vocab == live_tags(tmp_path) == {"keep": 1, "shared": 1}
    assert pairs == 2
    assert catalog.check_index().equal


def test_tags_with_newlines_and_unterminated_tails_keep_counts_exact(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("a", tags=["x\ny", "x", "y"], branch_name="gone")
    catalog.add("b", tags=["x\ny"])
    assert catalog.search("a")
    # An unterminated last line is indexed, then re-parsed when a tool completes it.
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"memory_id": "t1", "content": "tail", "tags": ["x", "q"]')
    assert catalog.search("tail") == []
    with open(catalog.path, "ab") as handle:
        handle.write(b', "created_at": "2024-01-01T00:00:00+00:00"}\n')
    assert [e.memory_id for e in catalog.search("tail")] == ["t1"]
    assert catalog.delete_by_branch("gone") == 1
    vocab, pairs = tag_table(tmp_path)
    assert vocab == live_tags(tmp_path) == {"x": 1, "q": 1}
    assert pairs == sum(vocab.values())
    assert catalog.check_index().equal
    assert [e.memory_id for e in catalog.search("x", tags=["x\ny"])] == [catalog.list(limit=5)[-1].memory_id]


def test_full_rebuild_leaves_a_compact_file(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for i in range(300):
        catalog.add(f"kept {i} " + "k" * 200, tags=[f"keep{i % 7}"])
    for i in range(1500):
        catalog.add(f"churn {i} " + "c" * 400, tags=[f"churn-{i}"], branch_name="churn")
    assert catalog.search("churn", limit=1)
    before = index_path(tmp_path).stat().st_size
    assert catalog.delete_by_branch("churn") == 1500
    catalog.reindex(full=True)
    after = index_path(tmp_path).stat().st_size
    with sqlite3.connect(index_path(tmp_path)) as conn:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert free * 10 <= pages
    assert after < before / 2
    vocab, _pairs = tag_table(tmp_path)
    assert vocab == live_tags(tmp_path)
    assert catalog.check_index().equal


# ---------------------------------------------------------------- 12: limits beyond SQLite's integers


@pytest.mark.parametrize("limit", [2**63 - 1, 2**63, 10**20, 10**400])
def test_huge_limits_answer_like_the_scan(tmp_path: Path, limit: int) -> None:
    catalog = MemoryCatalog(tmp_path)
    for i in range(5):
        catalog.add(f"note {i}", tags=["t"])
    scan = scan_of(tmp_path)
    assert catalog.search("note", limit=limit) == scan.search("note", limit=limit) != []
    assert catalog.list(limit=limit) == scan.list(limit=limit) != []
    assert catalog.health_report()["index"]["state"] == "fresh"
    cards = FailureCardStorage(tmp_path)
    cards.append(FailureCard(id="c1", run_id="r", timestamp=1.0, error_type="E", file_path="src/app.py",
                             line_number=None, error_message="boom", task_description="parse yaml config",
                             context_files=[], expires_at=4e12))  # fmt: skip
    expected = FailureCardStorage(tmp_path, use_index=False).find_matching(["src/app.py"], "x", limit=limit)
    assert cards.find_matching(["src/app.py"], "x", limit=limit) == expected != []


def test_cli_list_with_a_huge_limit_prints_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    MemoryCatalog(tmp_path).add("hello there")
    for command in (["list"], ["search", "hello"], ["recall", "hello"]):
        assert cli_main([*command, "--limit", "99999999999999999999", "--root", str(tmp_path)]) == 0
        out, err = capsys.readouterr()
        assert "hello there" in out
        assert "Traceback" not in err


# ---------------------------------------------------------------- 15: linear work for any limit


def _many(root: Path, count: int) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    rows = [
        json.dumps(
            {"memory_id": f"m{i:06d}", "content": f"entry {i} e", "tags": ["ex"] if i < count // 10 else ["misc"],
             "created_at": f"2024-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
             "branch_name": None, "run_id": None},
            sort_keys=True,
        )
        for i in range(count)
    ]  # fmt: skip
    catalog.path.write_bytes(("\n".join(rows) + "\n").encode())
    return catalog


@pytest.mark.parametrize("limit", [50, 300, 3000])
def test_search_work_is_linear_in_the_rows_whatever_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """Counts, not seconds: hits built (rows brought into Python) and sort-key calls stay O(rows).

    The best rows (tag 'ex') are the oldest, so the walk visits every row; a fake clock
    interrupts it partway, and the rows already walked must not be walked again.
    """
    count = 3000
    catalog = _many(tmp_path, count)
    expected = scan_of(tmp_path).search("e", limit=limit)
    assert catalog.search("zzz") == []  # builds the index
    monkeypatch.setattr(search, "CANDIDATE_CAP", 3)
    monkeypatch.setattr(search, "FALLBACK_CAP", 0)
    monkeypatch.setattr(search, "SET_ROWS", 3)  # no narrowed set: the walk reads the rows itself
    ticks = [0]

    def clock() -> float:
        ticks[0] += 1
        return ticks[0] * 0.001

    monkeypatch.setattr(sqlite_search, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(search, "WALK_SECONDS", 0.15)  # 150 progress calls: partway through the walk
    built = [0]
    keyed = [0]
    real_new = search.Hit.__new__
    real_key = search.Hit.sort_key

    def counting_new(cls: type[search.Hit], *args: object) -> search.Hit:
        built[0] += 1
        return real_new(cls, *args)  # type: ignore[arg-type]

    def counting_key(self: search.Hit) -> object:
        keyed[0] += 1
        return real_key(self)

    monkeypatch.setattr(search.Hit, "__new__", staticmethod(counting_new))
    monkeypatch.setattr(search.Hit, "sort_key", counting_key)
    assert catalog.search("e", limit=limit) == expected
    if limit * search.ONE_PASS_SHARE < count:
        assert ticks[0] > 151, "the walk was interrupted partway"
    assert limit <= built[0] <= count + 1  # the counter sees every Hit made
    assert keyed[0] <= 3 * count


def test_long_lived_handle_follows_an_index_file_built_anew_by_another_process(tmp_path: Path) -> None:
    """A handle's connection belongs to the index file it opened: a new file at the path is reopened."""
    catalog = MemoryCatalog(tmp_path)
    catalog.add("first", tags=["a"])
    assert catalog.search("first")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index_path(tmp_path)}{suffix}").unlink(missing_ok=True)
    assert MemoryCatalog(tmp_path).search("first")  # another handle builds a new file
    catalog.add("second", tags=["a"])
    assert [e.content for e in catalog.search("a", limit=5)] == ["second", "first"]
    # The long-lived handle caught the shared file up, not a file that is no longer at the path.
    with sqlite3.connect(index_path(tmp_path)) as conn:
        assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 2
    assert MemoryCatalog(tmp_path).health_report()["index"]["state"] == "fresh"
