"""The PostgreSQL side of the search planner: every SQL statement a team search runs.

:class:`PgSearch` implements :class:`memstore.index.search.SearchQueries` over the
chosen sources' current partitions; the planner itself is the SQLite index's,
unchanged.  A row's planner key is ``sid << 40 | id``: ordering keys orders rows by
source registration order, then line order, which is the union's file order.

* Word-index sets are ``&&`` on the integer term arrays (GIN).  PostgreSQL's
  planner prices ``&&`` over many terms as one operator call a row and picks a
  sequential scan that costs seconds (docs/postgres-notes.md §4), so index use is
  forced in the search transaction (``enable_seqscan`` off), and turned back on for
  the one statement that scores every row.
* Walks stream in ``team_doc_walk`` order (bonus, newest, sid, id) through a cursor,
  with sorts disabled so the order can only come from the index (a merge of each
  partition's index scan).  A walk's time budget is ``statement_timeout`` on each
  FETCH, inside a savepoint, so a walk cut short leaves the snapshot usable.
* Scores use ``strpos`` over Python-lowered text in the "C" collation: exact, and
  never a pattern, so ``%``, ``_``, ``\\`` and quotes in a token are plain text.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from memstore.index.search import (
    FETCH,
    FIRST_FETCH,
    AllOf,
    AnyOf,
    Fetched,
    Has,
    Hit,
    Match,
    WalkInterrupted,
    WalkRow,
)
from memstore.index.terms import CONTENT, CONTENT_MARKS, END, ENDS, INSIDE, START, STARTS, TAGS, WHOLE, TermSet
from memstore.models import CONTENT_POINTS, TAG_POINTS

PgConn = psycopg.Connection[Any]
ID_BITS = 40
ID_MASK = (1 << ID_BITS) - 1


def row_key(sid: int, row_id: int) -> int:
    """The planner's key of a row: source order first, then line order."""
    return (sid << ID_BITS) | row_id


def split_key(key: int) -> tuple[int, int]:
    return key >> ID_BITS, key & ID_MASK


KEY_SQL = f"((d.sid::bigint << {ID_BITS}) | d.id)"
COLUMN_OF_KIND = {CONTENT: "cterms", CONTENT_MARKS: "cterms", TAGS: "tterms"}
"""Content terms and marks share one array, tag terms and marks the other (ids are unique)."""
PARTS = "d.part = ANY(%(parts)s)"
ORDER = " ORDER BY s DESC, d.created_at DESC, d.sid, d.id LIMIT %(k)s"


WORK_MEM = "32MB"
"""Memory for one search's sorts and held sets: a fetched set holds the text of up to 30,000 rows
(FALLBACK_CAP), which spilled to a temporary file at the default 4 MB (docs/postgres-notes.md §10)."""

SEARCH_BEGIN = (
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
    " SET LOCAL plan_cache_mode = auto;"
    " LOCK TABLE team_doc IN ACCESS SHARE MODE"
)
"""A search's first round trip.  One snapshot for the sources' states and their rows
(docs/postgres-notes.md §6).  The lock, taken before the snapshot and held on every
partition, keeps an indexer from detaching and dropping a partition this snapshot still
names (DETACH CONCURRENTLY waits for it).  ``plan_cache_mode`` lets the statements of
fixed shape (prepared, below) keep a generic plan: planning them over every partition
cost more than running them.  Statements whose best plan depends on the terms are never
prepared (``prepare=False``), so each is still planned for its own values."""

ODD_AND_LINES = (
    "SELECT d.sid, d.id, d.raw, true FROM team_doc d WHERE d.part = ANY(%(odd_parts)s::int[]) AND d.odd"
    " UNION ALL SELECT d.sid, d.id, d.raw, false FROM unnest(%(kp)s::int[], %(ki)s::bigint[]) AS u(part, id)"
    " JOIN team_doc d ON d.part = u.part AND d.id = u.id"
)
"""The odd rows of some partitions (flagged true) and the stored lines of some rows (false)."""


