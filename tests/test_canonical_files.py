"""Whatever sits at a canonical file's path: stale caches, BOMs, links, odd last lines, odd provenance.

Each test here reproduces a defect of issue 9 (items 3, 4, 7, 14, 17, 18 and 22) on the
canonical-file layer: the scan cache, the shared line decoder, the append and rewrite
helpers, and the way team-memory.md is split into lines.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memstore import files
from memstore.catalog import MemoryCatalog
from memstore.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    MemstoreError,
    NotRegularFileError,
    StorageError,
)
from memstore.team import TeamMemory

BOM = b"\xef\xbb\xbf"


def line(memory_id: str, content: str, **extra: Any) -> bytes:
    payload = {
        "memory_id": memory_id,
        "content": content,
        "tags": extra.pop("tags", []),
        "created_at": extra.pop("created_at", "2026-01-01T00:00:00+00:00"),
        "branch_name": extra.pop("branch_name", None),
        "run_id": None,
        **extra,
    }
    return json.dumps(payload, sort_keys=True).encode() + b"\n"


def answers(catalog: MemoryCatalog, queries: list[str]) -> tuple[object, ...]:
    def show(memory_id: str) -> object:
        try:
            return catalog.show(memory_id)
        except FileNotFoundError:
            return None

    return (
        [catalog.search(query, limit=10) for query in queries],
        catalog.list(limit=50),
        [show(memory_id) for memory_id in ("m1", "m2", "m3")],
    )


def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(root.parent / "home"), COLUMNS="200")
    env.pop("MEMSTORE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "memstore", "--root", str(root), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memstore: error: "), lines
    return lines[0]


# ----------------------------------------------------------------------------- item 3: scan cache


def _old_mtime(path: Path) -> int:
    """Give ``path`` an mtime well outside the racy window and return it."""
    old = os.stat(path).st_mtime_ns - 3_600 * 10**9
    os.utime(path, ns=(old, old))
    return old


@pytest.mark.parametrize("readonly", [False, True])
def test_scan_cache_sees_a_same_size_edit_with_the_mtime_restored(tmp_path: Path, readonly: bool) -> None:
    store = tmp_path / ".teaagent"
    store.mkdir()
    path = store / "memory.jsonl"
    path.write_bytes(line("m1", "alpha words") + line("m2", "beta words"))
    old = _old_mtime(path)
    if readonly:
        catalog = MemoryCatalog(tmp_path, readonly=True)  # no index folder: readonly never creates one
    else:
        catalog = MemoryCatalog(tmp_path, use_index=False)
    assert [e.memory_id for e in catalog.search("alpha")] == ["m1"]
    with open(path, "r+b") as handle:  # same size, in place, then the mtime put back
        handle.write(path.read_bytes().replace(b"alpha", b"gamma"))
    os.utime(path, ns=(old, old))
    assert catalog.search("alpha") == []
    assert [e.memory_id for e in catalog.search("gamma")] == ["m1"]
    if readonly:
        assert not (store / "index").exists()


def test_scan_cache_rescans_when_the_ctime_is_within_the_racy_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change within one timestamp tick of the scan keeps every stat field: only the clock can tell."""
    path = tmp_path / ".teaagent" / "memory.jsonl"
    catalog = MemoryCatalog(tmp_path, use_index=False)
    path.write_bytes(line("m1", "alpha words"))
    old = _old_mtime(path)
    frozen_ctime = os.stat(path).st_ctime_ns  # just now: inside the racy window of the first scan
    real_fstat = os.fstat

    def frozen_fstat(fd: int) -> os.stat_result:
        real = real_fstat(fd)
        if not stat.S_ISREG(real.st_mode):
            return real
        atime_ns = real[7] * 10**9
        return os.stat_result([*real[:10], float(real[7]), old / 1e9, frozen_ctime / 1e9, atime_ns, old, frozen_ctime])

    monkeypatch.setattr(os, "fstat", frozen_fstat)
    assert [e.memory_id for e in catalog.search("alpha")] == ["m1"]
    with open(path, "r+b") as handle:
        handle.write(path.read_bytes().replace(b"alpha", b"gamma"))
    assert catalog.search("alpha") == []
    assert [e.memory_id for e in catalog.search("gamma")] == ["m1"]


# ----------------------------------------------------------------------------- item 4: BOM


