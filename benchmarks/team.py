"""The team index on PostgreSQL next to the local SQLite index, in one run, on one corpus.

The generated catalog of ``--size`` lines is cut into ``--sources`` consecutive pieces,
one workspace each; their union in source order is the original file, so one answer
fits all three: the SQLite index over the whole file, the team index over the pieces,
and a scan of the file (the reference every answer is checked against).

Measured, for each backend:

* search p50/p95/max over the benchmark mix (:data:`benchmarks.queries.SEARCH_MIX`),
  ``--repeats`` times each, every answer equal to the scan;
* a full load: rows/s (SQLite: ``reindex --full`` of the file; PostgreSQL: every source
  loaded with COPY, two at a time);
* catch-up of one line appended by another tool (the whole indexed prefix is proven) and
  of one line memstore added (its append chain vouches for the prefix): SQLite the file,
  PostgreSQL one source;
* ``--searchers`` processes searching the mix and ``--indexers`` processes appending one
  line and catching up, for ``--seconds``: searches/s, p50/p95, errors.

PostgreSQL runs in a throwaway cluster (tests/pg_server.py) with durability on.

    python -m benchmarks.team --size 20k                 # CI size
    python -m benchmarks.team --size 1m --sources 10 --seconds 60 --json results/team-1m.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.baselines import MemoryScan, load_entries
from benchmarks.generate import dataset, parse_size, size_label
from benchmarks.measure import percentile
from benchmarks.queries import SEARCH_MIX

TESTS = Path(__file__).resolve().parent.parent / "tests"
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "256MB",
           "maintenance_work_mem": "256MB", "max_wal_size": "4GB", "checkpoint_timeout": "15min"}  # fmt: skip
LIMIT = 10
CATCHUP_ROUNDS = 9
WRITE_PAUSE = 0.25
"""Seconds each writer of the concurrent phase rests between writes (both backends alike)."""


def split(catalog: Path, work: Path, sources: int) -> dict[str, Path]:
    """The catalog's lines in ``sources`` consecutive pieces, one workspace each (in order)."""
    data = catalog.read_bytes()
    lines = data.splitlines(keepends=True)
    per = -(-len(lines) // sources)
    roots: dict[str, Path] = {}
    for index in range(sources):
        root = work / f"repo{index:02d}"
        target = root / ".teaagent" / "memory.jsonl"
        target.parent.mkdir(parents=True)
        target.write_bytes(b"".join(lines[index * per : (index + 1) * per]))
        roots[f"repo{index:02d}/memory.jsonl"] = root
    union = work / "union" / ".teaagent" / "memory.jsonl"
    union.parent.mkdir(parents=True)
    union.write_bytes(data)
    return roots


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def spread_ms(values: Sequence[float]) -> dict[str, float]:
    return {"p50": ms(percentile(values, 0.5)), "p95": ms(percentile(values, 0.95)), "max": ms(max(values))}


def search_mix(search: Callable[[str], list[Any]], scan: MemoryScan, repeats: int) -> dict[str, Any]:
    """Every query of the mix ``repeats`` times; each answer compared with the scan."""
    latencies: list[float] = []
    per_query: dict[str, float] = {}
    wrong: list[str] = []
    for query in SEARCH_MIX:
        expected = scan.search(query.text, limit=LIMIT)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            got = search(query.text)
            times.append(time.perf_counter() - started)
            if got != expected:
                wrong.append(query.text)
        latencies += times
        per_query[query.text] = ms(percentile(times, 0.5))
    worst = max(per_query, key=lambda text: per_query[text])
    return {**spread_ms(latencies), "searches": len(latencies), "wrong": sorted(set(wrong)),
            "worst_query": worst, "worst_query_p50": per_query[worst], "per_query_p50": per_query}


def append_line(path: Path, number: int) -> None:
    payload = {"memory_id": f"bench-append-{os.getpid()}-{number}-{time.time_ns()}",
               "content": f"appended line {number} for the catch-up probe", "tags": ["bench"],
               "created_at": "2026-12-01T00:00:00+00:00"}
    with open(path, "ab") as handle:
        handle.write(json.dumps(payload).encode() + b"\n")


# ---------------------------------------------------------------------------- concurrent phase (child processes)


def _searcher(kind: str, target: str, seconds: float, queue: Any) -> None:
    search = _opener(kind, target)
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    index = os.getpid()
    while time.monotonic() < deadline:
        query = SEARCH_MIX[index % len(SEARCH_MIX)].text
        index += 1
        started = time.perf_counter()
        try:
            search(query)
        except Exception as exc:  # every error is counted
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        latencies.append(time.perf_counter() - started)
    queue.put(("search", latencies, errors))


def _opener(kind: str, target: str) -> Callable[[str], Any]:
    if kind == "sqlite":
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(target)
        return lambda query: catalog.search(query, limit=LIMIT)
    from memstore.team_index import TeamIndex

    team = TeamIndex(target)
    return lambda query: team.search(query, limit=LIMIT)


def _indexer(kind: str, target: str, roots: dict[str, str], seconds: float, queue: Any) -> None:
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    number = 0
    if kind == "sqlite":
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(target)

        def step() -> None:
            catalog.add(f"concurrent add {number}", tags=["bench"])
    else:
        from memstore.team_index import TeamIndex

        team = TeamIndex(target)
        names = list(roots)

        def step() -> None:
            name = names[number % len(names)]
            append_line(Path(roots[name]) / ".teaagent" / "memory.jsonl", number)
            team.reindex({name: roots[name]})

    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            step()
        except Exception as exc:  # every error is counted
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
        number += 1
        time.sleep(WRITE_PAUSE)
    queue.put(("index", latencies, errors))


def concurrent(kind: str, search_target: str, index_target: str, roots: dict[str, Path], *, searchers: int,
               indexers: int, seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    names = list(roots)
    processes = [context.Process(target=_searcher, args=(kind, search_target, seconds, queue))
                 for _ in range(searchers)]
    for index in range(indexers):
        mine = {name: str(roots[name]) for name in names[index::indexers]}
        processes.append(context.Process(target=_indexer, args=(kind, index_target, mine, seconds, queue)))
    for process in processes:
        process.start()
    results = [queue.get(timeout=seconds + 600) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    searches = [t for kind_, times, _e in results if kind_ == "search" for t in times]
    writes = [t for kind_, times, _e in results if kind_ == "index" for t in times]
    errors = [e for _k, _t, found in results for e in found]
    return {
        "seconds": seconds,
        "searchers": searchers,
        "indexers": indexers,
        "searches": len(searches),
        "searches_per_s": round(len(searches) / seconds, 1),
        "search_ms": spread_ms(searches) if searches else None,
        "catch_ups": len(writes),
        "catch_up_ms": spread_ms(writes) if writes else None,
        "errors": len(errors),
        "first_errors": errors[:3],
    }


# ---------------------------------------------------------------------------- the two backends


def run_sqlite(union_root: Path, scan: MemoryScan, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(union_root)
    started = time.perf_counter()
    catalog.reindex(full=True)
    load = time.perf_counter() - started
    result: dict[str, Any] = {"load_seconds": round(load, 3), "load_rows_per_s": round(rows / load)}
    result["search"] = search_mix(lambda query: catalog.search(query, limit=LIMIT), scan, args.repeats)
    catch_ups = []
    for number in range(CATCHUP_ROUNDS):
        append_line(catalog.path, number)
        started = time.perf_counter()
        catalog.reindex()
        catch_ups.append(time.perf_counter() - started)
    result["catch_up_one_line_ms"] = spread_ms(catch_ups)
    added = []
    for number in range(CATCHUP_ROUNDS):
        catalog.add(f"added line {number} for the catch-up probe", tags=["bench"])
        started = time.perf_counter()
        catalog.reindex()
        added.append(time.perf_counter() - started)
    result["catch_up_one_add_ms"] = spread_ms(added)
    result["concurrent"] = concurrent("sqlite", str(union_root), str(union_root), {}, searchers=args.searchers,
                                      indexers=args.indexers, seconds=args.seconds)
    return result


def run_pg(roots: dict[str, Path], scan: MemoryScan, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    import pg_server

    from memstore.catalog import MemoryCatalog
    from memstore.team_index import TeamIndex

    with pg_server.running_cluster(settings=DURABLE) as cluster:
        urls = pg_server.create_database(cluster, "memstore_bench")
        writer, reader = TeamIndex(urls.writer), TeamIndex(urls.reader)
        started = time.perf_counter()
        report = writer.reindex(roots)
        load = time.perf_counter() - started
        with pg_server.connect(urls.admin) as conn:
            conn.execute("VACUUM ANALYZE")
            version = conn.execute("SHOW server_version").fetchone()[0]
        result: dict[str, Any] = {
            "server": f"PostgreSQL {version}",
            "load_seconds": round(load, 3),
            "load_rows_per_s": round(rows / load),
            "load_per_source_s": [source.seconds for source in report.sources],
        }
        result["search"] = search_mix(lambda query: reader.search(query, limit=LIMIT).entries, scan, args.repeats)
        first = next(iter(roots))
        catch_ups = []
        for number in range(CATCHUP_ROUNDS):
            append_line(roots[first] / ".teaagent" / "memory.jsonl", number)
            started = time.perf_counter()
            action = writer.reindex({first: roots[first]}).sources[0].action
            catch_ups.append(time.perf_counter() - started)
            assert action == "appended", action
        result["catch_up_one_line_ms"] = spread_ms(catch_ups)
        # A line memstore adds is known to be an append (the append chain): no proof of the prefix.
        source = MemoryCatalog(roots[first])
        added = []
        for number in range(CATCHUP_ROUNDS):
            source.add(f"added line {number} for the catch-up probe", tags=["bench"])
            started = time.perf_counter()
            action = writer.reindex({first: roots[first]}).sources[0].action
            added.append(time.perf_counter() - started)
            assert action == "appended", action
        result["catch_up_one_add_ms"] = spread_ms(added)
        writer.close()
        reader.close()
        result["concurrent"] = concurrent("pg", urls.reader, urls.writer, roots, searchers=args.searchers,
                                          indexers=args.indexers, seconds=args.seconds)
        with pg_server.connect(urls.admin) as conn:
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        result["database_mb"] = round(size / 2**20, 1)
    return result


# ---------------------------------------------------------------------------- report


def markdown(figures: dict[str, Any]) -> str:
    sq, pg = figures["sqlite"], figures["postgresql"]

    def row(label: str, key: Callable[[dict[str, Any]], Any]) -> str:
        return f"| {label} | {key(sq)} | {key(pg)} |"

    conc = figures["concurrent_note"]
    lines = [
        f"# Team index: SQLite and PostgreSQL side by side ({figures['size_label']}, {figures['sources']} sources)",
        "",
        f"`python -m benchmarks.team --size {figures['size_label']} --sources {figures['sources']}"
        f" --seconds {figures['seconds']}` on {figures['machine']} ({figures['cpus']} CPUs), {pg['server']}"
        " (throwaway cluster, fsync on). Search: the benchmark mix"
        f" ({len(SEARCH_MIX)} queries x {figures['repeats']}), limit {LIMIT}; every answer compared with a scan of"
        " the union of the files.",
        "",
        "| | SQLite (one file, the union) | PostgreSQL (team index) |",
        "|---|---:|---:|",
        row("search p50 (ms)", lambda b: b["search"]["p50"]),
        row("search p95 (ms)", lambda b: b["search"]["p95"]),
        row("search max (ms)", lambda b: b["search"]["max"]),
        row("slowest query (p50 ms)", lambda b: f"`{b['search']['worst_query']}` {b['search']['worst_query_p50']}"),
        row("answers different from the scan", lambda b: len(b["search"]["wrong"])),
        row("full load (rows/s)", lambda b: f"{b['load_rows_per_s']:,}"),
        row("full load (s)", lambda b: b["load_seconds"]),
        row("catch-up of one appended line p50 / p95 (ms)",
            lambda b: f"{b['catch_up_one_line_ms']['p50']} / {b['catch_up_one_line_ms']['p95']}"),
        row("catch-up of one line memstore added p50 / p95 (ms)",
            lambda b: f"{b['catch_up_one_add_ms']['p50']} / {b['catch_up_one_add_ms']['p95']}"),
        row(f"{conc}: searches/s", lambda b: b["concurrent"]["searches_per_s"]),
        row(f"{conc}: search p50 / p95 (ms)",
            lambda b: f"{b['concurrent']['search_ms']['p50']} / {b['concurrent']['search_ms']['p95']}"),
        row(f"{conc}: writes (adds / catch-ups), p95 ms",
            lambda b: f"{b['concurrent']['catch_ups']}, {b['concurrent']['catch_up_ms']['p95']}"),
        row(f"{conc}: errors", lambda b: b["concurrent"]["errors"]),
        "",
        "Per-query p50 (ms):",
        "",
        "| query | SQLite | PostgreSQL |",
        "|---|---:|---:|",
    ]
    for text in sq["search"]["per_query_p50"]:
        lines.append(f"| `{text}` | {sq['search']['per_query_p50'][text]} | {pg['search']['per_query_p50'][text]} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="20k", help="entries in all (20k, 100k, 1m, …)")
    parser.add_argument("--sources", type=int, default=10, help="sources the catalog is cut into")
    parser.add_argument("--repeats", type=int, default=5, help="times each query of the mix is run")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the concurrent phase")
    parser.add_argument("--searchers", type=int, default=8)
    parser.add_argument("--indexers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    catalog = dataset("catalog", size).file
    work = Path(tempfile.mkdtemp(prefix="memstore-team-bench-"))
    try:
        roots = split(catalog, work, args.sources)
        entries = load_entries(catalog)
        scan = MemoryScan(entries)
        print(f"{len(entries)} entries in {args.sources} sources; SQLite …", file=sys.stderr, flush=True)
        sqlite = run_sqlite(work / "union", scan, len(entries), args)
        print("PostgreSQL …", file=sys.stderr, flush=True)
        pg = run_pg(roots, scan, len(entries), args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        "size": size,
        "size_label": size_label(size),
        "entries": len(entries),
        "sources": args.sources,
        "repeats": args.repeats,
        "seconds": args.seconds,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "concurrent_note": f"{args.searchers} searchers + {args.indexers} indexers, {args.seconds:g} s",
        "sqlite": sqlite,
        "postgresql": pg,
    }
    text = markdown(figures)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    wrong = sqlite["search"]["wrong"] + pg["search"]["wrong"]
    return 1 if wrong or sqlite["concurrent"]["errors"] or pg["concurrent"]["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
