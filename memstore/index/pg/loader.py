"""Catching one team source up with its file: appends in place, everything else as a new partition.

One indexer at a time per source: a session advisory lock on the source's name,
taken before the source's state is read and held until its change is committed, so a
second indexer of the same source waits for the first and then finds little or
nothing left to do; indexers of other sources never wait for it.  The change is
classified exactly as the SQLite index classifies it (:mod:`memstore.index.source`),
except that a new machine or a fresh clone (another device and inode) is not a
rewrite when the digest of every indexed byte still matches.

* *Grown*: the new lines go into the source's current partition in one READ
  COMMITTED transaction, with its term counts and its new state: searchers see all
  of it or none.
* *Anything else* (first load, rewrite, truncation, edit, replaced file, or an
  append larger than what is indexed): the whole file is loaded into a new table with
  ``COPY … FREEZE``, its indexes are built while nothing reads it, and one short
  transaction attaches it as a partition and points the source at it.  The old
  partition is retired and detached concurrently (searches that still read it finish
  first), then dropped.

New vocabulary terms are inserted before, in their own autocommit statements.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import Copy
from psycopg import errors as pg_errors
from psycopg.sql import SQL
from sqlalchemy.engine import Engine

from memstore.append_chain import AppendChain, read_chain, sync_lock_path
from memstore.errors import StorageError
from memstore.files import open_for_read
from memstore.index.lines import parse_range, parsed_ranges
from memstore.index.pg.conn import LOCK_SPACE, SCHEMA_LOCK, raw_connection
from memstore.index.pg.copy_binary import EMPTY_ARRAY, HEADER, TRAILER, doc_row, element_id, id_element
from memstore.index.pg.rows import Doc, IdLookups, count_held, doc_of, id_arrays, id_lookups, wanted_terms
from memstore.index.pg.vocab import Vocabulary
from memstore.index.pg_deadline import uncapped
from memstore.index.report import Progress
from memstore.index.source import Change, PrefixDigest, SourceState
from memstore.lines_seen import LinesSeen
from memstore.logger import LazyLogger

log = LazyLogger(__name__)

PgConn = psycopg.Connection[Any]
BATCH_ROWS = 20_000
CHANGED_TRIES = 3
"""Catch-ups tried while another tool keeps changing the file under the reader."""
RETIRE_KEY = 1
"""Second key of the lock (SCHEMA_LOCK, RETIRE_KEY) held while retired partitions are dropped."""
SOURCE_LOCK_TIMEOUT = "900s"
"""How long an indexer waits for another indexer of the same source (a full load of a large one)."""
INDEX_MEMORY = "256MB"
"""maintenance_work_mem for a new partition's index builds (set for that transaction only)."""
IN_PLACE_ROWS = 2_000
"""A rewritten source with at most this many rows is rebuilt in its current partition (delete and
insert, one transaction) rather than through a new one: DDL costs more than a few rows do."""
WRITE_BYTES = 1024 * 1024
"""A full load sends its binary rows to COPY in writes of about this many bytes."""
DOC_COLUMNS = "part, id, sid, c, t, created_at, bonus, odd, off, len, cterms, tterms, raw"
"""The order of a row's fields in :func:`memstore.index.pg.copy_binary.doc_row`."""
BINARY = "(FORMAT BINARY)"
STATE_COLUMNS = (
    "dev, ino, size, mtime_ns, ctime_ns, indexed_to, tail_end, head_hash, edge_hash, body_hash,"
    " recorded_ns, rows, corrupt, blank"
)


@dataclass(frozen=True)
class SourceRow:
    """What ``team_source`` holds for one source, as read under its lock."""

    sid: int
    part: int | None
    next_id: int
    state: SourceState | None


@dataclass(frozen=True)
class LoadResult:
    """What one catch-up did: 'none', 'appended', 'rebuilt', 'built' (first load) or 'missing'."""

    action: str
    rows: int
    added: int
    seconds: float
    indexed_bytes: int


class _FileChanged(Exception):
    """The file no longer holds the bytes the parse read: the transaction is rolled back and retried."""


def partition_name(part: int) -> str:
    return f"team_doc_p{int(part)}"


