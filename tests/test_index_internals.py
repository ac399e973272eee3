"""The index's own promises: query plans, schema migrations, the light per-query path, fallbacks."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memstore.catalog import MemoryCatalog
from memstore.index.db import INDEX_DIRNAME, INDEX_FILENAME, IndexFile
from memstore.index.search import Has
from memstore.index.settings import SCHEMA_VERSION
from memstore.index.sqlite_search import SqliteSearch
from memstore.index.terms import CONTENT


def index_path(root: Path) -> Path:
    return root / ".teaagent" / INDEX_DIRNAME / INDEX_FILENAME


def filled(root: Path, count: int = 50) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for i in range(count):
        catalog.add(f"the entry number {i} about caching", tags=["auto-curated"] if i % 5 == 0 else ["misc"])
    assert catalog.search("entry")  # builds the index
    return catalog


def test_walk_reads_the_index_in_order_without_sorting(tmp_path: Path) -> None:
    """The top-k walk stops early only because SQLite streams rows in index order."""
    filled(tmp_path)
    conn = sqlite3.connect(index_path(tmp_path))
    search = SqliteSearch(conn, ["the"], restriction=None)
    sql, params = search.walk_sql([Has(CONTENT, ("the",))], (0, "2024", 3))
    plan = " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "doc_walk" in plan
    assert "TEMP B-TREE" not in plan.upper(), plan


def test_migrated_schema_matches_the_declared_schema(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from memstore.index.schema import RAW_OBJECTS, metadata

    filled(tmp_path, 3)
    engine = create_engine(f"sqlite:///{index_path(tmp_path)}")
    with engine.connect() as connection:
        context = MigrationContext.configure(connection)
        differences = [
            diff for diff in compare_metadata(context, metadata)
            if not any(name in repr(diff) for name in RAW_OBJECTS) and "doc_fts" not in repr(diff)
        ]
        names = {row[0] for row in connection.exec_driver_sql("SELECT name FROM sqlite_master")}
    engine.dispose()
    assert differences == []
    assert set(RAW_OBJECTS) <= names
    assert sqlite3.connect(index_path(tmp_path)).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_old_schema_version_is_migrated_or_rebuilt(tmp_path: Path) -> None:
    catalog = filled(tmp_path, 5)
    expected = catalog.search("entry", limit=50)
    with sqlite3.connect(index_path(tmp_path)) as conn:
        conn.execute("PRAGMA user_version = 0")
        conn.execute("DROP TABLE doc_fts")
    fresh = MemoryCatalog(tmp_path)
    assert fresh.search("entry", limit=50) == expected
    assert fresh.health_report()["index"]["state"] == "fresh"
    assert sqlite3.connect(index_path(tmp_path)).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert list(index_path(tmp_path).parent.glob(f"{INDEX_FILENAME}.damaged-*")), "damaged file kept aside"


OLD_DOC_FTS = (
    "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, mc, mt, content='doc', content_rowid='id', "
    "tokenize='ascii', detail=column)"
)


def _as_0004(path: Path) -> None:
    """Turn a current index back into what memstore at schema 0004 left: doc_fts with column sizes."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        settings = conn.execute("SELECT k, v FROM doc_fts_config WHERE k != 'version'").fetchall()
        conn.execute("DROP TABLE doc_fts")
        conn.execute(OLD_DOC_FTS)
        for key, value in settings:
            conn.execute("INSERT INTO doc_fts(doc_fts, rank) VALUES (?, ?)", (key, value))
        conn.execute("INSERT INTO doc_fts(doc_fts) VALUES ('rebuild')")
        conn.execute("UPDATE alembic_version SET version_num = '0004'")
        conn.execute("PRAGMA user_version = 4")
        conn.execute("COMMIT")
    finally:
        conn.close()


