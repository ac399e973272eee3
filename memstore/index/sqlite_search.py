"""The SQLite side of the search planner: every SQL statement a search runs, in one place.

Word-index sets come from ``doc_fts`` (FTS5, ``ascii`` tokenizer, one term per run of
term characters; see :mod:`memstore.index.terms`), term lookups from the vocabulary
(``term`` with ``term_tri``, a trigram index for pieces of three characters or more,
and ``term_gram`` for shorter ones).  Scores are computed with ``instr`` over the
Python-lowered text, so SQLite never folds case and every candidate is checked exactly.
Terms are always quoted in FTS5 expressions, so no token is ever read as FTS5 syntax.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Generator, Sequence

from memstore.index.fts import COLUMN, fts_expression, quoted
from memstore.index.restrict import Restriction
from memstore.index.search import (
    FETCH,
    FIRST_FETCH,
    PROGRESS_OPS,
    Fetched,
    Hit,
    Match,
    Planner,
    PlannerFactory,
    WalkInterrupted,
    WalkRow,
    sql_tokens,
)
from memstore.index.sqltext import sql_safe
from memstore.index.terms import CONTENT, END, ENDS, INSIDE, START, STARTS, TAGS, WHOLE, TermSet
from memstore.models import CONTENT_POINTS, TAG_POINTS


def balanced(terms: Sequence[str], operator: str) -> str:
    """``terms`` joined by ``operator`` as a balanced parenthesised tree (SQLite caps expression depth)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return f"({balanced(terms[:middle], operator)} {operator} {balanced(terms[middle:], operator)})"


def gram_query(piece: str, kind: int, position: str) -> str:
    """The term_tri / term_gram query finding the terms of one column that may hold ``piece`` there."""
    if len(piece) >= 3:
        grams = dict.fromkeys(piece[i : i + 3] for i in range(len(piece) - 2))
        return f"{COLUMN[kind]} : (" + " AND ".join(quoted(gram) for gram in grams) + ")"
    suffix = {STARTS: START, ENDS: END}.get(position, "")
    return f"{COLUMN[kind]} : {quoted(piece + suffix)}"


POSITION_SQL = {
    INSIDE: "instr(v.text, :piece) > 0",
    STARTS: "instr(v.text, :piece) = 1",
    ENDS: "substr(v.text, -length(:piece)) = :piece",
}
"""The exact check of a term found by its grams, for each place the piece must take in it."""


