"""The word index without per-row column sizes (``columnsize=0``).

``doc_fts_docsize`` held each row's token count per column, which only FTS5's ranking
functions (bm25, ``rank``) read; memstore scores rows itself and never asks them.
Writing it was about a sixth of a full build's FTS5 time and 13 MB at a million
entries.  The table is recreated and refilled from ``doc`` (the terms are the same,
so the vocabulary stays exact); no row of the catalog is parsed again.  The table's
settings (a build's ``hashsize``) carry over, so the file ends as a fresh build's.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = "c, t, mc, mt, content='doc', content_rowid='id', tokenize='ascii', detail=column"


def _recreate(options: str) -> None:
    """doc_fts again with ``options``, its settings kept, refilled from ``doc``."""
    bind = op.get_bind()
    settings = bind.execute(sa.text("SELECT k, v FROM doc_fts_config WHERE k != 'version' ORDER BY k")).fetchall()
    op.execute("DROP TABLE doc_fts")
    op.execute(f"CREATE VIRTUAL TABLE doc_fts USING fts5({options})")
    for key, value in settings:
        bind.execute(sa.text("INSERT INTO doc_fts(doc_fts, rank) VALUES (:key, :value)"), {"key": key, "value": value})
    op.execute("INSERT INTO doc_fts(doc_fts) VALUES ('rebuild')")


def upgrade() -> None:
    _recreate(f"{_COLUMNS}, columnsize=0")


def downgrade() -> None:
    _recreate(_COLUMNS)
