"""Adversarial review of the client-side read deadline (commit 1bab6d1).

Each test here fails on 1bab6d1.  Same style as tests/test_index_pg_deadline.py: a cluster of
this module's own (``pg_own_cluster``), frozen with SIGSTOP; every call that could hang runs in
a thread joined with a generous bound, so a hang fails the test instead of blocking the run.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pg_server
import pytest
from bounded import run_bounded
from tcp_forward import TcpForward
from test_index_pg_deadline import BOUND, DEADLINE, LOCK_WAITS, warnings_of

from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.index.pg_deadline import READ_DEADLINE_ENV


@pytest.fixture(scope="module")
def urls(pg_own_cluster: pg_server.Cluster) -> pg_server.PgUrls:
    return pg_server.create_database(pg_own_cluster, "memstore_review")


# ----------------------------------------------------------------------------- defect 1
# A store read whose first step is a catch-up runs it on the process-wide *load* engine, which
# has no read deadline (only 600 s per wait): a new store handle in a long-lived process (MCP
# server, watch) against a frozen server hangs ~600 s instead of falling back within DEADLINE.


def test_a_new_store_handle_on_a_frozen_server_falls_back_within_the_deadline(
    tmp_path: Path,
    urls: pg_server.PgUrls,
    pg_own_cluster: pg_server.Cluster,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(READ_DEADLINE_ENV, str(DEADLINE))
    first = MemoryCatalog(tmp_path, index_url=urls.writer, source_name="review/handle.jsonl")
    for text in ("alpha beta", "alpha gamma"):
        first.add(text)
    expected = MemoryCatalog(tmp_path, use_index=False).search("alpha")
    assert first.search("alpha") == expected  # pools a read and a load connection in this process
    with caplog.at_level(logging.WARNING), pg_server.frozen(pg_own_cluster):
        # The next tool call of the same process opens a handle of its own.
        second = MemoryCatalog(tmp_path, index_url=urls.writer, source_name="review/handle.jsonl")
        found = run_bounded(second.search, "alpha", timeout=BOUND)
    assert found == expected
    assert len(warnings_of(caplog)) == 1


def test_a_new_card_store_handle_on_a_frozen_server_falls_back_within_the_deadline(
    tmp_path: Path,
    urls: pg_server.PgUrls,
    pg_own_cluster: pg_server.Cluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(READ_DEADLINE_ENV, str(DEADLINE))
    first = FailureCardStorage(tmp_path, index_url=urls.writer, source_name="review/cards.jsonl")
    scan = FailureCardStorage(tmp_path, use_index=False)
    first.find_matching(["app.py"], "fix the parser")  # registers the source, pools connections
    with pg_server.frozen(pg_own_cluster):
        second = FailureCardStorage(tmp_path, index_url=urls.writer, source_name="review/cards.jsonl")
        found = run_bounded(second.find_matching, ["app.py"], "fix the parser", timeout=BOUND)
    assert found == scan.find_matching(["app.py"], "fix the parser")


# ----------------------------------------------------------------------------- defect 2
# tcp_user_timeout=30000 is forced on every connection, load engines' too.  Linux applies
# TCP_USER_TIMEOUT to zero-window probing as well: a peer that is alive and acknowledging but
# not reading (a backend stalled on I/O, a proxy or pooler that stalls, a paused server on a
# live host) kills a load's COPY after 30 s, although loads are documented to wait 600 s
# ($MEMSTORE_PG_LOAD_WAIT) for any one step.

STALL = 36.0
"""Longer than tcp_user_timeout (30 s), far below the load's 600 s per-wait limit."""


def stalling_proxy(target: Path, after: int) -> TcpForward:
    """Once ``after`` bytes went to the server, it stops reading from the client for STALL seconds."""
    return TcpForward(target, stall_after=after, stall_s=STALL)


def _big_source(root: Path, lines: int) -> None:
    import json
    import uuid

    MemoryCatalog(root).add("seed entry")  # the layout, as memstore makes it
    path = root / ".teaagent" / "memory.jsonl"
    with path.open("a", encoding="utf-8") as out:
        for n in range(lines):
            entry = {
                "branch_name": None,
                "content": f"entry {n} alpha beta gamma delta {uuid.uuid4().hex} {n * 7919 % 104729}",
                "created_at": "2026-12-01T19:10:05.298790+00:00",
                "memory_id": uuid.uuid4().hex,
                "run_id": None,
                "tags": ["bulk"],
            }
            out.write(json.dumps(entry, sort_keys=True) + "\n")


