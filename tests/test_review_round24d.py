"""Review round 24d: 'old schema' for a read-only handle, the ctime probe of a rewrite, the marks memos."""

from __future__ import annotations

import gc
import itertools
import logging
import os
import sqlite3
import types
import weakref
from pathlib import Path

import pytest

from memstore import files
from memstore.catalog import MemoryCatalog
from memstore.doctor import diagnose
from memstore.index import terms
from tests.test_index_internals import _as_0004, index_path
from tests.test_index_terms import _marks_by_regex
from tests.test_rewrite_follow_skip import _answers_as_a_scan, _Follow, _seed


def _old_schema(root: Path, *, entries: int = 1, old: bool = True) -> None:
    catalog = MemoryCatalog(root)
    for n in range(entries):
        catalog.add(f"entry {n} about caching {'x' * 200}", tags=["ci"])
    assert len(catalog.search("entry", limit=1000)) == entries
    del catalog
    if old:
        _as_0004(index_path(root))


def _cut_tail(root: Path) -> None:
    """Cut the index's last tenth, whole pages: its word index points past the end."""
    path = index_path(root)
    os.truncate(path, path.stat().st_size * 9 // 10 // 4096 * 4096)


def test_a_truncated_current_index_is_damaged_to_doctor(tmp_path: Path) -> None:
    """The control for the next test: at the current schema the same cut is found."""
    _old_schema(tmp_path, entries=300, old=False)
    _cut_tail(tmp_path)
    assert [finding.kind for finding in diagnose(tmp_path).findings] == ["damaged-index"]


def test_a_truncated_index_at_an_older_schema_is_damaged_to_doctor(tmp_path: Path) -> None:
    """At 0004 only the origin row was read (schema_problem is skipped), so the cut file was
    'old schema' (info, healthy) where at 0005 it is damaged.  An older file now passes
    SQLite's quick_check before it is called 'old schema' (or migrated)."""
    _old_schema(tmp_path, entries=300)
    _cut_tail(tmp_path)
    assert [finding.kind for finding in diagnose(tmp_path).findings] == ["damaged-index"]


def test_a_read_only_store_that_found_an_old_schema_is_freed_without_the_cycle_collector(tmp_path: Path) -> None:
    """The back-off kept the raised exception itself: its traceback's frames hold the store that
    asked, a cycle that keeps every read-only handle (and its open files) alive until a gc pass.
    Before 3c4d130 it kept only the message."""
    _old_schema(tmp_path)
    was_enabled = gc.isenabled()
    gc.disable()
    logging.disable(logging.WARNING)  # a captured log record holds its arguments, the exception too
    try:
        reader = MemoryCatalog(tmp_path, readonly=True)
        assert reader.health().index.state == "old schema"
        assert len(reader.search("entry")) == 1
        gone = weakref.ref(reader)
        del reader
        assert gone() is None
    finally:
        logging.disable(logging.NOTSET)
        if was_enabled:
            gc.enable()


def test_doctor_calls_a_damaged_index_at_an_older_schema_damaged(tmp_path: Path) -> None:
    """A file at schema 0004 was checked only for its origin, not for its objects: with its word
    index dropped and a foreign table added, doctor said healthy ('migrated on the next use'),
    while the next writable open failed to migrate it and set it aside as damaged.  Its objects
    are now compared with what the migrations left at 0004 (``old_schemas.py``)."""
    _old_schema(tmp_path)
    conn = sqlite3.connect(index_path(tmp_path), isolation_level=None)
    conn.execute("DROP TABLE doc_fts")
    conn.execute("CREATE TABLE planted(x)")
    conn.close()
    report = diagnose(tmp_path)
    assert not report.healthy, [finding.to_dict() for finding in report.findings]


def test_a_refused_ctime_probe_leaves_the_delete_done_and_the_index_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EPERM from the probe's chmod (a file system that refuses it) only drops the shortcut:
    the delete is done, no temp file stays and the follow-up reads the new file back."""
    catalog = _seed(tmp_path, 2000, filler=200)
    before = os.stat(catalog.path).st_mode & 0o7777

    def refuse(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "fchmod", refuse)
    follow = _Follow(monkeypatch)
    assert catalog.delete_by_branch("gone") == len(range(7, 2000, 7))
    assert follow.plans[0].renamed is None and follow.taken == [False]
    assert not [name for name in os.listdir(catalog.path.parent) if name.endswith(".tmp")]
    assert os.stat(catalog.path).st_mode & 0o7777 == before
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, MemoryCatalog(tmp_path))
    _answers_as_a_scan(tmp_path, catalog)


def test_the_ctime_probe_keeps_every_mode_bit(tmp_path: Path) -> None:
    """A chmod to the mode the file has: setuid, setgid and sticky bits stay as they were."""
    path = tmp_path / "probe"
    path.write_bytes(b"x")
    for mode in (0o600, 0o644, 0o2640, 0o4755, 0o1644, 0o000):
        os.chmod(path, mode)
        fd = os.open(path, os.O_RDONLY)
        try:
            files.ctime_moves_at_once(fd)
        finally:
            os.close(fd)
        assert os.stat(path).st_mode & 0o7777 == mode, oct(mode)


def test_the_ctime_probe_does_not_undo_a_chmod_of_the_new_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe read the mode and set it again on the file already in place: a user's
    ``chmod 600`` landing between the two (privacy tightened right as a delete finished) was
    silently reverted to the old mode.  It now probes the temp file, which nobody else holds."""
    catalog = _seed(tmp_path, 200, filler=50)
    real_replace, real_fstat = files.os.replace, files.os.fstat
    renamed: list[bool] = []

    def replace(src: object, dst: object) -> None:
        real_replace(src, dst)  # type: ignore[arg-type]
        renamed.append(True)

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if renamed == [True]:
            renamed.append(False)
            os.chmod(catalog.path, 0o600)  # another program, right after the probe's first stat
        return st

    monkeypatch.setattr(files.os, "replace", replace)
    monkeypatch.setattr(files.os, "fstat", fstat)
    catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert renamed == [True, False]
    assert os.stat(catalog.path).st_mode & 0o777 == 0o600


def test_doctor_on_an_index_awaiting_its_migration_warns_of_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Doctor calls it healthy (info); the store's back-off logged 'index unavailable' as a warning,
    which the CLI prints on stderr as ``memstore: warning: ...`` beside 'healthy'."""
    _old_schema(tmp_path)
    with caplog.at_level(logging.INFO, logger="memstore"):
        assert diagnose(tmp_path).healthy
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
    assert any("old" in record.getMessage() for record in caplog.records)


def test_both_marks_memos_stay_bounded_and_equal_the_regex_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``_remember`` serves both memos: past the bound each starts over (never more than
    MARKS_CACHED keys), and every answer, remembered or not, equals the plain definition."""
    monkeypatch.setattr(terms, "MARKS_CACHED", 64)
    monkeypatch.setattr(terms, "_marks_cache", {})
    monkeypatch.setattr(terms, "_run_marks", {})
    marks = sorted(terms.MARK_CHARS)[:12]
    texts = [f"a{''.join(run)}b {run[0]}" for run in itertools.product(marks, repeat=3)]
    for text in texts + texts[::7]:
        assert terms.marks_text(text) == _marks_by_regex(text), text
        assert 0 < len(terms._marks_cache) <= 64 and 0 < len(terms._run_marks) <= 64


@pytest.mark.parametrize(
    ("steps", "fine"),
    [
        ((4_000_000,), False),
        ((1_000_000,), False),
        ((2_000,), True),
        ((9_000_000, 800_000, 9_000_000, 2_000), True),  # a slow second step (GIL, preemption): tried again
        ((9_000_000, 800_000, 0), False),  # tried again: a coarse pair stays equal
        ((9_000_000, 1_000_000), False),  # slow every time: no shortcut
        ((9_000_000, 2_000), True),
    ],
)
def test_a_ctime_that_moved_by_a_whole_tick_is_coarse(
    monkeypatch: pytest.MonkeyPatch, steps: tuple[int, ...], fine: bool
) -> None:
    """A probe preempted across a clock tick in both pairs saw a coarse ctime move each time and
    said "fine" (46 in 1.5M probes on a loaded ext2): a coarse ctime moves by whole ticks
    (1 ms or more), a multigrain one by the µs between the calls.  A slow second step proves
    nothing either way (a thread holding the GIL made it slow on a fine ctime), so the probe is
    tried again, up to 3 times."""
    ctime, moves = [1_000_000_000_000], itertools.cycle(steps)
    real_fstat, real_fchmod = os.fstat, os.fchmod

    def fstat(fd: int) -> object:
        return types.SimpleNamespace(st_mode=0o100644, st_ctime_ns=ctime[0]) if fd == -1 else real_fstat(fd)

    def fchmod(fd: int, mode: int) -> None:
        if fd != -1:
            return real_fchmod(fd, mode)
        assert mode == 0o644
        ctime[0] += next(moves)  # the clock read by the change: a tick later, or µs later
        return None

    monkeypatch.setattr(files.os, "fstat", fstat)
    monkeypatch.setattr(files.os, "fchmod", fchmod)
    assert files.ctime_moves_at_once(-1) is fine
