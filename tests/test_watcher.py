from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memstore import watcher as watcher_module
from memstore.errors import ArgumentTypeError, InvalidArgumentError
from memstore.watcher import FileWatcher

TIMEOUT = 15.0
FAST = 30
SENTINEL = "sentinel.txt"


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []

    def __call__(self, path: str, kind: str) -> None:
        with self.lock:
            self.events.append((path, kind))

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.events)

    def of(self, path: str) -> list[str]:
        return [kind for p, kind in self.snapshot() if p == path]

    def saw(self, path: str, kind: str) -> Callable[[], bool]:
        return lambda: (path, kind) in self.snapshot()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_watcher(tmp_path: Path, recorder: Recorder) -> Iterator[Callable[..., FileWatcher]]:
    made: list[FileWatcher] = []

    def make(
        paths: set[str],
        *,
        debounce_ms: int = FAST,
        callback: Callable[[str, str], None] | None = None,
        start: bool = True,
    ) -> FileWatcher:
        watcher = FileWatcher(tmp_path, callback or recorder, debounce_ms=debounce_ms)
        made.append(watcher)
        watcher.update_watched_files(paths)
        if start:
            watcher.start()
        return watcher

    yield make
    for watcher in made:
        watcher.stop()


def settle(recorder: Recorder, tmp_path: Path) -> None:
    """Wait until every earlier event has been delivered, by changing the sentinel file last.

    Events of one directory arrive in order and fire in order, so once the sentinel's
    callback has run, any callback the earlier changes would cause has run too.
    """
    count = len(recorder.of(SENTINEL))
    (tmp_path / SENTINEL).write_text(str(time.monotonic()))
    assert wait_until(lambda: len(recorder.of(SENTINEL)) > count)


