"""The walk's time budgets: the probe, filters that outlast the budget, and Ctrl-C during a walk.

Building a large word-index filter costs more than walking a common token's first rows, so
a walk that ends early (a dense token) ends before the filter would exist.  When the probe is
cut short, the filtered walk carries on just after the last row the probe took: every answer
stays the scan's.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_index_differential import reference_search, write_raw

from memstore.catalog import MemoryCatalog
from memstore.index import search
from memstore.index.search import WalkInterrupted
from memstore.index.sqlite_search import SqliteSearch
from memstore.index.terms import CONTENT

STAMPS = ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00", "2025-12-31T23:59:59+00:00"]


def _catalog(root: Path, rows: int = 3000) -> MemoryCatalog:
    """A common token ('common') in every row, bonus classes of every size, timestamps that tie."""
    catalog = MemoryCatalog(root)
    lines = []
    for i in range(rows):
        tags = ["auto-curated"] if i % 97 == 0 else (["run-summary"] if i % 89 == 0 else ["misc"])
        content = f"common row{i}" + (" rare" if i % 500 == 0 else "")
        entry = {"memory_id": f"m{i}", "content": content, "tags": tags, "created_at": STAMPS[i % 3]}
        lines.append(json.dumps(entry, sort_keys=True))
    write_raw(catalog.path, ("\n".join(lines) + "\n").encode())
    return catalog


class _Walks:
    """Records every walk the planner starts; ``cut_probe`` ends a probe after its first batch."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, cut_probe: bool = False) -> None:
        self.calls: list[tuple[int, tuple[int, str, int] | None]] = []
        self.budgets: list[float | None] = []
        self.probe_rows: list[Any] = []
        real = SqliteSearch.walk
        walks = self

        def walk(
            queries: SqliteSearch, filters: Sequence[search.Match], after: Any, seconds: float | None
        ) -> Generator[list[Any], None, None]:
            walks.calls.append((len(filters), after))
            walks.budgets.append(seconds)
            batches = real(queries, filters, after, seconds)
            try:
                for rows in batches:
                    if not filters:
                        walks.probe_rows.append(rows[-1])
                    yield rows
                    if cut_probe and not filters:
                        raise WalkInterrupted
            finally:
                batches.close()

        monkeypatch.setattr(SqliteSearch, "walk", walk)


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """No outright scoring of large sets and a probe for any filter, so a small catalog walks."""
    for name, value in {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "PROBE_FILTER_ROWS": 0}.items():
        monkeypatch.setattr(search, name, value)


@pytest.mark.usefixtures("small_caps")
def test_a_dense_token_walk_ends_in_the_probe_and_never_builds_its_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = _catalog(tmp_path)
    catalog.search("common")  # builds the index
    walks = _Walks(monkeypatch)
    for limit in (1, 10, 25):
        walks.calls.clear()
        assert catalog.search("common", limit=limit) == reference_search(catalog.path, "common", limit)
        assert walks.calls == [(0, None)], "the probe alone answered: no filtered walk"
    plan = catalog.explain("common")
    walk = next(step for step in plan.steps if step.step == "walk")
    assert "without them" in walk.detail and walk.outcome == "done"


