"""Review attacks on 83142f6 (one-statement rewrite follow-up, FTS5 vocabulary counts) and
2dff2cb (the append chain read once; 14-statement team catch-up)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pg_server
import psycopg
import pytest
from spec_reference import spec_search
from test_index_differential import reference
from test_team_index_differential import entry_line

from memstore.catalog import MemoryCatalog
from memstore.errors import MemstoreError
from memstore.index.pg import loader as pg_loader
from memstore.index.pg.conn import LOCK_SPACE
from memstore.team_index import TeamIndex

TEXTS = ['NEAR(a b) "x" * AND OR NOT', "nul\x00byte", "caf\u00e9 \u0130stanbul \u00df", "emoji \U0001f600x",
         "a" * 9000, "b" * 20000 + " tail", "x.y-z:w", "\u3000ideo\u00a0nb", "\u01c5ungla", "K\u212aelvin",
         "\ufb01 ligature", "tab\there", "\ud800lone"]  # fmt: skip


def _line(i: int, branch: str) -> str:
    text = TEXTS[i % len(TEXTS)]
    return json.dumps({"memory_id": f"m{i}", "content": f"{text} e{i} word{i % 7}", "tags": ["t", text[:50]],
                       "created_at": "2026-01-01", "branch_name": branch, "run_id": None})  # fmt: skip


def test_sqlite_rewrite_of_hostile_text_equals_a_scan(tmp_path: Path) -> None:
    """FTS5 syntax, NUL, long runs, lone surrogates, non-ASCII: delete_by_branch then check_index."""
    catalog = MemoryCatalog(tmp_path)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_text("".join(_line(i, "gone" if i % 3 else "kept") + "\n" for i in range(400)))
    assert catalog.search("word1", limit=5)
    assert catalog.delete_by_branch("gone") == 266
    assert catalog.check_index().equal
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for query in ("word1", "caf\u00e9", "NEAR", "ideo", "tail", "\U0001f600x"):
        assert catalog.search(query, limit=1000) == scan.search(query, limit=1000), query


# --------------------------------------------------------------------------- PostgreSQL


def _write(root: Path, lines: list[bytes], *, append: bool) -> None:
    path = root / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab" if append else "wb") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))


def _held_advisory_locks(admin: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(admin, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, classid, objid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s::oid",
            (LOCK_SPACE & 0xFFFFFFFF,),
        ).fetchall()


def _locks_released(admin: str) -> bool:
    """No session holds a source lock, within the time the server takes to see a killed client."""
    return pg_server.eventually(lambda: not _held_advisory_locks(admin))


@pytest.mark.pg
@pytest.mark.parametrize("name", ["o'brien\\x {name} %s", "\u00e9quipe/m\u00e9moire"])
def test_team_catch_up_releases_the_source_lock(tmp_path: Path, pg_database: pg_server.PgUrls, name: str) -> None:
    """Lock taken by a literal, released by a parameter: no session keeps the source's lock."""
    team = TeamIndex(pg_database.writer)
    try:
        _write(tmp_path, [entry_line(f"word{n}", memory_id=f"m{n}") for n in range(5)], append=False)
        team.reindex({name: tmp_path})
        _write(tmp_path, [entry_line("later", memory_id="m9")], append=True)
        report = team.reindex({name: tmp_path})
        assert report.sources[0].action == "appended"
        assert _held_advisory_locks(pg_database.admin) == []  # the pooled connection holds none
    finally:
        team.close()


