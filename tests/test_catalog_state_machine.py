"""A hypothesis state machine drives MemoryCatalog against an in-memory model.

The model is the list of active entries in file order plus the list of
quarantined entries (with the provenance each must carry).  After every step the
store must equal the model, read through a fresh look at the files.

Besides the long-lived handle, a second handle adds and rebuilds the shared index,
``memstore reindex --full`` runs in between, and another tool edits a line in place
(same length) and appends in the same save; the sampling threshold of the change
detection is lowered so every file is past it.
"""

from __future__ import annotations

import codecs
import dataclasses
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
from memstore.cli import main as cli_main
from memstore.index import source
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
        self.other = MemoryCatalog(self.root)
        self.sampling = (source.WHOLE_BODY_BYTES, source.FINGERPRINT_BYTES)
        # Every file is past the sampling threshold: an edit inside the old prefix is
        # missed by the samples and must be caught by the whole-prefix digest.
        source.WHOLE_BODY_BYTES, source.FINGERPRINT_BYTES = 64, 8
        self.active: list[MemoryEntry] = []
        self.quarantined: list[tuple[MemoryEntry, dict[str, Any]]] = []
        self.external = 0

    def teardown(self) -> None:
        source.WHOLE_BODY_BYTES, source.FINGERPRINT_BYTES = self.sampling
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

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), content=contents, tags=tag_lists)
    def external_edit_and_append(self, data: st.DataObject, content: str, tags: list[str]) -> None:
        """Another tool rewrites one line in place (rot13: same length) and appends a line, in one save."""
        position = data.draw(st.integers(0, len(self.active) - 1))
        entry = self.active[position]
        edited = dataclasses.replace(entry, content=codecs.encode(entry.content, "rot13"))
        raw = self.catalog.path.read_bytes()
        old = b'"content": ' + json.dumps(entry.content).encode()
        new = b'"content": ' + json.dumps(edited.content).encode()
        id_at = raw.index(b'"memory_id": ' + json.dumps(entry.memory_id).encode())
        at = raw.index(old, raw.rfind(b"\n", 0, id_at) + 1)
        self.external += 1
        appended = MemoryEntry(f"ext{self.external:029d}", content, tuple(tags), "2020-01-01T00:00:00+00:00")
        line = json.dumps(appended.to_dict(), sort_keys=True).encode() + b"\n"
        with open(self.catalog.path, "r+b") as handle:
            handle.seek(at)
            handle.write(new)
            handle.seek(0, 2)
            handle.write(line if raw.endswith(b"\n") else b"\n" + line)
        self.active[position] = edited
        self.active.append(appended)

    @rule(content=contents, tags=tag_lists)
    def other_handle_adds(self, content: str, tags: list[str]) -> None:
        self.active.append(self.other.add(content, tags=tags))

    @rule()
    def other_handle_rebuilds(self) -> None:
        self.other.reindex(full=True)

    @rule()
    def cli_reindex_full(self) -> None:
        assert cli_main(["reindex", "--full", "--root", str(self.root)]) == 0

    @rule(use_index=st.booleans())
    def reopen(self, use_index: bool) -> None:
        self.catalog = MemoryCatalog(self.root, use_index=use_index)

    # ------------------------------------------------------------ reads

    @rule(query=queries, limit=st.integers(0, 6))
    def search(self, query: str, limit: int) -> None:
        assert self.catalog.search(query, limit=limit) == spec_search(self.active, query, limit)

    @rule(query=queries, limit=st.integers(1, 3))
    def other_handle_searches(self, query: str, limit: int) -> None:
        assert self.other.search(query, limit=limit) == spec_search(self.active, query, limit)

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
        if self.catalog.path.exists():
            report = self.other.check_index()
            assert report.equal, report.summary


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
