"""FileWatcher: tell the caller when watched files change, on top of watchdog.

Design decisions (the spec leaves them open):

- Only the *directories of the watched files* are watched, each non-recursively,
  so a repository with a large ``node_modules`` costs a handful of inotify watches,
  not thousands.  A watched file whose directory does not exist yet is covered by a
  watch on its nearest existing ancestor; when directories appear, vanish or move
  the watches are re-planned, so files created later (even in new directories) are
  still reported.
- ``callback(path, event)`` receives ``path`` exactly as it was given to
  :meth:`FileWatcher.update_watched_files` (a relative path stays relative), and
  ``event`` is ``'modified'`` or ``'deleted'``.
- Debounce is per path and trailing: every event restarts that path's quiet period
  and one callback fires when it ends.  The event reported is decided then, from
  the file itself: present → ``'modified'``, gone → ``'deleted'``.  That makes
  atomic saves by rename (old file moved away, new one moved in) a single
  ``'modified'``, and a file that was absent and is absent again reports nothing.
- Callbacks run on one worker thread, never concurrently with each other; an
  exception in a callback is logged and the watcher keeps going.  No callback
  starts after :meth:`FileWatcher.stop` returns.  Changes made while stopped are
  not reported after a restart.

watchdog is imported when a FileWatcher is constructed, never by ``import memstore``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.checks import check_limit, iterable_list, require_path, wrong_type
from memstore.errors import InvalidArgumentError
from memstore.logger import LazyLogger

logger = LazyLogger(__name__)

MODIFIED = "modified"
DELETED = "deleted"
_FILE_EVENTS = frozenset({"created", "modified", "deleted", "moved", "closed"})
_DIR_EVENTS = frozenset({"created", "deleted", "moved"})
STOP_TIMEOUT_SECONDS = 5.0
_MAX_REPLAN_ROUNDS = 64

_MISSING_WATCHDOG = (
    "FileWatcher needs the 'watchdog' package, which is not installed; "
    "install it with `pip install watchdog` (or reinstall memstore, which depends on it)"
)


def _load_watchdog() -> tuple[Any, Any]:
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError as exc:
        raise ImportError(_MISSING_WATCHDOG) from exc
    return Observer, FileSystemEventHandler


def _make_handler(base: Any, sink: Callable[[Any], None]) -> Any:
    class _Handler(base):  # type: ignore[misc]
        def on_any_event(self, event: Any) -> None:
            sink(event)

    return _Handler()


def _nearest_existing_dir(directory: str) -> str:
    while not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return directory


@dataclass
class _Pending:
    deadline: float
    event: bool
    """True for a real event; False for a presence check after a new watch was placed."""


@dataclass
class _Run:
    """What one start()..stop() cycle owns."""

    observer: Any
    worker: threading.Thread
    stopped: threading.Event


class FileWatcher:
    """Watch a set of files and call ``callback(path, 'modified' | 'deleted')`` after changes."""

    def __init__(self, root: Path, callback: Callable[[str, str], None], debounce_ms: int = 500) -> None:
        require_path("root", root)
        if not callable(callback):
            raise wrong_type("callback must be callable", callback)
        self._debounce = check_limit(debounce_ms, name="debounce_ms") / 1000
        self._observer_class, handler_base = _load_watchdog()
        self._handler = _make_handler(handler_base, self._on_event)
        self.root = Path(root)
        self._callback = callback
        # Lock order: _watch_lock, then watchdog's observer lock, then _state_lock.
        # _state_lock is never held while calling into watchdog or the callback.
        self._watch_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._wake = threading.Condition(self._state_lock)
        self._spellings: dict[str, tuple[str, ...]] = {}
        self._present: dict[str, bool] = {}
        self._pending: dict[str, _Pending] = {}
        self._dead_dirs: set[str] = set()
        self._replan_requested = False
        self._run: _Run | None = None
        self._scheduled: dict[str, Any] = {}

    # -- public API ------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching; a no-op if already running."""
        with self._watch_lock:
            with self._state_lock:
                if self._run is not None:
                    return
                keys = list(self._spellings)
            presence = {key: os.path.exists(key) for key in keys}
            stopped = threading.Event()
            observer = self._observer_class()
            worker = threading.Thread(target=self._work, args=(stopped,), name="memstore-file-watcher", daemon=True)
            with self._state_lock:
                self._run = _Run(observer, worker, stopped)
                self._pending.clear()
                self._dead_dirs.clear()
                self._replan_requested = False
                self._present.update(presence)
            self._scheduled = {}
            try:
                observer.start()
                worker.start()
                self._replan_locked()
            except BaseException:
                self._stop_locked()
                raise

    def stop(self) -> None:
        """Stop watching and wait (up to 5 s per thread) for the threads to end; restartable."""
        with self._watch_lock:
            run = self._stop_locked()
        if run is not None and run.worker is not threading.current_thread() and run.worker.is_alive():
            run.worker.join(STOP_TIMEOUT_SECONDS)

    def is_running(self) -> bool:
        with self._state_lock:
            return self._run is not None

    def update_watched_files(self, file_paths: Iterable[str]) -> None:
        """Replace the watched set; relative paths are resolved against the root."""
        spellings: dict[str, list[str]] = {}
        for path in iterable_list("file_paths", file_paths, wanted="a collection of str"):
            if not isinstance(path, str):
                raise wrong_type("watched paths must be str", path)
            spellings.setdefault(self._key(path), []).append(path)
        with self._watch_lock:
            with self._state_lock:
                known = set(self._present)
            presence = {key: os.path.exists(key) for key in spellings if key not in known}
            with self._state_lock:
                self._spellings = {key: tuple(sorted(set(names))) for key, names in spellings.items()}
                self._present = {key: self._present.get(key, presence.get(key, False)) for key in spellings}
                for key in list(self._pending):
                    if key not in spellings:
                        del self._pending[key]
            self._replan_locked()

    # -- paths and watches -----------------------------------------------------------------

    def _key(self, path: str) -> str:
        """One absolute spelling per file: the real path of its directory plus its name."""
        if "\x00" in path:
            raise InvalidArgumentError("watched paths cannot contain NUL bytes")
        absolute = os.path.normpath(os.path.join(os.path.abspath(self.root), path))
        return os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))

    def _replan_locked(self) -> None:
        """Bring the scheduled directory watches in line with the watched files (holds _watch_lock)."""
        with self._state_lock:
            if self._run is None:
                return
            observer = self._run.observer
            keys = list(self._spellings)
            dead, self._dead_dirs = self._dead_dirs, set()
        added: set[str] = set()
        unwatchable: set[str] = set()
        # A directory created after its nearest ancestor was measured but before the
        # ancestor's watch became active sends no event, so measure again after
        # scheduling and repeat until nothing changes.
        for _ in range(_MAX_REPLAN_ROUNDS):
            desired = {_nearest_existing_dir(os.path.dirname(key)) for key in keys}
            for directory in list(self._scheduled):
                if directory in dead or directory not in desired:
                    self._unschedule(observer, directory)
            dead = set()
            missing = sorted(desired - set(self._scheduled) - unwatchable)
            if not missing:
                break
            for directory in missing:
                try:
                    self._scheduled[directory] = observer.schedule(self._handler, directory, recursive=False)
                    added.add(directory)
                    logger.debug("watching directory %s", directory)
                except OSError as exc:
                    if os.path.isdir(directory):
                        logger.warning("cannot watch directory %s: %s", directory, exc)
                        unwatchable.add(directory)
                    # else it vanished meanwhile: the next round plans from its ancestors
        now = time.monotonic()
        with self._state_lock:
            for key in keys:
                if os.path.dirname(key) in added:
                    # It may have appeared before the watch existed.
                    self._queue(key, event=False, now=now)
            self._wake.notify_all()

    def _unschedule(self, observer: Any, directory: str) -> None:
        watch = self._scheduled.pop(directory)
        logger.debug("no longer watching directory %s", directory)
        try:
            observer.unschedule(watch)
        except Exception:  # the emitter may already have ended itself (directory deleted)
            logger.debug("unscheduling %s failed", directory, exc_info=True)

    # -- events ----------------------------------------------------------------------------

    def _queue(self, key: str, *, event: bool, now: float) -> None:
        """Restart ``key``'s quiet period (caller holds _state_lock)."""
        previous = self._pending.get(key)
        real_event = event or (previous is not None and previous.event)
        self._pending[key] = _Pending(now + self._debounce, real_event)

    def _on_event(self, event: Any) -> None:
        """Runs on watchdog's dispatch thread: record, never call user code here."""
        kind = event.event_type
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(event.dest_path) if kind == "moved" and event.dest_path else ""
        now = time.monotonic()
        with self._state_lock:
            if self._run is None:
                return
            if event.is_directory:
                if kind not in _DIR_EVENTS:
                    return
                if kind in ("deleted", "moved"):
                    self._dead_dirs.add(src)
                self._replan_requested = True
                prefixes = tuple(path + os.sep for path in (src, dest) if path)
                for key in self._spellings:
                    if key.startswith(prefixes):
                        self._queue(key, event=True, now=now)
            else:
                if kind not in _FILE_EVENTS:
                    return
                for path in (src, dest):
                    if path in self._spellings:
                        self._queue(path, event=True, now=now)
            self._wake.notify_all()

    def _work(self, stopped: threading.Event) -> None:
        """The worker: re-plans watches and fires debounced callbacks."""
        while True:
            with self._state_lock:
                while True:
                    if stopped.is_set():
                        return
                    now = time.monotonic()
                    due = [key for key, pending in self._pending.items() if pending.deadline <= now]
                    if due or self._replan_requested:
                        break
                    deadlines = [pending.deadline for pending in self._pending.values()]
                    self._wake.wait(min(deadlines) - now if deadlines else None)
                replan, self._replan_requested = self._replan_requested, False
                fired = [(key, self._pending.pop(key).event) for key in due]
            if replan:
                with self._watch_lock:
                    if stopped.is_set():
                        return
                    self._replan_locked()
            for key, real_event in fired:
                self._fire(key, real_event, stopped)

    def _fire(self, key: str, real_event: bool, stopped: threading.Event) -> None:
        exists = os.path.exists(key)
        with self._state_lock:
            spellings = self._spellings.get(key)
            if spellings is None or stopped.is_set():
                return
            was_present = self._present.get(key, False)
            self._present[key] = exists
        if exists:
            if not real_event and was_present:
                return
            kind = MODIFIED
        else:
            if not was_present:
                return
            kind = DELETED
        for path in spellings:
            if stopped.is_set():
                return
            try:
                self._callback(path, kind)
            except Exception:
                logger.exception("FileWatcher callback failed for %s (%s)", path, kind)

    def _stop_locked(self) -> _Run | None:
        """Detach and stop the current run's observer (holds _watch_lock); returns the run."""
        with self._state_lock:
            run = self._run
            if run is None:
                return None
            self._run = None
            run.stopped.set()
            self._pending.clear()
            self._wake.notify_all()
        self._scheduled = {}
        try:
            run.observer.stop()
            if run.observer.is_alive() and run.observer is not threading.current_thread():
                run.observer.join(STOP_TIMEOUT_SECONDS)
        except RuntimeError:
            logger.debug("stopping the observer failed", exc_info=True)
        return run
