"""Many machines at once on one database: indexers of different sources and searchers, and the two roles.

Real processes against a real server.  Each indexer owns sources and keeps appending to
them (and now and then rewrites one, which loads a new partition and swaps it in) and
catching them up; each searcher keeps asking for a word every line holds, so every answer
lists every row of every source.  In every answer, each source holds exactly the rows its
freshness says (no duplicate, none missing, none half caught up), and a monitor sampling
``pg_stat_activity`` never sees a lock wait longer than the longest single catch-up.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pg_server
import psycopg
import pytest
from psycopg import errors as pg_errors

from memstore.errors import IndexAuthError
from memstore.team_index import TeamIndex

pytestmark = pytest.mark.pg

SECONDS = 12.0
INDEXERS = 3
SOURCES_PER_INDEXER = 2
SEARCHERS = 3
BATCH = 40


def line(source: str, batch: int, number: int) -> bytes:
    payload = {"memory_id": f"{source}-{batch}-{number}", "content": f"every line {source} batch{batch} n{number}",
               "tags": ["shared"], "created_at": f"2026-01-01T00:{batch % 60:02d}:{number % 60:02d}+00:00"}
    return json.dumps(payload).encode() + b"\n"


def write_batch(root: Path, source: str, batch: int, *, rewrite: bool = False) -> None:
    path = root / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(line(source, batch, n) for n in range(BATCH))
    if rewrite:
        # A rewrite (as after a delete or a merge): fewer lines than before, a new inode.
        tmp = path.with_name("rewrite.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    else:
        with open(path, "ab") as handle:
            handle.write(data)


def indexer(url: str, sources: dict[str, str], seconds: float, queue: Any) -> None:
    errors: list[str] = []
    durations: list[float] = []
    team = TeamIndex(url)
    batch = 1
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for name, root in sources.items():
                write_batch(Path(root), name, batch, rewrite=batch % 5 == 0)
                started = time.perf_counter()
                try:
                    team.reindex({name: root})
                except Exception as exc:  # every error is counted, none expected
                    errors.append(f"{type(exc).__name__}: {exc}")
                durations.append(time.perf_counter() - started)
            batch += 1
    finally:
        team.close()
        queue.put(("indexer", errors, durations))


def searcher(url: str, seconds: float, queue: Any) -> None:
    errors: list[str] = []
    latencies: list[float] = []
    team = TeamIndex(url)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                result = team.search("every line", limit=100_000)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)
            per_source: dict[str, list[str]] = {}
            for hit in result.hits:
                per_source.setdefault(hit.source, []).append(hit.entry.memory_id)
            for source in result.sources:
                ids = per_source.get(source.name, [])
                if len(ids) != len(set(ids)):
                    errors.append(f"duplicate rows in {source.name}")
                if len(ids) != source.entries:
                    errors.append(f"{source.name}: {len(ids)} rows, freshness says {source.entries}")
                if source.entries is not None and source.entries % BATCH:
                    errors.append(f"{source.name}: {source.entries} rows, a half caught-up batch")
    finally:
        team.close()
        queue.put(("searcher", errors, latencies))


def monitor(admin: str, database: str, seconds: float, queue: Any) -> None:
    """The longest lock wait any memstore session of this database was seen in."""
    longest = 0.0
    deadline = time.monotonic() + seconds
    with psycopg.connect(admin, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - state_change)), 0) FROM pg_stat_activity"
                " WHERE datname = %s AND wait_event_type = 'Lock' AND application_name = 'memstore'",
                (database,),
            ).fetchone()
            longest = max(longest, float(row[0]) if row else 0.0)
            time.sleep(0.02)
    queue.put(("monitor", [], [longest]))


def test_indexers_and_searchers_at_once(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    roots = {f"repo{i}/memory.jsonl": str(tmp_path / f"repo{i}") for i in range(INDEXERS * SOURCES_PER_INDEXER)}
    for name, root in roots.items():
        write_batch(Path(root), name, 0)
    with TeamIndex(pg_database.writer) as team:
        team.reindex(roots)  # the schema and every source's first load, before the race
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    names = list(roots)
    processes = [
        context.Process(target=indexer, args=(pg_database.writer, {n: roots[n] for n in names[i::INDEXERS]},
                                              SECONDS, queue))
        for i in range(INDEXERS)
    ]
    processes += [context.Process(target=searcher, args=(pg_database.reader, SECONDS, queue))
                  for _ in range(SEARCHERS)]
    processes.append(context.Process(target=monitor, args=(pg_database.admin, pg_database.database,
                                                           SECONDS, queue)))
    for process in processes:
        process.start()
    results = [queue.get(timeout=SECONDS + 120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    errors = [error for _kind, found, _times in results for error in found]
    assert errors == []
    catch_ups = [t for kind, _e, times in results if kind == "indexer" for t in times]
    searches = [t for kind, _e, times in results if kind == "searcher" for t in times]
    (longest_wait,) = [times[0] for kind, _e, times in results if kind == "monitor"]
    assert len(catch_ups) >= INDEXERS * SOURCES_PER_INDEXER and len(searches) >= SEARCHERS
    assert longest_wait <= max(catch_ups), (longest_wait, max(catch_ups))
    # Afterwards: every source equals its file.
    with TeamIndex(pg_database.reader) as reader:
        for name, root in roots.items():
            result = reader.search("every line", limit=100_000, sources=[name])
            path = Path(root) / ".teaagent" / "memory.jsonl"
            expected = [json.loads(raw)["memory_id"] for raw in path.read_bytes().splitlines()]
            assert sorted(hit.entry.memory_id for hit in result.hits) == sorted(expected)
            assert result.sources[0].entries == len(expected)


def test_reader_searches_and_cannot_write(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    root = tmp_path / "repo"
    write_batch(root, "repo", 0)
    with TeamIndex(pg_database.writer) as writer:
        writer.reindex({"repo": root})
    with TeamIndex(pg_database.reader) as reader:
        assert len(reader.search("every", limit=100).hits) == BATCH
        assert reader.find_matching(["a.py"], "fix the database migration").hits == ()
        write_batch(root, "repo", 1)
        with pytest.raises(IndexAuthError) as info:
            reader.reindex({"repo": root})
        assert "may only read" in str(info.value) and "\n" not in str(info.value)
        with pytest.raises(IndexAuthError):
            reader.reindex({"another": root})
    # Not by the session setting alone: the grants refuse it.
    with psycopg.connect(pg_database.reader, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        for statement in ("DELETE FROM team_doc", "UPDATE team_source SET rows = 0", "DROP TABLE team_term",
                          "INSERT INTO team_term (kind, text, grams) VALUES (0, 'x', '{}')",
                          "CREATE TABLE mine (x int)"):
            with pytest.raises(pg_errors.InsufficientPrivilege):
                conn.execute(statement)
    with TeamIndex(pg_database.reader) as reader:
        assert len(reader.search("every", limit=100).hits) == BATCH
