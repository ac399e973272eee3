"""What a search did: the steps the planner took, with candidate counts and times.

``MemoryCatalog.explain`` (and ``memstore search --explain``) runs a search with a
:class:`SearchTrace` and returns a :class:`SearchPlan`, the way ``EXPLAIN QUERY
PLAN`` shows what SQLite chose.  The trace watches the planner from outside: a
:class:`TracedPlanner` wraps the planner's steps and records each call, so the
untraced search runs exactly the code it always ran.  Times are each step's own
(a walk's time excludes the fallback it started).

Steps, in the order the planner takes them (see :mod:`memstore.index.search`):

- ``terms``: the vocabulary is asked which terms of each column contain a piece of a
  token; a token no term can hold ends the search with no results.
- ``narrow``: the word index is asked for the rows of the rarest token (or of the rare
  tokens together); when few, those rows are scored and the search is done.
- ``expand``: per token and column (content, tags), or both columns at once, the rows
  that hold it, when few, are scored outright, lowering the best score the remaining
  rows can reach.
- ``walk``: one bonus class, newest first, until no later row can enter the top k.
- ``fallback``: a walk past its time budget scores every row the word index admits for
  every token, or finishes the walk without a budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from memstore.index import search
from memstore.index.search import Fetched, Hit, Match, Planner, SearchQueries, TopK
from memstore.index.terms import CONTENT, MARKS_OF, TAGS, TermSet, mark_chars


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

    def planner(self, queries: SearchQueries, tokens: Sequence[str], k: int, total_rows: int) -> Planner:
        return TracedPlanner(queries, tokens, k, total_rows, trace=self)

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
            self.steps[slot] = PlanStep(record.step, record.detail, record.candidates, record.outcome, round(own, 6))

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)


def _few(found: set[int] | None, cap: int) -> tuple[int | None, str]:
    if found is None:
        return None, f"too many (at least {cap})"
    return len(found), "few: scored outright"


COLUMN_NAMES = {CONTENT: "content", TAGS: "tags"}


class TracedPlanner(Planner):
    """The planner with each step recorded in a :class:`SearchTrace`; answers are unchanged."""

    def __init__(
        self, queries: SearchQueries, tokens: Sequence[str], k: int, total_rows: int, *, trace: SearchTrace
    ) -> None:
        super().__init__(queries, tokens, k, total_rows)
        self.trace = trace
        self._phase = "narrow"

    def _lookup(self, piece: str, position: str) -> tuple[TermSet, TermSet]:
        where = {"inside": "containing", "starts": "starting with", "ends": "ending with", "whole": "equal to"}
        with self.trace.timed("terms", f"terms {where[position]} {piece!r}") as step:
            content, tags = super()._lookup(piece, position)
            step.candidates = sum(len(found.terms) for found in (content, tags) if found.terms is not None)
            step.outcome = "; ".join(
                f"{name}: {_terms_outcome(found)}" for name, found in (("content", content), ("tags", tags))
            )
        return content, tags

    def _mark(self, code: str, kind: int) -> TermSet:
        column = "content" if kind == MARKS_OF[CONTENT] else "tags"
        with self.trace.timed("terms", f"mark {mark_chars(code)!r} in {column}") as step:
            found = super()._mark(code, kind)
            step.candidates = found.rows
            step.outcome = f"in at most {found.rows} rows" if found.terms else "in no row"
        return found

    def _narrow_rows(self, match: Match, label: str, *, cap: int | None = None) -> Fetched | None:
        self._phase = "narrow"
        with self.trace.timed("narrow", f"rows of {label} in the word index") as step:
            fetched = super()._narrow_rows(match, label, cap=cap)
            if fetched is None:
                step.outcome = f"too many (at least {search.SET_ROWS if cap is None else cap})"
            else:
                step.candidates = fetched.rows
                if fetched.rows >= search.SET_ROWS:
                    step.outcome = f"fewer than {cap}: the fallback's set, scored outright"
                elif fetched.rows < self.direct:
                    step.outcome = "few: scored outright"
                else:
                    step.outcome = f"fewer than {search.SET_ROWS}"
        return fetched

    def _narrow_counted(self, match: Match, label: str, rows: int) -> Fetched:
        self._phase = "narrow"
        with self.trace.timed("narrow", f"rows of {label}, counted by the vocabulary") as step:
            fetched = super()._narrow_counted(match, label, rows)
            step.candidates, step.outcome = rows, f"fewer than {search.SET_ROWS}: the walk's filter, not fetched"
        return fetched

    def _score_fetched(self, fetched: Fetched) -> list[Hit]:
        with self.trace.timed(self._phase, "score the candidates in SQL") as step:
            hits = super()._score_fetched(fetched)
            step.candidates, step.outcome = fetched.rows, "scored"
        return hits

    def _expand_ids(self, token: str, kind: int, match: Match) -> set[int] | None:
        self._phase = "expand"
        with self.trace.timed("expand", f"{token!r} in {COLUMN_NAMES[kind]}") as step:
            found = super()._expand_ids(token, kind, match)
            step.candidates, step.outcome = _few(found, self.cap)
        return found

    def _both_ids(self, token: str, match: Match) -> set[int] | None:
        self._phase = "expand"
        with self.trace.timed("expand", f"{token!r} in content and tags") as step:
            found = super()._both_ids(token, match)
            step.candidates, step.outcome = _few(found, self.cap)
        return found

    def _fallback_rows(self, match: Match) -> Fetched | None:
        self._phase = "fallback"
        with self.trace.timed("fallback", "rows the word index admits for every token") as step:
            fetched = super()._fallback_rows(match)
            step.candidates = None if fetched is None else fetched.rows
            few = fetched is not None
            step.outcome = "few enough to score them all" if few else f"too many (at least {search.FALLBACK_CAP})"
        return fetched

    def _score_ids(self, ids: set[int]) -> list[Hit]:
        if not ids:
            return super()._score_ids(ids)
        with self.trace.timed(self._phase, "score the candidates in SQL") as step:
            hits = super()._score_ids(ids)
            step.candidates, step.outcome = len(ids), "scored"
        return hits

    def _restricted(self) -> list[Hit] | None:
        with self.trace.timed("narrow", "rows the filter admits") as step:
            hits = super()._restricted()
            step.outcome = "few: scored outright" if hits is not None else "none or too many"
        return hits

    def _restricted_fallback(self) -> list[Hit] | None:
        with self.trace.timed("fallback", "rows the filter admits") as step:
            hits = super()._restricted_fallback()
            step.outcome = "few: scored outright" if hits is not None else "none or too many"
        return hits

    def _score_all(self) -> list[Hit]:
        with self.trace.timed("walk", "score every row in one SQL pass") as step:
            hits = super()._score_all()
            step.outcome = "scored"
        return hits

    def _walk(self, ceiling: int, expanded: set[int], top: TopK) -> None:
        filters = self._filters()
        skipped = self._filters_outlast(search.WALK_SECONDS)
        detail = f"every bonus class, best first; best reachable score {ceiling} + bonus"
        if self.narrowed is not None:
            detail += f"; only the {self.narrowed[1].rows} narrowed rows"
        elif filters:
            detail += f"; rows tested against {len(filters)} word-index set(s) first"
            if self._probe_first():
                detail += f" (after {search.PROBE_SECONDS * 1000:g} ms without them)"
            if skipped:
                detail += "; too large to build within its budget"
        with self.trace.timed("walk", detail) as step:
            before = len(self.trace.steps)
            self._phase = "fallback"
            super()._walk(ceiling, expanded, top)
            interrupted = len(self.trace.steps) > before
            step.candidates = self.walked
            if not interrupted:
                step.outcome = "done"
            else:
                step.outcome = "the fallback first" if skipped else "over its time budget"


def _terms_outcome(found: TermSet) -> str:
    if found.terms is None:
        return f"more than {search.TERM_CAP} terms"
    if not found.terms:
        return "none"
    return f"{len(found.terms)} terms, at most {found.rows} rows"
