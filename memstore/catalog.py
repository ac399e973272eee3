"""MemoryCatalog: tagged notes in an append-only JSONL file, searched exactly.

Writes go to the canonical file first, under ``memory.lock`` (taken by every
writer, ``add`` included), durably.  Reads are answered by the derived index when
it can be used and by a scan of the file otherwise; both give the same results.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memstore.checks import check_limit, check_readonly, require_mapping, require_str
from memstore.entry_filter import EntryFilter
from memstore.errors import (
    EntryNotFoundError,
    IndexUnavailableError,
    InvalidArgumentError,
    ReadonlyError,
)
from memstore.files import (
    DEFAULT_FILE_MODE,
    MAX_LINE_BYTES,
    PRIVATE_FILE_MODE,
    FileLock,
    open_for_read,
    remove_stale_temps,
    temp_in_use,
)
from memstore.id_prefix import (
    SHORT_ID_MIN,
    SHOWN_CANDIDATES,
    clean_prefix,
    pick,
    resolve_among,
    short_ids_among,
    shortest_unique,
)
from memstore.index.catalog_index import CatalogIndex
from memstore.index.db import IndexFile
from memstore.index_policy import IndexPolicy
from memstore.jsonl import encode_entries, encode_entry, is_blank, is_json, parse_json_bytes
from memstore.layout import CATALOG_FILE, CATALOG_LOCK, QUARANTINE_FILE, ensure_store, store_dir
from memstore.logger import LazyLogger
from memstore.models import MemoryEntry, new_memory_id, query_tokens, utc_now_iso
from memstore.scan import ScanCache, ScannedEntry, ScanResult, scan_list, scan_search, scan_show
from memstore.shared_index import CatalogReads, catalog_policy, check_index_url, check_name

if TYPE_CHECKING:
    from memstore.group_commit import GroupCommit, PendingAppend
    from memstore.index.base import HeldWrite
    from memstore.index.pg.store_reads import PgCatalogIndex
    from memstore.index.report import CheckResult, IndexState, Progress, RefreshReport
    from memstore.index.trace import SearchPlan, SearchTrace
    from memstore.reports import HealthReport, MaintenancePreview

# Rewrites (catalog_rewrite), explain (index.trace) and the reports load when first used:
# a process that only searches does not pay for their import.

T = TypeVar("T")
REWRITE_ATTEMPTS = 3
"""Tries of a rewrite when another tool keeps replacing the file under it."""

log = LazyLogger(__name__)


@dataclass(frozen=True)
class QuarantinedEntry:
    """A quarantined entry with its recorded provenance (reason, original branch, when)."""

    entry: MemoryEntry
    provenance: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "provenance": self.provenance}


class MemoryCatalog:
    """The project (or personal) memory catalog.

    ``root`` is the workspace; the files live in ``<root>/.teaagent``.  Use
    :meth:`in_directory` for a catalog whose files sit directly in a directory
    (the personal tier).  ``use_index=False`` forces the scan path.

    ``index_url`` (``postgresql://…``) makes a shared PostgreSQL index this catalog's
    index, under ``source_name`` (default: ``<repository>/memory.jsonl``, as the CLI
    names it); reads still answer exactly what a scan of the file returns, from the
    local files whenever the shared index cannot (:mod:`memstore.shared_index`).
    """

    _shared: IndexPolicy[PgCatalogIndex] | None

    def __init__(
        self,
        root: str | os.PathLike[str] = ".",
        *,
        readonly: bool = False,
        use_index: bool = True,
        index_url: str | None = None,
        source_name: str | None = None,
    ):
        self._setup(store_dir(root), readonly=readonly, private=False, use_index=use_index)
        self.root = Path(root)
        url = check_index_url(index_url, use_index=use_index)
        self._shared = catalog_policy(url, check_name(source_name), root=self.root, path=self.path)

    @classmethod
    def in_directory(
        cls,
        directory: str | os.PathLike[str],
        *,
        readonly: bool = False,
        private: bool = False,
        use_index: bool = True,
    ) -> MemoryCatalog:
        """A catalog whose memory.jsonl lives directly in ``directory``.

        ``private`` files are created 0600 in a 0700 directory (the personal tier).
        """
        catalog = cls.__new__(cls)
        catalog._setup(Path(directory), readonly=readonly, private=private, use_index=use_index)
        catalog.root = Path(directory)
        return catalog

    def _setup(self, directory: Path, *, readonly: bool, private: bool, use_index: bool) -> None:
        check_readonly(readonly)
        self._shared = None
        self.directory = directory
        self.path = directory / CATALOG_FILE
        self.quarantine_path = directory / QUARANTINE_FILE
        self.lock_path = directory / CATALOG_LOCK
        self.readonly = readonly
        self.private = private
        self._file_mode = PRIVATE_FILE_MODE if private else DEFAULT_FILE_MODE
        # One per thread at a time, safe to share; taken on every add, so each thread keeps its descriptor.
        self._writer_lock = FileLock(self.lock_path, mode=self._file_mode, keep_open=True)
        self._commits: dict[Path, GroupCommit] = {}  # made by the first write: readers never load it
        self._scan = ScanCache(self.path)
        self._quarantine_scan = ScanCache(self.quarantine_path)
        self._index: IndexPolicy[CatalogIndex] = IndexPolicy(
            functools.partial(CatalogIndex, self.path, readonly=readonly, private=private) if use_index else None,
            source=self.path,
        )
        if not readonly:
            # The spec's constructor contract: a writable catalog has its folder (a new
            # project store gets its .gitattributes and .gitignore with it).  Read-only
            # callers (the CLI's reads) pass readonly=True and create nothing.
            ensure_store(directory, private=private)

    # ------------------------------------------------------------------ writes

    def _require_writable(self, action: str) -> None:
        if self.readonly:
            raise ReadonlyError(f"Cannot {action} in readonly mode")

    def _group(self, path: Path) -> GroupCommit:
        """The group commit of one of the catalog's files, made on first use (writes only)."""
        group = self._commits.get(path)
        if group is None:
            from memstore.group_commit import GroupCommit

            group = self._commits.setdefault(path, GroupCommit(path, mode=self._file_mode))
        return group

    def _lock(self) -> FileLock:
        return self._writer_lock

    def _new_entry(self, content: str, tags: Iterable[str], branch_name: str | None, run_id: str | None) -> MemoryEntry:
        return MemoryEntry(
            memory_id=new_memory_id(),
            content=content,
            tags=tags,  # type: ignore[arg-type]  # normalised (and type-checked) by MemoryEntry
            created_at=utc_now_iso(),
            branch_name=branch_name,
            run_id=run_id,
        )

    def add(
        self,
        content: str,
        *,
        tags: Iterable[str] = (),
        branch_name: str | None = None,
        run_id: str | None = None,
    ) -> MemoryEntry:
        """Append one entry durably; the returned entry is on disk when this returns."""
        self._require_writable("add memory")
        entry = self._new_entry(content, tags, branch_name, run_id)
        self._append_durably(self.path, _readable(encode_entry(entry)))
        return entry

    def add_quarantined(
        self,
        content: str,
        *,
        tags: Iterable[str] = (),
        provenance: Mapping[str, Any],
        branch_name: str | None = None,
        run_id: str | None = None,
    ) -> MemoryEntry:
        """Append to the quarantine file only; quarantined entries never reach memory.jsonl."""
        self._require_writable("add quarantined memory")
        require_mapping("provenance", provenance, wanted="a dict")
        entry = self._new_entry(content, tags, branch_name, run_id)
        self._append_durably(
            self.quarantine_path, _readable(encode_entry(entry, quarantine=True, provenance=dict(provenance)))
        )
        return entry

    def _append_durably(self, path: Path, lines: bytes) -> None:
        """Append under the writer lock, then wait for durability after releasing it.

        Waiting outside the lock lets the appends of other writers queue up behind
        one fsync (group commit, :mod:`memstore.group_commit`).  A torn last line left
        by a writer killed mid-append is set aside first: appending after it would bury
        a corrupt line in the middle of the file for every reader.
        """
        pending: PendingAppend | None = None
        try:
            with self._lock():
                pending = self._group(path).append(lines, is_whole=_is_whole_line)
            pending.commit()
        finally:
            if pending is not None:
                pending.close()

    def delete_by_branch(self, branch_name: str) -> int:
        self._require_writable("delete memory")
        require_str("branch_name", branch_name)
        return len(self._rewrite_without("branch_name", branch_name))

    def delete_by_run_id(self, run_id: str) -> int:
        self._require_writable("delete memory")
        require_str("run_id", run_id)
        return len(self._rewrite_without("run_id", run_id))

    def quarantine_by_branch(self, branch_name: str, reason: str) -> int:
        """Move a branch's entries to quarantine: appended there first, then removed here.

        A crash between the two steps, or a replace another tool's writes kept refusing,
        leaves the entries in both files, never in neither; the call tried again (or any
        later one) finds them recorded and only removes them here, so each is recorded once.
        """
        self._require_writable("quarantine memory")
        require_str("branch_name", branch_name)
        require_str("reason", reason)
        from memstore import quarantine_records

        def move(entries: builtins.list[MemoryEntry]) -> None:
            # Under the writer lock, which every writer of the quarantine file takes: what it
            # records now stays recorded until the replace (an earlier try's or call's records too).
            recorded = quarantine_records.recorded_among(self.quarantine_path, entries)
            fresh = quarantine_records.not_yet_recorded(entries, recorded)
            if not fresh:
                return
            provenance = {"reason": reason, "original_branch": branch_name, "quarantined_at": utc_now_iso()}
            lines = encode_entries(fresh, quarantine=True, provenance=provenance)
            for line in lines.splitlines(keepends=True):
                _readable(line)
            # Durable before memory.jsonl is replaced (under the writer lock): never in neither file.
            with self._group(self.quarantine_path).append(lines, is_whole=_is_whole_line) as pending:
                pending.commit()

        return len(self._rewrite_without("branch_name", branch_name, before=move))

    def _rewrite_without(
        self,
        key: str,
        value: str,
        *,
        before: Callable[[builtins.list[MemoryEntry]], None] | None = None,
    ) -> builtins.list[MemoryEntry]:
        """:meth:`_rewrite_once`, again from the file as it is when another tool replaced or wrote to it meanwhile."""
        from memstore.catalog_rewrite import FileReplacedError

        for _attempt in range(REWRITE_ATTEMPTS - 1):
            try:
                return self._rewrite_once(key, value, before=before)
            except FileReplacedError:
                continue
        return self._rewrite_once(key, value, before=before)

    def _rewrite_once(
        self,
        key: str,
        value: str,
        *,
        before: Callable[[builtins.list[MemoryEntry]], None] | None = None,
    ) -> builtins.list[MemoryEntry]:
        """Rewrite memory.jsonl without the entries whose ``key`` equals ``value``; returns them.

        Every other line is kept byte for byte (lines that do not parse are someone's
        data); blank lines are dropped.  ``before`` runs under the lock ahead of the
        replace (quarantine appends the entries there first).  Most of the scan and copy
        happens before the writer lock is taken (:mod:`memstore.catalog_rewrite`), and
        the index is told what moved (``RewritePlan``) after it is released, so writers
        queued behind a rewrite wait for little more than the replace.
        """
        from memstore import catalog_rewrite

        prepared = catalog_rewrite.prepare(self.path, key=key, value=value)
        held: HeldWrite | None = None
        try:
            # Catch the index up before taking the writer lock: indexing what others appended
            # can take long on a big file, and every add would wait behind it.  Under the lock
            # only what was appended in between is left to index.
            self._index_for_rewrite()
            fd: int | None = None
            try:
                with self._lock():
                    remove_stale_temps(self.path)
                    self._group(self.path).cut_torn_tail(is_whole=_is_whole_line)
                    index = self._index_for_rewrite()
                    fd = open_for_read(self.path)
                    if fd is None:
                        return []
                    # Readers elsewhere wait for the follow-up instead of rebuilding from the new file.
                    held = index.hold_write() if index is not None else None
                    done = catalog_rewrite.finish(self.path, fd, prepared, key=key, value=value, before=before)
            finally:
                if fd is not None:
                    os.close(fd)  # after the lock: freeing a big replaced file takes a while
                self._group(self.path).release_descriptors()  # the old file's, kept by the last add
            if prepared is not None:
                prepared.discard()
                prepared = None
            if done is None or index is None:
                return [] if done is None else done.removed
            try:
                index.apply_rewrite(done.plan, done.after, held=held)
            except (IndexUnavailableError, OSError) as exc:
                # The file is rewritten and durable: the call succeeded.  An index that could not
                # follow (a read of the new file failed) still names the old file, so the next
                # query sees it replaced and rebuilds.
                log.info("index will rebuild after the rewrite of %s: %s", self.path, exc)
            return done.removed
        finally:
            # Every way out, the cleanup's own errors (a Ctrl-C while a big file closes) included.
            if held is not None:
                held.release()  # idempotent: the follow-up released it already
            if prepared is not None:
                prepared.discard()

    def _index_for_rewrite(self) -> CatalogIndex | None:
        """The index, caught up to the file about to be rewritten, or None to let it rebuild later."""
        if self._shared is not None:
            return None  # the shared index follows on the next read; the local one is only a fallback
        index = self._index.index()
        if index is None or not self.path.exists():
            return None
        try:
            index.prepare_rewrite()
        except IndexUnavailableError as exc:
            log.info("index not followed through the rewrite of %s: %s", self.path, exc)
            return None
        return index

    # ------------------------------------------------------------------ reads

    def _scanned(self) -> ScanResult:
        return self._scan.read()

    def _ask(self, query: Callable[[CatalogReads], T]) -> T | None:
        """``query`` on the shared index, else on the local one; None: scan (both give the scan's answer)."""
        if self._shared is not None:
            found = self._shared.ask(query)
            if found is not None:
                return found
            if self.readonly and not self.index_path.exists():
                return None  # a readonly catalog creates no local index: the scan answers, one warning said so
        return self._index.ask(query)

    def list(
        self,
        *,
        limit: int = 20,
        tags: Iterable[str] = (),
        branch_name: str | None = None,
        run_id: str | None = None,
    ) -> builtins.list[MemoryEntry]:
        """Up to ``limit`` entries, newest line first.

        With filters, only entries that carry every one of ``tags`` and, when given,
        exactly this ``branch_name`` and ``run_id``.
        """
        entry_filter = EntryFilter.of(tags=tags, branch_name=branch_name, run_id=run_id)
        limit = check_limit(limit)
        if limit == 0:
            return []
        indexed = self._ask(lambda index: index.list(limit, entry_filter))
        if indexed is not None:
            return indexed
        return scan_list(self._scanned(), limit, entry_filter)

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        tags: Iterable[str] = (),
        branch_name: str | None = None,
        run_id: str | None = None,
    ) -> builtins.list[MemoryEntry]:
        """Entries containing every query token, best score first (see DESIGN.md §4).

        The filters restrict the candidates as in :meth:`list`; the order is unchanged.
        """
        tokens = query_tokens(query)
        entry_filter = EntryFilter.of(tags=tags, branch_name=branch_name, run_id=run_id)
        limit = check_limit(limit)
        if not tokens or limit == 0:
            return []
        indexed = self._ask(lambda index: index.search(tokens, limit, entry_filter))
        if indexed is not None:
            return indexed
        return scan_search(self._scanned(), tokens, limit, entry_filter)

    def resolve_id(self, prefix: str) -> str:
        """The full id of the one entry whose id is ``prefix`` or starts with it.

        A prefix needs at least 4 characters.  EntryNotFoundError when nothing matches,
        AmbiguousIdError (listing the candidates) when several ids do.
        """
        wanted = clean_prefix(prefix)
        if not wanted:
            raise EntryNotFoundError(f"memory entry not found: {wanted}")
        probe = SHOWN_CANDIDATES + 1
        indexed = self._index.ask(lambda index: index.ids_from(wanted, probe))
        if indexed is None:
            everyone = {item.entry.memory_id for item in self._scanned().entries}
            indexed = sorted(mid for mid in everyone if mid.startswith(wanted))
        if wanted not in indexed and len(indexed) >= probe:
            # Only the exact id can save a prefix this common; ask for it directly.
            with contextlib.suppress(EntryNotFoundError):
                return self.show(wanted).memory_id
        return pick(wanted, indexed, what="memory entry")

    def short_ids(self, memory_ids: Iterable[str], *, minimum: int = SHORT_ID_MIN) -> dict[str, str]:
        """The shortest prefix of each id that no other entry shares, at least ``minimum`` long."""
        wanted = builtins.list(dict.fromkeys(memory_ids))
        neighbours = self._index.ask(lambda index: index.id_neighbours(wanted))
        if neighbours is not None and len(neighbours) == len(wanted):
            return {mid: shortest_unique(mid, *neighbours[mid], minimum=minimum) for mid in wanted}
        return short_ids_among(wanted, (item.entry.memory_id for item in self._scanned().entries), minimum=minimum)

    def explain(self, query: str, *, limit: int = 10) -> SearchPlan:
        """Answer ``search(query, limit=limit)`` and report how: the index's steps, or why a scan answered."""
        from memstore.index.trace import SearchPlan, SearchTrace

        tokens = query_tokens(query)
        limit = check_limit(limit)
        started = time.perf_counter()
        trace = SearchTrace()
        found: builtins.list[MemoryEntry] = []
        state: str | None = None
        if not tokens or limit == 0:
            path, reason = "none", ("the query has no tokens" if not tokens else "the limit is 0")
        else:
            path, reason = "index", ""
            outcome = {"reason": f"the index failed recently: {self._index.error}"}
            indexed = self._explain_shared(tokens, limit, trace, outcome)
            # As _ask: a readonly catalog whose shared index failed creates no local index.
            local = self._shared is None or not (self.readonly and not self.index_path.exists())
            if indexed is None and not local:
                outcome["reason"] = "the shared index cannot answer, and a readonly catalog creates no local index"
            elif indexed is None:
                indexed = self._index.ask(lambda index: _traced_search(index, tokens, limit, trace, outcome))
            if indexed is not None:
                found, state = indexed, outcome.get("state")
            else:
                path = "scan"
                reason = outcome["reason"] if self._index.enabled else "the index is disabled for this catalog"
                found = self._traced_scan(tokens, limit, trace)
        return SearchPlan(
            query=query,
            tokens=tuple(tokens),
            limit=limit,
            path=path,
            reason=reason,
            index_state=state,
            steps=tuple(trace.steps),
            memory_ids=tuple(entry.memory_id for entry in found),
            seconds=round(time.perf_counter() - started, 6),
        )

    def _explain_shared(
        self, tokens: builtins.list[str], limit: int, trace: SearchTrace, outcome: dict[str, str]
    ) -> builtins.list[MemoryEntry] | None:
        """The shared index's traced answer (proven current, so 'fresh'); None to go on locally."""
        if self._shared is None:
            return None
        from memstore.index.trace import SearchTrace

        shared = SearchTrace()
        found = self._shared.ask(lambda index: index.search(tokens, limit, planner=shared.planner))
        if found is not None:
            trace.steps.extend(shared.steps)
            outcome["state"] = "fresh"
        return found

    def _traced_scan(self, tokens: builtins.list[str], limit: int, trace: SearchTrace) -> builtins.list[MemoryEntry]:
        began = time.perf_counter()
        scanned = self._scanned()
        found = scan_search(scanned, tokens, limit)
        seconds = time.perf_counter() - began
        entries = len(scanned.entries)
        trace.add("scan", "score every entry of the file", candidates=entries, outcome="scored", seconds=seconds)
        return found

    @property
    def index_path(self) -> Path:
        """Where this catalog's derived index lives (a disposable SQLite file; it may not exist yet)."""
        return IndexFile(self.directory).path

    def show(self, memory_id: str) -> MemoryEntry:
        """The first entry in file order with this id; FileNotFoundError when there is none."""
        require_str("memory_id", memory_id)
        wanted = memory_id.strip()
        found: MemoryEntry | None = None
        if wanted:
            indexed = self._ask(lambda index: index.show(wanted))
            if indexed is not None:
                found = indexed[0] if indexed else None
            else:
                found = scan_show(self._scanned(), wanted)
        if found is None:
            raise EntryNotFoundError(f"memory entry not found: {wanted}")
        return found

    def list_quarantined(self, *, limit: int = 20) -> builtins.list[MemoryEntry]:
        limit = check_limit(limit)
        return scan_list(self._quarantine_scan.read(), limit)

    def quarantined_records(self, *, limit: int = 20) -> builtins.list[QuarantinedEntry]:
        """Like :meth:`list_quarantined`, each entry with the provenance its line records."""
        limit = check_limit(limit)
        scanned = self._quarantine_scan.read()
        if limit == 0:
            return []
        return self._with_provenance(builtins.list(reversed(scanned.entries[-limit:])))

    def show_quarantined(self, prefix: str) -> QuarantinedEntry:
        """The first quarantined entry whose id is ``prefix`` or uniquely starts with it."""
        scanned = self._quarantine_scan.read()
        memory_id = resolve_among(prefix, (item.entry.memory_id for item in scanned.entries), what="quarantined entry")
        first = next(item for item in scanned.entries if item.entry.memory_id == memory_id)
        return self._with_provenance([first])[0]

    def _with_provenance(self, items: builtins.list[ScannedEntry]) -> builtins.list[QuarantinedEntry]:
        fd = open_for_read(self.quarantine_path)
        records: builtins.list[QuarantinedEntry] = []
        try:
            for item in items:
                provenance: dict[str, Any] = {}
                if fd is not None:
                    line = os.pread(fd, MAX_LINE_BYTES + 2, item.order).split(b"\n", 1)[0]
                    with contextlib.suppress(ValueError):
                        payload = parse_json_bytes(line, exact=True)  # shown as it is: numbers too
                        if isinstance(payload, dict) and isinstance(payload.get("provenance"), dict):
                            provenance = payload["provenance"]
                records.append(QuarantinedEntry(item.entry, provenance))
        finally:
            if fd is not None:
                os.close(fd)
        return records

    def health(self) -> HealthReport:
        """Counts of valid and corrupt lines, plus the state of the index."""
        from memstore.reports import HealthReport

        scanned = self._scanned()
        return HealthReport(
            path=str(self.path),
            exists=self.path.exists(),
            total_entries=len(scanned.entries),
            corrupt_entries=scanned.corrupt,
            blank_lines=scanned.blank,
            bytes=scanned.size,
            quarantined_entries=len(self._quarantine_scan.read().entries),
            index=self._index_state(),
        )

    def health_report(self) -> dict[str, Any]:
        """:meth:`health` as the dict the spec's callers read (``corrupt_entries``, ``total_entries``, ``healthy``)."""
        return self.health().to_dict()

    def _index_state(self) -> IndexState:
        from memstore.index.report import IndexOff

        index = self._index.index()
        if index is None:
            if not self._index.enabled:
                return IndexOff("disabled")
            return IndexOff.after(self._index.failure)
        try:
            return index.source_status()
        except IndexUnavailableError as exc:
            self._index.failed(exc)
            return IndexOff.after(exc)

    def maintenance_preview(self) -> MaintenancePreview:
        """What a maintenance pass would clean up, without touching anything."""
        from memstore.reports import MaintenancePreview

        scanned = self._scanned()
        ids: dict[str, int] = {}
        for item in scanned.entries:
            ids[item.entry.memory_id] = ids.get(item.entry.memory_id, 0) + 1
        duplicates = sum(count - 1 for count in ids.values() if count > 1)
        stale = 0
        prefix = f".{self.path.name}."
        if self.directory.is_dir():
            stale = sum(
                1
                for name in os.listdir(self.directory)
                if name.startswith(prefix) and name.endswith(".tmp") and not temp_in_use(self.directory / name)
            )
        missing_newline = False
        fd = open_for_read(self.path)
        if fd is not None:
            try:
                size = os.fstat(fd).st_size
                missing_newline = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
            finally:
                os.close(fd)
        return MaintenancePreview(
            total_entries=len(scanned.entries),
            corrupt_lines=scanned.corrupt,
            blank_lines=scanned.blank,
            duplicate_ids=duplicates,
            missing_final_newline=missing_newline,
            stale_temp_files=stale,
        )

    def maintain_dry_run(self) -> dict[str, Any]:
        """:meth:`maintenance_preview` as a dict (``dry_run``, the counts, ``would_change``)."""
        return self.maintenance_preview().to_dict()

    # ------------------------------------------------------------------ index maintenance

    def reindex(self, *, full: bool = False, progress: Progress | None = None) -> RefreshReport:
        """Bring the index up to date (``full`` rebuilds it from scratch); returns a report."""
        index = self._index.index()
        if index is None:
            raise IndexUnavailableError(self._index.error or "the index is disabled for this catalog")
        return index.refresh(full=full, progress=progress)

    def check_index(self) -> CheckResult:
        """Compare the index with a fresh scan of the file; ``equal`` is False on any difference."""
        index = self._index.index()
        if index is None:
            raise IndexUnavailableError(self._index.error or "the index is disabled for this catalog")
        return index.check(self._scan_fresh())

    def _scan_fresh(self) -> ScanResult:
        return ScanCache(self.path).read()


