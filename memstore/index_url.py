"""Which index a command uses: the local SQLite file, or a PostgreSQL database named by a URL.

Order: ``--index-url`` (the ``explicit`` argument) > ``$MEMSTORE_INDEX_URL`` > none,
which means the embedded SQLite index beside the files.  An explicit empty string
also means none, so one command can opt out of a URL set in the environment.

A URL is written as libpq users know it (``postgresql://user@host/db``,
``postgres://…``, ``?host=/socket/dir``); memstore picks the driver (psycopg 3), so
``postgresql+psycopg://…`` is accepted too and any other driver or scheme is refused.
Parsing is stdlib only: ``import memstore`` and the SQLite path never pay for
SQLAlchemy or psycopg.  A password never appears in a message: everything shown
goes through :func:`redact`.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from memstore.errors import IndexUrlError

INDEX_URL_ENV = "MEMSTORE_INDEX_URL"
DRIVER = "psycopg"
SCHEMES = frozenset({"postgresql", "postgres"})
MASK = "***"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_+.\-]*)://")
_SECRET_PARAM = re.compile(r"((?:^|(?<=[?&;\s]))[^=&#\s]*password[^=&#\s]*\s*=\s*)('[^']*'|[^&#\s]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every password (``user:PASSWORD@``, ``password=…``) replaced by ``***``.

    Works on anything, parsable or not, so even a malformed URL can be named in an error.
    It errs towards hiding: the userinfo ends at the *last* ``@`` (where a URL parser may
    stop earlier), and every parameter whose name contains "password" is masked.
    """
    match = _SCHEME.match(text)
    if match is not None:
        head, rest = text[: match.end()], text[match.end() :]
        at = rest.rfind("@")
        user, colon, _ = rest[: max(at, 0)].partition(":")
        if colon and not any(ch in user for ch in "/?#"):
            text = f"{head}{user}:{MASK}{rest[at:]}"
    return _SECRET_PARAM.sub(lambda m: f"{m.group(1)}{MASK}", text)


@dataclass(frozen=True)
class IndexUrl:
    """A PostgreSQL index URL, normalised to SQLAlchemy's psycopg driver.

    ``str()`` and ``repr()`` show the redacted form; only :attr:`sqlalchemy_url` holds the
    password, for handing to the engine.
    """

    sqlalchemy_url: str = field(repr=False)
    database: str
    dialect: str = "postgresql"

    def redacted(self) -> str:
        """The URL as it may be shown to a person or written to a log."""
        return redact(self.sqlalchemy_url)

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"IndexUrl({self.redacted()!r})"


def parse_index_url(text: str, *, origin: str = "index URL") -> IndexUrl:
    """``text`` as an :class:`IndexUrl`; :class:`~memstore.errors.IndexUrlError` if memstore cannot use it.

    ``origin`` (``--index-url``, ``MEMSTORE_INDEX_URL``) starts the one-line message.
    """
    given = text.strip()
    match = _SCHEME.match(given)
    if match is None:
        raise IndexUrlError(f"{origin}: not a URL: {redact(given)!r} (expected postgresql://user@host/database)")
    scheme, _, driver = match.group(1).lower().partition("+")
    if scheme not in SCHEMES:
        hint = "leave it unset for the local SQLite index" if scheme == "sqlite" else "only PostgreSQL is supported"
        raise IndexUrlError(f"{origin}: unsupported scheme {match.group(1)!r} ({hint}; e.g. postgresql://user@host/db)")
    if driver not in ("", DRIVER):
        raise IndexUrlError(
            f"{origin}: unsupported driver {driver!r}: memstore uses psycopg 3, write postgresql://… without a driver"
        )
    rest = given[match.end() :]
    try:
        parts = urllib.parse.urlsplit("//" + rest)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise IndexUrlError(f"{origin}: malformed URL {redact(given)!r}: {exc}") from None
    if parts.netloc.count("@") > 1:
        # Parsers disagree on where such a password ends (the driver's host would then hold
        # part of it, and be echoed in its errors): refuse it, without echoing the URL.
        raise IndexUrlError(f"{origin}: malformed URL: write an '@' in the user or password as %40")
    if parts.hostname and "," in parts.hostname:
        raise IndexUrlError(f"{origin}: several hosts in {redact(given)!r}: give each as ?host=NAME&port=PORT instead")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        # The URL is not echoed: "user:secret/db" with its "@" forgotten puts the password here.
        raise IndexUrlError(f"{origin}: malformed URL: the port is not a number from 1 to 65535")
    if parts.fragment:
        raise IndexUrlError(f"{origin}: malformed URL {redact(given)!r}: unexpected '#' fragment")
    database = urllib.parse.unquote(parts.path.lstrip("/")) or (query.get("dbname") or [""])[-1]
    if not database:
        raise IndexUrlError(f"{origin}: name the database, e.g. postgresql://user@host/memstore ({redact(given)!r})")
    if "/" in parts.path.lstrip("/"):
        raise IndexUrlError(f"{origin}: malformed URL {redact(given)!r}: the path must be the database name alone")
    normalised = _socket_host_to_query(rest, parts, port)
    return IndexUrl(sqlalchemy_url=f"postgresql+{DRIVER}://{normalised}", database=database)


def _socket_host_to_query(rest: str, parts: urllib.parse.SplitResult, port: int | None) -> str:
    """libpq's ``postgresql://%2Fsocket%2Fdir/db`` as ``postgresql:///db?host=/socket/dir``.

    libpq reads a percent-encoded host that starts with ``/`` as a socket folder;
    SQLAlchemy would look it up as a host name, so it moves into the query.
    """
    userinfo, at, hostport = parts.netloc.rpartition("@")
    host = hostport.rsplit(":", 1)[0] if port is not None else hostport
    folder = urllib.parse.unquote(host)
    if not folder.startswith("/"):
        return rest
    extra = [("host", folder)] + ([("port", str(port))] if port is not None else [])
    query = urllib.parse.urlencode(extra, safe="/")
    tail = f"{parts.query}&{query}" if parts.query else query
    return f"{userinfo}{at}{parts.path}?{tail}"


def resolve_index_url(explicit: str | None = None, *, environ: Mapping[str, str] | None = None) -> IndexUrl | None:
    """The index URL in force: ``explicit`` > ``$MEMSTORE_INDEX_URL`` > None (the local SQLite index).

    ``explicit=""`` means the SQLite index even when the environment names a URL.
    ``environ`` defaults to ``os.environ``.
    """
    if explicit is not None:
        return parse_index_url(explicit, origin="--index-url") if explicit.strip() else None
    env = os.environ if environ is None else environ
    value = env.get(INDEX_URL_ENV, "")
    return parse_index_url(value, origin=INDEX_URL_ENV) if value.strip() else None
