"""The word index: FTS5 over terms (runs of letters, digits and non-ASCII) and marks, with a vocabulary.

Replaces the trigram index over whole rows (``doc_fts``): the rows of a token are the
rows of the vocabulary terms containing it, found through ``term_tri`` (trigrams of
the terms) or ``term_gram`` (their one- and two-character substrings).  Much smaller
to build and to search at a million entries; see memstore.index.terms.

Revision ID: 0004
Revises: 0003

The catalog source's rows are rebuilt from the file on the next query.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP TABLE IF EXISTS doc_fts")
    # The marks of each column: its ASCII separators other than whitespace, as terms (x22 for '"').
    op.add_column("doc", sa.Column("mc", sa.Text, nullable=False, server_default=sa.text("''")))
    op.add_column("doc", sa.Column("mt", sa.Text, nullable=False, server_default=sa.text("''")))
    op.execute(
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, mc, mt, content='doc', content_rowid='id', "
        "tokenize='ascii', detail=column)"
    )
    op.create_table(
        "term",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.UniqueConstraint("kind", "text", name="term_kind_text"),
    )
    op.execute(
        "CREATE VIRTUAL TABLE term_tri USING fts5(c, t, content='', "
        "tokenize='trigram case_sensitive 1', detail=column)"
    )
    op.execute("CREATE VIRTUAL TABLE term_gram USING fts5(c, t, content='', tokenize='ascii', detail=column)")
    # One walk over every bonus class, best class first, newest first within a class.
    op.execute("DROP INDEX IF EXISTS doc_walk")
    op.execute("CREATE INDEX doc_walk ON doc(bonus DESC, created_at DESC, id)")
    op.execute("DELETE FROM doc")
    op.execute("DELETE FROM pos")
    # Tags are found through the word index's tags column now (a superset, checked exactly).
    op.drop_table("entry_tag")
    op.drop_table("tagvocab")
    op.execute("DELETE FROM source WHERE name = 'memory'")


def downgrade() -> None:
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
    op.execute("DROP INDEX IF EXISTS doc_walk")
    op.execute("CREATE INDEX doc_walk ON doc(bonus, created_at DESC, id)")
    op.execute("DROP TABLE IF EXISTS term_gram")
    op.execute("DROP TABLE IF EXISTS term_tri")
    op.drop_table("term")
    op.execute("DROP TABLE IF EXISTS doc_fts")
    op.drop_column("doc", "mt")
    op.drop_column("doc", "mc")
    op.execute(
        "CREATE VIRTUAL TABLE doc_fts USING fts5(c, t, content='doc', content_rowid='id', "
        "tokenize='trigram case_sensitive 1', detail=column)"
    )
    op.execute("DELETE FROM source WHERE name = 'memory'")
