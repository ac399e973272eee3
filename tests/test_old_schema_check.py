"""A read-only handle tells a damaged index at an older schema from one merely awaiting its migration.

It cannot migrate (it never writes), so it checks the file as it stands: exactly the
objects the migrations left at its version (``old_schemas.py``, compared here with files
Alembic migrated to each revision) and SQLite's ``quick_check``.  Damage is reported as
'unavailable' (doctor: damaged-index) and changes nothing; a sound file stays 'old schema'.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memstore.catalog import MemoryCatalog
from memstore.doctor import diagnose
from memstore.errors import IndexMigrationPendingError, IndexUnavailableError
from memstore.index import db
from memstore.index.db import INDEX_FILENAME, IndexFile
from memstore.index.migrate import upgrade_to
from memstore.index.old_schemas import OLD_STATEMENTS
from memstore.index.schema_sql import generate
from memstore.index.settings import SCHEMA_VERSION
from memstore.index.trust import MASTER_SQL, master_of, old_schema_problem
from tests.test_index_internals import _as_0004, index_path


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_each_older_version_holds_what_alembic_leaves_at_that_revision(tmp_path: Path, version: int) -> None:
    """The recorded objects of each version equal a file Alembic migrated to that revision
    (statement for statement, and as ``sqlite_master`` rows), so the two cannot drift."""
    path = tmp_path / "old.sqlite3"
    upgrade_to(path, f"{version:04d}")
    assert OLD_STATEMENTS[version] == generate(f"{version:04d}"), "run `python -m memstore.index.old_schemas`"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (version,)
        assert sorted(conn.execute(MASTER_SQL), key=repr) == sorted(master_of(OLD_STATEMENTS[version]), key=repr)
        assert old_schema_problem(conn, version) is None
        for other in set(OLD_STATEMENTS) - {version}:
            assert old_schema_problem(conn, other) is not None, other
    finally:
        conn.close()


def test_every_older_version_is_recorded() -> None:
    assert sorted(OLD_STATEMENTS) == list(range(1, SCHEMA_VERSION))


def _old(root: Path, *, entries: int = 300) -> Path:
    catalog = MemoryCatalog(root)
    for n in range(entries):
        catalog.add(f"entry {n} about caching {'x' * 200}", tags=["ci"])
    assert len(catalog.search("entry", limit=1000)) == entries
    del catalog
    gc.collect()  # its connection closed now, not mid-test: the last close checkpoints the log
    _as_0004(index_path(root))
    assert not Path(f"{index_path(root)}-wal").exists()
    return index_path(root)


def _edit(path: Path, *statements: str) -> None:
    """Change the file as another program would, closed again (no log left for memstore to refuse)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
    assert not Path(f"{path}-wal").exists()


def _index_files(root: Path) -> dict[str, str]:
    """Every file of the index folder with a digest of its bytes: a read-only check changes none.

    Not ``-shm``: SQLite's readers share their read marks through it."""
    folder = index_path(root).parent
    files = (p for p in sorted(folder.iterdir()) if p.is_file() and not p.name.endswith("-shm"))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _damaged_read_only(root: Path) -> None:
    """Doctor and a read-only handle call it damaged and change nothing; a writable open sets it aside."""
    before = _index_files(root)
    report = diagnose(root)
    assert [finding.kind for finding in report.findings] == ["damaged-index"], report.to_dict()
    assert MemoryCatalog(root, readonly=True).health().index.state == "unavailable"
    assert _index_files(root) == before
    catalog = MemoryCatalog(root)
    assert len(catalog.search("entry", limit=1000)) == 300
    assert list(index_path(root).parent.glob(f"{INDEX_FILENAME}.damaged-*"))
    assert diagnose(root).healthy


def test_a_sound_older_file_is_old_schema_and_migrated_in_place(tmp_path: Path) -> None:
    path = _old(tmp_path)
    before = _index_files(tmp_path)
    report = diagnose(tmp_path)
    assert report.healthy
    assert [(finding.kind, finding.severity) for finding in report.findings] == [("stale-index", "info")]
    assert MemoryCatalog(tmp_path, readonly=True).health().index.state == "old schema"
    assert _index_files(tmp_path) == before
    inode = path.stat().st_ino
    assert len(MemoryCatalog(tmp_path).search("entry", limit=1000)) == 300
    assert path.stat().st_ino == inode, "migrated, not set aside"
    assert not list(path.parent.glob(f"{INDEX_FILENAME}.damaged-*"))


