"""Alembic environment for the memstore index schema (shipped as ``memstore._migrations``)."""
