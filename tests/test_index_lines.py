"""memstore.index.lines and line_worker: a build parses in a worker process and gets the same rows."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from memstore.catalog import MemoryCatalog
from memstore.index import line_worker, lines
from memstore.index.catalog_index import CatalogIndex
from memstore.index.lines import ParsedRange, parse_range, parsed_ranges


def _catalog_bytes(count: int = 400) -> bytes:
    out = []
    for i in range(count):
        payload = {
            "memory_id": f"m{i}",
            "content": f"entry {i} " + ("word-" * (i % 7)) + ("é" if i % 11 == 0 else ""),
            "tags": ["t", f"g{i % 5}"],
            "created_at": f"2026-01-{1 + i % 28:02d}T00:00:00+00:00",
            "branch_name": None,
            "run_id": None,
        }
        out.append(json.dumps(payload, sort_keys=True).encode())
        if i % 50 == 3:
            out.append(b"")  # blank
        if i % 60 == 7:
            out.append(b"{not json")  # corrupt
        if i % 90 == 5:
            out.append(json.dumps({**payload, "content": "nul \x00 inside"}).encode())  # an odd row
    return b"\n".join(out) + b"\n" + b'{"memory_id": "tail", "content": "last", "created_at": "2027"}'


def _merged(ranges: list[ParsedRange]) -> tuple[list[tuple[object, ...]], int, int, int, object, object]:
    rows = [row for parsed in ranges for row in parsed.rows]
    last = ranges[-1]
    return rows, sum(p.blank for p in ranges), sum(p.corrupt for p in ranges), last.end, last.tail, last.tail_end


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(_catalog_bytes())
    return path


def _whole(path: Path) -> ParsedRange:
    fd = os.open(path, os.O_RDONLY)
    try:
        return parse_range(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _through_worker(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[ParsedRange]:
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 700)  # many ranges, each a few lines
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(parsed_ranges(path, fd, 0, os.fstat(fd).st_size))
    finally:
        os.close(fd)


def test_a_worker_parses_the_same_rows_in_the_same_order(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    real_start = line_worker.LineWorker.start

    def start(path: Path, identity: tuple[int, int]) -> object:
        worker = real_start(path, identity)
        started.append(worker)
        return worker

    monkeypatch.setattr(line_worker.LineWorker, "start", staticmethod(start))
    ranges = _through_worker(source, monkeypatch)
    assert started and started[0] is not None, "the worker process ran"
    assert len(ranges) > 10
    whole = _whole(source)
    assert _merged(ranges) == (whole.rows, whole.blank, whole.corrupt, whole.end, whole.tail, whole.tail_end)
    assert whole.tail is not None and whole.corrupt > 0 and whole.blank > 0


def test_without_a_worker_the_ranges_are_parsed_here(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_worker.LineWorker, "start", staticmethod(lambda path, identity: None))
    whole = _whole(source)
    assert _merged(_through_worker(source, monkeypatch))[0] == whole.rows


def test_a_worker_that_finds_another_file_gives_way(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path names a new file once the worker opens it: the rows still come from the open one."""
    original = source.read_bytes()
    real_start = line_worker.LineWorker.start

    def start(path: Path, identity: tuple[int, int]) -> object:
        replacement = path.with_name("other.jsonl")
        replacement.write_bytes(b'{"memory_id": "x", "content": "planted", "created_at": "2026"}\n' * 50)
        os.replace(replacement, path)  # what git checkout does
        return real_start(path, identity)

    monkeypatch.setattr(line_worker.LineWorker, "start", staticmethod(start))
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 700)
    fd = os.open(source, os.O_RDONLY)
    try:
        ranges = list(parsed_ranges(source, fd, 0, os.fstat(fd).st_size))
    finally:
        os.close(fd)
    kept = source.with_name("kept.jsonl")
    kept.write_bytes(original)
    assert _merged(ranges)[0] == _whole(kept).rows
    assert all(b"planted" not in str(row).encode() for row in _merged(ranges)[0])


def test_a_worker_that_dies_gives_way(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_start = line_worker.LineWorker.start

    def start(path: Path, identity: tuple[int, int]) -> object:
        worker = real_start(path, identity)
        assert worker is not None
        worker.process.kill()
        return worker

    monkeypatch.setattr(line_worker.LineWorker, "start", staticmethod(start))
    assert _merged(_through_worker(source, monkeypatch))[0] == _whole(source).rows


def test_a_full_build_through_the_worker_equals_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(_catalog_bytes(1500))
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 4096)
    catalog.reindex(full=True)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for query in ("entry", "word-", "é", "last", "g3", "nul", "entry 14"):
        assert catalog.search(query, limit=20) == scan.search(query, limit=20), query
    assert catalog.check_index().equal


