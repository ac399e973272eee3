"""Index damage: detected, set aside for inspection, rebuilt; the answers never change.

The derived index may be hit by anything: flipped bytes, a truncated file, a
deleted write-ahead log, garbage, a schema from an older (or newer) version, a
dropped table.  The next query must still equal a scan of the files, the damaged
file must be kept aside (``memstore.sqlite3.damaged-*``), and ``check_index`` must
be equal afterwards.  ``memstore reindex --check`` exits 1 while the index differs
from the files and 0 once ``memstore reindex`` has run.
"""

from __future__ import annotations

import multiprocessing
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import reliability_workers as workers

from memstore.catalog import MemoryCatalog

SPAWN = multiprocessing.get_context("spawn")
QUERIES = ["alpha", "entry 1", "beta gamma", "zzz", "run-summary"]


def _built(root: Path, entries: int = 400) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for n in range(entries):
        tags = ["run-summary"] if n % 7 == 0 else []
        catalog.add(f"entry {n} alpha {'beta gamma' if n % 3 else 'delta'} " + "w" * (n % 50), tags=tags)
    catalog.search("alpha")
    return catalog


def _db(root: Path) -> Path:
    return root / ".teaagent" / "index" / "memstore.sqlite3"


def _checkpointed(root: Path) -> Path:
    """The index file with its WAL folded in, and no connection open."""
    db = _db(root)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db


def _flip(offsets: Callable[[int, int], list[int]]) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        db = _checkpointed(root)
        data = bytearray(db.read_bytes())
        page = int.from_bytes(data[16:18], "big") or 65536
        for offset in offsets(len(data), page):
            data[offset] ^= 0xFF
        db.write_bytes(bytes(data))

    return damage


