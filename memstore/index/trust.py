"""Deciding whether an index file may be used: exact schema, and built here by memstore.

The file at the index path is input, not state: it may have been committed, copied
or crafted.  It is used only when its ``sqlite_master`` equals what memstore's own
migrations create (no triggers, views or extra objects) and its ``origin`` row
names the file's actual (device, inode) and this machine.  A file copied or checked
out gets a new inode, and a crafted one cannot know this machine's tag.
"""

from __future__ import annotations

import functools
import os
import sqlite3

from memstore.digests import blake2b
from memstore.index.schema_sql import CREATE_STATEMENTS, MASTER_DIGEST, MASTER_SQLITE

Generation = tuple[int, int]
"""(st_dev, st_ino) of an index file: changes whenever a new file is swapped in."""

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
MASTER_SQL = "SELECT type, name, tbl_name, sql FROM sqlite_master"


@functools.cache
def expected_master() -> tuple[tuple[str, str, str, str | None], ...]:
    """``sqlite_master`` of an index memstore built, including what SQLite derives (FTS5 shadow tables)."""
    return master_of(CREATE_STATEMENTS)


def master_of(statements: tuple[str, ...]) -> tuple[tuple[str, str, str, str | None], ...]:
    """The sorted ``sqlite_master`` rows these statements leave in an empty database."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in statements:
            conn.execute(statement)
        return tuple(sorted(conn.execute(MASTER_SQL), key=_order))
    finally:
        conn.close()


def _order(row: tuple[str, str, str, str | None]) -> tuple[str, str, str, str]:
    return (row[0], row[1], row[2], row[3] or "")


def master_digest(rows: object) -> str:
    """A digest of sorted ``sqlite_master`` rows (their repr: any value a crafted file holds has one)."""
    return blake2b(repr(rows).encode("utf-8", "surrogatepass"), digest_size=32).hexdigest()


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """Why this database's objects differ from memstore's own, or None when they are exactly those."""
    found = sorted(conn.execute(MASTER_SQL), key=_order)
    # The digest of the reference this SQLite version builds (schema_sql.py, checked by a test)
    # spares each process building the reference (FTS5 tables in memory, ~2 ms) on its first
    # query.  Rows with another digest (another SQLite, or not memstore's) are compared in full.
    if sqlite3.sqlite_version == MASTER_SQLITE and master_digest(found) == MASTER_DIGEST:
        return None
    return _difference(found, list(expected_master()))


def old_schema_problem(conn: sqlite3.Connection, version: int) -> str | None:
    """:func:`schema_problem` for a file at an older schema ``version``: exactly the objects
    memstore's migrations left at that version (:mod:`memstore.index.old_schemas`), and
    Alembic's own record naming that revision: Alembic migrates from its record, not from
    ``user_version``, so a record that disagrees makes the migration fail (or skip)."""
    expected = _old_master(version)
    if expected is None:
        return f"schema version {version} was never memstore's"
    problem = _difference(sorted(conn.execute(MASTER_SQL), key=_order), list(expected))
    if problem is not None:
        return problem
    revisions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
    if revisions != [f"{version:04d}"]:
        return f"schema version {version}, but its migration record names {revisions!r:.200}"
    return None


@functools.cache
def _old_master(version: int) -> tuple[tuple[str, str, str, str | None], ...] | None:
    from memstore.index.old_schemas import OLD_STATEMENTS

    statements = OLD_STATEMENTS.get(version)
    return None if statements is None else master_of(statements)


def _difference(
    found: list[tuple[str, str, str, str | None]], expected: list[tuple[str, str, str, str | None]]
) -> str | None:
    if found == expected:
        return None
    extra = sorted({f"{row[0]} {row[1]}" for row in found} - {f"{row[0]} {row[1]}" for row in expected})
    missing = sorted({f"{row[0]} {row[1]}" for row in expected} - {f"{row[0]} {row[1]}" for row in found})
    if extra or missing:
        return f"schema differs from memstore's: extra {extra or 'none'}, missing {missing or 'none'}"
    return "schema differs from memstore's: an object is defined differently"


@functools.cache
def machine_tag() -> str:
    """A per-machine tag recorded in every index built here (a digest: the machine id itself stays private)."""
    ident = b""
    for name in MACHINE_ID_FILES:
        try:
            with open(name, "rb") as handle:
                ident = handle.read(256).strip()
        except OSError:
            continue
        if ident:
            break
    if not ident:
        ident = os.uname().nodename.encode("utf-8", "surrogateescape")
    return blake2b(b"memstore index origin\0" + ident, digest_size=16).hexdigest()


def record_origin(conn: sqlite3.Connection, st: os.stat_result) -> None:
    """Stamp a file memstore is building with its own identity (kept through the rename into place)."""
    conn.execute("DELETE FROM origin")
    conn.execute(
        "INSERT INTO origin(id, dev, ino, machine) VALUES (1, ?, ?, ?)", (st.st_dev, st.st_ino, machine_tag())
    )


def origin_problem(conn: sqlite3.Connection, st: os.stat_result) -> str | None:
    """Why this file was not built here by memstore, or None when its origin row matches its fstat."""
    try:
        rows = conn.execute("SELECT dev, ino, machine FROM origin").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc).lower():
            return "no origin record (built by an older memstore or elsewhere)"
        raise
    if rows != [(st.st_dev, st.st_ino, machine_tag())]:
        return "built elsewhere: its origin record does not match this file on this machine"
    return None
