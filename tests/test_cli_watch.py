"""`memstore watch` end to end: a watcher process, other processes writing, and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

TIMEOUT = 30.0


def memstore(root: Path, *args: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args, "--root", str(root)],
        capture_output=True, text=True, timeout=60, check=False,
        env=dict(os.environ, HOME=str(root.parent / "home")),
    )


def wait_for(what: str, condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def settled(calls: list[Any], quiet_s: float, timeout: float = TIMEOUT) -> int:
    """``len(calls)`` once it has not grown for ``quiet_s``.

    One change can cause two catch-ups: its events split across the debounce, or the poll and
    the event both seeing it.  A loop that never stops catching up never settles: a failure.
    """
    give_up = time.monotonic() + timeout
    count, since = len(calls), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > give_up:
            raise AssertionError(f"the watch kept catching up with nothing changing: {len(calls)} calls")
        time.sleep(0.05)
        if len(calls) != count:
            count, since = len(calls), time.monotonic()
    return count


class Watch:
    """A running `memstore watch --json` with its stdout (JSON lines) and stderr (log) in files."""

    def __init__(self, root: Path, logs: Path, *extra: str) -> None:
        self.out_path = logs / "watch.out"
        self.err_path = logs / "watch.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memstore", "watch", "--root", str(root), "--debounce-ms=50", *extra],
                stdout=out, stderr=err, env=dict(os.environ, HOME=str(root.parent / "home")),
            )
        wait_for("the watch to start", lambda: "watching" in self.log())

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def actions(self) -> list[dict[str, Any]]:
        lines = self.out_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=TIMEOUT)


@contextmanager
def watching(root: Path, logs: Path, *extra: str) -> Iterator[Watch]:
    watch = Watch(root, logs, *extra)
    try:
        yield watch
    finally:
        if watch.process.poll() is None:
            watch.process.kill()
            watch.process.wait()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (tmp_path / "home").mkdir()
    return workspace


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_watch_cleanly(root: Path, tmp_path: Path, sig: int) -> None:
    with watching(root, tmp_path, "--json") as watch:
        assert watch.process.poll() is None
        assert watch.stop(sig) == 0
    assert "stopped" in watch.log()
    assert "Traceback" not in watch.log()
    events = [action["event"] for action in watch.actions()]
    assert events[0] == "start" and events[-1] == "stop"


def _append_externally(path: Path, memory_id: str, content: str) -> None:
    """Another process appends a line the way any writer of the format would."""
    line = json.dumps({"memory_id": memory_id, "content": content, "tags": [],
                       "created_at": "2026-01-01T00:00:00+00:00", "branch_name": None, "run_id": None},
                      sort_keys=True)
    code = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    subprocess.run([sys.executable, "-c", code, str(path), line], check=True)


def _found(root: Path, query: str) -> list[str]:
    result = memstore(root, "search", query, "--json")
    assert result.returncode == 0, result.stderr
    return [entry["memory_id"] for entry in json.loads(result.stdout)["entries"]]


def _caught_up_after(watch: Watch, count: int) -> Callable[[], bool]:
    return lambda: sum(a["event"] == "reindex" for a in watch.actions()) > count


def test_watch_keeps_the_index_caught_up_through_appends_and_replacements(root: Path, tmp_path: Path) -> None:
    assert memstore(root, "add", "existing entry").returncode == 0
    catalog = root / ".teaagent" / "memory.jsonl"
    with watching(root, tmp_path, "--json") as watch:
        wait_for("the first catch-up", _caught_up_after(watch, 0))

        # 1. An append by another process is indexed by the watch, then searchable.
        done = sum(a["event"] == "reindex" for a in watch.actions())
        _append_externally(catalog, "a" * 32, "zebra crossing note")
        wait_for("a catch-up after the append", _caught_up_after(watch, done))
        assert "memory.jsonl" in watch.actions()[-1]["reason"]
        wait_for("the appended entry", lambda: _found(root, "zebra") == ["a" * 32])

        # 2. The file is replaced by rename (a new inode, as git checkout does).
        done = sum(a["event"] == "reindex" for a in watch.actions())
        replacement = catalog.with_name("checkout.tmp")
        replacement.write_text(json.dumps({"memory_id": "b" * 32, "content": "yak shaving", "tags": [],
                                           "created_at": "2026-01-02T00:00:00+00:00"}) + "\n")
        os.replace(replacement, catalog)
        wait_for("a catch-up after the replacement", _caught_up_after(watch, done))
        wait_for("the replaced contents", lambda: _found(root, "yak") == ["b" * 32])
        assert _found(root, "zebra") == []

        # 3. Deleted, then created again.
        done = sum(a["event"] == "reindex" for a in watch.actions())
        catalog.unlink()
        wait_for("a catch-up after the deletion", _caught_up_after(watch, done))
        _append_externally(catalog, "c" * 32, "phoenix entry")
        wait_for("the re-created entry", lambda: _found(root, "phoenix") == ["c" * 32])
        assert _found(root, "yak") == []

        # 4. A second memstore process adding through the library.
        assert memstore(root, "add", "quokka fact").returncode == 0
        wait_for("the added entry", lambda: len(_found(root, "quokka")) == 1)

        assert watch.stop() == 0
    assert "Traceback" not in watch.log()
    assert not [a for a in watch.actions() if a["event"] == "error"]


def test_index_watch_catches_up_on_every_kind_of_change(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop itself, in-process, with the catalog's reindex recorded instead of run."""
    from memstore.catalog import MemoryCatalog
    from memstore.index.report import RefreshReport
    from memstore.watch_loop import IndexWatch

    calls: list[bool] = []

    def reindex(self: MemoryCatalog, *, full: bool = False, progress: object = None) -> RefreshReport:
        calls.append(full)
        return RefreshReport(str(self.path), "appended", len(calls), seconds=0.0)

    monkeypatch.setattr(MemoryCatalog, "reindex", reindex)
    actions: list[dict[str, Any]] = []
    (root / ".teaagent").mkdir()  # a store to watch (on a root without one, watching creates nothing)
    watch = IndexWatch(root, debounce_ms=20, poll_interval=0.2, on_action=actions.append)
    runner = threading.Thread(target=watch.run)
    runner.start()
    try:
        wait_for("the first catch-up", lambda: len(calls) == 1)
        catalog = root / ".teaagent" / "memory.jsonl"
        failures = root / ".teaagent" / "memory" / "failures.json"
        for change in (
            lambda: _append_externally(catalog, "a" * 32, "first"),
            lambda: _append_externally(catalog, "b" * 32, "second"),
            lambda: (failures.parent.mkdir(exist_ok=True), failures.write_text("[]\n")),
            lambda: (catalog.with_name("new").write_text(""), os.replace(catalog.with_name("new"), catalog)),
            catalog.unlink,
            lambda: catalog.write_text(""),
        ):
            before = len(calls)
            change()
            wait_for("a catch-up after the change", lambda before=before: len(calls) > before)
        quiet = settled(calls, 0.5)
        time.sleep(0.6)  # three poll periods with nothing changing: no catch-up
        assert len(calls) == quiet
    finally:
        watch.request_stop()
        runner.join(TIMEOUT)
    assert not runner.is_alive()
    assert not any(calls), "the watch only ever catches up, never rebuilds"
    assert [a["event"] for a in actions][:2] == ["start", "reindex"] and actions[-1]["event"] == "stop"
    assert any("failures.json" in a.get("reason", "") for a in actions)


