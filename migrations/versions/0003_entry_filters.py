"""Branch and run columns on ``doc`` for the search and list filters.

Revision ID: 0003
Revises: 0002

Rows already indexed have no values in the new columns, so the catalog source's
recorded state is dropped: the next query rebuilds it from the file.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("doc", sa.Column("br", sa.Text))
    op.add_column("doc", sa.Column("run", sa.Text))
    op.execute("CREATE INDEX doc_branch ON doc(br) WHERE br IS NOT NULL")
    op.execute("CREATE INDEX doc_run ON doc(run) WHERE run IS NOT NULL")
    op.execute("DELETE FROM source WHERE name = 'memory'")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS doc_run")
    op.execute("DROP INDEX IF EXISTS doc_branch")
    op.drop_column("doc", "run")
    op.drop_column("doc", "br")
    op.execute("DELETE FROM source WHERE name = 'memory'")
