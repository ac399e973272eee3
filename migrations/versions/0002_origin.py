"""Record where an index file was built: its own (device, inode) and a per-machine tag.

A file memstore built keeps its inode through the rename into place; a file that was
committed, copied or crafted elsewhere cannot carry a matching record, so it is
treated as foreign and replaced by a new file.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "origin",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("dev", sa.Integer, nullable=False),
        sa.Column("ino", sa.Integer, nullable=False),
        sa.Column("machine", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("origin")
