"""The team index on PostgreSQL: sources, partitioned rows, a shared vocabulary, cards.

A branch of its own (``team``): SQLite index files upgrade to their own head
(``0004``) and a PostgreSQL database to ``team@head``; the two never meet.

Revision ID: t001
Revises: (the team branch's base)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "t001"
down_revision = None
branch_labels = ("team",)
depends_on = None


def _c() -> sa.Text:
    return sa.Text(collation="C")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_table(
        "team_source",
        sa.Column("sid", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", _c(), nullable=False),
        sa.Column("part", sa.Integer),
        sa.Column("next_id", sa.BigInteger, nullable=False, server_default=sa.text("1")),
        sa.Column("dev", sa.BigInteger),
        sa.Column("ino", sa.BigInteger),
        sa.Column("size", sa.BigInteger),
        sa.Column("mtime_ns", sa.BigInteger),
        sa.Column("ctime_ns", sa.BigInteger),
        sa.Column("indexed_to", sa.BigInteger),
        sa.Column("tail_end", sa.BigInteger),
        sa.Column("head_hash", sa.LargeBinary),
        sa.Column("edge_hash", sa.LargeBinary),
        sa.Column("body_hash", sa.LargeBinary),
        sa.Column("recorded_ns", sa.BigInteger),
        sa.Column("rows", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("corrupt", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("blank", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("caught_up_at", sa.DateTime(timezone=True)),
        sa.Column("cards_hash", sa.LargeBinary),
        sa.Column("cards", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.UniqueConstraint("name", name="team_source_name"),
    )
    op.execute(
        "CREATE TABLE team_doc ("
        " part integer NOT NULL, id bigint NOT NULL, sid integer NOT NULL,"
        ' c text COLLATE "C" NOT NULL, t text COLLATE "C" NOT NULL, created_at text COLLATE "C",'
        " bonus smallint NOT NULL, odd boolean NOT NULL, off bigint NOT NULL, len integer NOT NULL,"
        " cterms integer[] NOT NULL, tterms integer[] NOT NULL, raw bytea NOT NULL,"
        " CONSTRAINT team_doc_pkey PRIMARY KEY (part, id)"
        ") PARTITION BY LIST (part)"
    )
    # The walk: best bonus class first, newest first, then the union's file order (sid, id).
    op.execute("CREATE INDEX team_doc_walk ON team_doc (bonus DESC, created_at DESC, sid, id)")
    op.execute("CREATE INDEX team_doc_cterms ON team_doc USING gin (cterms)")
    op.execute("CREATE INDEX team_doc_tterms ON team_doc USING gin (tterms)")
    op.execute("CREATE INDEX team_doc_odd ON team_doc (sid) WHERE odd")
    op.create_table(
        "team_term",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.SmallInteger, nullable=False),
        sa.Column("text", _c(), nullable=False),
        sa.Column("grams", postgresql.ARRAY(_c()), nullable=False),
        sa.UniqueConstraint("kind", "text", name="team_term_kind_text"),
    )
    op.execute("CREATE INDEX team_term_trgm ON team_term USING gin (text gin_trgm_ops)")
    op.execute("CREATE INDEX team_term_grams ON team_term USING gin (grams)")
    op.create_table(
        "team_count",
        sa.Column("sid", sa.Integer, nullable=False),
        sa.Column("tid", sa.Integer, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("tid", "sid", name="team_count_pkey"),
    )
    op.create_table(
        "team_card",
        sa.Column("sid", sa.Integer, nullable=False),
        sa.Column("ord", sa.Integer, nullable=False),
        sa.Column("card_id", _c()),
        sa.Column("file_path", _c()),
        sa.Column("error_type", _c()),
        sa.Column("timestamp", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("invalidated", sa.Boolean, nullable=False),
        sa.Column("odd", sa.Boolean, nullable=False),
        sa.Column("keywords", postgresql.ARRAY(_c()), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("sid", "ord", name="team_card_pkey"),
    )
    op.create_table(
        "team_retired",
        sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
    )
    op.execute("CREATE SEQUENCE team_part_seq")


def downgrade() -> None:
    for table in ("team_retired", "team_card", "team_count", "team_term", "team_doc", "team_source"):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP SEQUENCE IF EXISTS team_part_seq")
