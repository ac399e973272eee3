"""The derived SQLite index: disposable, rebuilt from the canonical files at any time.

Only :mod:`memstore.index.schema` and :mod:`memstore.index.migrate` import
SQLAlchemy and Alembic, and only when an index file is created or migrated; the
per-query path uses the stdlib ``sqlite3`` module.
"""