def test_bom_does_not_hide_the_first_entry_index_equals_scan(tmp_path: Path) -> None:
    path = tmp_path / ".teaagent" / "memory.jsonl"
    path.parent.mkdir()
    path.write_bytes(BOM + line("m1", "first entry", tags=["t"]) + line("m2", "second entry") + BOM + b"\n")
    indexed = MemoryCatalog(tmp_path)
    scanned = MemoryCatalog(tmp_path, use_index=False)
    queries = ["first", "entry", "t", "second first"]
    assert answers(indexed, queries) == answers(scanned, queries)
    assert [e.memory_id for e in indexed.search("first")] == ["m1"]
    assert [e.memory_id for e in indexed.list()] == ["m2", "m1"]
    assert indexed.show("m1").content == "first entry"
    assert indexed.health_report()["index"]["state"] == "fresh"
    assert indexed.check_index().equal
    report = scanned.health_report()
    assert (report["total_entries"], report["corrupt_entries"], report["blank_lines"]) == (2, 0, 1)
    # A rewrite keeps the BOM of a line it keeps, byte for byte, and the index follows it.
    indexed.add("third", branch_name="gone")
    assert indexed.delete_by_branch("gone") == 1
    assert path.read_bytes().startswith(BOM + line("m1", "first entry", tags=["t"]))
    assert answers(indexed, queries) == answers(MemoryCatalog(tmp_path, use_index=False), queries)
    assert indexed.check_index().equal


def test_bom_in_the_quarantine_file_and_the_personal_tier(tmp_path: Path) -> None:
    project = MemoryCatalog(tmp_path)
    project.quarantine_path.write_bytes(BOM + line("m1", "quarantined", quarantine=True, provenance={"a": 1}))
    assert [e.memory_id for e in project.list_quarantined()] == ["m1"]
    personal_dir = tmp_path / "personal"
    personal = MemoryCatalog.in_directory(personal_dir, private=True)
    personal.path.write_bytes(BOM + line("m1", "personal note"))
    assert [e.memory_id for e in personal.search("personal")] == ["m1"]
    assert [e.memory_id for e in MemoryCatalog.in_directory(personal_dir, use_index=False).list()] == ["m1"]