@pytest.mark.pg
def test_team_lock_timeout_leaves_a_usable_pool(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-statement lock times out inside its BEGIN: the connection must come back clean."""
    team = TeamIndex(pg_database.writer)
    try:
        _write(tmp_path, [entry_line("word", memory_id="m1")], append=False)
        team.reindex({"s": tmp_path})
        monkeypatch.setattr(pg_loader, "SOURCE_LOCK_TIMEOUT", "300ms")
        with psycopg.connect(pg_database.admin, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_SPACE, "s"))
            _write(tmp_path, [entry_line("more", memory_id="m2")], append=True)
            with pytest.raises(Exception, match="lock"):
                team.reindex({"s": tmp_path})
        # Closing ``other`` does not release its lock at once: its backend must exit first.
        assert _locks_released(pg_database.admin), _held_advisory_locks(pg_database.admin)
        report = team.reindex({"s": tmp_path})
        assert report.sources[0].action == "appended"
        assert _held_advisory_locks(pg_database.admin) == []
    finally:
        team.close()


def _same_source_indexer(url: str, root: str, seconds: float, queue: Any) -> None:
    errors: list[str] = []
    team = TeamIndex(url)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                team.reindex({"shared": root})
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        team.close()
        queue.put(errors)


@pytest.mark.pg
def test_two_indexers_of_one_source_with_appends(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    """Two processes catch the same source up while it grows: no error, rows equal the file."""
    root = tmp_path / "r"
    _write(root, [entry_line(f"every n{n}", memory_id=f"m{n}") for n in range(50)], append=False)
    TeamIndex(pg_database.writer).reindex({"shared": root})
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_same_source_indexer, args=(pg_database.writer, str(root), 6.0, queue)) for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    catalog = MemoryCatalog(root, use_index=False)
    n = 50
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        catalog.add(f"every n{n}")
        n += 1
        time.sleep(0.02)
    errors = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert errors == [[], []]
    team = TeamIndex(pg_database.writer)
    try:
        team.reindex({"shared": root})
        reader = TeamIndex(pg_database.reader)
        got = reader.search("every", limit=100000, sources=["shared"])
        union = [entry for _order, entry in reference(catalog.path)]
        assert [hit.entry for hit in got.hits] == spec_search(union, "every", 100000)
        reader.close()
    finally:
        team.close()


def _same_source_searcher(url: str, seconds: float, queue: Any) -> None:
    errors: list[str] = []
    team = TeamIndex(url)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                got = team.search("every", limit=100000, sources=["shared"])
                ids = [hit.entry.memory_id for hit in got.hits]
                if len(ids) != len(set(ids)):
                    errors.append(f"duplicates: {len(ids) - len(set(ids))}")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        team.close()
        queue.put(errors)


@pytest.mark.pg
@pytest.mark.parametrize("big", [False, True])
def test_two_indexers_of_one_source_with_rewrites(tmp_path: Path, pg_database: pg_server.PgUrls, big: bool) -> None:
    """Appends and rewrites (delete_by_branch: a new inode) under two indexers and a searcher."""
    root = tmp_path / "r"
    start = 3000 if big else 50  # big: more than IN_PLACE_ROWS, so a rewrite loads a new partition
    catalog = MemoryCatalog(root, use_index=False)
    _write(root, [json.dumps({"memory_id": f"m{n}", "content": f"every n{n}", "tags": [], "created_at": "2026-01-01",
                              "branch_name": f"b{n % 4}"}).encode() for n in range(start)], append=False)  # fmt: skip
    TeamIndex(pg_database.writer).reindex({"shared": root})
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_same_source_indexer, args=(pg_database.writer, str(root), 8.0, queue)) for _ in range(2)
    ]
    procs.append(ctx.Process(target=_same_source_searcher, args=(pg_database.reader, 8.0, queue)))
    for proc in procs:
        proc.start()
    n = start
    deadline = time.monotonic() + 8.0
    while time.monotonic() < deadline:
        if n % 10 == 0:
            catalog.delete_by_branch(f"b{(n // 10) % 4}")
        catalog.add(f"every n{n}", branch_name=f"b{n % 4}")
        n += 1
        time.sleep(0.03)
    errors = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert errors == [[], [], []]
    team = TeamIndex(pg_database.writer)
    try:
        team.reindex({"shared": root})
        reader = TeamIndex(pg_database.reader)
        got = reader.search("every", limit=100000, sources=["shared"])
        union = [entry for _order, entry in reference(catalog.path)]
        assert [hit.entry for hit in got.hits] == spec_search(union, "every", 100000)
        reader.close()
        with psycopg.connect(pg_database.admin, autocommit=True) as admin:
            retired = admin.execute("SELECT count(*) FROM team_retired").fetchone()
            parts = admin.execute(
                "SELECT count(*) FROM pg_class WHERE relname LIKE 'team_doc_p%%' AND relkind = 'r'"
            ).fetchone()
        assert (retired, parts) == ((0,), (1,))
    finally:
        team.close()


@pytest.mark.pg
@pytest.mark.parametrize("stamps", [["t001_team_index"], ["t000_forged", "t001_team_index"], ["t000_forged"]])
def test_forged_alembic_stamps_give_typed_errors(
    tmp_path: Path, pg_database: pg_server.PgUrls, stamps: list[str]
) -> None:
    """An alembic_version forged (head without the schema, an unknown revision): a typed error, never a crash."""
    from memstore.errors import MemstoreError
    from memstore.index.pg.schema import TEAM_REVISION

    stamps = [TEAM_REVISION if s == "t001_team_index" else s for s in stamps]
    with psycopg.connect(pg_database.admin, autocommit=True) as admin:
        admin.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        admin.execute("GRANT ALL ON alembic_version TO writer")
        for stamp in stamps:
            admin.execute("INSERT INTO alembic_version VALUES (%s)", (stamp,))
    _write(tmp_path, [entry_line("word", memory_id="m1")], append=False)
    team = TeamIndex(pg_database.writer)
    try:
        with pytest.raises(MemstoreError):
            team.reindex({"s": tmp_path})
    finally:
        team.close()


@pytest.mark.pg
def test_source_lock_is_released_when_team_retired_cannot_be_read(
    tmp_path: Path, pg_database: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unlock statement also reads team_retired: when that read fails (here a lock wait on
    team_retired runs past lock_timeout), the error is suppressed and the source's session lock
    is never released: the pooled connection keeps it, and every other indexer of the source waits
    for it (SOURCE_LOCK_TIMEOUT, 900 s) and fails.  Before 2dff2cb the unlock touched no table."""
    from memstore.index.pg.loader import SourceLoader
    from memstore.index.pg.migrate import upgrade_team
    from memstore.index.pg_connect import create_engine

    _write(tmp_path, [entry_line(f"word{n}", memory_id=f"m{n}") for n in range(3)], append=False)
    engine = create_engine(pg_database.writer, statement_timeout_ms=0, lock_timeout_ms=500)
    other_engine = create_engine(pg_database.writer, statement_timeout_ms=0, lock_timeout_ms=500)
    upgrade_team(engine)
    path = tmp_path / ".teaagent" / "memory.jsonl"
    SourceLoader(engine, "src", path).catch_up()
    admin = psycopg.connect(pg_database.admin)
    try:

        def lock_retired(_conn: Any, _sid: int) -> None:
            # Another session holds team_retired (a migration, VACUUM FULL, TRUNCATE, LOCK TABLE ...).
            admin.execute("LOCK TABLE team_retired IN ACCESS EXCLUSIVE MODE")

        _write(tmp_path, [entry_line("more", memory_id="m9")], append=True)
        with contextlib.suppress(MemstoreError):  # a typed error is fine (before 2dff2cb: one)
            SourceLoader(engine, "src", path).catch_up(extra=lock_retired)
        admin.rollback()  # team_retired is free again
        assert _held_advisory_locks(pg_database.admin) == [], "the source lock stayed with a pooled connection"
        monkeypatch.setattr(pg_loader, "SOURCE_LOCK_TIMEOUT", "2s")
        _write(tmp_path, [entry_line("again", memory_id="m10")], append=True)
        SourceLoader(other_engine, "src", path).catch_up()  # another process's indexer of the source
    finally:
        admin.close()
        engine.dispose()
        other_engine.dispose()


def test_in_place_edit_between_the_stat_and_the_chain_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another tool rewrites an indexed line (same size) right after the catch-up's fstat, before
    its one chain read: the answer still equals a scan (the next is_current sees the new ctime)."""
    from memstore.append_chain import read_chain
    from memstore.group_commit import sync_lock_path
    from memstore.index import catalog_index

    catalog = MemoryCatalog(tmp_path)
    for n in range(20):
        catalog.add(f"alpha{n} common")
    assert len(catalog.search("common", limit=100)) == 20
    catalog.add("alpha20 common")
    edited: list[int] = []

    def chain(self):  # type: ignore[no-untyped-def]
        if not edited:
            edited.append(1)
            data = self.source_path.read_bytes()
            with open(self.source_path, "r+b") as handle:  # in place: same inode, same size
                handle.write(data.replace(b"alpha3 ", b"omega3 ", 1))
        return read_chain(sync_lock_path(self.source_path))

    monkeypatch.setattr(catalog_index.CatalogIndex, "append_chain", chain)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for query in ("omega3", "alpha3", "common"):
        assert catalog.search(query, limit=100) == scan.search(query, limit=100), query
    assert edited
    assert catalog.check_index().equal


@pytest.mark.pg
def test_source_lock_is_released_when_team_retired_is_missing(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    """Same cause, no timing: a database stamped at head whose team_retired was dropped (damaged or
    forged schema).  The catch-up succeeds and leaves its session lock with the pooled connection."""
    from memstore.index.pg.loader import SourceLoader
    from memstore.index.pg.migrate import upgrade_team
    from memstore.index.pg_connect import create_engine

    _write(tmp_path, [entry_line(f"word{n}", memory_id=f"m{n}") for n in range(3)], append=False)
    engine = create_engine(pg_database.writer, statement_timeout_ms=0)
    try:
        upgrade_team(engine)
        with psycopg.connect(pg_database.admin, autocommit=True) as admin:
            admin.execute("DROP TABLE team_retired")
        path = tmp_path / ".teaagent" / "memory.jsonl"
        with contextlib.suppress(MemstoreError):  # a typed error is fine; a kept lock is not
            SourceLoader(engine, "src", path).catch_up()
        assert _held_advisory_locks(pg_database.admin) == [], "the source lock stayed with a pooled connection"
    finally:
        engine.dispose()


def _catch_up_once(url: str, root: str, full: bool) -> None:
    TeamIndex(url).reindex({"killed": root}, full=full)


@pytest.mark.pg
def test_indexer_killed_mid_catch_up(tmp_path: Path, pg_database: pg_server.PgUrls) -> None:
    """SIGKILL at several points of a full load and of an append; the next catch-up and searches equal a scan."""
    root = tmp_path / "r"
    _write(root, [entry_line(f"every n{n} w{n % 50}", memory_id=f"m{n}") for n in range(6000)], append=False)
    ctx = multiprocessing.get_context("spawn")
    catalog = MemoryCatalog(root, use_index=False)
    for delay in (0.8, 1.2, 1.6, 2.0, 2.6):
        catalog.add(f"every extra {delay}")
        proc = ctx.Process(target=_catch_up_once, args=(pg_database.writer, str(root), delay > 1.5))
        proc.start()
        time.sleep(delay)
        proc.kill()
        proc.join()
        assert _locks_released(pg_database.admin), _held_advisory_locks(pg_database.admin)
    team = TeamIndex(pg_database.writer)
    reader = TeamIndex(pg_database.reader)
    try:
        team.reindex({"killed": root})
        union = [entry for _order, entry in reference(catalog.path)]
        for query in ("every", "w7", "extra"):
            got = reader.search(query, limit=100000, sources=["killed"])
            assert [hit.entry for hit in got.hits] == spec_search(union, query, 100000), query
    finally:
        team.close()
        reader.close()
