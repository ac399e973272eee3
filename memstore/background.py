"""Work handed to a second thread: plain threads, never ``concurrent.futures``.

An executor refuses work once the main thread has returned (``RuntimeError: cannot
schedule new futures after interpreter shutdown``; the first import of its module then
fails too), so a server's or an agent's worker thread that was still building an index
or rewriting a catalog got an untyped error.  A plain thread has no such rule.  Where
no thread can start at all, the work runs on the caller's thread when its result is
asked for, after whatever the caller did meanwhile: the same order, one after the other.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
U = TypeVar("U")


class Background(Generic[T]):
    """``work()`` started on its own thread at once; :meth:`result` waits for it and returns or raises.

    Always wait for a started piece of work before freeing what it reads (a descriptor,
    a buffer): the thread is a daemon only so that a process whose main thread died of
    an error is not kept alive by it.
    """

    __slots__ = ("_ended", "_lock", "_outcome", "_thread", "_work")

    def __init__(self, work: Callable[[], T], *, name: str) -> None:
        self._work: Callable[[], T] | None = work
        self._outcome: tuple[bool, Any] | None = None
        self._lock = threading.Lock()
        """Held while the work runs: two threads waiting for work no thread took run it once."""
        self._ended = threading.Event()
        """Set when the thread's work has ended.  Not ``Thread.join``: on Python 3.11 a join
        interrupted by Ctrl-C marks the thread stopped, and every later join returns at once."""
        self._thread: threading.Thread | None = threading.Thread(target=self._run_then_end, name=name, daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no new threads (out of them, or the interpreter is finalizing)
            self._thread = None

    def _run(self) -> None:
        with self._lock:
            work, self._work = self._work, None
            if work is None:
                return
            try:
                self._outcome = (True, work())
            except BaseException as exc:  # handed to whoever asks for the result
                self._outcome = (False, exc)

    def _run_then_end(self) -> None:
        try:
            self._run()
        finally:
            self._ended.set()

    def wait(self) -> None:
        """Wait until the work has ended, whatever its outcome (run it here if no thread took it)."""
        if self._thread is None:
            self._run()
        else:
            self._ended.wait()

    def abandon(self) -> None:
        """The caller gave up: wait for a thread that took the work; work no thread took is dropped."""
        if self._thread is None:
            with self._lock:  # or wait for whoever is running it here
                self._work = None
        else:
            self._ended.wait()

    def result(self) -> T:
        """The work's value, or its exception raised here."""
        self.wait()
        if self._outcome is None:
            raise RuntimeError("the work was abandoned before it ran")
        ok, value = self._outcome
        if not ok:
            raise value
        return cast(T, value)


def beside(work: Callable[[], T], here: Callable[[], object], *, name: str) -> T:
    """``work()``'s value, run on a second thread while ``here()`` runs on this one.

    The second thread has always ended when this returns or raises, so it never reads
    something ``here``'s caller frees afterwards.
    """
    background = Background(work, name=name)
    try:
        here()
        return background.result()
    finally:
        background.abandon()  # also when the wait for the result was interrupted (Ctrl-C)


def map_threads(work: Callable[[U], T], items: Sequence[U], *, threads: int, name: str) -> list[T]:
    """``[work(item) for item in items]``, on up to ``threads`` threads that take the items in turn.

    Every item is worked on, whatever the others do; then the first error in the items'
    order is raised, as from the loop.  Where no thread starts, the items run here.
    """
    outcomes: list[tuple[bool, Any] | None] = [None] * len(items)
    taken = itertools.count()

    def take_items() -> None:
        while (index := next(taken)) < len(items):  # next() on a count is atomic under the GIL
            try:
                outcomes[index] = (True, work(items[index]))
            except Exception as exc:  # raised below, in order
                outcomes[index] = (False, exc)

    workers = [Background(take_items, name=f"{name}-{number}") for number in range(max(1, min(threads, len(items))))]
    try:
        for worker in workers:
            worker.result()
    finally:
        for worker in workers:  # after an error or an interrupted wait, the others end first
            worker.abandon()
    results: list[T] = []
    for outcome in outcomes:
        assert outcome is not None
        ok, value = outcome
        if not ok:
            raise value
        results.append(value)
    return results
