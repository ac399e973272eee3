"""quarantine_by_branch records each moved entry once, across calls that were refused or cut short.

The quarantine file is appended (durably) before memory.jsonl is replaced; a replace that
another tool's writes kept refusing, or a process killed in between, leaves the entries in
both files.  Whatever the next calls do, each entry ends up recorded once, never in neither
file, and records written by older memstore versions or other tools count as records.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import catalog_rewrite
from memstore.catalog import MemoryCatalog
from memstore.catalog_rewrite import FileReplacedError
from memstore.doctor import diagnose, repair
from memstore.jsonl import decode_entry, encode_entries, encode_entry
from memstore.models import MemoryEntry
from tests.killed_child import kill_when_ready


def _store(root: Path, lines: list[bytes]) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_bytes(b"".join(lines))
    return catalog


def _entry(catalog: MemoryCatalog, n: int, branch: str) -> MemoryEntry:
    return catalog._new_entry(f"note {n} word{n % 3}", ("t",), branch, None)


def _keys(path: Path) -> Counter[bytes]:
    """Each entry a file holds (quarantine fields left out), with its number of lines."""
    if not path.exists():
        return Counter()
    found: Counter[bytes] = Counter()
    for line in path.read_bytes().splitlines():
        entry = decode_entry(line)
        if entry is not None:
            found[encode_entry(entry)] += 1
    return found


def _refuse_every_try(monkeypatch: pytest.MonkeyPatch, catalog: MemoryCatalog) -> None:
    """Another tool appends one line of another branch to memory.jsonl right before every rename."""
    real_check = catalog_rewrite._not_changed

    def not_changed(path: Path, fd: int, st: Any) -> None:
        with open(catalog.path, "ab") as handle:
            handle.write(encode_entry(catalog._new_entry("foreign word1", (), "kept", None)))
        real_check(path, fd, st)

    monkeypatch.setattr(catalog_rewrite, "_not_changed", not_changed)


@settings(max_examples=25, deadline=None)
@given(
    copies=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4),
    kept=st.integers(min_value=0, max_value=3),
    calls=st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_any_sequence_of_refused_and_done_calls_records_each_entry_once(
    copies: list[int], kept: int, calls: list[bool]
) -> None:
    """``calls``: True lets the call through, False has another tool refuse all its tries.
    Byte-identical copies of an entry are each moved, and each recorded once."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        root = Path(tmp)
        catalog = MemoryCatalog(root)
        gone = [_entry(catalog, n, "gone") for n in range(len(copies))]
        lines = [encode_entry(entry) for entry, count in zip(gone, copies, strict=True) for _ in range(count)]
        lines += [encode_entry(_entry(catalog, 100 + n, "kept")) for n in range(kept)]
        catalog = _store(root, lines)
        wanted = Counter(encode_entry(entry) for entry, count in zip(gone, copies, strict=True) for _ in range(count))
        done = False
        for let_through in calls:
            if let_through:
                moved = catalog.quarantine_by_branch("gone", "review")
                assert moved == (0 if done else sum(copies))
                done = True
            else:
                _refuse_every_try(monkeypatch, catalog)
                if done:  # nothing of the branch is left: nothing to refuse
                    assert catalog.quarantine_by_branch("gone", "review") == 0
                else:
                    with pytest.raises(FileReplacedError):
                        catalog.quarantine_by_branch("gone", "review")
                monkeypatch.undo()
            in_memory = _keys(catalog.path)
            quarantined = _keys(catalog.quarantine_path)
            assert quarantined == wanted  # each move recorded once, from the first call that got that far
            assert all(in_memory[key] in (0, count) for key, count in wanted.items())
            assert all(in_memory[key] == 0 for key in wanted) == done
        assert len(catalog.list_quarantined(limit=100)) == sum(copies)


