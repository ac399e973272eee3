"""TeamIndex: one exact search over many repositories' memory, in a shared PostgreSQL database.

Each *source* is one checkout's ``.teaagent/memory.jsonl`` (and its failure cards)
under a name.  ``reindex`` catches sources up from their byte offsets, as the SQLite
index does; ``search`` answers the spec's ranking over the union of the chosen
sources — exactly what a scan of those files, as they were at their last catch-up,
gives — with every hit labelled by its source and, for each source, how current it
is.  Ties in score and ``created_at`` are broken by source registration order, then
line order (the union's file order).

Only a reader role is needed to search; ``reindex`` needs the writer.  Every
database failure is a typed one-line :class:`~memstore.errors.IndexServerError`
naming the URL without its password.  SQLAlchemy and psycopg load only when a
TeamIndex is used.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstore.background import map_threads
from memstore.card_match import check_file_paths, task_keywords
from memstore.checks import check_limit, optional_str, require_str
from memstore.errors import IndexServerError, InvalidArgumentError
from memstore.index.report import Progress
from memstore.index_url import IndexUrl, parse_index_url
from memstore.jsonl import decode_entry
from memstore.layout import FAILURES_FILE, memory_dir, store_dir
from memstore.models import MemoryEntry, memory_matches, memory_relevance_score, query_tokens
from memstore.team_report import (
    SourceFreshness,
    TeamCardHit,
    TeamCardResult,
    TeamHit,
    TeamReindexReport,
    TeamSearchResult,
    TeamSourceReport,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from memstore.index.pg.loader import PgConn
    from memstore.index.search import Hit, PlannerFactory

CATALOG_FILE = "memory.jsonl"
LOAD_WORKERS = 2
"""Sources loaded at once: one parses while the server builds the other's indexes."""
PROCESS_BYTES = 8 * 1024 * 1024
"""A reindex with at least this much to read loads its sources in worker processes (starting one
costs about half a second; a source's parse is Python, and threads of one process take turns)."""


@dataclass(frozen=True)
class _Source:
    sid: int
    name: str
    part: int | None
    rows: int
    indexed: int
    caught_up_at: datetime | None
    cards: int

    def freshness(self) -> SourceFreshness:
        stamp = None
        if self.caught_up_at is not None:
            stamp = self.caught_up_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return SourceFreshness(self.name, self.rows, self.indexed, stamp, self.cards)


