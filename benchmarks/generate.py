"""The benchmark's datasets: generated catalogs and failure-card sets, cached on disk.

Catalogs come from :mod:`memstore.sample.catalog` (the demo's generator too);
failures.json is the storage's own form (one JSON list of card dicts,
``indent=2``).  The same (kind, size, seed) always gives the same bytes, so runs on
different days and machines measure the same data.  Files are cached under
benchmarks/data/.

    python -m benchmarks.generate --size 1m            # catalog
    python -m benchmarks.generate --kind cards --size 100k
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.cards_data import card_dicts
from memstore.sample.catalog import DEFAULT_SEED, GENERATOR_VERSION, write_catalog

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMED_SIZES = {"10k": 10_000, "20k": 20_000, "100k": 100_000, "1m": 1_000_000}


def parse_size(text: str | int) -> int:
    """``10k``, ``100k``, ``1m``, ``2.5m`` or a plain integer, as a count of entries."""
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip().lower().replace("_", "")
        if raw in NAMED_SIZES:
            value = NAMED_SIZES[raw]
        else:
            match = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", raw)
            if match is None:
                raise ValueError(f"not a size: {text!r} (use e.g. 10k, 100k, 1m or an integer)")
            factor = {"": 1, "k": 1_000, "m": 1_000_000}[match.group(2)]
            value = round(float(match.group(1)) * factor)
    if value < 1:
        raise ValueError(f"size must be at least 1, got {text!r}")
    return value


def size_label(count: int) -> str:
    """The short name of a size, for file names and tables (100000 -> 100k)."""
    if count % 1_000_000 == 0:
        return f"{count // 1_000_000}m"
    if count % 1_000 == 0:
        return f"{count // 1_000}k"
    return str(count)


def write_cards(path: Path, count: int, *, seed: int = DEFAULT_SEED) -> int:
    """Write failures.json with ``count`` cards as the storage does (``indent=2``); return its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(card_dicts(count, seed=seed), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path.stat().st_size


# ---------------------------------------------------------------- cache


@dataclass(frozen=True)
class Dataset:
    """A generated root directory: ``root/.teaagent/...`` like a real repository."""

    kind: str
    size: int
    seed: int
    root: Path
    file: Path
    bytes: int
    generate_seconds: float | None  # None when served from the cache


def catalog_file(root: Path) -> Path:
    return root / ".teaagent" / "memory.jsonl"


def cards_file(root: Path) -> Path:
    return root / ".teaagent" / "memory" / "failures.json"


def dataset(kind: str, size: int, *, seed: int = DEFAULT_SEED, data_dir: Path = DATA_DIR) -> Dataset:
    """The cached dataset for (kind, size, seed), generating it first if needed."""
    if kind not in ("catalog", "cards"):
        raise ValueError(f"unknown dataset kind {kind!r}")
    root = data_dir / f"{kind}-{size_label(size)}-seed{seed}-v{GENERATOR_VERSION}"
    target = catalog_file(root) if kind == "catalog" else cards_file(root)
    meta_path = root / "dataset.json"
    meta = {"kind": kind, "size": size, "seed": seed, "generator_version": GENERATOR_VERSION}
    if target.exists() and meta_path.exists():
        try:
            stored = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError:
            stored = None
        size_now = target.stat().st_size
        if isinstance(stored, dict) and stored.get("params") == meta and stored.get("bytes") == size_now:
            return Dataset(kind, size, seed, root, target, target.stat().st_size, None)
    started = time.perf_counter()
    if kind == "catalog":
        written = write_catalog(target, size, seed=seed)
    else:
        written = write_cards(target, size, seed=seed)
    elapsed = time.perf_counter() - started
    meta_path.write_text(json.dumps({"params": meta, "bytes": written, "seconds": elapsed}), encoding="utf-8")
    return Dataset(kind, size, seed, root, target, written, elapsed)


def iter_catalog_payloads(path: Path) -> Iterator[dict[str, object]]:
    """Every line of a generated catalog, parsed (for tests and shape checks)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=("catalog", "cards"), default="catalog")
    parser.add_argument("--size", default="100k", help="10k, 20k, 100k, 1m or an integer")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    data = dataset(args.kind, parse_size(args.size), seed=args.seed, data_dir=args.data_dir)
    took = "cached" if data.generate_seconds is None else f"generated in {data.generate_seconds:.1f} s"
    print(json.dumps({**asdict(data), "root": str(data.root), "file": str(data.file)}))
    summary = f"{data.kind} {size_label(data.size)}: {data.bytes / 1e6:.1f} MB at {data.file} ({took})"
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
