"""The SQLite word index's vocabulary: every term of ``doc_fts``, findable by any piece.

``term`` holds each (kind, text) once with the number of rows holding it; ``term_tri``
(trigrams) and ``term_gram`` (one- and two-character substrings) find the terms that
contain a query piece, the first for pieces of three characters or more, the second
for shorter ones.  A term missing here would hide its rows from every search, so the
vocabulary changes in the same transaction as ``doc_fts`` and ``check`` compares it
with FTS5's own list.  Counts only steer the planner; answers never depend on them.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence

from memstore.index.terms import CONTENT, CONTENT_MARKS, TAG_MARKS, TAGS, gram_text, text_terms

TermCounts = Counter[tuple[int, str]]
"""(kind, term) -> rows holding it."""

_VOCAB = "temp.memstore_vocab"


COLUMN_KINDS = {"c": CONTENT, "t": TAGS, "mc": CONTENT_MARKS, "mt": TAG_MARKS}
"""doc_fts column -> term kind."""
LOOKED_UP = (CONTENT, TAGS)
"""Kinds found by a piece of a token (marks are looked up whole)."""


def _kind_of(column: str) -> str:
    """SQL mapping an fts5vocab column name to its term kind."""
    return f"CASE {column} " + " ".join(f"WHEN '{col}' THEN {kind}" for col, kind in COLUMN_KINDS.items()) + " END"


def row_terms(counts: TermCounts, content: str, tags: str, content_marks: str, tag_marks: str) -> None:
    """Count one row's terms (each distinct term once per column)."""
    counts.update((CONTENT, term) for term in text_terms(content))
    counts.update((TAGS, term) for term in text_terms(tags))
    counts.update((CONTENT_MARKS, term) for term in content_marks.split())
    counts.update((TAG_MARKS, term) for term in tag_marks.split())


_SCRATCH = "memstore_counted"
SCRATCH_HASHSIZE = 256 * 1024 * 1024
"""Pending bytes the scratch table holds before it writes a segment."""
_SCRATCH_VOCAB = "memstore_counted_vocab"


def values_counted(rows: Sequence[tuple[str, str, str, str]]) -> TermCounts:
    """The counts of rows (c, t, mc, mt) as FTS5's own tokenizer files them.

    The rows go into a scratch FTS5 table with doc_fts's tokenizer and detail; its
    ``col`` vocabulary is then what they hold in doc_fts (each term once per row and
    column), counted in C: about twice as fast as :func:`row_terms` over each row.
    The scratch table lives in a private in-memory database that shares nothing with
    the index's connection, so it counts on another thread while that connection
    deletes the rows (sqlite3 releases the GIL in both).
    """
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("BEGIN")  # one transaction: FTS5 holds every row until the table is read
        conn.execute(
            f"CREATE VIRTUAL TABLE {_SCRATCH} USING fts5(c, t, mc, mt, tokenize='ascii', detail=column, columnsize=0)"
        )
        conn.execute(f"INSERT INTO {_SCRATCH}({_SCRATCH}, rank) VALUES ('hashsize', ?)", (SCRATCH_HASHSIZE,))
        conn.executemany(f"INSERT INTO {_SCRATCH}(c, t, mc, mt) VALUES (?, ?, ?, ?)", rows)
        conn.execute(f"CREATE VIRTUAL TABLE {_SCRATCH_VOCAB} USING fts5vocab({_SCRATCH}, 'col')")
        return Counter(
            {
                (COLUMN_KINDS[column], term): n
                for term, column, n in conn.execute(f"SELECT term, col, doc FROM {_SCRATCH_VOCAB}")
            }
        )
    finally:
        conn.close()


def _columns(kind: int, value: str) -> tuple[str, str]:
    return (value, "") if kind == CONTENT else ("", value)


def _index_terms(conn: sqlite3.Connection, rows: Iterable[tuple[int, int, str]], *, command: str = "") -> None:
    """File terms (id, kind, text) under their trigrams and short substrings, or with
    ``command="delete"`` take them out (a contentless table is told the values it holds)."""
    rows = [row for row in rows if row[1] in LOOKED_UP]
    for table, text_of in (("term_tri", _same), ("term_gram", gram_text)):
        if command:
            sql = f"INSERT INTO {table}({table}, rowid, c, t) VALUES ('{command}', ?, ?, ?)"
        else:
            sql = f"INSERT INTO {table}(rowid, c, t) VALUES (?, ?, ?)"
        conn.executemany(sql, [(tid, *_columns(kind, text_of(text))) for tid, kind, text in rows])


def _same(text: str) -> str:
    return text


def add(conn: sqlite3.Connection, counts: TermCounts) -> None:
    """Count rows into the vocabulary; terms seen for the first time are indexed."""
    if not counts:
        return
    known: dict[tuple[int, str], int] = {}
    for kind in COLUMN_KINDS.values():
        texts = [text for term_kind, text in counts if term_kind == kind]
        for start in range(0, len(texts), 20_000):
            chunk = json.dumps(texts[start : start + 20_000])
            for tid, text in conn.execute(
                "SELECT id, text FROM term WHERE kind = ? AND text IN (SELECT value FROM json_each(?))", (kind, chunk)
            ):
                known[(kind, text)] = tid
    conn.executemany("UPDATE term SET n = n + ? WHERE id = ?", [(counts[key], tid) for key, tid in known.items()])
    fresh: list[tuple[int, int, str]] = []
    for (kind, text), n in counts.items():
        if (kind, text) not in known:
            cursor = conn.execute("INSERT INTO term(kind, text, n) VALUES (?, ?, ?)", (kind, text, n))
            fresh.append((int(cursor.lastrowid or 0), kind, text))
    _index_terms(conn, fresh)


