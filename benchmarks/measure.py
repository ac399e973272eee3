"""Timing helpers: medians over repeats, percentiles over a mix, subprocess probes.

The machine is shared and noisy, so each figure is a median (or a minimum where
the question is "what does this cost at best", e.g. interpreter start-up).
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds one call takes, and its result."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def samples_of(fn: Callable[[], T], times: int) -> tuple[list[float], T]:
    """Run ``fn`` ``times`` times (at least once); return each duration and the first result."""
    seconds, result = timed(fn)
    samples = [seconds]
    for _ in range(max(0, times - 1)):
        samples.append(timed(fn)[0])
    return samples, result


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (``fraction`` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / max / min of a set of timings, in the units given."""
    return {
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values),
        "min": min(values),
    }


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def quiet_gc() -> None:
    """Collect now, then freeze the survivors.

    Without the freeze, every later collection (ours, or an automatic one landing
    inside a timing) re-traverses the bench's own big structures: the vocabulary
    tables and, at 1M entries, a million parsed entries, which costs up to a second.
    Objects created by the code under test are still collected normally.
    """
    gc.collect()
    gc.freeze()


def python_env() -> dict[str, str]:
    """Environment for child interpreters: the repository importable, no bytecode writes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_python(code: str, *args: str, timeout: float = 3600) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it must print one JSON object as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=python_env(),
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child python failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"child python printed nothing: {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def wall_clock_of_process(argv: Sequence[str], *, times: int, cwd: Path | None = None) -> list[float]:
    """Wall-clock seconds of running ``argv`` to completion, ``times`` times (output discarded)."""
    samples = []
    env = python_env()
    for _ in range(times):
        started = time.perf_counter()
        proc = subprocess.run(
            list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd, check=False
        )
        samples.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return samples
