"""Run the benchmark suite at one size and write JSON, Markdown and a history line.

    python -m benchmarks.run --size 100k            # make bench SIZE=100k
    python -m benchmarks.run --size 20k --gate      # make bench-ci: exit 1 below a floor
    python -m benchmarks.run --corpus realtext --size 1m   # make bench SIZE=1m CORPUS=realtext

Everything is measured in one run on one copy of the generated catalog, so every
ratio compares figures taken under the same machine load.  The exactness check is
part of the run: for every query of the mix the indexed results (ids, in order)
must equal the naive scan's, or the run exits 1.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import corpus as corpora
from benchmarks import gate as gate_floors
from benchmarks import writers
from benchmarks.baselines import CardScan, MemoryScan, grep_available, grep_count, load_entries, naive_search
from benchmarks.generate import (
    DATA_DIR,
    TextChoice,
    add_text_options,
    cards_file,
    catalog_file,
    dataset,
    parse_size,
    size_label,
    text_choice,
)
from benchmarks.measure import (
    REPO_ROOT,
    median,
    python_env,
    quiet_gc,
    run_python,
    samples_of,
    spread,
    timed,
    wall_clock_of_process,
)
from benchmarks.queries import CardQuery, Query, card_mix
from benchmarks.report import RESULTS_DIR, git_revision, markdown, write_outputs
from benchmarks.snapshot import COMMAND_ENV, SHA_ENV, run_in_snapshot
from memstore.sample.catalog import DEFAULT_SEED, DELETE_BRANCH
from memstore.sample.vocab import vocabulary

LIMIT = 10
CATCHUP_ROUNDS = {1: 7, 100: 3, 10_000: 1}
NOCHANGE_CALLS = 2_000

BUILD_CHILD = """
import json, os, resource, sys, time


def peak_kb():
    # VmHWM is this process's own high-water mark.  ru_maxrss is not: Linux carries the
    # parent's peak across fork+exec, so the child of a big bench process reports that.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def index_files(directory):
    if not os.path.isdir(directory):
        return {}
    paths = ((name, os.path.join(directory, name)) for name in sorted(os.listdir(directory)))
    return {name: os.path.getsize(path) for name, path in paths if os.path.isfile(path)}


root, probe = sys.argv[1], sys.argv[2]
index_dir = os.path.join(root, ".teaagent", "index")
from memstore.catalog import MemoryCatalog
rss_before = peak_kb()
catalog = MemoryCatalog(root)
started = time.perf_counter()
catalog.search(probe)  # no index yet: the first query builds it (the path every user takes)
built = time.perf_counter() - started
rss_build = peak_kb()
files_build = index_files(index_dir)
started = time.perf_counter()
catalog.reindex(full=True)  # an explicit rebuild over the existing index
rebuilt = time.perf_counter() - started
print(json.dumps({"build_s": built, "rebuild_s": rebuilt, "rss_before_kb": rss_before,
                  "rss_build_kb": rss_build, "rss_peak_kb": peak_kb(), "files_build": files_build,
                  "files_rebuild": index_files(index_dir)}))
"""

PREFLIGHT_LINES = 2_000
PREFLIGHT_CHILD = """
import json, sys
from memstore.catalog import MemoryCatalog
catalog = MemoryCatalog(sys.argv[1])
hits = catalog.search("the memory")
report = catalog.reindex()  # raises when the index cannot be built or opened
print(json.dumps({"hits": len(hits)}))
"""

FIRST_QUERY_CHILD = """
import json, sys, time
started = time.perf_counter()
from memstore.catalog import MemoryCatalog
imported = time.perf_counter()
catalog = MemoryCatalog(sys.argv[1])
opened = time.perf_counter()
hits = catalog.search(sys.argv[2], limit=10)
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "open_s": opened - imported, "query_s": done - opened,
                  "hits": len(hits)}))