def _word_index(path: Path) -> dict[str, object]:
    """What the word index and its vocabulary hold, row by row."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, doc_fts, 'instance')")
        conn.execute("INSERT INTO doc_fts(doc_fts) VALUES ('integrity-check')")  # raises when damaged
        return {
            "instances": conn.execute("SELECT term, doc, col FROM temp.words ORDER BY 1, 2, 3").fetchall(),
            "terms": conn.execute("SELECT kind, text, n FROM term ORDER BY kind, text").fetchall(),
            "docsize": conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'doc_fts_docsize'").fetchone(),
        }
    finally:
        conn.close()


def test_an_index_at_0004_is_migrated_to_the_file_a_build_makes(tmp_path: Path) -> None:
    """0005 drops doc_fts's column sizes in place: the migrated file is the one a fresh build makes."""
    project, fresh = tmp_path / "project", tmp_path / "fresh"
    catalog = MemoryCatalog(project)
    for i in range(40):
        catalog.add(f"entry {i}: the parser's cache (v{i % 7}) -> src/x_{i % 3}.py", tags=["ci", f"t{i % 4}"])
    queries = ("entry", "cache", "->", "x_1.py", "t2", "v3 parser's")
    expected = {query: catalog.search(query, limit=50) for query in queries}
    _as_0004(index_path(project))
    before = os.stat(index_path(project)).st_ino
    migrated = MemoryCatalog(project)
    assert {query: migrated.search(query, limit=50) for query in queries} == expected
    assert os.stat(index_path(project)).st_ino == before, "migrated in place, not rebuilt"
    assert not list(index_path(project).parent.glob(f"{INDEX_FILENAME}.damaged-*"))
    (fresh / ".teaagent").mkdir(parents=True)
    (fresh / ".teaagent" / "memory.jsonl").write_bytes((project / ".teaagent" / "memory.jsonl").read_bytes())
    assert {query: MemoryCatalog(fresh).search(query, limit=50) for query in queries} == expected
    assert _schema_facts(index_path(project)) == _schema_facts(index_path(fresh))
    assert _word_index(index_path(project)) == _word_index(index_path(fresh))
    assert _word_index(index_path(fresh))["docsize"] == (0,)


