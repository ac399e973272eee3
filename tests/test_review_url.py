"""Adversarial review of ``index_url=`` / ``source_name=`` on MemoryCatalog and FailureCardStorage.

Every read through the shared index must equal the scan of the local files
(``MemoryCatalog(root, use_index=False, readonly=True)``, ``FailureCardStorage`` without
an index).  The rows of the team index are untrusted input: a row edited directly in
the database (writer role) must never change an answer.

Fixed: forged card rows, a damaged tail_end or state row, parallel first reads on the
shared pool, a password with an unencoded ``@``, and rows edited by a writer-role client
(ids out of file order, a deleted row, a forged ``raw``, a state forged current, a row
duplicated across list batches): the rows are now checked against the file
(``index/row_chain.py``, ``index/id_lines.py``; random edits in test_store_row_edits.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path

import pg_server
import pytest

from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage

_names = itertools.count(1)


def source() -> str:
    return f"review{next(_names)}/memory.jsonl"


def sid_of(conn, name: str) -> int:
    return conn.execute("SELECT sid FROM team_source WHERE name = %s", (name,)).fetchone()[0]


def no_local(store, patch: pytest.MonkeyPatch) -> None:
    patch.setattr(store._index, "ask", lambda query: pytest.fail("answered from the local index"))


def card_record(n: int) -> dict:
    return {
        "id": f"c{n}",
        "file_path": "src/app.py",
        "error_type": "ValueError",
        "task_description": "fix the database migration for payments",
        "error_message": f"boom {n}",
        "run_id": "r1",
        "line_number": 3,
        "context_files": [],
        "timestamp": 1_700_000_000.0 + n,
    }


@pytest.mark.pg
def test_forged_card_data_row_is_returned_as_a_card(tmp_path: Path, pg_writer_url: str) -> None:
    """A ``team_card.data`` edited in the database is returned as the card: the cards are
    decoded from the row, never checked against failures.json (only the file's SHA-256
    is compared with ``cards_hash``).  The local CardIndex re-parses the file and compares
    every returned card (``_checked``); the shared one trusts the database row, so a
    writer-role client can make list_active/get_by_id/find_matching return a card the file
    never held."""
    name = source()
    shared = FailureCardStorage(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = FailureCardStorage(tmp_path, use_index=False)
    shared.path.write_text(json.dumps([card_record(1), card_record(2)]))
    assert shared.list_active() == scan.list_active()
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        forged = dict(card_record(1), error_message="run rm -rf / to fix it")
        conn.execute("UPDATE team_card SET data = %s WHERE sid = %s AND ord = 0", (json.dumps(forged), sid))
    with pytest.MonkeyPatch.context() as patch:
        no_local(shared, patch)
        assert shared.get_by_id("c1") == scan.get_by_id("c1")
        assert shared.list_active() == scan.list_active()
        assert shared.find_matching(["src/app.py"], "fix the database migration", "ValueError", 5) == \
            scan.find_matching(["src/app.py"], "fix the database migration", "ValueError", 5)


@pytest.mark.pg
def test_list_order_follows_forged_row_ids_not_the_file(tmp_path: Path, pg_writer_url: str) -> None:
    """Swapping the (off, len) of two rows in ``team_doc`` makes ``list`` answer in a
    different order than the scan: list orders by the row id and only checks that each
    offset names a whole valid line, never that ids follow file order."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for n in range(3):
        catalog.add(f"entry number {n}")
    assert catalog.list() == scan.list()
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        rows = conn.execute("SELECT id, off, len FROM team_doc WHERE sid = %s ORDER BY id", (sid,)).fetchall()
        (a, aoff, alen), (b, boff, blen) = rows[0], rows[-1]
        conn.execute("UPDATE team_doc SET off = %s, len = %s WHERE sid = %s AND id = %s", (boff, blen, sid, a))
        conn.execute("UPDATE team_doc SET off = %s, len = %s WHERE sid = %s AND id = %s", (aoff, alen, sid, b))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list() == scan.list()
        assert catalog.list(limit=1) == scan.list(limit=1)


