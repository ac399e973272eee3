"""A frozen server cannot hang a read: the client-side deadline of memstore.index.pg_deadline.

The module's own cluster (``pg_own_cluster``; the session's is never disturbed) is
frozen with SIGSTOP, postmaster and backends, after a connection is open and pooled:
nothing answers, and the server enforces none of its timeouts.  A store read must
then return the scan's answer with one warning, a team-wide search must raise the
typed error, and the CLI must print one line and exit 1.  A TCP partition (a
forwarder that stops passing bytes) must end a read the same way.  Reads run in a
thread joined with a generous bound: a hang fails the test, speed is never asserted.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pg_server
import pytest
from bounded import run_bounded
from tcp_forward import TcpForward

from memstore import index_policy
from memstore.catalog import MemoryCatalog
from memstore.errors import IndexServerError, InvalidArgumentError
from memstore.index.pg.conn import raw_connection
from memstore.index.pg_connect import create_engine
from memstore.index.pg_deadline import READ_DEADLINE_ENV, read_deadline, seconds_setting
from memstore.team_index import TeamIndex

DEADLINE = 2.0
BOUND = 20.0
"""How long a thread may take before the read counts as hung (the deadline plus a wide margin)."""


LOCK_WAITS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memstore' AND wait_event_type = 'Lock'"
"""Polled outside a transaction: inside one, pg_stat_activity is one snapshot."""
CLI_DEADLINE = 5.0
"""Below the 10 s lock_timeout, so only the freeze can end the CLI's lock wait: by this deadline."""


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture(scope="module")
def urls(pg_own_cluster: pg_server.Cluster) -> pg_server.PgUrls:
    return pg_server.create_database(pg_own_cluster, "memstore_frozen")


