"""team_doc rows in COPY's binary format: the server reads back exactly the values they were built from.

Binary COPY is strict about types (an int2 sent for an int4 column is an error, not a
cast), so the rows go into a table made LIKE the real ``team_doc`` of the migrated schema.
"""

from __future__ import annotations

import pg_server
import psycopg
import pytest

from memstore.index.pg.copy_binary import (
    EMPTY_ARRAY,
    HEADER,
    TRAILER,
    doc_row,
    element_id,
    id_element,
    int4_array,
)
from memstore.index.pg.loader import DOC_COLUMNS
from memstore.index.pg.migrate import upgrade_team
from memstore.index.pg_connect import create_engine
from memstore.index_url import parse_index_url

pytestmark = pytest.mark.pg


def test_an_id_element_holds_its_id_across_the_int4_range() -> None:
    for tid in (0, 1, 255, 256, 2**24 + 3, 2**31 - 1, -1, -(2**31)):
        assert element_id(id_element(tid)) == tid


def test_rows_read_back_as_built(pg_database: pg_server.PgUrls) -> None:
    engine = create_engine(parse_index_url(pg_database.writer))
    try:
        upgrade_team(engine)
    finally:
        engine.dispose()
    text = "straße ΟΔΟΣ 日本語 \\ \t tab, 'quote' \"dq\" %_"
    big = [1, 2**24 + 7, 2**31 - 1, 300]
    rows = [
        # part, id, sid, c, t, created_at, bonus, odd, off, len, cterms, tterms, raw
        (7, 1, 3, text, "tag\nsecond", "2026-01-01T00:00:00+00:00", 3, False, 0, 11, big, [5], b"{raw \\ \x00}"),
        (7, 2**40, 2**31 - 1, "", "", None, 0, True, 2**40, 2**31 - 1, [], [], b""),
        (7, 3, 1, "x", "", "", -2, False, 12, 1, [9], [], bytes(range(256))),
    ]
    data = [HEADER]
    for part, row_id, sid, c, t, created_at, bonus, odd, off, length, cterms, tterms, raw in rows:
        data.append(
            doc_row(
                part,
                row_id,
                sid,
                c.encode(),
                t.encode(),
                None if created_at is None else created_at.encode(),
                bonus,
                odd,
                off,
                length,
                int4_array([id_element(tid) for tid in cterms]),
                int4_array([id_element(tid) for tid in tterms]) if tterms else EMPTY_ARRAY,
                raw,
            )
        )
    data.append(TRAILER)
    with psycopg.connect(pg_database.writer, autocommit=True) as conn:
        conn.execute("CREATE TABLE copied (LIKE team_doc)")
        with conn.cursor().copy(f"COPY copied ({DOC_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(b"".join(data))
        found = conn.execute(f"SELECT {DOC_COLUMNS} FROM copied ORDER BY id").fetchall()
    assert [tuple(bytes(value) if isinstance(value, memoryview) else value for value in row) for row in found] == [
        rows[0],
        rows[2],
        rows[1],
    ]


def test_a_row_of_the_wrong_shape_is_refused(pg_database: pg_server.PgUrls) -> None:
    """The layout is checked by the server, not trusted: a truncated row fails the COPY."""
    engine = create_engine(parse_index_url(pg_database.writer))
    try:
        upgrade_team(engine)
    finally:
        engine.dispose()
    row = doc_row(1, 1, 1, b"c", b"t", b"s", 0, False, 0, 1, EMPTY_ARRAY, EMPTY_ARRAY, b"r")
    with psycopg.connect(pg_database.writer, autocommit=True) as conn:
        conn.execute("CREATE TABLE copied (LIKE team_doc)")
        with pytest.raises(psycopg.errors.DataError), conn.cursor().copy(
            f"COPY copied ({DOC_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.write(HEADER + row[:-3] + TRAILER)