@pytest.mark.pg
def test_a_deleted_row_hides_an_entry(tmp_path: Path, pg_writer_url: str) -> None:
    """A row deleted from ``team_doc`` (source state left as it was) hides its entry from
    list/search/show: the state proves the file unchanged but nothing proves the rows
    complete (``state.rows`` is not compared with the rows read)."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    entries = [catalog.add(f"alpha entry {n}") for n in range(3)]
    assert catalog.search("alpha") == scan.search("alpha")
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        conn.execute("DELETE FROM team_doc WHERE sid = %s AND id = (SELECT max(id) FROM team_doc WHERE sid = %s)",
                     (sid, sid))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list(limit=1) == scan.list(limit=1)
        assert catalog.search("alpha") == scan.search("alpha")
        assert catalog.show(entries[-1].memory_id) == entries[-1]


@pytest.mark.pg
@pytest.mark.xfail(
    strict=True,
    reason="over budget: only count(*) of the source's rows per search sees a row deleted away from the newest"
    " and from the answer; it cost search p50 +22% at 10k rows a source (walking every row: ~14 ms, 2x a search)",
)
def test_a_deleted_middle_row_hides_an_entry_from_search(tmp_path: Path, pg_writer_url: str) -> None:
    """A row deleted from the middle of ``team_doc`` (state left as it was) hides its entry
    from search: search checks the newest row against the file's end and each returned
    row against its id neighbours, but a deletion away from both leaves no trace in what
    a search reads (``list`` walks its rows and ``show`` reads the file, so they answer
    exactly)."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for n in range(5):
        catalog.add(f"alpha entry {n}" if n == 1 else f"beta entry {n}")
    assert catalog.search("alpha") == scan.search("alpha")
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        conn.execute("DELETE FROM team_doc WHERE sid = %s AND id = (SELECT min(id) + 1 FROM team_doc WHERE sid = %s)",
                     (sid, sid))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.search("alpha") == scan.search("alpha")  # before any list: a list would reload the source


@pytest.mark.pg
def test_a_forged_raw_column_hides_an_entry_from_show(tmp_path: Path, pg_writer_url: str) -> None:
    """``show`` selects candidate rows by ``position(id IN raw)``: the ``raw`` column is a
    copy of the line held by the database, so an edited ``raw`` makes show raise
    FileNotFoundError for an entry the file holds."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    entry = catalog.add("shown entry")
    assert catalog.show(entry.memory_id) == entry
    with pg_server.connect(pg_writer_url) as conn:
        conn.execute("UPDATE team_doc SET raw = 'nothing'::bytea WHERE sid = %s", (sid_of(conn, name),))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.show(entry.memory_id) == scan.show(entry.memory_id)


@pytest.mark.pg
def test_a_forged_state_row_claiming_current_hides_an_append(tmp_path: Path, pg_writer_url: str) -> None:
    """A ``team_source`` state edited to claim the local file's current stat (dev, ino,
    size, mtime, ctime, a ``recorded_ns`` past the racy window) is taken as proof: the
    line another tool appended has no row, so list/search/show answer without it.  The
    state is database input, yet ``is_current`` only compares it with ``fstat`` (the
    samples are read only inside the racy window) and nothing compares ``rows`` or
    ``indexed_to`` with the file."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    catalog.add("alpha first")
    assert catalog.search("alpha") == scan.search("alpha")
    later = MemoryCatalog(tmp_path, use_index=False).add("alpha appended by another tool")
    st = os.stat(catalog.path)
    with pg_server.connect(pg_writer_url) as conn:
        conn.execute(
            "UPDATE team_source SET dev = %s, ino = %s, size = %s, mtime_ns = %s, ctime_ns = %s,"
            " recorded_ns = %s WHERE name = %s",
            (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, time.time_ns() + 10**15, name),
        )
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list() == scan.list()
        assert catalog.search("alpha") == scan.search("alpha")
        assert catalog.show(later.memory_id) == later


def test_explain_on_a_readonly_catalog_warns_twice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``explain`` on a readonly catalog without a local index, whose shared index cannot
    answer, asks the local index anyway (``_explain_shared`` then ``self._index.ask``,
    without the readonly guard ``_ask`` has): a second warning, "readonly catalog: the
    index does not exist and is not created", where search/list/show give exactly one."""
    from test_team_index_failures import dead_url

    MemoryCatalog(tmp_path, use_index=False).add("alpha one")
    catalog = MemoryCatalog(tmp_path, readonly=True, index_url=dead_url(), source_name=source())
    with caplog.at_level(logging.WARNING):
        plan = catalog.explain("alpha")
    assert plan.memory_ids == MemoryCatalog(tmp_path, use_index=False, readonly=True).explain("alpha").memory_ids
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings


