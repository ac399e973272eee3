"""Exact top-k search over indexed catalog rows: the planner, the same on every backend.

Scores are small integers: +3 per token in the (Python-lowered) content, +2 per
token in some tag, plus the row's tag bonus; the order is score desc, created_at
desc, file order (DESIGN.md §4).  A backend supplies the SQL
(:class:`SearchQueries`: term lookups, row sets, exact scoring, walks); this module
decides which of those run, so the semantics live here once.

The word index files each row under its terms (see :mod:`memstore.index.terms`):
the rows that may hold a token are the rows of the terms containing its pieces, and
the vocabulary is small enough that finding those terms is cheap even for one- and
two-character tokens.  The planner combines exact pieces:

1. *Terms*: each token's terms per column, with an upper bound of their rows.  A
   token no term can hold matches nothing, and the search ends at once.
2. *Narrow*: when the rarest token (or the intersection of the rare ones) leaves
   few rows, score exactly those rows.
3. *Expand*: for each token and column whose rows are few, score those rows
   outright; every other row then provably lacks the token there, which lowers the
   best score such a row can reach.  When both columns are large but the rows holding
   the token in both are few, those are expanded instead.
4. *Walk*: walk the remaining rows per bonus class, newest first, scoring each, and
   stop as soon as no later row of the class can still enter the top k.  A walk that
   runs long switches to one exact pass over the rows the word index admits for every
   token, when they are few, or else carries on from the row it had reached.

When ``k`` is large next to the catalog the walk cannot stop early, so every row is
scored in one SQL pass instead.  The top k is a heap (O(log k) a row), so no plan
costs more than a constant factor over one pass over the rows.

Row sets from the word index are supersets of the rows holding a token (exact for a
token of one piece); every candidate is scored by the backend's exact substring test,
so no answer depends on the terms beyond speed.  Rows SQL cannot hold exactly (lone
surrogates, NUL, runs longer than a term may be) are the caller's, scored in Python.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Generator, Sequence
from contextlib import closing
from typing import NamedTuple, Protocol

from memstore.index.db import IndexBusyError
from memstore.index.terms import CONTENT, MARKS_OF, TAGS, TermSet, piece_parts, token_marks
from memstore.models import CONTENT_POINTS, TAG_POINTS, Descending

CANDIDATE_CAP = 1000
"""Sets of candidate rows up to this size are fetched and scored outright (each costs a read of
its row, a few µs); larger ones are left to the walk, whose cost does not grow with the catalog."""
DIRECT_ROWS = 2000
"""A narrowed set of exact matches up to this size is scored outright (a read of each row); a
larger one is walked, which reads only the rows that can still enter the top k."""
SET_ROWS = 10_000
"""Word-index sets of at most this many rows are fetched by the narrow step, or become filters
of the walk: rows outside them are skipped on the index alone, without reading the row."""
FILTER_ROWS = 60_000
"""Tokens whose rows are at most this many become filters of the walk (built once, in C, about a
tenth of a µs a row): rows outside them are skipped on the index, without reading the row."""
MAX_FILTERS = 3
EXPAND_COST = 2_000_000
"""Word-index work (rows times terms of each OR) an expansion of both columns may cost: an OR of
many terms is evaluated row by row over all its terms, so a common piece is not worth it."""
AND_ROWS = 150_000
"""Tokens whose terms cover at most this many rows are intersected by the word index when no
single one is rare: the intersection costs about a tenth of a microsecond a row."""
TERM_CAP = 200
"""Terms per piece and column beyond which the column is *dense* for the piece: a set over that
many terms costs more to evaluate than the walk it would save."""
PART_ROWS = 200_000
"""Of a token's pieces and marks, those held by more rows than this are left out of its word-index
set (a superset either way; a large part costs more to intersect than it removes)."""
MATCH_TERMS = 2000
"""Terms one word-index expression may name; a longer one (a long pasted query) is not built."""
PROGRESS_OPS = 200
WALK_SECONDS = 0.015
"""How long the walk may run before a cheaper exact pass is considered.  Either path
gives the exact answer; the budget only decides which one is taken."""
PROBE_SECONDS = 0.004
"""How long a one-token walk may first run without its filter, when building it costs more."""
FILTER_ROW_SECONDS = 3e-7
"""About what a walk filter costs a row to build where the backend builds it whole before the
walk reads its first row (measured at 1M: 57k rows, 15–18 ms)."""
PROBE_FILTER_ROWS = 20_000
"""A filter holding this many rows costs more to build than the probe: a common token's walk
ends in the first class's newest rows, often before its filter would be built."""
SPARSE_WALK = 1.5
"""Where a walk tests its filter on each row it reads (``walk_builds_filters`` false), its first batch
over a narrowed set of n rows reads about FIRST_FETCH * total / n rows: a set smaller than SPARSE_WALK
times sqrt(FIRST_FETCH * total) is scored outright instead, which reads each of its rows once."""
ROW_SECONDS = 3e-6
"""About what scoring one row outright costs (reading it): the walk over a narrowed set gets that
much time per row before the set is scored outright instead."""
FALLBACK_CAP = 30_000
"""An interrupted walk scores the word-index candidates outright when there are fewer than this:
a walk that did not stop early may read every row, far more than these."""
FETCH = 256
FIRST_FETCH = 16
"""A walk's first batch; batches double up to FETCH, so a walk that stops early reads few rows."""
WALK_ROWS = 16_000
WALK_SHARE = 2
"""Walks that bring more rows than WALK_ROWS, four times the limit and 1/WALK_SHARE of the catalog
into Python give way to one pass (a pass costs far more a row than a walk's matching row)."""
ONE_PASS_SHARE = 8
"""A limit of at least 1/ONE_PASS_SHARE of the rows is answered by scoring every row in one pass."""
MAX_SQL_TOKENS = 2000
"""Distinct tokens one search binds (two parameters each, within SQLite's variable limit)."""


