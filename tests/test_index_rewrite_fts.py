"""The index follow-up of a rewrite: the word index written once, the vocabulary counted by FTS5.

Every statement that writes ``doc_fts`` makes FTS5 flush what it holds as a new segment
(and merge segments, a common term's whole doclist at a time), so a follow-up that
deleted 500 rows per statement took seconds at 1M entries.  It now deletes in one
statement per table, and the removed rows' vocabulary counts come from a scratch FTS5
table with doc_fts's tokenizer; both must stay exact.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog
from memstore.index import vocabulary
from memstore.index.lines import row_values
from memstore.models import MemoryEntry

# Term characters, ASCII separators (marks), non-ASCII letters and FTS5 syntax.
PIECES = ["a", "b", "ab", "Z", "9", "_", "-", ".", ":", '"', "*", "(", "é", "İ", "ß", "😀", "ǅ", " ", "\t",
          "\u3000", "\xa0", "x.y", "a-b", "NEAR", "AND"]  # fmt: skip
words = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


def _struct_segments(conn: sqlite3.Connection) -> int:
    """Segments in doc_fts's structure record (FTS5's own layout: cookie, nLevel, nSegment varints)."""
    (block,) = conn.execute("SELECT block FROM doc_fts_data WHERE id = 10").fetchone()
    at = 4
    values = []
    for _ in range(2):
        value = 0
        while True:
            byte = block[at]
            at += 1
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values[1]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(words, st.lists(words.filter(bool), max_size=3)), max_size=12))
def test_fts5_counts_equal_the_python_counts(rows: list[tuple[str, list[str]]]) -> None:
    """The scratch table counts each term once per row and column, as row_terms does."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE doc(id INTEGER PRIMARY KEY, c, t, mc, mt, odd)")
    expected: vocabulary.TermCounts = Counter()
    for row_id, (content, tags) in enumerate(rows):
        entry = MemoryEntry(memory_id=f"m{row_id}", content=content + "x", tags=tuple(tags), created_at="2026")
        _mid, c, t, _at, _bonus, _br, _run, mc, mt, odd = row_values(entry)
        conn.execute("INSERT INTO doc VALUES (?,?,?,?,?,?)", (row_id, c, t, mc, mt, odd))
        if not odd:
            vocabulary.row_terms(expected, c, t, mc, mt)
    counted = vocabulary.values_counted(conn.execute("SELECT c, t, mc, mt FROM doc WHERE odd = 0").fetchall())
    assert counted == +expected


def _line(i: int, branch: str) -> str:
    return json.dumps(
        {
            "memory_id": f"m{i}",
            "content": f"entry {i} common word{i % 13} a.b",
            "tags": ["t", f"g{i % 5}"],
            "created_at": "2026-01-01",
            "branch_name": branch,
            "run_id": None,
        }
    )


def test_a_followed_rewrite_writes_the_word_index_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,300 removed rows (three chunks of the old follow-up): one new FTS5 segment at most,
    and the index still equals a scan, vocabulary included."""
    catalog = MemoryCatalog(tmp_path)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_text("".join(_line(i, "gone" if i % 3 else "kept") + "\n" for i in range(1950)))
    assert catalog.search("entry", limit=5)  # built
    with sqlite3.connect(catalog.index_path) as conn:
        before = _struct_segments(conn)
    assert catalog.delete_by_branch("gone") == 1300
    with sqlite3.connect(catalog.index_path) as conn:
        after = _struct_segments(conn)
        assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 650  # followed, not rebuilt
    assert after <= before + 1
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    for query in ("entry", "word3", "common a.b", "g2"):
        assert catalog.search(query, limit=1000) == scan.search(query, limit=1000), query
    assert catalog.check_index().equal
