"""Adversarial review of binary COPY, the paused collector and per-batch counts (a0e8a17..review4).

Each test pins one defect found; one that is not fixed yet is a strict xfail.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pg_server
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_index_differential import write_raw
from test_team_index_differential import Team, entry_line
from test_team_row_writer import recorded_copy_writes

from memstore.errors import MemstoreError
from memstore.index.pg.copy_binary import HEADER, TRAILER, doc_row, id_element, int4_array
from memstore.index.pg.migrate import upgrade_team
from memstore.index.pg_connect import create_engine
from memstore.index_url import parse_index_url
from memstore.team_index import TeamIndex

pytestmark = pytest.mark.pg


def test_a_full_load_sends_long_lines_in_bounded_writes(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full load must not hold a whole batch of rows twice over in memory.

    Cause: ``_load_table`` joined a batch (up to 20,000 rows) into one ``bytes`` before
    writing it, next to the list of its rows: a 45 MB source of 45 KB lines peaked at
    1,292 MB RSS against 982 MB for the text COPY it replaced.  Severity: memory growth.
    """
    from memstore.index.pg import loader

    monkeypatch.setattr(loader, "WRITE_BYTES", 64 * 1024)
    sizes = recorded_copy_writes(monkeypatch)
    rng = random.Random(5)
    words = [f"w{n}" for n in range(3000)]
    lines = [
        entry_line(" ".join(rng.choice(words) for _ in range(2000)), tags=("long",), memory_id=f"m{n}")
        for n in range(60)
    ]
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    try:
        (catalog,) = team.catalogs.values()
        write_raw(catalog.path, b"\n".join(lines) + b"\n")
        team.catch_up()
        team.check(["w1", "long", "w2999 w3"])
    finally:
        team.close()
    longest_row = 3 * max(map(len, lines))  # raw, c and the terms' ids
    assert len(sizes) > 2
    assert max(sizes) <= 64 * 1024 + longest_row


@pytest.fixture
def database_of_encoding(pg_cluster: pg_server.Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database (writer-owned, C locale) in the encoding the test is parametrized with; its writer URL."""
    encoding = request.param
    name = f"enc_{encoding.lower()}_{next(_counter)}"
    with pg_server.connect(pg_cluster.url(pg_server.SUPERUSER, "postgres")) as conn:
        conn.execute(
            f"CREATE DATABASE {name} OWNER {pg_server.WRITER} ENCODING '{encoding}'"
            " LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        )
    try:
        yield pg_cluster.urls(name).writer
    finally:
        pg_server.drop_database(pg_cluster, name)


_counter = iter(range(1, 1_000_000))


@pytest.mark.parametrize("database_of_encoding", ["LATIN1", "SQL_ASCII"], indirect=True)
def test_a_database_not_in_utf8_is_a_typed_error(tmp_path: Path, database_of_encoding: str) -> None:
    """Bad input gets a typed error: a team index in a LATIN1 or SQL_ASCII database.

    Cause: nothing checks the database's encoding.  In LATIN1 the connection speaks LATIN1,
    so the first term or text outside it fails in the client (``UnicodeEncodeError`` from the
    vocabulary's insert or the row encoder); in SQL_ASCII psycopg returns bytes for text and
    SQLAlchemy's first connect fails on the server version (``TypeError``).  Same before
    and after binary COPY (not a regression of it); the CLI shows the message of either.
    """
    root = tmp_path / "r"
    write_raw(root / ".teaagent" / "memory.jsonl", entry_line("日本語 café", memory_id="a") + b"\n")
    with TeamIndex(database_of_encoding) as team, pytest.raises(MemstoreError):
        team.reindex({"s/memory.jsonl": root})


TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=300)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            TEXT,
            TEXT,
            st.none() | TEXT,
            st.integers(-(2**15), 2**15 - 1),
            st.booleans(),
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**31 - 1),
            st.lists(st.integers(1, 2**31 - 1), max_size=40),
            st.lists(st.integers(1, 2**31 - 1), max_size=5),
            st.binary(max_size=200),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_binary_rows_equal_the_text_copy_they_replaced(pg_writer_url: str, rows: list[tuple[Any, ...]]) -> None:
    """Differential: the same values through psycopg's text COPY and through :func:`doc_row` are the same rows."""
    columns = "part, id, sid, c, t, created_at, bonus, odd, off, len, cterms, tterms, raw"
    values = [(1, n, 2, *row) for n, row in enumerate(rows, start=1)]
    engine = create_engine(parse_index_url(pg_writer_url))
    try:
        upgrade_team(engine)  # team_doc, for its column types
    finally:
        engine.dispose()
    with psycopg.connect(pg_writer_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE by_text (LIKE team_doc)")
        conn.execute("CREATE TEMP TABLE by_binary (LIKE team_doc)")
        with conn.cursor().copy(f"COPY by_text ({columns}) FROM STDIN") as copy:
            for row in values:
                cterms, tterms = ("{" + ",".join(map(str, ids)) + "}" for ids in row[10:12])
                copy.write_row((*row[:10], cterms, tterms, row[12]))
        encoding = conn.info.encoding
        with conn.cursor().copy(f"COPY by_binary ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(HEADER)
            for part, row_id, sid, c, t, stamp, bonus, odd, off, length, cterms, tterms, raw in values:
                copy.write(
                    doc_row(
                        part, row_id, sid, c.encode(encoding), t.encode(encoding),
                        None if stamp is None else stamp.encode(encoding), bonus, odd, off, length,
                        int4_array([id_element(tid) for tid in cterms]),
                        int4_array([id_element(tid) for tid in tterms]), raw,
                    )
                )  # fmt: skip
            copy.write(TRAILER)
        differ = conn.execute(
            "SELECT count(*) FROM ((TABLE by_text EXCEPT ALL TABLE by_binary) UNION ALL"
            " (TABLE by_binary EXCEPT ALL TABLE by_text)) AS d"
        ).fetchone()
        found = conn.execute("SELECT count(*) FROM by_binary").fetchone()
        conn.execute("DROP TABLE by_text, by_binary")
    assert differ == (0,)
    assert found == (len(values),)
