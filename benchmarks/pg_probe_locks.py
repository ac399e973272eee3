"""The lock and snapshot half of benchmarks/pg_probe.py: what concurrent catch-ups wait for.

Each experiment holds a lock in one session for a known time and measures how long
another session waits, or which state it sees.  Needs a superuser URL; runs after
the COPY probe so the one-line catch-up finds a full, indexed ``doc`` table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

Note = Callable[[str, Any, str], None]
HOLD_S = 1.0
SOURCE_A = "hashtext('repo-a/memory.jsonl')"
SOURCE_B = "hashtext('repo-b/memory.jsonl')"
ADD_WORD = "INSERT INTO newword VALUES (%s) ON CONFLICT DO NOTHING"
ADD_WORDS = "INSERT INTO newword SELECT w FROM unnest(%s::text[]) AS w ORDER BY w ON CONFLICT DO NOTHING"


@contextmanager
def sessions(url: str, count: int) -> Iterator[list[Any]]:
    import psycopg

    conns = [psycopg.connect(url, prepare_threshold=None) for _ in range(count)]
    try:
        yield conns
    finally:
        for conn in conns:
            conn.close()


class Background:
    """Run statements on one session in a thread; record the wait, the value and any error."""

    def __init__(self, conn: Any, steps: Sequence[tuple[str, Sequence[Any]]], *, commit: bool = True) -> None:
        self.conn, self.steps, self.commit = conn, steps, commit
        self.waited_ms = 0
        self.values: list[Any] = []
        self.error = ""
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            for sql, params in self.steps:
                cur = self.conn.execute(sql, params)
                self.values.append(cur.fetchone() if cur.description else None)
            if self.commit:
                self.conn.commit()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}"
            self.conn.rollback()
        self.waited_ms = round((time.perf_counter() - started) * 1000)

    def join(self) -> Background:
        self.thread.join()
        return self


def same_new_word(a: Any, b: Any, note: Note) -> None:
    """Two catch-ups add the same new word: the second waits for the first transaction to end."""
    a.execute(ADD_WORD, ["newword"])
    waiter = Background(b, [(ADD_WORD, ["newword"])])
    time.sleep(HOLD_S)
    a.commit()
    waiter.join()
    note("lock_same_new_word_wait_ms", waiter.waited_ms,
         f"{waiter.waited_ms} ms: ON CONFLICT DO NOTHING waited for the other open transaction")


def opposite_order(a: Any, b: Any, note: Note) -> None:
    """Two new words in opposite orders: a deadlock, found after deadlock_timeout, one side fails."""
    a.execute(ADD_WORD, ["w1"])
    b.execute(ADD_WORD, ["w2"])
    first = Background(a, [(ADD_WORD, ["w2"])])
    time.sleep(0.1)
    second = Background(b, [(ADD_WORD, ["w1"])])
    failed = [x.error for x in (first.join(), second.join()) if x.error]
    waited = max(first.waited_ms, second.waited_ms)
    note("lock_opposite_order", {"failed": failed, "waited_ms": waited},
         f"opposite order: {len(failed)} failed ({failed[0][:30] if failed else '-'}) after {waited} ms")


def sorted_autocommit(a: Any, b: Any, note: Note) -> None:
    """The fix: new words first, sorted, each session in its own short autocommit statement."""
    a.autocommit = b.autocommit = True
    words = [f"fresh{i:03}" for i in range(200)]
    first = Background(a, [(ADD_WORDS, [words])], commit=False)
    second = Background(b, [(ADD_WORDS, [words[::-1]])], commit=False)
    runs = (first.join(), second.join())
    a.autocommit = b.autocommit = False
    waited = [x.waited_ms for x in runs]
    errors = [x.error for x in runs if x.error]
    note("lock_sorted_autocommit_ms", waited, f"sorted, autocommit: {waited} ms, errors {errors}")


def advisory(a: Any, b: Any, c: Any, note: Note) -> None:
    """Per-source advisory locks: the same source waits, another does not; lock_timeout bounds a wait."""
    a.execute(f"SELECT pg_advisory_xact_lock({SOURCE_A})")
    same = Background(b, [(f"SELECT pg_advisory_xact_lock({SOURCE_A})", [])])
    other = Background(c, [(f"SELECT pg_advisory_xact_lock({SOURCE_B})", [])]).join()
    time.sleep(HOLD_S)
    a.commit()
    same.join()
    note("advisory_same_source_wait_ms", {"same": same.waited_ms, "other": other.waited_ms},
         f"advisory lock: same source waited {same.waited_ms} ms, another source {other.waited_ms} ms")
    a.execute(f"SELECT pg_advisory_xact_lock({SOURCE_A})")
    steps: list[tuple[str, Sequence[Any]]] = [("SET LOCAL lock_timeout = '200ms'", [])]
    bounded = Background(b, [*steps, (f"SELECT pg_advisory_xact_lock({SOURCE_A})", [])])
    bounded.join()
    tried = c.execute(f"SELECT pg_try_advisory_xact_lock({SOURCE_A})").fetchone()[0]
    c.rollback()
    a.commit()
    note("advisory_lock_timeout", {"error": bounded.error, "waited_ms": bounded.waited_ms, "try_lock": tried},
         f"lock_timeout 200 ms: {bounded.error[:45]} after {bounded.waited_ms} ms; try_lock gave {tried}")


def snapshot_after_lock(a: Any, b: Any, note: Note) -> None:
    """Under REPEATABLE READ the statement that waits for the lock already took the snapshot."""
    from psycopg import IsolationLevel

    seen = {}
    for level in (IsolationLevel.REPEATABLE_READ, IsolationLevel.READ_COMMITTED):
        b.isolation_level = level
        before = a.execute("SELECT indexed_to FROM src_state WHERE src = 1").fetchone()[0]
        a.execute("SELECT pg_advisory_xact_lock(42)")
        a.execute("UPDATE src_state SET indexed_to = indexed_to + 100 WHERE src = 1")
        steps: list[tuple[str, Sequence[Any]]] = [("SELECT pg_advisory_xact_lock(42)", [])]
        reader = Background(b, [*steps, ("SELECT indexed_to FROM src_state WHERE src = 1", [])])
        time.sleep(0.3)
        a.commit()
        got = reader.join().values[1][0]
        seen[level.name] = {"before": before, "saw": got, "true": before + 100}
        b.isolation_level = None
    rr, rc = seen["REPEATABLE_READ"], seen["READ_COMMITTED"]
    note("rr_snapshot_after_lock", seen,
         f"after the wait: REPEATABLE READ saw {rr['saw']} (true {rr['true']}), RC {rc['saw']} ({rc['true']})")


def one_line_catch_up(a: Any, note: Note, runs: int = 200) -> None:
    """The catch-up of one appended line: lock, state check, insert into both GIN indexes, new state."""
    if not a.execute("SELECT to_regclass('doc') IS NOT NULL").fetchone()[0]:
        return
    row = a.execute("SELECT src, c, t, created_at, bonus, terms FROM doc WHERE id = 1").fetchone()
    a.commit()
    times = []
    for i in range(runs):
        started = time.perf_counter()
        a.execute(f"SELECT pg_advisory_xact_lock({SOURCE_A})")
        a.execute("SELECT indexed_to FROM src_state WHERE src = 1 FOR UPDATE")
        a.execute("INSERT INTO doc (id, src, c, t, created_at, bonus, terms) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                  [20_000_000 + i, *row])
        a.execute("UPDATE src_state SET indexed_to = indexed_to + 1 WHERE src = 1")
        a.commit()
        times.append((time.perf_counter() - started) * 1000)
    a.execute("DELETE FROM doc WHERE id >= 20000000")
    a.commit()
    times.sort()
    p50, p95, worst = times[runs // 2], times[int(runs * 0.95) - 1], times[-1]
    note("catchup_one_line_ms", {"p50": round(p50, 2), "p95": round(p95, 2), "max": round(worst, 2)},
         f"one appended line (lock, check, insert, state): p50 {p50:.2f}, p95 {p95:.2f}, max {worst:.1f} ms")


def probe_locks(url: str, note: Note) -> None:
    with sessions(url, 3) as (a, b, c):
        a.execute("CREATE TABLE newword (word text PRIMARY KEY)")
        a.execute("CREATE TABLE src_state (src int PRIMARY KEY, indexed_to bigint NOT NULL)")
        a.execute("INSERT INTO src_state VALUES (1, 0), (2, 0)")
        a.commit()
        same_new_word(a, b, note)
        opposite_order(a, b, note)
        sorted_autocommit(a, b, note)
        advisory(a, b, c, note)
        snapshot_after_lock(a, b, note)
        one_line_catch_up(a, note)
