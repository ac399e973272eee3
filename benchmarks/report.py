"""Turning a run into files: JSON, a Markdown table, and one line of history per run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.measure import REPO_ROOT

RESULTS_DIR = Path(__file__).resolve().parent / "results"
HISTORY_FILE = "history.jsonl"

# (metric key, label, format, target at 1M entries from issue 4 or "")
SUMMARY_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("search_indexed_p50_ms", "search p50 over the mix, indexed (ms)", "{:.3f}", "≤ 5"),
    ("search_indexed_p95_ms", "search p95 over the mix, indexed (ms)", "{:.2f}", "≤ 60"),
    ("search_indexed_max_ms", "search max over the mix, indexed (ms)", "{:.2f}", ""),
    ("search_scan_memory_p50_ms", "in-memory scan p50 (ms)", "{:.1f}", ""),
    ("search_scan_naive_p50_ms", "naive scan p50: re-read + stdlib json (ms)", "{:.1f}", ""),
    ("grep_p50_ms", "grep -F -c floor p50 (ms)", "{:.1f}", ""),
    ("speedup_vs_scan_memory", "in-memory scan p50 ÷ indexed p50", "{:.1f}x", "≥ 10x (CI gate)"),
    ("speedup_vs_naive", "naive scan p50 ÷ indexed p50", "{:.1f}x", ""),
    ("speedup_vs_grep", "grep p50 ÷ indexed p50", "{:.1f}x", ""),
    ("speedup_vs_scan_memory_per_query_min", "worst per-query in-memory scan ÷ indexed", "{:.2f}x", ""),
    ("first_query_fresh_process_max_ms", "first query in a fresh process, worst probe (ms)", "{:.1f}", ""),
    ("build_seconds", "full build: first query with no index (s)", "{:.2f}", "≤ 40"),
    ("rebuild_seconds", "`reindex(full=True)` over an existing index (s)", "{:.2f}", ""),
    ("build_rows_per_s", "full build (rows/s)", "{:,.0f}", ""),
    ("build_peak_rss_mb", "full build peak RSS of the building process (MB)", "{:.0f}", "≤ 300"),
    ("index_over_jsonl", "index size ÷ JSONL size", "{:.2f}", "≤ 3"),
    ("rebuilt_index_over_jsonl", "index size ÷ JSONL size after `reindex(full=True)`", "{:.2f}", ""),
    ("catchup_1_ms", "catch-up + query after 1 appended line (ms)", "{:.2f}", "≤ 2"),
    ("catchup_add_1_ms", "catch-up + query after 1 add by another handle (ms)", "{:.2f}", ""),
    ("catchup_100_ms", "catch-up + query after 100 lines (ms)", "{:.1f}", ""),
    ("catchup_10000_ms", "catch-up + query after 10k lines (ms)", "{:.0f}", ""),
    ("catchup_1_share_of_build", "1-line catch-up ÷ full build", "{:.3%}", "< 5% (CI gate)"),
    ("nochange_query_median_ms", "no-change query, median (ms)", "{:.3f}", "< 1 (CI gate)"),
    ("nochange_query_min_ms", "no-change query, min (ms)", "{:.3f}", ""),
    ("nochange_overhead_ms", "freshness-check overhead per query (ms)", "{:.4f}", "≤ 0.1"),
    ("add_per_s", "add with fsync, sustained over 2,000 adds (entries/s)", "{:,.0f}", "≥ 5,000"),
    ("raw_fsync_per_s", "bare append + fsync on the same disk, same minute (per s)", "{:,.0f}", ""),
    ("add_over_raw_fsync", "add rate ÷ bare append+fsync rate", "{:.2f}", ""),
    ("add_median_ms", "add with fsync, median latency (ms)", "{:.3f}", "≤ 0.2"),
    ("add_p95_ms", "add with fsync, p95 latency (ms)", "{:.2f}", ""),
    ("query_after_adds_ms", "first query after those adds: catch-up of 2,000 lines (ms)", "{:.0f}", ""),
    ("writers_1_per_s", "1 writer process, adds/s", "{:,.0f}", ""),
    ("bare_1_per_s", "1 process, bare append+fsync/s (same disk, same minutes)", "{:,.0f}", ""),
    ("bare_over_writers_1", "bare ÷ 1 writer", "{:.2f}x", "≤ 1.2x (issue 14)"),
    ("floor_1_per_s", "1 process, entry made in Python + bare append+fsync/s (the floor)", "{:,.0f}", ""),
    ("bare_over_floor_1", "bare ÷ that floor: the cost of making an entry in Python", "{:.2f}x", ""),
    ("floor_over_writers_1", "floor ÷ 1 writer: the cost of memstore's write guarantees", "{:.2f}x", ""),
    ("writers_1_p50_ms", "1 writer, add p50 (ms)", "{:.3f}", ""),
    ("writers_1_p95_ms", "1 writer, add p95 (ms)", "{:.2f}", ""),
    ("writers_4_per_s", "4 writer processes, acknowledged adds/s", "{:,.0f}", "≥ 5,000 (issue 14)"),
    ("bare_4_per_s", "4 processes, bare append+fsync/s", "{:,.0f}", ""),
    ("bare_over_writers_4", "bare ÷ 4 writers", "{:.2f}x", ""),
    ("floor_4_per_s", "4 processes, entry made in Python + bare append+fsync/s", "{:,.0f}", ""),
    ("floor_over_writers_4", "that floor ÷ 4 writers", "{:.2f}x", ""),
    ("writers_4_p50_ms", "4 writers, add p50 (ms)", "{:.3f}", ""),
    ("writers_4_p95_ms", "4 writers, add p95 (ms)", "{:.2f}", ""),
    ("delete_branch_seconds", "delete_by_branch of ~1% (s)", "{:.2f}", "≤ 3 (issue 14)"),
    ("rewrite_under_writer_seconds", "quarantine_by_branch of ~0.8%, a writer adding meanwhile (s)", "{:.2f}", ""),
    ("writer_max_add_during_rewrite_ms", "that writer's slowest add during the rewrite (ms)", "{:.0f}", ""),
    ("writer_wait_over_rewrite", "slowest add ÷ rewrite duration", "{:.2f}", "≤ 1 (issue 14)"),
    ("query_after_delete_ms", "first query after that rewrite (ms)", "{:.1f}", ""),
    ("find_matching_10k_p50_ms", "find_matching p50, 10k cards (ms)", "{:.1f}", ""),
    ("find_matching_10k_scan_p50_ms", "in-memory card scan p50, 10k cards (ms)", "{:.1f}", ""),
    ("find_matching_100k_p50_ms", "find_matching p50, 100k cards (ms)", "{:.1f}", ""),
    ("find_matching_100k_scan_p50_ms", "in-memory card scan p50, 100k cards (ms)", "{:.1f}", ""),
    ("import_memstore_ms", "`import memstore` above bare python (ms)", "{:.1f}", "≤ 30"),
    ("import_memstore_importtime_ms", "`import memstore`, -X importtime cumulative (ms)", "{:.1f}", ""),
    ("import_catalog_ms", "`import memstore.catalog` above bare python (ms)", "{:.1f}", ""),
    ("import_catalog_importtime_ms", "`import memstore.catalog`, -X importtime (ms)", "{:.1f}", ""),
    ("cli_search_ms", "`memstore search` as a process, median (ms)", "{:.0f}", "≤ 150"),
    ("cli_search_min_ms", "`memstore search` as a process, best (ms)", "{:.0f}", ""),
)


def git_revision() -> tuple[str | None, bool | None]:
    """The commit the run measured, and whether tracked files differed from it."""
    exported = os.environ.get("MEMSTORE_BENCH_GIT_SHA")
    if exported:  # running inside a clean export of that commit (--snapshot)
        return exported, False
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return sha, dirty


def fmt_value(value: object, fmt: str) -> str:
    """A metric for a table cell: formatted when numeric, '–' when missing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else str(value)
    return fmt.format(value)


