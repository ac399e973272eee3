"""The index of one catalog file (memory.jsonl): caught up from byte offsets on every query.

Every read first compares the open file with the stored source state (a stat and,
when racy or grown, two small fingerprints).  Unchanged: answer from a read
snapshot.  Grown: index only the new lines.  Anything else: rebuild this source.
Catch-up runs in one ``BEGIN IMMEDIATE`` transaction that re-reads the source
row inside it, so concurrent processes never index the same bytes twice.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import json
import operator
import os
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memstore.append_chain import AppendChain, read_chain, sync_lock_path
from memstore.background import beside
from memstore.entry_filter import NO_FILTER, EntryFilter
from memstore.errors import IndexUnavailableError
from memstore.files import MAX_LINE_BYTES, open_for_read
from memstore.index import vocabulary
from memstore.index.base import HeldWrite, IndexedSource, StaleRowError
from memstore.index.db import DatabaseFault, IndexFile
from memstore.index.lines import Row, parsed_ranges, row_values
from memstore.index.restrict import restriction_for
from memstore.index.search import Hit, Planner, PlannerFactory
from memstore.index.source import Change, PrefixDigest, SourceState, record_state, rewritten_prefix
from memstore.index.sqlite_search import search_rows
from memstore.index.sqltext import encodable
from memstore.jsonl import decode_entry
from memstore.lines_seen import LinesSeen
from memstore.models import MemoryEntry, memory_matches, memory_relevance_score
from memstore.scan import ScanResult

if TYPE_CHECKING:
    from memstore.index.report import CheckResult

SOURCE_NAME = "memory"
BATCH_ROWS = 20_000
BULK_HASHSIZE = 64 * 1024 * 1024
COUNTED_IN_FTS5 = 64
"""Removed rows from which their terms are counted by FTS5 (fewer: in Python, no scratch table)."""


class RewritePlan(NamedTuple):
    """How a rewrite of the file moved its lines, so the index can follow without a rebuild.

    ``before`` is the stat of the file the rewriter read; ``removed`` holds the start
    offsets of removed entry lines; ``dropped`` the sorted ``(start, length)`` of every
    dropped line (removed entries and blank lines), from which new offsets follow.
    """

    before: os.stat_result
    removed: frozenset[int]
    dropped: tuple[tuple[int, int], ...]
    written: bytes = b""
    """The block digest of the file the rewrite wrote: the index follows only a file proven to hold it."""
    key: str = ""
    value: str = ""
    """The field and value the removed entries held: where the index looks for their rows first."""
    direct: bool = False
    """The new file was written around the page cache: the proof reads it the same way."""
    renamed: os.stat_result | None = None
    """The new file's stat right after the rename, when only the rename changed it since its last
    write: a file still so is taken to hold ``written`` without a read-back (:func:`rewritten_prefix`)."""


class _Ingest:
    """Counters and the pending batch of one catch-up.

    ``bulk``: a whole-source build, whose word index is built from ``doc`` in one pass at the
    end; ``terms``: (kind, term) -> rows of this batch holding it (bulk builds read the
    vocabulary from FTS5 instead).
    """

    __slots__ = ("blank", "bulk", "corrupt", "docs", "fts", "indexed_to", "next_id", "pos", "rows", "tail_end", "terms")

    def __init__(
        self,
        *,
        next_id: int,
        indexed_to: int,
        rows: int,
        corrupt: int,
        blank: int,
        tail_end: int | None = None,
        bulk: bool = False,
    ) -> None:
        self.next_id = next_id
        self.indexed_to = indexed_to
        self.rows = rows
        self.corrupt = corrupt
        self.blank = blank
        self.tail_end = tail_end
        self.bulk = bulk
        self.docs: list[tuple[Any, ...]] = []
        self.pos: list[tuple[int, int, int]] = []
        self.fts: list[tuple[int, str, str, str, str]] = []
        self.terms: Counter[tuple[int, str]] = Counter()


_PLACE = operator.itemgetter(0, 1)
"""(offset, length) of a parsed row: its ``pos`` columns."""

_ANY_ID = object()
"""No memory id to check a line's entry against."""


