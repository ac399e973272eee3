"""Alembic environment: always run with a connection handed over by memstore.

The dialect picks the history: SQLite index files follow the main branch (up to
``0004``), a PostgreSQL team index the ``team`` branch; each has its own metadata.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
if connection.dialect.name == "postgresql":
    from memstore.index.pg.schema import metadata

    context.configure(connection=connection, target_metadata=metadata)
else:
    from memstore.index.schema import metadata

    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