class SqliteSearch:
    """The SQL of one search over one index snapshot (see :class:`memstore.index.search.SearchQueries`)."""

    walk_builds_filters = True
    """``d.id IN (SELECT rowid FROM doc_fts ...)`` is a list SQLite builds before the walk's first row."""

    def __init__(self, conn: sqlite3.Connection, tokens: Sequence[str], *, restriction: Restriction | None) -> None:
        self.conn = conn
        self.restriction = restriction
        self.restriction_impossible = restriction is not None and restriction.impossible
        self.filtered = restriction is not None
        counts = Counter(tokens)
        self.params: dict[str, object] = {f"p{i}": token for i, token in enumerate(counts)}
        # Balanced trees keep the expression depth logarithmic in the number of tokens
        # (SQLite caps it at 1000), so long pasted queries still run in SQL.
        self.match_sql = balanced(
            [f"(instr(d.c, :p{i}) > 0 OR instr(d.t, :p{i}) > 0)" for i in range(len(counts))], "AND"
        )
        if restriction is not None:
            # A filter is one more term of the match: every piece below stays exact with it.
            # The filter goes first: it reads short columns, so rows it rejects skip the content.
            self.match_sql = f"{restriction.sql} AND {self.match_sql}"
            self.params.update(restriction.params)
        self.score_sql = balanced(
            [
                f"({CONTENT_POINTS * m} * (instr(d.c, :p{i}) > 0) + {TAG_POINTS * m} * (instr(d.t, :p{i}) > 0))"
                for i, m in enumerate(counts.values())
            ]
            + ["d.bonus"],
            "+",
        )
        self.select = f"SELECT d.id, {self.score_sql} AS s, d.created_at"
        self.order = " ORDER BY s DESC, d.created_at DESC, d.id LIMIT :k"

    # ------------------------------------------------------------------ the word index

    def lookup(self, piece: str, position: str, cap: int) -> tuple[TermSet, TermSet]:
        return self._terms(piece, position, CONTENT, cap), self._terms(piece, position, TAGS, cap)

    def _terms(self, piece: str, position: str, kind: int, cap: int) -> TermSet:
        if position == WHOLE:
            row = self.conn.execute("SELECT n FROM term WHERE kind = ? AND text = ?", (kind, piece)).fetchone()
            return TermSet((), 0) if row is None else TermSet((piece,), int(row[0]))
        table = "term_tri" if len(piece) >= 3 else "term_gram"
        # CROSS JOIN keeps SQLite from scanning the vocabulary and probing the FTS table per term.
        rows = self.conn.execute(
            f"SELECT v.text, v.n FROM {table} CROSS JOIN term v ON v.id = {table}.rowid"
            f" WHERE {table} MATCH :query AND {POSITION_SQL[position]} LIMIT :cap",
            {"query": gram_query(piece, kind, position), "piece": piece, "cap": cap + 1},
        ).fetchall()
        if len(rows) > cap:
            return TermSet(None, sum(n for _text, n in rows))
        return TermSet(tuple(text for text, _n in rows), sum(n for _text, n in rows))

    def mark(self, code: str, kind: int) -> TermSet:
        row = self.conn.execute("SELECT n FROM term WHERE kind = ? AND text = ?", (kind, code)).fetchone()
        return TermSet((), 0) if row is None else TermSet((code,), int(row[0]))

    def fetch(self, match: Match, cap: int) -> Fetched | None:
        # One row back, the ids as the JSON list scoring binds: no Python object per row.
        count, listed = self.conn.execute(
            "SELECT count(*), group_concat(id) FROM (SELECT rowid AS id FROM doc_fts WHERE doc_fts MATCH ? LIMIT ?)",
            (fts_expression(match), cap),
        ).fetchone()
        if count >= cap:
            return None
        return Fetched(int(count), f"[{listed or ''}]")

    def ids(self, match: Match, cap: int) -> set[int] | None:
        rows = self.conn.execute(
            "SELECT rowid FROM doc_fts WHERE doc_fts MATCH ? LIMIT ?", (fts_expression(match), cap)
        ).fetchall()
        if len(rows) >= cap:
            return None
        return {row[0] for row in rows}

    # ------------------------------------------------------------------ exact scoring

    def score_ids(self, ids: set[int], k: int) -> list[Hit]:
        return self._score_listed(json.dumps(sorted(ids)), k)

    def score_fetched(self, fetched: Fetched, k: int) -> list[Hit]:
        assert isinstance(fetched.held, str), "fetched by another backend"
        return self._score_listed(fetched.held, k)

    def _score_listed(self, ids: str, k: int) -> list[Hit]:
        """Score the rows of a JSON list of ids."""
        sql = f"{self.select} FROM doc d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {self.match_sql}"
        return self._hits(sql + self.order, ids=ids, k=k)

    def restricted(self, cap: int, k: int) -> list[Hit] | None:
        if self.restriction is None:
            return None
        narrow = self.restriction.narrowest(self.conn, cap)
        if narrow is None:
            return None
        # Few rows pass the filter: score all of them, starting from the filter's index.
        return self._hits(f"{self.select} FROM doc d WHERE {narrow} AND {self.match_sql}" + self.order, k=k)

    def score_all(self, k: int) -> list[Hit]:
        return self._hits(f"{self.select} FROM doc d WHERE {self.match_sql}" + self.order, k=k)

    def _hits(self, sql: str, **extra: object) -> list[Hit]:
        return [
            Hit(score, created_at, row_id)
            for row_id, score, created_at in self.conn.execute(sql, {**self.params, **extra})
        ]

    def walk_sql(self, filters: Sequence[Match], after: tuple[int, str, int] | None) -> tuple[str, dict[str, object]]:
        """The walk: SQLite streams it in ``doc_walk`` order (bonus, then newest), never sorting.

        A filter is tested on the index entry's id before the row itself is read.
        """
        terms = [f"d.id IN (SELECT rowid FROM doc_fts WHERE doc_fts MATCH :f{i})" for i in range(len(filters))]
        params: dict[str, object] = {**self.params, **{f"f{i}": fts_expression(f) for i, f in enumerate(filters)}}
        if after is not None:
            terms.append(
                "d.bonus <= :rb AND (d.bonus < :rb OR d.created_at < :rc OR (d.created_at = :rc AND d.id > :ri))"
            )
            params.update(rb=after[0], rc=after[1], ri=after[2])
        where = " AND ".join([*terms, self.match_sql])
        sql = f"{self.select}, d.bonus FROM doc d INDEXED BY doc_walk WHERE {where}"
        return sql + " ORDER BY d.bonus DESC, d.created_at DESC, d.id", params

    def walk(
        self, filters: Sequence[Match], after: tuple[int, str, int] | None, seconds: float | None
    ) -> Generator[list[WalkRow], None, None]:
        sql, params = self.walk_sql(filters, after)
        if seconds is not None:
            deadline = time.perf_counter() + seconds

            def over_budget() -> int:
                return 1 if time.perf_counter() > deadline else 0

            self.conn.set_progress_handler(over_budget, PROGRESS_OPS)
        cursor = self.conn.cursor()
        try:
            # The first step runs inside execute(): an interrupt can come from either call.
            try:
                cursor.execute(sql, params)
                size = FIRST_FETCH
                rows = cursor.fetchmany(size)
                while rows:
                    yield rows
                    size = min(2 * size, FETCH)
                    rows = cursor.fetchmany(size)
            except sqlite3.OperationalError as exc:
                if seconds is not None and "interrupt" in str(exc).lower():
                    if time.perf_counter() <= deadline:
                        # The handler stops the walk only past its deadline.  Stopped before it,
                        # the handler raised instead: a Ctrl-C's KeyboardInterrupt arrives in the
                        # first Python code to run, and sqlite3 discards what a handler raises.
                        raise KeyboardInterrupt from exc
                    raise WalkInterrupted from exc
                raise
        finally:
            cursor.close()
            if seconds is not None:
                self.conn.set_progress_handler(None, 0)


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
    if k == 0 or not all(sql_safe(token) for token in tokens) or not sql_tokens(tokens):
        return []
    return planner(SqliteSearch(conn, tokens, restriction=restriction), tokens, k, total_rows).run()