def register(conn: PgConn, name: str) -> int:
    """The source's sid, registering it first if new (sids give the union's order of sources)."""
    row = conn.execute("SELECT sid FROM team_source WHERE name = %s", (name,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO team_source (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (name,))
        row = conn.execute("SELECT sid FROM team_source WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


def read_source(conn: PgConn, sid: int) -> SourceRow:
    sql = f"SELECT name, part, next_id, {STATE_COLUMNS} FROM team_source WHERE sid = %s"
    row = conn.execute(sql, (sid,)).fetchone()
    assert row is not None
    name, part, next_id, *state = row
    fields: list[Any] = [bytes(value) if isinstance(value, memoryview) else value for value in state]
    return SourceRow(sid, part, int(next_id), SourceState(name, *fields) if fields[0] is not None else None)


def classify(
    state: SourceState | None, fd: int, st: os.stat_result, *, chain: AppendChain | None = None
) -> tuple[Change, PrefixDigest | None]:
    """The SQLite index's classification, with identity proven by content rather than by inode.

    A CI job sees each push in a fresh clone: another device and inode, the same
    bytes.  The digest of every indexed byte decides, as it does for an append, except
    after memstore's own appends to the same file (``chain``), where it is resumed.
    """
    if state is None or not state.consistent():
        return Change.REPLACED, None
    if state.is_current(fd, st):
        return Change.NONE, None
    if st.st_size < state.indexed_to:
        return Change.REPLACED, None
    if state.appended_since(chain, st):
        resumed = state.resumed_prefix(fd)
        if resumed is not None:
            return Change.GROWN, resumed
    prefix = state.verified_prefix(fd)
    if prefix is None:
        return Change.REPLACED, None
    return Change.GROWN, prefix


@contextlib.contextmanager
def source_lock(conn: PgConn, name: str) -> Iterator[list[int]]:
    """Hold the source's advisory lock (session level) for the whole catch-up.

    The lock is taken in one multi-statement query.  It is released in a statement of its
    own: a release that fails, or finds no lock, closes the connection (the server then
    drops every lock the session held) rather than return a locked session to the pool.
    Taking the lock is bounded by a read's cap when a store's read runs the catch-up
    (:func:`~memstore.index.pg_deadline.wait_cap`); the work under it is not (the load's
    own per-wait limit is).  The retired partitions are read afterwards (yielded, filled once the lock is
    released) for the caller to drop without holding the source's lock; a failure to
    read them only leaves them for a later catch-up.
    """
    conn.execute(
        SQL(
            "BEGIN; SET LOCAL lock_timeout = {timeout}; SELECT pg_advisory_lock({space}, hashtext({name})); COMMIT"
        ).format(timeout=SOURCE_LOCK_TIMEOUT, space=LOCK_SPACE, name=name)
    )
    retired: list[int] = []
    try:
        with uncapped():
            yield retired
    finally:
        if not conn.closed and not conn.broken:
            released = False
            with contextlib.suppress(psycopg.Error):
                row = conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_SPACE, name)).fetchone()
                released = bool(row is not None and row[0])
            if not released:
                conn.close()
            else:
                with contextlib.suppress(psycopg.Error):
                    found = conn.execute("SELECT ARRAY(SELECT part FROM team_retired ORDER BY part)").fetchone()
                    retired[:] = [int(part) for part in found[0]] if found is not None else []


class SourceLoader:
    """Catches one named source up from its file (memory.jsonl of one checkout)."""

    def __init__(self, engine: Engine, name: str, path: Path, *, progress: Progress | None = None) -> None:
        self.engine = engine
        self.name = name
        self.path = Path(path)
        self.progress = progress
        self._seen: list[LinesSeen] = []
        """What the parse read, for the digest to prove the file still holds it."""

    def catch_up(self, *, full: bool = False, extra: Callable[[PgConn, int], None] | None = None) -> LoadResult:
        """Bring the source's rows level with its file; ``extra(conn, sid)`` runs under the same lock."""
        started = time.perf_counter()
        with raw_connection(self.engine) as conn, contextlib.ExitStack() as later:
            second: list[PgConn] = []

            def vconn() -> PgConn:
                """The second connection (vocabulary inserts and index builds beside a full load), on first use."""
                if not second:
                    second.append(later.enter_context(raw_connection(self.engine)))
                return second[0]

            sid = register(conn, self.name)
            with source_lock(conn, self.name) as retired:
                for attempt in range(1, CHANGED_TRIES + 1):
                    self._seen = []
                    try:
                        result = self._catch_up(conn, vconn, sid, full=full)
                        break
                    except _FileChanged:
                        # Another tool wrote the file while it was read: nothing was made visible.
                        if attempt == CHANGED_TRIES:
                            raise StorageError(
                                f"{self.path} kept changing while it was indexed ({CHANGED_TRIES} tries)"
                            ) from None
                if extra is not None:
                    extra(conn, sid)
            self._drop_retired(conn, retired)
        return LoadResult(result[0], result[1], result[2], round(time.perf_counter() - started, 6), result[3])

    def _catch_up(
        self, conn: PgConn, vconn: Callable[[], PgConn], sid: int, *, full: bool
    ) -> tuple[str, int, int, int]:
        source = read_source(conn, sid)
        fd = open_for_read(self.path)
        if fd is None:
            rows = source.state.rows if source.state else 0
            return "missing", rows, 0, source.state.indexed_to if source.state else 0
        try:
            st = os.fstat(fd)
            chain = read_chain(sync_lock_path(self.path))
            # A state whose partition or next id cannot be right (a damaged row) is rebuilt from the file.
            damaged = source.state is not None and (source.part is None or source.next_id <= source.state.rows)
            change, prefix = (Change.REPLACED, None) if full or damaged else classify(source.state, fd, st, chain=chain)
            state = source.state
            if change is Change.NONE and state is not None:
                # Nothing new: the source is still known current as of now.
                conn.execute("UPDATE team_source SET caught_up_at = now() WHERE sid = %s", (sid,))
                return "none", state.rows, 0, _indexed(state)
            if (
                change is Change.GROWN
                and state is not None
                and st.st_size - state.indexed_to <= max(state.indexed_to, 1 << 20)
            ):
                added, new = self._append(conn, source, fd, st, prefix, chain)
                return "appended", new.rows, added, _indexed(new)
            first = source.part is None
            rows = self._rebuild(conn, vconn(), source, fd, st, chain)
            return "built" if first else "rebuilt", rows, rows, _indexed(read_source(conn, sid).state)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ appends

    def _append(
        self,
        conn: PgConn,
        source: SourceRow,
        fd: int,
        st: os.stat_result,
        prefix: PrefixDigest | None,
        chain: AppendChain | None,
    ) -> tuple[int, SourceState]:
        """The new lines added in one transaction; how many, and the state committed with them.

        ``chain`` is the append chain read right after ``st`` was taken (the one read of the
        sync lock).  New terms go in on ``conn`` before the transaction opens (autocommit).
        """
        state = source.state
        assert state is not None and source.part is not None
        parsed = parse_range(fd, state.indexed_to, st.st_size)
        docs = [doc_of(row) for row in parsed.rows]
        tail_end = None
        if parsed.tail is not None:
            docs.append(doc_of(parsed.tail))
            tail_end = parsed.tail_end
        vocab = Vocabulary(conn)
        vocab.ensure(wanted_terms(docs))
        counts: Counter[bytes] = Counter()
        next_id = source.next_id
        rows = state.rows
        encoding = conn.info.encoding
        with conn.transaction():
            if state.tail_end is not None:
                # The unterminated last line is parsed again with whatever follows it now.
                gone = conn.execute(
                    "DELETE FROM team_doc WHERE part = %s AND id = %s RETURNING cterms, tterms",
                    (source.part, next_id - 1),
                ).fetchone()
                if gone is not None:
                    rows -= 1
                    for ids in gone:
                        counts.subtract(map(id_element, ids))
            rows_out = _RowWriter(source.part, source.sid, id_lookups(vocab.ids), counts, fd, encoding)
            with conn.cursor().copy(f"COPY {partition_name(source.part)} ({DOC_COLUMNS}) FROM STDIN {BINARY}") as copy:
                copy.write(HEADER)
                rows_out.write(copy, docs, first_id=next_id)
                copy.write(TRAILER)
            next_id += len(docs)
            rows += len(docs)
            _add_counts(conn, source.sid, counts)
            new = SourceState.of_file(
                self.name,
                fd,
                st,
                indexed_to=parsed.end,
                tail_end=tail_end,
                rows=rows,
                corrupt=state.corrupt + parsed.corrupt,
                blank=state.blank + parsed.blank,
                prefix=prefix,
                seen=[parsed.seen] if parsed.seen is not None else [],
                chain=chain,
            )
            if new is None:
                raise _FileChanged
            _save_state(conn, source.sid, new, next_id=next_id, part=source.part)
        return len(docs), new

    # ------------------------------------------------------------------ full loads

    def _rebuild(
        self, conn: PgConn, vconn: PgConn, source: SourceRow, fd: int, st: os.stat_result, chain: AppendChain | None
    ) -> int:
        if source.part is not None and source.state is not None and source.state.rows <= IN_PLACE_ROWS:
            docs, parsed_end, tail_end, corrupt, blank = self._parse_all(fd, st)
            if len(docs) <= IN_PLACE_ROWS:
                parsed = (docs, parsed_end, tail_end, corrupt, blank)
                return self._rebuild_in_place(conn, vconn, source, fd, st, parsed, chain)
        part = int(_scalar(conn, "SELECT nextval('team_part_seq')"))
        table = partition_name(part)
        attached = False
        try:
            rows, counts, end, tail_end, corrupt, blank = self._load_table(conn, vconn, source.sid, part, table, fd, st)
            self._build_indexes(conn, vconn, table)
            # Statistics before anyone reads it: without them the planner guesses that the
            # partition filter is selective and scans the primary key of every partition.
            conn.execute(f"ANALYZE {table}")
            new = SourceState.of_file(
                self.name,
                fd,
                st,
                indexed_to=end,
                tail_end=tail_end,
                rows=rows,
                corrupt=corrupt,
                blank=blank,
                seen=self._seen,
                chain=chain,
            )
            if new is None:
                raise _FileChanged
            with conn.transaction():
                conn.execute(f"ALTER TABLE team_doc ATTACH PARTITION {table} FOR VALUES IN ({part})")
                attached = True
                conn.execute("DELETE FROM team_count WHERE sid = %s", (source.sid,))
                _copy_counts(conn, source.sid, counts)
                _save_state(conn, source.sid, new, next_id=rows + 1, part=part)
                if source.part is not None:
                    conn.execute("INSERT INTO team_retired (part) VALUES (%s) ON CONFLICT DO NOTHING", (source.part,))
            # The vocabulary and the counts grew by a whole file: fresh estimates for the lookups.
            conn.execute("ANALYZE team_term, team_count")
        except BaseException:
            if not attached and not conn.closed and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            raise
        return rows

    def _parse_all(self, fd: int, st: os.stat_result) -> tuple[list[Doc], int, int | None, int, int]:
        parsed = parse_range(fd, 0, st.st_size)
        self._seen = [parsed.seen] if parsed.seen is not None else []
        docs = [doc_of(row) for row in parsed.rows]
        if parsed.tail is not None:
            docs.append(doc_of(parsed.tail))
        return docs, parsed.end, parsed.tail_end, parsed.corrupt, parsed.blank

    def _rebuild_in_place(
        self,
        conn: PgConn,
        vconn: PgConn,
        source: SourceRow,
        fd: int,
        st: os.stat_result,
        parsed: tuple[Sequence[Doc], int, int | None, int, int],
        chain: AppendChain | None,
    ) -> int:
        """A small source rewritten: its rows replaced in its current partition, in one transaction."""
        assert source.part is not None
        docs, end, tail_end, corrupt, blank = parsed
        vocab = Vocabulary(vconn)
        vocab.ensure(wanted_terms(docs))
        counts: Counter[bytes] = Counter()
        encoding = conn.info.encoding
        with conn.transaction():
            conn.execute("DELETE FROM team_doc WHERE part = %s", (source.part,))
            rows_out = _RowWriter(source.part, source.sid, id_lookups(vocab.ids), counts, fd, encoding)
            with conn.cursor().copy(f"COPY {partition_name(source.part)} ({DOC_COLUMNS}) FROM STDIN {BINARY}") as copy:
                copy.write(HEADER)
                rows_out.write(copy, docs, first_id=1)
                copy.write(TRAILER)
            conn.execute("DELETE FROM team_count WHERE sid = %s", (source.sid,))
            _copy_counts(conn, source.sid, counts)
            new = SourceState.of_file(
                self.name,
                fd,
                st,
                indexed_to=end,
                tail_end=tail_end,
                rows=len(docs),
                corrupt=corrupt,
                blank=blank,
                seen=self._seen,
                chain=chain,
            )
            if new is None:
                raise _FileChanged
            _save_state(conn, source.sid, new, next_id=len(docs) + 1, part=source.part)
        return len(docs)

    def _load_table(
        self, conn: PgConn, vconn: PgConn, sid: int, part: int, table: str, fd: int, st: os.stat_result
    ) -> tuple[int, Counter[bytes], int, int | None, int, int]:
        """Create the new partition's table and COPY every line into it (one transaction, FREEZE)."""
        vocab = Vocabulary(vconn)
        counts: Counter[bytes] = Counter()
        encoding = conn.info.encoding
        rows_out = _RowWriter(part, sid, id_lookups(vocab.ids), counts, fd, encoding)
        self._seen = []  # this parse alone (a small source may have been parsed once already)
        row_id = 0
        end, tail_end, corrupt, blank = 0, None, 0, 0
        total = st.st_size
        with conn.transaction():
            conn.execute(f"CREATE TABLE {table} (LIKE team_doc INCLUDING DEFAULTS)")
            conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_part CHECK (part = {part})")
            with conn.cursor().copy(f"COPY {table} ({DOC_COLUMNS}) FROM STDIN (FORMAT BINARY, FREEZE)") as copy:
                copy.write(HEADER)
                for parsed in parsed_ranges(self.path, fd, 0, total):
                    if parsed.seen is not None:
                        self._seen.append(parsed.seen)
                    rows = [*parsed.rows, *([parsed.tail] if parsed.tail is not None else [])]
                    for start in range(0, len(rows), BATCH_ROWS):
                        docs = [doc_of(row) for row in rows[start : start + BATCH_ROWS]]
                        vocab.ensure(wanted_terms(docs))
                        rows_out.write(copy, docs, first_id=row_id + 1)
                        row_id += len(docs)
                    end = parsed.end
                    corrupt += parsed.corrupt
                    blank += parsed.blank
                    if parsed.tail is not None:
                        tail_end = parsed.tail_end
                    if self.progress is not None:
                        self.progress(parsed.end, total)
                copy.write(TRAILER)
        return row_id, counts, end, tail_end, corrupt, blank

    def _build_indexes(self, conn: PgConn, vconn: PgConn, table: str) -> None:
        """The parent's indexes on the new table, so ATTACH finds them built (two at a time)."""
        definitions = [
            str(row[0])
            for row in conn.execute(
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
                " WHERE i.indrelid = 'team_doc'::regclass AND NOT i.indisprimary ORDER BY i.indexrelid"
            ).fetchall()
        ]
        statements = [f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (part, id)"]
        for number, definition in enumerate(definitions):
            head, _on, rest = definition.partition(" ON ONLY ")
            _table, _space, using = rest.partition(" ")
            unique = "UNIQUE " if head.startswith("CREATE UNIQUE") else ""
            statements.append(f"CREATE {unique}INDEX {table}_i{number} ON {table} {using}")
        # The content terms' GIN costs most: it builds on the second connection meanwhile.
        heavy = [statement for statement in statements if "(cterms)" in statement]
        light = [statement for statement in statements if statement not in heavy]
        failure: list[BaseException] = []

        def build(connection: PgConn, ddl: Sequence[str]) -> None:
            try:
                with connection.transaction():
                    connection.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_MEMORY}'")
                    for statement in ddl:
                        connection.execute(statement)
            except BaseException as exc:
                failure.append(exc)

        helper = threading.Thread(target=build, args=(vconn, heavy), daemon=True)
        helper.start()
        build(conn, light)
        helper.join()
        if failure:
            raise failure[0]

    # ------------------------------------------------------------------ retired partitions

    @staticmethod
    def _drop_retired(conn: PgConn, retired: Sequence[int]) -> None:
        """Detach (concurrently: running searches finish first) and drop partitions no source uses.

        ``retired`` was read as the source's lock was released.  One indexer at a time does it (a
        try-lock: the others leave it to that one), so two never race to detach the same partition.
        """
        if not retired or not _scalar(conn, f"SELECT pg_try_advisory_lock({SCHEMA_LOCK}, {RETIRE_KEY})"):
            return
        try:
            SourceLoader._drop_parts(conn, retired)
        finally:
            if not conn.closed and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.execute(f"SELECT pg_advisory_unlock({SCHEMA_LOCK}, {RETIRE_KEY})")

    @staticmethod
    def _drop_parts(conn: PgConn, retired: Sequence[int]) -> None:
        for part in retired:
            table = partition_name(part)
            try:
                attached = conn.execute(
                    "SELECT i.inhdetachpending FROM pg_inherits i"
                    " WHERE i.inhrelid = to_regclass(%s) AND i.inhparent = 'team_doc'::regclass",
                    (table,),
                ).fetchone()
                if attached is not None:
                    mode = "FINALIZE" if attached[0] else "CONCURRENTLY"
                    conn.execute(f"ALTER TABLE team_doc DETACH PARTITION {table} {mode}")
                conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute("DELETE FROM team_retired WHERE part = %s", (part,))
            except pg_errors.ObjectNotInPrerequisiteState as exc:
                log.info("retired partition %s kept for a later catch-up: %s", table, exc)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                log.info("retired partition %s kept for a later catch-up: %s", table, exc)


def _scalar(conn: PgConn, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _indexed(state: SourceState | None) -> int:
    if state is None:
        return 0
    return state.tail_end if state.tail_end is not None else state.indexed_to


class _RowWriter:
    """One partition's rows into a binary COPY, with their terms counted: every load path writes through it.

    Rows go out in writes of about :data:`WRITE_BYTES`: a write per row costs more than
    building the row, and one per batch would hold a batch of long lines twice over.
    """

    __slots__ = ("counts", "encoding", "fd", "held", "lookups", "part", "sid")

    def __init__(self, part: int, sid: int, lookups: IdLookups, counts: Counter[bytes], fd: int, encoding: str) -> None:
        self.part, self.sid, self.lookups, self.counts = part, sid, lookups, counts
        self.fd, self.encoding = fd, encoding
        self.held: list[list[bytes]] = []

    def write(self, copy: Copy, docs: Sequence[Doc], *, first_id: int) -> None:
        """Rows for ``docs`` numbered from ``first_id``; their terms are in ``counts`` on return."""
        pending, size = list[bytes](), 0
        for row_id, doc in enumerate(docs, start=first_id):
            row = self._row(doc, row_id)
            pending.append(row)
            size += len(row)
            if size >= WRITE_BYTES:
                copy.write(b"".join(pending))
                pending, size = [], 0
        if pending:
            copy.write(b"".join(pending))
        count_held(self.counts, self.held)

    def _row(self, doc: Doc, row_id: int) -> bytes:
        """The row in COPY's binary format; texts in the connection's encoding, as psycopg would send them."""
        raw = os.pread(self.fd, doc.length, doc.off)
        part, sid, off, length = self.part, self.sid, doc.off, doc.length
        if doc.odd or doc.created_at is None:
            return doc_row(part, row_id, sid, b"", b"", None, 0, True, off, length, EMPTY_ARRAY, EMPTY_ARRAY, raw)
        cterms, tterms = id_arrays(doc, self.lookups, self.held)
        encoding = self.encoding
        c, t, created_at = doc.c.encode(encoding), doc.t.encode(encoding), doc.created_at.encode(encoding)
        return doc_row(part, row_id, sid, c, t, created_at, doc.bonus, False, off, length, cterms, tterms, raw)


def _add_counts(conn: PgConn, sid: int, counts: Counter[bytes]) -> None:
    changed = sorted((element_id(tid), n) for tid, n in counts.items() if n)
    if not changed:
        return
    conn.execute(
        "INSERT INTO team_count (sid, tid, n) SELECT %s, u.tid, u.n FROM unnest(%s::int[], %s::int[]) AS u(tid, n)"
        " ON CONFLICT (sid, tid) DO UPDATE SET n = team_count.n + EXCLUDED.n",
        (sid, [tid for tid, _n in changed], [n for _tid, n in changed]),
    )


def _copy_counts(conn: PgConn, sid: int, counts: Counter[bytes]) -> None:
    """Per-source term counts, keyed by id as a row's array holds it (:mod:`.copy_binary`)."""
    with conn.cursor().copy("COPY team_count (sid, tid, n) FROM STDIN") as copy:
        for tid, n in counts.items():
            if n > 0:
                copy.write_row((sid, element_id(tid), n))


def _save_state(conn: PgConn, sid: int, state: SourceState, *, next_id: int, part: int) -> None:
    conn.execute(
        "UPDATE team_source SET dev = %s, ino = %s, size = %s, mtime_ns = %s, ctime_ns = %s, indexed_to = %s,"
        " tail_end = %s, head_hash = %s, edge_hash = %s, body_hash = %s, recorded_ns = %s, rows = %s,"
        " corrupt = %s, blank = %s, next_id = %s, part = %s, caught_up_at = now() WHERE sid = %s",
        (
            state.dev, state.ino, state.size, state.mtime_ns, state.ctime_ns, state.indexed_to, state.tail_end,
            state.head_hash, state.edge_hash, state.body_hash, state.recorded_ns, state.rows, state.corrupt,
            state.blank, next_id, part, sid,
        ),
    )  # fmt: skip
