"""What another process sees of a lock file: shared by the lock and fork tests."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path


def lock_is_free(path: Path | str) -> bool:
    """Whether a new descriptor opened on ``path`` can take the lock now (as another process would)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def free_after_a_killed_parent(code: str, *args: str, lock: Path) -> bool:
    """Run ``code``, which forks a sleeping child, prints its pid and kills itself holding a lock;
    whether ``lock`` is free while that child still lives."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    child = int(done.stdout)
    try:
        return lock_is_free(lock)
    finally:
        os.kill(child, signal.SIGKILL)
