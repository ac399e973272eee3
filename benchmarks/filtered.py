"""Filtered search against unfiltered search on the same generated catalog.

    python -m benchmarks.filtered --size 100k

Builds the index of a copy of the cached dataset, then times every query of the
standard mix without a filter and with each filter below (median of warm runs),
checks a sample of filtered answers against a filtered scan, and prints one JSON
document: per filter, the median over queries of filtered/unfiltered time, the
worst query ratio, and the absolute medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.generate import dataset, parse_size
from benchmarks.queries import SEARCH_MIX

FILTERS: dict[str, dict[str, Any]] = {
    "branch main (~6.5%)": {"branch_name": "main"},
    "branch fix/windows (~0.8%)": {"branch_name": "fix/windows"},
    "tag python (common tag)": {"tags": ["python"]},
    "tags python+testing": {"tags": ["python", "testing"]},
    "tag run-summary + branch main": {"tags": ["run-summary"], "branch_name": "main"},
}
LIMIT = 10


def _median_ms(call: Any, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--verify", type=int, default=6, help="Queries per filter checked against a scan.")
    options = parser.parse_args(argv)
    from memstore.catalog import MemoryCatalog

    data = dataset("catalog", parse_size(options.size))
    with tempfile.TemporaryDirectory(prefix="memstore-filtered-") as work:
        root = Path(work)
        (root / ".teaagent").mkdir()
        shutil.copyfile(data.file, root / ".teaagent" / "memory.jsonl")
        catalog = MemoryCatalog(root)
        started = time.perf_counter()
        catalog.reindex()
        build_s = time.perf_counter() - started
        scan = MemoryCatalog(root, use_index=False)
        base = {q.text: _median_ms(lambda q=q: catalog.search(q.text, limit=LIMIT), options.repeats)
                for q in SEARCH_MIX}
        report: dict[str, Any] = {"size": data.size, "build_seconds": round(build_s, 1), "filters": {}}
        report["unfiltered_median_ms"] = round(statistics.median(base.values()), 3)
        report["unfiltered_max_ms"] = round(max(base.values()), 3)
        for name, flt in FILTERS.items():
            times = {q.text: _median_ms(lambda q=q, f=flt: catalog.search(q.text, limit=LIMIT, **f), options.repeats)
                     for q in SEARCH_MIX}
            ratios = {text: times[text] / max(base[text], 0.05) for text in times}
            for q in SEARCH_MIX[: options.verify]:
                if catalog.search(q.text, limit=LIMIT, **flt) != scan.search(q.text, limit=LIMIT, **flt):
                    raise SystemExit(f"filtered search differs from the scan: {q.text!r} {flt}")
            worst = max(ratios, key=lambda text: ratios[text])
            report["filters"][name] = {
                "median_ms": round(statistics.median(times.values()), 3),
                "max_ms": round(max(times.values()), 3),
                "median_ratio": round(statistics.median(ratios.values()), 2),
                "worst_ratio": round(ratios[worst], 2),
                "worst_query": worst,
            }
            print(f"{name}: {report['filters'][name]}", file=sys.stderr)
        catalog_list = _median_ms(lambda: catalog.list(limit=20, branch_name="fix/windows"), options.repeats)
        report["list_rare_branch_ms"] = round(catalog_list, 3)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
