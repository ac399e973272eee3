"""Team searches keep their fixed-shape statements prepared: answers stay the scan's, run after run.

The odd rows and the hits' stored lines come back in one prepared statement, and a
walk that ends without a server error closes its cursor and restores its settings by
hand instead of rolling back (a ROLLBACK makes psycopg forget every prepared statement).
"""

from __future__ import annotations

from pathlib import Path

import pg_server
import pytest
from spec_reference import spec_search
from test_index_differential import reference, write_raw
from test_team_index_differential import Team, entry_line

from memstore.index.pg import search as pg_search
from memstore.index.pg.conn import raw_connection

pytestmark = pytest.mark.pg
RUNS = 8
"""More than psycopg's and PostgreSQL's thresholds (5) for preparing and for a generic plan."""


def test_repeated_searches_equal_the_scan_with_walks_and_odd_rows(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A piece of hundreds of terms ("word" in word0 … word599) is walked (docs: dense pieces).

    Its own database: the search spans every source, and other tests add theirs to the shared one.
    """
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    walks: list[int] = []
    real_walk = pg_search.PgSearch.walk

    def walk(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        walks.append(1)
        return real_walk(self, *args, **kwargs)

    monkeypatch.setattr(pg_search.PgSearch, "walk", walk)
    try:
        for number, catalog in enumerate(team.catalogs.values()):
            lines = [
                entry_line(
                    f"common word{n} {'rare' if n % 97 == 0 else ''}",
                    memory_id=f"m{number}-{n}",
                    stamp=f"2026-01-01T00:00:{n % 60:02d}+00:00",
                )
                for n in range(600)
            ]
            lines.append(entry_line("common odd \x00 line", memory_id=f"odd{number}"))
            write_raw(catalog.path, b"\n".join(lines) + b"\n")
        team.catch_up()
        union = [entry for catalog in team.catalogs.values() for _order, entry in reference(catalog.path)]
        for _run in range(RUNS):
            for query, limit in (("word", 1), ("word", 5), ("common", 2), ("rare", 3), ("odd", 2), ("common line", 2)):
                got = team.reader.search(query, limit=limit)
                assert [hit.entry for hit in got.hits] == spec_search(union, query, limit), (query, limit)
        assert walks, "no search walked: the clean end of a walk was not exercised"
        with raw_connection(team.reader._engine("read")) as conn:
            prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert prepared is not None and prepared[0] > 0
    finally:
        team.close()


def test_walk_end_rolls_back_only_after_an_error() -> None:
    failed = pg_search._walk_end({"enable_seqscan": "off"}, timed=True, failed=True)
    assert failed.startswith("ROLLBACK TO SAVEPOINT memstore_walk")
    clean = pg_search._walk_end({"enable_seqscan": "off"}, timed=True, failed=False)
    assert "ROLLBACK" not in clean
    assert clean.split("; ") == [
        "CLOSE memstore_walk",
        "SET LOCAL enable_seqscan TO off",
        "SET LOCAL enable_sort TO DEFAULT",
        "SET LOCAL enable_bitmapscan TO DEFAULT",
        "SET LOCAL statement_timeout TO DEFAULT",
        "RELEASE SAVEPOINT memstore_walk",
    ]


def test_team_connections_never_jit_compile(pg_reader_url: str, pg_writer_url: str) -> None:
    """A walk's cursor is planned for all its rows, so its cost passes jit_above_cost at 1M entries:
    the first FETCH of 16 rows then spent ~60 ms compiling (benchmarks/results/team-1m.md)."""
    from memstore.team_index import TeamIndex

    for url, purpose in ((pg_reader_url, "read"), (pg_writer_url, "load")):
        with TeamIndex(url) as team, raw_connection(team._engine(purpose)) as conn:
            row = conn.execute("SHOW jit").fetchone()
            assert row is not None and row[0] == "off", purpose
