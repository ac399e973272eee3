"""Choosing the index from a URL: precedence, accepted spellings, refusals, and no password shown."""

from __future__ import annotations

import pytest

from memstore.errors import IndexUrlError, InvalidArgumentError, MemstoreError
from memstore.index_url import INDEX_URL_ENV, IndexUrl, parse_index_url, redact, resolve_index_url

SOCKET_URL = "postgresql://writer@/memstore_test?host=/tmp/memstore-pg-x"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://user@host/db", "postgresql+psycopg://user@host/db"),
        ("postgres://user@host/db", "postgresql+psycopg://user@host/db"),
        ("postgresql+psycopg://user@host:6543/db", "postgresql+psycopg://user@host:6543/db"),
        ("PostgreSQL://user@host/db", "postgresql+psycopg://user@host/db"),
        (SOCKET_URL, "postgresql+psycopg://writer@/memstore_test?host=/tmp/memstore-pg-x"),
        ("postgresql:///db", "postgresql+psycopg:///db"),
        ("postgresql://u@h/?dbname=team", "postgresql+psycopg://u@h/?dbname=team"),
        ("postgresql://u@[::1]:5432/db", "postgresql+psycopg://u@[::1]:5432/db"),
        ("  postgresql://u@h/db\n", "postgresql+psycopg://u@h/db"),
        ("postgresql://u@%2Fvar%2Frun%2Fpostgresql/db", "postgresql+psycopg://u@/db?host=/var/run/postgresql"),
        ("postgresql://%2Frun%2Fpg:5433/db?sslmode=disable", "postgresql+psycopg:///db?sslmode=disable&host=/run/pg&port=5433"),
    ],
)
def test_accepted_urls_are_normalised_to_the_psycopg_driver(given: str, expected: str) -> None:
    url = parse_index_url(given)
    assert url.sqlalchemy_url == expected
    assert url.dialect == "postgresql"


def test_the_database_name_is_decoded() -> None:
    assert parse_index_url("postgresql://u@h/team%20index").database == "team index"
    assert parse_index_url("postgresql://u@h/?dbname=team").database == "team"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("sqlite:///x.db", "unsupported scheme 'sqlite' (leave it unset"),
        ("mysql://u@h/db", "unsupported scheme 'mysql'"),
        ("postgresql+psycopg2://u@h/db", "unsupported driver 'psycopg2'"),
        ("postgresql+asyncpg://u@h/db", "unsupported driver 'asyncpg'"),
        ("postgresql+psycopg_async://u@h/db", "unsupported driver 'psycopg_async'"),
        ("host=/tmp dbname=x", "not a URL"),
        ("", "not a URL"),
        ("postgresql://u@h", "name the database"),
        ("postgresql://u@h/", "name the database"),
        ("postgresql://u@h/db/extra", "database name alone"),
        ("postgresql://u@h:notaport/db", "port is not a number"),
        ("postgresql://u@h:0/db", "port is not a number"),
        ("postgresql://u@h:70000/db", "port is not a number"),
        ("postgresql://u@h1,h2/db", "several hosts"),
        ("postgresql://u@h/db#x", "fragment"),
    ],
)
def test_other_urls_are_refused_with_a_typed_one_line_error(given: str, words: str) -> None:
    with pytest.raises(IndexUrlError) as caught:
        parse_index_url(given, origin="--index-url")
    message = str(caught.value)
    assert words in message
    assert message.startswith("--index-url: ")
    assert "\n" not in message
    assert isinstance(caught.value, InvalidArgumentError)
    assert isinstance(caught.value, MemstoreError)
    assert isinstance(caught.value, ValueError)


def test_resolution_order_flag_then_environment_then_none() -> None:
    env = {INDEX_URL_ENV: "postgresql://env@h/db"}
    assert resolve_index_url(environ={}) is None
    assert resolve_index_url(environ={INDEX_URL_ENV: "  "}) is None
    from_env = resolve_index_url(environ=env)
    assert from_env is not None
    assert from_env.sqlalchemy_url == "postgresql+psycopg://env@h/db"
    from_flag = resolve_index_url("postgres://flag@h/db", environ=env)
    assert from_flag is not None
    assert from_flag.sqlalchemy_url == "postgresql+psycopg://flag@h/db"
    assert resolve_index_url("", environ=env) is None  # an explicit empty URL opts out of the environment


def test_the_error_names_where_the_url_came_from() -> None:
    with pytest.raises(IndexUrlError, match=f"^{INDEX_URL_ENV}: "):
        resolve_index_url(environ={INDEX_URL_ENV: "mysql://u@h/db"})
    with pytest.raises(IndexUrlError, match=r"^--index-url: "):
        resolve_index_url("mysql://u@h/db", environ={})


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INDEX_URL_ENV, "postgresql://u@h/db")
    assert resolve_index_url() is not None
    monkeypatch.delenv(INDEX_URL_ENV)
    assert resolve_index_url() is None


SECRET = "hunter2-Secret"


@pytest.mark.parametrize(
    "given",
    [
        f"postgresql://u:{SECRET}@h/db",
        f"postgres://u:{SECRET}@h:5432/db?sslmode=require",
        f"postgresql://u@h/db?password={SECRET}",
        f"postgresql://u@h/db?sslmode=require&sslpassword={SECRET}",
        f"postgresql://u:{SECRET}@h/db?password={SECRET}",
        f"postgresql://u:pa%40{SECRET}@h/db",  # an '@' in the password, encoded
    ],
)
def test_a_password_is_never_shown(given: str) -> None:
    url = parse_index_url(given)
    for shown in (url.redacted(), str(url), repr(url), f"{url}", redact(given)):
        assert SECRET not in shown
        assert "***" in shown
    assert SECRET in url.sqlalchemy_url  # the engine still gets it


@pytest.mark.parametrize(
    "given",
    [
        f"mysql://u:{SECRET}@h/db",
        f"postgresql+psycopg2://u:{SECRET}@h/db",
        f"postgresql://u:{SECRET}@h1,h2/db",
        f"postgresql://u:{SECRET}/db",  # the '@' forgotten: the password sits where a port goes
        f"postgresql://u:{SECRET}@h/db#frag",
        f"host=h password={SECRET} dbname=db",
        f"postgresql://u:{SECRET}@h/db/extra",
        f"postgresql://u:pa@{SECRET}@h/db",  # an unencoded '@': parsers disagree where the password ends
    ],
)
def test_a_password_is_not_shown_in_refusals_either(given: str) -> None:
    with pytest.raises(IndexUrlError) as caught:
        parse_index_url(given)
    assert SECRET not in str(caught.value)


def test_redact_leaves_urls_without_a_password_alone() -> None:
    for text in (SOCKET_URL, "postgresql://u@h:5432/db?sslmode=require", "no url here", "postgresql://h/db?a=b:c"):
        assert redact(text) == text


def test_an_index_url_is_a_value() -> None:
    assert parse_index_url("postgres://u@h/db") == parse_index_url("postgresql://u@h/db")
    assert isinstance(parse_index_url("postgres://u@h/db"), IndexUrl)