def markdown(report: Mapping[str, Any]) -> str:
    """The run as Markdown: a summary table, the per-query table, then notes."""
    metrics: Mapping[str, Any] = report["metrics"]
    dirty = " (uncommitted changes)" if report.get("git_dirty") else ""
    if report.get("snapshot"):
        dirty = " (clean export)"
    corpus = report.get("corpus", "generated")
    lines = [
        f"### memstore benchmark: {report['size_label']} entries ({report['entries']:,} lines, "
        f"{report['jsonl_bytes'] / 1e6:.1f} MB JSONL){'' if corpus == 'generated' else f', {corpus} corpus'}",
        "",
        f"Commit `{(report.get('git_sha') or 'unknown')[:10]}`{dirty}, "
        f"{report['timestamp']}, {report['machine']['cpus']} CPUs, Python {report['machine']['python']}, "
        f"SQLite {report['machine']['sqlite']}. Command: `{report['command']}`.",
        *_dataset_lines(report.get("dataset") or {}),
        "",
        "| metric | value | target (1M, issue 4) |",
        "|---|---:|---|",
    ]
    for key, label, fmt, target in SUMMARY_ROWS:
        if key in metrics:
            lines.append(f"| {label} | {fmt_value(metrics[key], fmt)} | {target} |")
    queries: Sequence[Mapping[str, Any]] = report.get("queries", [])
    if queries:
        banded = any(q.get("band") for q in queries)
        band_head, band_rule = ("band | share | ", "---|---:|") if banded else ("", "")
        lines += [
            "",
            "Per query (ms; indexed = median of warm repeats, scans = median; hits = matching entries"
            + ("; band and share = of the entries the query matches" if banded else "")
            + "):",
            "",
            f"| category | query | {band_head}hits | indexed | in-memory scan | naive scan | grep "
            "| scan ÷ indexed | exact |",
            f"|---|---|{band_rule}---:|---:|---:|---:|---:|---:|:-:|",
        ]
        for q in queries:
            ratio = q.get("scan_memory_ms") and q.get("indexed_ms") and q["scan_memory_ms"] / q["indexed_ms"]
            query_text = _code(q["query"])
            exact = {True: "✓", False: "✗", None: "–"}[q.get("exact")]
            band = ""
            if banded:
                share = q["hits"] / report["entries"] if isinstance(q.get("hits"), int) and report["entries"] else None
                band = f"{q.get('band') or '–'} | {fmt_value(share, '{:.3%}')} | "
            lines.append(
                f"| {q['category']} | {query_text} | {band}{fmt_value(q.get('hits'), '{:,}')} "
                f"| {fmt_value(q.get('indexed_ms'), '{:.3f}')} "
                f"| {fmt_value(q.get('scan_memory_ms'), '{:.1f}')} "
                f"| {fmt_value(q.get('scan_naive_ms'), '{:.1f}')} | {fmt_value(q.get('grep_ms'), '{:.1f}')} "
                f"| {fmt_value(ratio, '{:.0f}x' if ratio and ratio >= 10 else '{:.1f}x')} | {exact} |"
            )
    if report.get("gate"):
        lines += ["", "CI gate:", ""]
        for floor in report["gate"]:
            lines.append(f"- {'PASS' if floor['passed'] else 'FAIL'}: {floor['message']}")
    if report.get("notes"):
        lines += ["", "Notes:", ""]
        lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    """A query as inline code in a table cell: pipes escaped, backticks fenced by longer runs."""
    text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _dataset_lines(info: Mapping[str, Any]) -> list[str]:
    """One line on where a real-text corpus came from and what its entries look like."""
    text = info.get("text")
    if not text:
        return []
    sources = ", ".join(f"{s['name']} ({s['files_with_text']} files)" for s in text.get("sources", []))
    shape = info.get("shape") or {}
    chars = shape.get("content_chars") or {}
    words = shape.get("words_per_entry") or {}
    return [
        "",
        f"Text: docstrings and comments of {sources}, Python {text.get('python')}, "
        f"fingerprint `{str(text.get('fingerprint'))[:12]}`; entries {chars.get('min')}–{chars.get('max')} "
        f"characters (mean {chars.get('mean')}), {words.get('mean')} words on average, "
        f"{fmt_value(shape.get('distinct_words'), '{:,}')} distinct lowered words.",
    ]


