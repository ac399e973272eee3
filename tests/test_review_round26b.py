"""Review 26b: quarantine records read before a move (quarantine_records.py), doctor's second
records of one move, a child forked while its parent used the index (fork_state.py), and the
torn-tail cut that lowers the sync record before its last check (group_commit._truncate).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import jsonl
from memstore.catalog import MemoryCatalog
from memstore.doctor import diagnose, repair
from memstore.jsonl import decode_entry, encode_entries, encode_entry
from tests.test_rewrite_held_follow import _seed


def _store(root: Path, lines: list[bytes]) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_bytes(b"".join(lines))
    return catalog


def _records(path: Path) -> Counter[bytes]:
    """Each entry the quarantine file holds as every reader reads it, with its number of records."""
    found: Counter[bytes] = Counter()
    for line in path.read_bytes().splitlines():
        entry = decode_entry(line)
        if entry is not None:
            found[encode_entry(entry)] += 1
    return found


# ------------------------------------------------------------------ doctor


def test_doctor_keeps_a_record_whose_provenance_differs_only_in_a_value_s_type(tmp_path: Path) -> None:
    """``true``, ``1`` and ``1.0`` are equal in Python: two records that say different things
    (a reader shows each as it is) were a "duplicate" doctor --fix dropped."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note three word3", (), "gone", None)
    _store(tmp_path, [])
    first = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": True, "quarantined_at": "1"})
    second = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": 1, "quarantined_at": "2"})
    third = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": 1.0, "quarantined_at": "2"})
    catalog.quarantine_path.write_bytes(first + second + third)
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "duplicate-id"]
    assert len(findings) == 2 and not any(finding.fixable for finding in findings)
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == first + second + third


def test_doctor_keeps_records_whose_numbers_differ_beyond_a_double(tmp_path: Path) -> None:
    """orjson reads an integer beyond 64 bits as a float: two tickets became one number."""
    jsonl.load_orjson()  # as in any process past its first lines
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note four word4", (), "gone", None)
    _store(tmp_path, [])
    first = encode_entries([entry], quarantine=True, provenance={"ticket": 2**64, "quarantined_at": "1"})
    second = encode_entries([entry], quarantine=True, provenance={"ticket": 2**64 + 1, "quarantined_at": "1"})
    catalog.quarantine_path.write_bytes(first + second)
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == first + second
