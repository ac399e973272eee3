"""memstore.background: work on plain threads, and the same results where no thread can start.

Rewrites, builds and direct reads hand work to a second thread.  They used
``concurrent.futures``, which refuses work once the main thread has returned; the
subprocess tests in test_review_round23b.py force that case end to end.  These tests pin
the helper's own contract, and run a whole rewrite and build with no thread at all.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from memstore import background, catalog_rewrite
from memstore.background import Background, beside, map_threads
from memstore.catalog import MemoryCatalog


class NoThread(threading.Thread):
    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def test_result_returns_the_value_and_raises_the_error_of_the_work() -> None:
    assert Background(lambda: 42, name="t").result() == 42
    failing = Background(lambda: 1 // 0, name="t")
    with pytest.raises(ZeroDivisionError):
        failing.result()
    with pytest.raises(ZeroDivisionError):  # asked again: the same outcome, not a second run
        failing.result()


def test_work_runs_on_another_thread_at_once() -> None:
    ran_on: list[int] = []
    started = threading.Event()

    def work() -> None:
        ran_on.append(threading.get_ident())
        started.set()

    job = Background(work, name="t")
    assert started.wait(10)  # before anyone asks for the result
    job.result()
    assert ran_on != [threading.get_ident()]


def test_without_threads_the_work_runs_when_asked_after_what_the_caller_did(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    order: list[str] = []
    job = Background(lambda: order.append("work") or 7, name="t")
    order.append("caller")
    assert job.result() == 7
    assert order == ["caller", "work"]
    assert beside(lambda: order.append("work2") or 8, lambda: order.append("here"), name="t") == 8
    assert order[2:] == ["here", "work2"]


def test_abandoned_work_no_thread_took_never_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    ran: list[int] = []
    job = Background(lambda: ran.append(1), name="t")
    job.abandon()
    job.wait()
    assert ran == []
    with pytest.raises(RuntimeError):
        job.result()


def test_beside_waits_for_the_thread_when_here_fails() -> None:
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        finished.set()

    with pytest.raises(KeyError):
        beside(slow, lambda: {}["missing"], name="t")
    assert finished.is_set()  # joined before the error left


def test_beside_drops_work_no_thread_took_when_here_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    ran: list[int] = []
    with pytest.raises(KeyError):
        beside(lambda: ran.append(1), lambda: {}["missing"], name="t")
    assert ran == []


def test_two_threads_waiting_for_work_no_thread_took_run_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    runs: list[int] = []

    def work() -> int:
        runs.append(1)
        time.sleep(0.1)
        return len(runs)

    job = Background(work, name="t")
    monkeypatch.undo()
    results: list[int] = []
    waiters = [threading.Thread(target=lambda: results.append(job.result())) for _ in range(4)]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    assert runs == [1] and results == [1, 1, 1, 1]


@pytest.mark.parametrize("threads", [True, False])
def test_a_rewrite_and_a_build_equal_the_scan_with_and_without_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: bool
) -> None:
    """Every step a rewrite hands to a thread (the copy's blocks in order, here about a hundred
    of them, the fsync, the follow-up's proof and vocabulary count, the direct reads) gives
    the same file and index on a thread of its own or, with none to start, on the caller's."""
    catalog = MemoryCatalog(tmp_path)
    for number in range(3000):
        catalog.add(f"entry {number} about caching {'x' * (number % 97)}", branch_name=f"b{number % 7}")
    assert catalog.search("caching", limit=1)
    kept = b"".join(line for line in catalog.path.read_bytes().splitlines(keepends=True) if b'"b3"' not in line)
    scan_for_removal = catalog_rewrite.scan_for_removal
    monkeypatch.setattr(
        catalog_rewrite, "scan_for_removal", lambda *args, **kwargs: scan_for_removal(*args, **kwargs, block=4096)
    )
    if not threads:
        monkeypatch.setattr(background.threading, "Thread", NoThread)
    catalog.delete_by_branch("b3")
    assert catalog.path.read_bytes() == kept
    assert catalog.check_index().equal
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert [hit.memory_id for hit in catalog.search("caching", limit=5000)] == [
        hit.memory_id for hit in scan.search("caching", limit=5000)
    ]
    assert len(scan.search("caching", limit=5000)) == 3000 - len(range(3, 3000, 7))
    catalog.index_path.unlink()
    rebuilt = MemoryCatalog(tmp_path)
    assert [hit.memory_id for hit in rebuilt.search("entry", limit=5000)] == [
        hit.memory_id for hit in scan.search("entry", limit=5000)
    ]


def test_map_threads_keeps_the_order_works_every_item_and_raises_the_first_error_in_order() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> int:
        with lock:
            seen.append(item)
        time.sleep(0.001 * (item % 3))
        if item in (7, 3):
            raise ValueError(item)
        return item * 2

    assert map_threads(lambda item: item * 2, list(range(50)), threads=4, name="t") == [n * 2 for n in range(50)]
    with pytest.raises(ValueError) as raised:
        map_threads(work, list(range(20)), threads=3, name="t")
    assert raised.value.args == (3,)  # the first in the items' order, not the first to fail
    assert sorted(seen) == list(range(20))  # every item was still worked on
    assert map_threads(work, [], threads=3, name="t") == []


def test_map_threads_with_no_thread_runs_every_item_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    here = threading.get_ident()
    assert map_threads(lambda item: (item, threading.get_ident() == here), [1, 2, 3], threads=2, name="t") == [
        (1, True),
        (2, True),
        (3, True),
    ]
