"""The team index's word-index sets: spread for bitmap plans, and counted and scored in one statement.

``spread`` rewrites ``X AND (Y OR Z)`` as ``(X AND Y) OR (X' AND Z)`` so PostgreSQL can AND
bitmaps in each arm; the rewrite must admit exactly the same rows, and no part may be equal in
every arm (the planner would factor it back out).  A fetched set comes back already scored:
scoring it must not read it a second time, and the answer stays the scan's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pg_server
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_reference import spec_search
from test_index_differential import reference, write_raw
from test_team_index_differential import Team, entry_line

from memstore.index import search
from memstore.index.pg import search as pg_search
from memstore.index.pg.conn import raw_connection
from memstore.index.search import AllOf, AnyOf, Fetched, Has, Match
from memstore.index.terms import CONTENT, INSIDE, TAGS, TermSet

Row = dict[int, frozenset[str]]

has = st.builds(Has, st.sampled_from([CONTENT, TAGS]), st.lists(st.sampled_from("abcde"), min_size=1, max_size=3,
                                                          unique=True).map(tuple))
matches: st.SearchStrategy[Match] = st.recursive(
    has,
    lambda inner: st.one_of(st.lists(inner, min_size=2, max_size=3).map(lambda parts: AllOf(tuple(parts))),
                            st.lists(inner, min_size=2, max_size=3).map(lambda parts: AnyOf(tuple(parts)))),
    max_leaves=8,
)
rows = st.fixed_dictionaries({kind: st.frozensets(st.sampled_from("abcde")) for kind in (CONTENT, TAGS)})


def admits(match: Match, row: Row) -> bool:
    if isinstance(match, Has):
        return bool(row[match.kind] & set(match.terms))
    found = [admits(part, row) for part in match.parts]
    return all(found) if isinstance(match, AllOf) else any(found)


def leaves(match: Match) -> set[Has]:
    if isinstance(match, Has):
        return {match}
    return set().union(*(leaves(part) for part in match.parts))


@settings(max_examples=300, deadline=None)
@given(match=matches, row=rows)
def test_spread_admits_the_same_rows(match: Match, row: Row) -> None:
    assert admits(pg_search.spread(match), row) == admits(match, row)


@given(plain=has, first=has, second=has, third=has)
def test_each_arm_holds_its_own_copy_of_the_plain_part(plain: Has, first: Has, second: Has, third: Has) -> None:
    """Equal copies in every arm would be factored back out by PostgreSQL's planner."""
    spread = pg_search.spread(AllOf((plain, AnyOf((first, second, third)))))
    assert isinstance(spread, AnyOf) and len(spread.parts) == 3
    copies = [arm.parts[0] for arm in spread.parts if isinstance(arm, AllOf)]
    assert len(copies) == 3 and len(set(copies)) == 3
    assert all(isinstance(copy, Has) and sorted(set(copy.terms)) == sorted(plain.terms) for copy in copies)


def test_ands_of_ors_alone_and_too_many_arms_stay_as_they_are() -> None:
    a, b, c, d = (Has(CONTENT, (term,)) for term in "abcd")
    both = AllOf((AnyOf((a, b)), AnyOf((c, d))))
    assert pg_search.spread(both) == both  # PostgreSQL ANDs the two ORs' bitmaps already
    wide = AllOf((a, AnyOf((b, c)), AnyOf((c, d)), AnyOf((a, d))))
    assert pg_search.spread(wide) == wide  # 8 arms: more copies than the plan saves


def test_one_term_copies_differ_by_a_repeated_term() -> None:
    assert pg_search._variant(Has(TAGS, ("x",)), 0) == Has(TAGS, ("x",))
    assert pg_search._variant(Has(TAGS, ("x",)), 2) == Has(TAGS, ("x", "x", "x"))
    assert pg_search._variant(Has(CONTENT, ("x", "y")), 1) == Has(CONTENT, ("y", "x"))


# ---------------------------------------------------------------------------- on the server


def _corpus(team: Team) -> list[Any]:
    """'alpha' only in content; 'beta' in content for some rows and a tag for others: the narrow step
    intersects the two tokens (an AND of a plain set and an OR), and scores the rows it fetched.
    'gamma' is one term in content only (75 rows a source): a set the vocabulary counts."""
    for number, catalog in enumerate(team.catalogs.values()):
        lines = []
        for n in range(300):
            content = f"row{n}. " + ("alpha " if n % 3 else "") + ("beta " if n % 5 == 0 else "")
            content += "gamma." if n % 4 == 0 else ""
            tags = ("beta",) if n % 7 == 0 else ("misc",)
            stamp = f"2026-01-01T00:00:{n % 60:02d}+00:00"
            lines.append(entry_line(content, tags=tags, memory_id=f"m{number}-{n}", stamp=stamp))
        write_raw(catalog.path, b"\n".join(lines) + b"\n")
    team.catch_up()
    return [entry for catalog in team.catalogs.values() for _order, entry in reference(catalog.path)]


