"""Review 25b: the rewrite's held index transaction (935fd93) and its retries (e41804d, 4f0ebb0).

Each test forces one exit path of ``MemoryCatalog._rewrite_once`` between taking the index's
write transaction and the follow-up, then asks: did the call end with memstore's own error
(or none), is the index's write lock and the handle's mutex free again, and does the index
answer exactly what a scan of the file does.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from memstore import files
from memstore.catalog import MemoryCatalog
from memstore.group_commit import GroupCommit
from memstore.index.catalog_index import CatalogIndex
from memstore.jsonl import encode_entries
from tests.killed_child import kill_when_ready
from tests.test_rewrite_held_follow import _seed


def _gone(count: int) -> int:
    return len([n for n in range(count) if n % 7 == 3])


def _as_a_scan(root: Path) -> None:
    fresh = MemoryCatalog(root)
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ("note", "word3", "word0 note"):
        assert fresh.search(query, limit=10_000) == scan.search(query, limit=10_000), query
    assert fresh.check_index().equal


def _index_write_is_free(catalog: MemoryCatalog) -> None:
    """Another connection gets the index's write lock at once, and another thread this handle's mutex."""
    index = catalog._index.index()
    assert index is not None
    other = sqlite3.connect(index.file.path, isolation_level=None, timeout=0.5)
    try:
        other.execute("BEGIN IMMEDIATE")  # raises 'database is locked' while a transaction is held
        other.execute("ROLLBACK")
    finally:
        other.close()
    answered = threading.Event()

    def search() -> None:
        catalog.search("note", limit=1)
        answered.set()

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    thread.join(5)
    assert answered.is_set(), "the handle's index mutex is still held"


@pytest.mark.parametrize("how", ["reindex --full", "set aside"])
def test_index_file_swapped_between_the_hold_and_the_follow_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Another handle (another process alike) swaps the index file in after the hold: the
    follow-up reconnects, and the held transaction's connection is closed by then.  Releasing
    it must not raise (it raised sqlite3.ProgrammingError out of delete_by_branch, after the
    entries were removed)."""
    catalog = _seed(tmp_path, 600)
    other = MemoryCatalog(tmp_path)
    assert other.search("note", limit=1)
    real_replace = files.os.replace

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path:
            index = other._index.index()
            assert index is not None
            if how == "reindex --full":
                other.reindex(full=True)
            else:
                index.file.set_aside("review 25b")

    monkeypatch.setattr(files.os, "replace", replace)
    assert catalog.delete_by_branch("gone") == _gone(600)
    monkeypatch.undo()
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def test_index_damaged_during_the_follow_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follow-up finds the index damaged: it is set aside (its connection closed) and the
    delete, done and durable, returns normally instead of raising sqlite3.ProgrammingError."""
    catalog = _seed(tmp_path, 600)

    def damaged(*_args: Any) -> bool:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(CatalogIndex, "_apply_rewrite", damaged)
    assert catalog.delete_by_branch("gone") == _gone(600)
    monkeypatch.undo()
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_error_after_the_lock_but_before_the_follow_up_releases_the_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """An error in the cleanup between the writer lock and the follow-up (a Ctrl-C while the old
    file's descriptors close, which frees its blocks and takes a while) left the index's write
    transaction open and the handle's mutex held: every other writer of the index waited its
    busy timeout and gave up, and every other thread of the handle waited forever."""
    catalog = _seed(tmp_path, 600)
    real_release = GroupCommit.release_descriptors
    raised: list[bool] = []

    def release_descriptors(group: GroupCommit) -> None:
        real_release(group)
        if not raised:
            raised.append(True)
            raise error(5, "interrupted") if error is OSError else error()

    monkeypatch.setattr(GroupCommit, "release_descriptors", release_descriptors)
    with pytest.raises(error):
        catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert raised
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)
    assert catalog.delete_by_branch("gone") == 0


def _foreign_line(catalog: MemoryCatalog, n: int, branch: str) -> bytes:
    entry = catalog._new_entry(f"foreign {n} word9", (), branch, None)
    return encode_entries([entry])


@pytest.mark.parametrize("quarantine", [False, True])
def test_a_tool_appending_through_every_try_fails_the_rewrite_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quarantine: bool
) -> None:
    """Another tool appends during every try's final fsync: after its tries the rewrite fails
    with memstore's error, removes nothing, loses none of the tool's lines, leaves no temp file
    and no held transaction; quarantine's records hold each moved entry once (both files, never
    neither)."""
    from memstore import catalog_rewrite
    from memstore.errors import MemstoreError

    catalog = _seed(tmp_path, 600)
    before = catalog.path.read_bytes()
    real_check = catalog_rewrite._not_changed
    appended: list[bytes] = []

    def not_changed(path: Path, fd: int, st: Any) -> None:
        line = _foreign_line(catalog, len(appended), "kept")
        with open(catalog.path, "ab") as handle:  # no lock: another tool
            handle.write(line)
        appended.append(line)
        real_check(path, fd, st)

    monkeypatch.setattr(catalog_rewrite, "_not_changed", not_changed)
    with pytest.raises(MemstoreError):
        if quarantine:
            catalog.quarantine_by_branch("gone", "review")
        else:
            catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert len(appended) == 3
    assert catalog.path.read_bytes() == before + b"".join(appended)
    assert [p.name for p in catalog.path.parent.iterdir() if ".tmp" in p.name or "rewrite" in p.name] == []
    if quarantine:
        quarantined = catalog.list_quarantined(limit=10_000)
        assert len(quarantined) == _gone(600)
        assert len({entry.memory_id for entry in quarantined}) == _gone(600)
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def test_quarantine_retry_moves_an_entry_of_the_branch_another_tool_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try is refused by another tool's append of one more entry of the branch, and a
    byte-identical copy of one already moved: the retry moves just those two more."""
    from memstore import catalog_rewrite

    catalog = _seed(tmp_path, 600)
    gone_line = next(line for line in catalog.path.read_bytes().splitlines(keepends=True) if b'"gone"' in line)
    real_check = catalog_rewrite._not_changed
    tries: list[int] = []

    def not_changed(path: Path, fd: int, st: Any) -> None:
        if not tries:
            with open(catalog.path, "ab") as handle:
                handle.write(_foreign_line(catalog, 0, "gone") + gone_line)
        tries.append(1)
        real_check(path, fd, st)

    monkeypatch.setattr(catalog_rewrite, "_not_changed", not_changed)
    assert catalog.quarantine_by_branch("gone", "review") == _gone(600) + 2
    monkeypatch.undo()
    assert len(tries) == 2
    quarantined = catalog.list_quarantined(limit=10_000)
    assert len(quarantined) == _gone(600) + 2
    assert sum(1 for entry in quarantined if entry.content.startswith("foreign")) == 1
    assert MemoryCatalog(tmp_path, use_index=False, readonly=True).search("gone", limit=10) == []
    assert all(entry.branch_name != "gone" for entry in catalog.list(limit=10_000))
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def test_quarantine_called_again_after_it_was_refused_records_each_entry_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore import catalog_rewrite
    from memstore.catalog_rewrite import FileReplacedError

    catalog = _seed(tmp_path, 300)
    real_check = catalog_rewrite._not_changed

    def not_changed(path: Path, fd: int, st: Any) -> None:
        with open(catalog.path, "ab") as handle:
            handle.write(_foreign_line(catalog, 0, "kept"))
        real_check(path, fd, st)

    monkeypatch.setattr(catalog_rewrite, "_not_changed", not_changed)
    with pytest.raises(FileReplacedError):
        catalog.quarantine_by_branch("gone", "review")
    monkeypatch.undo()
    assert catalog.quarantine_by_branch("gone", "review") == _gone(300)  # the caller tries again: EAGAIN
    quarantined = catalog.list_quarantined(limit=10_000)
    assert len(quarantined) == len({entry.memory_id for entry in quarantined}) == _gone(300)


