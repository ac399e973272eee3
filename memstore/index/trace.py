"""What a search did: the steps the planner took, with candidate counts and times.

``MemoryCatalog.explain`` (and ``memstore search --explain``) runs a search with a
:class:`SearchTrace` and returns a :class:`SearchPlan`, the way ``EXPLAIN QUERY
PLAN`` shows what SQLite chose.  The trace watches the planner from outside: a
:class:`TracedPlanner` wraps the planner's steps and records each call, so the
untraced search runs exactly the code it always ran.  Times are each step's own
(a walk's time excludes the fallback it started).

Steps, in the order the planner takes them (see :mod:`memstore.index.search`):

- ``narrow``: the trigram index is asked which rows may hold every token; when few,
  those rows are scored and the search is done.
- ``expand``: per token and column (content, tags), the rows that hold it, when few,
  are scored outright, lowering the best score the remaining rows can reach.
- ``walk``: one bonus class, newest first, until no later row can enter the top k.
- ``fallback``: a walk past its time budget counts the trigram candidates and scores
  them all, or finishes the walk without a budget.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from memstore.index.search import Planner, TopK, fts_phrase

if TYPE_CHECKING:
    from memstore.index.restrict import Restriction


@dataclass(frozen=True)
class PlanStep:
    """One step of a search.

    ``candidates`` counts the rows the step fetched or counted; None when there were
    too many to fetch (the step stopped at its cap) or the step does not count rows.
    """

    step: str
    detail: str
    candidates: int | None
    outcome: str
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class SearchPlan:
    """How one search was answered: by the index (with its steps), by a scan, or not at all.

    ``path`` is ``"index"``, ``"scan"`` or ``"none"`` (no query tokens, or limit 0);
    ``reason`` says why a scan answered; ``index_state`` is the index's state before
    the search (``"fresh"``, ``"behind"``, ...), None when it was not used.
    ``memory_ids`` are the ids of the answer, best first: the same as ``search``.
    """

    query: str
    tokens: tuple[str, ...]
    limit: int
    path: str
    reason: str
    index_state: str | None
    steps: tuple[PlanStep, ...]
    memory_ids: tuple[str, ...]
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "query": self.query,
            "tokens": list(self.tokens),
            "limit": self.limit,
            "path": self.path,
            "reason": self.reason,
            "index_state": self.index_state,
            "steps": [step.to_dict() for step in self.steps],
            "memory_ids": list(self.memory_ids),
            "results": len(self.memory_ids),
            "seconds": self.seconds,
        }


@dataclass
class _Open:
    """A step being recorded; ``children`` is the time of steps it started."""

    step: str
    detail: str
    candidates: int | None = None
    outcome: str = ""
    children: float = 0.0


@dataclass
class SearchTrace:
    """Collects the steps of one search; pass :meth:`planner` as the planner factory."""

    steps: list[PlanStep] = field(default_factory=list)
    _stack: list[_Open] = field(default_factory=list)

    def planner(
        self,
        conn: sqlite3.Connection,
        tokens: Sequence[str],
        k: int,
        total_rows: int,
        *,
        restriction: Restriction | None = None,
    ) -> Planner:
        return TracedPlanner(conn, tokens, k, total_rows, trace=self, restriction=restriction)

    def add(self, step: str, detail: str, *, candidates: int | None, outcome: str, seconds: float) -> None:
        """Record a step timed by the caller."""
        self.steps.append(PlanStep(step, detail, candidates, outcome, round(seconds, 6)))

    @contextmanager
    def timed(self, step: str, detail: str) -> Iterator[_Open]:
        """Time a step; the caller fills in ``candidates`` and ``outcome``.  Recorded in start order."""
        record = _Open(step, detail)
        slot = len(self.steps)
        self.steps.append(PlanStep(step, detail, None, "", 0.0))
        self._stack.append(record)
        started = time.perf_counter()
        try:
            yield record
        finally:
            elapsed = time.perf_counter() - started
            self._stack.pop()
            if self._stack:
                self._stack[-1].children += elapsed
            own = max(0.0, elapsed - record.children)
            self.steps[slot] = PlanStep(
                record.step, record.detail, record.candidates, record.outcome, round(own, 6)
            )

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)


def _few(found: set[int] | None, cap: int) -> tuple[int | None, str]:
    if found is None:
        return None, f"too many (at least {cap})"
    return len(found), "few: scored outright"


class TracedPlanner(Planner):
    """The planner with each step recorded in a :class:`SearchTrace`; answers are unchanged."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        tokens: Sequence[str],
        k: int,
        total_rows: int,
        *,
        trace: SearchTrace,
        restriction: Restriction | None = None,
    ) -> None:
        super().__init__(conn, tokens, k, total_rows, restriction=restriction)
        self.trace = trace
        self._phase = "expand"
        self._content_queries = {
            f"c : {phrase}": token for token in self.tokens if (phrase := fts_phrase(token)) is not None
        }

    def _few_fts(self, query: str) -> set[int] | None:
        if query == self.long_query:
            self._phase = "narrow"
            detail = "rows the trigram index admits for every token"
        else:
            self._phase = "expand"
            detail = f"{self._content_queries.get(query, query)!r} in content"
        with self.trace.timed(self._phase, detail) as step:
            found = super()._few_fts(query)
            step.candidates, step.outcome = _few(found, self.cap)
        return found

    def _few_tagged(self, token: str) -> set[int] | None:
        self._phase = "expand"
        with self.trace.timed("expand", f"{token!r} in tags") as step:
            found = super()._few_tagged(token)
            step.candidates, step.outcome = _few(found, self.cap)
        return found

    def _score_ids(self, ids: set[int], top: TopK) -> None:
        if not ids:
            super()._score_ids(ids, top)
            return
        with self.trace.timed(self._phase, "score the candidates in SQL") as step:
            super()._score_ids(ids, top)
            step.candidates, step.outcome = len(ids), "scored"

    def _walk_class(self, bonus: int, ceiling: int, expanded: set[int], top: TopK) -> bool:
        detail = f"bonus class {bonus}, best reachable score {ceiling}"
        with self.trace.timed("walk", detail) as step:
            if top.full() and ceiling < top.worst().score:
                step.outcome = "skipped: no row of this class can enter the top k"
            before = len(self.trace.steps)
            finished = super()._walk_class(bonus, ceiling, expanded, top)
            if not step.outcome:
                interrupted = len(self.trace.steps) > before
                step.outcome = "over its time budget" if interrupted else "done"
        return finished

    def _count_fts(self, query: str, cap: int) -> int:
        with self.trace.timed("fallback", "count the rows the trigram index admits") as step:
            count = super()._count_fts(query, cap)
            step.candidates = count if count < cap else None
            step.outcome = "few enough to score them all" if count < cap else f"too many (at least {cap})"
        return count

    def _score_fts(self, query: str, top: TopK) -> None:
        with self.trace.timed("fallback", "score every row the trigram index admits") as step:
            super()._score_fts(query, top)
            step.outcome = "scored; the search is done"
