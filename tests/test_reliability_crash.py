"""Crash safety: writers SIGKILLed at random points lose nothing they acknowledged.

Spawned workers add entries of 100 B – 64 KiB (and now and then rewrite the file by
deleting their own "doomed" branch) while the driver SIGKILLs a random one every
few hundred milliseconds and starts it again.  Afterwards every acknowledged entry
that was not deliberately deleted is in the file, intact and exactly once; no line
but an unterminated last one fails to parse; the index equals a rebuild; the next
rewrite removes the temp files the killed rewrites left; and a lock whose holder
was killed is free at once.

Full size: ``MEMSTORE_STRESS=full`` (8 processes × 2,000 operations); by default 3 × 150.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import reliability_workers as workers

from memstore.catalog import MemoryCatalog
from memstore.models import memory_entry_from_payload

SPAWN = multiprocessing.get_context("spawn")
REWRITE_RATE = 0.05 if not workers.FULL else 0.005
"""Share of operations that rewrite the file (full size: a 100+ MB file, so fewer)."""


def _line_report(path: Path) -> tuple[list[dict[str, Any]], int, bool]:
    """(payloads of parsed lines, lines that do not parse other than an unterminated last one, torn tail?)."""
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    last_unterminated = not data.endswith(b"\n") and bool(data)
    payloads: list[dict[str, Any]] = []
    bad = 0
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            payload = json.loads(line)
            if memory_entry_from_payload(payload) is None:
                raise ValueError("not an entry")
        except ValueError:
            if number == len(lines) - 1 and last_unterminated:
                continue  # readers skip a torn last line
            bad += 1
            continue
        payloads.append(payload)
    return payloads, bad, last_unterminated


def _temps(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def _lock_is_free(lock_path: Path) -> bool:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.stress
def test_sigkilled_writers_lose_no_acknowledged_entry(tmp_path: Path) -> None:
    processes = workers.sized(3, 8)
    ops = workers.sized(150, 2000)
    pause = (0.05, 0.5) if workers.FULL else (0.02, 0.12)
    root = tmp_path / "repo"
    catalog = MemoryCatalog(root)
    rng = random.Random(20261130)
    reports = [tmp_path / f"worker-{w}.tsv" for w in range(processes)]

    def done_ops(worker: int) -> int:
        return len(workers.read_reports(reports[worker]))

    def start(worker: int, generation: int) -> Any:
        remaining = ops - done_ops(worker)
        process = SPAWN.Process(
            target=workers.crash_worker,
            args=(str(root), worker, str(reports[worker]), worker * 1000 + generation, remaining, REWRITE_RATE),
        )
        process.start()
        return process

    running = {w: start(w, 0) for w in range(processes)}
    generations = dict.fromkeys(running, 0)
    # A worker is killed only once it has acknowledged something since it was started: on a
    # loaded machine a fresh interpreter can take longer to start than the kill interval, and
    # killing it before its first operation would make no progress at all.
    done_at_start = dict.fromkeys(running, 0)
    kills = 0
    probe_ids: list[str] = []
    probe_seconds: list[float] = []
    while running:
        time.sleep(rng.uniform(*pause))
        for worker, process in list(running.items()):
            if not process.is_alive():
                process.join()
                assert process.exitcode == 0, (reports[worker].with_suffix(".tsv.err")).read_text()
                del running[worker]
        if not running:
            break
        progressed = sorted(w for w in running if done_ops(w) > done_at_start[w])
        if not progressed:
            continue
        worker = rng.choice(progressed)
        os.kill(running[worker].pid, signal.SIGKILL)
        running[worker].join()
        kills += 1
        if kills % 5 == 1:
            catalog.search("alpha", limit=1)  # a reader keeps the index current, as agents' queries do
            # A killed holder's lock is free again: the next add goes through without waiting on it.
            started = time.monotonic()
            probe_ids.append(catalog.add(f"driver probe after kill {kills}", branch_name="probe").memory_id)
            probe_seconds.append(time.monotonic() - started)
        if done_ops(worker) < ops:
            generations[worker] += 1
            done_at_start[worker] = done_ops(worker)
            running[worker] = start(worker, generations[worker])
        else:
            del running[worker]

    acknowledged: dict[str, tuple[str, str]] = {}
    rewrites = 0
    for report in reports:
        for fields in workers.read_reports(report):
            if fields[0] == "A":
                acknowledged[fields[1]] = (fields[2], fields[3])
            else:
                rewrites += 1
    payloads, bad_lines, torn_tail = _line_report(catalog.path)
    ids = [p["memory_id"] for p in payloads]
    by_id = {p["memory_id"]: p for p in payloads}
    lost = [mid for mid, (branch, _d) in acknowledged.items() if not branch.startswith("doomed-") and mid not in by_id]
    corrupted = [
        mid
        for mid, (_b, want) in acknowledged.items()
        if mid in by_id and hashlib.sha256(by_id[mid]["content"].encode()).hexdigest()[:16] != want
    ]
    stale_temps = _temps(catalog.directory)
    leftovers = sorted(n for n in os.listdir(catalog.directory / "index") if ".build-" in n)
    workers.figure(
        "crash",
        processes=processes,
        operations=processes * ops,
        kills=kills,
        acknowledged=len(acknowledged),
        rewrites=rewrites,
        lines=len(payloads),
        lost=len(lost),
        corrupted=len(corrupted),
        duplicates=len(ids) - len(set(ids)),
        bad_lines=bad_lines,
        torn_tail=torn_tail,
        stale_temps=len(stale_temps),
        index_build_leftovers=len(leftovers),
        max_add_after_kill_s=round(max(probe_seconds, default=0.0), 3),
    )
    assert kills > 0
    assert not lost, f"{len(lost)} acknowledged entries lost"
    assert not corrupted
    assert len(ids) == len(set(ids)), "an entry was written twice"
    assert bad_lines == 0, "a torn line sits in the middle of the file"
    assert probe_ids and all(mid in by_id for mid in probe_ids)

    # The next rewrite cleans up what killed rewrites left behind.
    catalog.delete_by_branch("no-such-branch")
    assert _temps(catalog.directory) == []

    fresh = MemoryCatalog(root)
    for mid in rng.sample(sorted(by_id), min(50, len(by_id))):
        assert fresh.show(mid).content == by_id[mid]["content"]
    assert fresh.check_index().equal
    assert catalog.check_index().equal
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ["alpha", "w1 alpha", "n1"]:
        assert fresh.search(query, limit=20) == scan.search(query, limit=20)


def test_lock_of_a_killed_holder_is_free_at_once(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("before")
    ready = tmp_path / "ready"
    holder = SPAWN.Process(target=workers.lock_holder, args=(str(catalog.lock_path), str(ready)))
    holder.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert holder.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    assert not _lock_is_free(catalog.lock_path)  # really held
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert _lock_is_free(catalog.lock_path)  # the kernel dropped it with the process
    catalog.add("after")
    assert [e.content for e in catalog.list()] == ["after", "before"]


# ----------------------------------------------------------------------------- kill during a rewrite

REWRITE_POINTS = ["after_temp_create", "mid_write", "after_fsync", "before_replace", "after_replace", "after_dir_fsync"]
APPEND_POINTS = ["append_mid_write", "append_before_fsync"]


def _seed_catalog(root: Path, entries: int = 40) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for n in range(entries):
        catalog.add(f"entry {n} alpha " + "x" * (n * 53 % 700), branch_name=f"b{n % 3}", run_id=f"r{n % 4}")
    return catalog


def _without(data: bytes, key: str, value: str) -> bytes:
    kept = [line for line in data.split(b"\n") if line.strip() and json.loads(line).get(key) != value]
    return b"".join(line + b"\n" for line in kept)


def _assert_next_operations_work(root: Path) -> None:
    catalog = MemoryCatalog(root)
    entry = catalog.add("written after the crash")
    assert catalog.show(entry.memory_id) == entry
    catalog.delete_by_run_id("r3")
    assert _temps(catalog.directory) == []
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    assert catalog.list(limit=1000) == scan.list(limit=1000)
    assert catalog.search("alpha", limit=100) == scan.search("alpha", limit=100)
    assert catalog.check_index().equal
    _payloads, bad, torn = _line_report(catalog.path)
    assert (bad, torn) == (0, False)


@pytest.mark.parametrize("point", REWRITE_POINTS)
@pytest.mark.parametrize("action", ["delete_by_branch", "quarantine_by_branch"])
def test_kill_during_rewrite_leaves_old_or_new_file(tmp_path: Path, point: str, action: str) -> None:
    catalog = _seed_catalog(tmp_path)
    old = catalog.path.read_bytes()
    new = _without(old, "branch_name", "b1")
    old_quarantine = catalog.quarantine_path.read_bytes() if catalog.quarantine_path.exists() else b""
    report = tmp_path / "report"
    process = SPAWN.Process(target=workers.rewrite_killer, args=(str(tmp_path), point, action, "b1", str(report)))
    process.start()
    process.join(120)
    assert process.exitcode == -signal.SIGKILL, report.with_suffix(".err").read_text() if process.exitcode else ""
    after = catalog.path.read_bytes()
    assert after in (old, new)
    if point in ("after_replace", "after_dir_fsync"):
        assert after == new
    if point in ("after_temp_create", "mid_write", "after_fsync", "before_replace"):
        assert after == old
    if action == "quarantine_by_branch" and after == new:
        # Moved entries are appended to quarantine before they leave memory.jsonl: never in neither.
        moved = {p["memory_id"] for p in map(json.loads, catalog.quarantine_path.read_bytes().splitlines())}
        assert {json.loads(line)["memory_id"] for line in old.splitlines() if b'"b1"' in line} <= moved
    if action == "delete_by_branch":
        assert (catalog.quarantine_path.read_bytes() if catalog.quarantine_path.exists() else b"") == old_quarantine
    _assert_next_operations_work(tmp_path)


@pytest.mark.parametrize("point", APPEND_POINTS)
def test_kill_during_quarantine_append_leaves_no_torn_line_behind(tmp_path: Path, point: str) -> None:
    """A move to quarantine killed mid-append: memory.jsonl is untouched and later appends stay whole."""
    catalog = _seed_catalog(tmp_path)
    catalog.quarantine_by_branch("b0", "first")
    old = catalog.path.read_bytes()
    report = tmp_path / "report"
    process = SPAWN.Process(
        target=workers.rewrite_killer, args=(str(tmp_path), point, "quarantine_by_branch", "b1", str(report))
    )
    process.start()
    process.join(120)
    assert process.exitcode == -signal.SIGKILL
    assert catalog.path.read_bytes() == old
    fresh = MemoryCatalog(tmp_path)
    fresh.quarantine_by_branch("b1", "again")
    assert not [e for e in fresh.list(limit=1000) if e.branch_name == "b1"]
    _payloads, bad, torn = _line_report(fresh.quarantine_path)
    assert (bad, torn) == (0, False), "the torn quarantine line was glued into the middle of the file"
    assert {e.branch_name for e in fresh.list_quarantined(limit=1000)} == {"b0", "b1"}
    _assert_next_operations_work(tmp_path)


@pytest.mark.stress
def test_kill_at_random_moments_of_many_rewrites(tmp_path: Path) -> None:
    """A worker deletes one run id after another; killed at a random moment, the file is one version."""
    kills = workers.sized(6, 200)
    template = tmp_path / "template"
    catalog = MemoryCatalog(template)
    rng = random.Random(7)
    runs = [f"r{n}" for n in range(12)]
    for n in range(600):
        catalog.add(f"entry {n} alpha " + "y" * rng.randint(10, 900), run_id=rng.choice(runs))
    catalog.list(limit=1)
    versions = [catalog.path.read_bytes()]
    for run in runs:
        versions.append(_without(versions[-1], "run_id", run))
    hashes = {hashlib.sha256(v).hexdigest(): n for n, v in enumerate(versions)}
    reached: list[int] = []
    for attempt in range(kills):
        root = tmp_path / f"try-{attempt}"
        shutil.copytree(template, root)
        ready, go = root / "ready", root / "go"
        process = SPAWN.Process(target=workers.rewrite_loop, args=(str(root), runs, str(ready), str(go)))
        process.start()
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert process.is_alive() and time.monotonic() < deadline
            time.sleep(0.005)
        go.write_text("go")
        time.sleep(rng.uniform(0, 0.4))
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        data = (root / ".teaagent" / "memory.jsonl").read_bytes()
        assert hashlib.sha256(data).hexdigest() in hashes, "the file is neither the old nor a new version"
        reached.append(hashes[hashlib.sha256(data).hexdigest()])
        _assert_next_operations_work(root)
        shutil.rmtree(root)
    workers.figure("rewrite-kills", kills=kills, versions_seen=len(set(reached)), max_version=max(reached))


def test_index_build_left_by_a_killed_process_is_cleaned_up(tmp_path: Path) -> None:
    catalog = _seed_catalog(tmp_path, entries=5)
    catalog.list(limit=1)
    index_dir = catalog.directory / "index"
    leftover = index_dir / "memstore.sqlite3.build-99999-deadbeef"
    leftover.write_bytes(b"half a database")
    (index_dir / "memstore.sqlite3").unlink()  # the next query builds a new index
    fresh = MemoryCatalog(tmp_path)
    assert fresh.list(limit=1)
    fresh.delete_by_branch("b0")
    assert not leftover.exists()
