"""Connecting to the PostgreSQL index: settings, the two roles, and typed one-line failures."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pg_server
import pytest
import sqlalchemy as sa

from memstore.errors import IndexAuthError, IndexServerError, IndexUnavailableError, IndexUrlError, MemstoreError
from memstore.index.pg_connect import (
    APPLICATION_NAME,
    check_server,
    connect,
    create_engine,
    ensure_trgm,
    snapshot,
    trgm_state,
)
from memstore.index_url import parse_index_url


@pytest.fixture
def writer(pg_database: pg_server.PgUrls) -> Iterator[sa.Engine]:
    engine = create_engine(pg_database.writer)
    yield engine
    engine.dispose()


@pytest.fixture
def reader(pg_database: pg_server.PgUrls) -> Iterator[sa.Engine]:
    engine = create_engine(pg_database.reader)
    yield engine
    engine.dispose()


def test_a_plain_url_connects_through_psycopg_with_memstore_settings(writer: sa.Engine) -> None:
    assert writer.dialect.driver == "psycopg"
    with connect(writer) as conn:
        got = conn.execute(
            sa.text(
                "SELECT current_setting('application_name'), current_setting('statement_timeout'),"
                " current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('plan_cache_mode')"
            )
        ).one()
    assert tuple(got) == (APPLICATION_NAME, "30s", "10s", "5min", "force_custom_plan")


@pytest.mark.parametrize("form", ["query", "encoded host", "postgres scheme"])
def test_every_spelling_of_a_socket_url_reaches_the_server(pg_cluster: pg_server.Cluster, form: str) -> None:
    folder = pg_cluster.socket_dir
    url = {
        "query": f"postgresql://reader@/{pg_server.DATABASE}?host={folder}",
        "encoded host": f"postgresql://reader@{urllib.parse.quote(folder, safe='')}/{pg_server.DATABASE}",
        "postgres scheme": f"postgres://reader@/{pg_server.DATABASE}?host={folder}",
    }[form]
    engine = create_engine(url)
    assert check_server(engine).role == "reader"
    engine.dispose()


def test_settings_named_in_the_url_win(pg_database: pg_server.PgUrls) -> None:
    url = pg_database.writer + "&application_name=indexer-7&options=-c%20statement_timeout%3D1234"
    engine = create_engine(url, lock_timeout_ms=2500)
    with connect(engine) as conn:
        got = conn.execute(
            sa.text(
                "SELECT current_setting('application_name'), current_setting('statement_timeout'),"
                " current_setting('lock_timeout')"
            )
        ).one()
    engine.dispose()
    assert tuple(got) == ("indexer-7", "1234ms", "2500ms")


def test_a_statement_past_its_timeout_is_cancelled(pg_database: pg_server.PgUrls) -> None:
    engine = create_engine(pg_database.reader, statement_timeout_ms=100)
    with connect(engine) as conn, pytest.raises(sa.exc.OperationalError, match="statement timeout"):
        conn.execute(sa.text("SELECT pg_sleep(5)"))
    engine.dispose()


def test_the_writer_installs_pg_trgm_and_owns_what_it_creates(writer: sa.Engine) -> None:
    info = check_server(writer)
    assert (info.role, info.read_only, info.server_version >= 150000) == ("writer", False, True)
    assert info.trgm == "available"
    with connect(writer) as conn, conn.begin():
        ensure_trgm(conn)
        ensure_trgm(conn)  # idempotent
        assert trgm_state(conn) == "installed"
        conn.execute(sa.text("CREATE TABLE scratch (id bigint PRIMARY KEY, c text)"))
        conn.execute(sa.text("CREATE INDEX scratch_trgm ON scratch USING gin (c gin_trgm_ops)"))
        conn.execute(sa.text("INSERT INTO scratch VALUES (1, 'payment retries')"))
    assert check_server(writer).trgm == "installed"


def test_the_reader_reads_tables_created_later_and_cannot_write(writer: sa.Engine, reader: sa.Engine) -> None:
    with connect(writer) as conn, conn.begin():
        conn.execute(sa.text("CREATE TABLE scratch (id bigint PRIMARY KEY, c text)"))
        conn.execute(sa.text("INSERT INTO scratch VALUES (1, 'payment retries')"))
    info = check_server(reader)
    assert (info.role, info.read_only) == ("reader", True)
    with connect(reader) as conn:
        assert conn.execute(sa.text("SELECT c FROM scratch")).scalar_one() == "payment retries"
    refused = [
        "INSERT INTO scratch VALUES (2, 'x')",
        "UPDATE scratch SET c = 'x'",
        "DELETE FROM scratch",
        "TRUNCATE scratch",
        "CREATE TABLE mine (x int)",
        "CREATE TEMPORARY TABLE mine (x int)",
        "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        "DROP TABLE scratch",
    ]
    for statement in refused:
        with connect(reader) as conn:
            # The role's read-only default is only a default: the grants must refuse on their own.
            # (Per transaction: a session-level SET would stay on the pooled connection.)
            conn.execute(sa.text("SET TRANSACTION READ WRITE"))
            with pytest.raises(sa.exc.ProgrammingError, match=r"permission denied|must be owner"):
                conn.execute(sa.text(statement))
    with connect(reader) as conn, pytest.raises(sa.exc.InternalError, match="read-only transaction"):
        conn.execute(sa.text("INSERT INTO scratch VALUES (2, 'x')"))
    with connect(writer) as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM scratch")).scalar_one() == 1


def test_a_snapshot_sees_one_state_while_a_writer_commits(writer: sa.Engine, reader: sa.Engine) -> None:
    with connect(writer) as conn, conn.begin():
        conn.execute(sa.text("CREATE TABLE scratch (id bigint PRIMARY KEY)"))
        conn.execute(sa.text("INSERT INTO scratch VALUES (1)"))
    with snapshot(reader) as read:
        assert read.execute(sa.text("SELECT count(*) FROM scratch")).scalar_one() == 1
        with connect(writer) as conn, conn.begin():
            conn.execute(sa.text("INSERT INTO scratch VALUES (2)"))
        assert read.execute(sa.text("SELECT count(*) FROM scratch")).scalar_one() == 1
        assert read.execute(sa.text("SHOW transaction_isolation")).scalar_one() == "repeatable read"
        assert read.execute(sa.text("SHOW transaction_read_only")).scalar_one() == "on"
    with snapshot(reader) as read:
        assert read.execute(sa.text("SELECT count(*) FROM scratch")).scalar_one() == 2


def _fails_fast(engine: sa.Engine, error: type[Exception]) -> str:
    started = time.monotonic()
    with pytest.raises(error) as caught:
        check_server(engine)
    engine.dispose()
    message = str(caught.value)
    assert time.monotonic() - started < 30, "a typed error, not a hang"
    assert "\n" not in message and "Traceback" not in message
    assert isinstance(caught.value, IndexUnavailableError) and isinstance(caught.value, MemstoreError)
    return message


def test_a_server_that_is_not_there_is_a_typed_error_at_once(pg_cluster: pg_server.Cluster, tmp_path: object) -> None:
    url = "postgresql://writer:hunter2-Secret@/memstore_test?host=/nonexistent/socket/dir"
    message = _fails_fast(create_engine(url), IndexServerError)
    assert message.startswith("PostgreSQL index postgresql+psycopg://writer:***@/memstore_test?host=/nonexistent/")
    assert "unreachable" in message and "No such file or directory" in message
    assert "hunter2-Secret" not in message


def test_a_refused_tcp_port_is_a_typed_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    message = _fails_fast(create_engine(f"postgresql://writer@127.0.0.1:{port}/db"), IndexServerError)
    assert "Connection refused" in message


def test_a_server_that_never_answers_times_out() -> None:
    """A listener that accepts and says nothing: the connect timeout, not a hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        engine = create_engine(f"postgresql://writer@127.0.0.1:{listener.getsockname()[1]}/db", connect_timeout_s=2)
        message = _fails_fast(engine, IndexServerError)
        assert "no answer within the connect timeout" in message
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize(
    ("role", "database", "words"),
    [
        (f"{pg_server.LOCKED}:wrong-Pa55word", None, "password authentication failed"),
        (pg_server.LOCKED, None, "no password supplied"),
        ("ghost", None, 'role "ghost" does not exist'),
        (pg_server.WRITER, "no_such_db", 'database "no_such_db" does not exist'),
        (pg_server.READER, "postgres", "permission denied for database"),
    ],
)
def test_a_refused_login_is_an_auth_error(
    pg_cluster: pg_server.Cluster, role: str, database: str | None, words: str
) -> None:
    url = f"postgresql://{role}@/{database or pg_server.DATABASE}?host={pg_cluster.socket_dir}"
    message = _fails_fast(create_engine(url), IndexAuthError)
    assert words in message
    assert "refused" in message
    assert "wrong-Pa55word" not in message


def test_the_right_password_logs_in(pg_cluster: pg_server.Cluster) -> None:
    url = f"postgresql://{pg_server.LOCKED}:{pg_server.LOCKED_PASSWORD}@/{pg_server.DATABASE}?host={pg_cluster.socket_dir}"
    engine = create_engine(url)
    info = check_server(engine, need_trgm=False)
    engine.dispose()
    assert info.role == pg_server.LOCKED
    assert pg_server.LOCKED_PASSWORD not in info.url and pg_server.LOCKED_PASSWORD not in repr(info)


def test_a_password_given_as_a_parameter_is_hidden_too(pg_cluster: pg_server.Cluster) -> None:
    url = f"postgres://{pg_server.LOCKED}@/{pg_server.DATABASE}?host={pg_cluster.socket_dir}&password=wrong-Pa55word"
    message = _fails_fast(create_engine(parse_index_url(url)), IndexAuthError)
    assert "wrong-Pa55word" not in message
    assert "password=***" in message


def test_an_unusable_url_is_refused_before_connecting() -> None:
    with pytest.raises(IndexUrlError):
        create_engine("mysql://u@h/db")