def test_a_record_an_older_version_or_another_tool_wrote_counts(tmp_path: Path) -> None:
    """The same entry with other spacing, key order and extra keys is recorded already; an entry
    with the same id but other content is not (moving it records it: nothing is lost)."""
    catalog = MemoryCatalog(tmp_path)
    same, edited = _entry(catalog, 1, "gone"), _entry(catalog, 2, "gone")
    catalog = _store(tmp_path, [encode_entry(same), encode_entry(edited)])
    other_tool = {**edited.to_dict(), "content": "the text before an edit"}
    older = dict(reversed(list({**same.to_dict(), "provenance": {"reason": "old"}, "quarantine": True}.items())))
    older["written_by"] = "another tool"
    record = json.dumps(older, indent=None, separators=(",", ":")).encode()
    catalog.quarantine_path.write_bytes(record + b"\n" + json.dumps(other_tool).encode() + b"\n")

    assert catalog.quarantine_by_branch("gone", "review") == 2
    lines = catalog.quarantine_path.read_bytes().splitlines()
    assert lines[0] == record  # the old record stays as it was, and stands for the entry
    assert len(lines) == 3 and decode_entry(lines[2]) == edited
    assert json.loads(lines[2])["provenance"]["reason"] == "review"
    assert _keys(catalog.path) == Counter()