class Hit(NamedTuple):
    """A scored row: ``sort_key`` orders hits exactly as the spec does."""

    score: int
    created_at: str
    row_id: int

    def sort_key(self) -> tuple[int, Descending, int]:
        return (-self.score, Descending(self.created_at), self.row_id)


Rank = tuple[int, str, int]
"""(score, created_at, -row_id): larger is better, the inverse of ``Hit.sort_key``."""


class TopK:
    """The best ``k`` hits seen so far, deduplicated by row id: a min-heap with the worst on top."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.heap: list[tuple[Rank, Hit]] = []
        self.seen: set[int] = set()

    def offer(self, hit: Hit) -> None:
        if hit.row_id in self.seen:
            return
        self.seen.add(hit.row_id)
        rank = (hit.score, hit.created_at, -hit.row_id)
        if len(self.heap) < self.k:
            heapq.heappush(self.heap, (rank, hit))
        elif rank > self.heap[0][0]:
            heapq.heapreplace(self.heap, (rank, hit))

    def offer_all(self, hits: Sequence[Hit]) -> None:
        for hit in hits:
            self.offer(hit)

    def result(self) -> list[Hit]:
        return sorted((hit for _rank, hit in self.heap), key=Hit.sort_key)

    def full(self) -> bool:
        return len(self.heap) >= self.k

    def worst(self) -> Hit:
        return self.heap[0][1]

    def could_enter(self, score: int, created_at: str, row_id: int) -> bool:
        """Could a hit ranked like this (or any ranked below it) still enter the top k?"""
        return len(self.heap) < self.k or (score, created_at, -row_id) > self.heap[0][0]


# ---------------------------------------------------------------- word-index expressions


class Has(NamedTuple):
    """Rows with at least one of ``terms`` in the column ``kind`` (CONTENT or TAGS)."""

    kind: int
    terms: tuple[str, ...]


class AllOf(NamedTuple):
    parts: tuple[Match, ...]


class AnyOf(NamedTuple):
    parts: tuple[Match, ...]


Match = Has | AllOf | AnyOf
"""A set of rows the word index can produce: backends compile it to their own SQL."""


class Fetched(NamedTuple):
    """The rows of a word-index set, fetched once: scoring them then costs a read of each row,
    where scoring the expression would evaluate it in the word index a second time."""

    rows: int
    held: object
    """The backend's own form of the set (only it reads this); None before it is fetched."""


