"""Shared fixtures: no test may touch the real home directory; a PostgreSQL server on demand."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pg_server
import pytest
from hypothesis import settings

# Tests never assert wall-clock time: hypothesis's per-example deadline is one, and it fails
# on a loaded machine (a first call that imports or builds an index).  Examples stay bounded
# by max_examples.
settings.register_profile("memstore", deadline=None)
settings.load_profile("memstore")


def _point_home_at(mp: pytest.MonkeyPatch, home: Path) -> None:
    mp.setenv("HOME", str(home))
    mp.setattr(Path, "home", classmethod(lambda cls: cls(home)))


@pytest.fixture(autouse=True, scope="session")
def _session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test runs with HOME in a temp dir (session-scoped, so hypothesis tests may use it)."""
    home = tmp_path_factory.mktemp("session-home")
    with pytest.MonkeyPatch.context() as mp:
        _point_home_at(mp, home)
        yield home


@pytest.fixture
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty home directory for this test: ``Path.home()`` and ``$HOME`` point at it."""
    path = tmp_path_factory.mktemp("home")
    _point_home_at(monkeypatch, path)
    return path


# ----------------------------------------------------------------------------- PostgreSQL
# One throwaway cluster per session (tests/pg_server.py), started on first use.  Where no
# server can be started the tests that need it are skipped with the reason; with CI=true
# they fail instead, so CI can never pass by skipping them.

PG_FIXTURES = frozenset({"pg_cluster", "pg_urls", "pg_writer_url", "pg_reader_url", "pg_database", "pg_own_cluster"})


def _pg_unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a PostgreSQL server and none could be started: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a PostgreSQL fixture carries the ``pg`` marker (``-m pg`` / ``-m 'not pg'``)."""
    for item in items:
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("pg") is None:
            item.add_marker(pytest.mark.pg)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg_server.Cluster]:
    """The running server: ``socket_dir``, ``url(role, database)``, ``urls(database)``, ``stop()``."""
    try:
        cluster: pg_server.Cluster | None = pg_server.start_cluster()
    except pg_server.ClusterUnavailable as exc:
        cluster, reason = None, str(exc)
    if cluster is None:
        _pg_unavailable(reason)  # outside the except block: one message, no chained traceback
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def pg_own_cluster() -> Iterator[pg_server.Cluster]:
    """A server of this test module's own, for tests that stop or freeze it (the session's is not disturbed)."""
    try:
        cluster: pg_server.Cluster | None = pg_server.start_cluster()
    except pg_server.ClusterUnavailable as exc:
        cluster, reason = None, str(exc)
    if cluster is None:
        _pg_unavailable(reason)
    try:
        yield cluster
    finally:
        pg_server.thaw(cluster)
        cluster.stop()


@pytest.fixture(autouse=True)
def _pg_marked(request: pytest.FixtureRequest) -> None:
    """A test marked ``pg`` gets the server (or its skip/failure) even if it names no fixture."""
    if request.node.get_closest_marker("pg") is not None and "pg_own_cluster" not in request.fixturenames:
        request.getfixturevalue("pg_cluster")


@pytest.fixture(scope="session")
def pg_urls(pg_cluster: pg_server.Cluster) -> pg_server.PgUrls:
    """The session database ``memstore_test``: URLs for the writer, the reader and the superuser.

    Shared by every test of the session: a test that needs an empty schema takes ``pg_database``.
    """
    return pg_cluster.urls(pg_server.DATABASE)


@pytest.fixture(scope="session")
def pg_writer_url(pg_urls: pg_server.PgUrls) -> str:
    """``postgresql://writer@/memstore_test?host=<socket dir>``: owns the schema, may CREATE EXTENSION pg_trgm."""
    return pg_urls.writer


@pytest.fixture(scope="session")
def pg_reader_url(pg_urls: pg_server.PgUrls) -> str:
    """``postgresql://reader@/memstore_test?host=<socket dir>``: CONNECT, USAGE and SELECT only."""
    return pg_urls.reader


@pytest.fixture
def pg_database(pg_cluster: pg_server.Cluster) -> Iterator[pg_server.PgUrls]:
    """A fresh, empty database for this test only (same roles and grants), dropped afterwards."""
    name = f"t_{os.getpid()}_{next(_pg_counter)}"
    urls = pg_server.create_database(pg_cluster, name)
    try:
        yield urls
    finally:
        pg_server.drop_database(pg_cluster, name)


_pg_counter = itertools.count(1)
