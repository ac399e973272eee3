"""Review of b071e20..review2: each test reproduces a defect found by attacking it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lock_probe import free_after_a_killed_parent

_FORK_WHILE_WAITING = """
import fcntl, os, signal, sys, threading, time
from pathlib import Path
from memstore.files import FileLock

path = Path(sys.argv[1])
lock = FileLock(path, keep_open=True)
got = threading.Event()
go = threading.Event()

def take() -> None:
    if sys.argv[2] == "kept":
        lock.acquire()
        lock.release()  # this thread keeps its descriptor, unlocked, for the acquisition below
    go.wait()
    lock.acquire()
    got.set()
    time.sleep(60)

waiting = threading.Thread(target=take, daemon=True)
waiting.start()
other = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
fcntl.flock(other, fcntl.LOCK_EX)  # another holder: the thread waits in flock
go.set()
time.sleep(0.5)
child = os.fork()
if child == 0:  # a worker forked by the application, which never touches the lock
    os.close(other)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    time.sleep(60)
    os._exit(0)
os.close(other)  # the waiting thread now takes the lock
assert got.wait(10)
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed while it holds the lock
"""


@pytest.mark.parametrize("descriptor", ["fresh", "kept"])
def test_a_lock_taken_after_a_fork_by_a_thread_waiting_at_the_fork_dies_with_the_parent(
    tmp_path: Path, descriptor: str
) -> None:
    """A thread waits in flock while another thread forks: the child copies the waiting descriptor.
    Hidden only once locked, that copy stayed the parent's file description in the child, so the
    lock the parent took next outlived it and every writer waited for the child to exit."""
    lock_path = tmp_path / "memory.jsonl.lock"
    assert free_after_a_killed_parent(_FORK_WHILE_WAITING, str(lock_path), descriptor, lock=lock_path)


_FORK_WHILE_OPENING = """
import fcntl, os, signal, sys, time
from memstore import group_commit
from memstore.catalog import MemoryCatalog

real_open = group_commit.open_for_append
children = []

def forking_open(*args, **kwargs):
    # Another thread of the application forks between the sync lock's open and the file's.
    child = os.fork()
    if child == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        time.sleep(60)
        os._exit(0)
    children.append(child)
    return real_open(*args, **kwargs)

group_commit.open_for_append = forking_open
catalog = MemoryCatalog(sys.argv[1])
catalog.add("first")
group_commit.open_for_append = real_open
(group,) = catalog._commits.values()
(kept,) = group._idle
fcntl.flock(kept.sync_fd, fcntl.LOCK_EX)  # as a torn-record repair or a failed fsync's record takes it
print(children[0], flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed while it holds the sync lock
"""


def test_a_child_forked_while_the_group_commit_opens_its_descriptors_does_not_share_the_sync_lock(
    tmp_path: Path,
) -> None:
    """The sync lock's descriptor was hidden only once the file's was open too: a child forked in
    between kept the sync lock's description, and the parent's lock on it outlived the parent."""
    assert free_after_a_killed_parent(
        _FORK_WHILE_OPENING, str(tmp_path), lock=tmp_path / ".teaagent" / "memory.sync.lock"
    )
