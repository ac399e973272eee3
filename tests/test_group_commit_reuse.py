"""Group commit keeps an append's descriptors for the next one, and drops them whenever they may mislead.

Reusing the two descriptors (the file's and its sync lock's) saves two opens and two
closes per add.  Each test here puts one way a kept descriptor could write to the wrong
file, hear of the wrong error, or outlive its owner in front of an add, and checks what
the add does then.  Also: the two shortcuts of the commit (an unchanged record is not
parsed again; a lone writer leaves the record unwritten).
"""

from __future__ import annotations

import errno
import gc
import os
from pathlib import Path
from typing import Any

import pytest

import memstore.group_commit
from memstore.catalog import MemoryCatalog
from memstore.errors import StorageError
from memstore.files import FileLock
from memstore.group_commit import GroupCommit, sync_lock_path

LINE = b'{"n": 1}\n'


class OpenCounting:
    """``os`` for memstore.group_commit and memstore.files, counting opens of the appended file."""

    def __init__(self, path: Path, *, fail_fsync: bool = False) -> None:
        self.path = str(path)
        self.opens = 0
        self.fail_fsync = fail_fsync

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == self.path:
            self.opens += 1
        return os.open(path, *args, **kwargs)

    def fsync(self, fd: int) -> None:
        if self.fail_fsync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)


@pytest.fixture
def group(tmp_path: Path) -> tuple[GroupCommit, FileLock]:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b'{"seed": 0}\n')
    return GroupCommit(path), FileLock(tmp_path / "memory.lock")


def _add(group: GroupCommit, lock: FileLock, data: bytes = LINE) -> None:
    with lock:
        pending = group.append(data)
    with pending:
        pending.commit()


def _counting(monkeypatch: pytest.MonkeyPatch, path: Path, **kwargs: Any) -> OpenCounting:
    stand_in = OpenCounting(path, **kwargs)
    monkeypatch.setattr(memstore.group_commit, "os", stand_in)
    monkeypatch.setattr(memstore.files, "os", stand_in)
    return stand_in


def _fds_into(root: Path) -> list[str]:
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and "/index/" not in target:
            held.append(target)
    return held