def test_an_entry_a_merge_brought_back_is_removed_without_a_second_record(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = _entry(catalog, 1, "gone")
    catalog = _store(tmp_path, [encode_entry(entry), encode_entry(_entry(catalog, 2, "kept"))])
    assert catalog.quarantine_by_branch("gone", "first") == 1
    recorded = catalog.quarantine_path.read_bytes()
    with open(catalog.path, "ab") as handle:  # a union merge of the other side's memory.jsonl
        handle.write(encode_entry(entry))
    assert catalog.quarantine_by_branch("gone", "again") == 1
    assert catalog.quarantine_path.read_bytes() == recorded
    assert catalog.search("note", limit=10) == MemoryCatalog(tmp_path, use_index=False).search("note", limit=10)
    assert [found.branch_name for found in catalog.list(limit=10)] == ["kept"]


def test_records_of_other_branches_and_added_quarantined_entries_do_not_count(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = _entry(catalog, 1, "gone")
    catalog = _store(tmp_path, [encode_entry(entry)])
    moved_elsewhere = MemoryEntry(**{**entry.to_dict(), "branch_name": "other"})
    catalog.quarantine_path.write_bytes(encode_entries([moved_elsewhere], quarantine=True, provenance={}))
    catalog.add_quarantined(entry.content, tags=entry.tags, provenance={}, branch_name="gone")
    assert catalog.quarantine_by_branch("gone", "review") == 1
    assert _keys(catalog.quarantine_path)[encode_entry(entry)] == 1


_KILLED = """
import sys, time
from pathlib import Path
from memstore import catalog_rewrite
from memstore.catalog import MemoryCatalog

root = Path(sys.argv[1])
real_check = catalog_rewrite._not_changed

def not_changed(path, fd, st):
    real_check(path, fd, st)
    (root / "READY").write_text("1")  # the records are durable; the rename is next
    time.sleep(120)

catalog_rewrite._not_changed = not_changed
MemoryCatalog(root).quarantine_by_branch("gone", "killed")
"""


def test_a_quarantine_killed_before_its_replace_and_called_again(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    gone = [_entry(catalog, n, "gone") for n in range(5)]
    catalog = _store(tmp_path, [encode_entry(entry) for entry in gone] + [encode_entry(_entry(catalog, 9, "kept"))])
    kill_when_ready(_KILLED, str(tmp_path), ready=tmp_path / "READY")
    wanted = Counter(encode_entry(entry) for entry in gone)
    assert _keys(catalog.quarantine_path) == wanted  # in both files
    assert MemoryCatalog(tmp_path).quarantine_by_branch("gone", "again") == 5
    assert _keys(catalog.quarantine_path) == wanted
    assert {json.loads(line)["provenance"]["reason"] for line in catalog.quarantine_path.read_bytes().splitlines()} == {
        "killed"
    }
    assert [entry.branch_name for entry in MemoryCatalog(tmp_path).list(limit=10)] == ["kept"]


def test_readers_of_a_quarantine_file_with_an_entry_recorded_twice(tmp_path: Path) -> None:
    """What the old behaviour left (two records of one move): every reader still works, and
    showing the entry gives its first record; a new quarantine adds no third."""
    catalog = MemoryCatalog(tmp_path)
    entry = _entry(catalog, 1, "gone")
    catalog = _store(tmp_path, [encode_entry(entry)])
    first = encode_entries([entry], quarantine=True, provenance={"reason": "r", "quarantined_at": "1"})
    second = encode_entries([entry], quarantine=True, provenance={"reason": "r", "quarantined_at": "2"})
    catalog.quarantine_path.write_bytes(first + second)
    assert catalog.list_quarantined(limit=10) == [entry, entry]
    shown = catalog.show_quarantined(entry.memory_id[:8])
    assert shown.entry == entry and shown.provenance["quarantined_at"] == "1"
    assert [record.provenance["quarantined_at"] for record in catalog.quarantined_records(limit=10)] == ["2", "1"]
    assert catalog.health().quarantined_entries == 2
    assert catalog.quarantine_by_branch("gone", "again") == 1
    assert catalog.quarantine_path.read_bytes() == first + second
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "duplicate-id"]
    assert len(findings) == 1 and findings[0].file.endswith("memory-quarantine.jsonl") and findings[0].fixable
    assert "recorded again" in findings[0].detail
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == first  # the first record stands for the move
    assert catalog.list_quarantined(limit=10) == [entry]
    assert diagnose(tmp_path).healthy


def test_doctor_keeps_two_records_of_one_entry_that_say_different_things(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = _entry(catalog, 1, "gone")
    catalog = _store(tmp_path, [])
    records = encode_entries([entry], quarantine=True, provenance={"reason": "a", "quarantined_at": "1"})
    records += encode_entries([entry], quarantine=True, provenance={"reason": "b", "quarantined_at": "2"})
    catalog.quarantine_path.write_bytes(records)
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "duplicate-id"]
    assert len(findings) == 1 and not findings[0].fixable and "(different)" in findings[0].detail
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == records


def _spellings(entry: MemoryEntry) -> list[bytes]:
    """Lines other writers may have used for a record of ``entry`` (and some that are not one)."""
    fields = entry.to_dict()
    escaped_id = "".join(f"\\u{ord(char):04x}" for char in entry.memory_id)
    canonical = encode_entries([entry], quarantine=True, provenance={"reason": "r"}).rstrip(b"\n")
    return [
        canonical,
        json.dumps({**fields, "provenance": {"memory_id": "someone else"}}, indent=1).replace("\n", " ").encode(),
        canonical.replace(b'"memory_id"', b'"memory\\u005fid"'),
        canonical.replace(f'"{entry.memory_id}"'.encode(), f'"{escaped_id}"'.encode()),
        canonical.replace(f'"{entry.memory_id}"'.encode(), f'" {entry.memory_id} "'.encode()),
        canonical.replace(b'"memory_id": ', b'"memory_id" :\t'),
        json.dumps({**fields, "content": "other text"}).encode(),
        json.dumps({**fields, "memory_id": "x" + entry.memory_id}).encode(),
        json.dumps({"provenance": {"memory_id": entry.memory_id}, "content": "no entry"}).encode(),
        canonical[:-5],
        b"",
    ]


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10)), max_size=30))
def test_the_records_found_are_the_lines_every_reader_reads_as_the_entries(picks: list[tuple[int, int]]) -> None:
    """The prefilter only saves parsing: what it finds equals parsing every line as readers do."""
    from memstore.quarantine_records import entry_key, recorded_among

    with tempfile.TemporaryDirectory() as tmp:
        catalog = MemoryCatalog(Path(tmp))
        entries = [_entry(catalog, n, "gone") for n in range(3)]
        lines = [_spellings(entries[which])[spelling] for which, spelling in picks]
        catalog.quarantine_path.parent.mkdir(parents=True, exist_ok=True)
        catalog.quarantine_path.write_bytes(b"".join(line + b"\n" for line in lines))
        read = Counter(encode_entry(entry) for entry in catalog.list_quarantined(limit=1000))
        asked = entries[:2]
        assert recorded_among(catalog.quarantine_path, asked) == {
            entry_key(entry): read[entry_key(entry)] for entry in asked if read[entry_key(entry)]
        }