def test_newer_schema_version_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    catalog = filled(tmp_path, 5)
    expected = catalog.list(limit=10)
    with sqlite3.connect(index_path(tmp_path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    assert MemoryCatalog(tmp_path).list(limit=10) == expected
    assert sqlite3.connect(index_path(tmp_path)).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_warm_query_path_does_not_import_sqlalchemy(tmp_path: Path) -> None:
    filled(tmp_path, 5)
    code = (
        "import sys, json\n"
        "from memstore.catalog import MemoryCatalog\n"
        f"hits = MemoryCatalog({str(tmp_path)!r}).search('entry')\n"
        "heavy = [m for m in ('sqlalchemy', 'alembic', 'watchdog', 'click') if m in sys.modules]\n"
        "print(json.dumps({'hits': len(hits), 'heavy': heavy}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == {"hits": 5, "heavy": []}


def test_index_folder_ignores_itself_for_git(tmp_path: Path) -> None:
    filled(tmp_path, 1)
    assert (index_path(tmp_path).parent / ".gitignore").read_text().splitlines()[-1] == "*"


def test_readonly_catalog_without_index_scans_and_creates_nothing(tmp_path: Path) -> None:
    writer = MemoryCatalog(tmp_path, use_index=False)
    writer.add("hello readonly world")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    reader = MemoryCatalog(tmp_path, readonly=True)
    assert [e.content for e in reader.search("readonly")] == ["hello readonly world"]
    assert [e.content for e in reader.list()] == ["hello readonly world"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    with pytest.raises(RuntimeError, match="readonly"):
        reader.add("x")


def test_readonly_catalog_uses_an_existing_index(tmp_path: Path) -> None:
    filled(tmp_path, 5)
    with open(tmp_path / ".teaagent" / "memory.jsonl", "ab") as handle:
        handle.write(json.dumps({"memory_id": "ext", "content": "external entry", "created_at": "2027",
                                 "tags": []}, sort_keys=True).encode() + b"\n")
    reader = MemoryCatalog(tmp_path, readonly=True)
    assert [e.memory_id for e in reader.search("external")] == ["ext"]
    assert reader.health_report()["index"]["state"] == "fresh"


def test_unusable_index_falls_back_to_an_identical_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = filled(tmp_path, 20)
    expected = MemoryCatalog(tmp_path, use_index=False).search("entry caching", limit=5)

    def broken(self: IndexFile, **_: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(IndexFile, "connect", broken)
    fresh = MemoryCatalog(tmp_path)
    assert fresh.search("entry caching", limit=5) == expected
    assert catalog.search("entry caching", limit=5) == expected


def test_personal_tier_has_its_own_index(tmp_path: Path) -> None:
    personal = MemoryCatalog.in_directory(tmp_path / "home" / ".config" / "teaagent", private=True)
    personal.add("a personal habit")
    assert personal.search("habit")
    db = tmp_path / "home" / ".config" / "teaagent" / INDEX_DIRNAME / INDEX_FILENAME
    assert db.exists()
    assert os.stat(db).st_mode & 0o077 == 0


def _cache_kib(conn: sqlite3.Connection) -> int:
    """The connection's page-cache bound in KiB (SQLite reports a size in KiB as a negative number)."""
    return -int(conn.execute("PRAGMA cache_size").fetchone()[0])


def test_a_new_connection_reads_first_with_the_small_cache(tmp_path: Path) -> None:
    """The first read of a connection runs with SQLite's default cache; a write grows it first."""
    from memstore.index.base import immediate
    from memstore.index.db import CACHE_KIB, FIRST_CACHE_KIB, grow_cache

    filled(tmp_path, count=5)
    conn, _generation = IndexFile(tmp_path / ".teaagent").connect()
    try:
        assert _cache_kib(conn) == FIRST_CACHE_KIB < CACHE_KIB
        with immediate(conn) as keep:
            keep[0] = False
        assert _cache_kib(conn) == CACHE_KIB
        conn.execute(f"PRAGMA cache_size = -{FIRST_CACHE_KIB}")
        grow_cache(conn)  # once only: the flag, not the pragma, remembers it
        assert _cache_kib(conn) == FIRST_CACHE_KIB
    finally:
        conn.close()


def test_a_catalog_grows_its_cache_when_it_searches_again(tmp_path: Path) -> None:
    """A fresh handle's first search keeps the small cache; its next one has the full cache,
    and both answer the same."""
    from memstore.index.db import CACHE_KIB, FIRST_CACHE_KIB

    filled(tmp_path, count=20)
    catalog = MemoryCatalog(tmp_path)
    first = catalog.search("caching", limit=5)
    index = catalog._index.index()
    assert index is not None and index._conn is not None
    assert _cache_kib(index._conn) == FIRST_CACHE_KIB
    assert catalog.search("caching", limit=5) == first
    assert _cache_kib(index._conn) == CACHE_KIB


def _schema_facts(path: Path) -> dict[str, object]:
    conn = sqlite3.connect(path)
    try:
        shadow_config = [
            (name, conn.execute(f'SELECT k, v FROM "{name}" ORDER BY k').fetchall())
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%\\_config' ESCAPE '\\'")
        ]
        return {
            "master": sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()),
            "revision": conn.execute("SELECT version_num FROM alembic_version").fetchall(),
            "user_version": conn.execute("PRAGMA user_version").fetchone()[0],
            "fts_config": sorted(shadow_config),
            "rows": {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("source", "doc", "pos", "card", "card_kw", "term")
            },
        }
    finally:
        conn.close()


def test_a_fresh_index_file_is_what_the_migrations_make(tmp_path: Path) -> None:
    """A build creates its schema from schema_sql.py, not Alembic: the file is the migrated one, and Alembic agrees."""
    from memstore.index.db import _create_schema
    from memstore.index.migrate import upgrade_to_head

    migrated, created = tmp_path / "migrated.sqlite3", tmp_path / "created.sqlite3"
    upgrade_to_head(migrated)
    conn = sqlite3.connect(created, isolation_level=None)
    _create_schema(conn)
    conn.close()
    assert _schema_facts(created) == _schema_facts(migrated)
    upgrade_to_head(created)  # already at head: Alembic runs nothing
    assert _schema_facts(created) == _schema_facts(migrated)


def test_a_first_build_does_not_import_alembic(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("the entry about caching", tags=["misc"])
    code = (
        "import json, sys\n"
        "from memstore.catalog import MemoryCatalog\n"
        "hits = MemoryCatalog(sys.argv[1]).search('caching')\n"
        "print(json.dumps([len(hits), 'alembic' in sys.modules, 'sqlalchemy' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [1, False, False]
    assert index_path(tmp_path).exists()


def test_a_full_build_proves_the_file_on_a_second_thread_while_fts5_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole-file proof overlaps the word index's rebuild; a catch-up still proves inline."""
    import threading

    from memstore.index.source import SourceState

    threads: list[str] = []
    real = SourceState.of_file.__func__  # type: ignore[attr-defined]

    def of_file(cls: type[SourceState], *args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(SourceState, "of_file", classmethod(of_file))
    catalog = filled(tmp_path, 20)
    assert threads and threads[0].startswith("memstore-build-proof")
    catalog.add("one more entry about caching")
    assert len(catalog.search("caching", limit=50)) == 21
    assert threads[-1] == threading.current_thread().name
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert catalog.search("entry number", limit=50) == scan.search("entry number", limit=50)
