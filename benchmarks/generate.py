"""The benchmark's datasets: generated catalogs, real-text catalogs and failure-card sets, cached on disk.

Catalogs come from :mod:`memstore.sample.catalog` (the demo's generator too), real-text
catalogs from :mod:`memstore.sample.realtext` (windows over the docstrings and comments of
the interpreter's standard library) together with their query mix
(:mod:`benchmarks.realtext_queries`); failures.json is the storage's own form (one JSON
list of card dicts, ``indent=2``).  The same (kind, size, seed) always gives the same
bytes (for real text: the same text fingerprint too), so runs on different days and
machines measure the same data.  Files are cached under benchmarks/data/.

    python -m benchmarks.generate --size 1m            # catalog
    python -m benchmarks.generate --kind realtext --size 1m
    python -m benchmarks.generate --kind cards --size 100k
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cards_data import card_dicts
from benchmarks.realtext_queries import SELECTOR_VERSION, choose_queries
from memstore.sample import realtext
from memstore.sample.catalog import DEFAULT_SEED, GENERATOR_VERSION, write_catalog
from memstore.sample.pytext import TextCorpus, load_corpus

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMED_SIZES = {"10k": 10_000, "20k": 20_000, "100k": 100_000, "1m": 1_000_000}
KINDS = ("catalog", "realtext", "cards")
DEFAULT_TEXT_SOURCES = ("stdlib",)
QUERIES_FILE = "queries.json"


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
    info: dict[str, Any] = field(default_factory=dict)  # real text: sources, fingerprint, shape


@dataclass(frozen=True)
class TextChoice:
    """Which installed Python source the real-text corpus is built from (names from pytext.SOURCES)."""

    sources: tuple[str, ...] = DEFAULT_TEXT_SOURCES
    packages: tuple[str, ...] | None = None  # top-level modules only (tests keep extraction small)

    def corpus(self, data_dir: Path) -> TextCorpus:
        return load_corpus(sources=self.sources, packages=self.packages, cache_dir=data_dir)


def catalog_file(root: Path) -> Path:
    return root / ".teaagent" / "memory.jsonl"


def cards_file(root: Path) -> Path:
    return root / ".teaagent" / "memory" / "failures.json"


def _cached(target: Path, meta_path: Path, params: dict[str, Any]) -> dict[str, Any] | None:
    """The stored metadata when the cached file is the one these params describe, else None."""
    if not (target.exists() and meta_path.exists()):
        return None
    try:
        stored = json.loads(meta_path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if isinstance(stored, dict) and stored.get("params") == params and stored.get("bytes") == target.stat().st_size:
        return stored
    return None


def dataset(
    kind: str,
    size: int,
    *,
    seed: int = DEFAULT_SEED,
    data_dir: Path = DATA_DIR,
    text: TextChoice | None = None,
) -> Dataset:
    """The cached dataset for (kind, size, seed), generating it first if needed."""
    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}")
    if kind == "realtext":
        return _realtext_dataset(size, seed=seed, data_dir=data_dir, text=text or TextChoice())
    root = data_dir / f"{kind}-{size_label(size)}-seed{seed}-v{GENERATOR_VERSION}"
    target = catalog_file(root) if kind == "catalog" else cards_file(root)
    meta_path = root / "dataset.json"
    meta = {"kind": kind, "size": size, "seed": seed, "generator_version": GENERATOR_VERSION}
    if _cached(target, meta_path, meta) is not None:
        return Dataset(kind, size, seed, root, target, target.stat().st_size, None)
    started = time.perf_counter()
    if kind == "catalog":
        written = write_catalog(target, size, seed=seed)
    else:
        written = write_cards(target, size, seed=seed)
    elapsed = time.perf_counter() - started
    meta_path.write_text(json.dumps({"params": meta, "bytes": written, "seconds": elapsed}), encoding="utf-8")
    return Dataset(kind, size, seed, root, target, written, elapsed)


def _realtext_dataset(size: int, *, seed: int, data_dir: Path, text: TextChoice) -> Dataset:
    """A real-text catalog and its query mix; keyed by the fingerprint of the text it was cut from."""
    started = time.perf_counter()
    corpus = text.corpus(data_dir)
    extract_seconds = time.perf_counter() - started
    fingerprint = corpus.fingerprint
    root = data_dir / f"realtext-{size_label(size)}-seed{seed}-v{realtext.GENERATOR_VERSION}-{fingerprint[:12]}"
    target = catalog_file(root)
    meta_path = root / "dataset.json"
    params = {
        "kind": "realtext",
        "size": size,
        "seed": seed,
        "generator_version": realtext.GENERATOR_VERSION,
        "text_fingerprint": fingerprint,
        "sources": list(text.sources),
        "packages": None if text.packages is None else list(text.packages),
    }
    stored = _cached(target, meta_path, params)
    generate_seconds: float | None = None
    if stored is None:
        started = time.perf_counter()
        written = realtext.write_realtext_catalog(target, size, corpus=corpus, seed=seed)
        generate_seconds = time.perf_counter() - started
        stored = {"params": params, "bytes": written, "seconds": generate_seconds, "text": corpus.describe()}
        meta_path.write_text(json.dumps(stored, indent=2), encoding="utf-8")
    mix = _queries(root / QUERIES_FILE, target, seed=seed)
    info = {
        "text": stored.get("text", corpus.describe()),
        "generate_seconds": stored.get("seconds"),
        "extract_or_load_text_seconds": extract_seconds,
        "queries": mix,
    }
    return Dataset("realtext", size, seed, root, target, target.stat().st_size, generate_seconds, info)


def _queries(path: Path, catalog: Path, *, seed: int) -> dict[str, Any]:
    """The dataset's query mix, chosen once and kept beside the catalog."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("selector_version") == SELECTOR_VERSION and stored.get("seed") == seed:
            return dict(stored)
    except (OSError, ValueError, AttributeError):
        pass
    started = time.perf_counter()
    mix = choose_queries(catalog, seed=seed)
    mix["seconds"] = time.perf_counter() - started
    path.write_text(json.dumps(mix, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return mix


def iter_catalog_payloads(path: Path) -> Iterator[dict[str, object]]:
    """Every line of a generated catalog, parsed (for tests and shape checks)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def text_choice(sources: str | None, packages: str | None) -> TextChoice:
    """``--text-sources stdlib,site-packages`` and ``--text-packages json,email`` as a TextChoice."""
    def names(value: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in value.split(",") if part.strip())

    return TextChoice(
        sources=names(sources) if sources else DEFAULT_TEXT_SOURCES,
        packages=names(packages) if packages else None,
    )


def add_text_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--text-sources", default=None, help="real text from: stdlib (default), site-packages, or both comma-separated"
    )
    parser.add_argument(
        "--text-packages", default=None, help="real text from these top-level modules only (e.g. json,email)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=KINDS, default="catalog")
    parser.add_argument("--size", default="100k", help="10k, 20k, 100k, 1m or an integer")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    add_text_options(parser)
    args = parser.parse_args(argv)
    text = text_choice(args.text_sources, args.text_packages)
    data = dataset(args.kind, parse_size(args.size), seed=args.seed, data_dir=args.data_dir, text=text)
    took = "cached" if data.generate_seconds is None else f"generated in {data.generate_seconds:.1f} s"
    shown = {**asdict(data), "root": str(data.root), "file": str(data.file)}
    if "queries" in data.info:
        shown["info"] = {**data.info, "queries": [q["text"] for q in data.info["queries"]["queries"]]}
    print(json.dumps(shown, ensure_ascii=False))
    summary = f"{data.kind} {size_label(data.size)}: {data.bytes / 1e6:.1f} MB at {data.file} ({took})"
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