def _rows(index_path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    conn = sqlite3.connect(index_path)
    try:
        return (
            conn.execute("SELECT * FROM doc ORDER BY id").fetchall(),
            conn.execute("SELECT * FROM pos ORDER BY id").fetchall(),
        )
    finally:
        conn.close()


def test_a_bulk_build_files_the_rows_a_catch_up_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk insert lets SQLite number the rows: the ids must be those a line-by-line catch-up gives."""
    data = _catalog_bytes(1500)
    half = data.index(b"\n", len(data) // 2) + 1
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 4096)  # many ranges through the workers, blanks and odd rows among them
    bulk = MemoryCatalog(tmp_path / "bulk")
    bulk.path.parent.mkdir(parents=True, exist_ok=True)
    bulk.path.write_bytes(data)
    bulk.reindex(full=True)
    grown = MemoryCatalog(tmp_path / "grown")
    grown.path.parent.mkdir(parents=True, exist_ok=True)
    grown.path.write_bytes(data[:half])
    grown.reindex(full=True)
    with grown.path.open("ab") as out:
        out.write(data[half:])
    assert grown.search("entry", limit=1)  # caught up row by row from the indexed offset
    bulk_rows, grown_rows = _rows(bulk.index_path), _rows(grown.index_path)
    assert len(bulk_rows[0]) == 1500 + 17 + 1  # entries, odd rows, the unterminated tail
    assert bulk_rows == grown_rows
    assert bulk.check_index().equal


def test_a_bulk_build_refuses_rows_it_did_not_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table not empty when the bulk insert starts would shift every id: the build is refused, the scan answers."""
    catalog = MemoryCatalog(tmp_path)
    catalog.path.write_bytes(_catalog_bytes(200))

    def clear_but_pos(_self: CatalogIndex, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM doc")
        conn.execute("INSERT INTO pos(id, off, len) VALUES (1000000, 0, 1)")  # a row the clear missed

    monkeypatch.setattr(CatalogIndex, "_clear", clear_but_pos)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert catalog.search("entry", limit=5) == scan.search("entry", limit=5)
    assert not catalog.index_path.exists()


def ranges_parsed_here(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every range ``parse_range`` parses in this process from now on (a worker's are not seen)."""
    parsed_here: list[tuple[int, int]] = []
    real_parse = lines.parse_range

    def counted(fd: int, start: int, stop: int) -> ParsedRange:
        parsed_here.append((start, stop))
        return real_parse(fd, start, stop)

    monkeypatch.setattr(lines, "parse_range", counted)
    return parsed_here


def test_every_range_of_a_worker_build_comes_back_from_the_worker_whole(
    source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marshalled answer carries each range whole (rows, counts, tail, what was seen): none is parsed here."""
    parsed_here = ranges_parsed_here(monkeypatch)
    ranges = _through_worker(source, monkeypatch)
    assert parsed_here == []
    fd = os.open(source, os.O_RDONLY)
    try:
        for parsed in ranges:
            assert parsed.seen is not None
            here = parse_range(fd, parsed.seen.start, parsed.seen.stop)
            assert (
                parsed.rows,
                parsed.blank,
                parsed.corrupt,
                parsed.end,
                parsed.tail,
                parsed.tail_end,
                parsed.seen,
            ) == (here.rows, here.blank, here.corrupt, here.end, here.tail, here.tail_end, here.seen)
    finally:
        os.close(fd)


def test_a_parsed_range_survives_marshal_with_odd_text_and_skipped_lines() -> None:
    import marshal

    from memstore.lines_seen import LinesSeen

    parsed = ParsedRange(end=90)
    parsed.rows = [
        (0, 40, "m\ud800", "", "", None, 0, None, None, "", "", 1),
        (41, 9, "m2", "é", "t", "2026", 2, "b", None, "x2d", "", 0),
    ]
    parsed.blank, parsed.corrupt = 1, 2
    parsed.tail, parsed.tail_end = (90, 5, "t", "last", "", "2027", 0, None, None, "", "", 0), 95
    parsed.seen = LinesSeen(0, 95, b"\x01" * 32, ((51, 60),))
    back = ParsedRange.from_plain(marshal.loads(marshal.dumps(parsed.plain())))
    assert (back.rows, back.end, back.blank, back.corrupt, back.tail, back.tail_end, back.seen) == (
        parsed.rows,
        parsed.end,
        parsed.blank,
        parsed.corrupt,
        parsed.tail,
        parsed.tail_end,
        parsed.seen,
    )
    assert type(back.seen) is LinesSeen


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00garbage",
        b"",
        __import__("marshal").dumps((1, 2)),
        __import__("marshal").dumps(([1], 0, 0, 0, None, None, None)),
    ],
)
def test_an_answer_that_is_not_a_parsed_range_means_the_worker_failed(frame: bytes) -> None:
    import queue

    worker = line_worker.LineWorker.__new__(line_worker.LineWorker)
    worker.frames = queue.Queue()
    worker.frames.put(frame)
    assert worker.answer() is None
