"""Spawned processes add while another deletes (or quarantines) by branch.

Every acknowledged add that was not deleted must survive, every deleted add must
be counted exactly once, and the file must never hold a torn line or a duplicate.
An add only counts as acknowledged once ``add`` has returned its entry.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from memstore.catalog import MemoryCatalog

SPAWN = multiprocessing.get_context("spawn")
DOOMED = "doomed"
ADDERS = 3
ADDS_PER_PROCESS = 40


def _adder(root: str, worker: int, count: int, use_index: bool, start: Any, acks: Any) -> None:
    catalog = MemoryCatalog(root, use_index=use_index)
    start.wait()
    for n in range(count):
        branch = DOOMED if n % 2 else f"keep-{worker}"
        entry = catalog.add(f"worker {worker} note {n} " + "x" * (n * 37 % 400), branch_name=branch)
        acks.put((entry.memory_id, branch))  # only after add() returned: acknowledged
    acks.put(None)


def _remover(root: str, action: str, use_index: bool, start: Any, stop: Any, counts: Any) -> None:
    catalog = MemoryCatalog(root, use_index=use_index)
    start.wait()
    total = 0
    while True:
        last = stop.is_set()  # set once every add is acknowledged: this pass sees them all
        if action == "delete":
            total += catalog.delete_by_branch(DOOMED)
        else:
            total += catalog.quarantine_by_branch(DOOMED, "test")
        catalog.search("note")  # readers run between the rewrites too
        if last:
            break
    counts.put(total)


def _run(root: Path, action: str, use_index: bool) -> tuple[list[tuple[str, str]], int]:
    MemoryCatalog(root)  # create .teaagent once, before the race
    start, stop = SPAWN.Event(), SPAWN.Event()
    acks, counts = SPAWN.Queue(), SPAWN.Queue()
    adders = [
        SPAWN.Process(target=_adder, args=(str(root), w, ADDS_PER_PROCESS, use_index, start, acks))
        for w in range(ADDERS)
    ]
    remover = SPAWN.Process(target=_remover, args=(str(root), action, use_index, start, stop, counts))
    for process in [*adders, remover]:
        process.start()
    start.set()
    acknowledged: list[tuple[str, str]] = []
    finished = 0
    while finished < ADDERS:
        item = acks.get(timeout=120)
        if item is None:
            finished += 1
        else:
            acknowledged.append(item)
    stop.set()  # the remover makes one more pass after the last acknowledged add
    removed = counts.get(timeout=120)
    for process in [*adders, remover]:
        process.join(timeout=120)
        assert process.exitcode == 0
    return acknowledged, removed


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    assert not data or data.endswith(b"\n")
    payloads = []
    for line in data.split(b"\n"):
        if line.strip():
            payloads.append(json.loads(line))  # a torn or glued line would fail here
    return payloads


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "scan"])
@pytest.mark.parametrize("action", ["delete", "quarantine"])
def test_adds_racing_rewrites_are_never_lost(tmp_path: Path, action: str, use_index: bool) -> None:
    acknowledged, removed = _run(tmp_path, action, use_index)
    assert len(acknowledged) == ADDERS * ADDS_PER_PROCESS
    catalog = MemoryCatalog(tmp_path, use_index=False, readonly=True)

    active = _lines(catalog.path)
    active_ids = [payload["memory_id"] for payload in active]
    assert len(active_ids) == len(set(active_ids)), "duplicate lines in memory.jsonl"
    kept = {memory_id for memory_id, branch in acknowledged if branch != DOOMED}
    doomed = {memory_id for memory_id, branch in acknowledged if branch == DOOMED}
    assert set(active_ids) == kept  # every surviving add is there, every doomed one is gone
    assert removed == len(doomed)  # each doomed add was removed exactly once

    quarantined = _lines(catalog.quarantine_path)
    quarantined_ids = [payload["memory_id"] for payload in quarantined]
    if action == "quarantine":
        assert sorted(quarantined_ids) == sorted(doomed)  # moved exactly once, nothing lost
        assert all(p["provenance"]["original_branch"] == DOOMED for p in quarantined)
    else:
        assert quarantined_ids == []

    # the public API agrees with the raw file
    assert {e.memory_id for e in catalog.list(limit=10_000)} == kept
    assert {e.memory_id for e in MemoryCatalog(tmp_path, use_index=use_index).list(limit=10_000)} == kept
