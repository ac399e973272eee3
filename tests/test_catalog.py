"""MemoryCatalog: every method and every guarantee of the spec, on the canonical files."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstore.catalog import MemoryCatalog
from memstore.errors import MemstoreError, StorageError
from memstore.models import MemoryEntry, normalize_tags


@pytest.fixture(params=[True, False], ids=["index", "scan"])
def use_index(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def catalog(tmp_path: Path, use_index: bool) -> MemoryCatalog:
    return MemoryCatalog(tmp_path, use_index=use_index)


def line_of(entry: MemoryEntry, **extra: Any) -> bytes:
    """The existing on-disk format of a catalog line."""
    return (json.dumps({**entry.to_dict(), **extra}, sort_keys=True) + "\n").encode()


def make_entry(n: int, content: str | None = None, **fields: Any) -> MemoryEntry:
    values: dict[str, Any] = {
        "memory_id": f"{n:032x}",
        "content": content if content is not None else f"entry number {n}",
        "created_at": f"2026-01-01T00:00:{n:02d}.000000+00:00",
    }
    values.update(fields)
    return MemoryEntry(**values)


def write_raw(catalog: MemoryCatalog, data: bytes, *, quarantine: bool = False) -> None:
    path = catalog.quarantine_path if quarantine else catalog.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def ids(entries: list[MemoryEntry]) -> list[str]:
    return [entry.memory_id for entry in entries]


def file_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


# ---------------------------------------------------------------- construction and paths


def test_paths(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    assert catalog.path == tmp_path / ".teaagent" / "memory.jsonl"
    assert catalog.quarantine_path == tmp_path / ".teaagent" / "memory-quarantine.jsonl"
    assert catalog.lock_path == tmp_path / ".teaagent" / "memory.lock"
    assert (tmp_path / ".teaagent").is_dir()  # created when writable
    assert not catalog.path.exists()  # but no file until the first write


def test_default_root_is_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    catalog = MemoryCatalog()
    catalog.add("here")
    assert (tmp_path / ".teaagent" / "memory.jsonl").exists()


def test_readonly_must_be_bool(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="readonly"):
        MemoryCatalog(tmp_path, readonly="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------- add


def test_add_appends_one_line_in_the_existing_format(catalog: MemoryCatalog) -> None:
    entry = catalog.add(
        "  Remember the parser quirk  ", tags=["Parser", " build ", "parser"], branch_name="b1"
    )
    assert entry.content == "Remember the parser quirk"
    assert entry.tags == ("build", "parser")
    assert entry.branch_name == "b1" and entry.run_id is None
    assert len(entry.memory_id) == 32 and int(entry.memory_id, 16) >= 0
    assert entry.created_at.endswith("+00:00")
    assert catalog.path.read_bytes() == line_of(entry)
    on_disk = file_lines(catalog.path)[0]
    assert on_disk["tags"] == ["build", "parser"]  # normalised on disk, not only in memory


def test_add_is_append_only(catalog: MemoryCatalog) -> None:
    catalog.add("first")
    before = catalog.path.read_bytes()
    inode = os.stat(catalog.path).st_ino
    second = catalog.add("second", run_id="r1")
    after = catalog.path.read_bytes()
    assert after == before + line_of(second)
    assert os.stat(catalog.path).st_ino == inode  # appended in place, never rewritten


def test_add_ids_are_unique(catalog: MemoryCatalog) -> None:
    assert len({catalog.add(f"note {i}").memory_id for i in range(50)}) == 50


@pytest.mark.parametrize("content", ["", "   ", "\n\t\r "])
def test_add_empty_content_raises_exact_message(catalog: MemoryCatalog, content: str) -> None:
    with pytest.raises(ValueError) as info:
        catalog.add(content)
    assert str(info.value) == "memory content cannot be empty"
    assert not catalog.path.exists()


def test_add_quarantined_empty_content(catalog: MemoryCatalog) -> None:
    with pytest.raises(ValueError, match=r"^memory content cannot be empty$"):
        catalog.add_quarantined(" ", provenance={})
    assert not catalog.quarantine_path.exists()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"content": 42}, "content"),
        ({"content": b"bytes"}, "content"),
        ({"content": None}, "content"),
        ({"content": "ok", "tags": "single"}, "tags"),
        ({"content": "ok", "tags": [1]}, "tags"),
        ({"content": "ok", "tags": ["a", None]}, "tags"),
        ({"content": "ok", "tags": None}, "tags"),
        ({"content": "ok", "tags": 7}, "tags"),
        ({"content": "ok", "branch_name": 3}, "branch_name"),
        ({"content": "ok", "run_id": ["r"]}, "run_id"),
    ],
)
def test_add_bad_types_raise_type_error_naming_the_argument(
    catalog: MemoryCatalog, kwargs: dict[str, Any], argument: str
) -> None:
    kwargs = dict(kwargs)
    content = kwargs.pop("content")
    with pytest.raises(TypeError, match=argument):
        catalog.add(content, **kwargs)
    with pytest.raises(TypeError, match=argument):
        catalog.add_quarantined(content, provenance={}, **kwargs)
    assert not catalog.path.exists() and not catalog.quarantine_path.exists()


def test_add_failed_fsync_acknowledges_nothing(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.add("durable")

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    result: list[MemoryEntry] = []
    with pytest.raises(StorageError):
        result.append(catalog.add("not acknowledged"))
    assert result == []


def test_concurrent_adds_from_threads_all_land(catalog: MemoryCatalog) -> None:
    added: list[MemoryEntry] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        for i in range(15):
            entry = catalog.add(f"thread {n} note {i}")
            with guard:
                added.append(entry)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids(catalog.list(limit=1000))) == sorted(ids(added))
    assert all(line.strip() for line in catalog.path.read_bytes().split(b"\n")[:-1])


# ---------------------------------------------------------------- add_quarantined


def test_add_quarantined_goes_to_the_quarantine_file_only(catalog: MemoryCatalog) -> None:
    entry = catalog.add_quarantined("suspicious", tags=["Web"], provenance={"source": "web", "score": 0.2})
    assert not catalog.path.exists()
    [payload] = file_lines(catalog.quarantine_path)
    assert payload["quarantine"] is True
    assert payload["provenance"] == {"source": "web", "score": 0.2}
    assert payload["memory_id"] == entry.memory_id and payload["tags"] == ["web"]
    assert catalog.list() == [] and catalog.search("suspicious") == []
    assert catalog.list_quarantined() == [entry]


@pytest.mark.parametrize("provenance", [None, "reason", ["a"], 3])
def test_add_quarantined_requires_a_dict_provenance(catalog: MemoryCatalog, provenance: object) -> None:
    with pytest.raises(TypeError, match="provenance"):
        catalog.add_quarantined("x", provenance=provenance)  # type: ignore[arg-type]
    assert not catalog.quarantine_path.exists()


# ---------------------------------------------------------------- readonly


MUTATORS: dict[str, Callable[[MemoryCatalog], object]] = {
    "add": lambda c: c.add("x"),
    "add_blank": lambda c: c.add(""),
    "add_quarantined": lambda c: c.add_quarantined("x", provenance={}),
    "delete_by_branch": lambda c: c.delete_by_branch("b"),
    "delete_by_run_id": lambda c: c.delete_by_run_id("r"),
    "quarantine_by_branch": lambda c: c.quarantine_by_branch("b", "why"),
}


@pytest.mark.parametrize("mutator", MUTATORS.values(), ids=MUTATORS.keys())
def test_readonly_mutators_raise_and_create_nothing(
    tmp_path: Path, mutator: Callable[[MemoryCatalog], object]
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    catalog = MemoryCatalog(root, readonly=True)
    with pytest.raises(RuntimeError, match=r"^Cannot .+ in readonly mode$") as info:
        mutator(catalog)
    assert isinstance(info.value, MemstoreError)
    assert tree(root) == []


def test_readonly_reads_create_nothing(tmp_path: Path, use_index: bool) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    catalog = MemoryCatalog(root, readonly=True, use_index=use_index)
    assert catalog.list() == []
    assert catalog.search("anything") == []
    assert catalog.list_quarantined() == []
    with pytest.raises(FileNotFoundError):
        catalog.show("abc")
    assert catalog.health_report()["total_entries"] == 0
    assert catalog.maintain_dry_run()["total_entries"] == 0
    assert tree(root) == []


def test_readonly_mutators_leave_existing_files_untouched(tmp_path: Path, use_index: bool) -> None:
    writer = MemoryCatalog(tmp_path)
    writer.add("kept", branch_name="b", run_id="r")
    writer.add_quarantined("q", provenance={})
    before = {name: (writer.directory / name).read_bytes() for name in os.listdir(writer.directory)}
    readonly = MemoryCatalog(tmp_path, readonly=True, use_index=use_index)
    for mutator in MUTATORS.values():
        with pytest.raises(RuntimeError, match=r"^Cannot .+ in readonly mode$"):
            mutator(readonly)
    assert [e.content for e in readonly.list()] == ["kept"]
    assert [e.content for e in readonly.search("kept")] == ["kept"]
    for name, data in before.items():
        assert (writer.directory / name).read_bytes() == data


# ---------------------------------------------------------------- missing file


def test_missing_file_reads_as_empty(catalog: MemoryCatalog) -> None:
    assert catalog.list() == []
    assert catalog.search("x") == []
    assert catalog.list_quarantined() == []
    assert catalog.delete_by_branch("b") == 0
    assert catalog.delete_by_run_id("r") == 0
    assert catalog.quarantine_by_branch("b", "why") == 0
    assert not catalog.path.exists() and not catalog.quarantine_path.exists()


def test_missing_root_directory_for_a_readonly_catalog(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path / "does" / "not" / "exist", readonly=True)
    assert catalog.list() == [] and catalog.search("x") == []
    assert not (tmp_path / "does").exists()


# ---------------------------------------------------------------- list


def test_list_is_reverse_file_order_not_time_order(catalog: MemoryCatalog) -> None:
    newer = make_entry(1, created_at="2027-01-01T00:00:00+00:00")
    older = make_entry(2, created_at="2020-01-01T00:00:00+00:00")
    middle = make_entry(3, created_at="2025-01-01T00:00:00+00:00")
    write_raw(catalog, line_of(newer) + line_of(older) + line_of(middle))
    assert catalog.list() == [middle, older, newer]
    assert catalog.list(limit=2) == [middle, older]
    assert catalog.list(limit=0) == []


def test_list_default_limit_is_20(catalog: MemoryCatalog) -> None:
    write_raw(catalog, b"".join(line_of(make_entry(i)) for i in range(25)))
    assert ids(catalog.list()) == [make_entry(i).memory_id for i in range(24, 4, -1)]


@pytest.mark.parametrize("method", ["list", "list_quarantined"])
def test_list_limits(catalog: MemoryCatalog, method: str) -> None:
    call = getattr(catalog, method)
    with pytest.raises(ValueError, match="limit"):
        call(limit=-1)
    with pytest.raises(TypeError, match="limit"):
        call(limit="3")
    assert call(limit=0) == []


@pytest.mark.parametrize("limit", [2**63 - 1, 2**63, 10**30, 10**400])
def test_a_limit_beyond_sqlite_integers_means_every_entry(catalog: MemoryCatalog, limit: int) -> None:
    """A huge limit is a valid int >= 0: the index must answer it as the scan does, not overflow."""
    write_raw(catalog, b"".join(line_of(make_entry(i, f"parser note {i}")) for i in range(3)))
    newest_first = [make_entry(i).memory_id for i in (2, 1, 0)]
    assert ids(catalog.list(limit=limit)) == newest_first
    assert sorted(ids(catalog.search("parser", limit=limit))) == sorted(newest_first)


# ---------------------------------------------------------------- search


def test_search_ranking_score_then_created_at_then_file_order(catalog: MemoryCatalog) -> None:
    entries = [
        make_entry(1, "parser bug", created_at="2026-01-01T00:00:00+00:00"),  # 3
        make_entry(2, "parser bug", tags=["parser"], created_at="2026-01-01T00:00:00+00:00"),  # 5
        make_entry(3, "parser bug", created_at="2026-06-01T00:00:00+00:00"),  # 3, newer
        make_entry(4, "parser", tags=["auto-curated"], created_at="2025-01-01T00:00:00+00:00"),  # 7
        make_entry(5, "parser bug", created_at="2026-01-01T00:00:00+00:00"),  # 3, tie with 1
        make_entry(6, "lexer", tags=["run-summary"], created_at="2029-01-01T00:00:00+00:00"),  # no match
        make_entry(7, "Parser", tags=["run-summary"], created_at="2020-01-01T00:00:00+00:00"),  # 5, older
    ]
    write_raw(catalog, b"".join(line_of(e) for e in entries))
    result = catalog.search("PARSER")
    assert ids(result) == [entries[i - 1].memory_id for i in (4, 2, 7, 3, 1, 5)]
    assert ids(catalog.search("parser", limit=2)) == [entries[3].memory_id, entries[1].memory_id]
    assert catalog.search("parser", limit=0) == []


def test_search_created_at_compares_as_plain_strings(catalog: MemoryCatalog) -> None:
    # "2026-01-01T10:00:00+05:00" is earlier in real time but later as a string.
    a = make_entry(1, "note", created_at="2026-01-01T09:00:00+00:00")
    b = make_entry(2, "note", created_at="2026-01-01T10:00:00+05:00")
    c = make_entry(3, "note", created_at="not a timestamp")
    write_raw(catalog, line_of(a) + line_of(b) + line_of(c))
    assert ids(catalog.search("note")) == ids([c, b, a])


def test_search_tokens(catalog: MemoryCatalog) -> None:
    a = make_entry(1, "fix the Parser crash", tags=["build"])
    b = make_entry(2, "parser notes")
    write_raw(catalog, line_of(a) + line_of(b))
    assert ids(catalog.search("parser build")) == [a.memory_id]  # every token must match
    assert ids(catalog.search("  crash\tPARSER\n")) == [a.memory_id]
    assert ids(catalog.search("bui")) == [a.memory_id]  # substring of a tag
    assert catalog.search("parser deploy") == []
    assert catalog.search("") == [] and catalog.search("   \n") == []


def test_search_bad_arguments(catalog: MemoryCatalog) -> None:
    with pytest.raises(TypeError, match="query"):
        catalog.search(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        catalog.search("x", limit=-1)
    with pytest.raises(TypeError, match="limit"):
        catalog.search("x", limit=True)


def test_search_and_list_see_new_writes_from_other_handles(tmp_path: Path, use_index: bool) -> None:
    reader = MemoryCatalog(tmp_path, use_index=use_index)
    assert reader.search("fresh") == []
    writer = MemoryCatalog(tmp_path, use_index=use_index)
    entry = writer.add("fresh note")
    assert reader.search("fresh") == [entry]
    writer.delete_by_branch("nothing")
    with catalog_file_append(reader.path) as handle:
        handle.write(line_of(make_entry(9, "fresh external")))
    assert [e.content for e in reader.search("fresh")] == ["fresh note", "fresh external"]
    assert [e.content for e in reader.list()] == ["fresh external", "fresh note"]


def catalog_file_append(path: Path) -> Any:
    return open(path, "ab")


# ---------------------------------------------------------------- show


def test_show_first_match_in_file_order_and_strips_id(catalog: MemoryCatalog) -> None:
    first = make_entry(1, "first copy")
    duplicate = MemoryEntry(first.memory_id, "second copy", (), "2030-01-01T00:00:00+00:00")
    other = make_entry(2)
    write_raw(catalog, line_of(first) + line_of(other) + line_of(duplicate))
    assert catalog.show(first.memory_id) == first
    assert catalog.show(f"  {first.memory_id}\n") == first
    assert catalog.show(other.memory_id) == other


@pytest.mark.parametrize("memory_id", ["missing", "", "   ", "0" * 31])
def test_show_missing_raises_file_not_found(catalog: MemoryCatalog, memory_id: str) -> None:
    write_raw(catalog, line_of(make_entry(1)))
    with pytest.raises(FileNotFoundError):
        catalog.show(memory_id)


def test_show_on_a_missing_file_and_bad_type(catalog: MemoryCatalog) -> None:
    with pytest.raises(FileNotFoundError):
        catalog.show("abc")
    with pytest.raises(TypeError, match="memory_id"):
        catalog.show(123)  # type: ignore[arg-type]


# ---------------------------------------------------------------- delete


def test_delete_by_branch_and_run_id_counts(catalog: MemoryCatalog) -> None:
    a = catalog.add("a", branch_name="feature", run_id="r1")
    b = catalog.add("b", branch_name="main", run_id="r1")
    c = catalog.add("c", branch_name="feature", run_id="r2")
    d = catalog.add("d")
    assert catalog.delete_by_branch("feature") == 2
    assert catalog.list() == [d, b]
    assert catalog.delete_by_branch("feature") == 0
    assert catalog.delete_by_run_id("r1") == 1
    assert catalog.list() == [d]
    assert catalog.delete_by_run_id("r2") == 0
    assert catalog.delete_by_branch("") == 0
    del a, c


def test_delete_keeps_other_lines_byte_for_byte(catalog: MemoryCatalog) -> None:
    keep1 = make_entry(1, "keep ü", branch_name="main")
    drop = make_entry(2, "drop", branch_name="feature")
    keep2 = make_entry(3, "keep 2")
    unicode_line = (json.dumps(keep2.to_dict(), ensure_ascii=False) + "\n").encode()
    corrupt = b"{not json at all\n"
    write_raw(catalog, line_of(keep1) + corrupt + line_of(drop) + b"\n" + unicode_line)
    assert catalog.delete_by_branch("feature") == 1
    # corrupt lines are someone's data and stay; blank lines go; kept lines are unchanged bytes
    assert catalog.path.read_bytes() == line_of(keep1) + corrupt + unicode_line
    assert catalog.list() == [keep2, keep1]


def test_delete_without_final_newline_ends_with_one(catalog: MemoryCatalog) -> None:
    keep, drop = make_entry(1, branch_name="main"), make_entry(2, branch_name="x")
    write_raw(catalog, line_of(drop) + line_of(keep).rstrip(b"\n"))
    assert catalog.delete_by_branch("x") == 1
    assert catalog.path.read_bytes() == line_of(keep)


def test_delete_uses_os_replace(catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog.add("x", branch_name="b")
    catalog.add("y", run_id="r")
    replaced: list[str] = []
    real_replace = os.replace

    def recording(src: Any, dst: Any) -> None:
        if Path(dst) == catalog.path:
            replaced.append(str(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording)
    assert catalog.delete_by_branch("b") == 1
    assert catalog.delete_by_run_id("r") == 1
    assert len(replaced) == 2  # one atomic replace of memory.jsonl per rewrite
    assert all(Path(src).parent == catalog.directory for src in replaced)  # temp files beside it
    assert catalog.delete_by_branch("none") == 0
    assert len(replaced) == 2  # nothing to delete: no rewrite


@pytest.mark.parametrize(
    "operation",
    [
        lambda c: c.delete_by_branch("b"),
        lambda c: c.delete_by_run_id("r"),
        lambda c: c.quarantine_by_branch("b", "why"),
    ],
    ids=["delete_by_branch", "delete_by_run_id", "quarantine_by_branch"],
)
def test_failed_replace_leaves_the_file_byte_identical(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch, operation: Callable[[MemoryCatalog], int]
) -> None:
    catalog.add("x", branch_name="b", run_id="r")
    catalog.add("y")
    before = catalog.path.read_bytes()

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        operation(catalog)
    monkeypatch.undo()
    assert catalog.path.read_bytes() == before
    assert [n for n in os.listdir(catalog.directory) if n.endswith(".tmp")] == []
    assert [e.content for e in catalog.list()] == ["y", "x"]


@pytest.mark.parametrize("method", ["delete_by_branch", "delete_by_run_id"])
def test_delete_bad_argument_type(catalog: MemoryCatalog, method: str) -> None:
    catalog.add("x")
    with pytest.raises(TypeError):
        getattr(catalog, method)(None)
    assert len(catalog.list()) == 1


def test_stale_temp_files_are_cleaned_by_the_next_rewrite(catalog: MemoryCatalog) -> None:
    catalog.add("x", branch_name="b")
    stale = catalog.directory / f".{catalog.path.name}.999.deadbeef.tmp"
    stale.write_bytes(b"half a rewrite")
    assert catalog.maintain_dry_run()["stale_temp_files"] == 1
    assert stale.exists()  # the dry run changes nothing
    catalog.delete_by_branch("b")
    assert not stale.exists()


# ---------------------------------------------------------------- quarantine_by_branch


def test_quarantine_by_branch_moves_entries_with_provenance(catalog: MemoryCatalog) -> None:
    a = catalog.add("a", tags=["T"], branch_name="bad", run_id="r1")
    b = catalog.add("b", branch_name="good")
    c = catalog.add("c", branch_name="bad")
    assert catalog.quarantine_by_branch("bad", "poisoned input") == 2
    assert catalog.list() == [b]
    payloads = file_lines(catalog.quarantine_path)
    assert [p["memory_id"] for p in payloads] == [a.memory_id, c.memory_id]
    for payload, entry in zip(payloads, (a, c), strict=True):
        assert payload["quarantine"] is True
        assert set(payload["provenance"]) == {"reason", "original_branch", "quarantined_at"}
        assert payload["provenance"]["reason"] == "poisoned input"
        assert payload["provenance"]["original_branch"] == "bad"
        assert payload["provenance"]["quarantined_at"].endswith("+00:00")
        assert {k: payload[k] for k in entry.to_dict()} == entry.to_dict()  # the entry itself, unchanged
    assert catalog.list_quarantined() == [c, a]
    assert catalog.list_quarantined(limit=1) == [c]
    assert catalog.quarantine_by_branch("bad", "again") == 0


def test_quarantine_bad_arguments(catalog: MemoryCatalog) -> None:
    catalog.add("a", branch_name="b")
    with pytest.raises(TypeError, match="branch_name"):
        catalog.quarantine_by_branch(None, "why")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason"):
        catalog.quarantine_by_branch("b", None)  # type: ignore[arg-type]
    assert len(catalog.list()) == 1


def test_quarantine_file_only_ever_grows_and_nothing_is_promoted(catalog: MemoryCatalog) -> None:
    """Invariant 8: the quarantine file only receives appends; nothing returns to memory.jsonl."""
    catalog.add("one", branch_name="x")
    catalog.quarantine_by_branch("x", "r")
    snapshots = [catalog.quarantine_path.read_bytes()]
    quarantined = {p["memory_id"] for p in file_lines(catalog.quarantine_path)}
    steps: list[Callable[[], object]] = [
        lambda: catalog.add_quarantined("two", provenance={"k": "v"}),
        lambda: catalog.add("three", branch_name="x"),
        lambda: catalog.delete_by_branch("x"),
        lambda: catalog.add("four", branch_name="y"),
        lambda: catalog.quarantine_by_branch("y", "r2"),
        lambda: catalog.delete_by_run_id("none"),
        lambda: MemoryCatalog(catalog.root).list_quarantined(),
    ]
    for step in steps:
        step()
        current = catalog.quarantine_path.read_bytes()
        assert current.startswith(snapshots[-1])
        snapshots.append(current)
        quarantined |= {p["memory_id"] for p in file_lines(catalog.quarantine_path)}
        active = {p["memory_id"] for p in file_lines(catalog.path)} if catalog.path.exists() else set()
        assert not active & quarantined
    assert not [name for name in dir(catalog) if "promot" in name or "restore" in name]


# ---------------------------------------------------------------- existing files and corruption


def test_existing_format_without_final_newline_then_add(catalog: MemoryCatalog) -> None:
    old = [make_entry(i, tags=["legacy"], branch_name="main" if i % 2 else None) for i in range(3)]
    data = "\n".join(json.dumps(e.to_dict(), sort_keys=True) for e in old).encode()
    write_raw(catalog, data)  # last line has no newline
    assert catalog.list() == old[::-1]
    assert catalog.show(old[2].memory_id) == old[2]
    assert catalog.search("legacy") == sorted(old, key=lambda e: e.created_at, reverse=True)
    new = catalog.add("appended safely")
    assert catalog.path.read_bytes() == data + b"\n" + line_of(new)
    assert catalog.list() == [new, *old[::-1]]
    assert catalog.show(old[2].memory_id) == old[2]
    assert catalog.health_report()["corrupt_entries"] == 0


def test_lines_with_unknown_keys_and_crlf_are_read(catalog: MemoryCatalog) -> None:
    a, b, c = make_entry(1), make_entry(2), make_entry(3)
    data = (
        json.dumps({**a.to_dict(), "extra": {"nested": [1]}}, sort_keys=True).encode()
        + b"\r\n"
        + line_of(b).replace(b"\n", b"\r\n")
        + b"  "
        + line_of(c).rstrip(b"\n")
        + b"  \r"  # surrounding whitespace, unterminated
    )
    write_raw(catalog, data)
    assert catalog.list() == [c, b, a]
    assert catalog.health_report()["corrupt_entries"] == 0


CORRUPT_LINES = [
    b"not json",
    b"\xff\xfe\xfd invalid utf-8",
    b'{"memory_id": "abc", "content": "truncated',
    b'{"memory_id": "", "content": "x", "tags": [], "created_at": "t"}',
    b'{"memory_id": "a", "content": "   ", "tags": [], "created_at": "t"}',
    b'{"memory_id": "a", "content": "x", "tags": "abc", "created_at": "t"}',
    b'{"memory_id": "a", "content": "x", "tags": [1], "created_at": "t"}',
    b'{"memory_id": "a", "content": "x", "tags": [], "created_at": 5}',
    b'{"memory_id": "a", "content": "x", "tags": [], "created_at": "t", "branch_name": 1}',
    b'{"memory_id": "a", "content": "x", "tags": [], "created_at": NaN}',
    b'{"memory_id": "a", "content": "x"}{"memory_id": "b", "content": "y"}',
    b"}{",
    b"[1, 2, 3]",
    b"42",
    b"null",
    b'"just a string"',
    b"[" * 5000 + b"]" * 5000,
    b'{"memory_id": "a", "content": "x", "tags": [], "created_at": "t", "n": ' + b"9" * 5000 + b"}",
    b"<<<<<<< HEAD",
]


def test_corrupt_lines_are_skipped_and_counted(catalog: MemoryCatalog) -> None:
    good = [make_entry(i, "good line") for i in range(3)]
    data = (
        line_of(good[0])
        + b"\n".join(CORRUPT_LINES)
        + b"\n"
        + line_of(good[1])
        + b"\n\n   \n"
        + line_of(good[2])
    )
    write_raw(catalog, data)
    assert catalog.list() == good[::-1]
    assert ids(catalog.search("good")) == ids(good[::-1])  # equal scores: newest created_at first
    report = catalog.health_report()
    assert report["corrupt_entries"] == len(CORRUPT_LINES)
    assert report["total_entries"] == 3
    assert report["healthy"] is False
    assert report["blank_lines"] == 3
    dry = catalog.maintain_dry_run()
    assert dry["corrupt_lines"] == len(CORRUPT_LINES) and dry["would_change"] is True
    assert catalog.path.read_bytes() == data  # reads never modify the file


def test_lone_surrogate_escapes_are_valid_content(catalog: MemoryCatalog) -> None:
    entry = make_entry(1, "odd \ud800 text")
    write_raw(catalog, line_of(entry))
    assert catalog.list() == [entry]
    assert catalog.search("\ud800") == [entry]


def test_duplicate_json_keys_take_the_last_value(catalog: MemoryCatalog) -> None:
    write_raw(
        catalog,
        b'{"memory_id": "a1", "content": "first", "content": "second", "tags": [], "created_at": "t"}\n',
    )
    assert [e.content for e in catalog.list()] == ["second"]


# ---------------------------------------------------------------- reports


def test_health_report_on_a_healthy_catalog(catalog: MemoryCatalog) -> None:
    catalog.add("a")
    catalog.add("b")
    catalog.add_quarantined("q", provenance={})
    report = catalog.health_report()
    assert report["total_entries"] == 2
    assert report["corrupt_entries"] == 0
    assert report["healthy"] is True
    assert report["quarantined_entries"] == 1
    assert report["exists"] is True
    assert report["bytes"] == catalog.path.stat().st_size
    json.dumps(report)


def test_maintain_dry_run_reports_without_changing_anything(catalog: MemoryCatalog) -> None:
    clean = catalog.maintain_dry_run()
    assert clean["would_change"] is False and clean["dry_run"] is True
    a = make_entry(1)
    data = line_of(a) + line_of(a) + b"\n" + b"junk\n" + line_of(make_entry(2)).rstrip(b"\n")
    write_raw(catalog, data)
    report = catalog.maintain_dry_run()
    assert report["duplicate_ids"] == 1
    assert report["corrupt_lines"] == 1
    assert report["blank_lines"] == 1
    assert report["missing_final_newline"] is True
    assert report["total_entries"] == 3
    assert report["would_change"] is True
    assert catalog.path.read_bytes() == data


# ---------------------------------------------------------------- private catalogs


def test_private_catalog_modes(tmp_path: Path, use_index: bool) -> None:
    directory = tmp_path / "personal"
    catalog = MemoryCatalog.in_directory(directory, private=True, use_index=use_index)
    catalog.add("secret", branch_name="b")
    catalog.add_quarantined("q", provenance={})
    catalog.add("other")
    catalog.delete_by_branch("b")  # a rewrite keeps the mode
    assert catalog.path == directory / "memory.jsonl"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("memory.jsonl", "memory-quarantine.jsonl", "memory.lock"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name


def test_tag_normalisation_round_trip_on_disk(catalog: MemoryCatalog) -> None:
    tags = ["Zeta", " alpha", "ALPHA ", "", "  ", "Beta"]
    entry = catalog.add("x", tags=tags)
    assert entry.tags == normalize_tags(tags) == ("alpha", "beta", "zeta")
    assert file_lines(catalog.path)[0]["tags"] == ["alpha", "beta", "zeta"]
    assert catalog.show(entry.memory_id).tags == ("alpha", "beta", "zeta")