def test_a_load_over_tcp_survives_a_peer_that_stops_reading_for_longer_than_30_s(
    tmp_path: Path, urls: pg_server.PgUrls, pg_own_cluster: pg_server.Cluster
) -> None:
    from memstore.team_index import TeamIndex

    root = tmp_path / "big"
    _big_source(root, 60_000)
    proxy = stalling_proxy(Path(pg_own_cluster.socket_dir) / pg_server.SOCKET_NAME, after=3_000_000)
    try:
        url = f"postgresql://writer@127.0.0.1:{proxy.port}/{urls.database}"
        with TeamIndex(url) as team:
            report = run_bounded(team.reindex, {"big": root}, timeout=STALL + 120)
        assert proxy.stalled  # the stall did happen mid-load
        assert report.sources[0].entries == 60_001
    finally:
        proxy.close()


# ----------------------------------------------------------------------------- defect 3
# A bad $MEMSTORE_PG_READ_DEADLINE in a store read: SharedSource._guarded turns the
# InvalidArgumentError (a MemstoreError) into IndexBusyError, which the policy logs at INFO as
# "index busy" on every call, with no warning and no back-off: the misconfiguration is never
# shown, and the shared index is silently never used.


def test_a_bad_deadline_setting_in_a_store_read_is_a_warning_not_a_silent_busy(
    tmp_path: Path, urls: pg_server.PgUrls, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Settings are read when a URL's engine is made (one per process): a URL no other test used.
    fresh = urls.writer + ("&" if "?" in urls.writer else "?") + "connect_timeout=4"
    catalog = MemoryCatalog(tmp_path, index_url=fresh, source_name="review/badenv.jsonl")
    catalog.add("alpha")
    monkeypatch.setenv(READ_DEADLINE_ENV, "soon")
    with caplog.at_level(logging.INFO):
        assert [entry.content for entry in catalog.search("alpha")] == ["alpha"]
    warnings = warnings_of(caplog)
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("memstore")]
    assert len(warnings) == 1 and READ_DEADLINE_ENV in warnings[0], logged
    assert "busy" not in warnings[0]


# ----------------------------------------------------------------------------- defect 4
# Ctrl-C during a read on a frozen server: psycopg's interrupt handler first tries a cancel
# (its own 5 s timeout, a new connection to the frozen postmaster: not cut to the read's
# deadline), so the interrupt arrives after ~5.5 s whatever the deadline; and the private
# _Expired leaks into psycopg's warning ("query cancellation interrupted (_Expired)").


CTRL_C_BOUND = DEADLINE + 2.0
"""Ctrl-C ends the read at its deadline (2 s); the defect, after the cancel's own 5 s (5.3 s at the
earliest).  Between the two, with room for a loaded machine (DEADLINE + 1.0 left it 1 s)."""


CTRL_C_CHILD = """
import signal, sys, time
from memstore.team_index import TeamIndex

# Python keeps SIGINT ignored when it starts with it ignored (a job started with & by a
# non-interactive shell, as a CI runner may start the test run): give it the usual Ctrl-C.
signal.signal(signal.SIGINT, signal.default_int_handler)

team = TeamIndex(sys.argv[1], read_deadline_s=float(sys.argv[2]))
assert team.search("lake").hits
print("ready", flush=True)
sys.stdin.readline()  # the server is frozen now
print("searching", flush=True)
started = time.monotonic()
try:
    team.search("lake")
    outcome = "returned"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
except Exception as exc:
    outcome = type(exc).__name__ + ": " + str(exc)
print(f"{time.monotonic() - started:.3f} {outcome}", flush=True)
"""
"""A process of its own, with Python's usual SIGINT handler: a Ctrl-C is a process's event, and how
the test run was started (SIGINT ignored, as for a background job) must not decide the outcome."""