def check_source_name(name: object) -> str:
    """A source name as stored: trimmed, printable, non-empty text."""
    text = require_str("source name", name).strip()
    if not text or "\x00" in text or not text.isprintable():
        raise InvalidArgumentError(f"source name must be printable, non-empty text: {name!r}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"source name is not valid text: {name!r}") from None
    return text


class TeamIndex:
    """A team index on PostgreSQL, named by its URL (``postgresql://role@host/db``).

    ``read_deadline_s`` bounds each search, ``find_matching`` and ``sources`` on the
    client, whatever the server does (default: the statement timeout plus 5 s, or
    ``$MEMSTORE_PG_READ_DEADLINE``); past it the read raises IndexServerError.
    """

    def __init__(self, url: str | IndexUrl, *, read_deadline_s: float | None = None) -> None:
        self.url = parse_index_url(url) if isinstance(url, str) else url
        self._read_deadline_s = _check_deadline(read_deadline_s)
        self._engines: dict[str, Engine] = {}

    def __repr__(self) -> str:
        return f"TeamIndex({self.url.redacted()!r})"

    def _engine(self, purpose: str) -> Engine:
        engine = self._engines.get(purpose)
        if engine is None:
            from memstore.index.pg_connect import create_engine

            # Loads run COPY and index builds that may take minutes: no statement timeout.
            if purpose == "load":
                engine = create_engine(self.url, statement_timeout_ms=0)
            else:
                engine = create_engine(self.url, read_deadline_s=self._read_deadline_s)
            self._engines[purpose] = engine
        return engine

    def close(self) -> None:
        """Return every pooled connection (the index can still be used afterwards)."""
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()

    def __enter__(self) -> TeamIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def reindex(
        self,
        sources: Mapping[str, str | os.PathLike[str]],
        *,
        full: bool = False,
        workers: int = LOAD_WORKERS,
        progress: Progress | None = None,
    ) -> TeamReindexReport:
        """Create or migrate the schema, then catch every source ``{name: workspace root}`` up.

        ``full`` reloads each source from its file.  Sources load ``workers`` at a time;
        each one's change becomes visible to searches in one transaction.
        """
        from memstore.index.pg.migrate import upgrade_team

        checked = [(check_source_name(name), Path(root)) for name, root in sources.items()]
        names = [name for name, _root in checked]
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise InvalidArgumentError(f"two sources have the same name (after trimming spaces): {', '.join(twice)}")
        started = time.perf_counter()
        engine = self._engine("load")
        schema = upgrade_team(engine)
        indexed = self._register([name for name, _root in checked])
        threads = max(1, min(workers, len(checked) or 1))
        in_processes = progress is None and threads > 1 and _pending(checked, indexed, full=full) >= PROCESS_BYTES
        load = self._loader_in_processes(full=full) if in_processes else None
        if load is None and threads == 1:
            # One at a time: no thread to start (a catch-up of one line is a few milliseconds).
            reports = [self._load(engine, *item, full=full, progress=progress) for item in checked]
            return TeamReindexReport(
                self.url.redacted(), schema, tuple(reports), round(time.perf_counter() - started, 6)
            )
        if load is None:
            reports = map_threads(
                lambda item: self._load(engine, *item, full=full, progress=progress),
                checked,
                threads=threads,
                name="memstore-team-load",
            )
        else:
            with load as each:
                reports = map_threads(
                    lambda item: each(engine, *item), checked, threads=threads, name="memstore-team-load"
                )
        return TeamReindexReport(self.url.redacted(), schema, tuple(reports), round(time.perf_counter() - started, 6))

    def _register(self, names: Sequence[str]) -> dict[str, int]:
        """Register new sources one by one, in the order given (sids are the union's order of sources);
        how many bytes of each are indexed."""
        from memstore.index.pg.conn import raw_connection
        from memstore.index.pg.loader import register

        if len(names) < 2:
            # One source: its catch-up registers it (no order to keep), and loads in this
            # process whatever it holds, so there is nothing to know beforehand.
            return {}
        with raw_connection(self._engine("load")) as conn:
            for name in names:
                register(conn, name)
            rows = conn.execute(
                "SELECT name, coalesce(indexed_to, 0) FROM team_source WHERE name = ANY(%s)", (list(names),)
            ).fetchall()
        return {str(name): int(str(done)) for name, done in rows}

    @contextlib.contextmanager
    def _loader_in_processes(self, *, full: bool) -> Iterator[Callable[[Engine, str, Path], TeamSourceReport]]:
        """A load function for the pool's threads, each handing its sources to a worker process of its own.

        A thread whose worker cannot start or stops loads its sources itself.
        """
        from memstore.index.pg.load_worker import LoadWorker

        local = threading.local()
        started: list[LoadWorker] = []
        lock = threading.Lock()

        def each(engine: Engine, name: str, root: Path) -> TeamSourceReport:
            if not hasattr(local, "worker"):
                local.worker = LoadWorker.start(self.url)
                if local.worker is not None:
                    with lock:
                        started.append(local.worker)
            worker: LoadWorker | None = local.worker
            answer = worker.load(name, root, full=full) if worker is not None else None
            if isinstance(answer, TeamSourceReport):
                return answer
            if answer is not None:
                raise answer
            local.worker = None
            return self._load(engine, name, root, full=full, progress=None)

        try:
            yield each
        finally:
            for worker in started:
                worker.stop()

    def _load(
        self, engine: Engine, name: str, root: Path, *, full: bool, progress: Progress | None
    ) -> TeamSourceReport:
        from memstore.failure_cards import records_from_bytes
        from memstore.index.pg.cards import sync_cards
        from memstore.index.pg.loader import SourceLoader

        cards: list[int | None] = [None]

        def with_cards(conn: PgConn, sid: int) -> None:
            # A source whose files are gone keeps its rows until they are back: its cards too.
            if not (store_dir(root) / CATALOG_FILE).exists() and not (memory_dir(root) / FAILURES_FILE).exists():
                return
            cards[0] = sync_cards(conn, sid, memory_dir(root) / FAILURES_FILE, records_from_bytes)

        loader = SourceLoader(engine, name, store_dir(root) / CATALOG_FILE, progress=progress)
        result = loader.catch_up(full=full, extra=with_cards)
        return TeamSourceReport(
            name, str(root), result.action, result.rows, result.added, result.indexed_bytes, result.seconds, cards[0]
        )

    # ------------------------------------------------------------------ reads

    def sources(self) -> tuple[SourceFreshness, ...]:
        """Every source the index holds, in registration order, with how current it is."""
        from memstore.index.pg.conn import raw_connection

        with raw_connection(self._engine("read")) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            chosen = self._chosen(conn, None)
            conn.execute("COMMIT")
        return tuple(source.freshness() for source in chosen)

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        sources: Iterable[str] | None = None,
        local: Mapping[str, str | os.PathLike[str]] | None = None,
        planner: PlannerFactory | None = None,
    ) -> TeamSearchResult:
        """The spec's top ``limit`` entries of the chosen ``sources`` (default: all of them).

        ``local`` maps source names to workspace roots on this machine.  When the
        database cannot answer (down, unreachable, refusing this role, no schema) and
        every chosen source is local, the answer comes from those workspaces' own
        index or a scan of their files, with ``fallback`` and a one-line warning set;
        otherwise (a team-wide search) the :class:`~memstore.errors.IndexServerError`
        is raised.
        """
        tokens = query_tokens(query)
        limit = check_limit(limit)
        names = None if sources is None else list(dict.fromkeys(check_source_name(name) for name in sources))
        try:
            return self._search(query, tokens, limit, names, planner)
        except IndexServerError as exc:
            roots = {check_source_name(name): Path(root) for name, root in (local or {}).items()}
            if names is None or not names or any(name not in roots for name in names):
                raise
            return _local_search(query, tokens, limit, [(name, roots[name]) for name in names], exc)

    def _search(
        self, query: str, tokens: list[str], limit: int, names: list[str] | None, planner: PlannerFactory | None
    ) -> TeamSearchResult:
        from memstore.index.pg.conn import raw_connection
        from memstore.index.pg.search import SEARCH_BEGIN
        from memstore.index.search import Planner

        with raw_connection(self._engine("read")) as conn:
            conn.execute(SEARCH_BEGIN, prepare=False)
            chosen = self._chosen(conn, names)
            hits: list[TeamHit] = []
            if tokens and limit:
                hits = self._hits(conn, tokens, limit, chosen, planner or Planner)
            conn.execute("COMMIT")
        return TeamSearchResult(query, tuple(hits), tuple(source.freshness() for source in chosen))

    def find_matching(
        self,
        file_paths: Iterable[str],
        task_description: str,
        error_type: str | None = None,
        limit: int = 3,
        *,
        sources: Iterable[str] | None = None,
    ) -> TeamCardResult:
        """Active failure cards of the chosen sources ranked as ``FailureCardStorage.find_matching`` ranks them."""
        from memstore.index.pg.cards import find_matching
        from memstore.index.pg.conn import raw_connection

        paths = check_file_paths(file_paths)
        keywords = task_keywords(task_description)
        optional_str("error_type", error_type)
        limit = check_limit(limit)
        names = None if sources is None else [check_source_name(name) for name in sources]
        now = time.time()
        with raw_connection(self._engine("read")) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            chosen = self._chosen(conn, names)
            sids = [source.sid for source in chosen]
            found = find_matching(conn, sids, paths, keywords, error_type, limit, now) if limit else []
            conn.execute("COMMIT")
        name_of = {source.sid: source.name for source in chosen}
        hits = tuple(TeamCardHit(name_of[sid], card) for sid, card in found)
        return TeamCardResult(hits, tuple(source.freshness() for source in chosen))

    # ------------------------------------------------------------------ plumbing

    def _chosen(self, conn: PgConn, names: Sequence[str] | None) -> list[_Source]:
        """The chosen sources as this snapshot holds them (the first statement: it fixes the snapshot)."""
        from memstore.index.pg.schema import TEAM_REVISION

        rows = conn.execute(
            "SELECT sid, name, part, rows, coalesce(tail_end, indexed_to, 0), caught_up_at, cards,"
            " (SELECT min(version_num) FROM alembic_version WHERE version_num LIKE 't%%')"
            " FROM team_source ORDER BY sid"
        ).fetchall()
        if rows and rows[0][7] != TEAM_REVISION:
            raise IndexServerError(
                f"PostgreSQL index {self.url.redacted()}: team schema {rows[0][7]!r}, this memstore reads"
                f" {TEAM_REVISION!r} (run memstore reindex --index-url with the newest memstore)"
            )
        every = [_Source(int(r[0]), str(r[1]), r[2], int(r[3]), int(r[4]), r[5], int(r[6])) for r in rows]
        if names is None:
            return every
        by_name = {source.name: source for source in every}
        missing = [name for name in names if name not in by_name]
        if missing:
            known = ", ".join(sorted(by_name)) or "none"
            raise InvalidArgumentError(f"no source named {missing[0]!r} in the team index (sources: {known})")
        wanted = set(names)
        return [source for source in every if source.name in wanted]

    def _entries(self, conn: PgConn, hits: Sequence[Hit], parts: Mapping[int, int]) -> list[tuple[int, MemoryEntry]]:
        """The stored lines of these hits, decoded, by row key."""
        from memstore.index.pg.search import ODD_AND_LINES, row_key

        if not hits:
            return []
        fetched = conn.execute(ODD_AND_LINES, _lines_params(hits, parts, odd_parts=[]), prepare=True).fetchall()
        return [(row_key(int(sid), int(row_id)), self._decode(raw)) for sid, row_id, raw, _odd in fetched]

    def _hits(
        self, conn: PgConn, tokens: list[str], limit: int, chosen: Sequence[_Source], planner: PlannerFactory
    ) -> list[TeamHit]:
        from memstore.index.pg.search import ODD_AND_LINES, PgSearch, row_key, split_key
        from memstore.index.search import MAX_SQL_TOKENS, Hit, sql_tokens
        from memstore.index.sqltext import sql_safe

        parts = {source.sid: source.part for source in chosen if source.part is not None}
        if not parts:
            return []
        total = sum(source.rows for source in chosen if source.part is not None)
        hits: list[Hit] = []
        known: dict[int, MemoryEntry] = {}
        if all(sql_safe(token) for token in tokens):
            if len(set(tokens)) > MAX_SQL_TOKENS:
                # More tokens than one statement binds: every row holding all of them holds the
                # first MAX_SQL_TOKENS, so those rows are found in SQL and checked here in full.
                some = sorted(set(tokens))[:MAX_SQL_TOKENS]
                # Every row holding them: counted here, as the sources' counts are database input (rare path).
                counted = conn.execute(
                    "SELECT count(*) FROM team_doc WHERE part = ANY(%s)", (sorted(parts.values()),)
                ).fetchone()
                every = max(int(counted[0]) if counted is not None else 0, 1)
                for key, entry in self._entries(
                    conn, planner(PgSearch(conn, some, parts=parts, k=every), some, every, every).run(), parts
                ):
                    if memory_matches(entry, tokens):
                        known[key] = entry
                        hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, key))
            elif sql_tokens(tokens):
                hits = planner(PgSearch(conn, tokens, parts=parts, k=limit), tokens, limit, total).run()
        # Odd rows (what SQL cannot hold exactly) are scored here, from the bytes the file held; the
        # same statement brings the stored lines of the best SQL hits (one round trip for both).
        first = [hit for hit in sorted(hits, key=Hit.sort_key)[:limit] if hit.row_id not in known]
        for sid, row_id, raw, odd in conn.execute(
            ODD_AND_LINES, _lines_params(first, parts, odd_parts=sorted(parts.values())), prepare=True
        ).fetchall():
            entry = self._decode(raw)
            key = row_key(int(sid), int(row_id))
            if not odd:
                known.setdefault(key, entry)
            elif memory_matches(entry, tokens):
                known[key] = entry
                hits.append(Hit(memory_relevance_score(entry, tokens), entry.created_at, key))
        hits.sort(key=Hit.sort_key)
        top = hits[:limit]
        known.update(self._entries(conn, [hit for hit in top if hit.row_id not in known], parts))
        name_of = {source.sid: source.name for source in chosen}
        result = []
        for hit in top:
            found = known.get(hit.row_id)
            # The index is input: a hit is returned only when the stored line still matches.
            if found is None or not memory_matches(found, tokens):
                raise IndexServerError(f"PostgreSQL index {self.url.redacted()}: a row changed during the search")
            result.append(TeamHit(name_of[split_key(hit.row_id)[0]], hit.score, found))
        return result

    def _decode(self, raw: Any) -> MemoryEntry:
        entry = decode_entry(bytes(raw))
        if entry is None:
            raise IndexServerError(f"PostgreSQL index {self.url.redacted()}: a stored line no longer decodes")
        return entry


