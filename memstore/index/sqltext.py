"""Which strings SQL can hold exactly: the one check every index path shares.

SQLite (and PostgreSQL) store text as UTF-8, so a lone surrogate cannot be stored at
all, and a NUL ends a string for some functions (``instr`` among them).  Rows holding
such text are kept out of SQL and scored in Python; query values holding it can match
no SQL-held row.
"""

from __future__ import annotations


def encodable(value: str | None) -> bool:
    """True when ``value`` (None counts) can be stored as UTF-8 text."""
    if value is None or value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sql_safe(value: str | None) -> bool:
    """True when SQL compares ``value`` exactly: encodable, and without NUL."""
    return value is None or ("\x00" not in value and encodable(value))
