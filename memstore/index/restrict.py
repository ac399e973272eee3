"""An :class:`~memstore.entry_filter.EntryFilter` as an SQL restriction on ``doc`` rows.

The restriction is one extra ``AND`` term over the alias ``d``, so every query that
already matches rows (scoring, walking, listing) can take it unchanged.  It is exact
for SQL-held rows: their tags never contain a newline (such rows are kept odd), so
``t`` is an unambiguous newline-joined list; branch and run are stored verbatim.
Odd rows are filtered in Python by :meth:`EntryFilter.admits`.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from memstore.entry_filter import EntryFilter
from memstore.index.fts import tag_expression
from memstore.index.sqltext import sql_safe


class Lookup(NamedTuple):
    """One indexed way to the rows a filter value admits (a superset of them)."""

    count_sql: str
    """Selects one row per candidate for ``?`` (the value); counted up to a cap."""
    value: str
    narrow: str
    """A term over ``d`` that holds for every admitted row and lets SQLite start from an index."""


class Restriction:
    """``sql`` is a boolean term over ``d``; ``params`` are its named parameters."""

    __slots__ = ("lookups", "params", "sql")

    def __init__(self, sql: str, params: dict[str, str] | None = None, lookups: tuple[Lookup, ...] = ()) -> None:
        self.sql = sql
        self.params: dict[str, str] = {} if params is None else params
        self.lookups = lookups

    @property
    def impossible(self) -> bool:
        return self.sql == "0"

    def narrowest(self, conn: sqlite3.Connection, cap: int) -> str | None:
        """The ``narrow`` term of the lookup with the fewest candidates, when fewer than ``cap``; else None."""
        best: tuple[int, str] | None = None
        for lookup in self.lookups:
            row = conn.execute(f"SELECT count(*) FROM ({lookup.count_sql} LIMIT ?)", (lookup.value, cap)).fetchone()
            count = int(row[0])
            if count < cap and (best is None or count < best[0]):
                best = (count, lookup.narrow)
        return best[1] if best is not None else None


def restriction_for(entry_filter: EntryFilter) -> Restriction | None:
    """The SQL form of a filter; None when it admits every row."""
    if entry_filter.empty:
        return None
    values = [*entry_filter.tags, entry_filter.branch_name or "", entry_filter.run_id or ""]
    if not all(sql_safe(value) for value in values) or any("\n" in tag for tag in entry_filter.tags):
        # No SQL-held row can hold such a value: only odd rows (filtered in Python) can match.
        return Restriction("0")
    terms: list[str] = []
    params: dict[str, str] = {}
    lookups: list[Lookup] = []
    if entry_filter.branch_name is not None:
        terms.append("d.br = :f_branch")
        params["f_branch"] = entry_filter.branch_name
        lookups.append(Lookup("SELECT 1 FROM doc WHERE br = ?", entry_filter.branch_name, "d.br = :f_branch"))
    if entry_filter.run_id is not None:
        terms.append("d.run = :f_run")
        params["f_run"] = entry_filter.run_id
        lookups.append(Lookup("SELECT 1 FROM doc WHERE run = ?", entry_filter.run_id, "d.run = :f_run"))
    for i, tag in enumerate(entry_filter.tags):
        terms.append(f"instr(char(10) || d.t || char(10), :f_tag{i}) > 0")
        params[f"f_tag{i}"] = f"\n{tag}\n"
        # The word index finds the rows whose tags hold the tag's pieces and marks (a superset);
        # the exact check above decides.
        expression = tag_expression(tag)
        if expression is not None:
            params[f"f_tagrows{i}"] = expression
            tagged = "SELECT rowid FROM doc_fts WHERE doc_fts MATCH "
            lookups.append(Lookup(tagged + "?", expression, f"d.id IN ({tagged}:f_tagrows{i})"))
    return Restriction("(" + " AND ".join(terms) + ")", params, tuple(lookups))
