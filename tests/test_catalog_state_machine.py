"""A hypothesis state machine drives MemoryCatalog against an in-memory model.

The model is the list of active entries in file order plus the list of
quarantined entries (with the provenance each must carry).  After every step the
store must equal the model, read through a fresh look at the files.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from spec_reference import spec_search

from memstore.catalog import MemoryCatalog
from memstore.models import MemoryEntry

BRANCHES = ["main", "feature", "hotfix"]
RUNS = ["run-1", "run-2"]
WORDS = ["parser", "bug", "Build", "straße", "σς", "fix", "x", "auto"]

contents = (
    st.lists(st.sampled_from(WORDS) | st.text(max_size=3), min_size=1, max_size=4)
    .map(" ".join)
    .filter(lambda text: text.strip() != "")
)
tag_lists = st.lists(st.sampled_from(["auto-curated", "run-summary", "Parser", " misc ", "BUG"]), max_size=3)
branches = st.none() | st.sampled_from(BRANCHES)
runs = st.none() | st.sampled_from(RUNS)
queries = st.lists(st.sampled_from([*WORDS, "pars", "summary", "curated", "ß"]), min_size=1, max_size=2).map(
    " ".join
) | st.sampled_from(["", "  "])


class CatalogMachine(RuleBasedStateMachine):
    use_index = True

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="memstore-sm-"))
        self.catalog = MemoryCatalog(self.root, use_index=self.use_index)
        self.active: list[MemoryEntry] = []
        self.quarantined: list[tuple[MemoryEntry, dict[str, Any]]] = []
        self.external = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ writes

    @rule(content=contents, tags=tag_lists, branch=branches, run=runs)
    def add(self, content: str, tags: list[str], branch: str | None, run: str | None) -> None:
        entry = self.catalog.add(content, tags=tags, branch_name=branch, run_id=run)
        assert entry.content == content.strip()
        self.active.append(entry)

    @rule(content=contents, tags=tag_lists, branch=branches, source=st.sampled_from(["web", "tool"]))
    def add_quarantined(self, content: str, tags: list[str], branch: str | None, source: str) -> None:
        provenance = {"source": source}
        entry = self.catalog.add_quarantined(content, tags=tags, provenance=provenance, branch_name=branch)
        self.quarantined.append((entry, provenance))

    @rule(branch=st.sampled_from(BRANCHES))
    def delete_by_branch(self, branch: str) -> None:
        expected = [e for e in self.active if e.branch_name == branch]
        assert self.catalog.delete_by_branch(branch) == len(expected)
        self.active = [e for e in self.active if e.branch_name != branch]

    @rule(run=st.sampled_from(RUNS))
    def delete_by_run_id(self, run: str) -> None:
        expected = [e for e in self.active if e.run_id == run]
        assert self.catalog.delete_by_run_id(run) == len(expected)
        self.active = [e for e in self.active if e.run_id != run]

    @rule(branch=st.sampled_from(BRANCHES), reason=st.sampled_from(["poisoned", "reverted"]))
    def quarantine_by_branch(self, branch: str, reason: str) -> None:
        moved = [e for e in self.active if e.branch_name == branch]
        assert self.catalog.quarantine_by_branch(branch, reason) == len(moved)
        self.active = [e for e in self.active if e.branch_name != branch]
        for entry in moved:
            self.quarantined.append((entry, {"reason": reason, "original_branch": branch}))

    @rule(
        content=contents,
        tags=tag_lists,
        branch=branches,
        created_at=st.sampled_from(["2020-01-01T00:00:00+00:00", "2999-01-01T00:00:00+00:00"]),
        newline=st.booleans(),
        crlf=st.booleans(),
    )
    def external_append(
        self, content: str, tags: list[str], branch: str | None, created_at: str, newline: bool, crlf: bool
    ) -> None:
        """Another tool appends an existing-format line, maybe without newline (the next add must cope)."""
        self.external += 1
        entry = MemoryEntry(f"ext{self.external:029d}", content, tuple(tags), created_at, branch)
        line = json.dumps(entry.to_dict(), sort_keys=True).encode()
        self._append_raw(line + ((b"\r\n" if crlf else b"\n") if newline else b""))
        self.active.append(entry)

    @rule(junk=st.sampled_from([b"not json", b"}{", b"\xff\xfe", b'{"memory_id": ""}', b"", b"  "]))
    def external_corrupt_line(self, junk: bytes) -> None:
        self._append_raw(junk + b"\n")

    def _append_raw(self, data: bytes) -> None:
        path = self.catalog.path
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            data = b"\n" + data
        with open(path, "ab") as handle:
            handle.write(data)

    @rule(use_index=st.booleans())
    def reopen(self, use_index: bool) -> None:
        self.catalog = MemoryCatalog(self.root, use_index=use_index)

    # ------------------------------------------------------------ reads

    @rule(query=queries, limit=st.integers(0, 6))
    def search(self, query: str, limit: int) -> None:
        assert self.catalog.search(query, limit=limit) == spec_search(self.active, query, limit)

    @rule(limit=st.integers(0, 6))
    def list(self, limit: int) -> None:
        assert self.catalog.list(limit=limit) == self.active[::-1][:limit]

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data())
    def show_existing(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from(self.active))
        first = next(e for e in self.active if e.memory_id == entry.memory_id)
        assert self.catalog.show(f" {entry.memory_id} ") == first

    @rule()
    def show_missing(self) -> None:
        with pytest.raises(FileNotFoundError):
            self.catalog.show("f" * 32)

    # ------------------------------------------------------------ the invariant

    @invariant()
    def store_equals_model(self) -> None:
        assert self.catalog.list(limit=10_000) == self.active[::-1]
        fresh = MemoryCatalog(self.root, use_index=False, readonly=True)
        assert fresh.list(limit=10_000) == self.active[::-1]
        assert self.catalog.list_quarantined(limit=10_000) == [e for e, _ in reversed(self.quarantined)]
        if self.catalog.quarantine_path.exists():
            lines = [
                json.loads(x) for x in self.catalog.quarantine_path.read_bytes().splitlines() if x.strip()
            ]
        else:
            lines = []
        assert len(lines) == len(self.quarantined)
        for payload, (entry, provenance) in zip(lines, self.quarantined, strict=True):
            assert payload["quarantine"] is True
            assert payload["memory_id"] == entry.memory_id
            assert {k: payload["provenance"][k] for k in provenance} == provenance
            if "reason" in provenance:
                assert payload["provenance"]["quarantined_at"]
        quarantined_ids = {e.memory_id for e, _ in self.quarantined}
        assert not quarantined_ids & {e.memory_id for e in self.active}  # invariant 8: never promoted


MACHINE_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class ScanCatalogMachine(CatalogMachine):
    use_index = False


TestCatalogWithIndex = CatalogMachine.TestCase
TestCatalogWithIndex.settings = MACHINE_SETTINGS
TestCatalogScanOnly = ScanCatalogMachine.TestCase
TestCatalogScanOnly.settings = MACHINE_SETTINGS
