"""A catalog's reads (search, list, show) on its own source of the team index.

Each runs inside a snapshot :class:`~memstore.index.pg.store.SharedSource` proved
current for the open file.  PostgreSQL chooses and orders the rows; the entries are
read back from the local file at the rows' offsets and checked (a whole line, the
row's score and time), so a forged or stale row ends the answer instead of entering
it.  Filters (tags, branch, run) are applied to those entries: the team schema keeps
no branch or run columns, so a filtered search or list widens its window until
enough rows pass, which gives exactly the scan's answer.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path

from memstore.entry_filter import NO_FILTER, EntryFilter
from memstore.index.base import StaleRowError
from memstore.index.catalog_index import entry_at
from memstore.index.pg.loader import PgConn, SourceRow
from memstore.index.pg.search import PgSearch, row_key, split_key
from memstore.index.pg.store import SharedSource
from memstore.index.search import MAX_SQL_TOKENS, Hit, Planner, PlannerFactory, sql_tokens
from memstore.index.sqltext import encodable, sql_safe
from memstore.index_url import IndexUrl
from memstore.models import MemoryEntry, memory_matches, memory_relevance_score

LIST_BATCH = 512
"""Rows read at a time by a filtered list or by show (newest first, file order)."""


class PgCatalogIndex:
    """The shared index of one catalog file, with the reads of the local CatalogIndex."""

    def __init__(self, url: IndexUrl, name: str, path: Path) -> None:
        self.shared = SharedSource(url, name, path)

    def search(
        self,
        tokens: Sequence[str],
        limit: int,
        entry_filter: EntryFilter = NO_FILTER,
        *,
        planner: PlannerFactory = Planner,
    ) -> list[MemoryEntry]:
        def answer(conn: PgConn, fd: int, source: SourceRow) -> list[MemoryEntry]:
            rows = source.state.rows if source.state is not None else 0
            if source.part is None or not rows:
                return []
            k = limit
            while True:
                ranked = _ranked(conn, fd, source, list(tokens), k, planner)
                admitted = [entry for entry in ranked if entry_filter.admits(entry)]
                if len(admitted) >= limit or len(ranked) < k:
                    return admitted[:limit]
                k = min(4 * k, rows + 1)

        return self.shared.read_lines(answer, [])

    def list(self, limit: int, entry_filter: EntryFilter = NO_FILTER) -> list[MemoryEntry]:
        def answer(conn: PgConn, fd: int, source: SourceRow) -> list[MemoryEntry]:
            found: list[MemoryEntry] = []
            below = source.next_id
            batch = limit if entry_filter.empty else max(LIST_BATCH, limit)
            while source.part is not None and len(found) < limit:
                rows = conn.execute(
                    "SELECT id, off, len FROM team_doc WHERE part = %s AND id < %s ORDER BY id DESC LIMIT %s",
                    (source.part, below, batch),
                ).fetchall()
                _distinct_lines([off for _id, off, _len in rows])
                found += [e for e in (entry_at(fd, off, length) for _id, off, length in rows) if entry_filter.admits(e)]
                if len(rows) < batch:
                    break
                below = int(rows[-1][0])
            return found[:limit]

        nothing: builtins.list[MemoryEntry] = []
        return self.shared.read_lines(answer, nothing)

    def show(self, memory_id: str) -> builtins.list[MemoryEntry]:
        """``[entry]`` for the first entry in file order with this id, ``[]`` when none.

        Without an id column, rows are found by their bytes: a line holds the id's UTF-8
        literally unless it escapes something (a backslash), so those two kinds of row
        are the candidates, each decoded from the file and compared.
        """
        needle = memory_id.encode("utf-8") if encodable(memory_id) else b"\\"

        def answer(conn: PgConn, fd: int, source: SourceRow) -> builtins.list[MemoryEntry]:
            after = 0
            while source.part is not None:
                rows = conn.execute(
                    "SELECT id, off, len FROM team_doc WHERE part = %s AND id > %s"
                    " AND (position(%s::bytea IN raw) > 0 OR position('\\x5c'::bytea IN raw) > 0)"
                    " ORDER BY id LIMIT %s",
                    (source.part, after, needle, LIST_BATCH),
                ).fetchall()
                for _id, off, length in rows:
                    entry = entry_at(fd, off, length)
                    if entry.memory_id == memory_id:
                        return [entry]
                if len(rows) < LIST_BATCH:
                    break
                after = int(rows[-1][0])
            return []

        nothing: builtins.list[MemoryEntry] = []
        return self.shared.read_lines(answer, nothing)


def _distinct_lines(offsets: Sequence[int]) -> None:
    if len(set(offsets)) != len(offsets):
        raise StaleRowError("two indexed rows name one line")


def _ranked(
    conn: PgConn, fd: int, source: SourceRow, tokens: list[str], k: int, planner: PlannerFactory
) -> list[MemoryEntry]:
    """The top ``k`` entries of the source for ``tokens`` in the spec's order, read from the file."""
    assert source.part is not None and source.state is not None
    parts = {source.sid: source.part}
    total = source.state.rows
    hits: list[Hit] = []
    known: dict[int, tuple[int, MemoryEntry]] = {}
    if all(sql_safe(token) for token in tokens):
        if len(set(tokens)) > MAX_SQL_TOKENS:
            # Rows holding every token hold the first MAX_SQL_TOKENS: found in SQL, checked here in full.
            some = sorted(set(tokens))[:MAX_SQL_TOKENS]
            found = planner(PgSearch(conn, some, parts=parts), some, total, total).run()
            for key, (off, entry) in _read(conn, fd, source, [hit.row_id for hit in found]).items():
                if memory_matches(entry, tokens):
                    known[key] = (off, entry)
                    hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, key))
        elif sql_tokens(tokens):
            hits = planner(PgSearch(conn, tokens, parts=parts), tokens, k, total).run()
    # Odd rows (text SQL cannot hold exactly) are scored here, from the file's bytes.
    odd = conn.execute("SELECT id, off, len FROM team_doc WHERE part = %s AND odd ORDER BY id", (source.part,))
    for row_id, off, length in odd.fetchall():
        entry = entry_at(fd, off, length)
        if memory_matches(entry, tokens):
            key = row_key(source.sid, int(row_id))
            known[key] = (int(off), entry)
            hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, key))
    if known:
        hits.sort(key=Hit.sort_key)
    top = hits[:k]
    known.update(_read(conn, fd, source, [hit.row_id for hit in top if hit.row_id not in known]))
    _distinct_lines([known[hit.row_id][0] for hit in top if hit.row_id in known])
    result = []
    for hit in top:
        place = known.get(hit.row_id)
        # The index is input: an entry is returned only when the file's line scores as the row said.
        if place is None or not memory_matches(place[1], tokens):
            raise StaleRowError("an indexed row does not match the entry in the file")
        entry = place[1]
        if entry.created_at != hit.created_at or memory_relevance_score(entry, tokens) != hit.score:
            raise StaleRowError("an indexed row does not match the entry in the file")
        result.append(entry)
    return result


def _read(conn: PgConn, fd: int, source: SourceRow, keys: Sequence[int]) -> dict[int, tuple[int, MemoryEntry]]:
    """``key -> (offset, entry)`` of these rows, each entry read from the file at the row's place."""
    if not keys:
        return {}
    ids = [split_key(key)[1] for key in keys]
    rows = conn.execute(
        "SELECT id, off, len FROM team_doc WHERE part = %s AND id = ANY(%s::bigint[])", (source.part, ids)
    ).fetchall()
    return {row_key(source.sid, int(row_id)): (int(off), entry_at(fd, off, length)) for row_id, off, length in rows}