def test_modify_is_reported(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("one")
    watcher = make_watcher({"a.txt"})
    assert watcher.is_running()
    (tmp_path / "a.txt").write_text("two")
    assert wait_until(recorder.saw("a.txt", "modified"))


def test_atomic_save_by_rename_is_one_modified(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("one")
    make_watcher({"a.txt", SENTINEL}, debounce_ms=200)
    tmp = tmp_path / ".a.txt.swp"
    tmp.write_text("two")
    os.replace(tmp, tmp_path / "a.txt")
    assert wait_until(recorder.saw("a.txt", "modified"))
    settle(recorder, tmp_path)
    assert recorder.of("a.txt") == ["modified"]


def test_rename_from_another_directory_and_move_away(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a.txt").write_text("one")
    make_watcher({"a.txt"})
    (elsewhere / "new").write_text("two")
    os.replace(elsewhere / "new", tmp_path / "a.txt")
    assert wait_until(recorder.saw("a.txt", "modified"))
    os.replace(tmp_path / "a.txt", elsewhere / "old")
    assert wait_until(recorder.saw("a.txt", "deleted"))


def test_delete_is_reported(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("one")
    make_watcher({"a.txt"})
    (tmp_path / "a.txt").unlink()
    assert wait_until(recorder.saw("a.txt", "deleted"))


def test_file_created_later_even_in_new_directories(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    make_watcher({"later.txt", "deep/er/file.txt"})
    (tmp_path / "later.txt").write_text("x")
    assert wait_until(recorder.saw("later.txt", "modified"))
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "file.txt").write_text("x")
    assert wait_until(recorder.saw("deep/er/file.txt", "modified"))
    (tmp_path / "deep" / "er" / "file.txt").unlink()
    assert wait_until(recorder.saw("deep/er/file.txt", "deleted"))


def test_directory_removed_and_recreated(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("1")
    make_watcher({"pkg/mod.py"})
    shutil.rmtree(tmp_path / "pkg")
    assert wait_until(recorder.saw("pkg/mod.py", "deleted"))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("2")
    assert wait_until(recorder.saw("pkg/mod.py", "modified"))


def test_directory_appearing_while_watches_are_placed_is_not_missed(
    tmp_path: Path,
    recorder: Recorder,
    make_watcher: Callable[..., FileWatcher],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race behind a real flake: ``deep/er`` appears after the planner measured the
    nearest existing directory (the root) and before the root's watch is active, so no
    event ever announces it."""
    real_nearest = watcher_module._nearest_existing_dir
    raced: list[str] = []

    def nearest_then_race(directory: str) -> str:
        result = real_nearest(directory)
        if not raced:
            raced.append(result)
            (tmp_path / "deep" / "er").mkdir(parents=True)
        return result

    monkeypatch.setattr(watcher_module, "_nearest_existing_dir", nearest_then_race)
    make_watcher({"deep/er/file.txt"})
    assert raced == [os.path.realpath(tmp_path)]
    (tmp_path / "deep" / "er" / "file.txt").write_text("x")
    assert wait_until(recorder.saw("deep/er/file.txt", "modified"))
    (tmp_path / "deep" / "er" / "file.txt").unlink()
    assert wait_until(recorder.saw("deep/er/file.txt", "deleted"))


def test_debounce_coalesces_a_burst_into_one_callback(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("0")
    make_watcher({"a.txt", SENTINEL}, debounce_ms=1000)
    for i in range(30):
        with open(tmp_path / "a.txt", "a") as handle:
            handle.write(str(i))
    assert wait_until(recorder.saw("a.txt", "modified"))
    settle(recorder, tmp_path)
    assert recorder.of("a.txt") == ["modified"]


def test_debounce_reports_the_latest_state(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("0")
    (tmp_path / "b.txt").write_text("0")
    make_watcher({"a.txt", "b.txt", SENTINEL}, debounce_ms=1000)
    (tmp_path / "a.txt").write_text("1")
    (tmp_path / "a.txt").unlink()
    (tmp_path / "b.txt").unlink()
    (tmp_path / "b.txt").write_text("back")
    assert wait_until(recorder.saw("a.txt", "deleted"))
    assert wait_until(recorder.saw("b.txt", "modified"))
    settle(recorder, tmp_path)
    assert recorder.of("a.txt") == ["deleted"]
    assert recorder.of("b.txt") == ["modified"]


def test_only_watched_paths_are_reported_and_set_is_replaced(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text("0")
    # One write's events (truncate, write, close) a loaded machine may deliver more than FAST apart.
    watcher = make_watcher({"a.txt"}, debounce_ms=200)
    (tmp_path / "b.txt").write_text("1")
    (tmp_path / "a.txt").write_text("1")
    assert wait_until(recorder.saw("a.txt", "modified"))
    watcher.update_watched_files({"c.txt", SENTINEL})
    (tmp_path / "a.txt").write_text("2")
    (tmp_path / "c.txt").write_text("2")
    assert wait_until(recorder.saw("c.txt", "modified"))
    settle(recorder, tmp_path)
    assert recorder.of("b.txt") == []
    assert recorder.of("a.txt") == ["modified"]


def test_absolute_and_relative_spellings_are_reported_as_given(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.py").write_text("0")
    absolute = str(tmp_path / "sub" / "x.py")
    make_watcher({absolute, "./sub/x.py"})
    (tmp_path / "sub" / "x.py").write_text("1")
    assert wait_until(lambda: {p for p, _ in recorder.snapshot()} == {absolute, "./sub/x.py"})


def test_watches_only_the_directories_of_watched_files(
    tmp_path: Path, make_watcher: Callable[..., FileWatcher]
) -> None:
    for directory in ("src", "src/deep", "node_modules/a/b", "docs"):
        (tmp_path / directory).mkdir(parents=True, exist_ok=True)
    watcher = make_watcher({"src/a.py", "src/b.py", "src/deep/c.py", "missing/dir/x.py"})
    real = os.path.realpath(tmp_path)
    assert set(watcher._scheduled) == {f"{real}/src", f"{real}/src/deep", real}


def test_callback_exception_is_logged_and_watching_continues(
    tmp_path: Path,
    recorder: Recorder,
    make_watcher: Callable[..., FileWatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "a.txt").write_text("0")
    (tmp_path / "b.txt").write_text("0")

    def explode_on_a(path: str, kind: str) -> None:
        recorder(path, kind)
        if path == "a.txt":
            raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="memstore.watcher"):
        make_watcher({"a.txt", "b.txt"}, callback=explode_on_a)
        (tmp_path / "a.txt").write_text("1")
        assert wait_until(recorder.saw("a.txt", "modified"))
        (tmp_path / "b.txt").write_text("1")
        assert wait_until(recorder.saw("b.txt", "modified"))
    assert "boom" in caplog.text


def test_start_is_idempotent_and_restart_after_stop(
    tmp_path: Path, recorder: Recorder, make_watcher: Callable[..., FileWatcher]
) -> None:
    (tmp_path / "a.txt").write_text("0")
    watcher = make_watcher({"a.txt"}, start=False)
    assert not watcher.is_running()
    watcher.stop()
    watcher.start()
    watcher.start()
    assert watcher.is_running()
    (tmp_path / "a.txt").write_text("1")
    assert wait_until(recorder.saw("a.txt", "modified"))
    watcher.stop()
    watcher.stop()
    assert not watcher.is_running()
    count = len(recorder.snapshot())
    (tmp_path / "a.txt").unlink()
    watcher.start()
    assert watcher.is_running()
    (tmp_path / "a.txt").write_text("2")
    assert wait_until(lambda: len(recorder.snapshot()) > count)
    assert recorder.snapshot()[count:] == [("a.txt", "modified")]


def test_stop_from_inside_the_callback(tmp_path: Path, make_watcher: Callable[..., FileWatcher]) -> None:
    (tmp_path / "a.txt").write_text("0")
    holder: list[FileWatcher] = []
    stopped = threading.Event()

    def stop_self(path: str, kind: str) -> None:
        holder[0].stop()
        stopped.set()

    holder.append(make_watcher({"a.txt"}, callback=stop_self))
    (tmp_path / "a.txt").write_text("1")
    assert stopped.wait(TIMEOUT)
    assert not holder[0].is_running()


def test_argument_errors(tmp_path: Path, recorder: Recorder) -> None:
    with pytest.raises(ArgumentTypeError):
        FileWatcher(tmp_path, "not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        FileWatcher(tmp_path, recorder, debounce_ms=-1)
    watcher = FileWatcher(tmp_path, recorder)
    with pytest.raises(ArgumentTypeError):
        watcher.update_watched_files("a.txt")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        watcher.update_watched_files({1})  # type: ignore[arg-type]


def test_missing_watchdog_gives_install_hint(
    tmp_path: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "watchdog.observers", None)
    with pytest.raises(ImportError, match="pip install watchdog"):
        FileWatcher(tmp_path, recorder)


def test_import_memstore_does_not_import_watchdog() -> None:
    code = "import sys, memstore, memstore.watcher; assert 'watchdog' not in sys.modules, 'eager'"
    subprocess.run([sys.executable, "-c", code], check=True)
