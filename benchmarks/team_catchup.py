"""One team source's catch-up of one appended line, taken apart, against the server's own floor.

Run against a loaded team index (``benchmarks.team`` loads one; so does any ``reindex``):

    python -m benchmarks.team_catchup --url postgresql://writer@/db?host=/tmp/x --source NAME=ROOT

Each round appends one line, by memstore (``MemoryCatalog.add``: the append chain knows
it) or, with ``--foreign``, as another tool would, then times ``TeamIndex.reindex`` of that
source.  Beside it, measured in the same minutes on the same server: the bare round trip
(``SELECT 1``), a durable commit of a one-row update (the commit's WAL flush), the floor
under any catch-up that must make its rows durable, and the digest of the whole file, the
floor under a catch-up of another tool's append.  ``--profile`` prints where one more
catch-up spends its Python time.  The database gets one scratch table (``bench_commit``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FLOOR_ROUNDS = 50


def _ms(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 3), "p95": round(p95 * 1000, 3),
            "min": round(ordered[0] * 1000, 3)}  # fmt: skip


def _timed(step: Callable[[], Any], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times


def floor(url: str) -> dict[str, Any]:
    """The server's bare round trip and durable one-row commit, on one plain connection."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (k int PRIMARY KEY, n bigint)")
        conn.execute("INSERT INTO bench_commit VALUES (1, 0) ON CONFLICT DO NOTHING")
        trip = _timed(lambda: conn.execute("SELECT 1").fetchone(), FLOOR_ROUNDS)

        def commit() -> None:
            with conn.transaction():
                conn.execute("UPDATE bench_commit SET n = n + 1 WHERE k = 1")

        durable = _timed(commit, FLOOR_ROUNDS)
    return {"round_trip_ms": _ms(trip), "durable_commit_ms": _ms(durable)}


def prefix_proof(path: Path) -> dict[str, Any]:
    """What another tool's append costs before any SQL: the digest of every indexed byte."""
    from memstore.block_digest import PrefixDigest

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        times = _timed(lambda: PrefixDigest.of(fd, size), 5)
    finally:
        os.close(fd)
    return {"bytes": size, "ms": _ms(times)}


def catch_ups(url: str, name: str, root: Path, *, rounds: int, foreign: bool, profile: bool) -> dict[str, Any]:
    from benchmarks.team import append_line
    from memstore.catalog import MemoryCatalog
    from memstore.team_index import TeamIndex

    catalog = MemoryCatalog(root)
    times: list[float] = []
    with TeamIndex(url) as team:

        def append(number: int) -> None:
            if foreign:
                append_line(catalog.path, number)
            else:
                catalog.add(f"appended line {number} for the catch-up probe", tags=["bench"])

        def one(number: int) -> float:
            append(number)
            started = time.perf_counter()
            action = team.reindex({name: root}).sources[0].action
            took = time.perf_counter() - started
            if action != "appended":
                raise SystemExit(f"round {number}: {action}, not appended")
            return took

        one(-1)  # the pool's connections and the prepared lookups, once
        times = [one(number) for number in range(rounds)]
        result: dict[str, Any] = {"rounds": rounds, "foreign": foreign, "catch_up_ms": _ms(times)}
        if profile:
            profiler = cProfile.Profile()
            append(rounds)
            profiler.enable()
            team.reindex({name: root})
            profiler.disable()
            stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
            stats.print_stats(30)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the team index (a role that writes)")
    parser.add_argument("--source", required=True, help="NAME=ROOT of a loaded source")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--foreign", action="store_true", help="append as another tool would (no chain)")
    parser.add_argument("--profile", action="store_true", help="cProfile one more catch-up (to stderr)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    name, _eq, root = args.source.partition("=")
    figures = {"floor_before": floor(args.url)}
    figures.update(catch_ups(args.url, name, Path(root), rounds=args.rounds, foreign=args.foreign,
                             profile=args.profile))  # fmt: skip
    figures["floor_after"] = floor(args.url)
    figures["prefix_proof"] = prefix_proof(Path(root) / ".teaagent" / "memory.jsonl")
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
