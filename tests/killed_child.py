"""A Python child run until it says it reached a point, then killed there: a crash at that point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_SECONDS = 60.0


def kill_when_ready(script: str, *args: str, ready: Path) -> None:
    """Run ``script`` with ``args``; SIGKILL it once it creates ``ready`` (it must, alive, in time)."""
    child = subprocess.Popen([sys.executable, "-c", script, *args])
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
