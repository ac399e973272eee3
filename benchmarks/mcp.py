"""``memstore mcp`` figures: start-up to tools/list, and a memory_search call at size.

    .venv/bin/python -m benchmarks.mcp --size 100k        (~1 min; see benchmarks/README.md)

1. Start-up: from process start to the answer of ``tools/list`` (initialize, initialized and
   tools/list written at once, the clock stops at the tools/list reply), for ``memstore mcp``
   and for a minimal one-tool server on the same SDK (``benchmarks/mcp_minimal.py``), the two
   run alternately in one run.  Target: memstore within 100 ms of the minimal server.
2. Per call: ``memory_search`` through the SDK's client over stdio against the same library
   call (``MemoryCatalog.search``) in this process, same catalog, same queries, index warm.
   Target: within 2x.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.generate import DATA_DIR, dataset, parse_size, size_label

SEARCHES = ("memory", "caltrivo", "memory python", "retry timeout", "error handler config", "the", "zyxwq")
HELLO = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def _lines(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


def time_to_tools_list(argv: Sequence[str], *, cwd: Path) -> float:
    """Seconds from spawning ``argv`` to reading its tools/list reply."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(
        _lines(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
    )
    process.stdin.flush()
    elapsed = None
    for line in process.stdout:
        if json.loads(line).get("id") == 2:
            elapsed = time.perf_counter() - started
            break
    process.stdin.close()
    process.wait(timeout=60)
    if elapsed is None:
        raise RuntimeError(f"no tools/list reply from {' '.join(argv)}")
    return elapsed


def startup(root: Path, runs: int) -> dict[str, float]:
    memstore = [sys.executable, "-m", "memstore", "mcp", "--root", str(root)]
    minimal = [sys.executable, "-m", "benchmarks.mcp_minimal"]
    here = Path(__file__).resolve().parent.parent
    times: dict[str, list[float]] = {"memstore": [], "minimal": []}
    time_to_tools_list(memstore, cwd=here)  # warm the OS file cache for both
    time_to_tools_list(minimal, cwd=here)
    for _ in range(runs):
        times["memstore"].append(time_to_tools_list(memstore, cwd=here))
        times["minimal"].append(time_to_tools_list(minimal, cwd=here))
    memstore_ms = statistics.median(times["memstore"]) * 1000
    minimal_ms = statistics.median(times["minimal"]) * 1000
    return {
        "startup_memstore_p50_ms": round(memstore_ms, 1),
        "startup_minimal_p50_ms": round(minimal_ms, 1),
        "startup_added_ms": round(memstore_ms - minimal_ms, 1),
        "startup_memstore_min_ms": round(min(times["memstore"]) * 1000, 1),
        "startup_minimal_min_ms": round(min(times["minimal"]) * 1000, 1),
    }


def search_calls(root: Path, repeats: int) -> dict[str, Any]:
    import anyio
    from mcp import Client, StdioServerParameters

    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(root)
    catalog.reindex()
    library: dict[str, float] = {}
    for query in SEARCHES:
        catalog.search(query, limit=10)
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            catalog.search(query, limit=10)
            samples.append(time.perf_counter() - started)
        library[query] = statistics.median(samples)

    async def over_mcp() -> dict[str, float]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "memstore", "mcp", "--root", str(root)])
        medians: dict[str, float] = {}
        async with Client(params, mode="legacy") as client:
            for query in SEARCHES:
                first = await client.call_tool("memory_search", {"query": query, "limit": 10})
                want = [entry.memory_id for entry in catalog.search(query, limit=10)]
                got = [entry["memory_id"] for entry in (first.structured_content or {})["entries"]]
                if got != want:
                    raise RuntimeError(f"memory_search {query!r} differs from the library")
                samples = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    await client.call_tool("memory_search", {"query": query, "limit": 10})
                    samples.append(time.perf_counter() - started)
                medians[query] = statistics.median(samples)
        return medians

    mcp = anyio.run(over_mcp)
    rows = {
        query: {
            "library_ms": round(library[query] * 1000, 3),
            "mcp_ms": round(mcp[query] * 1000, 3),
            "ratio": round(mcp[query] / library[query], 2),
        }
        for query in SEARCHES
    }
    total_library = sum(library.values())
    total_mcp = sum(mcp.values())
    return {
        "search_queries": rows,
        "search_library_sum_ms": round(total_library * 1000, 3),
        "search_mcp_sum_ms": round(total_mcp * 1000, 3),
        "search_ratio_over_mix": round(total_mcp / total_library, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k", help="catalog entries (10k, 100k, 1m, ...)")
    parser.add_argument("--runs", type=int, default=15, help="start-ups of each server (alternating)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per query")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="where generated catalogs are cached")
    options = parser.parse_args(argv)
    size = parse_size(options.size)
    data = dataset("catalog", size, data_dir=options.data_dir)
    with tempfile.TemporaryDirectory(prefix="memstore-mcp-bench-") as work:
        root = Path(work)
        (root / ".teaagent").mkdir()
        shutil.copyfile(data.file, root / ".teaagent" / "memory.jsonl")
        figures: dict[str, Any] = {"size": size_label(size), **startup(root, options.runs)}
        figures.update(search_calls(root, options.repeats))
    print(f"memstore mcp at {figures['size']} entries")
    print(
        f"start-up to tools/list (p50 of {options.runs}): memstore {figures['startup_memstore_p50_ms']} ms, "
        f"minimal SDK server {figures['startup_minimal_p50_ms']} ms, added {figures['startup_added_ms']} ms"
        f" (target <= 100); best: {figures['startup_memstore_min_ms']} vs {figures['startup_minimal_min_ms']} ms"
    )
    print("memory_search, p50 per call (limit 10):")
    print(f"  {'query':<22} {'library ms':>11} {'mcp ms':>9} {'ratio':>6}")
    for query, row in figures["search_queries"].items():
        print(f"  {query:<22} {row['library_ms']:>11} {row['mcp_ms']:>9} {row['ratio']:>6}")
    print(
        f"  {'whole mix':<22} {figures['search_library_sum_ms']:>11} {figures['search_mcp_sum_ms']:>9} "
        f"{figures['search_ratio_over_mix']:>6}  (target <= 2)"
    )
    if options.json is not None:
        options.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
