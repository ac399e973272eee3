"""Model test: the indexed catalog through writes, external edits and crashes, against a plain list.

tests/test_catalog_state_machine.py drives the API alone; this machine adds what
happens around it: other tools appending or rewriting memory.jsonl (a new inode),
and crash-and-reopen — the catalog object dropped (optionally after a simulated
torn tail: a writer killed mid-append) and a new one built.  Invariants after every
step: the store equals the model (indexed, and through a fresh scan) and
``check_index()`` is equal.

Full size (``MEMSTORE_STRESS=full``): 300 examples of 50 steps; default 20 of 25.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import reliability_workers as workers
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from spec_reference import spec_search

from memstore.catalog import MemoryCatalog
from memstore.jsonl import encode_entry
from memstore.models import MemoryEntry, memory_entry_from_payload

BRANCHES = ["main", "feature"]
RUNS = ["run-1", "run-2"]
WORDS = ["parser", "bug", "Build", "straße", "σς", "fix", "x", "auto", "alpha"]

contents = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
tag_lists = st.lists(st.sampled_from(["auto-curated", "run-summary", "Parser", "misc"]), max_size=2)
branches = st.none() | st.sampled_from(BRANCHES)
runs = st.none() | st.sampled_from(RUNS)
queries = st.lists(st.sampled_from([*WORDS, "pars", "summary", "ß", "AND", '"']), min_size=1, max_size=2).map(" ".join)


class ReliabilityMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="memstore-rel-"))
        self.catalog = MemoryCatalog(self.root)
        self.active: list[MemoryEntry] = []
        self.quarantined: list[MemoryEntry] = []
        self.counter = 0
        self.external_junk: set[bytes] = {b"}{", b"\xff"}

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _external_entry(self, content: str, tags: list[str], branch: str | None) -> MemoryEntry:
        self.counter += 1
        payload: dict[str, Any] = {
            "memory_id": f"ext{self.counter}",
            "content": content,
            "tags": tags,
            "created_at": f"2026-01-{1 + self.counter % 28:02d}T00:00:00+00:00",
            "branch_name": branch,
            "run_id": None,
        }
        entry = memory_entry_from_payload(payload)
        assert entry is not None
        return entry

    # ------------------------------------------------------------ the API

    @rule(content=contents, tags=tag_lists, branch=branches, run=runs)
    def add(self, content: str, tags: list[str], branch: str | None, run: str | None) -> None:
        self.active.append(self.catalog.add(content, tags=tags, branch_name=branch, run_id=run))

    @rule(content=contents, branch=branches)
    def add_quarantined(self, content: str, branch: str | None) -> None:
        entry = self.catalog.add_quarantined(content, provenance={"source": "web"}, branch_name=branch)
        self.quarantined.append(entry)

    @rule(branch=st.sampled_from(BRANCHES))
    def delete_by_branch(self, branch: str) -> None:
        doomed = [e for e in self.active if e.branch_name == branch]
        assert self.catalog.delete_by_branch(branch) == len(doomed)
        self.active = [e for e in self.active if e.branch_name != branch]

    @rule(run=st.sampled_from(RUNS))
    def delete_by_run_id(self, run: str) -> None:
        doomed = [e for e in self.active if e.run_id == run]
        assert self.catalog.delete_by_run_id(run) == len(doomed)
        self.active = [e for e in self.active if e.run_id != run]

    @rule(branch=st.sampled_from(BRANCHES))
    def quarantine_by_branch(self, branch: str) -> None:
        moved = [e for e in self.active if e.branch_name == branch]
        assert self.catalog.quarantine_by_branch(branch, "poisoned") == len(moved)
        self.active = [e for e in self.active if e.branch_name != branch]
        self.quarantined.extend(moved)

    @rule(query=queries, limit=st.integers(1, 8))
    def search(self, query: str, limit: int) -> None:
        assert self.catalog.search(query, limit=limit) == spec_search(self.active, query, limit)

    @rule(limit=st.integers(1, 8))
    def list_entries(self, limit: int) -> None:
        assert self.catalog.list(limit=limit) == self.active[::-1][:limit]

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data())
    def show(self, data: st.DataObject) -> None:
        wanted = data.draw(st.sampled_from(self.active)).memory_id
        assert self.catalog.show(wanted) == next(e for e in self.active if e.memory_id == wanted)

    # ------------------------------------------------------------ around the API

    @rule(content=contents, tags=tag_lists, branch=branches, junk=st.sampled_from([None, b"}{", b"\xff", b"  "]))
    def external_append(self, content: str, tags: list[str], branch: str | None, junk: bytes | None) -> None:
        """Another tool appends a well-formed line (and maybe junk), ending each with a newline."""
        entry = self._external_entry(content, tags, branch)
        data = self.catalog.path.read_bytes() if self.catalog.path.exists() else b""
        lead = b""
        if data and not data.endswith(b"\n"):
            # Another tool terminates a torn tail rather than setting it aside: its line stays corrupt.
            lead = b"\n"
            self.external_junk.add(data[data.rfind(b"\n") + 1 :])
        extra = junk + b"\n" if junk is not None else b""
        with open(self.catalog.path, "ab") as handle:
            handle.write(lead + encode_entry(entry) + extra)
        self.active.append(entry)

    @rule(data=st.data())
    def external_rewrite(self, data: st.DataObject) -> None:
        """git checkout of another version: some entries dropped or reordered, a new inode."""
        kept = data.draw(st.lists(st.sampled_from(range(len(self.active))), unique=True)) if self.active else []
        self.active = [self.active[i] for i in kept]
        tmp = self.catalog.path.with_name("checkout~")
        tmp.write_bytes(b"".join(encode_entry(e) for e in self.active))
        os.replace(tmp, self.catalog.path)

    @rule(torn=st.booleans(), cut=st.floats(0.05, 0.95))
    def crash_and_reopen(self, torn: bool, cut: float) -> None:
        """The writer dies (maybe mid-append, leaving a torn tail); a new process opens the catalog."""
        del self.catalog
        if torn:
            lost = self._external_entry("never acknowledged", [], None)
            line = encode_entry(lost)
            data = self.catalog_path().read_bytes() if self.catalog_path().exists() else b""
            # The dying writer is memstore: it set aside any earlier torn tail before appending.
            data = data[: data.rfind(b"\n") + 1]
            self.catalog_path().parent.mkdir(parents=True, exist_ok=True)
            self.catalog_path().write_bytes(data + line[: max(1, min(len(line) - 3, int(len(line) * cut)))])
        self.catalog = MemoryCatalog(self.root)

    def catalog_path(self) -> Path:
        return self.root / ".teaagent" / "memory.jsonl"

    # ------------------------------------------------------------ invariants

    @invariant()
    def store_equals_model(self) -> None:
        assert self.catalog.list(limit=10_000) == self.active[::-1]
        scan = MemoryCatalog(self.root, use_index=False, readonly=True)
        assert scan.list(limit=10_000) == self.active[::-1]
        assert self.catalog.list_quarantined(limit=10_000) == self.quarantined[::-1]
        assert self.catalog.check_index().equal
        if self.catalog_path().exists():
            for line in self.catalog_path().read_bytes().split(b"\n")[:-1]:
                if line.strip() and line not in self.external_junk:
                    json.loads(line)  # memstore never leaves a torn line in the middle of the file


MODEL_SETTINGS = settings(
    max_examples=workers.sized(20, 300),
    stateful_step_count=workers.sized(25, 50),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestReliabilityModel = pytest.mark.stress(ReliabilityMachine.TestCase)
TestReliabilityModel.settings = MODEL_SETTINGS
