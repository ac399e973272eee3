"""The throwaway PostgreSQL cluster itself: socket only, not root, two roles, cleaned up, strict in CI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pg_server
import pytest

TESTS = Path(__file__).resolve().parent


def test_the_server_listens_on_its_socket_only(pg_cluster: pg_server.Cluster, pg_urls: pg_server.PgUrls) -> None:
    with pg_server.connect(pg_urls.admin) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""
        assert conn.execute("SHOW unix_socket_directories").fetchone()[0] == pg_cluster.socket_dir
        assert Path(conn.execute("SHOW data_directory").fetchone()[0]) == pg_cluster.data
    assert (Path(pg_cluster.socket_dir) / pg_server.SOCKET_NAME).is_socket()


def test_the_server_does_not_run_as_root(pg_cluster: pg_server.Cluster) -> None:
    pid = int((pg_cluster.data / "postmaster.pid").read_text().split()[0])
    owner = os.stat(f"/proc/{pid}").st_uid
    assert owner != 0
    assert owner == os.stat(pg_cluster.data).st_uid
    if os.geteuid() != 0:
        assert owner == os.geteuid()


def test_the_roles_are_who_the_urls_say(pg_writer_url: str, pg_reader_url: str) -> None:
    assert pg_writer_url.startswith("postgresql://writer@/memstore_test?host=/")
    assert pg_reader_url.startswith("postgresql://reader@/memstore_test?host=/")
    for url, role in ((pg_writer_url, "writer"), (pg_reader_url, "reader")):
        with pg_server.connect(url) as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == (role, "memstore_test")


def test_the_database_is_utf8_with_code_point_collation(pg_urls: pg_server.PgUrls) -> None:
    with pg_server.connect(pg_urls.writer) as conn:
        row = conn.execute(
            "SELECT pg_encoding_to_char(encoding), datcollate, datctype"
            " FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        assert row == ("UTF8", "C", "C.UTF-8")
        # C collation orders like Python's str comparison.
        words = ["b", "a", "é", "Z", "ä", "日"]
        got = [r[0] for r in conn.execute("SELECT w FROM unnest(%s::text[]) AS w ORDER BY w", [words])]
        assert got == sorted(words)


def test_a_fresh_database_is_empty_and_its_own(pg_database: pg_server.PgUrls, pg_urls: pg_server.PgUrls) -> None:
    assert pg_database.database != pg_urls.database
    with pg_server.connect(pg_database.writer) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
        conn.execute("CREATE TABLE mine (x int)")
    with pg_server.connect(pg_database.reader) as conn:
        assert conn.execute("SELECT count(*) FROM mine").fetchone()[0] == 0


@pytest.mark.pg
def test_a_marked_test_gets_the_server_without_naming_it() -> None:
    """Also run in a subprocess below, where no server can start."""


def test_a_test_using_a_pg_fixture_carries_the_marker(request: pytest.FixtureRequest, pg_urls: object) -> None:
    assert request.node.get_closest_marker("pg") is not None


def _run_marked_test_without_binaries(ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env[pg_server.BINDIR_ENV] = "/nonexistent/pg/bin"
    if ci is not None:
        env["CI"] = ci
    target = f"{Path(__file__).name}::test_a_marked_test_gets_the_server_without_naming_it"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", target],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_server_the_tests_skip_with_the_reason() -> None:
    result = _run_marked_test_without_binaries(None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "no PostgreSQL server: PostgreSQL server binaries (initdb, pg_ctl) not found in /nonexistent" in (
        result.stdout
    )


def test_in_ci_a_missing_server_fails_instead() -> None:
    result = _run_marked_test_without_binaries("true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout
    assert "CI needs a PostgreSQL server" in result.stdout
    assert "skipped" not in result.stdout


KILLED_CHILD = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import pg_server
cluster = pg_server.start_cluster()
pid = (cluster.data / "postmaster.pid").read_text().split()[0]
print(cluster.root, pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "(Z)" not in Path(f"/proc/{pid}/stat").read_text()


@pytest.mark.slow
@pytest.mark.pg
def test_a_killed_test_process_leaves_no_server_behind() -> None:
    """SIGKILL gives no finalizer a chance: the guard process notices and cleans up."""
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD.format(tests=str(TESTS))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    root_text, pid_text = child.stdout.split()
    root, pid = Path(root_text), int(pid_text)
    deadline = time.monotonic() + 60
    while (root.exists() or _alive(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the server outlived its test process"
    assert not root.exists(), "the cluster's folder outlived its test process"