def remove(conn: sqlite3.Connection, counts: TermCounts) -> None:
    """Count rows out of the vocabulary; a term no row holds any more goes, with its lookups.

    Dead terms would otherwise pile up with every add/delete cycle and make a piece that
    few live rows hold look common to the planner.
    """
    if not counts:
        return
    conn.executemany(
        "UPDATE term SET n = n - ? WHERE kind = ? AND text = ?", [(n, kind, text) for (kind, text), n in counts.items()]
    )
    dead: list[tuple[int, int, str]] = []
    for kind in COLUMN_KINDS.values():
        texts = [text for term_kind, text in counts if term_kind == kind]
        for start in range(0, len(texts), 20_000):
            chunk = json.dumps(texts[start : start + 20_000])
            dead.extend(
                conn.execute(
                    "SELECT id, kind, text FROM term WHERE kind = ? AND n <= 0"
                    " AND text IN (SELECT value FROM json_each(?))",
                    (kind, chunk),
                )
            )
    if not dead:
        return
    conn.executemany("DELETE FROM term WHERE id = ?", [(tid,) for tid, _kind, _text in dead])
    _index_terms(conn, dead, command="delete")


def clear(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM term")
    conn.execute("INSERT INTO term_tri(term_tri) VALUES ('delete-all')")
    conn.execute("INSERT INTO term_gram(term_gram) VALUES ('delete-all')")


def _open_fts_vocabulary(conn: sqlite3.Connection) -> None:
    # A temp table: it never becomes part of the index file's schema.
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_VOCAB} USING fts5vocab(main, doc_fts, 'col')")


def load_from_fts(conn: sqlite3.Connection) -> None:
    """Fill an empty vocabulary from FTS5's own term list (after a bulk build of doc_fts)."""
    _open_fts_vocabulary(conn)
    kind = _kind_of("col")
    conn.execute(f"INSERT INTO term(kind, text, n) SELECT {kind}, term, doc FROM {_VOCAB} WHERE doc > 0")
    _index_terms(conn, conn.execute("SELECT id, kind, text FROM term ORDER BY id").fetchall())


def differences(conn: sqlite3.Connection) -> int:
    """Terms whose row counts differ from FTS5's (or that FTS5 has and the vocabulary lacks),
    plus terms the lookup tables do not find: 0 for a sound vocabulary."""
    _open_fts_vocabulary(conn)
    kind_of_v = _kind_of("v.col")
    wrong = conn.execute(
        f"SELECT count(*) FROM {_VOCAB} v WHERE v.doc > 0 AND NOT EXISTS (SELECT 1 FROM term t"
        f" WHERE t.kind = {kind_of_v} AND t.text = v.term AND t.n = v.doc)"
    ).fetchone()[0]
    stale = conn.execute(
        f"SELECT count(*) FROM term t WHERE t.n != 0 AND NOT EXISTS (SELECT 1 FROM {_VOCAB} v"
        f" WHERE {kind_of_v} = t.kind AND v.term = t.text)"
    ).fetchone()[0]
    dead = conn.execute("SELECT count(*) FROM term WHERE n <= 0").fetchone()[0]
    lookups = _lookup_differences(conn)
    return int(wrong) + int(stale) + int(dead) + lookups


def _lookup_differences(conn: sqlite3.Connection) -> int:
    """Entries in which term_tri / term_gram differ from lookup tables built afresh from ``term``.

    A contentless table cannot say what text it filed under a rowid, but its instance
    list (term, rowid, column) can be compared with that of a copy filed from ``term``.
    """
    looked_up = ",".join(str(kind) for kind in LOOKED_UP)
    rows = conn.execute(f"SELECT id, kind, text FROM term WHERE kind IN ({looked_up})").fetchall()
    found = 0
    for table, text_of in (("term_tri", _same), ("term_gram", gram_text)):
        (options,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        fresh = f"memstore_fresh_{table}"
        conn.execute(f"DROP TABLE IF EXISTS temp.{fresh}")
        conn.execute(str(options).replace(f"VIRTUAL TABLE {table} ", f"VIRTUAL TABLE temp.{fresh} ", 1))
        conn.executemany(
            f"INSERT INTO temp.{fresh}(rowid, c, t) VALUES (?, ?, ?)",
            [(tid, *_columns(kind, text_of(text))) for tid, kind, text in rows],
        )
        for name in (table, fresh):
            conn.execute(f"DROP TABLE IF EXISTS temp.v_{name}")
            schema = "temp" if name == fresh else "main"
            conn.execute(f"CREATE VIRTUAL TABLE temp.v_{name} USING fts5vocab({schema}, {name}, 'instance')")
        for one, other in ((table, fresh), (fresh, table)):
            found += conn.execute(
                f"SELECT count(*) FROM (SELECT term, doc, col FROM temp.v_{one}"
                f" EXCEPT SELECT term, doc, col FROM temp.v_{other})"
            ).fetchone()[0]
        for name in (f"v_{table}", f"v_{fresh}", fresh):
            conn.execute(f"DROP TABLE IF EXISTS temp.{name}")
    return int(found)