def term_count(match: Match) -> int:
    if isinstance(match, Has):
        return len(match.terms)
    return sum(term_count(part) for part in match.parts)


def all_of(parts: Sequence[Match]) -> Match:
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


def any_of(parts: Sequence[Match]) -> Match:
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


class Column(NamedTuple):
    """What the word index knows about one token in one column.

    ``match`` holds every row holding the token in this column (None: unknown, the column
    is dense or the token has no pieces); ``rows`` bounds its size; ``impossible`` means no
    row can hold the token here.
    """

    match: Match | None
    rows: int
    impossible: bool = False


UNKNOWN = Column(None, 0)
IMPOSSIBLE = Column(None, 0, impossible=True)


class TokenTerms(NamedTuple):
    """A query token (with how often it was given) and its word-index columns."""

    token: str
    multiplicity: int
    content: Column
    tags: Column
    parts: int = 1
    """Pieces and marks of the token: several make each column's rows an intersection."""

    @property
    def impossible(self) -> bool:
        return self.content.impossible and self.tags.impossible

    @property
    def whole(self) -> Match | None:
        """Every row holding the token somewhere, when both columns are known (or impossible)."""
        parts = [column.match for column in (self.content, self.tags) if not column.impossible]
        if any(part is None for part in parts):
            return None
        known = [part for part in parts if part is not None]
        return any_of(known) if known else None

    @property
    def rows(self) -> int:
        return self.content.rows + self.tags.rows


def column_of(parts: Sequence[tuple[int, TermSet]]) -> Column:
    """One column of a token from its parts: every piece must lie inside a term, every mark occur.

    ``parts`` pairs each part's term kind with the terms found for it.
    """
    if not parts:
        return UNKNOWN
    if any(found.empty for _kind, found in parts):
        return IMPOSSIBLE
    known = sorted(
        ((found.rows, kind, found.terms) for kind, found in parts if found.terms is not None), key=lambda item: item[0]
    )
    if not known:
        return UNKNOWN
    if len(parts) > 1:
        # Every part only narrows a superset: parts that narrow little cost more than they save.
        known = known[:1] + [part for part in known[1:] if part[0] <= PART_ROWS]
    match = all_of([Has(kind, terms) for _rows, kind, terms in known])
    return Column(match, known[0][0])


# ---------------------------------------------------------------- what a backend supplies

WalkRow = tuple[int, int, str, int]
"""(row id, exact score, created_at, bonus) of a walked row."""


class WalkInterrupted(Exception):
    """A walk ran past its time budget (the backend stopped the statement)."""