def _traced_search(
    index: CatalogIndex, tokens: list[str], limit: int, trace: SearchTrace, outcome: dict[str, str]
) -> list[MemoryEntry]:
    """``index.search`` with its planner traced; notes the index state (and the failure) in ``outcome``."""
    outcome["state"] = index.source_status().state
    began = time.perf_counter()
    try:
        found = index.search(tokens, limit, planner=trace.planner)
    except IndexUnavailableError as exc:
        outcome["reason"] = f"the index failed: {exc}"
        raise
    rest = time.perf_counter() - began - trace.seconds
    detail = "check freshness (catch up when behind), score odd rows, read the entries"
    trace.add("read", detail, candidates=len(found), outcome="entries read", seconds=rest)
    return found


def _readable(line: bytes) -> bytes:
    """Refuse a line readers would skip as too long: acknowledging it would lose it silently."""
    if len(line) - 1 > MAX_LINE_BYTES:
        raise InvalidArgumentError(
            f"memory entry is {len(line) - 1} bytes as JSON, more than the {MAX_LINE_BYTES} a line may hold"
        )
    return line


def _is_whole_line(data: bytes) -> bool:
    """An unterminated last line that is no torn write: blank, or complete JSON (an entry or not).

    Every line memstore writes is a JSON object, and no strict prefix of one parses,
    so only bytes that do not parse can be a write cut short.
    """
    return is_blank(data) or is_json(data)
