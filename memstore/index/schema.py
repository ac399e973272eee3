"""The index schema, declared with SQLAlchemy Core (FTS5 tables as raw DDL).

Imported only when an index is created or migrated: SQLAlchemy costs ~160 ms to import.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, LargeBinary, MetaData, Table, Text, UniqueConstraint, text

metadata = MetaData()

source = Table(
    "source",
    metadata,
    Column("name", Text, primary_key=True),
    Column("dev", Integer, nullable=False),
    Column("ino", Integer, nullable=False),
    Column("size", Integer, nullable=False),
    Column("mtime_ns", Integer, nullable=False),
    Column("ctime_ns", Integer, nullable=False),
    Column("indexed_to", Integer, nullable=False),
    Column("tail_end", Integer),
    Column("head_hash", LargeBinary, nullable=False),
    Column("edge_hash", LargeBinary, nullable=False),
    Column("body_hash", LargeBinary, nullable=False),
    Column("recorded_ns", Integer, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("corrupt", Integer, nullable=False),
    Column("blank", Integer, nullable=False),
)

doc = Table(
    "doc",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("mid", Text),
    Column("c", Text, nullable=False),
    Column("t", Text, nullable=False),
    Column("created_at", Text),
    Column("bonus", Integer, nullable=False),
    Column("odd", Integer, nullable=False, server_default=text("0")),
    Column("br", Text),
    Column("run", Text),
    Column("mc", Text, nullable=False, server_default=text("''")),
    Column("mt", Text, nullable=False, server_default=text("''")),
    Index("doc_mid", "mid"),
)

# Where each row's line sits in the file: narrow, so a rewrite shifts offsets cheaply.
pos = Table(
    "pos",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("off", Integer, nullable=False),
    Column("len", Integer, nullable=False),
)

# The vocabulary of the word index: every term of doc_fts, per column (kind 0 content,
# 1 tags), with how many rows hold it (an estimate for the planner, never for answers).
term = Table(
    "term",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("n", Integer, nullable=False),
    UniqueConstraint("kind", "text", name="term_kind_text"),
)

card = Table(
    "card",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("card_id", Text),
    Column("file_path", Text),
    Column("error_type", Text),
    Column("timestamp", Float),
    Column("expires_at", Float),
    Column("invalidated", Integer, nullable=False),
    Column("odd", Integer, nullable=False, server_default=text("0")),
    Column("data", Text, nullable=False),
    Index("card_card_id", "card_id"),
)

card_kw = Table(
    "card_kw",
    metadata,
    Column("word", Text, primary_key=True),
    Column("card", Integer, primary_key=True),
    sqlite_with_rowid=False,
)

# Where this file was built: its own (dev, ino) when it was created, and a per-machine tag.
# One row; a file whose row does not match its actual fstat was not built here.
origin = Table(
    "origin",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("dev", Integer, nullable=False),
    Column("ino", Integer, nullable=False),
    Column("machine", Text, nullable=False),
)

# Created by the migrations as raw DDL (SQLAlchemy cannot express them); listed here so
# tests can compare a migrated database with this declaration.
RAW_OBJECTS = ("doc_walk", "doc_odd", "doc_fts", "card_odd", "doc_branch", "doc_run", "term_tri", "term_gram")
