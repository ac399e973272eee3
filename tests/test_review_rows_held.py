"""Attacks on 51f4dfa / d489a06 that held (kept apart from test_review_rows.py, whose tests fail)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_index_differential import IDS, lines

from memstore.catalog import MemoryCatalog
from memstore.index import id_lines, trust
from memstore.index.db import INDEX_DIRNAME, INDEX_FILENAME
from memstore.scan import scan_fd, scan_show


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    initial=lines,
    sep=st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\n \t\n"]),
    tail=st.booleans(),
    chunk=st.sampled_from([64, 257, 1024 * 1024]),
    memory_id=st.sampled_from([*IDS, "id", "d1", "\\", '"', "\n", "x", "ab"]),
)
def test_show_by_bytes_is_the_scans_show(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    initial: list[bytes],
    sep: bytes,
    tail: bool,
    chunk: int,
    memory_id: str,
) -> None:
    path = tmp_path_factory.mktemp("show") / "memory.jsonl"
    path.write_bytes(sep.join(initial) + (b"" if tail else b"\n"))
    monkeypatch.setattr(id_lines, "READ_CHUNK", chunk)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert id_lines.first_entry_with_id(fd, memory_id) == scan_show(scan_fd(fd), memory_id)
    finally:
        os.close(fd)


ESCAPED = [
    b'{"memory_id": "\\u0069d1", "content": "escaped id", "created_at": "t"}',
    b'{"content": "id1 inside content", "memory_id": "id10", "created_at": "t"}',
    b'{"memory_id": " id1 ", "content": "padded", "created_at": "t"}',
    b'\xef\xbb\xbf{"memory_id": "id1", "content": "bom", "created_at": "t"}',
    b'{"memory_id": "id1", "content": "", "created_at": "t"}',
    b'{"memory_id": "id1", "content": "dup keys", "created_at": "t", "memory_id": "id2"}',
    b'{"memory_id": "id1", "content": "line\\nbreak", "created_at": "t"}',
]


@pytest.mark.parametrize("order", range(len(ESCAPED)))
def test_show_by_bytes_on_escapes_and_lookalikes(tmp_path: Path, order: int) -> None:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"\n".join(ESCAPED[order:] + ESCAPED[:order]))
    fd = os.open(path, os.O_RDONLY)
    try:
        for memory_id in ("id1", "id2", "id10", "d1", "i"):
            assert id_lines.first_entry_with_id(fd, memory_id) == scan_show(scan_fd(fd), memory_id)
    finally:
        os.close(fd)


def test_show_finds_an_id_across_a_chunk_boundary(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    filler = b'{"memory_id": "f", "content": "' + b"x" * 1000 + b'", "created_at": "t"}\n'
    big = b'{"memory_id": "f2", "content": "' + b"y" * (3 * 1024 * 1024) + b'", "created_at": "t"}\n'
    target = b'{"memory_id": "target-id", "content": "found", "created_at": "t"}'
    for pad in (0, 17, 500):
        data = filler * (1024 + pad // 100) + b" " * pad + b"\n" + big + filler * 3 + target
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert id_lines.first_entry_with_id(fd, "target-id") == scan_show(scan_fd(fd), "target-id")
            assert id_lines.first_entry_with_id(fd, "f2") == scan_show(scan_fd(fd), "f2")
        finally:
            os.close(fd)


def _index(root: Path) -> Path:
    return root / ".teaagent" / INDEX_DIRNAME / INDEX_FILENAME


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE sqlite_master SET sql = sql || ' ' WHERE name = 'doc'",
        "UPDATE sqlite_master SET sql = lower(sql) WHERE name = 'doc'",
        "UPDATE sqlite_master SET sql = CAST(sql AS BLOB) WHERE name = 'doc'",
        "UPDATE sqlite_master SET sql = '' WHERE sql IS NULL",
        "UPDATE sqlite_master SET name = upper(name) WHERE type = 'index' AND sql IS NULL",
    ],
)
def test_a_schema_repr_cannot_hide(tmp_path: Path, edit: str) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha")
    assert catalog.search("alpha")
    conn = sqlite3.connect(_index(tmp_path))
    try:
        assert trust.schema_problem(conn) is None
        conn.execute("PRAGMA writable_schema = ON")
        assert conn.execute(edit).rowcount > 0
        conn.commit()
    finally:
        conn.close()
    conn = sqlite3.connect(_index(tmp_path))
    try:
        assert trust.schema_problem(conn) is not None
    finally:
        conn.close()


LAZY = """
import sys, threading
from memstore.catalog import MemoryCatalog
roots = sys.argv[1:]
cats = [MemoryCatalog(r) for r in roots]
for c in cats:
    c.add("alpha", branch_name="b1"); c.add("beta", branch_name="b2")
    assert c.search("alpha")  # each index built here, one at a time (concurrent builds crash: test_review_rows)
