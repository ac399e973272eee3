"""A large reindex loads its sources in worker processes: the same rows as threads, and the same errors.

Worker processes run the catch-up a thread runs (TeamIndex._load); a worker that cannot
start leaves its sources to the parent.  Either way the answers equal a scan.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_index_differential import write_raw
from test_team_index_differential import EXAMPLE_SOURCES, Team

from memstore import team_index
from memstore.index import line_worker
from memstore.index.pg import load_worker

pytestmark = pytest.mark.pg
QUERIES = ["ab", "straße", "nul", "surrogate", "a%b", "x", "and or"]


def load(tmp_path: Path, writer: str, reader: str) -> Team:
    team = Team(tmp_path, writer, reader, len(EXAMPLE_SOURCES))
    for catalog, body in zip(team.catalogs.values(), EXAMPLE_SOURCES, strict=True):
        write_raw(catalog.path, b"\n".join(body) + b"\n")
    team.catch_up()
    return team


def test_sources_loaded_by_worker_processes_equal_the_scan(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(team_index, "PROCESS_BYTES", 1)
    started: list[object] = []
    real_start = load_worker.LoadWorker.start

    def start(url):  # type: ignore[no-untyped-def]
        worker = real_start(url)
        started.append(worker)
        return worker

    monkeypatch.setattr(load_worker.LoadWorker, "start", staticmethod(start))
    team = load(tmp_path, pg_writer_url, pg_reader_url)
    try:
        assert started and all(worker is not None for worker in started)
        team.check(QUERIES)
        for catalog in team.catalogs.values():
            write_raw(catalog.path, catalog.path.read_bytes()[:-40] + b"\n")  # a cut: every source rebuilt
        team.catch_up()
        team.check(QUERIES)
    finally:
        team.close()


def test_a_worker_that_cannot_start_leaves_its_sources_to_the_parent(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(team_index, "PROCESS_BYTES", 1)
    monkeypatch.setattr(load_worker.LoadWorker, "start", staticmethod(lambda url: None))
    team = load(tmp_path, pg_writer_url, pg_reader_url)
    try:
        team.check(QUERIES)
    finally:
        team.close()


def test_an_error_in_a_worker_is_raised_in_the_parent(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(team_index, "PROCESS_BYTES", 1)
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 2)
    try:
        for catalog in team.catalogs.values():
            write_raw(catalog.path, b'{"memory_id": "m", "content": "x", "tags": [], "created_at": "t"}\n')
        first = next(iter(team.roots.values()))
        path = first / ".teaagent" / "memory.jsonl"
        path.unlink()
        path.mkdir()  # a folder where the file should be: the catch-up's read fails
        with pytest.raises(OSError):
            team.writer.reindex(team.roots)
    finally:
        team.close()


def test_a_term_of_the_long_term_length_makes_a_row_odd_one_less_does_not() -> None:
    from memstore.index.lines import row_values
    from memstore.index.pg.rows import LONG_TERM_CHARS, doc_of
    from memstore.models import MemoryEntry

    def doc(content: str, tags: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
        entry = MemoryEntry(memory_id="m", content=content, tags=tags, created_at="2026-01-01T00:00:00+00:00")
        return doc_of((0, 1, *row_values(entry)))

    long, short = "é" * LONG_TERM_CHARS, "a" * (LONG_TERM_CHARS - 1)
    assert doc(f"x {long} y").odd and doc("x", (f"t-{long}",)).odd
    assert not doc(f"x {short}-{short} y", (short,)).odd


def test_a_load_in_a_worker_runs_without_the_cycle_collector_and_restores_it() -> None:
    import gc

    assert gc.isenabled()
    try:
        with line_worker.collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(RuntimeError), line_worker.collector_paused():
            raise RuntimeError("a failed load")
        assert gc.isenabled()
        gc.disable()
        with line_worker.collector_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
