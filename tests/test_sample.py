"""The sample generator is deterministic: the benchmarks' figures depend on these exact bytes.

The digests were recorded from benchmarks/generate.py before the generator moved
into the package; a change here means every published benchmark result measured
different data (bump ``GENERATOR_VERSION`` and re-run them if that is intended).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.cards_data import card_dicts
from memstore.sample.catalog import DEFAULT_SEED, GENERATOR_VERSION, CatalogWriter, catalog_end_us, write_catalog


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_catalog_bytes_are_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    write_catalog(path, 2500, seed=DEFAULT_SEED, workers=1, chunk_entries=1000)
    assert _digest(path.read_bytes()) == "087e3ec1f0274c4e82988d3d065c18023b719e97fbde3b8ff50d9a330312855b"
    write_catalog(path, 300, seed=7, workers=1)
    assert _digest(path.read_bytes()) == "5d37463fea540d7fd643819884d5634c28a0a2d2bf2d1ad4f772f7ddadee5c53"
    assert GENERATOR_VERSION == 1


def test_appended_lines_are_unchanged() -> None:
    writer = CatalogWriter(DEFAULT_SEED, stream="append", start_us=catalog_end_us(2500))
    lines = writer.lines(50, extra_word="marker")
    assert _digest(lines.encode()) == "bb6e0fa1562ae83a5d1c82d625e91ecc41cf1da91cac47365162990661e5aca9"


def test_cards_drawn_from_the_moved_vocabulary_are_unchanged() -> None:
    text = json.dumps(card_dicts(200, seed=DEFAULT_SEED), indent=2)
    assert _digest(text.encode()) == "283015d69d42ac58e57de6e18fe9a75e3c103f52df6766260110c0cd75f841de"


def test_the_package_never_imports_the_repository_benchmarks(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent  # where benchmarks/ would be importable
    code = (
        "import sys, memstore.demo;"
        f"memstore.demo.main(['--size', '50', '--root', {str(tmp_path)!r}]);"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'benchmarks'))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert run.stdout.splitlines()[-1] == "[]"
    mentions = [
        path.name
        for path in (repo / "memstore").rglob("*.py")
        if re.search(r"\bbenchmarks\.[a-z_]|import benchmarks", path.read_text(encoding="utf-8"))
    ]
    assert mentions == []
