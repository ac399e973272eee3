"""Rows of a store's team-index source edited by a writer-role client never change an answer.

A loaded source gets random row edits (a row deleted, made to name another row's line,
two ids swapped, an offset moved, ``raw`` forged, a copy of a row added under a new id,
a state forged current over a line another tool appended); every read after them must
equal the scan of the file, answered by the shared index once it has reloaded the
source, or by the local files with one warning.  One known gap: a search after a row
away from the newest was deleted (counting the rows on every search is over budget;
see test_review_url.test_a_deleted_middle_row_hides_an_entry_from_search).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path

import pg_server
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_index_differential import IDS, QUERY_WORDS, TAGS, lines, write_raw

from memstore.catalog import MemoryCatalog
from memstore.errors import EntryNotFoundError

_names = itertools.count(1)
ROW = st.integers(min_value=0, max_value=10**6)
EDITS = st.lists(
    st.one_of(
        st.tuples(st.just("delete"), ROW),
        st.tuples(st.just("duplicate"), ROW, ROW),
        st.tuples(st.just("swap_ids"), ROW, ROW),
        st.tuples(st.just("shift"), ROW, st.integers(min_value=-200, max_value=200)),
        st.tuples(st.just("raw"), ROW),
        st.tuples(st.just("copy"), ROW),
        st.tuples(st.just("claim_current"), st.sampled_from(QUERY_WORDS[:6])),
    ),
    min_size=1,
    max_size=3,
)
FILTERS = st.sampled_from([{}, {"tags": [TAGS[1]]}, {"tags": ["abc"]}, {"branch_name": "b1"}])
READS = st.lists(
    st.one_of(
        st.tuples(st.just("search"), st.sampled_from(QUERY_WORDS[:8]), st.sampled_from([1, 3, 50]), FILTERS),
        st.tuples(st.just("list"), st.sampled_from([1, 2, 100]), FILTERS),
        st.tuples(st.just("show"), st.sampled_from(IDS)),
    ),
    min_size=1,
    max_size=6,
)


def source() -> str:
    return f"edits{next(_names)}/memory.jsonl"


def edit_rows(url: str, name: str, path: Path, edits: list[tuple]) -> None:
    """Apply ``edits`` to the source's rows as a writer-role client would, in one transaction."""
    with pg_server.connect(url) as conn:
        sid, part = conn.execute("SELECT sid, part FROM team_source WHERE name = %s", (name,)).fetchone()
        for edit in edits:
            kind = edit[0]
            if kind == "claim_current":
                MemoryCatalog(path.parent.parent, use_index=False).add(f"{edit[1]} appended by another tool")
                st_ = os.stat(path)
                conn.execute(
                    "UPDATE team_source SET dev = %s, ino = %s, size = %s, mtime_ns = %s, ctime_ns = %s,"
                    " recorded_ns = %s WHERE sid = %s",
                    (st_.st_dev, st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns, time.time_ns() + 10**15,
                     sid),
                )
                continue
            ids = [row[0] for row in conn.execute("SELECT id FROM team_doc WHERE part = %s ORDER BY id", (part,))]
            if not ids:
                continue
            a, b = ids[edit[1] % len(ids)], ids[edit[-1] % len(ids)]
            if kind == "delete":
                conn.execute("DELETE FROM team_doc WHERE part = %s AND id = %s", (part, a))
            elif kind == "duplicate":
                conn.execute(
                    "UPDATE team_doc SET (off, len) = (SELECT off, len FROM team_doc WHERE part = %s AND id = %s)"
                    " WHERE part = %s AND id = %s",
                    (part, b, part, a),
                )
            elif kind == "swap_ids":
                for old, new in ((a, -1), (b, a), (-1, b)):
                    conn.execute("UPDATE team_doc SET id = %s WHERE part = %s AND id = %s", (new, part, old))
            elif kind == "shift":
                conn.execute("UPDATE team_doc SET off = greatest(off + %s, 0) WHERE part = %s AND id = %s",
                             (edit[2], part, a))
            elif kind == "raw":
                conn.execute("UPDATE team_doc SET raw = 'nothing'::bytea WHERE part = %s AND id = %s", (part, a))
            elif kind == "copy":
                conn.execute(
                    "INSERT INTO team_doc SELECT part, (SELECT next_id FROM team_source WHERE sid = %s), sid, c, t,"
                    " created_at, bonus, odd, off, len, cterms, tterms, raw FROM team_doc WHERE part = %s AND id = %s",
                    (sid, part, a),
                )
                conn.execute("UPDATE team_source SET next_id = next_id + 1 WHERE sid = %s", (sid,))


def read(catalog: MemoryCatalog, op: tuple) -> object:
    if op[0] == "search":
        return catalog.search(op[1], limit=op[2], **op[3])
    if op[0] == "list":
        return catalog.list(limit=op[1], **op[2])
    try:
        return catalog.show(op[1])
    except EntryNotFoundError:
        return "not found"


@pytest.mark.pg
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(initial=lines, edits=EDITS, reads=READS)
def test_row_edits_never_change_an_answer(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str,
                                          caplog: pytest.LogCaptureFixture, initial: list[bytes], edits: list[tuple],
                                          reads: list[tuple]) -> None:
    root = tmp_path_factory.mktemp("edits")
    name = source()
    shared = MemoryCatalog(root, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    write_raw(shared.path, b"\n".join([*initial, b'{"content": "alpha loaded", "tags": ["run-summary"]}']) + b"\n")
    assert shared.list(limit=100) == scan.list(limit=100)  # the source is loaded
    edit_rows(pg_writer_url, name, shared.path, edits)
    caplog.clear()
    deleted = any(edit[0] == "delete" for edit in edits)
    with caplog.at_level(logging.WARNING):
        for op in reads:
            if op[0] == "search" and deleted:
                read(shared, op)  # the known gap: test_review_url's deleted-middle-row xfail
                continue
            assert read(shared, op) == read(scan, op), (op, edits)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 1, warnings