def _check_deadline(seconds: object) -> float | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < float("inf"):
        raise InvalidArgumentError(f"read_deadline_s must be a number of seconds >= 0 (0: no limit): {seconds!r}")
    return float(seconds)


def _pending(checked: Sequence[tuple[str, Path]], indexed: Mapping[str, int], *, full: bool) -> int:
    """Bytes the sources' files hold beyond what is indexed (all of them for a full load): an estimate
    that only chooses between threads and processes (a rewrite of the same size counts as none)."""
    total = 0
    for name, root in checked:
        with contextlib.suppress(OSError):
            size = (store_dir(root) / CATALOG_FILE).stat().st_size
            total += size if full else max(0, size - indexed.get(name, 0))
    return total


def _lines_params(hits: Sequence[Hit], parts: Mapping[int, int], *, odd_parts: Sequence[int]) -> dict[str, Any]:
    """Parameters of ``ODD_AND_LINES`` (memstore.index.pg.search): odd rows of ``odd_parts``, these hits' lines."""
    from memstore.index.pg.search import split_key

    wanted = [split_key(hit.row_id) for hit in hits]
    return {"odd_parts": list(odd_parts), "kp": [parts[sid] for sid, _id in wanted], "ki": [i for _sid, i in wanted]}


def _local_search(
    query: str, tokens: list[str], limit: int, chosen: Sequence[tuple[str, Path]], cause: IndexServerError
) -> TeamSearchResult:
    """The chosen local sources searched in place (their SQLite index or a scan), merged in the team's order."""
    from memstore.catalog import MemoryCatalog
    from memstore.layout import has_store
    from memstore.workspace import open_catalog

    ranked: list[tuple[int, int, int, TeamHit]] = []
    freshness = []
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for position, (name, root) in enumerate(chosen):
        # As a local search opens it: its own index when it can keep one, nothing created where no store is.
        catalog = open_catalog(root, for_reading=True) if has_store(root) else MemoryCatalog(root, readonly=True)
        found = catalog.search(query, limit=limit) if tokens and limit else []
        for order, entry in enumerate(found):
            ranked.append((position, order, 0, TeamHit(name, memory_relevance_score(entry, tokens), entry)))
        size = catalog.path.stat().st_size if catalog.path.exists() else 0
        freshness.append(SourceFreshness(name, None, size, now))
    # Each list is already in the spec's order; merged by score, then newest, then source and rank.
    ranked.sort(key=lambda item: (item[0], item[1]))
    ranked.sort(key=lambda item: item[3].entry.created_at, reverse=True)
    ranked.sort(key=lambda item: -item[3].score)
    hits = tuple(item[3] for item in ranked[:limit])
    names = ", ".join(name for name, _root in chosen)
    warning = f"team index unavailable, answered from the local files of {names}: {cause}"
    return TeamSearchResult(query, hits, tuple(freshness), fallback="local index", warnings=(warning,))
