# ruff: noqa: E501  (generated DDL, kept byte for byte as SQLite stores it)
"""The objects each older schema version left in an index file, as SQLite stores their DDL.

A handle that may write migrates an older file, and a migration that fails on damage
sets the file aside.  A read-only handle never writes (DESIGN.md §9), so it checks the
file as it stands instead: its ``sqlite_master`` must equal what the migrations leave at
its version (FTS5 shadow tables included, nothing else), as ``trust.schema_problem`` does
at the newest one.  Generated from the migrations with ``python -m memstore.index.old_schemas``;
a test migrates an empty file with Alembic to each revision and compares, so this copy
cannot drift.  Loaded only when an older file is found.
"""

from __future__ import annotations

OLD_STATEMENTS: dict[int, tuple[str, ...]] = {
    1: (
        'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)',
        'CREATE TABLE source (\n\tname TEXT NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tsize INTEGER NOT NULL, \n\tmtime_ns INTEGER NOT NULL, \n\tctime_ns INTEGER NOT NULL, \n\tindexed_to INTEGER NOT NULL, \n\ttail_end INTEGER, \n\thead_hash BLOB NOT NULL, \n\tedge_hash BLOB NOT NULL, \n\tbody_hash BLOB NOT NULL, \n\trecorded_ns INTEGER NOT NULL, \n\trows INTEGER NOT NULL, \n\tcorrupt INTEGER NOT NULL, \n\tblank INTEGER NOT NULL, \n\tPRIMARY KEY (name)\n)',
        'CREATE TABLE doc (\n\tid INTEGER NOT NULL, \n\tmid TEXT, \n\tc TEXT NOT NULL, \n\tt TEXT NOT NULL, \n\tcreated_at TEXT, \n\tbonus INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX doc_mid ON doc (mid)',
        'CREATE TABLE pos (\n\tid INTEGER NOT NULL, \n\toff INTEGER NOT NULL, \n\tlen INTEGER NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE TABLE tagvocab (\n\ttid INTEGER NOT NULL, \n\ttag TEXT NOT NULL, \n\tn INTEGER NOT NULL, \n\tPRIMARY KEY (tid), \n\tUNIQUE (tag)\n)',
        'CREATE TABLE entry_tag (\n\ttid INTEGER NOT NULL, \n\tid INTEGER NOT NULL, \n\tPRIMARY KEY (tid, id)\n)\n WITHOUT ROWID\n\n',
        'CREATE TABLE card (\n\tid INTEGER NOT NULL, \n\tcard_id TEXT, \n\tfile_path TEXT, \n\terror_type TEXT, \n\ttimestamp FLOAT, \n\texpires_at FLOAT, \n\tinvalidated INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tdata TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX card_card_id ON card (card_id)',
        'CREATE TABLE card_kw (\n\tword TEXT NOT NULL, \n\tcard INTEGER NOT NULL, \n\tPRIMARY KEY (word, card)\n)\n WITHOUT ROWID\n\n',
        'CREATE INDEX doc_walk ON doc(bonus, created_at DESC, id)',
        'CREATE INDEX doc_odd ON doc(odd) WHERE odd = 1',
        'CREATE INDEX card_odd ON card(odd) WHERE odd = 1',
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, content='doc', content_rowid='id', tokenize='trigram case_sensitive 1', detail=column)",
    ),
    2: (
        'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)',
        'CREATE TABLE source (\n\tname TEXT NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tsize INTEGER NOT NULL, \n\tmtime_ns INTEGER NOT NULL, \n\tctime_ns INTEGER NOT NULL, \n\tindexed_to INTEGER NOT NULL, \n\ttail_end INTEGER, \n\thead_hash BLOB NOT NULL, \n\tedge_hash BLOB NOT NULL, \n\tbody_hash BLOB NOT NULL, \n\trecorded_ns INTEGER NOT NULL, \n\trows INTEGER NOT NULL, \n\tcorrupt INTEGER NOT NULL, \n\tblank INTEGER NOT NULL, \n\tPRIMARY KEY (name)\n)',
        'CREATE TABLE doc (\n\tid INTEGER NOT NULL, \n\tmid TEXT, \n\tc TEXT NOT NULL, \n\tt TEXT NOT NULL, \n\tcreated_at TEXT, \n\tbonus INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX doc_mid ON doc (mid)',
        'CREATE TABLE pos (\n\tid INTEGER NOT NULL, \n\toff INTEGER NOT NULL, \n\tlen INTEGER NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE TABLE tagvocab (\n\ttid INTEGER NOT NULL, \n\ttag TEXT NOT NULL, \n\tn INTEGER NOT NULL, \n\tPRIMARY KEY (tid), \n\tUNIQUE (tag)\n)',
        'CREATE TABLE entry_tag (\n\ttid INTEGER NOT NULL, \n\tid INTEGER NOT NULL, \n\tPRIMARY KEY (tid, id)\n)\n WITHOUT ROWID\n\n',
        'CREATE TABLE card (\n\tid INTEGER NOT NULL, \n\tcard_id TEXT, \n\tfile_path TEXT, \n\terror_type TEXT, \n\ttimestamp FLOAT, \n\texpires_at FLOAT, \n\tinvalidated INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tdata TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX card_card_id ON card (card_id)',
        'CREATE TABLE card_kw (\n\tword TEXT NOT NULL, \n\tcard INTEGER NOT NULL, \n\tPRIMARY KEY (word, card)\n)\n WITHOUT ROWID\n\n',
        'CREATE INDEX doc_walk ON doc(bonus, created_at DESC, id)',
        'CREATE INDEX doc_odd ON doc(odd) WHERE odd = 1',
        'CREATE INDEX card_odd ON card(odd) WHERE odd = 1',
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, content='doc', content_rowid='id', tokenize='trigram case_sensitive 1', detail=column)",
        'CREATE TABLE origin (\n\tid INTEGER NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tmachine TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
    ),
    3: (
        'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)',
        'CREATE TABLE source (\n\tname TEXT NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tsize INTEGER NOT NULL, \n\tmtime_ns INTEGER NOT NULL, \n\tctime_ns INTEGER NOT NULL, \n\tindexed_to INTEGER NOT NULL, \n\ttail_end INTEGER, \n\thead_hash BLOB NOT NULL, \n\tedge_hash BLOB NOT NULL, \n\tbody_hash BLOB NOT NULL, \n\trecorded_ns INTEGER NOT NULL, \n\trows INTEGER NOT NULL, \n\tcorrupt INTEGER NOT NULL, \n\tblank INTEGER NOT NULL, \n\tPRIMARY KEY (name)\n)',
        'CREATE TABLE doc (\n\tid INTEGER NOT NULL, \n\tmid TEXT, \n\tc TEXT NOT NULL, \n\tt TEXT NOT NULL, \n\tcreated_at TEXT, \n\tbonus INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, br TEXT, run TEXT, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX doc_mid ON doc (mid)',
        'CREATE TABLE pos (\n\tid INTEGER NOT NULL, \n\toff INTEGER NOT NULL, \n\tlen INTEGER NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE TABLE tagvocab (\n\ttid INTEGER NOT NULL, \n\ttag TEXT NOT NULL, \n\tn INTEGER NOT NULL, \n\tPRIMARY KEY (tid), \n\tUNIQUE (tag)\n)',
        'CREATE TABLE entry_tag (\n\ttid INTEGER NOT NULL, \n\tid INTEGER NOT NULL, \n\tPRIMARY KEY (tid, id)\n)\n WITHOUT ROWID\n\n',
        'CREATE TABLE card (\n\tid INTEGER NOT NULL, \n\tcard_id TEXT, \n\tfile_path TEXT, \n\terror_type TEXT, \n\ttimestamp FLOAT, \n\texpires_at FLOAT, \n\tinvalidated INTEGER NOT NULL, \n\todd INTEGER DEFAULT 0 NOT NULL, \n\tdata TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX card_card_id ON card (card_id)',
        'CREATE TABLE card_kw (\n\tword TEXT NOT NULL, \n\tcard INTEGER NOT NULL, \n\tPRIMARY KEY (word, card)\n)\n WITHOUT ROWID\n\n',
        'CREATE INDEX doc_walk ON doc(bonus, created_at DESC, id)',
        'CREATE INDEX doc_odd ON doc(odd) WHERE odd = 1',
        'CREATE INDEX card_odd ON card(odd) WHERE odd = 1',
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, content='doc', content_rowid='id', tokenize='trigram case_sensitive 1', detail=column)",
        'CREATE TABLE origin (\n\tid INTEGER NOT NULL, \n\tdev INTEGER NOT NULL, \n\tino INTEGER NOT NULL, \n\tmachine TEXT NOT NULL, \n\tPRIMARY KEY (id)\n)',
        'CREATE INDEX doc_branch ON doc(br) WHERE br IS NOT NULL',
        'CREATE INDEX doc_run ON doc(run) WHERE run IS NOT NULL',
    ),
    4: (
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
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, mc, mt, content='doc', content_rowid='id', tokenize='ascii', detail=column)",
        'CREATE TABLE term (\n\tid INTEGER NOT NULL, \n\tkind INTEGER NOT NULL, \n\ttext TEXT NOT NULL, \n\tn INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tCONSTRAINT term_kind_text UNIQUE (kind, text)\n)',
        "CREATE VIRTUAL TABLE term_tri USING fts5(c, t, content='', tokenize='trigram case_sensitive 1', detail=column)",
        "CREATE VIRTUAL TABLE term_gram USING fts5(c, t, content='', tokenize='ascii', detail=column)",
        'CREATE INDEX doc_walk ON doc(bonus DESC, created_at DESC, id)',
    ),
}


def generate() -> dict[int, tuple[str, ...]]:
    """The DDL of an empty index migrated by Alembic to each older version, minus what SQLite derives."""
    from memstore.index.schema_sql import generate as generate_at
    from memstore.index.settings import SCHEMA_VERSION

    return {version: generate_at(f"{version:04d}") for version in range(1, SCHEMA_VERSION)}


if __name__ == "__main__":  # pragma: no cover - a developer's tool
    body = "".join(
        f"    {version}: (\n{''.join(f'        {statement!r},{chr(10)}' for statement in statements)}    ),\n"
        for version, statements in generate().items()
    )
    print(f"OLD_STATEMENTS: dict[int, tuple[str, ...]] = {{\n{body}}}")