def _distinct_lines(offsets: Sequence[int]) -> None:
    """Rows of one answer name distinct lines (a damaged index may point two rows at one)."""
    if len(set(offsets)) != len(offsets):
        raise StaleRowError("two indexed rows name one line")


def entry_at(fd: int, off: object, length: object, mid: object = _ANY_ID) -> MemoryEntry:
    """The entry of a row, read from the file: the index is input, so the row must name a
    whole line (a newline or the file's start before it, a newline or its end after) whose
    entry is that row's (``mid``, when the row has one).  Shared by both backends."""
    if not (
        type(off) is int and type(length) is int and off >= 0 and 0 <= length <= MAX_LINE_BYTES
    ):  # fmt: skip
        raise StaleRowError(f"a row names no line ({off!r}, {length!r})")
    before = 1 if off > 0 else 0
    data = os.pread(fd, length + before + 1, off - before)
    line = data[before : before + length]
    if (
        len(line) != length
        or b"\n" in line  # a JSON object spread over lines is no entry of the scan's
        or (before and data[:1] != b"\n")
        or data[before + length : before + length + 1] not in (b"\n", b"")
    ):
        raise StaleRowError(f"no line of {length} bytes at {off}")
    entry = decode_entry(line)
    if entry is None or (mid is not _ANY_ID and mid is not None and entry.memory_id != mid):
        raise StaleRowError(f"the line at {off} is not the row's entry")
    return entry