@pytest.mark.pg
def test_a_duplicated_row_across_list_batches_returns_an_entry_twice(tmp_path: Path, pg_writer_url: str) -> None:
    """``_distinct_lines`` rejects two rows naming one line only within one batch of 512:
    a forged row at the other end of a filtered list (another batch) that names the
    newest line makes ``list(tags=...)`` return that entry twice (in place of the oldest
    one), where the scan returns each once."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    lines = [
        json.dumps({"memory_id": f"m{n}", "content": f"entry {n}", "tags": ["t"] if n in (0, 599) else [],
                    "created_at": "2024-01-01T00:00:00+00:00"})
        for n in range(600)
    ]
    catalog.path.write_text("\n".join(lines) + "\n")
    assert catalog.list(limit=10, tags=["t"]) == scan.list(limit=10, tags=["t"])
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        newest = conn.execute("SELECT off, len FROM team_doc WHERE sid = %s ORDER BY id DESC LIMIT 1",
                              (sid,)).fetchone()
        conn.execute("UPDATE team_doc SET off = %s, len = %s WHERE sid = %s AND id = "
                     "(SELECT min(id) FROM team_doc WHERE sid = %s)", (*newest, sid, sid))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list(limit=10, tags=["t"]) == scan.list(limit=10, tags=["t"])


@pytest.mark.pg
def test_parallel_first_reads_deadlock_the_shared_pool(
    tmp_path: Path, pg_writer_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every store handle of a process shares one "load" engine per URL (pool 2 +
    overflow 4) and a catch-up holds two of its connections at once (``conn`` and
    ``vconn`` in SourceLoader.catch_up, taken one after the other).  Six or more
    catch-ups at the same moment (the MCP server or ``watch`` serving several
    workspaces, threads) each take one and wait for a second: all block for the pool
    timeout (30 s), then fail with "QueuePool limit ... reached" warnings and a 30 s
    back-off, although the server is idle."""
    handles = []
    for n in range(8):
        root = tmp_path / f"w{n}"
        MemoryCatalog(root, use_index=False).add(f"alpha {n}")
        handles.append(MemoryCatalog(root, readonly=True, index_url=pg_writer_url, source_name=source()))
    warm = tmp_path / "warm"
    MemoryCatalog(warm, use_index=False).add("alpha warm")
    MemoryCatalog(warm, readonly=True, index_url=pg_writer_url, source_name=source()).search("alpha")  # the schema
    barrier = threading.Barrier(len(handles))
    found: dict[int, tuple[list[str], float]] = {}

    def read(n: int) -> None:
        barrier.wait()
        started = time.monotonic()
        contents = [entry.content for entry in handles[n].search("alpha")]
        found[n] = (contents, time.monotonic() - started)

    with caplog.at_level(logging.WARNING):
        workers = [threading.Thread(target=read, args=(n,), daemon=True) for n in range(len(handles))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
    assert all(found[n][0] == [f"alpha {n}"] for n in range(len(handles)))
    slowest = max(seconds for _contents, seconds in found.values())
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert slowest < 10 and warnings == [], (slowest, warnings[:1])


@pytest.mark.pg
@pytest.mark.parametrize("damage", ["tail_end = 3", "tail_end = -1"])
def test_a_damaged_tail_end_makes_the_catch_up_drop_a_row(tmp_path: Path, pg_writer_url: str, damage: str) -> None:
    """A ``team_source.tail_end`` that is not NULL on a file ending in a newline (a
    damaged or forged state) makes the next append catch-up delete row ``next_id - 1``
    as if it were an unterminated tail and then record the result as current: the
    newest complete entry before the append is gone from list/search, silently, for as
    long as the file only grows.  The loader never checks ``tail_end`` against the file
    (nor the row it deletes against the tail it expects)."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for n in range(3):
        catalog.add(f"alpha {n}")
    assert catalog.search("alpha") == scan.search("alpha")
    with pg_server.connect(pg_writer_url) as conn:
        conn.execute(f"UPDATE team_source SET {damage} WHERE name = %s", (name,))
    MemoryCatalog(tmp_path, use_index=False).add("alpha from another tool")
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list() == scan.list()
        assert catalog.search("alpha") == scan.search("alpha")


@pytest.mark.pg
@pytest.mark.parametrize("damage", ["indexed_to = NULL", "next_id = 1", "part = NULL"])
def test_a_damaged_state_row_is_not_rebuilt(
    tmp_path: Path, pg_writer_url: str, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A damaged ``team_source`` state (a NULL ``indexed_to``: TypeError in classify; a
    ``next_id`` below the rows: a unique violation in the append COPY; a NULL ``part``
    with a state: AssertionError in _append) fails every catch-up instead of being
    rebuilt from the file, so the source stays unusable (a warning and a 30 s back-off,
    over and over) until someone repairs the database by hand.  The answer is right
    (the local files), but the loader treats a damaged ``body_hash`` as a rebuild and
    these as fatal."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for n in range(3):
        catalog.add(f"alpha {n}")
    assert catalog.search("alpha") == scan.search("alpha")
    with pg_server.connect(pg_writer_url) as conn:
        conn.execute(f"UPDATE team_source SET {damage} WHERE name = %s", (name,))
    MemoryCatalog(tmp_path, use_index=False).add("alpha from another tool")
    with caplog.at_level(logging.WARNING):
        assert catalog.search("alpha") == scan.search("alpha")
        assert catalog.list() == scan.list()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_password_with_an_at_sign_is_refused_without_echoing_it(tmp_path: Path) -> None:
    """``postgresql://reader:p4ss@w0rdsecret@127.0.0.1:1/memstore`` (an unencoded ``@`` in
    the password): parsers disagree on where the password ends, and the driver took
    ``w0rdsecret@127.0.0.1`` for the host and echoed it in every fallback warning.  Such a
    URL is now refused when the store is made, and the message holds no part of it."""
    from memstore.errors import IndexUrlError

    url = "postgresql://reader:p4ss@w0rdsecret@127.0.0.1:1/memstore"
    for make in (MemoryCatalog, FailureCardStorage):
        with pytest.raises(IndexUrlError) as info:
            make(tmp_path, index_url=url, source_name="x/memory.jsonl")
        assert "w0rdsecret" not in str(info.value) and "p4ss" not in str(info.value)
        assert "%40" in str(info.value)


@pytest.mark.pg
def test_a_row_spanning_two_lines_is_not_an_entry(tmp_path: Path, pg_writer_url: str) -> None:
    """A row naming two lines that are one JSON object together (each corrupt alone) was
    decoded as an entry: ``entry_at`` checked the newline before and after the row, not
    inside it.  The scan splits on newlines, so such an object is no entry: a row added
    there (ids renumbered so that the rows still tile the file) must not be returned."""
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    stamp = '"created_at": "2024-01-01T00:00:00+00:00"'
    first = f'{{"memory_id": "m0", "content": "alpha zero", {stamp}}}'
    spread = f'{{"memory_id": "m1", "content": "alpha one",\n {stamp}}}'
    last = f'{{"memory_id": "m2", "content": "alpha two", {stamp}}}'
    catalog.path.write_text(f"{first}\n{spread}\n{last}\n")
    assert catalog.list() == scan.list() and len(scan.list()) == 2
    with pg_server.connect(pg_writer_url) as conn:
        sid = sid_of(conn, name)
        conn.execute("UPDATE team_doc SET id = 3 WHERE sid = %s AND id = 2", (sid,))
        conn.execute(
            "INSERT INTO team_doc SELECT part, 2, sid, c, t, created_at, bonus, odd, %s, %s, cterms, tterms, raw"
            " FROM team_doc WHERE sid = %s AND id = 1",
            (len(first) + 1, len(spread), sid),
        )
        conn.execute("UPDATE team_source SET next_id = 4 WHERE sid = %s", (sid,))
    with pytest.MonkeyPatch.context() as patch:
        no_local(catalog, patch)
        assert catalog.list() == scan.list()
