"""Side-by-side table of the latest results at several sizes (for the README's Performance section).

    python -m benchmarks.summary                 # 100k and 1m -> benchmarks/results/summary.md
    python -m benchmarks.summary 20k 100k 1m
    python -m benchmarks.summary 100k realtext-100k   # the two corpora side by side
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS_DIR, SUMMARY_ROWS, fmt_value


def load(results_dir: Path, label: str) -> dict[str, Any] | None:
    path = results_dir / f"{label}.json"
    if not path.exists():
        return None
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def _name(report: dict[str, Any]) -> str:
    """``100k`` for the generated corpus, ``realtext-100k`` for the real-text one."""
    return str(report.get("result_name", report["size_label"]))


def side_by_side(reports: list[dict[str, Any]]) -> str:
    header = " | ".join(f"{_name(r)} entries" for r in reports)
    lines = [
        f"| metric | {header} | target (1M) |",
        "|---|" + "---:|" * len(reports) + "---|",
    ]
    for key, label, fmt, target in SUMMARY_ROWS:
        if not any(key in r["metrics"] for r in reports):
            continue
        cells = " | ".join(fmt_value(r["metrics"].get(key), fmt) for r in reports)
        lines.append(f"| {label} | {cells} | {target} |")
    lines.append("")
    for r in reports:
        sha = (r.get("git_sha") or "unknown")[:10]
        state = ""
        if r.get("snapshot"):
            state = " (clean export)"
        elif r.get("git_dirty"):
            state = " (uncommitted changes)"
        exact = "all results exact" if r.get("exact") and not r.get("errors") else "NOT EXACT / ERRORS"
        lines.append(
            f"- {_name(r)}: commit `{sha}`{state}, {r['timestamp']}, "
            f"{r['jsonl_bytes'] / 1e6:.0f} MB JSONL, `{r['command']}`, {exact}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.summary", description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", default=["100k", "1m"])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    reports = [report for label in args.sizes if (report := load(args.results_dir, label)) is not None]
    if not reports:
        print("no results found", file=sys.stderr)
        return 1
    text = side_by_side(reports)
    (args.results_dir / "summary.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
