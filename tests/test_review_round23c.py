"""Review round 23c: memstore.background's waits must end every started thread.

A caller that leaves a wait early (an error from another worker, a Ctrl-C while it
joins) and then frees what the work reads (a descriptor, a replacement, a load context)
must first wait for every thread it started, as ``ThreadPoolExecutor``'s ``with`` did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import background as background_module
from memstore.background import Background, beside, map_threads
from memstore.kept_copy import KeptCopy


def _interrupt_main_after(seconds: float) -> threading.Timer:
    """A real SIGINT to this (main) thread: it interrupts a join, as Ctrl-C does."""
    main = threading.main_thread().ident
    if main != threading.get_ident():
        pytest.skip("a signal interrupts only the main thread's wait")
    timer = threading.Timer(seconds, signal.pthread_kill, args=(main, signal.SIGINT))
    timer.start()
    return timer


def test_map_threads_joins_every_worker_when_one_raises_a_base_exception() -> None:
    done = threading.Event()

    def work(item: int) -> int:
        if item == 0:
            raise KeyboardInterrupt
        time.sleep(0.5)
        done.set()
        return item

    with pytest.raises(KeyboardInterrupt):
        map_threads(work, [0, 1], threads=2, name="review-23c-map")
    assert done.is_set(), "a worker still ran after map_threads raised"
    assert not [t for t in threading.enumerate() if t.name.startswith("review-23c-map")]


def test_map_threads_joins_every_worker_when_the_wait_is_interrupted() -> None:
    done = threading.Event()

    def work(item: int) -> int:
        time.sleep(1.0)
        done.set()
        return item

    timer = _interrupt_main_after(0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            map_threads(work, [0], threads=1, name="review-23c-map")
    finally:
        timer.join()
    assert done.is_set(), "a worker still ran after map_threads raised"


def test_beside_joins_the_work_when_the_wait_for_its_result_is_interrupted() -> None:
    done = threading.Event()

    def work() -> int:
        time.sleep(1.0)
        done.set()
        return 1

    timer = _interrupt_main_after(0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            beside(work, lambda: None, name="review-23c-beside")
    finally:
        timer.join()
    assert done.is_set(), "the work still ran after beside raised: its caller may free what it reads"


def test_kept_copy_wait_joins_the_step_it_was_waiting_for_when_interrupted(tmp_path: object) -> None:
    done = threading.Event()
    copy = KeptCopy(-1, 0, lambda: None)  # type: ignore[arg-type,return-value]

    def slow_step() -> None:
        time.sleep(1.0)
        done.set()

    copy._submit(slow_step)
    timer = _interrupt_main_after(0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            copy.wait()
    finally:
        timer.join()
    assert done.is_set(), "a copy step still writes after wait() raised: the replacement is discarded next"


def test_background_abandon_after_an_interrupted_result_still_joins() -> None:
    # Pins what the fixes lean on: abandon() after an interrupted result() waits for the thread.
    done = threading.Event()

    def work() -> None:
        time.sleep(0.6)
        done.set()

    job = Background(work, name="review-23c-bg")
    timer = _interrupt_main_after(0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            job.result()
    finally:
        timer.join()
    job.abandon()
    assert done.is_set()
    assert os.getpid()  # the process is whole


class _SometimesNoThread(threading.Thread):
    """Thread.start fails for the starts the test picks: a mix of threads and work run by waiters."""

    refuse: frozenset[int] = frozenset()
    starts = 0

    def start(self) -> None:
        number, _SometimesNoThread.starts = _SometimesNoThread.starts, _SometimesNoThread.starts + 1
        if number in self.refuse:
            raise RuntimeError("can't start new thread")
        super().start()


@settings(max_examples=40, deadline=None)
@given(
    delays=st.lists(st.sampled_from([0.0, 0.0, 0.0005, 0.002]), min_size=1, max_size=12),
    refused=st.frozensets(st.integers(min_value=0, max_value=11)),
)
def test_kept_copy_steps_run_in_block_order_under_delays_and_refused_threads(
    delays: list[float], refused: frozenset[int]
) -> None:
    done: list[int] = []
    copy = KeptCopy(-1, 0, lambda: None)  # type: ignore[arg-type,return-value]

    def step(number: int, delay: float) -> None:
        time.sleep(delay)
        done.append(number)

    _SometimesNoThread.refuse, _SometimesNoThread.starts = refused, 0
    original = background_module.threading.Thread
    background_module.threading.Thread = _SometimesNoThread  # type: ignore[misc]
    try:
        for number, delay in enumerate(delays):
            copy._submit(step, number, delay)
        copy.wait()
    finally:
        background_module.threading.Thread = original  # type: ignore[misc]
    assert done == list(range(len(delays)))


_LATE_TEAM = """
import sys, threading
from memstore.catalog import MemoryCatalog
from memstore.team_index import TeamIndex

url, base = sys.argv[1], sys.argv[2]
roots = {f"late23c-{number}/memory.jsonl": f"{base}/r{number}" for number in range(4)}
for number, root in enumerate(roots.values()):
    catalog = MemoryCatalog(root, use_index=False)
    for entry in range(20 + number):
        catalog.add(f"entry {entry} about caching")

def late() -> None:
    started.wait()
    report = TeamIndex(url).reindex(roots, workers=4)
    print(sorted(source.action for source in report.sources), flush=True)
    hits = TeamIndex(url).search("caching", limit=500, sources=list(roots))
    print(len(hits.hits), flush=True)

started = threading.Event()
threading.Thread(target=late).start()
started.set()
"""


@pytest.mark.pg
def test_a_team_reindex_of_several_sources_on_a_thread_that_outlives_the_main_thread(
    tmp_path: Path, pg_writer_url: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _LATE_TEAM, pg_writer_url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == str(20 + 21 + 22 + 23), out.stdout


def test_a_direct_read_interrupted_while_waiting_frees_its_buffer_only_after_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore import direct_io

    path = tmp_path / "data"
    path.write_bytes(b"x" * (2 * direct_io.READ_BYTES))
    real_preadv = os.preadv
    done = threading.Event()

    def slow_preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        time.sleep(1.0)
        got = real_preadv(fd, buffers, offset)
        done.set()
        return got

    monkeypatch.setattr(os, "preadv", slow_preadv)
    fd = os.open(path, os.O_RDONLY)
    timer = _interrupt_main_after(0.2)
    try:
        with pytest.raises(KeyboardInterrupt):  # not a BufferError from freeing a buffer still read into
            direct_io._feed_direct(fd, 0, 2 * direct_io.READ_BYTES, lambda view: None)
        assert done.is_set(), "the buffer was freed while the read was in flight"
    finally:
        timer.join()
        os.close(fd)