class PgSearch:
    """The SQL of one search over one REPEATABLE READ snapshot of the chosen sources."""

    restriction_impossible = False
    filtered = False
    walk_builds_filters = False
    """A filter is a condition on each row the walk index brings (sorts and bitmaps are off)."""

    def __init__(self, conn: PgConn, tokens: Sequence[str], *, parts: Mapping[int, int], k: int) -> None:
        """``parts`` maps each chosen source's sid to its current partition; ``k`` is the planner's limit."""
        self.conn = conn
        self.k = k
        self.parts = dict(parts)
        self.base: dict[str, Any] = {"parts": sorted(self.parts.values()), "sids": sorted(self.parts)}
        counts = Counter(tokens)
        self.base.update({f"p{i}": token for i, token in enumerate(counts)})
        self.match_sql = " AND ".join(
            f"(strpos(d.c, %(p{i})s) > 0 OR strpos(d.t, %(p{i})s) > 0)" for i in range(len(counts))
        )
        score = " + ".join(
            f"{CONTENT_POINTS * m} * (strpos(d.c, %(p{i})s) > 0)::int"
            f" + {TAG_POINTS * m} * (strpos(d.t, %(p{i})s) > 0)::int"
            for i, m in enumerate(counts.values())
        )
        self.score = f"{score} + d.bonus"
        self.select = f"SELECT {KEY_SQL} AS key, {self.score} AS s, d.created_at"
        self.scored: dict[int, Hit | None] = {}
        """Rows :meth:`ids` found, by key: each one's hit, or None when it does not match every token."""
        self.term_ids: dict[tuple[int, str], int] = {}
        """(kind, text) -> vocabulary id, for every term a lookup returned."""
        self.settings: dict[str, str] = {}
        self._set(enable_seqscan="off", work_mem=WORK_MEM)

    # ------------------------------------------------------------------ plumbing

    def _set(self, **wanted: str) -> None:
        """Planner settings for the rest of the transaction (SET LOCAL), sent only when they change."""
        changed = {name: value for name, value in wanted.items() if self.settings.get(name) != value}
        if changed:
            calls = ", ".join(f"set_config('{name}', %({name})s, true)" for name in changed)
            self.conn.execute(f"SELECT {calls}", changed)
            self.settings.update(changed)

    def _rows(self, sql: str, extra: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        # Never prepared: a generic plan cannot see how rare this search's terms are.
        return self.conn.execute(sql, {**self.base, **(extra or {})}, prepare=False).fetchall()

    def _where(self, match: Match, params: dict[str, Any]) -> str:
        """``match`` as a boolean expression over ``d``; its id arrays are added to ``params``."""
        if isinstance(match, Has):
            name = f"m{len(params)}"
            params[name] = [self.term_ids[(match.kind, term)] for term in match.terms]
            return f"d.{COLUMN_OF_KIND.get(match.kind, 'tterms')} && %({name})s::int[]"
        assert isinstance(match, AllOf | AnyOf)
        joiner = " AND " if isinstance(match, AllOf) else " OR "
        return "(" + joiner.join(self._where(part, params) for part in match.parts) + ")"

    def _hits(self, sql: str, extra: Mapping[str, Any]) -> list[Hit]:
        return [Hit(int(score), str(created_at), int(key)) for key, score, created_at in self._rows(sql, extra)]

    # ------------------------------------------------------------------ the vocabulary

    def lookup(self, piece: str, position: str, cap: int) -> tuple[TermSet, TermSet]:
        """Both kinds in one statement (one round trip): each kind's part has its own cap.

        Rows are summed only for a kind within its cap: a dense kind's rows are never used, and
        summing them cost about half of a one-character piece's lookup at 1M (3.7-4.0 ms, now 2.1-2.5).
        """
        params, condition = self._term_condition(piece, position, cap)
        part = (
            "(SELECT v.kind, v.id, v.text"
            f" FROM team_term v WHERE v.kind = {{kind}} AND {condition}"
            " AND EXISTS (SELECT 1 FROM team_count n WHERE n.tid = v.id AND n.sid = ANY(%(sids)s) AND n.n > 0)"
            " LIMIT %(cap)s)"
        )
        rows = self._rows(
            f"WITH v AS MATERIALIZED ({part.format(kind=CONTENT)} UNION ALL {part.format(kind=TAGS)}),"
            " dense AS (SELECT kind FROM v GROUP BY kind HAVING count(*) >= %(cap)s)"
            " SELECT v.kind, v.id, v.text, CASE WHEN v.kind NOT IN (SELECT kind FROM dense)"
            " THEN (SELECT sum(n.n) FROM team_count n WHERE n.tid = v.id AND n.sid = ANY(%(sids)s)) END FROM v",
            params,
        )
        return (
            self._term_set([row[1:] for row in rows if row[0] == CONTENT], CONTENT, cap),
            self._term_set([row[1:] for row in rows if row[0] == TAGS], TAGS, cap),
        )

    def _term_condition(self, piece: str, position: str, cap: int) -> tuple[dict[str, Any], str]:
        params: dict[str, Any] = {"cap": cap + 1, "piece": piece}
        if position == WHOLE:
            condition = "v.text = %(piece)s"
        else:
            # Pieces are runs of letters, digits and non-ASCII: never a LIKE wildcard or escape.
            params["pattern"] = {INSIDE: f"%{piece}%", STARTS: f"{piece}%", ENDS: f"%{piece}"}[position]
            condition = "v.text LIKE %(pattern)s"
            if len(piece) < 3:
                # Too short for trigrams: the term's own short substrings (and starts, ends) find it.
                params["gram"] = piece + {STARTS: START, ENDS: END}.get(position, "")
                condition += " AND v.grams @> ARRAY[%(gram)s]::text[]"
        return params, condition

    def _term_set(self, rows: Sequence[tuple[Any, ...]], kind: int, cap: int) -> TermSet:
        if len(rows) > cap:
            return TermSet(None, 0)  # dense: neither its terms nor its rows are used (column_of)
        for tid, text, _n in rows:
            self.term_ids[(kind, str(text))] = int(tid)
        return TermSet(tuple(str(text) for _tid, text, _n in rows), sum(int(n) for _tid, _text, n in rows))

    def mark(self, code: str, kind: int) -> TermSet:
        row = self.conn.execute(
            "SELECT v.id, (SELECT sum(n.n) FROM team_count n WHERE n.tid = v.id AND n.sid = ANY(%(sids)s))"
            " FROM team_term v WHERE v.kind = %(kind)s AND v.text = %(code)s",
            {"sids": self.base["sids"], "kind": kind, "code": code},
            prepare=False,
        ).fetchone()
        if row is None or not row[1]:
            return TermSet((), 0)
        self.term_ids[(kind, code)] = int(row[0])
        return TermSet((code,), int(row[1]))

    # ------------------------------------------------------------------ word-index sets

    def ids(self, match: Match, cap: int) -> set[int] | None:
        """Each row is scored as it is found (its page is read anyway): scoring these rows later
        (:meth:`score_ids`) then needs no statement of its own."""
        params: dict[str, Any] = {"cap": cap}
        where = self._where(spread(match), params)
        self._set(enable_seqscan="off")
        sql = (
            f"SELECT {KEY_SQL}, CASE WHEN {self.match_sql} THEN {self.score} END, d.created_at"
            f" FROM team_doc d WHERE {PARTS} AND {where} LIMIT %(cap)s"
        )
        rows = self._rows(sql, params)
        if len(rows) >= cap:
            return None
        for key, score, created_at in rows:
            self.scored[int(key)] = None if score is None else Hit(int(score), str(created_at), int(key))
        return {int(row[0]) for row in rows}

    def fetch(self, match: Match, cap: int) -> Fetched | None:
        """Counted and scored in one pass: the best ``k`` matching rows come back with the count.

        Counting reads every candidate's heap page anyway; a second statement to score them read
        them all again (docs/postgres-notes.md §10).  Fetching the keys instead would bring every
        row into Python to send it back.
        """
        params: dict[str, Any] = {"cap": cap, "k": self.k}
        where = self._where(spread(match), params)
        self._set(enable_seqscan="off")
        sql = (
            # The rows' text is held, not scored, until the count is known: a set found too large is not scored.
            "WITH c AS MATERIALIZED (SELECT d.sid, d.id, d.c, d.t, d.created_at, d.bonus"
            f" FROM team_doc d WHERE {PARTS} AND {where} LIMIT %(cap)s)"
            " SELECT n.n, h.key, h.s, h.created_at FROM (SELECT count(*) AS n FROM c) n LEFT JOIN LATERAL"
            f" ({self.select} FROM c d WHERE n.n < %(cap)s AND {self.match_sql}{ORDER}) h ON true"
        )
        rows = self._rows(sql, params)
        count = int(rows[0][0])
        if count >= cap:
            return None
        hits = [Hit(int(score), str(created_at), int(key)) for _n, key, score, created_at in rows if key is not None]
        return Fetched(count, _Held(match, hits))

    # ------------------------------------------------------------------ exact scoring

    def score_ids(self, ids: set[int], k: int) -> list[Hit]:
        if all(key in self.scored for key in ids):
            return heapq.nsmallest(k, (hit for key in ids if (hit := self.scored[key]) is not None), key=Hit.sort_key)
        keys = sorted(ids)
        parts = [self.parts[key >> ID_BITS] for key in keys]
        row_ids = [key & ID_MASK for key in keys]
        self._set(enable_seqscan="off")
        sql = (
            f"{self.select} FROM unnest(%(kp)s::int[], %(ki)s::bigint[]) AS u(part, id)"
            f" JOIN team_doc d ON d.part = u.part AND d.id = u.id WHERE {self.match_sql}{ORDER}"
        )
        return self._hits(sql, {"kp": parts, "ki": row_ids, "k": k})

    def score_fetched(self, fetched: Fetched, k: int) -> list[Hit]:
        held = fetched.held
        assert isinstance(held, _Held), "fetched by another backend"
        if k <= self.k:
            return held.hits[:k]
        params: dict[str, Any] = {"k": k}
        where = self._where(spread(held.match), params)
        self._set(enable_seqscan="off")
        sql = f"{self.select} FROM team_doc d WHERE d.part = ANY(%(parts)s) AND {where} AND {self.match_sql}{ORDER}"
        return self._hits(sql, params)

    def restricted(self, cap: int, k: int) -> list[Hit] | None:
        """Sources are chosen by partition in every statement: there is no further filter."""
        return None

    def score_all(self, k: int) -> list[Hit]:
        self._set(enable_seqscan="on")
        sql = f"{self.select} FROM team_doc d WHERE d.part = ANY(%(parts)s) AND {self.match_sql}{ORDER}"
        return self._hits(sql, {"k": k})

    # ------------------------------------------------------------------ the walk

    def walk_sql(self, filters: Sequence[Match], after: tuple[int, str, int] | None) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {}
        terms = ["d.part = ANY(%(parts)s)"]
        terms += [self._where(match, params) for match in filters]
        if after is not None:
            sid, row_id = split_key(after[2])
            terms.append(
                "d.bonus <= %(rb)s AND (d.bonus < %(rb)s OR d.created_at < %(rc)s"
                " OR (d.created_at = %(rc)s AND (d.sid > %(rs)s OR (d.sid = %(rs)s AND d.id > %(ri)s))))"
            )
            params.update(rb=after[0], rc=after[1], rs=sid, ri=row_id)
        where = " AND ".join([*terms, self.match_sql])
        sql = f"{self.select}, d.bonus FROM team_doc d WHERE {where}"
        sql += " ORDER BY d.bonus DESC, d.created_at DESC, d.sid, d.id"
        return sql, params

    def walk(
        self, filters: Sequence[Match], after: tuple[int, str, int] | None, seconds: float | None
    ) -> Generator[list[WalkRow], None, None]:
        sql, params = self.walk_sql(filters, after)
        before = dict(self.settings)
        deadline = None if seconds is None else time.perf_counter() + seconds
        cursor = self.conn.cursor()
        cursor.execute("SAVEPOINT memstore_walk")
        try:
            # Only the walk index can give this order with sorts and bitmaps off: no sort of all matches.
            self._set(enable_seqscan="off", enable_sort="off", enable_bitmapscan="off")
            cursor.execute(f"DECLARE memstore_walk NO SCROLL CURSOR FOR {sql}", {**self.base, **params}, prepare=False)
            size = FIRST_FETCH
            while True:
                try:
                    if deadline is not None:
                        left_ms = int((deadline - time.perf_counter()) * 1000)
                        if left_ms <= 0:
                            raise WalkInterrupted
                        # Runs under the last batch's timeout, still armed: it may be cut too.
                        self.conn.execute(WALK_TIMEOUT, (str(left_ms),))
                    rows = cursor.execute(f"FETCH {size} FROM memstore_walk").fetchall()
                except pg_errors.QueryCanceled as exc:
                    raise WalkInterrupted from exc
                if not rows:
                    return
                yield [(int(key), int(score), str(created_at), int(bonus)) for key, score, created_at, bonus in rows]
                size = min(2 * size, FETCH)
        finally:
            # Back to the state before the walk: the cursor closed, settings and timeout restored.
            if not self.conn.closed:
                failed = self.conn.info.transaction_status == TransactionStatus.INERROR
                try:
                    cursor.execute(_walk_end(before, timed=deadline is not None, failed=failed), prepare=False)
                except pg_errors.QueryCanceled:
                    # The clean end ran under the walk's timeout, still armed: undo the walk instead.
                    cursor.execute(_walk_end(before, timed=True, failed=True), prepare=False)
            cursor.close()
            self.settings = before


class _Held(NamedTuple):
    """A fetched set: its expression, and its best ``k`` matching rows, ordered (scored by the fetch)."""

    match: Match
    hits: list[Hit]


SPREAD_ARMS = 4
"""An AND over ORs is spread into at most this many arms (each arm a copy of the other parts)."""


def spread(match: Match) -> Match:
    """``match`` with each AND of plain parts and ORs spread into an OR of ANDs, for bitmap plans.

    Given ``X AND (Y OR Z)`` with ``X`` and ``Y`` on the content array and ``Z`` on the tags,
    PostgreSQL scans ``X AND Y`` in one index and ``Z`` alone, then filters ``X`` on the heap:
    every row of ``Z`` is read (docs/postgres-notes.md §10).  ``(X AND Y) OR (X' AND Z)`` makes
    each arm a bitmap AND.  ``X'`` lists the same terms in another order: an equal copy would be
    factored back out of the arms by the planner.  The rows are the same either way.
    """
    if isinstance(match, Has):
        return match
    parts = tuple(spread(part) for part in match.parts)
    if isinstance(match, AnyOf):
        return AnyOf(parts)
    ors = [part.parts for part in parts if isinstance(part, AnyOf)]
    plain = tuple(part for part in parts if not isinstance(part, AnyOf))
    # Counted before any arm is built: the arms multiply, one OR a token (2**n for n tokens).
    if not ors or not plain or math.prod(len(choices) for choices in ors) > SPREAD_ARMS:
        return AllOf(parts)
    arms = itertools.product(*ors)
    return AnyOf(tuple(AllOf(tuple(_variant(part, n) for part in (*plain, *arm))) for n, arm in enumerate(arms)))


def _variant(match: Match, n: int) -> Match:
    """The ``n``-th copy of ``match``: the same rows, each term list rotated by ``n`` (and padded
    with a repeated term past its length), so no two copies are equal expressions."""
    if isinstance(match, Has):
        if not match.terms:
            return match
        turn = n % len(match.terms)
        terms = match.terms[turn:] + match.terms[:turn] + match.terms[:1] * (n // len(match.terms))
        return Has(match.kind, terms)
    rebuilt = tuple(_variant(part, n) for part in match.parts)
    return AllOf(rebuilt) if isinstance(match, AllOf) else AnyOf(rebuilt)


WALK_SETTINGS = ("enable_seqscan", "enable_sort", "enable_bitmapscan")
WALK_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"
"""A timed walk's budget, set before each batch: what is left of it, as the server's statement timeout."""


def _walk_end(before: Mapping[str, str], *, timed: bool, failed: bool) -> str:
    """One round trip that ends a walk: after a server error (a FETCH cut short), a rollback to
    its savepoint; otherwise the cursor closed and the settings put back by hand, because
    psycopg forgets every prepared statement of the connection when it sees a ROLLBACK."""
    if failed:
        return "ROLLBACK TO SAVEPOINT memstore_walk; RELEASE SAVEPOINT memstore_walk"
    steps = ["CLOSE memstore_walk"]
    for name in WALK_SETTINGS:
        value = before.get(name)
        steps.append(f"SET LOCAL {name} TO {value if value in ('on', 'off') else 'DEFAULT'}")
    if timed:
        steps.append("SET LOCAL statement_timeout TO DEFAULT")
    steps.append("RELEASE SAVEPOINT memstore_walk")
    return "; ".join(steps)
