"""Review round 24a: the write path without claims, the cached process id, the chain's "before".

Each test reproduces a defect found by attacking 25dff7e..review6a; each fails on the
code before its fix.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import memstore.group_commit
from memstore.append_chain import CHAIN_BYTES, CHAIN_OFFSET
from memstore.catalog import MemoryCatalog
from memstore.index.source import BODY_SAMPLES, FINGERPRINT_BYTES

TICK = 0.03
"""Longer than a file timestamp tick (jiffy-grained on Linux), so ctimes differ."""


def _entry(n: int, content: str) -> dict[str, object]:
    return {"memory_id": f"m{n:06d}", "content": content, "tags": ["t"], "created_at": "2026-01-01"}


def _ids(catalog: MemoryCatalog, query: str) -> list[str]:
    return [entry.memory_id for entry in catalog.search(query, limit=1000)]


def _scan_ids(root: Path, query: str) -> list[str]:
    plain = MemoryCatalog(root, use_index=False, readonly=True)
    return [entry.memory_id for entry in plain.search(query, limit=1000)]


class _EditDuringRecordRead:
    """``os`` for memstore.group_commit: another tool edits the catalog in place while an add
    reads the sync lock's record, after the add's first stat and before its write."""

    def __init__(self, path: Path, at: int) -> None:
        self.path = path
        self.at = at
        self.edits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        if self.edits == 0 and (length, offset) == (CHAIN_OFFSET + CHAIN_BYTES, 0):
            self.edits += 1
            time.sleep(TICK)
            with open(self.path, "r+b") as handle:
                handle.seek(self.at)
                handle.write(b"zucchini")  # same size: only the ctime tells
        return os.pread(fd, length, offset)


def test_a_same_size_edit_made_while_an_add_reads_the_sync_record_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain's "before" must be the file as the write found it, not as the add first saw it.

    Between the add's first stat and its write lie the torn-tail check, the record's read
    and, when the record reaches past the file, a blocking flock of the sync lock: not a
    window a chain may span.  The edit lands in a block no sample covers, in a full digest
    block, so only a chain that restarts (or a whole proof) finds it.
    """
    catalog = MemoryCatalog(tmp_path)
    lines = [json.dumps(_entry(n, f"pumpkins {n} " + "padding " * 60)) for n in range(5000)]
    catalog.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    catalog.add("made by memstore: the sync lock and its chain exist")
    assert _ids(catalog, "memstore")  # indexed at the chain's end
    data = catalog.path.read_bytes()
    at = data.index(b"pumpkins", 80_000)
    span = len(data) - FINGERPRINT_BYTES
    samples = [span * i // (BODY_SAMPLES - 1) for i in range(BODY_SAMPLES)]
    assert all(not (s <= at < s + FINGERPRINT_BYTES) for s in samples) and at > FINGERPRINT_BYTES
    stand_in = _EditDuringRecordRead(catalog.path, at)
    monkeypatch.setattr(memstore.group_commit, "os", stand_in)
    catalog.add("an appended note")
    monkeypatch.undo()
    assert stand_in.edits == 1
    other = MemoryCatalog(tmp_path)
    assert _ids(other, "zucchini") == _scan_ids(tmp_path, "zucchini") != []
