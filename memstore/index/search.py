"""Exact top-k search over the indexed catalog rows.

Scores are small integers: +3 per token in the (Python-lowered) content, +2 per
token in some tag, plus the row's tag bonus.  The order is score desc,
created_at desc, file order.  The planner never scores every row for a common
token; it combines three exact pieces:

1. *Narrow*: when the FTS5 trigram index (or the tag table) says few rows can
   match, score exactly those rows in SQL.
2. *Expand*: for each token and column whose hits are few, score those rows
   exactly; every other row then provably lacks that token in that column, which
   lowers the best score such a row can reach.
3. *Walk*: walk the remaining rows per bonus class, newest first, scoring each,
   and stop as soon as no later row of the class can still enter the top k.
   A walk that runs long switches to one exact pass over the trigram candidates
   when they are few, or else carries on from the row it had reached.

When ``k`` is large next to the catalog the walk cannot stop early, so every row
is scored in one SQL pass instead.  The top k is a heap (O(log k) a row), so no
plan costs more than a constant factor over one pass over the rows: the indexed
search is never slower than the scan, whatever the limit.

Rows SQLite cannot hold exactly (lone surrogates, NUL) are kept out of SQL and
scored in Python by the caller; tokens containing such characters skip SQL.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from memstore.index.db import IndexBusyError
from memstore.models import AUTO_CURATED_BONUS, CONTENT_POINTS, RUN_SUMMARY_BONUS, TAG_POINTS, Descending

if TYPE_CHECKING:
    from memstore.index.restrict import Restriction

BONUS_CLASSES = (AUTO_CURATED_BONUS + RUN_SUMMARY_BONUS, AUTO_CURATED_BONUS, RUN_SUMMARY_BONUS, 0)
CANDIDATE_CAP = 4000
"""Sets of candidate rows up to this size are fetched and scored outright (about 3 µs a row);
larger ones are left to the walk, whose cost does not grow with the catalog."""
PROGRESS_OPS = 200
WALK_SECONDS = 0.015
"""How long one class walk may run before a cheaper exact pass is considered.  Either path
gives the exact answer; the budget only decides which one is taken."""
FALLBACK_CAP = 20_000
"""An interrupted walk scores the FTS candidates outright when there are fewer than this."""
FETCH = 256
WALK_ROWS = 16_000
"""Walks that bring more rows than this (or four times the limit) into Python give way to one pass."""
ONE_PASS_SHARE = 8
"""A limit of at least 1/ONE_PASS_SHARE of the rows is answered by scoring every row in one pass."""
MAX_SQL_TOKENS = 2000
"""Distinct tokens one search binds (two parameters each, within SQLite's variable limit)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """A scored row: ``key`` orders hits exactly as the spec does."""

    score: int
    created_at: str
    row_id: int

    def sort_key(self) -> tuple[int, Descending, int]:
        return (-self.score, Descending(self.created_at), self.row_id)


def balanced(terms: Sequence[str], operator: str) -> str:
    """``terms`` joined by ``operator`` as a balanced parenthesised tree."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return f"({balanced(terms[:middle], operator)} {operator} {balanced(terms[middle:], operator)})"


def sql_safe(token: str) -> bool:
    """Tokens SQLite compares exactly: encodable as UTF-8 and without NUL."""
    if "\x00" in token:
        return False
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fts_phrase(token: str) -> str | None:
    """An FTS5 expression every row containing ``token`` matches, or None when it cannot be looked up.

    The index keeps column-level detail (no positions, a smaller index), so a token
    becomes the AND of its distinct trigrams, each quoted as a literal.  That is a
    superset of the rows containing the token; every candidate is verified with
    ``instr`` before it is scored.
    """
    if len(token) < 3 or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in token):
        return None
    grams = dict.fromkeys(token[i : i + 3] for i in range(len(token) - 2))
    return "(" + " AND ".join('"' + gram.replace('"', '""') + '"' for gram in grams) + ")"


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

    def result(self) -> list[Hit]:
        return sorted((hit for _rank, hit in self.heap), key=Hit.sort_key)

    def full(self) -> bool:
        return len(self.heap) >= self.k

    def worst(self) -> Hit:
        return self.heap[0][1]

    def could_enter(self, score: int, created_at: str, row_id: int) -> bool:
        """Could a hit ranked like this (or any ranked below it) still enter the top k?"""
        return len(self.heap) < self.k or (score, created_at, -row_id) > self.heap[0][0]


class _WalkTooLong(Exception):
    """The walks have visited more rows than a single scoring pass would cost."""


class Planner:
    """Plans and runs one search over a consistent read snapshot."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        tokens: Sequence[str],
        k: int,
        total_rows: int,
        *,
        restriction: Restriction | None = None,
    ) -> None:
        self.conn = conn
        self.restriction = restriction
        self.k = k
        self.counts = Counter(tokens)
        self.tokens = list(self.counts)
        self.params = {f"p{i}": token for i, token in enumerate(self.tokens)}
        self.total_rows = total_rows
        # Candidates up to about twice the limit are scored outright: a walk would visit as many.
        self.cap = max(CANDIDATE_CAP, min(2 * k, FALLBACK_CAP))
        self.walked = 0
        self.walk_cap = max(WALK_ROWS, 4 * k)
        """Rows the walks may bring into Python before one SQL pass over every row is cheaper."""
        self.long_query: str | None = None
        # Balanced trees keep the expression depth logarithmic in the number of tokens
        # (SQLite caps it at 1000), so long pasted queries still run in SQL.
        self.match_sql = balanced(
            [f"(instr(d.c, :p{i}) > 0 OR instr(d.t, :p{i}) > 0)" for i in range(len(self.tokens))], "AND"
        )
        if restriction is not None:
            # A filter is one more term of the match: every piece below stays exact with it.
            # The filter goes first: it reads short columns, so rows it rejects skip the content.
            self.match_sql = f"{restriction.sql} AND {self.match_sql}"
            self.params.update(restriction.params)
        self.score_sql = balanced(
            [
                f"({CONTENT_POINTS * m} * (instr(d.c, :p{i}) > 0) + {TAG_POINTS * m} * (instr(d.t, :p{i}) > 0))"
                for i, m in enumerate(self.counts.values())
            ]
            + ["d.bonus"],
            "+",
        )
        self.select = f"SELECT d.id, {self.score_sql} AS s, d.created_at"

    # -- the three pieces ---------------------------------------------------------

    def run(self) -> list[Hit]:
        top = TopK(self.k)
        if self.restriction is not None and self.restriction.impossible:
            return []
        phrases = [fts_phrase(token) for token in self.tokens]
        long_phrases = [p for p in phrases if p is not None]
        if long_phrases:
            self.long_query = " AND ".join(long_phrases)
            candidates = self._few_fts(self.long_query)
            if candidates is not None:
                self._score_ids(candidates, top)
                return top.result()
        if self.restriction is not None:
            narrow = self.restriction.narrowest(self.conn, self.cap)
            if narrow is not None:
                # Few rows pass the filter: score all of them, starting from the filter's index.
                self._score_where(narrow, top)
                return top.result()
        if self.k * ONE_PASS_SHARE >= self.total_rows:
            return self._ordered(self._score_all_cursor())
        expanded: set[int] = set()
        ceiling = 0
        for token, phrase, multiplicity in zip(self.tokens, phrases, self.counts.values(), strict=True):
            content_ids = self._few_fts(f"c : {phrase}") if phrase is not None else None
            tag_ids = self._few_tagged(token)
            if content_ids is not None and tag_ids is not None:
                # Every matching row has this token in the content or a tag: all are expanded.
                self._score_ids(content_ids | tag_ids, top)
                return top.result()
            if content_ids is not None:
                expanded |= content_ids
            else:
                ceiling += CONTENT_POINTS * multiplicity
            if tag_ids is not None:
                expanded |= tag_ids
            else:
                ceiling += TAG_POINTS * multiplicity
        self._score_ids(expanded, top)
        try:
            for bonus in BONUS_CLASSES:
                if self._walk_class(bonus, ceiling + bonus, expanded, top):
                    break
        except _WalkTooLong:
            # The walk cannot stop early for this query: one pass in SQL costs less than
            # bringing every row into Python, and gives the whole answer by itself.
            return self._ordered(self._score_all_cursor())
        return top.result()

    def _score_all_cursor(self) -> sqlite3.Cursor:
        """One exact pass over every row: SQL scores, sorts and keeps the top k."""
        sql = f"{self.select} FROM doc d WHERE {self.match_sql} ORDER BY s DESC, d.created_at DESC, d.id LIMIT :k"
        return self.conn.execute(sql, {**self.params, "k": self.k})

    @staticmethod
    def _ordered(cursor: sqlite3.Cursor) -> list[Hit]:
        """Rows of one statement ordered as ``Hit.sort_key`` orders (score, created_at desc, id)."""
        return [Hit(score, created_at, row_id) for row_id, score, created_at in cursor]

    def _score_fts(self, query: str, top: TopK) -> None:
        """One exact pass over every row the trigram index admits (the walk's fallback)."""
        sql = (
            f"{self.select} FROM doc_fts JOIN doc d ON d.id = doc_fts.rowid"
            f" WHERE doc_fts MATCH :q AND {self.match_sql}"
            " ORDER BY s DESC, d.created_at DESC, d.id LIMIT :k"
        )
        self._offer_rows(self.conn.execute(sql, {**self.params, "q": query, "k": self.k}), top)

    def _few_fts(self, query: str) -> set[int] | None:
        """Row ids matching an FTS query when there are fewer than the cap, else None."""
        rows = self.conn.execute(
            "SELECT rowid FROM doc_fts WHERE doc_fts MATCH ? LIMIT ?", (query, self.cap)
        ).fetchall()
        if len(rows) >= self.cap:
            return None
        return {row[0] for row in rows}

    def _few_tagged(self, token: str) -> set[int] | None:
        """Ids of rows with a tag containing ``token`` when few (the tag table is exact)."""
        tags = self.conn.execute("SELECT tid, n FROM tagvocab WHERE instr(tag, ?) > 0", (token,)).fetchall()
        if sum(n for _tid, n in tags) >= self.cap:
            return None
        ids: set[int] = set()
        for tid, _n in tags:
            ids.update(row[0] for row in self.conn.execute("SELECT id FROM entry_tag WHERE tid = ?", (tid,)))
        return ids

    def _score_ids(self, ids: set[int], top: TopK) -> None:
        if ids:
            self._offer_rows(self._score_ids_cursor(ids), top)

    def _score_ids_cursor(self, ids: set[int]) -> sqlite3.Cursor:
        sql = (
            f"{self.select} FROM doc d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {self.match_sql}"
            " ORDER BY s DESC, d.created_at DESC, d.id LIMIT :k"
        )
        return self.conn.execute(sql, {**self.params, "ids": json.dumps(sorted(ids)), "k": self.k})

    def _score_where(self, narrow: str, top: TopK) -> None:
        sql = (
            f"{self.select} FROM doc d WHERE {narrow} AND {self.match_sql}"
            " ORDER BY s DESC, d.created_at DESC, d.id LIMIT :k"
        )
        self._offer_rows(self.conn.execute(sql, {**self.params, "k": self.k}), top)

    def _walk_class(self, bonus: int, ceiling: int, expanded: set[int], top: TopK) -> bool:
        """Walk one bonus class newest first; stop once no later row can enter the top k.

        The match is filtered in SQL, so rows that do not match cost no Python.  A walk
        that runs past WALK_SECONDS (SQLite's progress handler interrupts it) scores every
        FTS candidate outright when there are fewer than FALLBACK_CAP (then all classes
        are done: returns True); otherwise it carries on, without a budget, from the row
        it had reached, so no row is walked twice.  Either way the answer is the same.
        """
        if top.full() and ceiling < top.worst().score:
            return False
        walk = f"{self.select} FROM doc d INDEXED BY doc_walk WHERE d.bonus = :b AND {self.match_sql}"
        order = " ORDER BY d.created_at DESC, d.id"
        params: dict[str, object] = {**self.params, "b": bonus}
        # The (created_at, id) of the last row taken: a resumed walk starts just after it.
        reached: list[tuple[str, int]] = []
        deadline = time.perf_counter() + WALK_SECONDS

        def over_budget() -> int:
            return 1 if time.perf_counter() > deadline else 0

        self.conn.set_progress_handler(over_budget, PROGRESS_OPS)
        try:
            return self._walk_rows(walk + order, params, ceiling, expanded, top, reached)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc).lower():
                raise
        finally:
            self.conn.set_progress_handler(None, 0)
        if self.long_query is not None and self._count_fts(self.long_query, FALLBACK_CAP) < FALLBACK_CAP:
            self._score_fts(self.long_query, top)
            return True
        if self.restriction is not None:
            narrow = self.restriction.narrowest(self.conn, FALLBACK_CAP)
            if narrow is not None:
                # Fewer filtered rows than a long walk would read: score them all at once.
                self._score_where(narrow, top)
                return True
        if reached:
            walk += " AND d.created_at <= :rc AND (d.created_at < :rc OR d.id > :ri)"
            params.update(rc=reached[0][0], ri=reached[0][1])
        return self._walk_rows(walk + order, params, ceiling, expanded, top, [])

    def _walk_rows(
        self,
        sql: str,
        params: dict[str, object],
        ceiling: int,
        expanded: set[int],
        top: TopK,
        reached: list[tuple[str, int]],
    ) -> bool:
        """Offer the walk's rows until none can enter; ``reached`` gets the last row taken."""
        cursor = self.conn.execute(sql, params)
        try:
            while True:
                rows = cursor.fetchmany(FETCH)
                if not rows:
                    return False
                self.walked += len(rows)
                if self.walked > self.walk_cap:
                    raise _WalkTooLong
                for row_id, score, created_at in rows:
                    if row_id not in expanded:
                        top.offer(Hit(score, created_at, row_id))
                    if not top.could_enter(ceiling, created_at, row_id):
                        return False
                reached[:] = [(rows[-1][2], rows[-1][0])]
        finally:
            cursor.close()

    def _count_fts(self, query: str, cap: int) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM doc_fts WHERE doc_fts MATCH ? LIMIT ?)", (query, cap)
        ).fetchone()
        return int(row[0])

    @staticmethod
    def _offer_rows(cursor: sqlite3.Cursor, top: TopK) -> None:
        for row_id, score, created_at in cursor:
            top.offer(Hit(score, created_at, row_id))


class QueryTooLargeError(IndexBusyError):
    """More distinct tokens than one SQL statement can bind; the caller scans instead."""


class PlannerFactory(Protocol):
    """Makes the planner of one search: :class:`Planner`, or a traced one (memstore.index.trace)."""

    def __call__(
        self,
        conn: sqlite3.Connection,
        tokens: Sequence[str],
        k: int,
        total_rows: int,
        *,
        restriction: Restriction | None = None,
    ) -> Planner: ...


def search_rows(
    conn: sqlite3.Connection,
    tokens: Sequence[str],
    k: int,
    total_rows: int,
    *,
    planner: PlannerFactory = Planner,
    restriction: Restriction | None = None,
) -> list[Hit]:
    """The exact top-k hits among SQL-held rows (odd rows are the caller's), within ``restriction``."""
    if not tokens or k == 0 or not all(sql_safe(token) for token in tokens):
        return []
    if len(set(tokens)) > MAX_SQL_TOKENS:
        raise QueryTooLargeError(f"{len(set(tokens))} distinct query tokens; answering from a scan")
    return planner(conn, tokens, k, total_rows, restriction=restriction).run()
