"""IndexWatch: keep the derived index caught up while other processes write the files.

Queries already catch the index up on every read; a watcher makes that catch-up
happen as soon as a file changes, so the next query finds the index current.
Two triggers feed one loop:

- FileWatcher events on the canonical files (appends, rewrites, replacement by
  rename as ``git checkout`` does, deletion and re-creation);
- a cheap poll of each file's identity (device, inode, size, mtime) once per
  ``poll_interval``, a safety net for anything an event source can miss.

The loop runs on the caller's thread; ``request_stop`` only sets a flag, so it is
safe to call from a signal handler.  Nothing here prints: actions are logged (one
line each) and handed to ``on_action`` for callers that want them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from memstore.catalog import MemoryCatalog
from memstore.errors import IndexUnavailableError, MemstoreError
from memstore.layout import CATALOG_FILE, FAILURES_FILE, has_store, memory_dir, store_dir
from memstore.maintenance import reindex_workspace
from memstore.watcher import FileWatcher

logger = logging.getLogger(__name__)


def watched_files(root: Path) -> list[Path]:
    """The canonical files whose changes the index follows: the catalog and the failure cards."""
    return [store_dir(root) / CATALOG_FILE, memory_dir(root) / FAILURES_FILE]


STEP_SECONDS = 0.1
"""How often the loop looks at the stop flag while idle."""

FileState = tuple[int, int, int, int] | None


def file_state(path: Path) -> FileState:
    """What identifies a file's current content cheaply; ``None`` when it is absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class WatchStopped(Exception):
    """Raised inside a catch-up to abandon it when a stop was requested."""


class IndexWatch:
    """Catch the index of ``root`` up whenever its canonical files change, until stopped."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        debounce_ms: int = 500,
        poll_interval: float = 1.0,
        on_action: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.paths = watched_files(self.root)
        self.poll_interval = poll_interval
        self._on_action = on_action
        self._catalog: MemoryCatalog | None = None  # opened once a store exists: watching creates nothing
        self._changed = threading.Event()
        self._changes: list[str] = []
        self._changes_lock = threading.Lock()
        self._stop_requested = False
        self._seen: dict[Path, FileState] = {}
        self._last_error: str | None = None
        self._watcher = FileWatcher(self.root, self._on_change, debounce_ms=debounce_ms)

    def request_stop(self) -> None:
        """Ask :meth:`run` to return; signal-safe (sets a flag, takes no lock)."""
        self._stop_requested = True

    def run(self) -> None:
        """Watch until :meth:`request_stop`; returns after stopping the watcher."""
        self._watcher.update_watched_files([str(path) for path in self.paths])
        self._watcher.start()
        files = [str(path) for path in self.paths]
        self._act("start", f"watching {', '.join(files)}", root=str(self.root), files=files)
        try:
            self._catch_up("start")
            last_poll = time.monotonic()
            while not self._stop_requested:
                self._changed.wait(STEP_SECONDS)
                if self._stop_requested:
                    break
                if self._changed.is_set():
                    self._changed.clear()
                    with self._changes_lock:
                        changes, self._changes = self._changes, []
                    self._catch_up("; ".join(changes) or "change")
                    last_poll = time.monotonic()
                elif time.monotonic() - last_poll >= self.poll_interval:
                    last_poll = time.monotonic()
                    moved = [str(path) for path in self.paths if file_state(path) != self._seen.get(path)]
                    if moved:
                        self._catch_up(f"poll: {', '.join(moved)} changed")
        finally:
            self._watcher.stop()
            self._act("stop", "stopped")

    # -- internals -------------------------------------------------------------------------

    def _on_change(self, path: str, event: str) -> None:
        """FileWatcher callback (its worker thread): note the change and wake the loop."""
        with self._changes_lock:
            self._changes.append(f"{event}: {path}")
        self._changed.set()

    def _check_stop(self, _done: int, _total: int) -> None:
        if self._stop_requested:
            raise WatchStopped

    def _catch_up(self, reason: str) -> None:
        # Recorded before reading, so a change made during the catch-up triggers another one.
        states = {path: file_state(path) for path in self.paths}
        started = time.monotonic()
        if self._catalog is None and not has_store(self.root):
            self._seen = states  # no store yet, nothing to index: a file appearing triggers the next catch-up
            return
        try:
            if self._catalog is None:
                self._catalog = MemoryCatalog(self.root)
            report = reindex_workspace(self._catalog, full=False, progress=self._check_stop).to_dict()
        except WatchStopped:
            return
        except IndexUnavailableError as exc:
            # The catalog remembers an index failure: start afresh next time.  The states are not
            # recorded, so the next poll tries again (a busy or damaged index recovers by itself).
            self._catalog = None
            self._failed(reason, f"index unavailable: {exc}")
        except (MemstoreError, OSError, ValueError) as exc:
            self._catalog = None
            self._failed(reason, str(exc))
        else:
            self._seen = states
            self._last_error = None
            elapsed_ms = round((time.monotonic() - started) * 1000, 1)
            self._act(
                "reindex",
                f"caught up ({reason}) in {elapsed_ms} ms: {_summary(report)}",
                reason=reason,
                elapsed_ms=elapsed_ms,
                report=report,
            )

    def _failed(self, reason: str, message: str) -> None:
        if message == self._last_error:
            logger.debug("catch-up failed again (%s): %s", reason, message)
            return
        self._last_error = message
        self._act(
            "error",
            f"catch-up failed ({reason}): {message}",
            level=logging.ERROR,
            reason=reason,
            message=message,
        )

    def _act(self, event: str, text: str, *, level: int = logging.INFO, **details: Any) -> None:
        logger.log(level, "%s", text)
        if self._on_action is not None:
            self._on_action({"event": event, "time": time.time(), **details})


def _summary(report: Mapping[str, Any]) -> str:
    """A short one-line rendering of a reindex report's scalar fields."""
    parts = [
        f"{name}.{key}={value}"
        for name, source in report.items()
        if isinstance(source, Mapping)
        for key, value in source.items()
        if isinstance(value, (int, float, str, bool))
    ]
    return ", ".join(parts) or "done"