def test_consecutive_adds_open_the_file_once(
    group: tuple[GroupCommit, FileLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    commit, lock = group
    counting = _counting(monkeypatch, commit.path)
    for _ in range(5):
        _add(commit, lock)
    assert counting.opens == 1
    assert commit.path.read_bytes().count(b"\n") == 6


def test_a_rewrite_between_adds_sends_the_next_add_to_the_new_file(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("kept")
    catalog.add("dropped", branch_name="gone")
    assert catalog.delete_by_branch("gone") == 1  # a new file renamed over the one the descriptor holds
    catalog.add("after the rewrite")
    assert sorted(e.content for e in MemoryCatalog(tmp_path, use_index=False, readonly=True).list()) == [
        "after the rewrite",
        "kept",
    ]


def test_a_file_replaced_by_another_tool_is_reopened(group: tuple[GroupCommit, FileLock]) -> None:
    commit, lock = group
    _add(commit, lock)
    replaced = commit.path.with_name("saved-by-an-editor")
    replaced.write_bytes(b'{"seed": 9}\n')
    os.replace(replaced, commit.path)
    _add(commit, lock, b'{"n": 2}\n')
    assert commit.path.read_bytes() == b'{"seed": 9}\n{"n": 2}\n'


def test_a_symlink_planted_over_the_file_is_refused_not_written_through(
    group: tuple[GroupCommit, FileLock], tmp_path: Path
) -> None:
    commit, lock = group
    _add(commit, lock)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not memstore's\n")
    os.replace(commit.path, tmp_path / "moved.jsonl")
    commit.path.symlink_to(outside)
    with pytest.raises(StorageError):
        _add(commit, lock, b'{"n": 2}\n')
    assert outside.read_bytes() == b"not memstore's\n"
    assert (tmp_path / "moved.jsonl").read_bytes() == b'{"seed": 0}\n' + LINE  # nothing through the old descriptor


def test_a_sync_lock_hard_linked_to_the_file_after_an_add_never_gets_a_record_written_into_it(
    group: tuple[GroupCommit, FileLock],
) -> None:
    """The kept sync descriptor is checked by name each time: a link count of two means "not ours"."""
    commit, lock = group
    _add(commit, lock)
    sync_path = sync_lock_path(commit.path)
    os.unlink(sync_path)
    os.link(commit.path, sync_path)  # the sync lock's name now leads to the catalog itself
    _add(commit, lock, b'{"n": 2}\n')
    data = commit.path.read_bytes()
    assert data == b'{"seed": 0}\n' + LINE + b'{"n": 2}\n'
    assert os.stat(sync_path).st_ino != os.stat(commit.path).st_ino  # replaced by a file of memstore's own


def test_a_deleted_sync_lock_is_recreated_rather_than_kept_open(group: tuple[GroupCommit, FileLock]) -> None:
    commit, lock = group
    _add(commit, lock)
    sync_path = sync_lock_path(commit.path)
    os.unlink(sync_path)
    _add(commit, lock, b'{"n": 2}\n')
    assert sync_path.is_file()  # writers opening it by name and this one share one record again


def test_a_forked_child_opens_its_own_descriptors(group: tuple[GroupCommit, FileLock]) -> None:
    """A child shares the parent's open file description and its error cursor: it must not reuse it.

    A real fork: the kept descriptors point at /dev/null in the child, so a child that took
    them for its own (its process id not refreshed) would write its line nowhere, or fail.
    """
    commit, lock = group
    _add(commit, lock)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            _add(commit, lock, b'{"n": "child"}\n')
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _add(commit, lock, b'{"n": "parent"}\n')  # the parent's kept descriptors still serve it
    assert commit.path.read_bytes().endswith(b'{"n": 1}\n{"n": "child"}\n{"n": "parent"}\n')


def test_descriptors_of_a_failed_fsync_are_closed_not_kept(
    group: tuple[GroupCommit, FileLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    commit, lock = group
    _add(commit, lock)
    counting = _counting(monkeypatch, commit.path, fail_fsync=True)
    with pytest.raises(StorageError):
        _add(commit, lock, b'{"n": 2}\n')
    counting.fail_fsync = False
    _add(commit, lock, b'{"n": 3}\n')
    assert counting.opens == 1  # the failed append's descriptor was not used again


def test_kept_descriptors_close_when_the_catalog_is_collected(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("one")
    assert _fds_into(tmp_path)  # kept for the next add
    del catalog
    gc.collect()
    assert _fds_into(tmp_path) == []


def test_a_lone_writer_leaves_the_sync_record_unwritten(group: tuple[GroupCommit, FileLock]) -> None:
    """Its claim would only cover its own bytes, which nobody else waits on."""
    commit, lock = group
    _add(commit, lock)
    _add(commit, lock, b'{"n": 2}\n')
    assert sync_lock_path(commit.path).read_bytes()[:124].strip(b"\0") == b""


def test_a_record_changed_after_the_append_is_read_again(
    group: tuple[GroupCommit, FileLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes marked lost by another writer's failed fsync after this append fail it, though its own fsync succeeds."""
    from memstore.sync_record import SyncRecord

    commit, lock = group
    with lock:
        pending = commit.append(LINE)
    fd = os.open(commit.sync_path, os.O_RDWR)
    try:
        record = SyncRecord.read(fd) or SyncRecord()
        record.mark_lost(pending.dev, pending.ino, 0, pending.end)
        record.write(fd)
    finally:
        os.close(fd)
    with pytest.raises(StorageError), pending:
        pending.commit()


def test_a_rewrite_leaves_no_descriptor_of_the_replaced_file_open(tmp_path: Path) -> None:
    """A kept descriptor of the old file would hold all its blocks, and the next add would free them under the lock."""
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("kept")
    catalog.add("dropped", branch_name="gone")
    catalog.delete_by_branch("gone")
    assert [fd for fd in _fds_into(tmp_path) if fd.endswith("(deleted)")] == []


def test_a_stale_kept_descriptor_is_closed_after_the_writer_lock_is_released(
    group: tuple[GroupCommit, FileLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's rewrite replaced the file: closing the old descriptor frees the old file."""
    commit, lock = group
    _add(commit, lock)
    replaced = commit.path.with_name("rewritten")
    replaced.write_bytes(b'{"seed": 1}\n')
    os.replace(replaced, commit.path)
    closed_while_locked = []
    real_close = memstore.group_commit._Descriptors.close

    def close(self: memstore.group_commit._Descriptors) -> None:
        if self.fd >= 0:
            closed_while_locked.append(getattr(lock._local, "fd", None) is not None)
        real_close(self)

    monkeypatch.setattr(memstore.group_commit._Descriptors, "close", close)
    _add(commit, lock, b'{"n": 2}\n')
    assert closed_while_locked == [False]
    assert commit.path.read_bytes() == b'{"seed": 1}\n{"n": 2}\n'


def test_an_unchanged_record_and_chain_are_not_parsed_again(
    group: tuple[GroupCommit, FileLock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block a writer's own last append left is what its next append reads: nothing to parse."""
    from memstore.append_chain import AppendChain
    from memstore.sync_record import SyncRecord

    commit, lock = group
    _add(commit, lock)
    parsed: list[str] = []
    real_record, real_chain = SyncRecord.unpack.__func__, AppendChain.unpack.__func__  # type: ignore[attr-defined]

    def record_unpack(cls: type[SyncRecord], data: bytes) -> SyncRecord | None:
        parsed.append("record")
        return real_record(cls, data)  # type: ignore[no-any-return]

    def chain_unpack(cls: type[AppendChain], data: bytes) -> AppendChain | None:
        parsed.append("chain")
        return real_chain(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(SyncRecord, "unpack", classmethod(record_unpack))
    monkeypatch.setattr(AppendChain, "unpack", classmethod(chain_unpack))
    for n in range(3):
        _add(commit, lock, b'{"n": %d}\n' % n)
    assert parsed == []


def test_a_chain_another_handle_extended_is_read_again_and_extended(tmp_path: Path) -> None:
    """Two handles taking turns keep one chain: each parses what the other wrote instead of its own last one."""
    from memstore.append_chain import read_chain

    path = tmp_path / "memory.jsonl"
    path.write_bytes(b'{"seed": 0}\n')
    lock = FileLock(tmp_path / "memory.lock")
    first, second = GroupCommit(path), GroupCommit(path)
    _add(first, lock)
    chain = read_chain(first.sync_path)
    for n in range(4):
        _add(second if n % 2 == 0 else first, lock, b'{"n": %d}\n' % n)
    later = read_chain(first.sync_path)
    assert chain is not None and later is not None
    assert later.nonce == chain.nonce and later.start_size == chain.start_size
    assert later.ends_at(os.stat(path))