def test_a_store_read_answers_from_the_scan_then_uses_the_server_again(
    tmp_path: Path,
    urls: pg_server.PgUrls,
    pg_own_cluster: pg_server.Cluster,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(READ_DEADLINE_ENV, str(DEADLINE))
    catalog = MemoryCatalog(tmp_path, index_url=urls.writer, source_name="frozen/memory.jsonl")
    for text in ("alpha beta", "alpha gamma", "beta delta", "alpha"):
        catalog.add(text, tags=["x"])
    scan = MemoryCatalog(tmp_path, use_index=False)
    expected = scan.search("alpha")
    with caplog.at_level(logging.WARNING):
        assert catalog.search("alpha") == expected  # the server answers; its connection stays pooled
        assert warnings_of(caplog) == []
        with pg_server.frozen(pg_own_cluster):
            found = run_bounded(catalog.search, "alpha", timeout=BOUND)
            # Backing off: the next read does not ask the frozen server.
            assert run_bounded(catalog.list, tags=["x"], timeout=BOUND) == scan.list(tags=["x"])
        assert found == expected
        warnings = warnings_of(caplog)
        assert len(warnings) == 1 and "\n" not in warnings[0], warnings
        assert "the local files" in warnings[0] and f"no answer from the server within {DEADLINE:g} s" in warnings[0]
        assert "Traceback" not in caplog.text
        # After the back-off the shared index is asked again, and answers.
        later = time.monotonic() + index_policy.RETRY_SECONDS + 1
        monkeypatch.setattr(index_policy, "clock", lambda: later)
        assert catalog.search("alpha") == expected
        assert catalog._shared is not None and catalog._shared.error is None
        assert len(warnings_of(caplog)) == 1


def test_a_team_search_raises_the_typed_error(
    tmp_path: Path, urls: pg_server.PgUrls, pg_own_cluster: pg_server.Cluster
) -> None:
    root = tmp_path / "solo"
    MemoryCatalog(root).add("a frozen lake")
    with TeamIndex(urls.writer) as writer:
        writer.reindex({"solo": root})
    with TeamIndex(urls.reader, read_deadline_s=DEADLINE) as team:
        assert [hit.source for hit in team.search("lake").hits] == ["solo"]
        with pg_server.frozen(pg_own_cluster), pytest.raises(IndexServerError) as error:
            run_bounded(team.search, "lake", timeout=BOUND)
        assert "\n" not in str(error.value) and f"within {DEADLINE:g} s" in str(error.value)
        # The silent connection was discarded, not pooled: the next search is answered.
        assert [hit.source for hit in team.search("lake").hits] == ["solo"]
    with pytest.raises(InvalidArgumentError):
        TeamIndex(urls.reader, read_deadline_s=-1)


def test_the_cli_prints_one_line_and_exits_1(
    tmp_path: Path, urls: pg_server.PgUrls, pg_own_cluster: pg_server.Cluster
) -> None:
    root = tmp_path / "cli"
    MemoryCatalog(root).add("a frozen pond")
    with TeamIndex(urls.writer) as writer:
        writer.reindex({"cli": root})
    # A CLI process connects afresh; to freeze the server after that, its search is held on a
    # lock first (the server would end that wait after lock_timeout, were it not frozen).
    holder, watcher = pg_server.connect(urls.admin), pg_server.connect(urls.admin)
    try:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE team_doc IN ACCESS EXCLUSIVE MODE")
        env = {**os.environ, READ_DEADLINE_ENV: str(CLI_DEADLINE)}
        argv = [sys.executable, "-m", "memstore", "search", "--root", str(root), "--index-url", urls.reader, "pond"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            give_up = time.monotonic() + BOUND
            while watcher.execute(LOCK_WAITS).fetchone() == (0,):
                assert proc.poll() is None and time.monotonic() < give_up, proc.communicate()
                time.sleep(0.05)
            with pg_server.frozen(pg_own_cluster):
                out, err = proc.communicate(timeout=BOUND)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        watcher.close()
    assert proc.returncode == 1, (out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"no answer from the server within {CLI_DEADLINE:g} s" in err and out == ""


@pytest.fixture
def partition(pg_own_cluster: pg_server.Cluster) -> Iterator[TcpForward]:
    forward = TcpForward(Path(pg_own_cluster.socket_dir) / pg_server.SOCKET_NAME)
    try:
        yield forward
    finally:
        forward.close()


def test_a_tcp_connection_has_keepalives_and_a_partition_ends_the_read(
    urls: pg_server.PgUrls, partition: TcpForward
) -> None:
    engine = create_engine(f"postgresql://reader@127.0.0.1:{partition.port}/{urls.database}", read_deadline_s=DEADLINE)
    try:
        with raw_connection(engine) as conn, socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            got = (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
            )
        assert got == (1, 15, 5, 3, 30_000)
        partition.cut()

        def read() -> object:
            with raw_connection(engine) as conn:
                return conn.execute("SELECT 1").fetchone()

        with pytest.raises(IndexServerError, match=f"within {DEADLINE:g} s"):
            run_bounded(read, timeout=BOUND)
    finally:
        engine.dispose()


def test_a_read_deadline_inside_another_keeps_the_earlier_end() -> None:
    from memstore.index import pg_deadline

    assert pg_deadline._READ.get() is None
    with read_deadline(1.0):
        outer = pg_deadline._READ.get()
        with read_deadline(60.0):
            assert pg_deadline._READ.get() == outer
        with read_deadline(0.5):
            inner = pg_deadline._READ.get()
            assert inner is not None and outer is not None and inner[0] < outer[0] and inner[1] == 0.5
        with read_deadline(None), read_deadline(0):
            assert pg_deadline._READ.get() == outer
    assert pg_deadline._READ.get() is None


@pytest.mark.parametrize("text", ["soon", "-1", "inf", "nan"])
def test_a_bad_setting_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(READ_DEADLINE_ENV, text)
    with pytest.raises(InvalidArgumentError, match=READ_DEADLINE_ENV):
        seconds_setting(READ_DEADLINE_ENV, 35.0)
    with pytest.raises(InvalidArgumentError, match=READ_DEADLINE_ENV):
        create_engine("postgresql://reader@127.0.0.1:1/db")


def test_the_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstore.index.pg_deadline import default_load_wait, default_read_deadline

    monkeypatch.delenv(READ_DEADLINE_ENV, raising=False)
    assert default_read_deadline(30_000) == 35.0 and default_read_deadline(0) == 0.0
    monkeypatch.setenv(READ_DEADLINE_ENV, " 2.5 ")
    assert default_read_deadline(30_000) == 2.5
    assert default_read_deadline(0) == 0.0  # a load engine: no deadline for the whole load
    assert default_load_wait() == 600.0
