"""docs/team-index.md's SQL, run as written against a real server, gives the roles it promises."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pg_server
import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "team-index.md"
BLOCK = re.compile(r"<!-- sql: (?P<where>[^>]+?) -->\s*```sql\n(?P<sql>.*?)```", re.DOTALL)


def sql_blocks() -> dict[str, list[str]]:
    """The page's SQL blocks by their marker, each split into statements."""
    found = BLOCK.finditer(DOC.read_text())
    blocks = {m["where"]: [s.strip() for s in m["sql"].split(";") if s.strip()] for m in found}
    assert set(blocks) == {"as a superuser", "in the memstore database"}
    return blocks


@pytest.fixture
def documented(pg_cluster: pg_server.Cluster) -> Iterator[pg_server.Cluster]:
    """The page's setup, applied to the test cluster, and removed again afterwards."""
    blocks = sql_blocks()
    try:
        with pg_server.connect(pg_cluster.url(pg_server.SUPERUSER, "postgres")) as conn:
            for statement in blocks["as a superuser"]:
                conn.execute(statement)
        with pg_server.connect(pg_cluster.url(pg_server.SUPERUSER, "memstore")) as conn:
            for statement in blocks["in the memstore database"]:
                conn.execute(statement)
        yield pg_cluster
    finally:
        with pg_server.connect(pg_cluster.url(pg_server.SUPERUSER, "postgres")) as conn:
            conn.execute("DROP DATABASE IF EXISTS memstore WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS memstore_reader")
            conn.execute("DROP ROLE IF EXISTS memstore_writer")


def test_the_documented_roles_write_and_read_as_promised(documented: pg_server.Cluster) -> None:
    import psycopg

    writer = documented.url("memstore_writer", "memstore")
    reader = documented.url("memstore_reader", "memstore")
    with pg_server.connect(writer) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        conn.execute("CREATE TABLE doc (id bigint PRIMARY KEY, c text NOT NULL)")
        conn.execute("CREATE INDEX doc_trgm ON doc USING gin (c gin_trgm_ops)")
        conn.execute("INSERT INTO doc VALUES (1, 'payment retries'), (2, 'café 日本語')")
        settings = conn.execute("SELECT datcollate, datctype FROM pg_database WHERE datname = 'memstore'").fetchone()
        assert settings == ("C", "C.UTF-8")
        # Under this ctype pg_trgm keeps non-ASCII letters, so such a token has trigrams to look up.
        assert len(conn.execute("SELECT show_trgm('日本語')").fetchone()[0]) > 0
    with pg_server.connect(reader) as conn:
        assert conn.execute("SELECT count(*) FROM doc WHERE c LIKE '%retr%'").fetchone()[0] == 1
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
        conn.execute("SET default_transaction_read_only = off")
        refused = ("INSERT INTO doc VALUES (3, 'x')", "CREATE TABLE mine (x int)", "CREATE TEMP TABLE t (x int)")
        for statement in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    # Nobody else may connect (PUBLIC lost CONNECT).
    with pg_server.connect(documented.url(pg_server.SUPERUSER, "postgres")) as conn:
        conn.execute("CREATE ROLE stranger LOGIN")
    try:
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            pg_server.connect(documented.url("stranger", "memstore"))
    finally:
        with pg_server.connect(documented.url(pg_server.SUPERUSER, "postgres")) as conn:
            conn.execute("DROP ROLE stranger")


def test_memstore_feeds_and_searches_with_the_documented_roles(documented: pg_server.Cluster, tmp_path: Path) -> None:
    """The page's setup is enough: the writer creates the schema and feeds it, the reader searches it."""
    from memstore.catalog import MemoryCatalog
    from memstore.errors import IndexAuthError
    from memstore.team_index import TeamIndex

    root = tmp_path / "payments"
    MemoryCatalog(root).add("payment retries back off exponentially")
    with TeamIndex(documented.url("memstore_writer", "memstore")) as writer:
        assert writer.reindex({"payments/memory.jsonl": root}).schema == "created"
    with TeamIndex(documented.url("memstore_reader", "memstore")) as reader:
        result = reader.search("retries")
        assert [(hit.source, hit.entry.content) for hit in result.hits] == [
            ("payments/memory.jsonl", "payment retries back off exponentially")]
        with pytest.raises(IndexAuthError):
            reader.reindex({"payments/memory.jsonl": root}, full=True)


def test_the_page_has_no_draft_markers_left() -> None:
    text = DOC.read_text()
    assert text.startswith("# A team index on PostgreSQL\n")
    assert "planned" not in text and "draft" not in text.lower()