def test_an_older_file_with_a_planted_table_is_damaged(tmp_path: Path) -> None:
    path = _old(tmp_path)
    _edit(path, "CREATE TABLE planted(x)")
    _damaged_read_only(tmp_path)


def test_an_older_file_with_a_trigger_is_damaged(tmp_path: Path) -> None:
    path = _old(tmp_path)
    _edit(path, "CREATE TRIGGER t AFTER INSERT ON doc BEGIN DELETE FROM pos; END")
    _damaged_read_only(tmp_path)


def test_an_older_file_with_an_object_defined_otherwise_is_damaged(tmp_path: Path) -> None:
    path = _old(tmp_path)
    _edit(path, "DROP INDEX doc_walk", "CREATE INDEX doc_walk ON doc(created_at)")
    _damaged_read_only(tmp_path)


def test_an_older_file_stamped_with_another_older_version_is_damaged(tmp_path: Path) -> None:
    """0004's objects stamped 3: no migration from 0003 would run on them as they are."""
    path = _old(tmp_path)
    _edit(path, "PRAGMA user_version = 3")
    _damaged_read_only(tmp_path)


def test_an_older_file_with_a_page_overwritten_is_damaged(tmp_path: Path) -> None:
    """A b-tree page in the middle overwritten (same size, same objects): only reading it tells."""
    path = _old(tmp_path)
    size = path.stat().st_size
    page = 4096
    with open(path, "r+b") as handle:
        handle.seek((size // page // 2) * page)
        handle.write(b"\xa5" * page)
    _damaged_read_only(tmp_path)


def test_an_older_file_cut_short_is_damaged(tmp_path: Path) -> None:
    path = _old(tmp_path)
    os.truncate(path, path.stat().st_size * 9 // 10 // 4096 * 4096)
    _damaged_read_only(tmp_path)


def test_the_read_only_check_runs_once_per_state_of_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page is read once while neither the file nor its log changes; a change reads them again."""
    path = _old(tmp_path)
    checks: list[str] = []
    real = db.LockedConnection.execute

    def execute(self: sqlite3.Connection, sql: str, *args: object) -> sqlite3.Cursor:
        if "quick_check" in sql:
            checks.append(sql)
        return real(self, sql, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(db.LockedConnection, "execute", execute)
    index = IndexFile(path.parent.parent, readonly=True)
    for _ in range(3):
        with pytest.raises(IndexMigrationPendingError):
            index.connect()
    assert len(checks) == 1
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    with pytest.raises(IndexMigrationPendingError):
        index.connect()
    assert len(checks) == 2
    with open(path, "r+b") as handle:  # damage after a passing check is found: the state moved
        handle.seek(path.stat().st_size // 4096 // 2 * 4096)
        handle.write(b"\xa5" * 4096)
    with pytest.raises(IndexUnavailableError) as caught:
        index.connect()
    assert not isinstance(caught.value, IndexMigrationPendingError)
    assert len(checks) == 3


def test_the_cli_doctor_reports_a_damaged_older_file_and_fix_rebuilds_it(tmp_path: Path) -> None:
    """``memstore doctor``: exit 1 with a damaged-index line, no traceback, nothing changed;
    ``--fix`` rebuilds the index and doctor is then healthy."""
    path = _old(tmp_path)
    _edit(path, "DROP TABLE term_tri")
    before = _index_files(tmp_path)
    env = dict(os.environ, HOME=str(tmp_path / "home"))

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memstore", "doctor", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)

    found = doctor("--json")
    assert found.returncode == 1 and "Traceback" not in found.stderr, found.stderr
    assert [finding["kind"] for finding in json.loads(found.stdout)["findings"]] == ["damaged-index"]
    assert "missing ['table term_tri'" in json.loads(found.stdout)["findings"][0]["detail"]
    assert _index_files(tmp_path) == before
    fixed = doctor("--fix", "--json")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["healthy"] is True, fixed.stdout
    assert doctor().stdout.strip() == "healthy"