"""


def module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def index_available() -> bool:
    """True once memstore ships the index the catalog attaches (memstore.index.catalog_index)."""
    return module_exists("memstore.catalog") and module_exists("memstore.index.catalog_index")


def cli_available() -> bool:
    return module_exists("memstore.__main__") and module_exists("memstore.cli")


@dataclass
class Options:
    size: int
    seed: int = DEFAULT_SEED
    corpus: str = "generated"
    text: TextChoice = field(default_factory=TextChoice)  # realtext: which installed source
    gate: bool = False
    repeats: int | None = None
    json_path: Path | None = None
    results_dir: Path = RESULTS_DIR
    data_dir: Path = DATA_DIR
    card_sizes: tuple[int, ...] = (10_000, 100_000)
    catchup_sizes: tuple[int, ...] = (1, 100, 10_000)
    add_count: int = 2_000
    writer_rounds: int = 3
    process_runs: int = 15
    write_results: bool = True
    keep_work: bool = False
    command: str = ""
    log: Callable[[str], None] = field(default=lambda message: print(message, file=sys.stderr, flush=True))

    @property
    def index_repeats(self) -> int:
        if self.repeats is not None:
            return max(1, self.repeats)
        return 7 if self.size <= 200_000 else 5

    @property
    def scan_repeats(self) -> int:
        base = 5 if self.size <= 50_000 else 3 if self.size <= 200_000 else 1
        return max(1, min(base, self.index_repeats))

    @property
    def naive_repeats(self) -> int:
        return 3 if self.size <= 50_000 else 1


@dataclass
class QueryResult:
    query: Query
    oracle_ids: list[str] = field(default_factory=list)
    hits: int | None = None
    scan_naive_ms: float | None = None
    scan_memory_ms: float | None = None
    grep_ms: float | None = None
    indexed_ms: float | None = None
    indexed_ids: list[str] | None = None
    memory_ids: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        exact = None if self.indexed_ids is None else self.indexed_ids == self.oracle_ids
        return {
            "category": self.query.category,
            "query": self.query.text,
            "band": self.query.band,
            "hits": self.hits,
            "indexed_ms": self.indexed_ms,
            "scan_memory_ms": self.scan_memory_ms,
            "scan_naive_ms": self.scan_naive_ms,
            "grep_ms": self.grep_ms,
            "exact": exact,
            "result_ids": self.oracle_ids,
        }


def _remove_stale_work(work_dir: Path) -> None:
    """Delete working copies (``<size>-<pid>``) left by runs that were killed."""
    if not work_dir.is_dir():
        return
    for path in work_dir.iterdir():
        pid = path.name.rpartition("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


def _ids(entries: Sequence[Any]) -> list[str]:
    return [entry.memory_id for entry in entries]


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _importtime_ms(module: str, *, runs: int) -> float | None:
    """Cumulative import time of ``module`` as ``python -X importtime`` reports it (best of ``runs``)."""
    best: float | None = None
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            env=python_env(),
            cwd=REPO_ROOT,
            check=False,
        )
        for line in proc.stderr.splitlines():
            parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
            if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
                value = int(parts[1]) / 1000.0
                best = value if best is None else min(best, value)
    return best


class Bench:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.log = options.log
        self.metrics: dict[str, Any] = {}
        self.notes: list[str] = []
        self.mismatches: list[str] = []
        self.results: list[QueryResult] = []
        self.card_results: list[dict[str, Any]] = []
        self.phase_seconds: dict[str, float] = {}
        self.errors: list[str] = []
        prefix = "" if options.corpus == "generated" else f"{options.corpus}-"
        self.work_root = options.data_dir / "work" / f"{prefix}{size_label(options.size)}-{os.getpid()}"
        self.catalog: Any = None
        self.corpus: corpora.Corpus | None = None

    # ------------------------------------------------------------------ set-up

    @property
    def jsonl(self) -> Path:
        return catalog_file(self.work_root)

    @property
    def mix(self) -> corpora.Corpus:
        assert self.corpus is not None, "prepare() loads the corpus"
        return self.corpus

    def prepare(self) -> None:
        opts = self.options
        self.corpus = corpora.load(opts.corpus, opts.size, seed=opts.seed, data_dir=opts.data_dir, text=opts.text)
        self.results = [QueryResult(query) for query in self.corpus.mix]
        data = self.corpus.data
        if data.generate_seconds is not None:
            self.metrics["generate_seconds"] = data.generate_seconds
            self.log(f"generated {size_label(data.size)} {opts.corpus} catalog in {data.generate_seconds:.1f} s")
        _remove_stale_work(self.work_root.parent)
        if self.work_root.exists():
            shutil.rmtree(self.work_root)
        self.jsonl.parent.mkdir(parents=True)
        shutil.copyfile(data.file, self.jsonl)
        self.metrics["jsonl_bytes"] = data.bytes
        self.dataset_bytes = data.bytes

    def cleanup(self) -> None:
        self.catalog = None
        gc.collect()
        if not self.options.keep_work and self.work_root.exists():
            shutil.rmtree(self.work_root, ignore_errors=True)

    # ------------------------------------------------------------------ baselines

    def preflight(self) -> None:
        """Build and query an index over the first lines, in a child, before the long phases."""
        root = self.work_root / "preflight"
        catalog_file(root).parent.mkdir(parents=True, exist_ok=True)
        with open(self.jsonl, "rb") as source, open(catalog_file(root), "wb") as target:
            for _, line in zip(range(PREFLIGHT_LINES), source, strict=False):
                target.write(line)
        run_python(PREFLIGHT_CHILD, str(root), timeout=600)
        shutil.rmtree(root, ignore_errors=True)

    def baselines(self) -> None:
        opts = self.options
        self.log(f"naive scan over {len(self.results)} queries ({opts.naive_repeats} run each)")
        for result in self.results:
            samples, found = samples_of(
                partial(naive_search, self.jsonl, result.query.text), opts.naive_repeats
            )
            result.scan_naive_ms = _ms(median(samples))
            result.oracle_ids = _ids(found)
        parse_seconds, entries = timed(lambda: load_entries(self.jsonl))
        self.metrics["parse_stdlib_seconds"] = parse_seconds
        self.entry_count = len(entries)
        self.log(f"parsed {len(entries):,} entries in {parse_seconds:.1f} s; in-memory scan")
        self._memory_scan(MemoryScan(entries))
        del entries
        gc.collect()
        if grep_available():
            for result in self.results:
                samples, _ = samples_of(partial(grep_count, self.jsonl, result.query.text), 3)
                result.grep_ms = _ms(median(samples))
        else:
            self.notes.append("grep not found: the grep floor was skipped")

    def _memory_scan(self, scan: MemoryScan) -> None:
        for result in self.results:
            quiet_gc()
            samples, found = samples_of(partial(scan.search, result.query.text), self.options.scan_repeats)
            result.scan_memory_ms = _ms(median(samples))
            result.memory_ids = _ids(found)
            result.hits = scan.last_match_count
            if result.memory_ids != result.oracle_ids:
                self.mismatches.append(f"in-memory scan disagrees with the naive scan: {result.query.text!r}")
            expected = result.query.matches
            if expected is not None and expected != result.hits:
                self.mismatches.append(
                    f"the mix counted {expected} matches for {result.query.text!r}, the scan {result.hits}"
                )

    # ------------------------------------------------------------------ the index

    def index_dir(self) -> Path:
        return self.work_root / ".teaagent" / "index"

    def build(self) -> None:
        """Full build in a child process: the lazy build of a first query, then ``reindex(full=True)``."""
        self.log("full build in a child process")
        shutil.rmtree(self.index_dir(), ignore_errors=True)
        child = run_python(BUILD_CHILD, str(self.work_root), self.mix.absent)
        index_bytes = sum(child["files_build"].values())
        rebuilt_bytes = sum(child["files_rebuild"].values())
        m = self.metrics
        m["build_seconds"] = seconds = float(child["build_s"])
        m["build_rows_per_s"] = self.entry_count / seconds if seconds > 0 else None
        m["build_peak_rss_mb"] = child["rss_build_kb"] / 1024.0
        m["build_rss_before_mb"] = child["rss_before_kb"] / 1024.0
        m["rebuild_seconds"] = float(child["rebuild_s"])
        m["rebuild_peak_rss_mb"] = child["rss_peak_kb"] / 1024.0
        m["index_bytes"] = index_bytes
        m["index_files_bytes"] = child["files_build"]
        m["index_over_jsonl"] = index_bytes / self.dataset_bytes if self.dataset_bytes else None
        m["rebuilt_index_bytes"] = rebuilt_bytes
        m["rebuilt_index_over_jsonl"] = rebuilt_bytes / self.dataset_bytes if self.dataset_bytes else None
        self.log(
            f"  built in {seconds:.2f} s (reindex --full {child['rebuild_s']:.2f} s), "
            f"peak RSS {m['build_peak_rss_mb']:.0f} MB, index {index_bytes / 1e6:.1f} MB "
            f"({rebuilt_bytes / 1e6:.1f} MB after the rebuild)"
        )

    def first_queries(self) -> None:
        probes = {}
        for text in self.mix.probes:
            child = run_python(FIRST_QUERY_CHILD, str(self.work_root), text)
            probes[text] = {key: child[key] * 1000.0 for key in ("import_s", "open_s", "query_s")}
        self.metrics["first_query_fresh_process_ms"] = {text: p["query_s"] for text, p in probes.items()}
        self.metrics["first_query_fresh_process_max_ms"] = max(p["query_s"] for p in probes.values())
        self.metrics["first_query_import_open_ms"] = median(
            [p["import_s"] + p["open_s"] for p in probes.values()]
        )

    def warm_search(self) -> None:
        from memstore.catalog import MemoryCatalog

        opts = self.options
        self.catalog = MemoryCatalog(self.work_root)
        self.catalog.search(self.mix.absent)  # open the index (or fill the scan cache)
        self.log(f"indexed search, {opts.index_repeats} warm runs per query")
        for result in self.results:
            found = self.catalog.search(result.query.text, limit=LIMIT)
            result.indexed_ids = _ids(found)
            quiet_gc()
            samples, _ = samples_of(
                partial(self.catalog.search, result.query.text, limit=LIMIT), opts.index_repeats
            )
            result.indexed_ms = _ms(median(samples))
            if result.indexed_ids != result.oracle_ids:
                self.mismatches.append(
                    f"indexed search disagrees with the naive scan on {result.query.text!r}: "
                    f"{result.indexed_ids} != {result.oracle_ids}"
                )

    def nochange(self) -> None:
        search = self.catalog.search
        absent = self.mix.absent
        for _ in range(50):
            search(absent)
        quiet_gc()
        samples, _ = samples_of(lambda: search(absent), NOCHANGE_CALLS)
        self.metrics["nochange_query_median_ms"] = _ms(median(samples))
        self.metrics["nochange_query_min_ms"] = _ms(min(samples))
        bare = self._bare_index_query()
        if bare is not None:
            bare_samples, _ = samples_of(bare, NOCHANGE_CALLS)
            self.metrics["nochange_without_freshness_median_ms"] = _ms(median(bare_samples))
            self.metrics["nochange_overhead_ms"] = _ms(median(samples) - median(bare_samples))

    def _bare_index_query(self) -> Callable[[], Any] | None:
        """The same absent-token query straight on the index file (``catalog.index_path``, opened
        read-only here) with the planner's ``search_rows``: no file open, no stat, no source-state
        check, no snapshot transaction.  Degrades to None (overhead not reported) if the index
        cannot be opened."""
        from memstore.index.sqlite_search import search_rows

        try:
            conn = sqlite3.connect(f"{self.catalog.index_path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
            rows = int(conn.execute("SELECT count(*) FROM doc").fetchone()[0])
        except sqlite3.Error as exc:
            self.notes.append(f"freshness overhead not measured: {exc}")
            return None
        tokens = [self.mix.absent]
        return lambda: search_rows(conn, tokens, LIMIT, rows)

    def _verify(self, queries: Sequence[str], context: str) -> None:
        for text in queries:
            expected = _ids(naive_search(self.jsonl, text))
            got = _ids(self.catalog.search(text, limit=LIMIT))
            if got != expected:
                self.mismatches.append(f"after {context}: indexed {got} != naive {expected} for {text!r}")

    def catchup(self) -> None:
        from memstore.catalog import MemoryCatalog

        writer = self.mix.writer("append")
        for count in self.options.catchup_sizes:
            rounds = CATCHUP_ROUNDS.get(count, 1)
            samples = []
            for round_no in range(rounds):
                marker = f"catchupmark{count}x{round_no}"
                data = writer.lines(count, extra_word=marker).encode("ascii")
                with open(self.jsonl, "ab") as handle:
                    handle.write(data)
                quiet_gc()
                seconds, found = timed(partial(self.catalog.search, marker, limit=LIMIT))
                samples.append(seconds)
                if len(found) != min(count, LIMIT):
                    self.mismatches.append(f"after appending {count} lines, {marker!r} found {len(found)}")
            self.metrics[f"catchup_{count}_ms"] = _ms(median(samples))
            self.log(f"  catch-up after {count} lines: {_ms(median(samples)):.2f} ms (median of {rounds})")
        # The same, the line added by memstore through a second handle (as another agent
        # process would): its append chain spares the catch-up a re-read of the prefix.
        other = MemoryCatalog(self.work_root)
        samples = []
        for round_no in range(CATCHUP_ROUNDS[1]):
            marker = f"catchupadd1x{round_no}"
            other.add(f"{marker} added through a second handle", tags=["bench"])
            quiet_gc()
            seconds, found = timed(partial(self.catalog.search, marker, limit=LIMIT))
            samples.append(seconds)
            if len(found) != 1:
                self.mismatches.append(f"after adding one entry, {marker!r} found {len(found)}")
        self.metrics["catchup_add_1_ms"] = _ms(median(samples))
        self.log(f"  catch-up after 1 memstore add: {_ms(median(samples)):.2f} ms (median of {len(samples)})")
        biggest = max(self.options.catchup_sizes)
        self._verify([f"catchupmark{biggest}x0", "catchupadd1x0", *self.mix.verify_catchup], "catch-up")
        build = self.metrics.get("build_seconds")
        if build and "catchup_1_ms" in self.metrics:
            self.metrics["catchup_1_share_of_build"] = self.metrics["catchup_1_ms"] / (build * 1000.0)

    def adds(self) -> None:
        entries = self.mix.writer("adds").entries(self.options.add_count)
        add = self.catalog.add
        os.sync()  # earlier raw appends must not be flushed by (and charged to) the first fsync
        self.metrics["raw_fsync_per_s"] = self._raw_fsync_rate(min(500, self.options.add_count))
        quiet_gc()
        latencies = []
        started = time.perf_counter()
        for entry in entries:
            began = time.perf_counter()
            add(
                entry["content"], tags=entry["tags"], branch_name=entry["branch_name"], run_id=entry["run_id"]
            )
            latencies.append(time.perf_counter() - began)
        elapsed = time.perf_counter() - started
        self.metrics["add_per_s"] = self.options.add_count / elapsed
        self.metrics["add_median_ms"] = _ms(median(latencies))
        self.metrics["add_p95_ms"] = _ms(spread(latencies)["p95"])
        self.metrics["add_over_raw_fsync"] = self.metrics["add_per_s"] / self.metrics["raw_fsync_per_s"]
        seconds, _ = timed(lambda: self.catalog.search(self.mix.absent))
        self.metrics["query_after_adds_ms"] = _ms(seconds)
        m = self.metrics
        self.log(
            f"  add: {m['add_per_s']:,.0f}/s (median {m['add_median_ms']:.2f} ms, "
            f"p95 {m['add_p95_ms']:.2f} ms); next query {_ms(seconds):.1f} ms"
        )
        self._writer_processes()

    def _writer_processes(self) -> None:
        """1 and 4 writer processes against a bare append+fsync loop, same disk, same minutes."""
        figures = writers.compare(
            self.work_root / "writers",
            adds=self.options.add_count,
            rounds=self.options.writer_rounds,
            seed=self.options.seed,
        )
        self.metrics.update(figures)
        for n in writers.PROCESS_COUNTS:
            self.log(
                f"  {n} writer process(es): {figures[f'writers_{n}_per_s']:,.0f} adds/s "
                f"(p50 {figures[f'writers_{n}_p50_ms']:.2f} ms, p95 {figures[f'writers_{n}_p95_ms']:.2f} ms); "
                f"bare append+fsync {figures[f'bare_{n}_per_s']:,.0f}/s, "
                f"{figures[f'bare_over_writers_{n}']:.2f}x the adds"
            )

    def _raw_fsync_rate(self, count: int) -> float:
        """Appends of one 420-byte line + fsync per second on the same file system, right now:
        the ceiling for ``add``, which the shared machine's I/O load moves a lot."""
        path = self.jsonl.with_name("fsync-probe.tmp")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        line = b"x" * 419 + b"\n"
        try:
            started = time.perf_counter()
            for _ in range(count):
                os.write(fd, line)
                os.fsync(fd)
            elapsed = time.perf_counter() - started
        finally:
            os.close(fd)
            path.unlink()
        return count / elapsed

    def rewrite(self) -> None:
        needle = b'"branch_name": "' + DELETE_BRANCH.encode() + b'"'
        with open(self.jsonl, "rb") as handle:
            expected = sum(1 for line in handle if needle in line)
        quiet_gc()
        seconds, deleted = timed(lambda: self.catalog.delete_by_branch(DELETE_BRANCH))
        self.metrics["delete_branch_seconds"] = seconds
        self.metrics["delete_branch_rows"] = deleted
        if deleted != expected:
            self.mismatches.append(f"delete_by_branch removed {deleted} entries, expected {expected}")
        after, _ = timed(lambda: self.catalog.search(self.mix.absent))
        self.metrics["query_after_delete_ms"] = _ms(after)
        self._verify(list(self.mix.verify_rewrite), "delete_by_branch")
        self.log(f"  delete_by_branch: {deleted} rows in {seconds:.2f} s; next query {_ms(after):.1f} ms")

    def rewrite_wait(self) -> None:
        """A writer process adds in a loop while quarantine_by_branch rewrites the catalog.

        Last of all: the writer's adds land between the rewrite and its index follow-up.
        """
        if self.catalog is None:
            self.notes.append("no catalog: the writer wait during a rewrite was skipped")
            return
        catalog = self.catalog
        figures, moved = writers.writer_wait(
            self.work_root,
            lambda: catalog.quarantine_by_branch(writers.WAIT_BRANCH, "bench"),
            seed=self.options.seed,
        )
        figures["rewrite_under_writer_rows"] = float(moved)
        self.metrics.update(figures)
        self.log(
            f"  quarantine_by_branch of {moved} rows in {figures['rewrite_under_writer_seconds']:.2f} s; "
            f"a writer's slowest add meanwhile {figures['writer_max_add_during_rewrite_ms']:.0f} ms "
            f"({figures['writer_wait_over_rewrite']:.2f}x the rewrite)"
        )

    # ------------------------------------------------------------------ cards

    def cards(self) -> None:
        if not module_exists("memstore.failure_cards"):
            self.notes.append("memstore.failure_cards missing: find_matching was skipped")
            return
        from memstore.failure_cards import FailureCardStorage

        vocab = vocabulary()
        mix = card_mix(vocab.file_paths[0], vocab.file_paths[1500])
        for size in self.options.card_sizes:
            data = dataset("cards", size, seed=self.options.seed, data_dir=self.options.data_dir)
            root = self.work_root / f"cards-{size_label(size)}"
            cards_file(root).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data.file, cards_file(root))
            self._cards_at(size, FailureCardStorage(root), cards_file(root), mix)

    def _cards_at(self, size: int, storage: Any, path: Path, mix: Sequence[CardQuery]) -> None:
        load_seconds, scan = timed(lambda: CardScan(path))
        repeats = 5 if size <= 20_000 else 3
        lib_times, scan_times = [], []
        for query in mix:
            lib_samples, lib_found = samples_of(partial(self._find, storage, query), repeats)
            scan_samples, scan_found = samples_of(partial(self._find, scan, query), repeats)
            lib_times.append(median(lib_samples))
            scan_times.append(median(scan_samples))
            exact = [card.id for card in lib_found] == [card.id for card in scan_found]
            if not exact:
                self.mismatches.append(f"find_matching disagrees with the card scan on {query.label!r}")
            self.card_results.append(
                {
                    "cards": size,
                    "query": query.label,
                    "find_matching_ms": _ms(median(lib_samples)),
                    "scan_ms": _ms(median(scan_samples)),
                    "hits": len(lib_found),
                    "exact": exact,
                }
            )
        label = size_label(size)
        lib_p50, scan_p50 = _ms(median(lib_times)), _ms(median(scan_times))
        self.metrics[f"find_matching_{label}_p50_ms"] = lib_p50
        self.metrics[f"find_matching_{label}_p95_ms"] = _ms(spread(lib_times)["p95"])
        self.metrics[f"find_matching_{label}_scan_p50_ms"] = scan_p50
        self.metrics[f"find_matching_{label}_scan_load_s"] = load_seconds
        self.log(f"  find_matching {label}: {lib_p50:.1f} ms vs in-memory card scan {scan_p50:.1f} ms")

    @staticmethod
    def _find(store: Any, query: CardQuery) -> list[Any]:
        result: list[Any] = store.find_matching(
            list(query.file_paths), query.task_description, query.error_type, limit=3
        )
        return result

    # ------------------------------------------------------------------ processes

    def startup(self) -> None:
        python = sys.executable
        bare = self._best_wall_clock("pass")
        self.metrics["python_bare_ms"] = _ms(bare)
        for module, key in (("memstore", "import_memstore"), ("memstore.catalog", "import_catalog")):
            if not module_exists(module):
                continue
            self.metrics[f"{key}_ms"] = _ms(self._best_wall_clock(f"import {module}", versus="pass"))
            self.metrics[f"{key}_importtime_ms"] = _importtime_ms(
                module, runs=min(5, self.options.process_runs)
            )
        if cli_available():
            argv = [python, "-m", "memstore", "search", self.mix.cli_query, "--root", str(self.work_root)]
            samples = wall_clock_of_process(
                argv, times=max(1, self.options.process_runs * 2 // 3), cwd=REPO_ROOT
            )
            self.metrics["cli_search_ms"] = _ms(median(samples))
            self.metrics["cli_search_min_ms"] = _ms(min(samples))
        else:
            self.notes.append("no memstore CLI (python -m memstore): end-to-end search was skipped")

    def _best_wall_clock(self, statement: str, *, versus: str | None = None) -> float:
        """Best-of-N wall clock of ``python -c statement`` (minus ``versus``, runs interleaved)."""
        python = sys.executable
        runs = self.options.process_runs
        mine: list[float] = []
        base: list[float] = []
        for _ in range(runs):
            mine += wall_clock_of_process([python, "-c", statement], times=1)
            if versus is not None:
                base += wall_clock_of_process([python, "-c", versus], times=1)
        return min(mine) - (min(base) if base else 0.0)

    # ------------------------------------------------------------------ summary

    def summarize(self) -> None:
        def collect(attribute: str) -> list[float]:
            return [value for r in self.results if (value := getattr(r, attribute)) is not None]

        for attribute, prefix in (
            ("indexed_ms", "search_indexed"),
            ("scan_memory_ms", "search_scan_memory"),
            ("scan_naive_ms", "search_scan_naive"),
            ("grep_ms", "grep"),
        ):
            values = collect(attribute)
            if values:
                for key, value in spread(values).items():
                    self.metrics[f"{prefix}_{key}_ms"] = value
        m = self.metrics
        indexed = m.get("search_indexed_p50_ms")
        if indexed:
            for key, baseline in (
                ("speedup_vs_scan_memory", "search_scan_memory_p50_ms"),
                ("speedup_vs_naive", "search_scan_naive_p50_ms"),
                ("speedup_vs_grep", "grep_p50_ms"),
            ):
                if m.get(baseline):
                    m[key] = m[baseline] / indexed
            ratios = [
                r.scan_memory_ms / r.indexed_ms for r in self.results if r.scan_memory_ms and r.indexed_ms
            ]
            if ratios:
                m["speedup_vs_scan_memory_per_query_min"] = min(ratios)
                m["speedup_vs_scan_memory_per_query_median"] = median(ratios)

    # ------------------------------------------------------------------ the run

    def _run_group(self, steps: Sequence[Callable[[], None]]) -> None:
        for step in steps:
            started = time.perf_counter()
            try:
                step()
            except Exception as exc:
                message = f"{step.__name__} failed: {type(exc).__name__}: {exc}"
                self.log(f"ERROR {message}")
                self.errors.append(message)
                skipped = [later.__name__ for later in steps[steps.index(step) + 1 :]]
                if skipped:
                    self.notes.append(f"skipped after {step.__name__} failed: {', '.join(skipped)}")
                return
            finally:
                self.phase_seconds[step.__name__] = round(time.perf_counter() - started, 3)

    def run(self) -> dict[str, Any]:
        opts = self.options
        started = time.perf_counter()
        self.prepare()
        try:
            # Each group stops at its first failing step (later steps need what it sets up);
            # the failure is recorded and makes the run exit 1, but the other groups still run.
            groups: list[list[Callable[[], None]]] = [[self.baselines]]
            if module_exists("memstore.catalog"):
                catalog_steps: list[Callable[[], None]] = []
                if index_available():
                    catalog_steps += [self.build, self.first_queries]
                else:
                    self.notes.append(
                        "memstore.index.catalog_index missing: the catalog answered from its scan; "
                        "build, index size and fresh-process figures were skipped"
                    )
                catalog_steps += [self.warm_search, self.nochange, self.catchup, self.adds, self.rewrite]
                groups.append(catalog_steps)
            else:
                self.notes.append("memstore.catalog missing: only the baselines were measured")
            groups += [[self.cards], [self.startup]]
            if module_exists("memstore.catalog"):
                groups.append([self.rewrite_wait])
            if index_available():
                self._run_group([self.preflight])
                if self.errors:  # a commit that cannot build an index fails in seconds, not after an hour
                    groups = []
                    self.notes.append("the preflight failed: nothing else was measured")
            for group in groups:
                self._run_group(group)
        finally:
            self.cleanup()
        self.summarize()
        self.metrics["bench_seconds"] = time.perf_counter() - started
        sha, dirty = git_revision()
        report: dict[str, Any] = {
            "schema": 1,
            "corpus": opts.corpus,
            "result_name": f"{self.corpus.result_prefix if self.corpus else ''}{size_label(opts.size)}",
            "size_label": size_label(opts.size),
            "entries": opts.size,
            "jsonl_bytes": self.dataset_bytes,
            "seed": opts.seed,
            "dataset": self.corpus.info if self.corpus else {},
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "git_sha": sha,
            "git_dirty": dirty,
            "snapshot": bool(os.environ.get(SHA_ENV)),
            "command": opts.command or f"python -m benchmarks.run --size {size_label(opts.size)}",
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "platform": platform.platform(),
                "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            },
            "gate_mode": opts.gate,
            "exact": not self.mismatches,
            "mismatches": self.mismatches,
            "errors": self.errors,
            "metrics": self.metrics,
            "queries": [result.as_dict() for result in self.results],
            "cards": self.card_results,
            "phase_seconds": self.phase_seconds,
            "notes": self.notes,
        }
        if opts.gate:
            report["gate"] = [floor.__dict__ for floor in gate_floors.evaluate(self.metrics)]
        return report


def run_benchmarks(options: Options) -> dict[str, Any]:
    """Measure, write the result files (unless told not to) and return the report."""
    report = Bench(options).run()
    if options.write_results:
        write_outputs(report, options.results_dir, extra_json=options.json_path)
    elif options.json_path is not None:
        options.json_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return report


def _without_option(argv: Sequence[str], option: str, value: str) -> list[str]:
    """``argv`` minus ``option`` (bare, ``option=value`` or ``option value``)."""
    out: list[str] = []
    skip = False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == f"{option}={value}":
            continue
        if arg == option:
            skip = index + 1 < len(argv) and argv[index + 1] == value
            continue
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100k", help="catalog entries: 10k, 20k, 100k, 1m or an integer")
    parser.add_argument(
        "--corpus",
        choices=corpora.CORPORA,
        default="generated",
        help="generated (default) or realtext: the standard library's docstrings and comments",
    )
    add_text_options(parser)
    parser.add_argument("--gate", action="store_true", help="check the CI floors; exit 1 when one fails")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the JSON report here")
    parser.add_argument(
        "--queries", type=int, dest="repeats", help="timed repetitions of each mix query (indexed search)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--cards", default=None, help="failure-card set sizes, comma-separated (e.g. 10k,100k)"
    )
    parser.add_argument("--catchup", default="1,100,10k", help="appended-line counts for catch-up")
    parser.add_argument("--adds", type=int, default=2_000, help="entries added to measure add throughput")
    parser.add_argument("--writer-rounds", type=int, default=3, help="rounds of the 1- and 4-process writer runs")
    parser.add_argument("--process-runs", type=int, default=15, help="runs of each start-up measurement")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--no-write", action="store_true", help="print only; write no result files")
    parser.add_argument("--keep-work", action="store_true", help="keep the working copy under data/work/")
    parser.add_argument(
        "--snapshot",
        nargs="?",
        const="HEAD",
        metavar="REV",
        help="measure a clean export of a commit (default HEAD), not the working tree",
    )
    args = parser.parse_args(argv)
    raw_argv = list(argv if argv is not None else sys.argv[1:])
    if argv is None:  # as a program: let SIGTERM unwind, so the working copy is removed
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.snapshot is not None:
        forwarded = _without_option(raw_argv, "--snapshot", args.snapshot)
        return run_in_snapshot(
            forwarded, revision=args.snapshot, data_dir=args.data_dir, results_dir=args.results_dir
        )
    size = parse_size(args.size)
    if args.cards is not None:
        card_sizes = tuple(parse_size(part) for part in args.cards.split(",") if part.strip())
    else:
        card_sizes = (10_000,) if args.gate else (10_000, 100_000)
    options = Options(
        size=size,
        seed=args.seed,
        corpus=args.corpus,
        text=text_choice(args.text_sources, args.text_packages),
        gate=args.gate,
        repeats=args.repeats,
        json_path=args.json_path,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        card_sizes=card_sizes,
        catchup_sizes=tuple(parse_size(part) for part in args.catchup.split(",") if part.strip()),
        add_count=max(1, args.adds),
        writer_rounds=max(1, args.writer_rounds),
        process_runs=max(1, args.process_runs),
        write_results=not args.no_write,
        keep_work=args.keep_work,
        command=os.environ.get(COMMAND_ENV) or "python -m benchmarks.run " + " ".join(raw_argv),
    )
    report = run_benchmarks(options)
    print(markdown(report))
    status = 0
    for line in report["errors"]:
        print(f"BENCHMARK ERROR: {line}", file=sys.stderr)
        status = 1
    if report["mismatches"]:
        for line in report["mismatches"]:
            print(f"EXACTNESS FAILURE: {line}", file=sys.stderr)
        status = 1
    if args.gate:
        for floor in report["gate"]:
            if not floor["passed"]:
                print(f"GATE FAIL: {floor['message']}", file=sys.stderr)
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