class CatalogIndex(IndexedSource):
    """The derived index of one memory.jsonl (project or personal tier)."""

    SOURCE_NAME = SOURCE_NAME

    def __init__(self, path: Path, *, readonly: bool = False, private: bool = False) -> None:
        self._odd_cache: tuple[object, builtins.list[tuple[int, int, int, MemoryEntry]], set[int]] | None = None
        super().__init__(Path(path), IndexFile(Path(path).parent, readonly=readonly, private=private))

    def append_chain(self) -> AppendChain | None:
        return read_chain(sync_lock_path(self.source_path))

    def _populate(self, conn: sqlite3.Connection) -> None:
        """Bulk-load a brand-new index file (journal off; it is renamed into place after)."""
        fd = open_for_read(self.source_path)
        if fd is None:
            return
        try:
            conn.execute("INSERT INTO doc_fts(doc_fts, rank) VALUES ('hashsize', ?)", (BULK_HASHSIZE,))
            # Secondary indexes are built once, sorted, after the rows are in: much cheaper
            # than keeping them in order row by row.  Their DDL is read back from the schema.
            indexes = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'doc' AND sql IS NOT NULL"
            ).fetchall()
            conn.execute("BEGIN")
            for name, _sql in indexes:
                conn.execute(f'DROP INDEX "{name}"')
            st = os.fstat(fd)
            self._ingest(conn, fd, st, rebuild=True, state=None, chain=self.append_chain())
            for _name, sql in indexes:
                conn.execute(sql)
            conn.execute("COMMIT")
        finally:
            os.close(fd)

    def _apply_change(
        self,
        conn: sqlite3.Connection,
        fd: int,
        st: os.stat_result,
        change: Change,
        state: SourceState | None,
        prefix: PrefixDigest | None,
        *,
        chain: AppendChain | None = None,
    ) -> int:
        rebuild = change is Change.REPLACED
        return self._ingest(
            conn, fd, st, rebuild=rebuild, state=state, prefix=None if rebuild else prefix, chain=chain
        ).rows

    def _ingest(
        self,
        conn: sqlite3.Connection,
        fd: int,
        st: os.stat_result,
        *,
        rebuild: bool,
        state: SourceState | None,
        prefix: PrefixDigest | None = None,
        chain: AppendChain | None,
    ) -> _Ingest:
        if rebuild or state is None:
            self._clear(conn)
            ingest = _Ingest(next_id=1, indexed_to=0, rows=0, corrupt=0, blank=0, bulk=True)
        else:
            rows = state.rows
            if state.tail_end is not None:
                # The unterminated last line is parsed again with whatever follows it now.
                last = conn.execute("SELECT max(id) FROM doc").fetchone()[0]
                if last is not None:
                    self._delete_rows(conn, [last])
                    rows -= 1
            top = conn.execute("SELECT max(id) FROM doc").fetchone()[0]
            ingest = _Ingest(
                next_id=(top or 0) + 1,
                indexed_to=state.indexed_to,
                rows=rows,
                corrupt=state.corrupt,
                blank=state.blank,
            )
        total = st.st_size
        seen: list[LinesSeen] = []
        for parsed in parsed_ranges(self.source_path, fd, ingest.indexed_to, total):
            if parsed.seen is not None:
                seen.append(parsed.seen)
            if ingest.bulk:
                self._insert_bulk(conn, ingest, parsed.rows)
            else:
                for row in parsed.rows:
                    self._add_row(ingest, row)
                    if len(ingest.docs) >= BATCH_ROWS:
                        self._flush(conn, ingest)
            ingest.indexed_to = parsed.end
            ingest.blank += parsed.blank
            ingest.corrupt += parsed.corrupt
            if parsed.tail is not None:
                self._add_row(ingest, parsed.tail)
                ingest.tail_end = parsed.tail_end
            if self._progress is not None:
                self._progress(parsed.end, total)
        self._flush(conn, ingest)
        prove = functools.partial(
            SourceState.of_file,
            SOURCE_NAME,
            fd,
            st,
            indexed_to=ingest.indexed_to,
            tail_end=ingest.tail_end,
            rows=ingest.rows,
            corrupt=ingest.corrupt,
            blank=ingest.blank,
            prefix=prefix,
            seen=seen,
            chain=chain,
        )
        if ingest.bulk:
            self._check_numbered(conn, ingest.rows)

            def build_words() -> None:
                # The word index and its vocabulary are built in C, in one pass over the rows
                # (nearly twice as fast as filing each batch as it comes).
                conn.execute("INSERT INTO doc_fts(doc_fts) VALUES ('rebuild')")
                vocabulary.load_from_fts(conn)

            # The proof re-reads and digests the whole file (about a second at 1M entries):
            # on a second thread while FTS5 builds (both release the GIL), not after it.
            state = beside(prove, build_words, name="memstore-build-proof")
        else:
            state = prove()
        if self._progress is not None:
            self._progress(total, total)
        record_state(conn, SOURCE_NAME, state)
        return ingest

    @staticmethod
    def _check_numbered(conn: sqlite3.Connection, rows: int) -> None:
        """Rows of a bulk build are numbered 1..rows in both tables: from empty tables, each
        insert took max(id) + 1, so the top id and the count agree exactly when this holds."""
        for table in ("doc", "pos"):
            top = conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0]
            if top != rows:
                raise IndexUnavailableError(f"a bulk build numbered the rows of {table} up to {top}, not {rows}")

    def _add_row(self, ingest: _Ingest, row: Row) -> None:
        """File one parsed line (offset, length, doc columns) under the next row id."""
        row_id = ingest.next_id
        ingest.next_id += 1
        ingest.rows += 1
        off, length, *values = row
        ingest.docs.append((row_id, *values))
        ingest.pos.append((row_id, off, length))
        if not ingest.bulk:
            # Odd rows are kept out of SQL matching, but present (empty) in the FTS table so
            # that its integrity check against the content table holds.
            ingest.fts.append((row_id, values[1], values[2], values[7], values[8]))
            if not values[-1]:
                vocabulary.row_terms(ingest.terms, values[1], values[2], values[7], values[8])

    @staticmethod
    def _insert_bulk(conn: sqlite3.Connection, ingest: _Ingest, rows: Sequence[Row]) -> None:
        """Insert parsed rows as they came: doc binds each parsed tuple as it is (?3..?12), pos a C itemgetter's pair.

        A bulk build starts from empty tables, so SQLite numbers each row max(id) + 1: the
        same ids, in file order, that :meth:`_add_row` would give (checked after the build).
        """
        if not rows:
            return
        conn.executemany(
            "INSERT INTO doc(mid, c, t, created_at, bonus, br, run, mc, mt, odd)"
            " VALUES (?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
            rows,
        )
        conn.executemany("INSERT INTO pos(off, len) VALUES (?,?)", map(_PLACE, rows))
        ingest.next_id += len(rows)
        ingest.rows += len(rows)

    def _flush(self, conn: sqlite3.Connection, ingest: _Ingest) -> None:
        if ingest.docs:
            conn.executemany(
                "INSERT INTO doc(id, mid, c, t, created_at, bonus, br, run, mc, mt, odd)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                ingest.docs,
            )
            conn.executemany("INSERT INTO pos(id, off, len) VALUES (?,?,?)", ingest.pos)
        if ingest.fts:
            conn.executemany("INSERT INTO doc_fts(rowid, c, t, mc, mt) VALUES (?,?,?,?,?)", ingest.fts)
            vocabulary.add(conn, ingest.terms)
        ingest.docs.clear()
        ingest.pos.clear()
        ingest.fts.clear()
        ingest.terms.clear()

    def _clear(self, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM doc")
        conn.execute("DELETE FROM pos")
        conn.execute("INSERT INTO doc_fts(doc_fts) VALUES ('delete-all')")
        vocabulary.clear(conn)

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
        """Remove rows, their FTS entries, their terms and their tags (counts stay exact).

        Each statement writing ``doc_fts`` opens a statement savepoint, at which FTS5
        flushes its pending terms as a new segment and may merge segments (a common term's
        whole doclist at a time): so all rows go in one statement per table, in id order,
        and FTS5 flushes once, at commit (over ten times faster at 1M entries than 500 rows per statement).
        """
        if not ids:
            return
        wanted = json.dumps(sorted(set(ids)))
        chosen = "id IN (SELECT value FROM json_each(?))"
        held = conn.execute(f"SELECT c, t, mc, mt FROM doc WHERE odd = 0 AND {chosen}", (wanted,)).fetchall()

        def delete() -> None:
            conn.execute(
                f"INSERT INTO doc_fts(doc_fts, rowid, c, t, mc, mt) SELECT 'delete', id, c, t, mc, mt FROM doc"
                f" WHERE {chosen} ORDER BY id",
                (wanted,),
            )
            conn.execute(f"DELETE FROM doc WHERE {chosen}", (wanted,))
            conn.execute(f"DELETE FROM pos WHERE {chosen}", (wanted,))

        terms: vocabulary.TermCounts = Counter()
        if len(ids) < COUNTED_IN_FTS5:  # a catch-up's re-read tail: not worth a scratch table
            for content, tags, content_marks, tag_marks in held:
                vocabulary.row_terms(terms, content, tags, content_marks, tag_marks)
            delete()
        else:
            # Counted by FTS5 in a scratch database of their own, on a second thread, while
            # this connection deletes them.
            terms = beside(functools.partial(vocabulary.values_counted, held), delete, name="memstore-vocabulary-count")
        # Once for all the rows: a common term is counted down in one UPDATE.
        vocabulary.remove(conn, terms)

    # ------------------------------------------------------------------ answers

    def _entry_at(self, fd: int, off: object, length: object, mid: object = _ANY_ID) -> MemoryEntry:
        return entry_at(fd, off, length, mid)

    @staticmethod
    def _place(places: dict[int, tuple[int, int, str | None]], row_id: int) -> tuple[int, int, str | None]:
        place = places.get(row_id)
        if place is None:
            raise StaleRowError(f"row {row_id} has no place in the file")
        return place

    def _odd_rows(
        self, conn: sqlite3.Connection, fd: int, state: SourceState, *, unnamed: bool = False
    ) -> builtins.list[tuple[int, int, int, MemoryEntry]]:
        """The rows scored in Python, decoded once per state of the file (``unnamed``: only
        those whose id SQLite cannot hold, which a lookup by id cannot find)."""
        key = (self.generation, state.recorded_ns, state.dev, state.ino, state.size, state.indexed_to, state.rows)
        if self._odd_cache is None or self._odd_cache[0] != key:
            rows = conn.execute(
                "SELECT doc.id, off, len, mid FROM doc JOIN pos ON pos.id = doc.id WHERE odd = 1 ORDER BY doc.id"
            ).fetchall()
            _distinct_lines([off for _row_id, off, _length, _mid in rows])
            decoded = [(row_id, off, length, self._entry_at(fd, off, length, mid)) for row_id, off, length, mid in rows]
            named = {row_id for row_id, _off, _length, mid in rows if mid is not None}
            self._odd_cache = (key, decoded, named)
        _key, decoded, named = self._odd_cache
        return [row for row in decoded if row[0] not in named] if unnamed else decoded

    def _reset_caches(self) -> None:
        super()._reset_caches()
        self._odd_cache = None

    def search(
        self,
        tokens: Sequence[str],
        limit: int,
        entry_filter: EntryFilter = NO_FILTER,
        *,
        planner: PlannerFactory = Planner,
    ) -> list[MemoryEntry]:
        restriction = restriction_for(entry_filter)

        def answer(conn: sqlite3.Connection, fd: int, state: SourceState) -> list[MemoryEntry]:
            hits = search_rows(conn, tokens, limit, state.rows, planner=planner, restriction=restriction)
            known: dict[int, MemoryEntry] = {}
            odd_at: dict[int, int] = {}
            for row_id, off, _length, entry in self._odd_rows(conn, fd, state):
                if memory_matches(entry, tokens) and entry_filter.admits(entry):
                    known[row_id] = entry
                    odd_at[row_id] = off
                    hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, row_id))
            if known:  # the planner's hits come sorted; odd rows join them here
                hits.sort(key=Hit.sort_key)
            top = hits[:limit]
            if len(top) * 8 >= state.rows:
                # Most rows are wanted: reading the narrow tables whole beats looking each one up.
                rows = conn.execute("SELECT pos.id, off, len, mid FROM pos JOIN doc ON doc.id = pos.id")
            else:
                wanted = json.dumps([hit.row_id for hit in top if hit.row_id not in known])
                rows = conn.execute(
                    "SELECT pos.id, off, len, mid FROM pos JOIN doc ON doc.id = pos.id"
                    " WHERE pos.id IN (SELECT value FROM json_each(?))",
                    (wanted,),
                )
            places = {row_id: (off, length, mid) for row_id, off, length, mid in rows}
            found = [known.get(hit.row_id) or self._entry_at(fd, *self._place(places, hit.row_id)) for hit in top]
            # The index is input: a hit is only returned when the entry read back from the file is
            # the row's own, on a line of its own, and scores as the index said.
            _distinct_lines(
                [odd_at[hit.row_id] if hit.row_id in known else self._place(places, hit.row_id)[0] for hit in top]
            )
            for hit, entry in zip(top, found, strict=True):
                if hit.row_id not in known and (
                    entry.created_at != hit.created_at or memory_relevance_score(entry, tokens) != hit.score
                ):
                    raise StaleRowError("an indexed row does not match the entry in the file")
            if not all(memory_matches(entry, tokens) for entry in found):
                raise StaleRowError("an indexed row does not match the entry in the file")
            return found

        return self._read(answer, [])

    def list(self, limit: int, entry_filter: EntryFilter = NO_FILTER) -> builtins.list[MemoryEntry]:
        restriction = restriction_for(entry_filter)

        def answer(conn: sqlite3.Connection, fd: int, state: SourceState) -> builtins.list[MemoryEntry]:
            if restriction is None:
                rows = conn.execute(
                    "SELECT off, len, mid FROM pos JOIN doc ON doc.id = pos.id ORDER BY pos.id DESC LIMIT ?", (limit,)
                ).fetchall()
                _distinct_lines([off for off, _length, _mid in rows])
                return [self._entry_at(fd, off, length, mid) for off, length, mid in rows]
            admitted = [(row_id, off, entry) for row_id, off, _l, entry in self._odd_rows(conn, fd, state)
                        if entry_filter.admits(entry)]  # fmt: skip
            found: builtins.list[tuple[int, MemoryEntry]] = [(row_id, entry) for row_id, _off, entry in admitted]
            sql = (
                "SELECT d.id, pos.off, pos.len, d.mid FROM doc d JOIN pos ON pos.id = d.id"
                f" WHERE d.odd = 0 AND {restriction.sql} ORDER BY d.id DESC LIMIT :k"
            )
            rows = conn.execute(sql, {**restriction.params, "k": limit}).fetchall()
            _distinct_lines([off for _row_id, off, _length, _mid in rows] + [off for _row_id, off, _e in admitted])
            for row_id, off, length, mid in rows:
                entry = self._entry_at(fd, off, length, mid)
                if not entry_filter.admits(entry):
                    raise StaleRowError("an indexed row does not match the entry in the file")
                found.append((row_id, entry))
            found.sort(key=lambda item: item[0], reverse=True)
            return [entry for _row_id, entry in found[:limit]]

        return self._read(answer, [])

    def ids_from(self, prefix: str, limit: int) -> builtins.list[str]:
        """Up to ``limit`` distinct ids starting with ``prefix``, in code point order."""

        def answer(conn: sqlite3.Connection, fd: int, state: SourceState) -> builtins.list[str]:
            found = {entry.memory_id for _i, _o, _l, entry in self._odd_rows(conn, fd, state, unnamed=True)}
            if encodable(prefix):
                rows = conn.execute(
                    "SELECT DISTINCT mid FROM doc WHERE mid >= ? ORDER BY mid LIMIT ?", (prefix, limit)
                ).fetchall()
                found.update(mid for (mid,) in rows)
            return sorted(mid for mid in found if mid.startswith(prefix))[:limit]

        return self._read(answer, [])

    def id_neighbours(self, memory_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """For each id, the nearest different ids before and after it in code point order."""

        def answer(conn: sqlite3.Connection, fd: int, state: SourceState) -> dict[str, tuple[str | None, str | None]]:
            odd = sorted({entry.memory_id for _i, _o, _l, entry in self._odd_rows(conn, fd, state, unnamed=True)})
            result: dict[str, tuple[str | None, str | None]] = {}
            for mid in memory_ids:
                before = [other for other in odd if other < mid]
                after = [other for other in odd if other > mid]
                if encodable(mid):
                    below = conn.execute("SELECT max(mid) FROM doc WHERE mid < ?", (mid,)).fetchone()[0]
                    above = conn.execute("SELECT min(mid) FROM doc WHERE mid > ?", (mid,)).fetchone()[0]
                    before += [below] if below is not None else []
                    after += [above] if above is not None else []
                result[mid] = (max(before, default=None), min(after, default=None))
            return result

        return self._read(answer, {})

    def show(self, memory_id: str) -> builtins.list[MemoryEntry]:
        """``[entry]`` for the first entry in file order with this id, ``[]`` when none."""

        def answer(conn: sqlite3.Connection, fd: int, state: SourceState) -> builtins.list[MemoryEntry]:
            candidates: builtins.list[tuple[int, MemoryEntry]] = []
            if encodable(memory_id):
                row = conn.execute(
                    "SELECT doc.id, off, len FROM doc JOIN pos ON pos.id = doc.id WHERE mid = ?"
                    " ORDER BY doc.id LIMIT 1",
                    (memory_id,),
                ).fetchone()
                if row is not None:
                    candidates.append((row[0], self._entry_at(fd, row[1], row[2], memory_id)))
            candidates.extend(
                (row_id, entry)
                for row_id, _o, _l, entry in self._odd_rows(conn, fd, state, unnamed=True)
                if entry.memory_id == memory_id
            )
            return [min(candidates, key=lambda item: item[0])[1]] if candidates else []

        return self._read(answer, [])

    # ------------------------------------------------------------------ maintenance

    def prepare_rewrite(self) -> None:
        """Bring the index level with the file before memstore rewrites it (caller may hold the lock).

        Never waits out another process's build: a rewrite does not need the index, which is
        then rebuilt lazily.
        """
        self.refresh(patient=False)

    def apply_rewrite(self, plan: RewritePlan, after: os.stat_result, *, held: HeldWrite | None = None) -> bool:
        """Follow memstore's own rewrite: delete removed rows, shift offsets, record the new file.

        Returns False (and leaves the index to rebuild lazily) when the index was not
        exactly at the state the rewriter read.  ``held``: the write transaction taken
        before the replace (:meth:`hold_write`), used and released here.
        """
        return self._write(lambda conn, fd: self._apply_rewrite(conn, fd, plan, after), held=held)

    def _apply_rewrite(self, conn: sqlite3.Connection, fd: int, plan: RewritePlan, after: os.stat_result) -> bool:
        st = os.fstat(fd)
        state = SourceState.load(conn, SOURCE_NAME)
        before = plan.before
        if (
            state is None
            or (st.st_dev, st.st_ino) != (after.st_dev, after.st_ino)
            or st.st_size < after.st_size
            # An unterminated line that is no entry was never indexed; the rewrite ends it with a
            # newline, which makes it a corrupt line here: rare enough to leave to a rebuild.
            or (state.tail_end is None and state.size > state.indexed_to)
            # ctime too: an in-place edit can keep size and mtime, never ctime.
            or (state.dev, state.ino, state.size, state.mtime_ns, state.ctime_ns)
            != (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
        ):
            return False
        removed_at = _rows_removed(conn, plan)
        if len(removed_at) != len(plan.removed):
            return False
        removed = sorted(removed_at.values())

        def follow() -> None:
            self._delete_rows(conn, removed)
            _shift_offsets(conn, plan.dropped, removed_at)

        def prove() -> SourceState | None:
            # Untouched since the rename: the rewrite's own digest, checked at samples.
            prefix = rewritten_prefix(plan.written, fd, st, renamed=plan.renamed, resumes=state.resumes)
            return SourceState.of_file(
                SOURCE_NAME,
                fd,
                # The rename changed the file's ctime after ``after`` was taken: when nothing was
                # appended since, record the file as it is now, or the next query digests it again.
                st if st.st_size == after.st_size else after,
                indexed_to=after.st_size,
                tail_end=None,
                rows=state.rows - len(removed),
                corrupt=state.corrupt,
                blank=0,
                prefix=prefix,
                expected=plan.written if prefix is None else None,
                chain=self.append_chain(),
                direct=plan.direct,
            )

        # The lock was released after the replace: the file must be proven to hold what the
        # rewrite wrote (another tool may have saved it in place since).  Lines appended
        # since are left for the next catch-up, as any append is.  The proof reads and
        # digests the file on a second thread while SQLite deletes and shifts rows (both
        # release the GIL); a failed proof rolls the rows back.
        rewritten = beside(prove, follow, name="memstore-rewrite-proof")
        if rewritten is None:
            return False
        rewritten.save(conn)
        return True

    @staticmethod
    def _forget_state(conn: sqlite3.Connection, _fd: int) -> bool:
        SourceState.forget(conn, SOURCE_NAME)
        return True

    def check(self, scanned: ScanResult) -> CheckResult:
        """Compare the index (caught up first) with a fresh scan, row by row, indexed text included.

        On any difference the source's recorded state is dropped, so the next query
        or ``reindex`` rebuilds it.
        """
        from memstore.index.report import CheckResult

        self.refresh()
        with self._mutex, self._open_source() as fd:
            if fd is None:
                equal = not scanned.entries
                return CheckResult(equal, "no catalog file" if equal else "file vanished during check")
            try:
                conn = self._connection()
                differing = indexed = 0
                expected = iter(scanned.entries)
                for row in conn.execute(
                    "SELECT pos.off, doc.mid, doc.c, doc.t, doc.created_at, doc.bonus, doc.br, doc.run,"
                    " doc.mc, doc.mt, doc.odd"
                    " FROM doc JOIN pos ON pos.id = doc.id ORDER BY doc.id"
                ):
                    indexed += 1
                    item = next(expected, None)
                    if item is None:
                        differing += 1
                        continue
                    if tuple(row) != (item.order, *row_values(item.entry)):
                        differing += 1
                orphans = conn.execute(
                    "SELECT (SELECT count(*) FROM pos) + (SELECT count(*) FROM doc)"
                    " - 2 * (SELECT count(*) FROM doc JOIN pos ON pos.id = doc.id)"
                ).fetchone()[0]
                integrity = conn.execute("PRAGMA quick_check").fetchone()[0]
                try:
                    conn.execute("INSERT INTO doc_fts(doc_fts, rank) VALUES ('integrity-check', 1)")
                    fts_ok = True
                except sqlite3.DatabaseError:
                    fts_ok = False
                vocab_wrong = vocabulary.differences(conn) if fts_ok else 0
            except DatabaseFault as exc:
                return CheckResult(False, f"index unreadable: {exc}", indexed=0, scanned=len(scanned.entries))
            missing = max(0, len(scanned.entries) - indexed)
            equal = not (differing or missing or orphans or vocab_wrong) and integrity == "ok" and fts_ok
            if not equal:
                self._write(self._forget_state)
        summary = (
            "index equals a fresh scan"
            if equal
            else f"index differs: {differing} rows differ, {missing} missing, {orphans} orphaned,"
            f" {vocab_wrong} vocabulary terms wrong,"
            f" {indexed} indexed vs {len(scanned.entries)} scanned, sqlite check {integrity!r},"
            f" fts check {'ok' if fts_ok else 'failed'}; the next reindex rebuilds it"
        )
        return CheckResult(equal, summary, indexed=indexed, scanned=len(scanned.entries))


KEY_COLUMNS = {"branch_name": "br", "run_id": "run"}
"""The doc column (indexed) holding each field a rewrite removes by."""


def _rows_removed(conn: sqlite3.Connection, plan: RewritePlan) -> dict[int, int]:
    """Offset -> row id of the rows at the removed lines' offsets.

    The rows holding the removed value are found by its index (a rewrite removes exactly
    those, usually); only when their offsets are not exactly the removed ones is every
    row's offset compared (pos has no index on offsets).
    """
    column = KEY_COLUMNS.get(plan.key)
    if column is not None and encodable(plan.value):
        held = dict(
            conn.execute(
                f"SELECT pos.off, pos.id FROM doc JOIN pos ON pos.id = doc.id WHERE doc.{column} = ?", (plan.value,)
            ).fetchall()
        )
        if held.keys() == plan.removed:
            return held
    return dict(
        conn.execute(
            "SELECT off, id FROM pos WHERE off IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(plan.removed)),),
        ).fetchall()
    )


SPARSE_DROPS = 64
"""Dropped lines with no row (blank lines) placed by a search each; past this many, by one UPDATE."""


def _shift_offsets(conn: sqlite3.Connection, dropped: Sequence[tuple[int, int]], removed_at: dict[int, int]) -> None:
    """Move every kept line back by the bytes of the dropped lines before it.

    Row ids follow file order, so the rows between two dropped lines are one id range:
    one UPDATE per range over the primary key of the narrow pos table, rather than a
    lookup per row of every row after the first dropped line.
    """
    if not dropped:
        return
    if sum(start not in removed_at for start, _length in dropped) > SPARSE_DROPS:
        _shift_offsets_per_row(conn, dropped)
        return
    total = 0
    bounds: builtins.list[tuple[int, int]] = []
    """(the last row id before the rows that move back by ``total``, total)."""
    for start, length in dropped:
        total += length
        last = removed_at.get(start)
        bounds.append((_last_id_before(conn, start) if last is None else last, total))
    bounds.append((_NO_ID, 0))
    conn.executemany(
        "UPDATE pos SET off = off - ? WHERE id > ? AND id <= ?",
        [(moved, low, high) for (low, moved), (high, _next) in itertools.pairwise(bounds) if high > low],
    )


_NO_ID = 1 << 62
"""Above every row id."""


def _last_id_before(conn: sqlite3.Connection, offset: int) -> int:
    """The id of the last row that starts before ``offset`` (0 if none), by a search over ids."""
    low, high = 0, (conn.execute("SELECT max(id) FROM pos").fetchone()[0] or 0) + 1
    while low + 1 < high:
        middle = (low + high) // 2
        row = conn.execute("SELECT id, off FROM pos WHERE id >= ? ORDER BY id LIMIT 1", (middle,)).fetchone()
        if row is None or row[1] >= offset:
            high = middle
        else:
            low = row[0]
    return low


def _shift_offsets_per_row(conn: sqlite3.Connection, dropped: Sequence[tuple[int, int]]) -> None:
    shifts: builtins.list[tuple[int, int]] = []
    total = 0
    for start, length in dropped:
        total += length
        shifts.append((start, total))
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS shift(start INTEGER PRIMARY KEY, total INTEGER NOT NULL)")
    conn.execute("DELETE FROM temp.shift")
    conn.executemany("INSERT INTO temp.shift(start, total) VALUES (?, ?)", shifts)
    conn.execute(
        "UPDATE pos SET off = off - (SELECT total FROM temp.shift WHERE start < pos.off"
        " ORDER BY start DESC LIMIT 1) WHERE off > ?",
        (shifts[0][0],),
    )
