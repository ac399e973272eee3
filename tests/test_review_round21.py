"""Review of the merge 6edf2f2..5c3703e: each test reproduces a defect found by attacking it."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memstore.files import FileLock


def _free_by_name(path: Path) -> bool:
    """Whether a new descriptor opened on ``path`` can take the lock now (as another process would)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


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
        assert not _free_by_name(lock_path)  # the lock held is the one at the name


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
    done = subprocess.run(
        [sys.executable, "-c", _FORK_THEN_DIE, str(lock_path), at_fork], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    child = int(done.stdout)
    try:
        assert _free_by_name(lock_path)
    finally:
        os.kill(child, signal.SIGKILL)