NARROWED = {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SPARSE_WALK": 0}
"""Sets too large to score outright at once: the rarest token's rows, then both tokens' together."""


@pytest.mark.pg
@pytest.mark.parametrize("forced", [{}, NARROWED], ids=["as planned", "narrowed"])
def test_a_fetched_set_is_scored_by_its_fetch_and_equals_the_scan(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch, forced: dict[str, int]
) -> None:
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    fetched: list[Match] = []
    statements: list[str] = []
    real_fetch, real_rows = pg_search.PgSearch.fetch, pg_search.PgSearch._rows

    def fetch(self: pg_search.PgSearch, match: Match, cap: int) -> Fetched | None:
        fetched.append(match)
        return real_fetch(self, match, cap)

    def rows(self: pg_search.PgSearch, sql: str, extra: Any = None) -> list[tuple[Any, ...]]:
        statements.append(sql)
        return real_rows(self, sql, extra)

    monkeypatch.setattr(pg_search.PgSearch, "fetch", fetch)
    monkeypatch.setattr(pg_search.PgSearch, "_rows", rows)
    for name, value in forced.items():
        monkeypatch.setattr(search, name, value)
    try:
        union = _corpus(team)
        for limit in (1, 4, 50):
            got = team.reader.search("alpha beta", limit=limit)
            assert [hit.entry for hit in got.hits] == spec_search(union, "alpha beta", limit)
        assert fetched
        # No set is scored by evaluating its expression a second time: its fetch scored it.
        again = [sql for sql in statements if "ORDER BY s DESC" in sql and not ("WITH c AS" in sql or "unnest" in sql)]
        assert not again, again
        if forced:
            both = [match for match in fetched if isinstance(match, AllOf)]
            assert both and all(isinstance(pg_search.spread(match), AnyOf) for match in both)
    finally:
        team.close()


@pytest.mark.pg
def test_a_larger_limit_than_the_fetch_scored_is_scored_again(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 1)
    try:
        union = _corpus(team)
        with raw_connection(team.reader._engine("read")) as conn:
            conn.execute(pg_search.SEARCH_BEGIN, prepare=False)
            parts = dict(conn.execute("SELECT sid, part FROM team_source WHERE part IS NOT NULL").fetchall())
            queries = pg_search.PgSearch(conn, ["alpha"], parts=parts, k=2)
            queries.lookup("alpha", INSIDE, 200)
            found = queries.fetch(Has(CONTENT, ("alpha",)), 10_000)
            assert found is not None and found.rows == 200
            two, many = queries.score_fetched(found, 2), queries.score_fetched(found, 50)
            conn.execute("COMMIT")
        assert len(two) == 2 and len(many) == 50 and many[:2] == two
        best = {hit.row_id for hit in many}
        assert len(best) == 50
        expected = spec_search(union, "alpha", 50)
        assert [hit.created_at for hit in many] == [entry.created_at for entry in expected]
    finally:
        team.close()


@pytest.mark.pg
@pytest.mark.parametrize("sparse", [search.SPARSE_WALK, 0])
def test_a_sparse_narrowed_set_is_scored_not_walked(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch, sparse: float
) -> None:
    """A walk tests its filter on every row it reads: over 'gamma' (1 row in 4) its first batch would
    read 64 rows or more, about as many as scoring its 75 rows outright (below 1.5 * sqrt(16 * 300) = 103)."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 1)
    walks: list[int] = []
    real_walk = pg_search.PgSearch.walk

    def walk(self: pg_search.PgSearch, *args: Any, **kwargs: Any) -> Any:
        walks.append(1)
        return real_walk(self, *args, **kwargs)

    monkeypatch.setattr(pg_search.PgSearch, "walk", walk)
    for name, value in {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SPARSE_WALK": sparse}.items():
        monkeypatch.setattr(search, name, value)
    try:
        union = _corpus(team)
        for limit in (1, 3):
            got = team.reader.search("gamma", limit=limit)
            assert [hit.entry for hit in got.hits] == spec_search(union, "gamma", limit)
        assert bool(walks) == (sparse == 0)
    finally:
        team.close()


# ---------------------------------------------------------------------------- a timed walk's own timeout

SLOW_WHEN_ARMED = "pg_sleep(CASE WHEN current_setting('statement_timeout') LIKE '%%ms' THEN 2 ELSE 0 END)"
"""Outlasts a walk's timeout (under 1 s: shown in ms), and only when one is armed (memstore's own is 30 s)."""


@pytest.mark.pg
@pytest.mark.parametrize("where", ["next budget", "clean end"])
def test_a_statement_cut_by_the_walks_armed_timeout_ends_the_walk_not_the_search(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A walk's timeout stays armed between its batches and until its end: the statements run then
    (the next batch's budget, the clean end) can be cut by it too, and must not fail the search."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    if where == "next budget":
        slow = f"SELECT {SLOW_WHEN_ARMED}, set_config('statement_timeout', %s, true)"  # the sleep sees the last one
        monkeypatch.setattr(pg_search, "WALK_TIMEOUT", slow)
    else:
        real_end = pg_search._walk_end

        def walk_end(before: Any, *, timed: bool, failed: bool) -> str:
            end = real_end(before, timed=timed, failed=failed)
            return end if failed else f"SELECT {SLOW_WHEN_ARMED.replace('%%', '%')}; {end}"

        monkeypatch.setattr(pg_search, "_walk_end", walk_end)
    # Every column dense: every search walks, with a budget long enough for its first batches.
    for name, value in {"TERM_CAP": 0, "WALK_SECONDS": 0.9}.items():
        monkeypatch.setattr(search, name, value)
    try:
        union = _corpus(team)
        for query, limit in (("alpha", 30), ("row", 3), ("beta gamma", 40)):
            got = team.reader.search(query, limit=limit)
            assert [hit.entry for hit in got.hits] == spec_search(union, query, limit), (query, limit)
    finally:
        team.close()


@pytest.mark.pg
def test_a_lookup_counts_the_rows_of_a_kind_within_its_cap_only(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    """Rows of a dense kind (more terms than the cap) are never used: they are not summed."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    try:
        _corpus(team)
        with raw_connection(team.reader._engine("read")) as conn:
            conn.execute(pg_search.SEARCH_BEGIN, prepare=False)
            parts = dict(conn.execute("SELECT sid, part FROM team_source WHERE part IS NOT NULL").fetchall())
            queries = pg_search.PgSearch(conn, ["row"], parts=parts, k=1)
            dense = queries.lookup("row", INSIDE, 5)  # row0 ... row299: 300 terms
            within = queries.lookup("gamma", INSIDE, 5)
            beta = queries.lookup("beta", INSIDE, 5)
            conn.execute("COMMIT")
        assert dense == (TermSet(None, 0), TermSet((), 0))
        assert within == (TermSet(("gamma",), 150), TermSet((), 0))
        assert beta[0] == TermSet(("beta",), 120) and beta[1].terms == ("beta",) and beta[1].rows == 2 * 43
    finally:
        team.close()


