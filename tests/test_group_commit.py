"""Group commit: shared fsyncs, and every way one could acknowledge bytes that are not durable.

Appends are split the way the catalog uses them (append under the writer lock, commit
after it), so each test can order writers exactly.  ``memstore.group_commit``'s ``os``
is swapped for a stand-in that counts fsyncs and can fail one, or hang in it.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memstore.files
import memstore.group_commit
from memstore.catalog import MemoryCatalog
from memstore.errors import StorageError
from memstore.files import FileLock
from memstore.group_commit import GroupCommit, PendingAppend, sync_lock_path
from memstore.sync_record import NEVER, RECORD_BYTES, SyncRecord, Verdict

SPAWN = multiprocessing.get_context("spawn")


class CountingOS:
    """``os`` for memstore.group_commit: counts fsyncs, fails the ones listed in ``fail``.

    ``during_fsync``, when set, runs once inside the next fsync (another writer acting meanwhile).
    """

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fsyncs = 0
        self.fail = fail or set()
        self.during_fsync: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        number = self.fsyncs
        if self.during_fsync is not None:
            action, self.during_fsync = self.during_fsync, None
            action()
        if number in self.fail:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingOS:
    stand_in = CountingOS()
    monkeypatch.setattr(memstore.group_commit, "os", stand_in)
    return stand_in


def _group(tmp_path: Path) -> tuple[GroupCommit, FileLock]:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b'{"seed": 1}\n')
    return GroupCommit(path), FileLock(tmp_path / "memory.lock")


def _append(group: GroupCommit, lock: FileLock, data: bytes) -> PendingAppend:
    with lock:
        return group.append(data)


def _record(group: GroupCommit) -> SyncRecord:
    fd = os.open(group.sync_path, os.O_RDONLY)
    try:
        record = SyncRecord.read(fd)
    finally:
        os.close(fd)
    assert record is not None
    return record


def _inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


# ------------------------------------------------------------------ the record


def test_record_round_trips_and_rejects_what_does_not_check_out() -> None:
    record = SyncRecord()
    record.mark_durable(1, 2, 0, 300)
    record.mark_lost(1, 2, 300, 500)
    record.cut(3, 4, 10)
    data = record.pack()
    assert len(data) == RECORD_BYTES
    assert SyncRecord.unpack(data) == record
    assert SyncRecord.unpack(b"") == SyncRecord()
    assert SyncRecord.unpack(data[:-1]) is None  # torn read
    assert SyncRecord.unpack(data[:20] + bytes([data[20] ^ 1]) + data[21:]) is None  # a flipped bit
    assert SyncRecord.unpack(b"x" * RECORD_BYTES) is None  # planted


def test_record_verdicts() -> None:
    record = SyncRecord()
    assert record.verdict(1, 2, 0, 10) is Verdict.NEEDS_FSYNC
    record.mark_durable(1, 2, 50, 100)  # a descriptor opened at 50 bytes, its fsync begun at 100
    assert record.verdict(1, 2, 60, 100) is Verdict.COVERED
    assert record.verdict(1, 2, 40, 60) is Verdict.NEEDS_FSYNC  # written before that descriptor was opened
    assert record.verdict(1, 2, 90, 101) is Verdict.NEEDS_FSYNC
    assert record.verdict(1, 9, 60, 70) is Verdict.NEEDS_FSYNC  # another inode
    record.mark_durable(1, 2, 100, 200)  # touches: the claims merge
    assert record.verdict(1, 2, 60, 200) is Verdict.COVERED
    record.mark_lost(1, 2, 200, 250)  # bytes [200, 250) waited on a failed fsync
    assert record.verdict(1, 2, 150, 200) is Verdict.COVERED  # vouched for before the failure
    assert record.verdict(1, 2, 240, 260) is Verdict.LOST
    record.mark_durable(1, 2, 100, 400)  # a later fsync through an older descriptor succeeded ...
    assert record.verdict(1, 2, 210, 220) is Verdict.LOST  # ... and still does not vouch for them
    assert record.verdict(1, 2, 250, 300) is Verdict.COVERED  # written after the failure


def test_a_second_failure_widens_the_lost_range() -> None:
    record = SyncRecord()
    record.mark_durable(1, 2, 0, 100)
    record.mark_lost(1, 2, 150, 200)
    assert record.verdict(1, 2, 100, 120) is Verdict.LOST  # from the end of the claim, not from 150
    record.mark_durable(1, 2, 200, 300)
    record.mark_lost(1, 2, 350, 400)
    assert record.verdict(1, 2, 150, 160) is Verdict.LOST
    assert record.verdict(1, 2, 360, 370) is Verdict.LOST


def test_a_cut_lowers_offsets_and_is_counted() -> None:
    record = SyncRecord()
    record.mark_durable(1, 2, 0, 500)
    record.mark_lost(1, 2, 500, NEVER)
    assert record.reaches_past(1, 2, 400)
    assert not record.reaches_past(7, 7, 0)
    assert record.cuts(1, 2) == 0
    record.cut(1, 2, 400)
    assert not record.reaches_past(1, 2, 400)
    assert record.cuts(1, 2) == 1
    assert record.verdict(1, 2, 400, 450) is Verdict.NEEDS_FSYNC  # new bytes after the cut
    record.cut(5, 6, 0)  # an inode without a state yet gets one, so the count is seen
    assert record.cuts(5, 6) == 1


def test_only_two_inodes_are_kept() -> None:
    record = SyncRecord()
    for ino in (1, 2, 3):
        record.mark_durable(9, ino, 0, 10)
    assert [state.ino for state in record.inodes] == [3, 2]
    assert SyncRecord.unpack(record.pack()) == record


# ------------------------------------------------------------------ sharing fsyncs


def test_writers_record_no_claims_and_each_fsyncs_its_own_bytes(tmp_path: Path, counting: CountingOS) -> None:
    """A claim could spare only a writer that reaches its commit a whole fsync after its append.

    Measured with 4 writer processes: 0 fsyncs spared in 4,000 adds, for a lock, a read and a
    write of the sync lock per commit; concurrent fsyncs share one journal commit without it.
    """
    group, lock = _group(tmp_path)
    first = _append(group, lock, b'{"n": 1}\n')
    second = _append(group, lock, b'{"n": 2}\n')
    first.commit()  # its fsync began after both appends: it could have vouched for the second
    second.commit()
    assert counting.fsyncs == 2
    assert group.sync_path.read_bytes()[:RECORD_BYTES].strip(b"\0") == b""  # no record written
    assert group.path.read_bytes() == b'{"seed": 1}\n{"n": 1}\n{"n": 2}\n'
    assert first.fd == first.sync_fd == -1  # descriptors closed


def test_a_claim_an_older_version_recorded_still_spares_a_follower_its_fsync(
    tmp_path: Path, counting: CountingOS
) -> None:
    """Older memstores record claims; a writer honours one that vouches for all of its bytes."""
    group, lock = _group(tmp_path)
    first = _append(group, lock, b'{"n": 1}\n')
    second = _append(group, lock, b'{"n": 2}\n')
    first.commit()
    _claim_durable(group, os.path.getsize(group.path))  # an older writer's fsync, begun after both
    second.commit()
    assert counting.fsyncs == 1
    third = _append(group, lock, b'{"n": 3}\n')
    third.commit()  # written after the claim: not vouched for
    assert counting.fsyncs == 2


def test_a_failed_fsync_fails_every_add_it_would_have_covered(tmp_path: Path, counting: CountingOS) -> None:
    group, lock = _group(tmp_path)
    waiting = [_append(group, lock, b'{"n": %d}\n' % n) for n in range(3)]
    counting.fail = {1}
    with pytest.raises(StorageError) as caught:
        waiting[0].commit()
    assert caught.value.errno == errno.EIO
    for pending in waiting[1:]:
        with pytest.raises(StorageError):
            pending.commit()
    assert counting.fsyncs == 1  # they failed on the record, without an fsync that might lie
    after = _append(group, lock, b'{"n": 9}\n')
    after.commit()  # bytes written after the failure are not tainted by it
    assert counting.fsyncs == 2


def test_a_later_successful_fsync_never_covers_bytes_written_before_a_failed_one(
    tmp_path: Path, counting: CountingOS
) -> None:
    group, lock = _group(tmp_path)
    older = _append(group, lock, b'{"n": 0}\n')  # its descriptor predates the next two appends
    early = _append(group, lock, b'{"n": 1}\n')
    failing = _append(group, lock, b'{"n": 2}\n')
    counting.fail = {2}

    def fail_meanwhile() -> None:
        with pytest.raises(StorageError):
            failing.commit()

    counting.during_fsync = fail_meanwhile
    with pytest.raises(StorageError):
        older.commit()  # its own fsync succeeded, after the failure: it still waited on the failed one
    assert counting.fsyncs == 2
    later = _append(group, lock, b'{"n": 3}\n')
    later.commit()  # written after the failure: not tainted by it
    assert counting.fsyncs == 3
    _claim_durable(group, os.path.getsize(group.path))  # an older version's claim over the whole file
    with pytest.raises(StorageError):
        early.commit()  # the kernel may have dropped those pages: never acknowledged
    assert counting.fsyncs == 3


def test_a_cut_while_a_writer_fsyncs_keeps_its_claim_off_the_new_lines(tmp_path: Path, counting: CountingOS) -> None:
    group, lock = _group(tmp_path)
    looking = _append(group, lock, b'{"n": 1}\n')
    with open(group.path, "ab") as handle:
        handle.write(b'{"torn": "' + b"x" * 200)  # a writer killed mid-append, after it
    after_cut: list[PendingAppend] = []

    def cut_during_fsync() -> None:
        with lock:  # another writer sets the torn tail aside and takes its offsets
            after_cut.append(group.append(b'{"n": 2}\n', is_whole=lambda data: False))

    counting.during_fsync = cut_during_fsync
    looking.commit()  # it looked at the size before the cut: its claim reaches into the torn bytes
    assert counting.fsyncs == 1
    [pending] = after_cut
    pending.commit()  # so that claim must not have been recorded
    assert counting.fsyncs == 2
    assert group.path.read_bytes() == b'{"seed": 1}\n{"n": 1}\n{"n": 2}\n'


def test_a_failed_fsync_of_a_catalog_add_is_not_acknowledged_and_the_next_add_works(
    tmp_path: Path, counting: CountingOS
) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("kept")
    counting.fail = {counting.fsyncs + 1}
    with pytest.raises(StorageError):
        catalog.add("not acknowledged")
    assert catalog.add("next").content == "next"


# ------------------------------------------------------------------ offsets that no longer mean what they meant


def _claim_durable(group: GroupCommit, upto: int) -> None:
    """Make the record say what a leader that saw ``upto`` bytes would have said."""
    fd = os.open(group.sync_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        record = SyncRecord.read(fd) or SyncRecord()
        record.mark_durable(*_inode(group.path), 0, upto)
        record.write(fd)
    finally:
        os.close(fd)


def test_an_append_after_the_file_shrank_is_not_taken_for_covered(tmp_path: Path, counting: CountingOS) -> None:
    group, lock = _group(tmp_path)
    _append(group, lock, b'{"n": 1}\n' * 50).commit()
    with open(group.path, "r+b") as handle:  # truncated in place by someone else
        handle.truncate(12)
    pending = _append(group, lock, b'{"n": 2}\n')
    assert not _record(group).reaches_past(*_inode(group.path), pending.start)  # lowered before the append
    synced = counting.fsyncs
    pending.commit()
    assert counting.fsyncs == synced + 1


def test_a_torn_tail_set_aside_lowers_the_record(tmp_path: Path, counting: CountingOS) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("first")
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"memory_id": "torn", "cont')  # a writer killed mid-append ...
    group = GroupCommit(catalog.path)
    _claim_durable(group, os.path.getsize(catalog.path))  # ... whose bytes a leader's fsync saw
    synced = counting.fsyncs
    entry = catalog.add("after the torn tail")
    assert counting.fsyncs == synced + 1  # its bytes took the torn bytes' offsets: not covered
    assert [e.content for e in catalog.list()] == ["after the torn tail", "first"]
    assert len(list(catalog.directory.glob("memory.jsonl.torn-*"))) == 1
    assert catalog.show(entry.memory_id) == entry


def test_a_recycled_inode_number_claims_nothing(tmp_path: Path, counting: CountingOS) -> None:
    group, lock = _group(tmp_path)
    _claim_durable(group, 10**9)  # left by an earlier file with the same inode number
    pending = _append(group, lock, b'{"n": 1}\n')
    pending.commit()
    assert counting.fsyncs == 1


def test_a_rewrite_starts_a_new_inode_record(tmp_path: Path, counting: CountingOS) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("a", branch_name="gone")
    catalog.add("b")
    catalog.delete_by_branch("gone")
    synced = counting.fsyncs
    catalog.add("c")
    assert counting.fsyncs == synced + 1
    st = os.stat(catalog.path)
    # Nothing recorded about the file the rewrite replaced vouches for the new one's bytes.
    assert _record(GroupCommit(catalog.path)).verdict(st.st_dev, st.st_ino, 0, st.st_size) is not Verdict.COVERED


def test_a_failed_write_is_cut_back_and_lowers_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group, lock = _group(tmp_path)
    before = group.path.read_bytes()
    real_write = os.write
    calls = 0

    class ShortOS(CountingOS):
        def write(self, fd: int, data: bytes | memoryview) -> int:
            nonlocal calls
            calls += 1
            if calls == 1:
                written = real_write(fd, bytes(data[:4]))
                _claim_durable(group, os.path.getsize(group.path))  # a leader saw the partial bytes
                return written
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(memstore.files, "os", ShortOS())  # write_all is memstore.files'
    with pytest.raises(StorageError) as caught, lock:
        group.append(b'{"n": 1}\n')
    assert caught.value.errno == errno.ENOSPC
    assert group.path.read_bytes() == before
    assert not _record(group).reaches_past(*_inode(group.path), len(before))


def test_a_planted_sync_lock_file_only_costs_fsyncs(tmp_path: Path, counting: CountingOS) -> None:
    group, lock = _group(tmp_path)
    sync_lock_path(group.path).write_bytes(os.urandom(RECORD_BYTES * 2))
    first = _append(group, lock, b'{"n": 1}\n')
    second = _append(group, lock, b'{"n": 2}\n')
    first.commit()
    second.commit()
    assert counting.fsyncs == 2  # each its own, as with a real record
    assert _record(group).find(*_inode(group.path)) is not None  # the garbage was replaced by a real record
    assert group.path.read_bytes() == b'{"seed": 1}\n{"n": 1}\n{"n": 2}\n'


def test_commit_after_close_is_an_error(tmp_path: Path) -> None:
    group, lock = _group(tmp_path)
    pending = _append(group, lock, b'{"n": 1}\n')
    pending.close()
    with pytest.raises(StorageError):
        pending.commit()


def test_the_sync_lock_file_is_a_lock_beside_the_file(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("x")
    catalog.add_quarantined("y", provenance={"source": "web"})
    names = sorted(p.name for p in catalog.directory.glob("*.sync.lock"))
    assert names == ["memory-quarantine.sync.lock", "memory.sync.lock"]
    assert "*.lock" in (catalog.directory / ".gitignore").read_text()


# ------------------------------------------------------------------ a writer killed mid-fsync


class _HangingOS:
    """In the child: the first fsync says so and never returns (the parent kills the process)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        Path(self.marker).write_text("in fsync")
        time.sleep(600)


