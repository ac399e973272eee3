"""memstore.scan: the full scan of a catalog file (the reference answer and the fallback) and its cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memstore import scan
from memstore.entry_filter import EntryFilter
from memstore.jsonl import encode_entry
from memstore.models import MemoryEntry
from memstore.scan import EMPTY_SCAN, ScanCache, scan_fd, scan_list, scan_search, scan_show


def entry(
    memory_id: str,
    content: str,
    *,
    tags: tuple[str, ...] = (),
    created_at: str = "2026-01-01T00:00:00+00:00",
    branch: str | None = None,
) -> MemoryEntry:
    return MemoryEntry(memory_id=memory_id, content=content, tags=tags, created_at=created_at, branch_name=branch)


def write_lines(path: Path, *lines: bytes) -> None:
    path.write_bytes(b"".join(lines))


def scanned(path: Path) -> scan.ScanResult:
    fd = os.open(path, os.O_RDONLY)
    try:
        return scan_fd(fd)
    finally:
        os.close(fd)


def test_scan_counts_entries_blank_and_corrupt_lines_and_keeps_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    first, second = encode_entry(entry("a", "one")), encode_entry(entry("b", "two"))
    not_an_entry = json.dumps({"memory_id": "c", "content": "  "}).encode() + b"\n"
    write_lines(path, first, b"\n", b"   \n", b"{broken\n", b"\xff\xfe\n", not_an_entry, second)
    result = scanned(path)
    assert [item.entry.memory_id for item in result.entries] == ["a", "b"]
    assert [item.order for item in result.entries] == [0, path.stat().st_size - len(second)]
    assert (result.blank, result.corrupt, result.size) == (2, 3, path.stat().st_size)


def test_a_final_line_without_newline_counts_when_it_parses(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    write_lines(path, encode_entry(entry("a", "one")), encode_entry(entry("b", "two")).rstrip(b"\n"))
    assert [item.entry.memory_id for item in scanned(path).entries] == ["a", "b"]
    write_lines(path, encode_entry(entry("a", "one")), b'{"memory_id": "b", "cont')
    result = scanned(path)
    assert [item.entry.memory_id for item in result.entries] == ["a"] and result.corrupt == 1


def test_scan_stops_at_the_size_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    first = encode_entry(entry("a", "one"))
    write_lines(path, first, encode_entry(entry("b", "two")))
    fd = os.open(path, os.O_RDONLY)
    try:
        result = scan_fd(fd, size=len(first))
    finally:
        os.close(fd)
    assert [item.entry.memory_id for item in result.entries] == ["a"] and result.size == len(first)


def test_the_cache_answers_an_unchanged_file_without_reading_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "RACY_WINDOW_NS", -(10**18))  # nothing is racy: the cache decides alone
    path = tmp_path / "memory.jsonl"
    write_lines(path, encode_entry(entry("a", "one")))
    cache = ScanCache(path)
    first = cache.read()
    assert cache.read() is first
    with open(path, "ab") as handle:
        handle.write(encode_entry(entry("b", "two")))
    grown = cache.read()
    assert grown is not first and [item.entry.memory_id for item in grown.entries] == ["a", "b"]
    replacement = tmp_path / "new"
    write_lines(replacement, encode_entry(entry("z", "one")), encode_entry(entry("y", "two")))
    os.replace(replacement, path)  # another file of the same size: a new inode
    assert [item.entry.memory_id for item in cache.read().entries] == ["z", "y"]


def test_the_cache_reads_again_a_file_changed_within_the_racy_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "RACY_WINDOW_NS", 10**18)  # every file is racy
    path = tmp_path / "memory.jsonl"
    write_lines(path, encode_entry(entry("a", "one")))
    cache = ScanCache(path)
    first = cache.read()
    again = cache.read()
    assert again is not first and again == first


def test_the_cache_of_a_missing_file_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "memory.jsonl"
    assert ScanCache(path).read() == EMPTY_SCAN
    assert not path.parent.exists()


def test_scan_search_ranks_by_score_then_newest_then_file_order(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    entries = [
        entry("old", "deploy notes", created_at="2026-01-01"),
        entry("tagged", "notes", tags=("deploy",), created_at="2026-01-03"),
        entry("new", "deploy notes", created_at="2026-01-02"),
        entry("twin", "deploy notes", created_at="2026-01-02"),
        entry("curated", "deploy", tags=("auto-curated",), created_at="2026-01-01"),
        entry("other", "unrelated", created_at="2026-01-09"),
    ]
    write_lines(path, *(encode_entry(item) for item in entries))
    result = scanned(path)
    found = [item.memory_id for item in scan_search(result, ["deploy"], 10)]
    # curated: 3 + 4; content matches: 3 (newest first, file order on a tie); tag match: 2.
    assert found == ["curated", "new", "twin", "old", "tagged"]
    assert [item.memory_id for item in scan_search(result, ["deploy"], 2)] == ["curated", "new"]
    assert scan_search(result, ["deploy", "zzz"], 10) == []
    assert scan_search(result, [], 10) == [] and scan_search(result, ["deploy"], 0) == []


def test_scan_search_and_list_apply_the_entry_filter(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    entries = [entry("a", "deploy", branch="main"), entry("b", "deploy", branch="dev"), entry("c", "deploy")]
    write_lines(path, *(encode_entry(item) for item in entries))
    result = scanned(path)
    on_main = EntryFilter.of(branch_name="main")
    assert [item.memory_id for item in scan_search(result, ["deploy"], 10, on_main)] == ["a"]
    assert [item.memory_id for item in scan_list(result, 10, on_main)] == ["a"]


def test_scan_list_is_newest_line_first_not_newest_time(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    entries = [entry("a", "x", created_at="2026-09-09"), entry("b", "x", created_at="2026-01-01"), entry("c", "x")]
    write_lines(path, *(encode_entry(item) for item in entries))
    result = scanned(path)
    assert [item.memory_id for item in scan_list(result, 10)] == ["c", "b", "a"]
    assert [item.memory_id for item in scan_list(result, 2)] == ["c", "b"]
    assert scan_list(result, 0) == []


def test_scan_show_finds_the_first_entry_with_an_id(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    write_lines(path, encode_entry(entry("dup", "first")), encode_entry(entry("dup", "second")))
    result = scanned(path)
    shown = scan_show(result, "dup")
    assert shown is not None and shown.content == "first"
    assert scan_show(result, "missing") is None