_KILLED_CHILD = """
import os, sys, time
from pathlib import Path
from memstore import catalog_rewrite, files
from memstore.catalog import MemoryCatalog

root, where = Path(sys.argv[1]), sys.argv[2]
catalog = MemoryCatalog(root)
assert catalog.search("note", limit=1)

def stop_here():
    (root / "READY").write_text("1")
    time.sleep(120)

real_replace, real_check = files.os.replace, catalog_rewrite._not_changed

def replace(src, dst):
    real_replace(src, dst)
    if where == "after replace" and Path(dst) == catalog.path:
        stop_here()

def not_changed(path, fd, st):
    real_check(path, fd, st)
    if where == "before replace":
        stop_here()

files.os.replace = replace
catalog_rewrite._not_changed = not_changed
catalog.delete_by_branch("gone")
"""


@pytest.mark.parametrize("where", ["before replace", "after replace"])
def test_a_delete_killed_while_it_holds_the_index_transaction(tmp_path: Path, where: str) -> None:
    """SIGKILL while the index's write transaction is held: the next process answers exactly,
    and the store takes writes (another delete) at once."""
    _seed(tmp_path, 900)
    kill_when_ready(_KILLED_CHILD, str(tmp_path), where, ready=tmp_path / "READY")
    _as_a_scan(tmp_path)
    catalog = MemoryCatalog(tmp_path)
    expected = 0 if where == "after replace" else _gone(900)
    assert catalog.delete_by_branch("gone") == expected
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def test_threads_of_the_same_handle_during_a_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Other threads of the deleting handle search, add, reindex and delete while it holds the
    index's transaction: none deadlocks, every add is kept, the index equals a scan."""
    catalog = _seed(tmp_path, 900)
    real_replace = files.os.replace
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    added: list[str] = []

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported below
                errors.append(exc)

        return run

    def add() -> None:
        for n in range(20):
            added.append(catalog.add(f"thread {n} word3", branch_name="gone" if n % 2 else "kept").memory_id)

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path and not threads:
            for work in (
                add,
                lambda: catalog.search("word3", limit=50),
                lambda: catalog.reindex(),
                lambda: catalog.delete_by_branch("gone"),
            ):
                threads.append(threading.Thread(target=guarded(work), daemon=True))
                threads[-1].start()
            threads[0].join(0.2)

    monkeypatch.setattr(files.os, "replace", replace)
    catalog.delete_by_branch("gone")
    for thread in threads:
        thread.join(30)
    monkeypatch.undo()
    assert not [thread for thread in threads if thread.is_alive()], "deadlock"
    assert errors == []
    ids = {entry.memory_id for entry in MemoryCatalog(tmp_path, use_index=False, readonly=True).list(limit=10_000)}
    kept = [memory_id for n, memory_id in enumerate(added) if n % 2 == 0]
    assert set(kept) <= ids
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