class SearchQueries(Protocol):
    """The SQL of one search on one backend, bound to its tokens and restriction.

    Every method is exact for the rows the backend holds in SQL.  Scores and matching
    use the backend's exact substring test over Python-lowered text.
    """

    restriction_impossible: bool
    """The filter can admit no SQL-held row (only the caller's odd rows can match)."""
    filtered: bool
    """A filter restricts the rows (``restricted`` may then narrow to them)."""
    walk_builds_filters: bool
    """A walk builds each word-index filter whole before it reads a row (so a large one is worth
    a probe without it); otherwise filters are tested row by row as the walk goes."""

    def lookup(self, piece: str, position: str, cap: int) -> tuple[TermSet, TermSet]:
        """The content and tag terms holding ``piece`` at ``position`` (None terms when more than ``cap``).

        A superset is allowed (every candidate row is checked exactly); a term missing is not.
        """
        ...

    def mark(self, code: str, kind: int) -> TermSet:
        """The mark ``code`` in the marks column ``kind``: one term, or none when no row holds it."""
        ...

    def ids(self, match: Match, cap: int) -> set[int] | None:
        """Ids of the rows ``match`` admits, when fewer than ``cap``; else None."""
        ...

    def fetch(self, match: Match, cap: int) -> Fetched | None:
        """The rows ``match`` admits, held for :meth:`score_fetched`, when fewer than ``cap``; else None.

        A little more than counting them (SQLite joins the ids into one string, also when they turn
        out too many: 4.4 against 2.8 ms at the 30,000 cap); the set stays in the backend's own form.
        """
        ...

    def score_ids(self, ids: set[int], k: int) -> list[Hit]:
        """The best ``k`` of these rows that match every token (and the filter), ordered."""
        ...

    def score_fetched(self, fetched: Fetched, k: int) -> list[Hit]:
        """The best ``k`` of the fetched rows that match every token (and the filter), ordered."""
        ...

    def restricted(self, cap: int, k: int) -> list[Hit] | None:
        """When fewer than ``cap`` rows pass the filter, the best ``k`` of them; else None."""
        ...

    def score_all(self, k: int) -> list[Hit]:
        """The best ``k`` matching rows of the whole catalog in one pass, ordered."""
        ...

    def walk(
        self, filters: Sequence[Match], after: tuple[int, str, int] | None, seconds: float | None
    ) -> Generator[list[WalkRow], None, None]:
        """Matching rows, best bonus class first and newest first, in growing batches.

        Starts just after ``after`` (bonus, created_at, id).  Rows outside any of ``filters``
        are skipped before they are read.  With ``seconds``, raises WalkInterrupted once the
        walk has run that long.
        """
        ...


class _WalkTooLong(Exception):
    """The walks have visited more rows than a single scoring pass would cost."""


class QueryTooLargeError(IndexBusyError):
    """More distinct tokens than one SQL statement can bind; the caller scans instead."""


