"""The first index schema: sources, documents with a trigram FTS5 table, tag vocabulary, cards.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "source",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("dev", sa.Integer, nullable=False),
        sa.Column("ino", sa.Integer, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("mtime_ns", sa.Integer, nullable=False),
        sa.Column("ctime_ns", sa.Integer, nullable=False),
        sa.Column("indexed_to", sa.Integer, nullable=False),
        sa.Column("tail_end", sa.Integer),
        sa.Column("head_hash", sa.LargeBinary, nullable=False),
        sa.Column("edge_hash", sa.LargeBinary, nullable=False),
        sa.Column("body_hash", sa.LargeBinary, nullable=False),
        sa.Column("recorded_ns", sa.Integer, nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("corrupt", sa.Integer, nullable=False),
        sa.Column("blank", sa.Integer, nullable=False),
    )
    op.create_table(
        "doc",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("mid", sa.Text),
        sa.Column("c", sa.Text, nullable=False),
        sa.Column("t", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text),
        sa.Column("bonus", sa.Integer, nullable=False),
        sa.Column("odd", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("doc_mid", "doc", ["mid"])
    op.create_table(
        "pos",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("off", sa.Integer, nullable=False),
        sa.Column("len", sa.Integer, nullable=False),
    )
    op.create_table(
        "tagvocab",
        sa.Column("tid", sa.Integer, primary_key=True),
        sa.Column("tag", sa.Text, nullable=False, unique=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    op.create_table(
        "entry_tag",
        sa.Column("tid", sa.Integer, primary_key=True),
        sa.Column("id", sa.Integer, primary_key=True),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "card",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("card_id", sa.Text),
        sa.Column("file_path", sa.Text),
        sa.Column("error_type", sa.Text),
        sa.Column("timestamp", sa.Float),
        sa.Column("expires_at", sa.Float),
        sa.Column("invalidated", sa.Integer, nullable=False),
        sa.Column("odd", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("card_card_id", "card", ["card_id"])
    op.create_table(
        "card_kw",
        sa.Column("word", sa.Text, primary_key=True),
        sa.Column("card", sa.Integer, primary_key=True),
        sqlite_with_rowid=False,
    )
    op.execute("CREATE INDEX doc_walk ON doc(bonus, created_at DESC, id)")
    op.execute("CREATE INDEX doc_odd ON doc(odd) WHERE odd = 1")
    op.execute("CREATE INDEX card_odd ON card(odd) WHERE odd = 1")
    op.execute(
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, content='doc', content_rowid='id', "
        "tokenize='trigram case_sensitive 1', detail=column)"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS doc_fts")
    for table in ("card_kw", "card", "entry_tag", "tagvocab", "pos", "doc", "source"):
        op.drop_table(table)
