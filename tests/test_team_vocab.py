"""The shared vocabulary: ids given once, looked up before inserting, any batch shape."""

from __future__ import annotations

import pg_server
import psycopg

from memstore.index.pg.migrate import upgrade_team
from memstore.index.pg.vocab import Vocabulary
from memstore.index.pg_connect import create_engine
from memstore.index.terms import CONTENT, CONTENT_MARKS, TAGS
from memstore.index_url import parse_index_url


def test_batches_of_one_marks_and_repeats(pg_database: pg_server.PgUrls) -> None:
    engine = create_engine(parse_index_url(pg_database.writer))
    try:
        assert upgrade_team(engine) == "created"
    finally:
        engine.dispose()
    with psycopg.connect(pg_database.writer, autocommit=True) as conn:
        first = Vocabulary(conn)
        first.ensure({CONTENT_MARKS: {"x22x2e"}})  # one term, and it has no grams
        first.ensure({CONTENT: {"café"}})  # one term with grams
        first.ensure({CONTENT: {"café", "ß", "日本語"}, TAGS: {"café"}, CONTENT_MARKS: {"x22x2e", "x2d"}})
        second = Vocabulary(conn)
        second.ensure({CONTENT: {"日本語", "café"}, CONTENT_MARKS: {"x22x2e"}})
        assert second.ids[CONTENT] == {term: first.ids[CONTENT][term] for term in ("日本語", "café")}
        assert second.ids[CONTENT_MARKS]["x22x2e"] == first.ids[CONTENT_MARKS]["x22x2e"]
        assert first.ids[TAGS]["café"] != first.ids[CONTENT]["café"]
        rows = conn.execute("SELECT kind, text, grams FROM team_term ORDER BY id").fetchall()
        assert len(rows) == 6
        grams = {(kind, text): set(value) for kind, text, value in rows}
        assert grams[(CONTENT_MARKS, "x22x2e")] == set()
        assert {"c", "ca", "éqe", "cqs"} <= grams[(CONTENT, "café")]