def _fork_during_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, float]:
    """Fork while another thread's delete holds the index (after its replace); the child searches
    through the same handle.  Returns the child's wait status and its search's seconds."""
    import os
    import signal
    import time

    catalog = _seed(tmp_path, 900)
    real_replace = files.os.replace
    inside, go = threading.Event(), threading.Event()

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path:
            inside.set()
            go.wait(30)

    monkeypatch.setattr(files.os, "replace", replace)
    deleting = threading.Thread(target=lambda: catalog.delete_by_branch("gone"), daemon=True)
    deleting.start()
    assert inside.wait(30)
    seconds = tmp_path / "child-seconds"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(20)
        same = False
        try:
            scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
            started = time.monotonic()
            same = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
            seconds.write_text(str(time.monotonic() - started))
        finally:
            os._exit(0 if same else 3)
    go.set()
    deleting.join(30)
    monkeypatch.undo()
    _, status = os.waitpid(pid, 0)
    _as_a_scan(tmp_path)
    return status, float(seconds.read_text()) if seconds.exists() else -1.0


def test_a_child_forked_while_a_delete_holds_the_index_searches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies the handle's mutex as the deleting thread holds it (from before the replace
    to the end of the follow-up): the child's first search through the handle waited forever."""
    import os

    status, _seconds = _fork_during_delete(tmp_path, monkeypatch)
    assert os.WIFEXITED(status), f"the child was killed by signal {os.WTERMSIG(status)} (it waited forever)"
    assert os.WEXITSTATUS(status) == 0


def test_a_child_forked_while_a_delete_holds_the_index_answers_promptly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    status, seconds = _fork_during_delete(tmp_path, monkeypatch)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert 0 <= seconds < 5


@pytest.mark.parametrize("error", [KeyboardInterrupt, sqlite3.OperationalError])
def test_an_error_right_after_the_hold_began_rolls_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """hold_write's BEGIN IMMEDIATE succeeded and the next statement (restoring the busy timeout)
    raised: the mutex was released with the transaction still open on the handle's connection,
    which kept the index's write lock from every other writer for the handle's life."""
    from memstore.index import db
    from memstore.index.settings import BUSY_TIMEOUT_MS

    catalog = _seed(tmp_path, 300)
    real_execute = db.LockedConnection.execute
    last: list[str] = [""]
    raised: list[bool] = []

    def execute(conn: Any, sql: str, *args: Any) -> Any:
        if sql == f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}" and last[0] == "BEGIN IMMEDIATE" and not raised:
            raised.append(True)
            raise error("interrupted")
        last[0] = sql
        return real_execute(conn, sql, *args)

    monkeypatch.setattr(db.LockedConnection, "execute", execute)
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            catalog.delete_by_branch("gone")
    else:  # the hold is given up and the follow-up runs as before
        assert catalog.delete_by_branch("gone") == _gone(300)
    monkeypatch.undo()
    assert raised
    _index_write_is_free(catalog)
    _as_a_scan(tmp_path)


@pytest.mark.parametrize("readonly", [False, True])
def test_a_reader_between_the_replace_and_the_follow_up_answers_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readonly: bool
) -> None:
    """Another handle (the CLI's reads are read-only) searching between the replace and the
    follow-up answers what a scan of the new file does, and nothing waits for ever."""
    catalog = _seed(tmp_path, 900)
    reader = MemoryCatalog(tmp_path, readonly=readonly)
    assert reader.search("note", limit=1)
    real_replace = files.os.replace
    answers: list[Any] = []
    threads: list[threading.Thread] = []

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == catalog.path and not threads:
            threads.append(threading.Thread(target=lambda: answers.append(reader.search("word3", limit=10_000))))
            threads[0].start()
            threads[0].join(0.3)

    monkeypatch.setattr(files.os, "replace", replace)
    catalog.delete_by_branch("gone")
    threads[0].join(30)
    monkeypatch.undo()
    assert not threads[0].is_alive()
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert answers == [scan.search("word3", limit=10_000)]
    assert reader.search("word0 note", limit=10_000) == scan.search("word0 note", limit=10_000)
    _as_a_scan(tmp_path)