def test_index_watch_retries_after_a_failure_and_reports_it_once(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore.catalog import MemoryCatalog
    from memstore.errors import IndexUnavailableError
    from memstore.index.report import RefreshReport
    from memstore.watch_loop import IndexWatch

    MemoryCatalog(root).add("an entry")
    attempts: list[int] = []

    def reindex(self: MemoryCatalog, *, full: bool = False, progress: object = None) -> RefreshReport:
        attempts.append(1)
        if len(attempts) <= 3:
            raise IndexUnavailableError("database is locked")
        return RefreshReport(str(self.path), "appended", 1, seconds=0.0)

    monkeypatch.setattr(MemoryCatalog, "reindex", reindex)
    actions: list[dict[str, Any]] = []
    watch = IndexWatch(root, debounce_ms=20, poll_interval=0.1, on_action=actions.append)
    runner = threading.Thread(target=watch.run)
    runner.start()
    try:
        # No file changes at all: the poll keeps retrying until the index answers.
        wait_for("a successful catch-up", lambda: any(a["event"] == "reindex" for a in actions))
    finally:
        watch.request_stop()
        runner.join(TIMEOUT)
    assert len(attempts) == 4
    assert [a["event"] for a in actions] == ["start", "error", "reindex", "stop"]
    assert "database is locked" in actions[1]["message"]


def test_index_watch_survives_a_card_with_an_unusable_timestamp(root: Path) -> None:
    """A failures.json card stamped 10**400 once killed the watch with OverflowError (issue 9)."""
    from memstore.cards import FailureCard
    from memstore.failure_cards import FailureCardStorage
    from memstore.watch_loop import IndexWatch

    storage = FailureCardStorage(root)
    card = FailureCard.create("r", "TypeError", "src/app.py", "boom", "fix database migration models", [])
    actions: list[dict[str, Any]] = []
    watch = IndexWatch(root, debounce_ms=20, poll_interval=0.1, on_action=actions.append)
    runner = threading.Thread(target=watch.run)
    runner.start()
    try:
        wait_for("the first catch-up", lambda: any(a["event"] == "reindex" for a in actions))
        hostile = dict(card.to_dict(), id="bad", timestamp="BIG")
        storage.path.write_text(json.dumps([hostile, card.to_dict()]).replace('"BIG"', "1" + "0" * 400))
        wait_for("a catch-up after the hostile card",
                 lambda: any("failures.json" in a.get("reason", "") for a in actions if a["event"] == "reindex"))
        assert runner.is_alive()
    finally:
        watch.request_stop()
        runner.join(TIMEOUT)
    assert not runner.is_alive()
    assert [a for a in actions if a["event"] == "error"] == []
    assert [c.id for c in storage.list_all()] == [card.id]
    assert storage.index_status().state == "fresh"