def _hanging_writer(directory: str, marker: str) -> None:
    memstore.group_commit.os = _HangingOS(marker)  # type: ignore[attr-defined,assignment]
    group = GroupCommit(Path(directory) / "memory.jsonl")
    with FileLock(Path(directory) / "memory.lock"):
        pending = group.append(b'{"n": "child"}\n')
    pending.commit()


def test_a_writer_stuck_in_fsync_holds_nobody_up_and_leaves_nothing_when_killed(
    tmp_path: Path, counting: CountingOS
) -> None:
    group, lock = _group(tmp_path)
    early = _append(group, lock, b'{"n": "early"}\n')  # written before the child's append
    marker = tmp_path / "marker"
    child = SPAWN.Process(target=_hanging_writer, args=(str(tmp_path), str(marker)))
    child.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.is_alive() and time.monotonic() < deadline
        time.sleep(0.005)
    later = _append(group, lock, b'{"n": "later"}\n')  # while the child sits in its fsync
    later.commit()
    early.commit()  # the child's descriptor cannot vouch for bytes written before it was opened
    assert counting.fsyncs == 2
    assert child.is_alive()
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)  # it may have seen an error and taken it along: nothing relied on it
    child.join()
    last = _append(group, lock, b'{"n": "last"}\n')
    last.commit()
    lines = group.path.read_bytes().splitlines()
    assert lines[1:] == [b'{"n": "early"}', b'{"n": "child"}', b'{"n": "later"}', b'{"n": "last"}']


# ------------------------------------------------------------------ processes


def _adder(root: str, worker: int, count: int, start: Any, acks: Any) -> None:
    catalog = MemoryCatalog(root)
    start.wait()
    for n in range(count):
        acks.put(catalog.add(f"worker {worker} note {n}").memory_id)
    acks.put(None)


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    MemoryCatalog(tmp_path).add("seed")
    start, acks = SPAWN.Event(), SPAWN.Queue()
    workers = [SPAWN.Process(target=_adder, args=(str(tmp_path), w, 60, start, acks)) for w in range(4)]
    for process in workers:
        process.start()
    start.set()
    acknowledged, finished = [], 0
    while finished < len(workers):
        item = acks.get(timeout=120)
        if item is None:
            finished += 1
        else:
            acknowledged.append(item)
    for process in workers:
        process.join(timeout=60)
        assert process.exitcode == 0
    data = (tmp_path / ".teaagent" / "memory.jsonl").read_bytes()
    ids = [json.loads(line)["memory_id"] for line in data.splitlines()]
    assert len(ids) == len(set(ids)) == 1 + 4 * 60
    assert set(acknowledged) <= set(ids)