def test_an_unterminated_entry_after_a_bom_is_not_taken_for_a_torn_write(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(BOM + line("m1", "only one").rstrip(b"\n"))
    catalog.add("second")
    assert [e.content for e in catalog.list()] == ["second", "only one"]
    assert not list(catalog.directory.glob("*.torn-*"))


# ----------------------------------------------------------------------------- item 7: symlinks


def _two_linked_roots(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    shared = tmp_path / "shared" / name
    shared.parent.mkdir()
    shared.write_bytes(line("m1", "shared entry", branch_name="b"))
    roots = []
    for label in ("checkout-a", "checkout-b"):
        store = tmp_path / label / ".teaagent"
        store.mkdir(parents=True)
        (store / name).symlink_to(shared)
        roots.append(tmp_path / label)
    return roots[0], roots[1], shared


@pytest.mark.parametrize("use_index", [True, False])
def test_a_linked_catalog_file_is_refused_for_every_read_and_write(tmp_path: Path, use_index: bool) -> None:
    root_a, root_b, shared = _two_linked_roots(tmp_path, "memory.jsonl")
    before = shared.read_bytes()
    for root in (root_a, root_b):
        catalog = MemoryCatalog(root, use_index=use_index)
        link = catalog.path
        calls = [
            lambda c=catalog: c.add("appended"),
            lambda c=catalog: c.delete_by_branch("b"),
            lambda c=catalog: c.delete_by_run_id("r"),
            lambda c=catalog: c.quarantine_by_branch("b", "why"),
            lambda c=catalog: c.search("shared"),
            lambda c=catalog: c.list(),
            lambda c=catalog: c.show("m1"),
        ]
        for call in calls:
            with pytest.raises(NotRegularFileError) as caught:
                call()
            assert str(link) in str(caught.value)
            assert isinstance(caught.value, StorageError)
        assert link.is_symlink() and os.readlink(link) == str(shared)
    assert shared.read_bytes() == before
    assert not (shared.parent / "memory.lock").exists()


def test_a_linked_quarantine_or_team_file_is_refused(tmp_path: Path) -> None:
    root_a, _root_b, shared = _two_linked_roots(tmp_path, "memory-quarantine.jsonl")
    catalog = MemoryCatalog(root_a)
    catalog.add("kept here", branch_name="b")
    before = shared.read_bytes()
    with pytest.raises(NotRegularFileError):
        catalog.add_quarantined("x", provenance={})
    with pytest.raises(NotRegularFileError):
        catalog.quarantine_by_branch("b", "why")
    with pytest.raises(NotRegularFileError):
        catalog.list_quarantined()
    assert shared.read_bytes() == before
    assert [e.content for e in catalog.list()] == ["kept here"]  # the move never half happened

    (tmp_path / "t").mkdir()
    team_root, _other, team_shared = _two_linked_roots(tmp_path / "t", "team-memory.md")
    team_before = team_shared.read_bytes()
    team = TeamMemory(team_root)
    with pytest.raises(NotRegularFileError):
        team.add("note")
    with pytest.raises(NotRegularFileError):
        team.list()
    assert team_shared.read_bytes() == team_before


def test_a_directory_fifo_or_dangling_link_at_memory_jsonl_names_the_path(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.mkdir()
    for call in (lambda: catalog.add("x"), lambda: catalog.search("x"), lambda: catalog.list(),
                 lambda: MemoryCatalog(tmp_path, use_index=False).list()):
        with pytest.raises(NotRegularFileError, match=str(catalog.path)):
            call()
    message = one_error_line(run_cli(tmp_path, "list"))
    assert str(catalog.path) in message
    assert str(catalog.path) in one_error_line(run_cli(tmp_path, "add", "x"))
    catalog.path.rmdir()
    os.mkfifo(catalog.path)  # opening it for reading must not block
    with pytest.raises(NotRegularFileError, match="not a regular file"):
        catalog.list()
    with pytest.raises(NotRegularFileError):
        catalog.add("x")
    catalog.path.unlink()
    catalog.path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        catalog.add("x")
    assert not (tmp_path / "nowhere").exists()


def test_atomic_write_refuses_to_replace_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_bytes(b"[]")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(NotRegularFileError):
        files.atomic_write(link, b"[1]")
    assert link.is_symlink() and target.read_bytes() == b"[]"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# ----------------------------------------------------------------------------- items 14 and 22: provenance


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = [value]
    return value


@pytest.mark.parametrize(
    ("provenance", "error"),
    [
        ({"at": datetime.datetime(2026, 1, 1)}, ArgumentTypeError),
        ({"s": {1, 2}}, ArgumentTypeError),
        ({"b": b"x"}, ArgumentTypeError),
        ({(1, 2): "tuple key"}, ArgumentTypeError),
        ({1: "a", "b": 2}, ArgumentTypeError),  # keys json.dumps cannot sort
        ({"c": _circular()}, InvalidArgumentError),
        (_deep(100_000), InvalidArgumentError),
        (_deep(200), InvalidArgumentError),
        ({"n": math.nan}, InvalidArgumentError),
        ({"n": [math.inf]}, InvalidArgumentError),
        ({"n": -math.inf}, InvalidArgumentError),
    ],
)
def test_provenance_json_cannot_hold_is_a_typed_error_and_writes_nothing(
    tmp_path: Path, provenance: dict[Any, Any], error: type[MemstoreError]
) -> None:
    catalog = MemoryCatalog(tmp_path)
    with pytest.raises(error) as caught:
        catalog.add_quarantined("content", provenance=provenance)
    assert isinstance(caught.value, MemstoreError)
    assert "provenance" in str(caught.value)
    assert not catalog.quarantine_path.exists()


def test_provenance_that_fits_round_trips_as_strict_json(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    provenance = {"deep": _deep(30), "n": 1.5, "big": 10**30, "u": "\ud800é", "t": (1, 2)}
    catalog.add_quarantined("content", provenance=provenance)
    raw = catalog.quarantine_path.read_bytes()
    stored = json.loads(raw, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))
    assert stored["provenance"]["deep"] == _deep(30)
    assert [e.content for e in catalog.list_quarantined()] == ["content"]
    catalog.add_quarantined("int keys", provenance={3: None})
    assert json.loads(catalog.quarantine_path.read_bytes().splitlines()[-1])["provenance"] == {"3": None}


def test_cli_deep_or_non_strict_provenance_is_a_one_line_error(tmp_path: Path) -> None:
    deep = "[" * 30_000 + "]" * 30_000
    assert "--provenance" in one_error_line(run_cli(tmp_path, "add", "x", "--quarantine", "--provenance", deep))
    nested = json.dumps(_deep(500))
    assert "provenance" in one_error_line(run_cli(tmp_path, "add", "x", "--quarantine", "--provenance", nested))
    assert "provenance" in one_error_line(
        run_cli(tmp_path, "add", "x", "--quarantine", "--provenance", '{"n": NaN}'))
    assert not (tmp_path / ".teaagent" / "memory-quarantine.jsonl").exists()


# ----------------------------------------------------------------------------- item 17: directory fsync


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    synced: list[tuple[int, int]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def test_creating_a_catalog_file_fsyncs_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _record_fsyncs(monkeypatch)
    root = tmp_path / "new" / "repo"
    catalog = MemoryCatalog(root)  # creates new/, repo/ and .teaagent/
    for created in (root.parent, root, catalog.directory):
        assert _identity(created.parent) in synced, created
    synced.clear()
    catalog.add("first")
    assert synced.index(_identity(catalog.directory)) > synced.index(_identity(catalog.path))
    synced.clear()
    catalog.add("second")  # the file exists: its directory entry is already durable
    assert synced == [_identity(catalog.path)]
    catalog.add_quarantined("q", provenance={})
    assert synced.index(_identity(catalog.directory)) > synced.index(_identity(catalog.quarantine_path))


def test_creating_team_memory_fsyncs_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _record_fsyncs(monkeypatch)
    team = TeamMemory(tmp_path)
    team.add("note")
    assert _identity(tmp_path) in synced  # .teaagent/ was created
    # The store's own files (.gitattributes, .gitignore) may sync the folder earlier: what
    # matters is a directory sync after the new file's own.
    directory_syncs = [i for i, ident in enumerate(synced) if ident == _identity(team.directory)]
    assert directory_syncs and directory_syncs[-1] > synced.index(_identity(team.path))


def test_a_failed_directory_fsync_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = MemoryCatalog(tmp_path)
    real_fsync = os.fsync

    def failing_on_directories(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_on_directories)
    with pytest.raises(StorageError, match="fsync"):
        catalog.add("first")


# ----------------------------------------------------------------------------- item 18: complete last lines


@pytest.mark.parametrize("tail", [b'{"meta": 1}', b"[1, 2]", b'"text"', b"42", b"null", b"  true  ",
                                  BOM + b'{"meta": 1}'])
def test_a_complete_json_last_line_gets_its_newline_not_set_aside(tmp_path: Path, tail: bytes) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(line("m1", "first") + tail)
    catalog.add("second")
    assert catalog.path.read_bytes().startswith(line("m1", "first") + tail + b"\n")
    assert [e.content for e in catalog.list()] == ["second", "first"]
    assert not list(catalog.directory.glob("*.torn-*"))
    catalog.quarantine_path.write_bytes(tail)
    catalog.add_quarantined("q", provenance={})
    assert catalog.quarantine_path.read_bytes().startswith(tail + b"\n")
    assert not list(catalog.directory.glob("*.torn-*"))


@pytest.mark.parametrize("tail", [b'{"memory_id": "ab', b"{", b'{"meta": 1', b"\xff", b"nul", b"[1, 2"])
def test_bytes_that_do_not_parse_are_still_set_aside(tmp_path: Path, tail: bytes) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(line("m1", "first") + tail)
    catalog.add("second")
    assert catalog.path.read_bytes().splitlines(keepends=True)[0] == line("m1", "first")
    assert [e.content for e in catalog.list()] == ["second", "first"]
    assert MemoryCatalog(tmp_path, use_index=False).health_report()["corrupt_entries"] == 0
    [aside] = catalog.directory.glob("memory.jsonl.torn-*")
    assert aside.read_bytes() == tail


# ----------------------------------------------------------------------------- item 22: team line endings


@pytest.mark.parametrize("ending", [b"\r", b"\r\n", b"\n"])
def test_team_memory_lines_split_on_any_line_ending(tmp_path: Path, ending: bytes) -> None:
    team = TeamMemory(tmp_path)
    team.directory.mkdir()
    body = ending.join(["- 2026-01-01 — one".encode(), b"", "- 2026-01-02 — two".encode(), b"  "]) + ending
    team.path.write_bytes(BOM + body)
    assert team.list() == ["- 2026-01-01 — one", "- 2026-01-02 — two"]
    prompt = team.inject_prompt()
    assert prompt.splitlines() == [
        "[team-memory] Shared team context (2 entries):", "- 2026-01-01 — one", "- 2026-01-02 — two"]
    written = team.add("three")
    assert team.list() == ["- 2026-01-01 — one", "- 2026-01-02 — two", written]


def test_a_linked_lock_file_is_not_followed(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    outside = tmp_path / "outside.lock"
    catalog.lock_path.symlink_to(outside)
    with pytest.raises(StorageError):
        catalog.add("x")
    assert not outside.exists()  # the dangling link did not create a file out of the store
    assert not catalog.path.exists()
