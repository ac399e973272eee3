"""Write throughput: memstore's ``add`` against a bare append+fsync loop on the same disk, in one run.

    python -m benchmarks.writers --dir benchmarks/data/work/writers --adds 2000 --rounds 3
    python -m benchmarks.writers --rewrite-size 1m     # also: a writer's wait during a rewrite

Writers are spawned processes (1, then 4) released together; each times every call.
The bare loop appends a 420-byte line and fsyncs it through its own descriptor, every
process to one shared file: what a durable append costs on this disk right now.
Rounds alternate bare and memstore so the shared machine's load falls on both alike;
each figure is the median over the rounds.  The rewrite probe runs one writer process
adding in a loop while ``quarantine_by_branch`` rewrites a large catalog, and compares
that writer's slowest add with the rewrite's duration.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.measure import percentile

T = TypeVar("T")
SPAWN = multiprocessing.get_context("spawn")
BARE_LINE = b"x" * 419 + b"\n"
PROCESS_COUNTS = (1, 4)
WAIT_BRANCH = "feature/index"
"""About 0.8% of a generated catalog: the rewrite the writer waits behind."""
TIMEOUT = 600.0


def _bare_writer(path: str, count: int, barrier: Any, results: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    latencies = []
    barrier.wait()
    started = time.perf_counter()
    for _ in range(count):
        began = time.perf_counter()
        os.write(fd, BARE_LINE)
        os.fsync(fd)
        latencies.append(time.perf_counter() - began)
    results.put((started, time.perf_counter(), latencies))
    os.close(fd)


def _floor_writer(path: str, count: int, seed: int, worker: int, barrier: Any, results: Any) -> None:
    """The least a correct add does in Python: make the entry and its line, append it, fsync it.

    No lock, no group commit, no torn-tail or chain bookkeeping: what is left of memstore's
    cost on top of this is the price of those guarantees.
    """
    from memstore.jsonl import encode_entry
    from memstore.models import MemoryEntry, new_memory_id, utc_now_iso

    entries = _entries(seed, f"floor-{worker}", count)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    latencies = []
    barrier.wait()
    started = time.perf_counter()
    for entry in entries:
        began = time.perf_counter()
        made = MemoryEntry(
            memory_id=new_memory_id(),
            content=entry["content"],
            tags=entry["tags"],
            created_at=utc_now_iso(),
            branch_name=entry["branch_name"],
            run_id=entry["run_id"],
        )
        os.write(fd, encode_entry(made))
        os.fsync(fd)
        latencies.append(time.perf_counter() - began)
    results.put((started, time.perf_counter(), latencies))
    os.close(fd)


def _entries(seed: int, stream: str, count: int) -> list[dict[str, Any]]:
    from memstore.sample.catalog import CatalogWriter, catalog_end_us

    return CatalogWriter(seed, stream=stream, start_us=catalog_end_us(1_000_000)).entries(count)


def _add(catalog: Any, entry: dict[str, Any]) -> None:
    catalog.add(entry["content"], tags=entry["tags"], branch_name=entry["branch_name"], run_id=entry["run_id"])


def _memstore_writer(root: str, count: int, seed: int, worker: int, barrier: Any, results: Any) -> None:
    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(root)
    entries = _entries(seed, f"writers-{worker}", count + 1)
    _add(catalog, entries.pop())  # imports, the store and the lock files exist before timing
    latencies = []
    barrier.wait()
    started = time.perf_counter()
    for entry in entries:
        began = time.perf_counter()
        _add(catalog, entry)
        latencies.append(time.perf_counter() - began)
    results.put((started, time.perf_counter(), latencies))


def _run_processes(target: Callable[..., None], worker_args: list[tuple[Any, ...]]) -> dict[str, float]:
    """Start one worker per argument tuple, together; their combined rate and latency percentiles."""
    processes = len(worker_args)
    barrier, results = SPAWN.Barrier(processes), SPAWN.Queue()
    workers = [SPAWN.Process(target=target, args=(*args, barrier, results)) for args in worker_args]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=TIMEOUT) for _ in workers]
    for worker in workers:
        worker.join(timeout=TIMEOUT)
        if worker.exitcode != 0:
            raise RuntimeError(f"a writer process exited with {worker.exitcode}")
    latencies = [value for _start, _end, values in reports for value in values]
    elapsed = max(end for _s, end, _v in reports) - min(start for start, _e, _v in reports)
    return {
        "per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000.0,
        "p95_ms": percentile(latencies, 0.95) * 1000.0,
        "max_ms": max(latencies) * 1000.0,
    }


def compare(directory: Path, *, adds: int = 2_000, rounds: int = 3, seed: int = 20261130) -> dict[str, float]:
    """Bare append+fsync and memstore adds, 1 and 4 processes, medians over ``rounds``; with ratios.

    One writer makes ``adds`` calls; each of 4 makes ``adds // 2``.  ``directory`` is
    emptied first; it must be on the disk being measured.
    """
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    samples: dict[str, list[dict[str, float]]] = {}
    for round_number in range(rounds):
        for processes in PROCESS_COUNTS:
            count = adds if processes == 1 else max(1, adds // 2)
            bare = directory / "bare.jsonl"
            os.sync()  # earlier writes must not be flushed by (and charged to) the first fsync
            samples.setdefault(f"bare_{processes}", []).append(
                _run_processes(_bare_writer, [(str(bare), count)] * processes)
            )
            bare.unlink()
            floor = directory / "floor.jsonl"
            os.sync()
            floor_args = [(str(floor), count, seed + round_number, n) for n in range(processes)]
            samples.setdefault(f"floor_{processes}", []).append(_run_processes(_floor_writer, floor_args))
            floor.unlink()
            root = directory / f"store-{round_number}-{processes}"
            os.sync()
            writer_args = [(str(root), count, seed + round_number, n) for n in range(processes)]
            samples.setdefault(f"writers_{processes}", []).append(_run_processes(_memstore_writer, writer_args))
            shutil.rmtree(root)
    metrics: dict[str, float] = {}
    for name, runs in samples.items():
        for key in runs[0]:
            metrics[f"{name}_{key}"] = statistics.median(run[key] for run in runs)
    for processes in PROCESS_COUNTS:
        metrics[f"bare_over_writers_{processes}"] = (
            metrics[f"bare_{processes}_per_s"] / metrics[f"writers_{processes}_per_s"]
        )
        metrics[f"floor_over_writers_{processes}"] = (
            metrics[f"floor_{processes}_per_s"] / metrics[f"writers_{processes}_per_s"]
        )
        metrics[f"bare_over_floor_{processes}"] = (
            metrics[f"bare_{processes}_per_s"] / metrics[f"floor_{processes}_per_s"]
        )
    metrics["writers_4_over_writers_1"] = metrics["writers_4_per_s"] / metrics["writers_1_per_s"]
    metrics["writer_rounds"] = rounds
    return metrics


def _looping_writer(root: str, seed: int, ready: Any, stop: Any, results: Any) -> None:
    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(root)
    entries = _entries(seed, "looping-writer", 2_000)
    _add(catalog, entries[0])
    ready.set()
    samples = []
    n = 0
    while not stop.is_set():
        began = time.perf_counter()
        _add(catalog, entries[n % len(entries)])
        samples.append((began, time.perf_counter() - began))
        n += 1
    results.put(samples)


def writer_wait(
    root: Path, rewrite: Callable[[], T], *, seed: int = 20261130, settle: float = 0.3
) -> tuple[dict[str, float], T]:
    """Run ``rewrite`` while a writer process adds to ``root`` in a loop; how long did the writer wait?

    Returns the rewrite's duration, the writer's slowest add among those that overlap
    it, their count, and the writer's median add outside the rewrite.
    """
    ready, stop, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    writer = SPAWN.Process(target=_looping_writer, args=(str(root), seed, ready, stop, results))
    writer.start()
    try:
        if not ready.wait(TIMEOUT):
            raise RuntimeError("the looping writer did not start")
        time.sleep(settle)
        started = time.perf_counter()
        result = rewrite()
        finished = time.perf_counter()
        time.sleep(settle)
    finally:
        stop.set()
    samples: list[tuple[float, float]] = results.get(timeout=TIMEOUT)
    writer.join(timeout=TIMEOUT)
    during = [latency for began, latency in samples if began < finished and began + latency > started]
    outside = [latency for began, latency in samples if began + latency <= started or began >= finished]
    seconds = finished - started
    longest = max(during, default=0.0)
    metrics = {
        "rewrite_under_writer_seconds": seconds,
        "writer_max_add_during_rewrite_ms": longest * 1000.0,
        "writer_adds_during_rewrite": float(len(during)),
        "writer_wait_over_rewrite": longest / seconds if seconds > 0 else 0.0,
        "writer_p50_add_outside_rewrite_ms": (statistics.median(outside) if outside else 0.0) * 1000.0,
    }
    return metrics, result


def _rewrite_probe(directory: Path, size: int, seed: int) -> dict[str, float]:
    from benchmarks.generate import catalog_file, dataset
    from memstore.catalog import MemoryCatalog

    data = dataset("catalog", size, seed=seed)
    root = directory / "rewrite"
    if root.exists():
        shutil.rmtree(root)
    catalog_file(root).parent.mkdir(parents=True)
    shutil.copyfile(data.file, catalog_file(root))
    catalog = MemoryCatalog(root)
    catalog.search("warm")  # the index is built before the probe, as in a working store
    metrics, moved = writer_wait(root, lambda: catalog.quarantine_by_branch(WAIT_BRANCH, "probe"), seed=seed)
    metrics["rewrite_under_writer_rows"] = float(moved)
    shutil.rmtree(root)
    return metrics


def main(argv: list[str] | None = None) -> int:
    from benchmarks.generate import DATA_DIR, parse_size

    parser = argparse.ArgumentParser(prog="python -m benchmarks.writers", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=DATA_DIR / "work" / f"writers-{os.getpid()}")
    parser.add_argument("--adds", type=int, default=2_000, help="calls by one writer (each of 4 makes half)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--rewrite-size", default=None, help="also probe a writer during a rewrite of this catalog")
    args = parser.parse_args(argv)
    try:
        metrics = compare(args.dir, adds=max(1, args.adds), rounds=max(1, args.rounds), seed=args.seed)
        if args.rewrite_size:
            metrics.update(_rewrite_probe(args.dir, parse_size(args.rewrite_size), args.seed))
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    metrics["load_average_1m"] = os.getloadavg()[0]
    print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
