"""Review of 51f4dfa (team index rows checked against the file) and d489a06 (lighter fresh process).

Each test fails on the reviewed code; see the report for the suspected cause of each.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pg_server
import pytest
from test_index_differential import write_raw

from memstore import cli_output
from memstore.catalog import MemoryCatalog
from memstore.index import trust
from memstore.index.db import INDEX_DIRNAME, INDEX_FILENAME
from memstore.index.pg import store_reads

_count = iter(range(1, 10**6))


def _entry(
    content: str,
    *,
    tags: list[str] | None = None,
    memory_id: str | None = None,
    stamp: str = "2026-01-01T00:00:00+00:00",
) -> bytes:
    payload = {
        "memory_id": memory_id or f"id{next(_count)}",
        "content": content,
        "created_at": stamp,
        "tags": tags or [],
    }
    return json.dumps(payload).encode()


def _loaded(root: Path, url: str, name: str, data: bytes) -> tuple[MemoryCatalog, MemoryCatalog]:
    shared = MemoryCatalog(root, index_url=url, source_name=name)
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    write_raw(shared.path, data)
    assert shared.list(limit=100) == scan.list(limit=100)  # the source is loaded
    return shared, scan


def _set_rows(url: str, name: str, rows: int) -> None:
    with pg_server.connect(url) as conn:
        conn.execute("UPDATE team_source SET rows = %s WHERE name = %s", (rows, name))


# ---------------------------------------------------------------- 51f4dfa: the state's row count is input


@pytest.mark.pg
def test_a_row_count_forged_to_zero_hides_every_entry_from_search(tmp_path: Path, pg_writer_url: str) -> None:
    name = "review-rows-zero/memory.jsonl"
    data = b"".join(_entry(f"alpha {i}") + b"\n" for i in range(5))
    shared, scan = _loaded(tmp_path, pg_writer_url, name, data)
    assert shared.search("alpha", limit=10) == scan.search("alpha", limit=10)
    _set_rows(pg_writer_url, name, 0)  # a writer-role edit of team_source.rows only
    assert shared.search("alpha", limit=10) == scan.search("alpha", limit=10)


@pytest.mark.pg
def test_a_row_count_forged_small_makes_a_filtered_search_loop_forever(
    tmp_path: Path, pg_writer_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "review-rows-small/memory.jsonl"
    # Many matches, few admitted by the filter: the search widens k, capped at rows + 1.
    data = b"".join(_entry(f"alpha {i}", tags=["keep"] if i % 10 == 0 else []) + b"\n" for i in range(40))
    shared, scan = _loaded(tmp_path, pg_writer_url, name, data)
    _set_rows(pg_writer_url, name, 1)
    calls = 0
    ranked = store_reads._ranked

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls > 50:
            raise AssertionError("search called _ranked 50 times: k = min(4 * k, rows + 1) never grows")
        return ranked(*args, **kwargs)

    monkeypatch.setattr(store_reads, "_ranked", counted)
    got = shared.search("alpha", limit=3, tags=["keep"])
    # Unbounded, the search never returns; stopped after 50 rounds, the shared read fails and
    # the local index answers (so ``got`` is right only thanks to the fallback).
    assert calls <= 50, "search called _ranked 50 times: k = min(4 * k, rows + 1) stays at 2"
    assert got == scan.search("alpha", limit=3, tags=["keep"])


@pytest.mark.pg
@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(
            edit,
            marks=pytest.mark.xfail(
                strict=True,
                reason="known: ranking columns of rows not returned are not checked against the file"
                " (team-index.md: what search cannot see; a later issue)",
            ),
        )
        for edit in (
            "UPDATE team_doc SET created_at = '2000' WHERE part = %(part)s AND id = %(newest)s",
            "UPDATE team_doc SET bonus = -100 WHERE part = %(part)s AND id = %(newest)s",
            "UPDATE team_doc SET cterms = '{}' WHERE part = %(part)s AND id = %(newest)s",
        )
    ],
)
def test_a_ranking_column_edited_hides_the_best_entry_from_search(
    tmp_path: Path, pg_writer_url: str, edit: str
) -> None:
    """Only the returned rows are checked against the file: a row pushed out of the top k by an
    edited created_at, bonus or term list is never looked at, and a lower-ranked entry takes its place."""
    name = f"review-rank-{abs(hash(edit))}/memory.jsonl"
    data = (
        _entry("alpha older", stamp="2026-01-01T00:00:00+00:00")
        + b"\n"
        + _entry("alpha newer", stamp="2026-01-02T00:00:00+00:00")
        + b"\n"
    )
    shared, scan = _loaded(tmp_path, pg_writer_url, name, data)
    assert shared.search("alpha", limit=1) == scan.search("alpha", limit=1)
    with pg_server.connect(pg_writer_url) as conn:
        part = conn.execute("SELECT part FROM team_source WHERE name = %s", (name,)).fetchone()[0]
        newest = conn.execute("SELECT max(id) FROM team_doc WHERE part = %s", (part,)).fetchone()[0]
        conn.execute(edit, {"part": part, "newest": newest})
    assert shared.search("alpha", limit=1) == scan.search("alpha", limit=1)


@pytest.mark.pg
@pytest.mark.parametrize("read", ["list", "search"])
def test_an_append_racing_a_read_does_not_reload_the_whole_source(
    tmp_path: Path, pg_writer_url: str, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """The snapshot is proven current for one fstat; RowChain takes another.  A line appended by
    anyone in between lies after the newest row, fails the walk as a forged row would, and costs a
    full reload of the source (a reader role: the local fallback with a warning)."""
    from memstore.index import row_chain
    from memstore.index.pg.loader import SourceLoader

    name = f"review-race-{read}/memory.jsonl"
    data = b"".join(_entry(f"alpha {i}") + b"\n" for i in range(5))
    shared, scan = _loaded(tmp_path, pg_writer_url, name, data)
    other = MemoryCatalog(tmp_path, use_index=False)
    init = row_chain.RowChain.__init__
    appended = []

    def racing(self: object, fd: int, size: int) -> None:
        if not appended:
            appended.append(other.add("alpha appended meanwhile"))
        init(self, fd, size)

    fulls = []
    catch_up = SourceLoader.catch_up

    def spy(self: SourceLoader, *args: object, **kwargs: object) -> object:
        fulls.append(kwargs.get("full", args[0] if args else False))
        return catch_up(self, *args, **kwargs)

    monkeypatch.setattr(row_chain.RowChain, "__init__", racing)
    monkeypatch.setattr(SourceLoader, "catch_up", spy)
    got = shared.list(limit=100) if read == "list" else shared.search("alpha", limit=100)
    assert appended
    assert True not in fulls, f"a full reload for an append: catch_up calls {fulls}"
    assert got in (
        (scan.list(limit=100) if read == "list" else scan.search("alpha", limit=100)),
        [
            e
            for e in (scan.list(limit=100) if read == "list" else scan.search("alpha", limit=100))
            if e.content != "alpha appended meanwhile"
        ],
    )


# ---------------------------------------------------------------- d489a06: the schema digest


def test_the_schema_digest_does_not_stand_in_for_another_sqlites_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MASTER_DIGEST is the 3.40.1 reference's, but it was accepted under any SQLite version: a file
    whose rows differ from the reference *this* SQLite builds was taken as memstore's own.  Another
    version is simulated by the recorded one differing (with that version's reference)."""
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha")
    assert catalog.search("alpha")  # the index is built
    index = next(p for p in tmp_path.rglob(INDEX_FILENAME) if p.parent.name == INDEX_DIRNAME)
    conn = sqlite3.connect(index)
    try:
        assert trust.schema_problem(conn) is None
        other = (("table", "doc", "doc", "CREATE TABLE doc(x)"),)  # what another SQLite's reference would be
        monkeypatch.setattr(trust, "expected_master", lambda: other)
        monkeypatch.setattr(trust, "MASTER_SQLITE", "0.0.0-not-this-sqlite")
        assert trust.schema_problem(conn) is not None
    finally:
        conn.close()


