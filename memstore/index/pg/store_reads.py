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
from memstore.index.id_lines import first_entry_with_id
from memstore.index.pg.loader import PgConn, SourceRow
from memstore.index.pg.search import PgSearch, row_key, split_key
from memstore.index.pg.store import SharedSource
from memstore.index.row_chain import RowChain, whole_line
from memstore.index.search import MAX_SQL_TOKENS, Hit, Planner, PlannerFactory, sql_tokens
from memstore.index.sqltext import sql_safe
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
            if not _newest_checked(conn, fd, source):
                return []
            k = limit
            while True:
                ranked = _ranked(conn, fd, source, list(tokens), k, planner)
                admitted = [entry for entry in ranked if entry_filter.admits(entry)]
                if len(admitted) >= limit or len(ranked) < k:
                    return admitted[:limit]
                # Not capped by the state's row count: that is database input, and a count
                # forged small would stop k growing (the loop would never end).
                k *= 4

        return self.shared.read_lines(answer, [])

    def list(self, limit: int, entry_filter: EntryFilter = NO_FILTER) -> list[MemoryEntry]:
        def answer(conn: PgConn, fd: int, source: SourceRow) -> list[MemoryEntry]:
            found: list[MemoryEntry] = []
            chain = RowChain(fd, _proven_size(source))
            below = source.next_id
            batch = limit if entry_filter.empty else max(LIST_BATCH, limit)
            while source.part is not None and len(found) < limit:
                rows = conn.execute(
                    "SELECT id, off, len FROM team_doc WHERE part = %s AND id < %s ORDER BY id DESC LIMIT %s",
                    (source.part, below, batch),
                ).fetchall()
                for _id, off, length in rows:
                    entry = entry_at(fd, off, length)
                    chain.down(off, length)
                    if entry_filter.admits(entry):
                        found.append(entry)
                if len(rows) < batch:
                    break
                below = int(rows[-1][0])
            if len(found) < limit:
                chain.bottom()  # every row was read: no entry may lie before the oldest
            return found[:limit]

        nothing: builtins.list[MemoryEntry] = []
        return self.shared.read_lines(answer, nothing)

    def show(self, memory_id: str) -> builtins.list[MemoryEntry]:
        """``[entry]`` for the first entry in file order with this id, ``[]`` when none.

        Searched in the file the snapshot was proven current for, not in the rows: the
        team index keeps no id column, and the rows' ``raw`` copies are database input.
        """

        def answer(conn: PgConn, fd: int, source: SourceRow) -> builtins.list[MemoryEntry]:
            found = first_entry_with_id(fd, memory_id)
            return [] if found is None else [found]

        nothing: builtins.list[MemoryEntry] = []
        return self.shared.read_lines(answer, nothing)


def _proven_size(source: SourceRow) -> int:
    """The file size the snapshot was proven current for (``is_current`` compared it with fstat)."""
    assert source.state is not None
    return source.state.size


def _newest_checked(conn: PgConn, fd: int, source: SourceRow) -> bool:
    """Whether the source has rows, once its newest row is shown to reach the file's end: a state
    forged current cannot hide what was appended after its rows, nor a deleted newest row its
    entry.  Decided by the rows, never by the state's row count (database input); the rows are
    not counted: ``count(*)`` cost a search 22% (see _placed)."""
    chain = RowChain(fd, _proven_size(source))
    newest = None
    if source.part is not None:
        newest = conn.execute(
            "SELECT off, len FROM team_doc WHERE part = %s ORDER BY id DESC LIMIT 1", (source.part,)
        ).fetchone()
    if newest is None or source.state is None:
        chain.bottom()
        return False
    whole_line(fd, *newest)
    chain.down(*newest)
    return True


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
            # Every row holding them: counted here, as the state's count is database input (rare path).
            counted = conn.execute("SELECT count(*) FROM team_doc WHERE part = %s", (source.part,)).fetchone()
            every = int(counted[0]) if counted is not None else 0
            found = planner(PgSearch(conn, some, parts=parts, k=max(every, 1)), some, max(every, 1), every).run()
            for key, (off, entry) in _read(conn, fd, source, [hit.row_id for hit in found]).items():
                if memory_matches(entry, tokens):
                    known[key] = (off, entry)
                    hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, key))
        elif sql_tokens(tokens):
            hits = planner(PgSearch(conn, tokens, parts=parts, k=k), tokens, k, total).run()
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
    known.update(_placed(conn, fd, source, [hit.row_id for hit in top], known))
    _distinct_lines([known[hit.row_id][0] for hit in top if hit.row_id in known])
    ranked = []
    for hit in top:
        place = known.get(hit.row_id)
        # The index is input: an entry is returned only when the file's line scores as the row said.
        if place is None or not memory_matches(place[1], tokens):
            raise StaleRowError("an indexed row does not match the entry in the file")
        entry = place[1]
        if entry.created_at != hit.created_at or memory_relevance_score(entry, tokens) != hit.score:
            raise StaleRowError("an indexed row does not match the entry in the file")
        ranked.append((Hit(hit.score, hit.created_at, place[0]).sort_key(), entry))
    # Ties go in file order: by the offsets just checked against the file, not by the row ids.
    ranked.sort(key=lambda pair: pair[0])
    return [entry for _key, entry in ranked]


