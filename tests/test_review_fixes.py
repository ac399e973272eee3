"""Adversarial review of 73958e9, aaa8eb9 and d689149: each test here fails on d689149."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pg_server
import pytest
from test_index_pg_deadline import LOCK_WAITS, warnings_of
from test_review_deadline import _big_source

from memstore.catalog import MemoryCatalog
from memstore.index.pg_deadline import READ_DEADLINE_ENV


@pytest.fixture(scope="module")
def urls(pg_own_cluster: pg_server.Cluster) -> pg_server.PgUrls:
    return pg_server.create_database(pg_own_cluster, "memstore_review_fixes")


# ----------------------------------------------------------------------------- defect A
# aaa8eb9 caps every wait of a store's catch-up at the *read* deadline.  A catch-up's single
# legitimate statement (the COPY of a big first load, the index work it triggers) that takes
# longer than that is cut mid-statement, rolled back, and retried by the next read, which is
# cut again: the shared index of a big enough file is never built from reads, and every read
# pays the deadline before its fallback.  Here the deadline is made small instead of the file
# huge (35 s by default; one wait of a multi-million-entry load exceeds it).


def test_a_catch_up_whose_one_statement_outlasts_the_read_deadline_still_completes(
    tmp_path: Path, urls: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(READ_DEADLINE_ENV, "0.2")
    root = tmp_path / "big"
    _big_source(root, 60_000)
    expected = MemoryCatalog(root, use_index=False).search("alpha", limit=5)
    fresh = urls.writer + ("&" if "?" in urls.writer else "?") + "connect_timeout=5"  # an engine of its own
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            catalog = MemoryCatalog(root, index_url=fresh, source_name="review/bigcatchup.jsonl")
            assert catalog.search("alpha", limit=5) == expected
    admin = pg_server.connect(urls.admin)
    try:
        row = admin.execute(
            "SELECT count(*) FROM team_doc d JOIN team_source s ON s.sid = d.sid"
            " WHERE s.name = 'review/bigcatchup.jsonl'"
        ).fetchone()
    finally:
        admin.close()
    assert row is not None and row[0] == 60_001, (row, warnings_of(caplog))


# ----------------------------------------------------------------------------- defect B
# aaa8eb9 sets a load engine's tcp_user_timeout to int(wait_limit * 1000).  libpq takes an int:
# a load wait above 2147483.647 s ($MEMSTORE_PG_LOAD_WAIT=1e7 or 3000000, "effectively no
# limit") is an invalid connection option, so every load connection (reindex, every catch-up)
# fails, while a read engine, whose value is the fixed 30 s, works.  0 ("no limit") silently
# drops the 30 s dead-peer bound the load had before.


@pytest.mark.parametrize("wait_s", [3_000_000.0, 1e7])
def test_a_long_load_wait_still_connects_over_tcp(
    urls: pg_server.PgUrls, pg_own_cluster: pg_server.Cluster, wait_s: float
) -> None:
    import sqlalchemy as sa
    from test_review_deadline import stalling_proxy

    from memstore.index.pg_connect import create_engine

    # TCP options apply only to TCP connections: a forwarding port that never stalls.
    proxy = stalling_proxy(Path(pg_own_cluster.socket_dir) / pg_server.SOCKET_NAME, after=2**62)
    engine = create_engine(
        f"postgresql://writer@127.0.0.1:{proxy.port}/{urls.database}", statement_timeout_ms=0, load_wait_s=wait_s
    )
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    finally:
        engine.dispose()
        proxy.close()


# ----------------------------------------------------------------------------- defect C
# d689149's ALEMBIC_LOCK is held across the whole PostgreSQL upgrade, i.e. across waits for a
# remote server (a lock wait up to lock_timeout, a frozen server up to the load wait, 600 s).
# Every local SQLite index creation/migration in the process (another project's first build in
# an MCP server, a watch) then waits for that server: a PostgreSQL problem stalls SQLite-only
# work.  No deadlock (the SQLite side never waits for PostgreSQL), but an unbounded coupling.


SQLITE_UPGRADE_BOUND = 5.0
"""The upgrade waits out at most one short lock wait (1 s) and runs (0.1 s); the defect, the
migration's whole 10 s lock_timeout.  Between the two, with room for a loaded machine."""


def test_a_sqlite_upgrade_does_not_wait_for_a_postgresql_upgrade_stuck_on_its_server(
    tmp_path: Path, pg_own_cluster: pg_server.Cluster
) -> None:
    import threading

    from memstore.index.migrate import ALEMBIC_LOCK, upgrade_to_head
    from memstore.index.pg.migrate import upgrade_team
    from memstore.index.pg_connect import create_engine

    fresh = pg_server.create_database(pg_own_cluster, "memstore_review_alembic")
    owner = pg_server.connect(fresh.writer)
    owner.execute("CREATE TABLE alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY)")
    owner.commit()
    holder = pg_server.connect(fresh.writer)
    holder.execute("BEGIN")
    holder.execute("LOCK TABLE alembic_version IN SHARE MODE")  # Alembic's stamp (an INSERT) waits
    engine = create_engine(fresh.writer, statement_timeout_ms=0)
    outcome: dict[str, object] = {}

    def team() -> None:
        try:
            outcome["team"] = upgrade_team(engine)
        except Exception as exc:
            outcome["team"] = exc

    migrating = threading.Thread(target=team, daemon=True)
    migrating.start()
    watcher = pg_server.connect(fresh.admin)
    try:
        # Polled, not a fixed sleep: on a loaded machine Alembic's DDL may not have reached the stamp yet.
        give_up = time.monotonic() + 10
        while not (ALEMBIC_LOCK.locked() and watcher.execute(LOCK_WAITS).fetchone() != (0,)):
            assert migrating.is_alive() and time.monotonic() < give_up, outcome
            time.sleep(0.01)
        # The team migration is now waiting for the server, holding ALEMBIC_LOCK.
        start = time.monotonic()
        upgrade_to_head(tmp_path / "index.db")
        took = time.monotonic() - start
    finally:
        watcher.close()
        holder.rollback()
        holder.close()
        migrating.join(30)
        owner.close()
        engine.dispose()
    assert took < SQLITE_UPGRADE_BOUND, f"a local SQLite upgrade waited {took:.1f} s for a PostgreSQL server"