class Planner:
    """Plans and runs one search over a consistent read snapshot of one backend."""

    def __init__(self, queries: SearchQueries, tokens: Sequence[str], k: int, total_rows: int) -> None:
        self.q = queries
        self.k = k
        self.counts = Counter(tokens)
        self.tokens = list(self.counts)
        self.total_rows = total_rows
        # Candidates up to about twice the limit are scored outright: a walk would visit as many.
        self.cap = max(CANDIDATE_CAP, min(2 * k, FALLBACK_CAP))
        self.direct = max(self.cap, min(DIRECT_ROWS, FALLBACK_CAP))
        """A narrowed set up to this size is scored outright; a larger one becomes the walk's filter."""
        if not queries.walk_builds_filters:
            # ``total_rows`` sums the sources' recorded counts (database input): never below 0 here.
            sparse = int(SPARSE_WALK * math.isqrt(FIRST_FETCH * max(total_rows, 0)))
            self.direct = max(self.direct, min(sparse, SET_ROWS, FALLBACK_CAP))
        self.walked = 0
        # A full SQL pass costs far more a row than a walk's matching row brought into Python:
        # the walks give way only when they have brought in a large share of the catalog.
        self.walk_cap = max(WALK_ROWS, 4 * k, total_rows // WALK_SHARE)
        self.terms: list[TokenTerms] = []
        self.narrowed: tuple[Match, Fetched] | None = None
        """A superset of the matching rows, found by the narrow step: the walk reads only these."""
        self.fallback_too_many = False
        """The fallback's set was fetched by the narrow step already and held FALLBACK_CAP rows or more."""

    # ------------------------------------------------------------------ the plan

    def run(self) -> list[Hit]:
        if self.q.restriction_impossible:
            return []
        self.terms = [self._token_terms(token, self.counts[token]) for token in self.tokens]
        if any(found.impossible for found in self.terms):
            return []
        narrowed = self._narrow()
        if narrowed is not None:
            return narrowed
        restricted = self._restricted() if self.q.filtered else None
        if restricted is not None:
            return restricted
        if self.k * ONE_PASS_SHARE >= self.total_rows:
            return self._score_all()
        top = TopK(self.k)
        expanded: set[int] = set()
        ceiling = 0
        for found in self.terms:
            content = self._expand_column(found, CONTENT)
            tags = self._expand_column(found, TAGS)
            if content is not None and tags is not None:
                # Every matching row holds this token in one of the two sets: score them all.
                top.offer_all(self._score_ids(content | tags))
                return top.result()
            if content is not None:
                expanded |= content
                ceiling += TAG_POINTS * found.multiplicity
            elif tags is not None:
                expanded |= tags
                ceiling += CONTENT_POINTS * found.multiplicity
            elif self.narrowed is not None:
                # Rows reaching the ceiling (this token in both columns) are rare, so a walk would
                # read most of the narrowed set: scoring all of it costs no more, and is bounded.
                narrowed = self._score_narrowed()
                if narrowed is None:
                    return self._score_all()
                top.offer_all(narrowed)
                return top.result()
            else:
                both = self._expand_both(found)
                if both is not None:
                    # The rows holding the token in both columns are scored; any other row
                    # holds it in one column at most.
                    expanded |= both
                    ceiling += max(CONTENT_POINTS, TAG_POINTS) * found.multiplicity
                else:
                    ceiling += (CONTENT_POINTS + TAG_POINTS) * found.multiplicity
        top.offer_all(self._score_ids(expanded))
        try:
            self._walk(ceiling, expanded, top)
        except _WalkTooLong:
            # The walk cannot stop early for this query: one pass in SQL costs less than
            # bringing every row into Python, and gives the whole answer by itself.
            return self._score_all()
        return top.result()

    def _token_terms(self, token: str, multiplicity: int) -> TokenTerms:
        found = [self._lookup(piece, position) for piece, position in piece_parts(token)]
        columns = []
        for index, kind in enumerate((CONTENT, TAGS)):
            parts = [(kind, sets[index]) for sets in found]
            parts += [(MARKS_OF[kind], self._mark(code, MARKS_OF[kind])) for code in token_marks(token)]
            columns.append(column_of(parts))
        return TokenTerms(token, multiplicity, columns[0], columns[1], len(found) + len(token_marks(token)))

    def _known(self) -> list[tuple[int, int, Match]]:
        """(rows, token index, whole match) of the tokens whose rows the word index knows, rarest first."""
        return sorted(
            (
                (found.rows, index, whole)
                for index, found in enumerate(self.terms)
                if (whole := found.whole) is not None and term_count(whole) <= MATCH_TERMS
            ),
            key=lambda item: item[:2],
        )

    def _narrow(self) -> list[Hit] | None:
        """The rarest token's rows, or the rare tokens' common rows, scored when few.

        When they are too many to score outright but few enough to count, they become the
        walk's only filter (``self.narrowed``): the walk then reads only those rows.  A set of
        one term is counted by the vocabulary already (its row count is exact): when that is
        too many to score outright it becomes the filter without being fetched.
        """
        known = self._known()
        if not known:
            return None
        options: list[tuple[Match, str, bool, int | None]] = []
        rows, index, rarest = known[0]
        if rows < SET_ROWS:
            counted = rows if term_count(rarest) == 1 else None
            options.append((rarest, f"{self.terms[index].token!r}", self.terms[index].parts == 1, counted))
        small = [(index, whole) for rows, index, whole in known if rows <= AND_ROWS]
        # Two tokens, or the parts of one (``retry_backoff``, ``"memory"``): an intersection
        # the rows estimate cannot see, cheap to count in the word index.
        together = len(small) >= 2 or (small and self.terms[small[0][0]].parts > 1 and not options)
        if together and sum(term_count(whole) for _index, whole in small) <= MATCH_TERMS:
            first = self.terms[small[0][0]].token
            label = f"{len(small)} tokens together" if len(small) > 1 else f"the parts of {first!r}"
            exact = all(self.terms[index].parts == 1 for index, _whole in small)
            options.append((all_of([whole for _index, whole in small]), label, exact, None))
        fallback = self._fallback_match() if self._fallback_first() else None
        for match, label, exact, counted in options:
            cap = FALLBACK_CAP if match == fallback and self.narrowed is None else SET_ROWS
            if self._counted_rows(match) >= cap:
                # One term counted by the vocabulary (``src/`` once its common mark is left out):
                # its fetch could only find it too large.
                self.fallback_too_many |= match == fallback
                continue
            if exact and counted is not None and counted >= self.direct:
                fetched: Fetched | None = self._narrow_counted(match, label, counted)
            elif match == fallback and self.narrowed is None:
                # The walk would go straight to the fallback, which fetches this very set again with
                # its larger cap: fetch it once with that cap, and score it here when it is large.
                fetched = self._narrow_rows(match, label, cap=FALLBACK_CAP)
                if fetched is None:
                    self.fallback_too_many = True
                    continue
                if fetched.rows >= SET_ROWS:
                    return self._score_fetched(fetched)
            else:
                fetched = self._narrow_rows(match, label)
            if fetched is None:
                continue
            # A superset (a token with separators or several pieces) may hold few true matches,
            # so a walk over it could find none and read every row: score it outright.
            if fetched.rows < self.direct or not exact:
                return self._score_fetched(fetched)
            if self.narrowed is None or fetched.rows < self.narrowed[1].rows:
                self.narrowed = (match, fetched)
        return None

    def _counted_rows(self, match: Match) -> int:
        """The rows of a set of one term, which the vocabulary counts exactly (0 for any other set)."""
        if isinstance(match, Has) and len(match.terms) == 1:
            return next((rows for rows, _index, whole in self._known() if whole == match), 0)
        return 0

    def _filters(self) -> list[Match]:
        """Word-index sets a walk tests rows against before reading them: the rare tokens' rows."""
        if self.narrowed is not None:
            return [self.narrowed[0]]
        return [whole for _rows, whole in self._filter_sets()]

    def _filter_sets(self) -> list[tuple[int, Match]]:
        return [(rows, whole) for rows, _index, whole in self._known() if rows <= FILTER_ROWS][:MAX_FILTERS]

    def _filter_rows(self) -> int:
        """Rows the walk's filters hold together (bounds from the vocabulary): what building them costs."""
        return sum(rows for rows, _whole in self._filter_sets())

    def _probe_first(self) -> bool:
        """Whether the walk should first run briefly without its filter, which is costly to build.

        Only for one token: its rows are dense in the walk's order when its filter is large, so
        a short walk often fills the top k; rows matching several tokens at once may be sparse.
        """
        return (
            self.q.walk_builds_filters
            and self.narrowed is None
            and len(self.terms) == 1
            and self._filter_rows() >= PROBE_FILTER_ROWS
        )

    def _filters_outlast(self, budget: float) -> bool:
        """Whether building the walk's filters would take the whole budget: the walk would read nothing."""
        built = self.q.walk_builds_filters and self.narrowed is None
        return built and self._filter_rows() * FILTER_ROW_SECONDS >= budget > 0

    def _fallback_first(self) -> bool:
        """Whether the plan would reach the walk only to skip it for the fallback (see _filters_outlast).

        Not when a filter, a large limit, a token whose columns are both few or the walk's probe
        (which often ends a dense token's walk at once) would answer first.
        """
        return (
            not self.q.filtered
            and self.k * ONE_PASS_SHARE < self.total_rows
            and not any(self._expandable(found.content) and self._expandable(found.tags) for found in self.terms)
            and not self._probe_first()
            and self._filters_outlast(WALK_SECONDS)
        )

    def _expandable(self, column: Column) -> bool:
        """Whether _expand_column may give this column's rows (from the bounds alone, no SQL)."""
        if column.impossible:
            return True
        return column.match is not None and column.rows < self.cap and term_count(column.match) <= MATCH_TERMS

    def _expand_column(self, found: TokenTerms, kind: int) -> set[int] | None:
        """The rows holding the token in this column when few (empty when it cannot be there)."""
        column = found.content if kind == CONTENT else found.tags
        if column.impossible:
            return set()
        if column.match is None or not self._expandable(column):
            return None
        return self._expand_ids(found.token, kind, column.match)

    def _expand_both(self, found: TokenTerms) -> set[int] | None:
        """The rows holding the token in the content and in a tag, when few."""
        content, tags = found.content.match, found.tags.match
        if content is None or tags is None or term_count(content) + term_count(tags) > MATCH_TERMS:
            return None
        cost = found.content.rows * term_count(content) + found.tags.rows * term_count(tags)
        if cost > EXPAND_COST:
            return None
        return self._both_ids(found.token, AllOf((content, tags)))

    def _fallback_match(self) -> Match | None:
        """Rows the word index admits for every token it knows well: a superset of the matches."""
        wholes = [whole for rows, _index, whole in self._known() if rows <= AND_ROWS]
        if not wholes or sum(map(term_count, wholes)) > MATCH_TERMS:
            return None
        return all_of(wholes)

    # ------------------------------------------------------------------ steps (traced from outside)

    def _lookup(self, piece: str, position: str) -> tuple[TermSet, TermSet]:
        return self.q.lookup(piece, position, TERM_CAP)

    def _mark(self, code: str, kind: int) -> TermSet:
        return self.q.mark(code, kind)

    def _narrow_rows(self, match: Match, _label: str, *, cap: int | None = None) -> Fetched | None:
        return self.q.fetch(match, SET_ROWS if cap is None else cap)

    def _narrow_counted(self, _match: Match, _label: str, rows: int) -> Fetched:
        """The set of one term, by its vocabulary count alone: fetched only if it is scored."""
        return Fetched(rows, None)

    def _score_narrowed(self) -> list[Hit] | None:
        """The narrowed set scored outright, fetched first when only its count was known.

        None when that fetch finds it too large to hold: the vocabulary's count was wrong (a
        damaged index), and the caller answers another way; the answer never rests on a count.
        """
        assert self.narrowed is not None
        match, fetched = self.narrowed
        if fetched.held is None:
            found = self._narrow_rows(match, "the narrowed set")
            if found is None:
                return None
            self.narrowed = (match, found)
            fetched = found
        return self._score_fetched(fetched)

    def _score_fetched(self, fetched: Fetched) -> list[Hit]:
        return self.q.score_fetched(fetched, self.k)

    def _expand_ids(self, _token: str, _kind: int, match: Match) -> set[int] | None:
        return self.q.ids(match, self.cap)

    def _both_ids(self, _token: str, match: Match) -> set[int] | None:
        return self.q.ids(match, self.cap)

    def _fallback_rows(self, match: Match) -> Fetched | None:
        return self.q.fetch(match, FALLBACK_CAP)

    def _score_ids(self, ids: set[int]) -> list[Hit]:
        return self.q.score_ids(ids, self.k) if ids else []

    def _restricted(self) -> list[Hit] | None:
        return self.q.restricted(self.cap, self.k)

    def _restricted_fallback(self) -> list[Hit] | None:
        return self.q.restricted(FALLBACK_CAP, self.k)

    def _score_all(self) -> list[Hit]:
        return self.q.score_all(self.k)

    def _walk(self, ceiling: int, expanded: set[int], top: TopK) -> None:
        """Walk every bonus class, best first and newest first; stop once no later row can enter.

        ``ceiling`` is the best score a row outside ``expanded`` can reach before its bonus.
        A walk that runs past WALK_SECONDS scores every word-index candidate outright when
        there are fewer than FALLBACK_CAP; otherwise it carries on, without a budget, from
        the row it had reached, so no row is walked twice.  Either way the answer is the same.
        """
        filters = self._filters()
        # The (bonus, created_at, id) of the last row taken: a resumed walk starts just after it.
        reached: list[tuple[int, str, int]] = []
        # Over a narrowed set the walk gets about the time scoring the whole set would take.
        budget = WALK_SECONDS if self.narrowed is None else min(WALK_SECONDS, self.narrowed[1].rows * ROW_SECONDS)
        try:
            if self._probe_first():
                try:
                    self._walk_rows([], None, PROBE_SECONDS, ceiling, expanded, top, reached)
                    return
                except WalkInterrupted:
                    pass  # carries on with the filter, just after the last row the probe took
            if not self._filters_outlast(budget):
                self._walk_rows(filters, reached[0] if reached else None, budget, ceiling, expanded, top, reached)
                return
        except WalkInterrupted:
            pass
        narrowed = None if self.narrowed is None else self._score_narrowed()
        if narrowed is not None:
            # A walk over few rows that cannot stop early: scoring them all costs less.
            top.offer_all(narrowed)
            return
        fallback = None if self.fallback_too_many else self._fallback_match()
        if fallback is not None:
            fetched = self._fallback_rows(fallback)
            if fetched is not None:
                top.offer_all(self._score_fetched(fetched))
                return
        restricted = self._restricted_fallback() if self.q.filtered else None
        if restricted is not None:
            # Fewer filtered rows than a long walk would read: score them all at once.
            top.offer_all(restricted)
            return
        # Carry on without a budget; rows outside the rarest token's rows are skipped on the index.
        known = self._known()
        filters = filters or [whole for rows, _index, whole in known[:1] if rows <= AND_ROWS]
        self._walk_rows(filters, reached[0] if reached else None, None, ceiling, expanded, top, [])

    def _walk_rows(
        self,
        filters: Sequence[Match],
        after: tuple[int, str, int] | None,
        seconds: float | None,
        ceiling: int,
        expanded: set[int],
        top: TopK,
        reached: list[tuple[int, str, int]],
    ) -> None:
        """Offer the walk's rows until none can enter; ``reached`` gets the last row taken.

        Rows come best bonus class first, newest first within a class: once a row cannot
        enter even at its class's best score, no later row can (later classes score less).
        """
        with closing(self.q.walk(filters, after, seconds)) as batches:
            for rows in batches:
                self.walked += len(rows)
                if self.walked > self.walk_cap:
                    raise _WalkTooLong
                for row_id, score, created_at, bonus in rows:
                    if row_id not in expanded:
                        top.offer(Hit(score, created_at, row_id))
                    if not top.could_enter(ceiling + bonus, created_at, row_id):
                        return
                last = rows[-1]
                reached[:] = [(last[3], last[2], last[0])]


class PlannerFactory(Protocol):
    """Makes the planner of one search: :class:`Planner`, or a traced one (memstore.index.trace)."""

    def __call__(self, queries: SearchQueries, tokens: Sequence[str], k: int, total_rows: int) -> Planner: ...


def sql_tokens(tokens: Sequence[str]) -> bool:
    """Whether a search can bind its tokens at all (checked before any SQL is built)."""
    if len(set(tokens)) > MAX_SQL_TOKENS:
        raise QueryTooLargeError(f"{len(set(tokens))} distinct query tokens; answering from a scan")
    return bool(tokens)