assert "memstore.catalog_rewrite" not in sys.modules
barrier = threading.Barrier(len(cats)); errors = []
def run(c):
    try:
        barrier.wait(); assert c.delete_by_branch("b1") == 1; c.health(); c.explain("beta")
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=run, args=(c,)) for c in cats]
[t.start() for t in threads]; [t.join() for t in threads]
assert not errors, errors
"""


def test_first_rewrites_in_two_threads(tmp_path: Path) -> None:
    for attempt in range(8):
        roots = [tmp_path / f"{attempt}-{i}" for i in range(3)]
        for root in roots:
            root.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", LAZY, *map(str, roots)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr


import json  # noqa: E402

import pg_server  # noqa: E402

from memstore.errors import EntryNotFoundError  # noqa: E402

ROW_EDITS = [
    "UPDATE team_doc SET off = -5 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET off = off + 100000 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET len = len + 1 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET len = 0 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET len = -1 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET off = off + 3, len = len - 3 WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET len = len + 1 + (SELECT len FROM team_doc WHERE part = %(part)s AND id = %(mid)s + 1)"
    " WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_source SET next_id = %(mid)s WHERE sid = %(sid)s",
    "UPDATE team_source SET next_id = 0 WHERE sid = %(sid)s",
    "UPDATE team_source SET tail_end = NULL WHERE sid = %(sid)s",
    "UPDATE team_doc SET odd = true WHERE part = %(part)s AND id = %(mid)s",
    "UPDATE team_doc SET created_at = NULL WHERE part = %(part)s AND id = %(mid)s",
]


@pytest.mark.pg
@pytest.mark.parametrize("edit", ROW_EDITS)
@pytest.mark.parametrize("crlf", [False, True])
def test_rows_pointed_elsewhere_never_change_an_answer(
    tmp_path: Path, pg_writer_url: str, edit: str, crlf: bool
) -> None:
    name = f"review-held-{abs(hash((edit, crlf)))}/memory.jsonl"
    sep = b"\r\n" if crlf else b"\n"
    lines = [
        json.dumps({"memory_id": f"id{i}", "content": f"alpha {i} \\n x", "created_at": "2026", "tags": ["t"]}).encode()
        for i in range(6)
    ]
    data = sep.join([lines[0], b"", b"  \t", lines[1], lines[2], b"{junk", lines[3], lines[4], lines[5]])
    shared = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    shared.path.parent.mkdir(parents=True, exist_ok=True)
    shared.path.write_bytes(data)  # a torn tail: no final newline
    assert shared.list(limit=100) == scan.list(limit=100)
    with pg_server.connect(pg_writer_url) as conn:
        sid, part = conn.execute("SELECT sid, part FROM team_source WHERE name = %s", (name,)).fetchone()
        ids = [r[0] for r in conn.execute("SELECT id FROM team_doc WHERE part = %s ORDER BY id", (part,))]
        conn.execute(edit, {"part": part, "sid": sid, "mid": ids[2]})
    for limit in (1, 3, 100):
        assert shared.list(limit=limit) == scan.list(limit=limit)
        assert shared.search("alpha", limit=limit) == scan.search("alpha", limit=limit)
        assert shared.search("alpha", limit=limit, tags=["t"]) == scan.search("alpha", limit=limit, tags=["t"])
    for memory_id in ("id0", "id2", "id5", "id"):
        try:
            got = shared.show(memory_id)
        except EntryNotFoundError:
            got = None
        try:
            want = scan.show(memory_id)
        except EntryNotFoundError:
            want = None
        assert got == want


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(
        alphabet=st.one_of(
            st.characters(min_codepoint=0, max_codepoint=0x200),
            st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010),
            st.characters(min_codepoint=0xFFF0, max_codepoint=0x10FFFF),
        ),
        max_size=40,
    )
)
def test_term_pieces_are_as_before(text: str) -> None:
    import re

    from memstore.index import terms

    old = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]+")
    assert terms.PIECE.findall(text) == old.findall(text)
    long_old = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]{3}")
    long_new = re.compile(terms.TERM_CHAR + "{3}")
    assert bool(long_old.search(text)) == bool(long_new.search(text))


import logging  # noqa: E402

from memstore.index.pg.loader import SourceLoader  # noqa: E402


@pytest.mark.pg
@pytest.mark.parametrize("tail", [b"", b"\n", b"\r\n", b"\n\n  \n", b"\n{junk"])
def test_legit_layouts_answer_without_a_reload_or_warning(
    tmp_path: Path, pg_writer_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tail: bytes
) -> None:
    name = f"review-tmp-{abs(hash(tail))}/memory.jsonl"
    lines = [
        json.dumps({"memory_id": f"id{i}", "content": f"alpha {i}", "created_at": "2026"}).encode() for i in range(4)
    ]
    shared = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    shared.path.parent.mkdir(parents=True, exist_ok=True)
    shared.path.write_bytes(b"\xef\xbb\xbf" + b"\r\n\n".join(lines) + tail)
    shared.list(limit=1)
    calls = []
    orig = SourceLoader.catch_up
    monkeypatch.setattr(SourceLoader, "catch_up", lambda self, **kw: calls.append(kw) or orig(self, **kw))
    with caplog.at_level(logging.WARNING):
        for limit in (1, 100):
            assert shared.list(limit=limit) == scan.list(limit=limit)
            assert shared.search("alpha", limit=limit) == scan.search("alpha", limit=limit)
            assert shared.show("id3") == scan.show("id3")
    assert not calls
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