# ---------------------------------------------------------------- d489a06: the table's widths


def test_a_bounded_table_cuts_its_flex_column_not_its_last() -> None:
    rows = [("x" * 40, "keep-this-whole")]
    text = cli_output.table(("FLEX", "LAST"), rows, flex=0, width=40)
    assert all(cli_output.display_width(line) <= 40 for line in text.splitlines())
    assert "keep-this-whole" in text, text


# ---------------------------------------------------------------- pre-existing: index builds in threads

BUILDS = """
import sys, threading
from memstore.catalog import MemoryCatalog
cats = [MemoryCatalog(root) for root in sys.argv[1:]]
for c in cats:
    c.add("alpha")
barrier = threading.Barrier(len(cats))
def run(c):
    barrier.wait()
    assert c.search("alpha")  # each thread builds its own project's new index file
threads = [threading.Thread(target=run, args=(c,)) for c in cats]
[t.start() for t in threads]; [t.join() for t in threads]
"""


def test_two_threads_building_two_projects_indexes_do_not_crash_the_process(tmp_path: Path) -> None:
    """Alembic's ``context``/``op`` are process-global proxies: two upgrades at once in one process run
    one thread's DDL on the other's connection, closed under it (sqlite3 'bad parameter or other API
    misuse', then SIGSEGV).  Not from d489a06 (its parent crashes the same way)."""
    for attempt in range(3):
        roots = [tmp_path / f"{attempt}-{i}" for i in range(3)]
        for root in roots:
            root.mkdir()
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", BUILDS, *map(str, roots)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