def _truncate(root: Path) -> None:
    db = _checkpointed(root)
    with open(db, "r+b") as handle:
        handle.truncate(db.stat().st_size // 2)


def _garbage(root: Path) -> None:
    db = _checkpointed(root)
    db.write_bytes(random.Random(3).randbytes(db.stat().st_size))


def _empty(root: Path) -> None:
    _checkpointed(root).write_bytes(b"")


def _sql(statement: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        conn = sqlite3.connect(_checkpointed(root))
        conn.execute(statement)
        conn.commit()
        conn.close()

    return damage


DAMAGE = {
    "header_magic": _flip(lambda size, page: [0, 5, 10]),
    "page_size_field": _flip(lambda size, page: [16, 17]),
    "btree_page_types": _flip(lambda size, page: list(range(page, size, page))),
    "every_4k_byte_100": _flip(lambda size, page: list(range(100, size, 4096))),
    "truncated_to_half": _truncate,
    "garbage": _garbage,
    "empty_file": _empty,
    "user_version_0": _sql("PRAGMA user_version = 0"),
    "user_version_99": _sql("PRAGMA user_version = 99"),
    "dropped_doc_table": _sql("DROP TABLE doc"),
    "dropped_source_table": _sql("DROP TABLE source"),
}


def _matches_scan(root: Path, catalog: MemoryCatalog) -> None:
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in QUERIES:
        assert catalog.search(query, limit=20) == scan.search(query, limit=20), query
    assert catalog.list(limit=50) == scan.list(limit=50)
    assert catalog.show(scan.list(limit=1)[0].memory_id) == scan.list(limit=1)[0]


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damaged_index_is_set_aside_and_rebuilt(tmp_path: Path, name: str) -> None:
    _built(tmp_path)
    DAMAGE[name](tmp_path)
    catalog = MemoryCatalog(tmp_path)
    _matches_scan(tmp_path, catalog)
    catalog.add("written after the damage alpha")
    _matches_scan(tmp_path, catalog)
    assert MemoryCatalog(tmp_path).check_index().equal
    assert catalog.health_report()["index"].get("state") not in ("unavailable", "disabled")
    kept = list(_db(tmp_path).parent.glob("memstore.sqlite3.damaged-*"))
    assert kept, "the damaged index was not kept for inspection"


@pytest.mark.stress
def test_random_byte_flips_never_change_an_answer(tmp_path: Path) -> None:
    """Flips anywhere: every answer equals the scan (SQLite has no page checksums, so a flip
    in indexed text can go unnoticed until the index is rebuilt: counted, not hidden)."""
    rounds = workers.sized(8, 100)
    rng = random.Random(11)
    template = tmp_path / "template"
    _built(template, 200)
    _checkpointed(template)
    undetected = wrong = 0
    for n in range(rounds):
        root = tmp_path / f"r{n}"
        shutil.copytree(template, root)
        db = _db(root)
        data = bytearray(db.read_bytes())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        db.write_bytes(bytes(data))
        catalog = MemoryCatalog(root)
        scan = MemoryCatalog(root, use_index=False, readonly=True)
        answers_equal = all(catalog.search(q, limit=20) == scan.search(q, limit=20) for q in QUERIES)
        answers_equal = answers_equal and catalog.list(limit=1000) == scan.list(limit=1000)
        detected = bool(list(db.parent.glob("*.damaged-*")))
        undetected += not detected
        wrong += not answers_equal
        MemoryCatalog(root).reindex(full=True)
        _matches_scan(root, MemoryCatalog(root))
    workers.figure("index-flips", rounds=rounds, undetected=undetected, wrong_answers=wrong)
    assert wrong == 0


def test_deleted_wal_loses_only_derived_state(tmp_path: Path) -> None:
    _built(tmp_path, 50)
    report = tmp_path / "report"
    process = SPAWN.Process(target=workers.index_then_vanish, args=(str(tmp_path), 60, str(report)))
    process.start()
    process.join(120)
    assert process.exitcode == 0 and report.read_text() == "done"
    wal = Path(f"{_db(tmp_path)}-wal")
    assert wal.exists() and wal.stat().st_size > 0, "the worker left no write-ahead log to delete"
    wal.unlink()
    Path(f"{_db(tmp_path)}-shm").unlink(missing_ok=True)
    catalog = MemoryCatalog(tmp_path)
    _matches_scan(tmp_path, catalog)
    assert len(catalog.search("alpha", limit=1000)) == 110
    assert catalog.check_index().equal


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )


def _diverge(root: Path, damage: str) -> None:
    """Make the index differ from the files without making it unreadable."""
    conn = sqlite3.connect(_checkpointed(root))
    if damage == "row_deleted":
        conn.execute("DELETE FROM doc WHERE id = (SELECT max(id) FROM doc)")
    elif damage == "offset_shifted":
        # Whichever table holds the byte offsets (the schema keeps them in doc or beside it).
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        holder = next(t for t in tables if "off" in {c[1] for c in conn.execute(f"PRAGMA table_info({t})")})
        conn.execute(f"UPDATE {holder} SET off = off + 1 WHERE id = 5")
    else:
        conn.execute("UPDATE doc SET c = 'nothing like it' WHERE id = 5")
    conn.commit()
    conn.close()


DIVERGENCES = ["row_deleted", "offset_shifted", "text_changed"]


@pytest.mark.parametrize("damage", DIVERGENCES)
def test_reindex_check_exits_1_when_the_index_differs(tmp_path: Path, damage: str) -> None:
    _built(tmp_path, 100)
    assert _cli(tmp_path, "reindex", "--check").returncode == 0
    _diverge(tmp_path, damage)
    before = _cli(tmp_path, "reindex", "--check")
    assert "Traceback" not in before.stderr, before.stderr[-1500:]
    assert before.returncode == 1, before.stdout + before.stderr
    full = _cli(tmp_path, "reindex", "--full")
    assert full.returncode == 0, full.stderr
    after = _cli(tmp_path, "reindex", "--check")
    assert after.returncode == 0, after.stdout + after.stderr


def test_plain_reindex_repairs_what_check_found(tmp_path: Path) -> None:
    _built(tmp_path, 100)
    _diverge(tmp_path, "row_deleted")
    assert _cli(tmp_path, "reindex", "--check").returncode == 1
    assert _cli(tmp_path, "reindex").returncode == 0
    after = _cli(tmp_path, "reindex", "--check")
    assert after.returncode == 0, after.stdout + after.stderr


def test_flipped_byte_in_the_schema_text_is_treated_as_corruption(tmp_path: Path) -> None:
    _built(tmp_path, 50)
    db = _checkpointed(tmp_path)
    data = bytearray(db.read_bytes())
    at = data.find(b"CREATE TABLE source")
    assert at >= 0
    data[at + 9] ^= 0x80  # TABLE -> TA\xc2LE: a syntax error whose message is not UTF-8
    db.write_bytes(bytes(data))
    catalog = MemoryCatalog(tmp_path)
    _matches_scan(tmp_path, catalog)
    assert list(db.parent.glob("memstore.sqlite3.damaged-*"))
    assert catalog.check_index().equal
