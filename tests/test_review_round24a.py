"""Review round 24a: the write path without claims, the cached process id, the chain's "before".

Each test reproduces a defect found by attacking 25dff7e..review6a; each fails on the
code before its fix.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import memstore.group_commit
from memstore.append_chain import CHAIN_BYTES, CHAIN_OFFSET
from memstore.catalog import MemoryCatalog
from memstore.errors import LockError
from memstore.files import FileLock
from memstore.group_commit import GroupCommit
from memstore.index.source import BODY_SAMPLES, FINGERPRINT_BYTES

TICK = 0.03
"""Longer than a file timestamp tick (jiffy-grained on Linux), so ctimes differ."""
CHILD_SECONDS = 60.0
"""How long a raw-forked child may take to answer before it is taken for stuck."""


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


# ---------------------------------------------------------------- a fork that runs no Python hooks


def _raw_fork() -> int:
    """fork(2) straight from libc, as a C extension may: Python's at-fork hooks do not run."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = int(libc.fork())
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork")
    return pid


def _answer(pid: int, fd: int) -> bytes:
    """The child's one answer; a child stuck after the raw fork (a lock another thread held) is killed."""
    ready, _, _ = select.select([fd], [], [], CHILD_SECONDS)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        return b"no answer"
    return os.read(fd, 16)


def test_a_child_forked_without_pythons_hooks_does_not_share_the_parents_writer_lock(tmp_path: Path) -> None:
    """The parent holds the lock through its kept descriptor; the child must wait for it, not enter too.

    The child's copy of that descriptor shares the parent's open file description, on which
    a second flock succeeds at once.  The pid a lock or descriptor was opened in must be the
    real one (``os.getpid``), not one a hook that did not run would have refreshed.
    """
    lock = FileLock(tmp_path / "memory.lock", keep_open=True)
    lock.acquire()
    lock.release()  # the descriptor is kept for this thread's next acquisition
    go_read, go_write = os.pipe()
    answer_read, answer_write = os.pipe()
    pid = _raw_fork()
    if pid == 0:  # the child: only os calls and the lock under test, then _exit
        code = 0
        try:
            os.read(go_read, 1)
            try:
                lock.acquire(wait=0.3)
            except LockError:
                os.write(answer_write, b"waited")
            else:
                os.write(answer_write, b"entered")
        except BaseException:
            code = 1
        os._exit(code)
    try:
        lock.acquire()  # through the kept descriptor
        try:
            os.write(go_write, b"x")
            answer = _answer(pid, answer_read)
        finally:
            lock.release()
    finally:
        _, status = os.waitpid(pid, 0)
        for fd in (go_read, go_write, answer_read, answer_write):
            os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer == b"waited"


def test_a_child_forked_without_pythons_hooks_opens_its_own_append_descriptors(tmp_path: Path) -> None:
    """The parent's kept descriptors share their file description, and with it fsync's error cursor."""
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b'{"seed": 1}\n')
    group, lock = GroupCommit(path), FileLock(tmp_path / "memory.lock")
    with lock:
        pending = group.append(b'{"n": 1}\n')
    parent_fd = pending.fd
    assert parent_fd >= 0
    pending.commit()  # its descriptors are kept for the next append
    answer_read, answer_write = os.pipe()
    pid = _raw_fork()
    if pid == 0:
        code = 0
        try:
            with lock:
                child = group.append(b'{"n": 2}\n')
            os.write(answer_write, b"shared" if child.fd == parent_fd else b"own")
            child.commit()
        except BaseException:
            code = 1
        os._exit(code)
    try:
        answer = _answer(pid, answer_read)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(answer_read)
        os.close(answer_write)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer == b"own"
    assert path.read_bytes() == b'{"seed": 1}\n{"n": 1}\n{"n": 2}\n'


# ---------------------------------------------------------------- a torn tail set aside while another tool appends


def test_a_line_another_tool_appends_while_a_torn_tail_is_set_aside_is_never_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut may take only the bytes copied aside; copying them aside fsyncs a file (milliseconds).

    Another tool appending meanwhile (a newline first, as memstore does after an unterminated
    line) wrote a whole entry past the copied bytes: the cut is refused and the entry stays.
    The add then reads the file again and lands after that entry (it failed with EAGAIN until
    doctor6); the fragment, now a line of its own, stays in the file and is copied nowhere.
    """
    catalog = MemoryCatalog(tmp_path)
    catalog.add("a note before the crash")
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"memory_id": "torn", "cont')  # a writer killed mid-append
    foreign = (json.dumps(_entry(903, "squash from another tool")) + "\n").encode()
    real_keep = memstore.group_commit.keep_torn_tail

    def keep_while_another_tool_appends(path: Path, fd: int, start: int, size: int) -> Path:
        aside = real_keep(path, fd, start, size)
        with open(path, "ab") as handle:
            handle.write(b"\n" + foreign)
        return aside

    monkeypatch.setattr(memstore.group_commit, "keep_torn_tail", keep_while_another_tool_appends)
    added = catalog.add("an add that finds the torn tail")
    monkeypatch.undo()
    lines = catalog.path.read_bytes().splitlines(keepends=True)
    assert lines[1:3] == [b'{"memory_id": "torn", "cont\n', foreign]
    assert json.loads(lines[3])["memory_id"] == added.memory_id and len(lines) == 4
    assert not list(tmp_path.glob(".teaagent/memory.jsonl.torn-*"))
    assert _scan_ids(tmp_path, "squash") == ["m000903"]
    catalog.add("the next add works")
    assert _ids(MemoryCatalog(tmp_path), "squash") == ["m000903"]
