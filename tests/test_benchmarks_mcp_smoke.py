"""The MCP benchmark runs end to end at a tiny size (its per-query exactness check included)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.mcp import main


def test_mcp_benchmark_runs_and_writes_its_figures(tmp_path: Path, home: Path) -> None:
    out = tmp_path / "mcp.json"
    argv = ["--size", "300", "--runs", "1", "--repeats", "1", "--json", str(out), "--data-dir", str(tmp_path)]
    assert main(argv) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["size"] == "300"
    assert figures["startup_memstore_p50_ms"] > 0 and figures["startup_minimal_p50_ms"] > 0
    assert set(figures["search_queries"]) == {
        "memory",
        "caltrivo",
        "memory python",
        "retry timeout",
        "error handler config",
        "the",
        "zyxwq",
    }
    assert figures["search_ratio_over_mix"] > 0
