# ruff: noqa: E501  (generated DDL, kept byte for byte as SQLite stores it)
"""The objects memstore's migrations leave in an index file, as SQLite stores their DDL.

Generated from the migrations (which tests keep equal to the declared schema in
:mod:`memstore.index.schema`); a test fails when this copy falls behind, and it is
regenerated with ``python -m memstore.index.schema_sql``.  Opening an index replays
these statements into an in-memory database and requires the file's ``sqlite_master``
to equal that reference exactly: the same tables, indexes and FTS5 shadow tables,
and nothing else (no triggers, views or extra objects).  Kept here, not derived at
run time, because the warm query path must not import SQLAlchemy or Alembic.
"""

from __future__ import annotations

CREATE_STATEMENTS: tuple[str, ...] = (
    'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)',
    'CREATE TABLE source (\n\tname TEXT NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tsize INTEGER NOT NULL, \n\tmtime_ns INTEGER NOT NULL, \n\tctime_ns INTEGER NOT NULL, \n\tindexed_to INTEGER NOT NULL, \n\ttail_end INTEGER, \n\thead_hash BLOB NOT NULL, \n\tedge_hash BLOB NOT NULL, \n\tbody_hash BLOB NOT NULL, \n\trecorded_ns INTEGER NOT NULL, \n\trows INTEGER NOT NULL, \n\tcorrupt INTEGER NOT NULL, \n\tblank INTEGER NOT NULL, \n\tPRIMARY KEY (name)\n)',
    "CREATE TABLE doc (\n\tid INTEGER NOT NULL, \n\tmid TEXT, \n\tc TEXT NOT NULL, \n\tt TEXT NOT NULL, \n\tcreated_at TEXT, \n\tbonus INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, br TEXT, run TEXT, mc TEXT DEFAULT '' NOT NULL, mt TEXT DEFAULT '' NOT NULL, \n\tPRIMARY KEY (id)\n)",
    'CREATE INDEX doc_mid ON doc (mid)',
    'CREATE TABLE pos (\n\tid INTEGER NOT NULL, \n\toff INTEGER NOT NULL, \n\tlen INTEGER NOT NULL, \n\tPRIMARY KEY (id)\n)',
    'CREATE TABLE card (\n\tid INTEGER NOT NULL, \n\tcard_id TEXT, \n\tfile_path TEXT, \n\terror_type TEXT, \n\ttimestamp FLOAT, \n\texpires_at FLOAT, \n\tinvalidated INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tdata TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
    'CREATE INDEX card_card_id ON card (card_id)',
    'CREATE TABLE card_kw (\n\tword TEXT NOT NULL, \n\tcard INTEGER NOT NULL, \n\tPRIMARY KEY (word, card)\n)\n WITHOUT ROWID\n\n',
    'CREATE INDEX doc_odd ON doc(odd) WHERE odd = 1',
    'CREATE INDEX card_odd ON card(odd) WHERE odd = 1',
    'CREATE TABLE origin (\n\tid INTEGER NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tmachine TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
    'CREATE INDEX doc_branch ON doc(br) WHERE br IS NOT NULL',
    'CREATE INDEX doc_run ON doc(run) WHERE run IS NOT NULL',
    'CREATE TABLE term (\n\tid INTEGER NOT NULL, \n\tkind INTEGER NOT NULL, \n\ttext TEXT NOT NULL, \n\tn INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tCONSTRAINT term_kind_text UNIQUE (kind, text)\n)',
    "CREATE VIRTUAL TABLE term_tri USING fts5(c, t, content='', tokenize='trigram case_sensitive 1', detail=column)",
    "CREATE VIRTUAL TABLE term_gram USING fts5(c, t, content='', tokenize='ascii', detail=column)",
    'CREATE INDEX doc_walk ON doc(bonus DESC, created_at DESC, id)',
    "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, mc, mt, content='doc', content_rowid='id', tokenize='ascii', detail=column, columnsize=0)",
)


MASTER_DIGEST = "a067089dd6a434626ee7144c363af7bd0d96ac2cd6628ea4c1c8b2301879d369"
"""``trust.master_digest`` of the ``sqlite_master`` these statements leave (FTS5 shadow tables
included) under SQLite MASTER_SQLITE: a file whose rows have this digest needs no reference built."""
MASTER_SQLITE = "3.40.1"


def generate(revision: str | None = None) -> tuple[str, ...]:
    """The DDL of an empty index freshly migrated (to ``revision``, else the newest), minus what SQLite derives itself."""
    import sqlite3
    import tempfile
    from pathlib import Path

    from memstore.index.migrate import upgrade_to
    from memstore.index.settings import SCHEMA_REVISION

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "reference.sqlite3"
        upgrade_to(path, revision or SCHEMA_REVISION)
        conn = sqlite3.connect(path)
        try:
            shadow = {name for _schema, name, kind, *_ in conn.execute("PRAGMA table_list") if kind == "shadow"}
            rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid").fetchall()
        finally:
            conn.close()
    return tuple(sql for name, sql in rows if name not in shadow)


def generate_digest() -> tuple[str, str]:
    """The digest of the reference ``sqlite_master`` under this SQLite, and its version."""
    import sqlite3

    from memstore.index.trust import master_digest, master_of

    return master_digest(list(master_of(generate()))), sqlite3.sqlite_version


if __name__ == "__main__":  # pragma: no cover - a developer's tool
    body = "".join(f"    {statement!r},\n" for statement in generate())
    print(f"CREATE_STATEMENTS: tuple[str, ...] = (\n{body})")
    digest, version = generate_digest()
    print(f"MASTER_DIGEST = {digest!r}\nMASTER_SQLITE = {version!r}")
