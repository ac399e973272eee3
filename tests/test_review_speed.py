"""Adversarial review of the speed round (prepared searches, worker-process loads, cheaper rows).

The defect found: test_a_killed_reindex_leaves_no_worker_writing_behind_it fails on the commit
under review (42e9e1d/f6673cb).  The other two tests are attacks that held, kept as regression
tests: prepared searches on kept connections across rebuilds and new sources, and a load worker
killed mid-load.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from pg_server import PgUrls
from test_index_differential import write_raw
from test_team_index_differential import Team, entry_line

from memstore import team_index
from memstore.catalog import MemoryCatalog
from memstore.index.pg import load_worker
from memstore.index.pg.conn import raw_connection

pytestmark = pytest.mark.pg
RUNS = 7
QUERIES = ["word", "common", "rare", "odd", "common line", "word7"]


def _lines(tag: str, n: int) -> bytes:
    lines = [
        entry_line(
            f"common word{i} {tag} {'rare' if i % 97 == 0 else ''}",
            memory_id=f"{tag}-{i}",
            stamp=f"2026-01-01T00:00:{i % 60:02d}+00:00",
        )
        for i in range(n)
    ]
    lines.append(entry_line(f"common odd \x00 line {tag}", memory_id=f"odd-{tag}"))
    return b"\n".join(lines) + b"\n"


def test_repeated_searches_on_kept_connections_across_rebuilds_and_new_sources(
    tmp_path: Path, pg_database: PgUrls
) -> None:
    """Searches past the prepare and generic-plan thresholds, on the same pooled connections,
    while one source is rebuilt (new partition, old one detached and dropped) and a new source
    is attached: every answer must stay the scan's and no search may fail on a stale plan."""
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    try:
        for number, catalog in enumerate(team.catalogs.values()):
            write_raw(catalog.path, _lines(f"g{number}", 400))
        team.catch_up()
        for phase in range(4):
            for _run in range(RUNS):
                team.check(QUERIES)
            if phase == 0 or phase == 2:
                first = next(iter(team.catalogs.values()))
                write_raw(first.path, _lines(f"p{phase}", 300 + phase))  # a rewrite: a full rebuild
                team.catch_up()
            elif phase == 1:
                name = f"new{os.getpid()}-{phase}/memory.jsonl"
                root = tmp_path / f"extra{phase}"
                team.roots[name] = root
                team.catalogs[name] = MemoryCatalog(root, use_index=False)
                team.seen[name] = []
                write_raw(team.catalogs[name].path, _lines("fresh", 250))
                team.catch_up()
    finally:
        team.close()


def _doc_counts(writer: str, names: list[str]) -> dict[str, int]:
    from memstore.team_index import TeamIndex

    team = TeamIndex(writer)
    try:
        with raw_connection(team._engine("read")) as conn:
            rows = conn.execute(
                "SELECT s.name, (SELECT count(*) FROM team_doc d WHERE d.part = s.part)"
                " FROM team_source s WHERE s.name = ANY(%s)",
                (names,),
            ).fetchall()
        return {str(name): int(count) for name, count in rows}
    finally:
        team.close()


def test_a_worker_killed_mid_load_leaves_nothing_half_visible(
    tmp_path: Path, pg_database: PgUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of a load worker in the middle of its catch-up: the parent loads the source itself,
    the answers equal the scan and each source holds exactly one row per line."""
    monkeypatch.setattr(team_index, "PROCESS_BYTES", 1)
    real_load = load_worker.LoadWorker.load
    killed: list[int] = []

    def load(self, name, root, *, full):  # type: ignore[no-untyped-def]
        if not killed:
            killed.append(self.process.pid)
            threading.Timer(0.4, lambda: self.process.send_signal(signal.SIGKILL)).start()
        return real_load(self, name, root, full=full)

    monkeypatch.setattr(load_worker.LoadWorker, "load", load)
    team = Team(tmp_path, pg_database.writer, pg_database.reader, 2)
    try:
        for number, catalog in enumerate(team.catalogs.values()):
            write_raw(catalog.path, _lines(f"k{number}", 20000))
        team.catch_up()
        assert killed
        team.check(QUERIES)
        counts = _doc_counts(pg_database.writer, list(team.roots))
        assert counts == {name: 20001 for name in team.roots}
        team.catch_up()
        team.check(QUERIES)
    finally:
        team.close()


_PARENT = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from memstore import team_index
    from memstore.index.pg import load_worker
    team_index.PROCESS_BYTES = 1
    real_start = load_worker.LoadWorker.start
    printing = threading.Lock()
    def start(url):
        worker = real_start(url)
        with printing:  # two loader threads start workers at once: one whole line each
            sys.stdout.write(f"{worker.process.pid}\\n")
            sys.stdout.flush()
        return worker
    load_worker.LoadWorker.start = staticmethod(start)
    roots = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    team_index.TeamIndex(sys.argv[1]).reindex(roots)
    print("done", flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_killed_reindex_leaves_no_worker_writing_behind_it(tmp_path: Path, pg_database: PgUrls) -> None:
    """SIGKILL of the reindexing parent mid-load: its worker processes are orphaned but go on with
    the source they were sent, and commit it after the reindex was killed (a thread's load dies with
    its process and the server rolls it back).  A killed reindex thus keeps writing to the index,
    racing whatever the operator runs next (a retry, a full rebuild) for the same sources."""
    pg_writer_url = pg_database.writer
    roots = {}
    for number in range(2):
        name = f"orphan{os.getpid()}-{number}/memory.jsonl"
        roots[name] = tmp_path / f"o{number}"
        write_raw(MemoryCatalog(roots[name], use_index=False).path, _lines(f"o{number}", 40000))
    args = [sys.executable, "-c", _PARENT, pg_writer_url]
    for name, root in roots.items():
        args += [name, str(root)]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(parent.stdout.readline()), int(parent.stdout.readline())]
    time.sleep(0.5)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    before = _doc_counts(pg_writer_url, list(roots))
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _doc_counts(pg_writer_url, list(roots))
    assert after == before, f"sources committed after their reindex was killed: {before} -> {after}"