@pytest.mark.usefixtures("small_caps")
def test_a_probe_cut_short_carries_on_after_the_rows_it_took(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = _catalog(tmp_path)
    catalog.search("common")
    walks = _Walks(monkeypatch, cut_probe=True)
    for limit in (1, 10, 25, 200):
        walks.calls.clear()
        walks.probe_rows.clear()
        assert catalog.search("common", limit=limit) == reference_search(catalog.path, "common", limit)
        probe, *rest = walks.calls
        assert probe == (0, None) and walks.probe_rows, "the probe ran and took a batch"
        if rest:  # the probe's batch may already hold the whole answer for a small limit
            row_id, _score, created_at, bonus = walks.probe_rows[-1]
            assert rest[0] == (1, (bonus, created_at, row_id)), "the filtered walk starts after the probe's last row"


@pytest.mark.usefixtures("small_caps")
def test_several_tokens_walk_with_their_filters_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows holding several tokens may be sparse in the walk's order: no probe."""
    catalog = _catalog(tmp_path)
    catalog.search("common")
    walks = _Walks(monkeypatch)
    for query in ("common rare", "row1 common"):
        walks.calls.clear()
        assert catalog.search(query, limit=10) == reference_search(catalog.path, query, 10)
        assert all(filters > 0 for filters, _after in walks.calls), (query, walks.calls)


def test_a_small_filter_is_built_without_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below PROBE_FILTER_ROWS the filter costs less than the probe would."""
    for name, value in {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3}.items():
        monkeypatch.setattr(search, name, value)
    catalog = _catalog(tmp_path)
    catalog.search("common")
    walks = _Walks(monkeypatch)
    assert catalog.search("common", limit=10) == reference_search(catalog.path, "common", 10)
    assert walks.calls and walks.calls[0][0] == 1


@pytest.mark.pg
@pytest.mark.usefixtures("small_caps")
def test_a_team_walk_tests_its_filter_row_by_row_and_never_probes(
    tmp_path: Path, pg_database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL builds no filter before the walk's first row: a probe would only add round trips."""
    from spec_reference import spec_search
    from test_index_differential import reference
    from test_team_index_differential import Team

    from memstore.index.pg import search as pg_search

    team = Team(tmp_path, pg_database.writer, pg_database.reader, 1)
    (catalog,) = team.catalogs.values()
    write_raw(catalog.path, _catalog(tmp_path / "lines").path.read_bytes())
    team.catch_up()
    filters_of_walks: list[int] = []
    real = pg_search.PgSearch.walk

    def walk(queries: Any, filters: Sequence[search.Match], *args: Any) -> Generator[list[Any], None, None]:
        filters_of_walks.append(len(filters))
        return real(queries, filters, *args)

    monkeypatch.setattr(pg_search.PgSearch, "walk", walk)
    union = [entry for _order, entry in reference(catalog.path)]
    for limit in (1, 10):
        got = team.reader.search("common", limit=limit, sources=list(team.roots))
        assert [hit.entry for hit in got.hits] == spec_search(union, "common", limit)
    assert filters_of_walks and all(filters_of_walks), filters_of_walks


@pytest.mark.usefixtures("small_caps")
@pytest.mark.parametrize("fallback_cap", [search.FALLBACK_CAP, 0])
def test_filters_that_would_outlast_the_budget_skip_the_budgeted_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback_cap: int
) -> None:
    """The walk would spend its whole budget building its filters and read nothing: go on at once."""
    monkeypatch.setattr(search, "FILTER_ROW_SECONDS", 1.0)
    monkeypatch.setattr(search, "FALLBACK_CAP", fallback_cap)
    catalog = _catalog(tmp_path)
    catalog.search("common")
    walks = _Walks(monkeypatch)
    for query in ("common rare", "row1 common", "common"):
        walks.calls.clear()
        walks.budgets.clear()
        assert catalog.search(query, limit=10) == reference_search(catalog.path, query, 10)
        filtered = [budget for (filters, _after), budget in zip(walks.calls, walks.budgets, strict=True) if filters]
        assert all(budget is None for budget in filtered), (query, walks.calls, walks.budgets)
        if fallback_cap == 0 and query != "common":
            assert filtered, "with no fallback the walk carries on without a budget"