NEIGHBOURS_SQL = (
    # The partition is a parameter in each subquery, not d.part: so each one is pruned to one partition.
    "SELECT d.id, d.off, d.len, p.off, p.len, n.off, n.len FROM team_doc d"
    " LEFT JOIN LATERAL (SELECT off, len FROM team_doc WHERE part = %(part)s AND id < d.id ORDER BY id DESC LIMIT 1)"
    " p ON true"
    " LEFT JOIN LATERAL (SELECT off, len FROM team_doc WHERE part = %(part)s AND id > d.id ORDER BY id LIMIT 1)"
    " n ON true"
    " WHERE d.part = %(part)s AND d.id = ANY(%(ids)s::bigint[])"
)


def _placed(
    conn: PgConn, fd: int, source: SourceRow, keys: Sequence[int], known: dict[int, tuple[int, MemoryEntry]]
) -> dict[int, tuple[int, MemoryEntry]]:
    """``key -> (offset, entry)`` of the rows not ``known``, once each row of ``keys`` is shown in file order.

    Each row must sit in the file between the rows with the ids next to its own, with
    no entry between: an edited id or offset (a swap, a row re-pointed, copied or
    deleted next to an answer) moves a row away from its neighbours.  The check costs
    two index probes and two line-boundary reads per returned row.  It cannot see a
    block of rows moved as a whole, a deletion away from the answer, nor edited terms:
    only walking every row could (as ``list`` does), at a cost no search can pay.
    """
    if not keys:
        return {}
    ids = [split_key(key)[1] for key in keys]
    found: dict[int, tuple[int, MemoryEntry]] = {}
    placed = conn.execute(NEIGHBOURS_SQL, {"part": source.part, "ids": ids}).fetchall()
    for row_id, off, length, p_off, p_len, n_off, n_len in placed:
        key = row_key(source.sid, int(row_id))
        if key not in known:
            found[key] = (int(off), entry_at(fd, off, length))
        else:
            whole_line(fd, off, length)
        chain = RowChain(fd, _proven_size(source))
        if n_off is not None:
            whole_line(fd, n_off, n_len)
            chain.below(n_off)
        chain.down(off, length)
        if p_off is None:
            chain.bottom()
        else:
            whole_line(fd, p_off, p_len)
            chain.down(p_off, p_len)
    return found


def _read(conn: PgConn, fd: int, source: SourceRow, keys: Sequence[int]) -> dict[int, tuple[int, MemoryEntry]]:
    """``key -> (offset, entry)`` of these rows, each entry read from the file at the row's place."""
    if not keys:
        return {}
    ids = [split_key(key)[1] for key in keys]
    rows = conn.execute(
        "SELECT id, off, len FROM team_doc WHERE part = %s AND id = ANY(%s::bigint[])", (source.part, ids)
    ).fetchall()
    return {row_key(source.sid, int(row_id)): (int(off), entry_at(fd, off, length)) for row_id, off, length in rows}
