"""The CI floors: ratios measured in the same run, so a noisy machine cannot fake a pass or a fail.

A floor whose inputs are missing fails too: a gate that silently skips is no gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MIN_SEARCH_SPEEDUP = 10.0
"""Indexed search median over the mix must be at least this many times faster than the in-memory scan."""
MAX_CATCHUP_SHARE = 0.05
"""Catching up one appended line must cost less than this share of a full build."""
MAX_NOCHANGE_QUERY_MS = 1.0
"""A query when nothing changed (absent token, median) must take less than this."""


@dataclass(frozen=True)
class Floor:
    name: str
    passed: bool
    message: str


def _number(metrics: Mapping[str, object], key: str) -> float | None:
    value = metrics.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def evaluate(metrics: Mapping[str, object]) -> list[Floor]:
    """Every floor with its verdict and a one-line explanation."""
    floors: list[Floor] = []

    indexed = _number(metrics, "search_indexed_p50_ms")
    scan = _number(metrics, "search_scan_memory_p50_ms")
    if indexed is None or scan is None:
        floors.append(
            Floor("search_speedup", False, "search speedup: indexed or in-memory scan median missing")
        )
    else:
        speedup = scan / indexed if indexed > 0 else float("inf")
        floors.append(
            Floor(
                "search_speedup",
                speedup >= MIN_SEARCH_SPEEDUP,
                f"search speedup: in-memory scan median {scan:.2f} ms / indexed median {indexed:.3f} ms"
                f" = {speedup:.1f}x (floor {MIN_SEARCH_SPEEDUP:.0f}x)",
            )
        )

    catchup = _number(metrics, "catchup_1_ms")
    build = _number(metrics, "build_seconds")
    if catchup is None or build is None:
        floors.append(Floor("catchup_share", False, "catch-up: 1-line catch-up or full build time missing"))
    else:
        share = catchup / (build * 1000.0) if build > 0 else float("inf")
        floors.append(
            Floor(
                "catchup_share",
                share < MAX_CATCHUP_SHARE,
                f"catch-up: 1 appended line {catchup:.2f} ms = {100 * share:.2f}% of a full build"
                f" ({build:.2f} s; floor < {100 * MAX_CATCHUP_SHARE:.0f}%)",
            )
        )

    nochange = _number(metrics, "nochange_query_median_ms")
    if nochange is None:
        floors.append(Floor("nochange_query", False, "no-change query: not measured"))
    else:
        floors.append(
            Floor(
                "nochange_query",
                nochange < MAX_NOCHANGE_QUERY_MS,
                f"no-change query: median {nochange:.3f} ms (floor < {MAX_NOCHANGE_QUERY_MS:g} ms)",
            )
        )
    return floors