def test_ctrl_c_during_a_frozen_read_ends_within_the_deadline_and_logs_nothing_private(
    tmp_path: Path, urls: pg_server.PgUrls, pg_own_cluster: pg_server.Cluster
) -> None:
    import signal
    import subprocess
    import sys

    from memstore.team_index import TeamIndex

    root = tmp_path / "ki"
    MemoryCatalog(root).add("a frozen lake")
    with TeamIndex(urls.writer) as writer:
        writer.reindex({"ki": root})
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_CHILD, urls.reader, str(DEADLINE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        with pg_server.frozen(pg_own_cluster):
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "searching"
            time.sleep(0.3)  # into the read: it waits on the frozen server
            child.send_signal(signal.SIGINT)
            took_text, outcome = child.stdout.readline().strip().split(" ", 1)
        _out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert outcome == "KeyboardInterrupt", f"Ctrl-C 0.3 s into the read ended it with {outcome}"
    assert float(took_text) < CTRL_C_BOUND, f"Ctrl-C took {took_text} s, the read's deadline is {DEADLINE} s"
    assert "_Expired" not in err, err


# ----------------------------------------------------------------------------- defect 5
# A read that expires against a *live* server (slow, or queued behind a lock) is only closed
# on the client: nothing cancels it and no client_connection_check_interval is set, so its
# backend keeps running (here: keeps waiting in the lock queue) until the server's own timeout,
# holding a connection slot.  Every retry adds one: a short $MEMSTORE_PG_READ_DEADLINE, or a
# caller that retries, piles up orphaned backends towards max_connections.

ACTIVE_MEMSTORE = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memstore' AND state = 'active'"
    " AND pid <> pg_backend_pid()"
)


def test_an_expired_read_leaves_no_backend_running_on_a_live_server(tmp_path: Path, urls: pg_server.PgUrls) -> None:
    from memstore.errors import IndexServerError
    from memstore.team_index import TeamIndex

    root = tmp_path / "orphans"
    MemoryCatalog(root).add("a locked lake")
    with TeamIndex(urls.writer) as writer:
        writer.reindex({"orphans": root})
    holder, watcher = pg_server.connect(urls.admin), pg_server.connect(urls.admin)
    try:
        with TeamIndex(urls.reader, read_deadline_s=1.0) as team:
            assert team.search("lake").hits
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE team_doc IN ACCESS EXCLUSIVE MODE")  # a rebuild's detach, say
            for _ in range(4):
                with pytest.raises(IndexServerError, match="within 1 s"):
                    run_bounded(team.search, "lake", timeout=BOUND)
            # The orphans would wait out the 10 s lock timeout; closed clients are seen within ~2 s.
            gone = pg_server.eventually(lambda: watcher.execute(ACTIVE_MEMSTORE).fetchone() == (0,), within_s=7.0)
            left = watcher.execute(ACTIVE_MEMSTORE).fetchone()
            holder.execute("ROLLBACK")
    finally:
        holder.close()
        watcher.close()
    assert gone, f"{left[0]} backends of expired reads still running (each until the 10 s lock timeout)"


# The same cause on one handle: the first read after a write catches up first (the load engine:
# no deadline), so a server that freezes while that catch-up waits (here: for the source's
# advisory lock, which another indexer holds) hangs the read ~600 s.



def test_a_store_read_whose_catch_up_meets_a_frozen_server_falls_back_within_the_deadline(
    tmp_path: Path,
    urls: pg_server.PgUrls,
    pg_own_cluster: pg_server.Cluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memstore.index.pg.conn import LOCK_SPACE

    monkeypatch.setenv(READ_DEADLINE_ENV, str(DEADLINE))
    name = "review/catchup.jsonl"
    catalog = MemoryCatalog(tmp_path, index_url=urls.writer, source_name=name)
    catalog.add("alpha one")
    assert len(catalog.search("alpha")) == 1
    catalog.add("alpha two")  # the next read must catch up first
    expected = MemoryCatalog(tmp_path, use_index=False).search("alpha")
    holder, watcher = pg_server.connect(urls.admin), pg_server.connect(urls.admin)
    try:
        holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_SPACE, name))  # another indexer
        outcome: dict[str, object] = {}
        reader = threading.Thread(target=lambda: outcome.update(found=catalog.search("alpha")), daemon=True)
        reader.start()
        give_up = time.monotonic() + BOUND
        while watcher.execute(LOCK_WAITS).fetchone() == (0,):
            assert reader.is_alive() and time.monotonic() < give_up, outcome
            time.sleep(0.05)
        with pg_server.frozen(pg_own_cluster):
            reader.join(BOUND)
            hung = reader.is_alive()
        holder.execute("SELECT pg_advisory_unlock_all()")
        reader.join(BOUND)
    finally:
        holder.close()
        watcher.close()
    assert not hung, f"the store read did not return within {BOUND} s of the freeze (deadline {DEADLINE} s)"
    assert outcome["found"] == expected
