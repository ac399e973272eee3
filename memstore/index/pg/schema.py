"""The team index schema, declared with SQLAlchemy Core (indexes PostgreSQL-specific, as in the migration).

One row per named source (``team_source``, its ``sid`` the registration order);
its rows in ``team_doc``, partitioned by ``part``: every full load of a source fills
a new partition, built and indexed while nothing reads it, then made the source's
current one in one short transaction.  Terms are integer ids into the shared
vocabulary ``team_term`` (integer arrays index three times faster than text ones,
docs/team-index.md); ``team_count`` holds per source how many rows hold each term,
for the planner's estimates.  Text columns use the "C" collation whatever the
database's: ``created_at`` ties must break in code point order, as Python's do.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    desc,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

TEAM_REVISION = "t001"
"""The team branch's head (``team@head``): the schema this code reads and writes."""

metadata = MetaData()


def _text() -> Text:
    return Text(collation="C")


team_source = Table(
    "team_source",
    metadata,
    Column("sid", Integer, primary_key=True, autoincrement=True),
    Column("name", _text(), nullable=False),
    Column("part", Integer),
    Column("next_id", BigInteger, nullable=False, server_default=text("1")),
    Column("dev", BigInteger),
    Column("ino", BigInteger),
    Column("size", BigInteger),
    Column("mtime_ns", BigInteger),
    Column("ctime_ns", BigInteger),
    Column("indexed_to", BigInteger),
    Column("tail_end", BigInteger),
    Column("head_hash", LargeBinary),
    Column("edge_hash", LargeBinary),
    Column("body_hash", LargeBinary),
    Column("recorded_ns", BigInteger),
    Column("rows", BigInteger, nullable=False, server_default=text("0")),
    Column("corrupt", BigInteger, nullable=False, server_default=text("0")),
    Column("blank", BigInteger, nullable=False, server_default=text("0")),
    Column("caught_up_at", DateTime(timezone=True)),
    Column("cards_hash", LargeBinary),
    Column("cards", Integer, nullable=False, server_default=text("0")),
    UniqueConstraint("name", name="team_source_name"),
)

team_doc = Table(
    "team_doc",
    metadata,
    Column("part", Integer, nullable=False),
    Column("id", BigInteger, nullable=False),
    Column("sid", Integer, nullable=False),
    Column("c", _text(), nullable=False),
    Column("t", _text(), nullable=False),
    Column("created_at", _text()),
    Column("bonus", SmallInteger, nullable=False),
    Column("odd", Boolean, nullable=False),
    Column("off", BigInteger, nullable=False),
    Column("len", Integer, nullable=False),
    Column("cterms", ARRAY(Integer), nullable=False),
    Column("tterms", ARRAY(Integer), nullable=False),
    Column("raw", LargeBinary, nullable=False),
    PrimaryKeyConstraint("part", "id", name="team_doc_pkey"),
    Index("team_doc_walk", desc("bonus"), desc("created_at"), "sid", "id"),
    Index("team_doc_cterms", "cterms", postgresql_using="gin"),
    Index("team_doc_tterms", "tterms", postgresql_using="gin"),
    Index("team_doc_odd", "sid", postgresql_where=text("odd")),
    postgresql_partition_by="LIST (part)",
)

team_term = Table(
    "team_term",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", SmallInteger, nullable=False),
    Column("text", _text(), nullable=False),
    Column("grams", ARRAY(_text()), nullable=False),
    UniqueConstraint("kind", "text", name="team_term_kind_text"),
    Index("team_term_trgm", "text", postgresql_using="gin", postgresql_ops={"text": "gin_trgm_ops"}),
    Index("team_term_grams", "grams", postgresql_using="gin"),
)

team_count = Table(
    "team_count",
    metadata,
    Column("sid", Integer, nullable=False),
    Column("tid", Integer, nullable=False),
    Column("n", Integer, nullable=False),
    PrimaryKeyConstraint("tid", "sid", name="team_count_pkey"),
)

team_card = Table(
    "team_card",
    metadata,
    Column("sid", Integer, nullable=False),
    Column("ord", Integer, nullable=False),
    Column("card_id", _text()),
    Column("file_path", _text()),
    Column("error_type", _text()),
    Column("timestamp", Float, nullable=False),
    Column("expires_at", Float),
    Column("invalidated", Boolean, nullable=False),
    Column("odd", Boolean, nullable=False),
    Column("keywords", ARRAY(_text()), nullable=False),
    Column("data", Text, nullable=False),
    PrimaryKeyConstraint("sid", "ord", name="team_card_pkey"),
)

team_retired = Table(
    "team_retired",
    metadata,
    Column("part", Integer, primary_key=True, autoincrement=False),
    Column("retired_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)
"""Partitions no source points at any more, dropped once no snapshot can still read them."""
