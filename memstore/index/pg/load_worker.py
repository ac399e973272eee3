"""A worker process that catches team sources up, so a bulk load of many sources uses every core.

A source's load is mostly Python (parsing lines, building rows), so threads of one
process take turns on one core.  For a large load, ``TeamIndex.reindex`` hands whole
sources to worker processes instead, each running exactly the catch-up a thread runs
(``TeamIndex._load``), so where a source was loaded never changes its rows.  As in
:mod:`memstore.index.line_worker`: a plain subprocess (no re-import of the caller's
``__main__``), length-prefixed pickles over its pipes, both ends this module.  The URL,
password included, travels over the pipe, never on a command line.  A worker that cannot
start or dies only means its sources are loaded in the parent.  A worker whose parent dies
mid-load exits at once, before its transaction can commit (:class:`_Orphaned`): a reindex
that was killed does not go on writing behind the operator's back.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from memstore.index.line_worker import _receive, _send, collector_paused, end_process, spawn
from memstore.team_report import TeamSourceReport

_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from memstore.index.pg.load_worker import main; main()"
STOP_SECONDS = 10.0


class LoadWorker:
    """The parent's handle on one worker: one source at a time, asked and answered in turn."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, url: Any) -> LoadWorker | None:
        """A worker loading into the index at ``url`` (an IndexUrl); None when it cannot start."""
        process = spawn(_BOOT)
        if process is None:
            return None
        worker = cls(process)
        return worker if worker._write(url) else None

    def _write(self, value: Any) -> bool:
        assert self.process.stdin is not None
        try:
            _send(self.process.stdin, value)
        except (OSError, ValueError):
            self.stop()
            return False
        return True

    def load(self, name: str, root: Path, *, full: bool) -> TeamSourceReport | BaseException | None:
        """The source's report, the error its catch-up raised, or None when the worker is gone."""
        if not self._write((name, str(root), full)):
            return None
        assert self.process.stdout is not None
        try:
            kind, value = _receive(self.process.stdout)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError, TypeError, AttributeError):
            self.stop()
            return None
        if kind == "ok" and isinstance(value, TeamSourceReport):
            return value
        if kind == "error" and isinstance(value, BaseException):
            return value
        self.stop()
        return None

    def stop(self) -> None:
        end_process(self.process, seconds=STOP_SECONDS)


def main() -> None:
    """The worker's loop: catch up each source it is sent, until its input closes."""
    from memstore.team_index import TeamIndex

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    team = TeamIndex(_receive(stdin))
    try:
        while True:
            try:
                name, root, full = _receive(stdin)
            except EOFError:
                return
            try:
                with _Orphaned(stdin.fileno()), collector_paused():
                    answer: tuple[str, Any] = (
                        "ok",
                        team._load(team._engine("load"), name, Path(root), full=full, progress=None),
                    )
            except Exception as exc:  # sent back to be raised in the parent, as a thread's would be
                answer = ("error", exc)
            try:
                _send(stdout, answer)
            except (pickle.PicklingError, TypeError, AttributeError):
                _send(stdout, ("error", RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
    finally:
        team.close()


class _Orphaned:
    """While a load runs, end this process the moment its parent is gone.

    The parent sends nothing while it waits for an answer, so input that becomes readable
    during a load can only be the end of the pipe: the parent died (or gave up on us).
    ``os._exit`` then drops the connection, and the server rolls the load back.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="memstore-orphan-watch", daemon=True)

    def _watch(self) -> None:
        ready, _, _ = select.select([self._fd, self._wake_r], [], [])
        if self._fd in ready and self._wake_r not in ready:
            os._exit(1)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *_exc: object) -> None:
        os.write(self._wake_w, b"x")
        self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)
