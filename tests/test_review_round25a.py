"""Review 25a: adversarial checks of a81f055 (Replacement.renamed), cda4aa1 (older index files)
and 4f7b40e (a torn-tail cut retried when another program wrote meanwhile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore import group_commit
from memstore.catalog import MemoryCatalog
from memstore.files import Replacement
from memstore.sync_record import SyncRecord
from tests.test_old_schema_check import _damaged_read_only, _edit, _old
from tests.test_torn_tail_refused import TORN, _asides, _seed

OTHER = b'{"memory_id": "other", "content": "another program appended this", "created_at": "2026-01-01T00:00:00Z"}\n'


def test_an_append_while_the_cut_updates_the_sync_record_is_never_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_truncate checked size/ctime, then wrote the sync record, then cut: another program's
    append during the record's write was cut off and copied nowhere.  The check now comes
    after the record's write, right before the cut."""
    catalog = _seed(tmp_path)
    armed: list[bool] = []
    real_keep = group_commit.keep_torn_tail
    real_write = SyncRecord.write

    def keep(path_: Path, fd: int, start: int, size: int) -> Path:
        armed.append(True)
        return real_keep(path_, fd, start, size)

    def write(self: SyncRecord, fd: int) -> None:
        real_write(self, fd)
        if armed:  # the cut's own record write, right before its changed-check
            armed.clear()
            with open(catalog.path, "ab") as handle:
                handle.write(b"\n" + OTHER)

    monkeypatch.setattr(group_commit, "keep_torn_tail", keep)
    monkeypatch.setattr(SyncRecord, "write", write)
    catalog.add("after the cut")
    monkeypatch.undo()
    kept = catalog.path.read_bytes() + b"".join(_asides(catalog))
    assert TORN in kept
    assert OTHER in kept, "another program's acknowledged append was cut off"


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE alembic_version SET version_num = '0003'",
        "UPDATE alembic_version SET version_num = '0005'",
        "UPDATE alembic_version SET version_num = 'zzzz'",
        "DELETE FROM alembic_version",
        "INSERT INTO alembic_version VALUES ('0003')",
    ],
)
def test_an_older_file_whose_migration_record_lies_is_damaged_not_old_schema(tmp_path: Path, statement: str) -> None:
    """user_version 4 and 0004's objects, but Alembic's record names another revision (or
    none, or two): Alembic migrates from its record, so the writable open's migration fails
    and the file is set aside.  Doctor and a read-only handle called it 'old schema' (info,
    healthy) all the same; they must call it damaged, as the writable open finds it."""
    path = _old(tmp_path)
    _edit(path, statement)
    _damaged_read_only(tmp_path)


def test_a_line_another_tool_appends_during_a_rewrite_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another tool appends a whole line while a delete's replacement is being fsynced: the
    rename must not drop it (the rewrite is tried again from the file as it then is)."""
    catalog = MemoryCatalog(tmp_path)
    for n in range(20):
        catalog.add(f"note {n} about caching", run_id="keep" if n % 2 else "victim")
    assert len(catalog.search("caching", limit=100)) == 20
    real_fsync, real_commit = Replacement._fsync, Replacement.commit
    pending: list[bytes] = []
    once = [OTHER]

    def commit(self: Replacement, **options: object) -> object:
        if self.path == catalog.path and once:
            pending.append(once.pop())
        return real_commit(self, **options)  # type: ignore[arg-type]

    def fsync(self: Replacement) -> None:
        real_fsync(self)
        if pending:  # the commit's own fsync: the file was read to its end long before
            with open(catalog.path, "ab") as handle:
                handle.write(pending.pop())

    monkeypatch.setattr(Replacement, "commit", commit)
    monkeypatch.setattr(Replacement, "_fsync", fsync)
    assert catalog.delete_by_run_id("victim") == 10
    monkeypatch.undo()
    data = catalog.path.read_bytes()
    assert OTHER in data, "another tool's line was dropped by the rename"
    assert b'"victim"' not in data
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for query in ("caching", "another program", "note"):
        assert catalog.search(query, limit=100) == scan.search(query, limit=100), query
    assert catalog.check_index().equal


def test_a_quarantine_tried_again_appends_each_entry_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewrite is tried again when another tool appended meanwhile; the entries already
    appended to quarantine.jsonl on the first try are not appended a second time."""
    catalog = MemoryCatalog(tmp_path)
    for n in range(10):
        catalog.add(f"note {n} about caching", branch_name="gone" if n % 2 else "kept")
    real_fsync, real_commit = Replacement._fsync, Replacement.commit
    pending: list[bytes] = []
    once = [OTHER]

    def commit(self: Replacement, **options: object) -> object:
        if self.path == catalog.path and once:
            pending.append(once.pop())
        return real_commit(self, **options)  # type: ignore[arg-type]

    def fsync(self: Replacement) -> None:
        real_fsync(self)
        if pending:
            with open(catalog.path, "ab") as handle:
                handle.write(pending.pop())

    monkeypatch.setattr(Replacement, "commit", commit)
    monkeypatch.setattr(Replacement, "_fsync", fsync)
    assert catalog.quarantine_by_branch("gone", "review") == 5
    monkeypatch.undo()
    assert not once and OTHER in catalog.path.read_bytes()
    quarantined = [entry.memory_id for entry in catalog.list_quarantined(limit=100)]
    assert len(quarantined) == len(set(quarantined)) == 5
    assert catalog.quarantine_path.read_bytes().count(b"\n") == 5
    assert b'"gone"' not in catalog.path.read_bytes()


@pytest.mark.xfail(
    strict=True,
    reason="known: no system call truncates a file only if it did not change, so another program's "
    "append between the changed-check and the ftruncate right after it is cut off (two adjacent calls)",
)
def test_an_append_between_the_changed_check_and_the_cut_is_never_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _seed(tmp_path)
    real_truncate = group_commit.os.ftruncate
    armed: list[bool] = [True]

    def ftruncate(fd: int, length: int) -> None:
        if armed:
            armed.clear()
            with open(catalog.path, "ab") as handle:
                handle.write(b"\n" + OTHER)
        real_truncate(fd, length)

    monkeypatch.setattr(group_commit.os, "ftruncate", ftruncate)
    catalog.add("after the cut")
    monkeypatch.undo()
    kept = catalog.path.read_bytes() + b"".join(_asides(catalog))
    assert TORN in kept
    assert OTHER in kept, "another program's acknowledged append was cut off"