@pytest.mark.usefixtures("small_caps")
def test_ctrl_c_during_a_budgeted_walk_is_a_keyboard_interrupt_not_a_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal's KeyboardInterrupt raised inside the progress handler is discarded by sqlite3, which
    only stops the statement: read as the budget running out, the search carried on to the fallback."""
    import sys
    import time

    from memstore.index import sqlite_search

    catalog = _catalog(tmp_path)
    catalog.search("common")
    monkeypatch.setattr(search, "WALK_SECONDS", 60.0)  # the budget never runs out by itself
    real = time.perf_counter
    calls = {"n": 0}

    def perf_counter() -> float:
        if sys._getframe(1).f_code.co_name == "over_budget":
            calls["n"] += 1
            if calls["n"] == 1:  # the walk's first progress callback: where a Ctrl-C's handler runs
                raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(sqlite_search.time, "perf_counter", perf_counter)
    with pytest.raises(KeyboardInterrupt):
        catalog.search("common", limit=10)
    assert calls["n"] == 1
    monkeypatch.setattr(sqlite_search.time, "perf_counter", real)
    assert catalog.search("common", limit=10) == reference_search(catalog.path, "common", 10)


def _fetches(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """Records the size of every set the planner fetches (None: too many to fetch)."""
    calls: list[int | None] = []
    real = SqliteSearch.fetch

    def fetch(queries: SqliteSearch, match: search.Match, cap: int) -> search.Fetched | None:
        found = real(queries, match, cap)
        calls.append(None if found is None else found.rows)
        return found

    monkeypatch.setattr(SqliteSearch, "fetch", fetch)
    return calls


def test_a_one_term_set_becomes_the_walks_filter_without_being_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'rare' is one term in 6 rows: the vocabulary's count is exact, so a set too large to
    score outright becomes the walk's filter without the narrow step fetching its ids."""
    catalog = _catalog(tmp_path)
    catalog.search("common")
    # ROW_SECONDS: the walk over the 6 rows gets its whole budget (at 1M, 3,807 rows get 11 ms).
    for name, value in {"CANDIDATE_CAP": 2, "DIRECT_ROWS": 2, "ROW_SECONDS": 1.0}.items():
        monkeypatch.setattr(search, name, value)
    walks = _Walks(monkeypatch)
    fetches = _fetches(monkeypatch)
    for limit in (1, 2):
        assert catalog.search("rare", limit=limit) == reference_search(catalog.path, "rare", limit)
    assert fetches == [] and walks.calls == [(1, None), (1, None)]
    narrow = next(step for step in catalog.explain("rare", limit=1).steps if step.step == "narrow")
    assert narrow.candidates == 6 and "counted by the vocabulary" in narrow.detail
    # A walk that cannot stop early scores the set outright: only then are its ids fetched.
    monkeypatch.setattr(search, "WALK_SECONDS", 0.0)
    for limit in (1, 2):
        assert catalog.search("rare", limit=limit) == reference_search(catalog.path, "rare", limit)
    assert fetches == [6, 6]


