"""The team index on PostgreSQL: many named sources in one shared database (issue 15).

Imported only when a PostgreSQL URL is used: it loads SQLAlchemy and psycopg.
"""
