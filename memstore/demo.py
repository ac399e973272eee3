"""A two-minute tour: generate a catalog, index it, search it, and compare with a scan.

    python -m memstore.demo                 # 20k entries in a temporary directory
    python -m memstore.demo --size 100000 --root /tmp/demo   # keep the files to try the CLI on

The catalog is deterministic (same size and seed, same bytes) and of the shape the
benchmarks measure (:mod:`memstore.sample.catalog`).  Every search is answered
twice: by the derived index, and by a scan of the file the way a fresh process
without the index would do it (parse every line, score every entry); the two must agree.
When the index cannot be built the demo says so and shows the scan timings alone.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstore.catalog import MemoryCatalog
from memstore.errors import IndexUnavailableError
from memstore.index.report import SourceStatus
from memstore.layout import CATALOG_FILE, store_dir
from memstore.models import MemoryEntry
from memstore.sample.catalog import DEFAULT_SEED, write_catalog

DEFAULT_SIZE = 20_000
QUERIES = ("memory", "error handler", "python testing", "the cache", "db", "zyxwq")
"""A common word, two- and three-word queries, a 2-character token and a word that matches nothing."""
INDEX_RUNS = 5
SCAN_RUNS = 2
SHOW_TOP = 3


@contextmanager
def _workspace(root: str | None) -> Iterator[Path]:
    if root is not None:
        yield Path(root)
        return
    with tempfile.TemporaryDirectory(prefix="memstore-demo-") as temporary:
        yield Path(temporary)


def _timed(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time in milliseconds over ``repeats`` runs, and the last result."""
    times = []
    result: Any = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def _scan_search(root: Path, query: str) -> list[MemoryEntry]:
    return MemoryCatalog(root, use_index=False).search(query)


def _cut(text: str, width: int = 72) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _print_results(entries: Sequence[MemoryEntry]) -> None:
    if not entries:
        print("    (no matches)")
    for entry in entries[:SHOW_TOP]:
        tags = f" [{', '.join(entry.tags)}]" if entry.tags else ""
        print(f"    {entry.memory_id[:8]}  {entry.created_at[:19]}  {_cut(entry.content, 60)}{tags}")


def run_demo(root: Path, *, size: int, seed: int) -> bool:
    """The whole tour; returns False if the index and the scan ever disagreed."""
    catalog_path = store_dir(root) / CATALOG_FILE
    started = time.perf_counter()
    write_catalog(catalog_path, size, seed=seed, workers=1)
    megabytes = catalog_path.stat().st_size / 1e6
    print(f"Generated {size:,} entries ({megabytes:.1f} MB) in {time.perf_counter() - started:.2f} s")
    print(f"  catalog: {catalog_path}")

    catalog = MemoryCatalog(root)
    indexed = True
    try:
        started = time.perf_counter()
        report = catalog.reindex(full=True)
        seconds = time.perf_counter() - started
        print(f"Built the index in {seconds:.2f} s ({report.rows / max(seconds, 1e-9):,.0f} rows/s)")
        state = catalog.health().index
        if isinstance(state, SourceStatus):
            print(
                f"  index: {state.index_path} ({state.index_bytes / 1e6:.1f} MB, "
                f"{state.index_bytes / catalog_path.stat().st_size:.2f}x the JSONL)"
            )
    except IndexUnavailableError as exc:
        indexed = False
        print(f"The index is unavailable ({exc}); showing scan timings only.")

    agree = True
    print(
        f"\nSearches (limit 10): index median of {INDEX_RUNS} runs; scan median of {SCAN_RUNS} runs, "
        "each by a fresh catalog as a new process would (parse every line, score every entry)"
    )
    for query in QUERIES:
        scan_ms, scanned = _timed(functools.partial(_scan_search, root, query), SCAN_RUNS)
        if indexed:
            index_ms, found = _timed(functools.partial(catalog.search, query), INDEX_RUNS)
            same = found == scanned
            agree = agree and same
            ratio = scan_ms / max(index_ms, 1e-6)
            print(
                f"\n  {query!r}: index {index_ms:.2f} ms, scan {scan_ms:.1f} ms ({ratio:,.0f}x faster), "
                f"{len(found)} results, {'same as the scan' if same else 'DIFFERENT FROM THE SCAN'}"
            )
            _print_results(found)
        else:
            print(f"\n  {query!r}: scan {scan_ms:.1f} ms, {len(scanned)} results")
            _print_results(scanned)
    return agree


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memstore.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="keep the generated workspace here (default: a temporary directory)")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="entries to generate (default 20000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator seed")
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("--size must be at least 1")
    if args.root is not None and (store_dir(args.root) / CATALOG_FILE).exists():
        parser.error(f"{args.root} already holds a catalog; give an empty directory (the demo writes one)")
    started = time.perf_counter()
    with _workspace(args.root) as root:
        agree = run_demo(root, size=args.size, seed=args.seed)
        if args.root is not None:
            print(f"\nTry it: memstore search 'error handler' --root {root}")
            print(f"        memstore status --root {root}")
    print(f"\nDone in {time.perf_counter() - started:.1f} s.")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