def test_a_wrong_vocabulary_count_changes_the_plan_never_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index file is input: a term whose count says 5 rows where 3,000 hold it is walked as
    a small filter; when the walk gives up, the fetch finds too many and another path answers."""
    catalog = _catalog(tmp_path)
    catalog.search("common")
    with contextlib.closing(sqlite3.connect(catalog.index_path)) as conn, conn:
        changed = conn.execute("UPDATE term SET n = 5 WHERE kind = ? AND text = 'common'", (CONTENT,)).rowcount
    assert changed == 1
    for name, value in {"CANDIDATE_CAP": 2, "DIRECT_ROWS": 2, "SET_ROWS": 100}.items():
        monkeypatch.setattr(search, name, value)
    fetches = _fetches(monkeypatch)
    for query in ("common", "common rare", "common row7"):
        for limit in (1, 2, 50):
            assert catalog.search(query, limit=limit) == reference_search(catalog.path, query, limit), (query, limit)
    monkeypatch.setattr(search, "WALK_SECONDS", 0.0)
    scored: list[object] = []
    real = search.Planner._score_narrowed

    def score_narrowed(planner: search.Planner) -> list[search.Hit] | None:
        hits = real(planner)
        scored.append(hits)
        return hits

    monkeypatch.setattr(search.Planner, "_score_narrowed", score_narrowed)
    fetches.clear()
    for limit in (1, 2, 50):
        assert catalog.search("common", limit=limit) == reference_search(catalog.path, "common", limit)
    assert scored and all(hits is None for hits in scored), "the walk gave up; the set, fetched at last, was too large"


def _marked_catalog(root: Path) -> MemoryCatalog:
    """'-memo' (a mark next to a piece, which the word index cannot place): 'memo' and '-' share
    600 rows, of which 200 hold '-memo' itself, some in the tags, with bonus classes and ties."""
    catalog = MemoryCatalog(root)
    lines = []
    for i in range(3000):
        if i % 5 == 0:
            content = f"common-memo{i % 3} row{i}" if i % 3 else f"memo{i % 7} - row{i}"
        else:
            content = f"common row{i}"
        tags = ["auto-curated"] if i % 97 == 0 else (["x-memo"] if i % 15 == 5 else ["misc"])
        entry = {"memory_id": f"m{i}", "content": content, "tags": tags, "created_at": STAMPS[i % 3]}
        lines.append(json.dumps(entry, sort_keys=True))
    write_raw(catalog.path, ("\n".join(lines) + "\n").encode())
    return catalog


@pytest.mark.parametrize("fallback_cap", [30_000, 50])
def test_a_set_the_walk_would_leave_to_the_fallback_is_fetched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback_cap: int
) -> None:
    """When the walk's filter would outlast its budget, the walk goes straight to the fallback,
    which fetches the set the narrow step fetched already: the narrow step fetches it once with
    the fallback's cap and scores it (no expansions, no second fetch); when even that cap is too
    small, the fallback does not try again and the walk carries on.  Answers stay the scan's."""
    catalog = _marked_catalog(tmp_path)
    catalog.search("common")
    for name, value in {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "FILTER_ROW_SECONDS": 1.0}.items():
        monkeypatch.setattr(search, name, value)
    monkeypatch.setattr(search, "FALLBACK_CAP", fallback_cap)
    expansions: list[object] = []
    real_ids = SqliteSearch.ids

    def ids(queries: SqliteSearch, match: search.Match, cap: int) -> set[int] | None:
        expansions.append(match)
        return real_ids(queries, match, cap)

    monkeypatch.setattr(SqliteSearch, "ids", ids)
    fetches = _fetches(monkeypatch)
    for query in ("-memo", "-memo row1", "-memo common", "common-memo"):
        for limit in (1, 10):
            fetches.clear()
            expansions.clear()
            assert catalog.search(query, limit=limit) == reference_search(catalog.path, query, limit), (query, limit)
            if fallback_cap > 600 and query == "-memo":
                assert fetches == [600] and expansions == [], (fetches, expansions)
            if fallback_cap == 50 and query == "-memo":
                assert fetches == [None], fetches
    if fallback_cap > 600:
        narrow = [step for step in catalog.explain("-memo").steps if step.step == "narrow"]
        assert narrow[0].candidates == 600 and "the fallback's set" in narrow[0].outcome
    # A token whose columns are both few is answered by expanding each (as before): kept.
    monkeypatch.setattr(search, "CANDIDATE_CAP", 1000)
    fetches.clear()
    expansions.clear()
    assert catalog.search("-memo", limit=10) == reference_search(catalog.path, "-memo", 10)
    assert fetches == [None] and len(expansions) == 2, (fetches, expansions)
    monkeypatch.setattr(search, "CANDIDATE_CAP", 3)
    # A lone token's walk first probes without its filter (a dense token's walk ends there): kept.
    monkeypatch.setattr(search, "PROBE_FILTER_ROWS", 0)
    walks = _Walks(monkeypatch)
    assert catalog.search("-memo", limit=10) == reference_search(catalog.path, "-memo", 10)
    assert walks.calls[:1] == [(0, None)], walks.calls