@pytest.mark.pg
def test_a_search_holds_its_sets_in_memory_for_its_transaction_only(pg_database: pg_server.PgUrls) -> None:
    """A held set of FALLBACK_CAP rows' text spilled to disk at the default 4 MB of work_mem."""
    with pg_server.connect(pg_database.reader) as conn:
        default = conn.execute("SHOW work_mem").fetchone()
        conn.execute("BEGIN")
        pg_search.PgSearch(conn, ["a"], parts={}, k=1)
        assert conn.execute("SHOW work_mem").fetchone() == (pg_search.WORK_MEM,)
        conn.execute("COMMIT")
        assert conn.execute("SHOW work_mem").fetchone() == default


@pytest.mark.pg
def test_a_set_of_one_term_counted_too_large_is_not_fetched(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'gamma.' once its common mark is left out is the one term 'gamma' (150 rows): the vocabulary's
    exact count already says a fetch capped at 100 rows would find it too large."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    fetched: list[Match] = []
    real_fetch = pg_search.PgSearch.fetch

    def fetch(self: pg_search.PgSearch, match: Match, cap: int) -> Fetched | None:
        fetched.append(match)
        return real_fetch(self, match, cap)

    monkeypatch.setattr(pg_search.PgSearch, "fetch", fetch)
    for name, value in {"SET_ROWS": 100, "PART_ROWS": 100}.items():
        monkeypatch.setattr(search, name, value)
    try:
        union = _corpus(team)
        for limit in (1, 5):
            got = team.reader.search("gamma.", limit=limit)
            assert [hit.entry for hit in got.hits] == spec_search(union, "gamma.", limit)
        assert Has(CONTENT, ("gamma",)) not in fetched, fetched
    finally:
        team.close()


@pytest.mark.pg
def test_rows_found_by_an_expansion_are_scored_without_another_statement(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'beta' in content (240 rows) and in tags (172), both under the cap: each column's rows are
    found, and scored as they are found."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 4)
    statements: list[str] = []
    real_rows = pg_search.PgSearch._rows

    def rows(self: pg_search.PgSearch, sql: str, extra: Any = None) -> list[tuple[Any, ...]]:
        statements.append(sql)
        return real_rows(self, sql, extra)

    monkeypatch.setattr(pg_search.PgSearch, "_rows", rows)
    for name, value in {"SET_ROWS": 1, "AND_ROWS": 0, "CANDIDATE_CAP": 500}.items():
        monkeypatch.setattr(search, name, value)
    try:
        union = _corpus(team)
        for query, limit in (("beta", 7), ("beta alpha", 30), ("beta row1", 4)):
            statements.clear()
            got = team.reader.search(query, limit=limit)
            assert [hit.entry for hit in got.hits] == spec_search(union, query, limit), (query, limit)
            assert any("CASE WHEN" in sql and "LIMIT %(cap)s" in sql for sql in statements), statements
            assert not any("FROM unnest(" in sql for sql in statements), statements
    finally:
        team.close()
