"""Review of the merge 6edf2f2..5c3703e: each test reproduces a defect found by attacking it."""

from __future__ import annotations

import errno
import functools
import json
import os
from pathlib import Path

import pytest

import memstore.files
from memstore import catalog_rewrite, jsonl
from memstore.catalog import MemoryCatalog
from memstore.files import FileLock
from memstore.kept_copy import KeptCopy
from tests.lock_probe import free_after_a_killed_parent, lock_is_free


@pytest.mark.parametrize("how", ["renamed", "hard-linked then unlinked"])
def test_a_kept_lock_descriptor_is_dropped_when_the_name_points_elsewhere(tmp_path: Path, how: str) -> None:
    """The kept file still has a name (nlink 1), just not the lock's: holding it excludes nobody."""
    lock_path = tmp_path / "memory.jsonl.lock"
    lock = FileLock(lock_path, keep_open=True)
    with lock:
        pass
    aside = tmp_path / "aside.lock"
    if how == "renamed":
        os.rename(lock_path, aside)
    else:
        os.link(lock_path, aside)
        os.unlink(lock_path)
    lock_path.write_bytes(b"")  # a new lock file at the name, which every other process opens
    with lock:
        assert not lock_is_free(lock_path)  # the lock held is the one at the name


_FORK_THEN_DIE = """
import os, signal, sys, time
from pathlib import Path
from memstore.files import FileLock

lock = FileLock(Path(sys.argv[1]), keep_open=True)
lock.acquire()
if sys.argv[2] == "released":
    lock.release()  # the descriptor is kept, unlocked
child = os.fork()
if child == 0:  # a worker forked by the application, which never touches the lock
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    time.sleep(60)
    os._exit(0)
if sys.argv[2] == "held":
    lock.release()  # kept: the next acquisition locks the description the child shares
lock.acquire()
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed while it holds the lock
"""


@pytest.mark.parametrize("at_fork", ["released", "held"])
def test_a_process_killed_holding_the_lock_releases_it_though_it_forked_earlier(tmp_path: Path, at_fork: str) -> None:
    """A forked child inherits the kept descriptor (its file description): were it left open there, the
    parent's flock on that description would outlive the parent, and every writer would wait forever."""
    lock_path = tmp_path / "memory.jsonl.lock"
    assert free_after_a_killed_parent(_FORK_THEN_DIE, str(lock_path), at_fork, lock=lock_path)


def _entry_line(memory_id: str, content: str, branch: str) -> bytes:
    payload = {"memory_id": memory_id, "content": content, "tags": [], "created_at": "2026-01-01T00:00:00+00:00",
               "branch_name": branch, "run_id": None}  # fmt: skip
    return json.dumps(payload, sort_keys=True).encode() + b"\n"


@pytest.mark.parametrize("window", ["long line", "first drop"])
def test_a_file_truncated_while_the_rewrite_prepares_is_rewritten_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """Another tool cuts the file (an in-place save) while the copy made without the lock reads it
    again: the prepared copy is useless, and the rewrite is done under the lock, not failed."""
    monkeypatch.setattr(memstore.files, "MAX_LINE_BYTES", 64 * 1024)
    catalog = MemoryCatalog(tmp_path, use_index=False)
    head = _entry_line("a" * 32, "kept", "stay")
    if window == "long line":
        middle = b"x" * (128 * 1024) + b"\n" + _entry_line("b" * 32, "gone early", "gone")
    else:  # no line goes before the cut-off part: the copy starts by reading it again
        middle = b"".join(_entry_line(f"{n:032x}", f"entry {n}", "stay") for n in range(8))
        middle += _entry_line("b" * 32, "gone early", "gone")
    real_scan = catalog_rewrite.scan_for_removal
    monkeypatch.setattr(catalog_rewrite, "scan_for_removal", functools.partial(real_scan, block=300))
    tail = _entry_line("c" * 32, "gone late", "gone")
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_bytes(head + middle + tail)
    cut = len(head)  # the other tool keeps the first line only

    def truncate() -> None:
        os.truncate(catalog.path, cut)

    hook = "long_line" if window == "long line" else "_open_at"
    real = getattr(KeptCopy, hook)
    cuts = [truncate]

    def cut_then_read(self: KeptCopy, *args: int) -> None:
        while cuts:
            cuts.pop()()
        real(self, *args)

    monkeypatch.setattr(KeptCopy, hook, cut_then_read)
    assert catalog.delete_by_branch("gone") == 0
    assert not cuts, "the window was reached"
    assert catalog.path.read_bytes() == _entry_line("a" * 32, "kept", "stay")


