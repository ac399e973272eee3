"""Readers during writes, across processes: no phantom, no torn record, no lock error.

Writer processes add checksummed entries (one also rewrites, deleting its own
doomed branch) while reader processes search, list and show for a bounded time.
Every result a reader gets must carry a valid checksum and match its query; every
entry a reader saw (outside the doomed branches) must be in the file at the end;
no exception ("database is locked" included) may reach any caller; at the end
every acknowledged entry is found by show and search, and the index equals a
rebuild.

Full size (``MEMSTORE_STRESS=full``): 8 readers × 8 writers for 60 s; default 2 × 2 for ~5 s.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
import reliability_workers as workers

from memstore.catalog import MemoryCatalog

SPAWN = multiprocessing.get_context("spawn")


@pytest.mark.stress
def test_readers_during_writes_see_only_whole_acknowledged_entries(tmp_path: Path) -> None:
    readers = workers.sized(2, 8)
    writers = workers.sized(2, 8)
    seconds = workers.sized(5, 60)
    root = tmp_path / "repo"
    MemoryCatalog(root)

    # Workers import memstore before the clock starts, so the window is spent working.
    start_at = time.time() + 4
    until = start_at + seconds
    processes = []
    for w in range(writers):
        report = tmp_path / f"writer-{w}.tsv"
        processes.append(
            (
                report,
                SPAWN.Process(target=workers.concurrent_writer, args=(str(root), w, str(report), w, until, w == 0)),
            )
        )
    for r in range(readers):
        report = tmp_path / f"reader-{r}.tsv"
        processes.append(
            (report, SPAWN.Process(target=workers.concurrent_reader, args=(str(root), r, str(report), 100 + r, until)))
        )
    for _report, process in processes:
        process.start()
    for report, process in processes:
        process.join(seconds + 300)
        err = Path(str(report) + ".err")
        assert process.exitcode == 0, err.read_text() if err.exists() else f"exit code {process.exitcode}"

    acknowledged: dict[str, tuple[str, str]] = {}
    rewrites = 0
    for w in range(writers):
        for fields in workers.read_reports(tmp_path / f"writer-{w}.tsv"):
            if fields[0] == "A":
                acknowledged[fields[1]] = (fields[2], fields[3])
            else:
                rewrites += 1
    seen: dict[str, str] = {}
    bad: list[list[str]] = []
    calls = 0
    for r in range(readers):
        for fields in workers.read_reports(tmp_path / f"reader-{r}.tsv"):
            if fields[0] == "S":
                seen[fields[1]] = fields[2]
            elif fields[0] == "BAD":
                bad.append(fields)
            elif fields[0] == "CALLS":
                calls += int(fields[1])

    final = MemoryCatalog(root)
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    in_file = {entry.memory_id: entry for entry in scan.list(limit=10**9)}
    phantoms = [mid for mid in seen if mid not in acknowledged and mid not in in_file]
    vanished = [mid for mid, branch in seen.items() if not branch.startswith("doomed-") and mid not in in_file]
    lost = [
        mid for mid, (branch, _d) in acknowledged.items() if not branch.startswith("doomed-") and mid not in in_file
    ]
    workers.figure(
        "concurrency",
        readers=readers,
        writers=writers,
        seconds=seconds,
        acknowledged=len(acknowledged),
        rewrites=rewrites,
        reader_calls=calls,
        distinct_seen=len(seen),
        bad_results=len(bad),
        phantoms=len(phantoms),
        lost=len(lost),
    )
    assert not bad, bad[:5]
    assert not phantoms and not vanished
    assert not lost
    assert calls > 0 and acknowledged
    for mid, (branch, want) in acknowledged.items():
        if branch.startswith("doomed-"):
            continue
        entry = final.show(mid)
        assert workers.digest(entry.content) == want
    for w in range(writers):
        keep = {mid for mid, (branch, _d) in acknowledged.items() if branch == f"keep-{w}"}
        found = {e.memory_id for e in final.search(f"w{w} alpha", limit=10**6) if e.branch_name == f"keep-{w}"}
        assert keep <= found
    assert final.search("alpha", limit=50) == scan.search("alpha", limit=50)
    assert final.check_index().equal