def write_outputs(report: Mapping[str, Any], results_dir: Path, *, extra_json: Path | None = None) -> Path:
    """``<name>.json``, ``<name>.md`` and a line in ``history.jsonl``; returns the Markdown path.

    ``<name>`` is the size (``100k``), prefixed by the corpus unless it is the generated one
    (``realtext-100k``), suffixed ``-gate`` in gate mode.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    name = report.get("result_name", report["size_label"]) + ("-gate" if report.get("gate_mode") else "")
    text = json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    _atomic_text(results_dir / f"{name}.json", text)
    if extra_json is not None:
        extra_json.parent.mkdir(parents=True, exist_ok=True)
        _atomic_text(extra_json, text)
    md_path = results_dir / f"{name}.md"
    _atomic_text(md_path, markdown(report))
    history_line = {
        "timestamp": report["timestamp"],
        "git_sha": report.get("git_sha"),
        "git_dirty": report.get("git_dirty"),
        "corpus": report.get("corpus", "generated"),
        "size": report["size_label"],
        "entries": report["entries"],
        "gate": None if not report.get("gate") else all(f["passed"] for f in report["gate"]),
        "exact": report.get("exact"),
        "metrics": report["metrics"],
    }
    with open(results_dir / HISTORY_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(history_line, sort_keys=True, ensure_ascii=False) + "\n")
    return md_path


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