def test_quarantine_provenance_reads_as_the_stdlib_reads_it_once_orjson_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """orjson reads an integer beyond 64 bits as a float; provenance is shown as it is, so what a
    user sees must not depend on how many lines the process parsed before (64: orjson loads)."""
    if not jsonl.load_orjson():
        pytest.skip("orjson is not installed")
    monkeypatch.setattr(jsonl, "_orjson", jsonl.load_orjson())  # as after the process's first 64 lines
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("hello", branch_name="gone")
    assert catalog.quarantine_by_branch("gone", "why") == 1
    payload = json.loads(catalog.quarantine_path.read_bytes())
    payload["provenance"]["merged_from"] = 2**64 + 1  # an edit or a merge of the file
    catalog.quarantine_path.write_bytes(json.dumps(payload, sort_keys=True).encode() + b"\n")
    [record] = catalog.quarantined_records()
    assert record.provenance["merged_from"] == 2**64 + 1
    assert type(record.provenance["merged_from"]) is int


_ADD_FORK_THEN_DIE = """
import fcntl, os, signal, sys, time
from memstore.catalog import MemoryCatalog

catalog = MemoryCatalog(sys.argv[1])
catalog.add("first")  # the group commit keeps the file's and the sync lock's descriptors for the next add
(group,) = catalog._commits.values()
(kept,) = group._idle
child = os.fork()
if child == 0:  # a worker forked by the application, which never writes
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    time.sleep(60)
    os._exit(0)
catalog.add("second")  # the same descriptors again, in the parent
fcntl.flock(kept.sync_fd, fcntl.LOCK_EX)  # as a torn-record repair or a failed fsync's record takes it
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed while it holds the sync lock
"""


def test_a_process_killed_holding_the_sync_lock_releases_it_though_it_forked_earlier(tmp_path: Path) -> None:
    """The group commit keeps the sync lock's descriptor between adds; a child forked meanwhile must not
    share its description, or the parent's flock on it would outlive the parent and block every writer
    that repairs or records through the sync lock."""
    assert free_after_a_killed_parent(
        _ADD_FORK_THEN_DIE, str(tmp_path), lock=tmp_path / ".teaagent" / "memory.sync.lock"
    )
    catalog = MemoryCatalog(tmp_path)
    assert [entry.content for entry in catalog.list()] == ["second", "first"]


@pytest.mark.parametrize("full_proof", [True, False], ids=["full_proof", "untouched_not_read_back"])
def test_a_failed_read_while_the_index_follows_a_rewrite_does_not_fail_the_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full_proof: bool
) -> None:
    """The follow-up proves the new file on a thread; an EIO there came out of ``delete_by_branch`` as a raw
    OSError although the file was already rewritten and durable.  The call succeeds, the index rebuilds.
    Also when the follow-up takes the rewrite's own digest (the proof then reads only samples)."""
    from memstore.index import source
    from memstore.index.source import SourceState

    if full_proof:
        monkeypatch.setattr(source, "FULL_PROOF_EVERY", 1)

    catalog = MemoryCatalog(tmp_path)
    for n in range(12):
        catalog.add(f"entry {n}", branch_name="gone" if n % 3 == 0 else "stay")
    assert len(catalog.search("entry", limit=50)) == 12  # the index exists and will follow the rewrite
    real_of_file = SourceState.of_file
    failed = []

    def failing_of_file(*args: object, **kwargs: object) -> SourceState:
        if "expected" in kwargs:  # the follow-up's proof of the rewritten file (reading it whole or not)
            failed.append(kwargs["expected"] is not None)
            raise OSError(errno.EIO, "Input/output error")
        return real_of_file(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SourceState, "of_file", staticmethod(failing_of_file))
    removed = catalog.delete_by_branch("gone")
    monkeypatch.undo()
    assert failed == [full_proof], "the follow-up's proof ran"
    assert removed == 4
    assert sorted(entry.content for entry in catalog.search("entry", limit=50)) == sorted(
        f"entry {n}" for n in range(12) if n % 3
    )
    assert catalog.check_index().equal
