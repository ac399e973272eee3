"""The fast removal scan against the plain line-by-line one it replaced, on hostile files.

The reference parses every line that could match (as ``_rewrite_without`` did before
it scanned in blocks); the fast scan must drop exactly the same lines, return the
same entries and leave the same bytes, for block sizes that cut lines anywhere.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memstore.files
from memstore import catalog_rewrite
from memstore.block_digest import PrefixDigest
from memstore.catalog import MemoryCatalog
from memstore.files import Replacement, iter_raw_lines, remove_stale_temps, temp_in_use
from memstore.index.catalog_index import CatalogIndex, RewritePlan
from memstore.jsonl import decode_entry, is_blank
from memstore.kept_copy import KeptCopy
from memstore.models import MemoryEntry
from memstore.rewrite_scan import RemovalScan, scan_for_removal

TARGET = "feature/x"


def _reference(
    fd: int, size: int, key: str, value: str
) -> tuple[list[MemoryEntry], set[int], list[tuple[int, int]], bytes]:
    removed, starts, dropped, kept = [], set(), [], []
    for raw in iter_raw_lines(fd, stop=size):
        if raw.data is None:
            kept.append(os.pread(fd, raw.end - raw.start, raw.start).rstrip(b"\n"))
            continue
        if is_blank(raw.data):
            dropped.append((raw.start, raw.end - raw.start))
            continue
        entry = decode_entry(raw.data)
        if entry is not None and getattr(entry, key) == value:
            removed.append(entry)
            starts.add(raw.start)
            dropped.append((raw.start, raw.end - raw.start))
        else:
            kept.append(raw.data)
    return removed, starts, dropped, b"".join(line + b"\n" for line in kept)


def _per_line(fd: int, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (start, length) of each line in the ranges (a run of blank lines is dropped as one)."""
    lines = []
    for start, length in ranges:
        at = start
        for line in os.pread(fd, length, start).split(b"\n")[:-1]:
            lines.append((at, len(line) + 1))
            at += len(line) + 1
        if at < start + length:
            lines.append((at, start + length - at))  # an unterminated last line
    return lines


def _kept_bytes(fd: int, scan: RemovalScan) -> bytes:
    return b"".join(os.pread(fd, end - start, start) for start, end in scan.kept) + scan.tail


def _entry_line(branch: object, content: str = "note", **extra: object) -> bytes:
    payload = {"memory_id": "m" + content, "content": content, "created_at": "2026", "branch_name": branch, **extra}
    return json.dumps(payload, sort_keys=True).encode()


LINES = st.one_of(
    st.sampled_from(
        [
            _entry_line(TARGET),
            _entry_line("feature/y"),
            _entry_line(None),
            _entry_line(TARGET, content='caf\u00e9 "quoted"'),  # escapes elsewhere in the line
            _entry_line("feature/y", content=f"mentions {TARGET}"),  # the needle in the content
            b'{"branch_name": "feature\\/x", "content": "c", "created_at": "t", "memory_id": "esc"}',
            b'{"branch_name": "\\u0066eature/x", "content": "c", "created_at": "t", "memory_id": "u"}',
            b'{"branch\\u005fname": "feature/x", "content": "c", "created_at": "t", "memory_id": "key"}',
            b'{"branch_name": "feature/y", "content": "c", "created_at": "t", "memory_id": "dup", '
            b'"branch_name": "feature/x"}',
            _entry_line("feature/y", run_id=TARGET),
            _entry_line(""),
            _entry_line(None, run_id=""),
            b'{"branch_name": "\\ud800", "content": "c", "created_at": "t", "memory_id": "lone"}',
            b'{"content": "caf\\u00e9", "created_at": "t", "memory_id": "after", "branch_name": "feature\\/x", '
            b'"run_id": "feature\\/x"}',
            b'{"branch_name": null, "content": "say \\"hi\\\\\\"", "created_at": "t", "memory_id": "q", '
            b'"run_id": "\\u0066eature/x"}',
            b'{"branch_name": null, "content": "ends in a backslash \\\\", "created_at": "t", "memory_id": "bs", '
            b'"run_id": "\\u0066eature/x"}',
            b'{"branch_name": "\\ud800", "content": "caf\\u00e9", "created_at": "t", "memory_id": "lone2"}',
            b'{"run_id": "feature\\/x", "content": "c", "created_at": "t", "memory_id": "run"}',
            b'{"branch_name": "feature/x", "content": "", "created_at": "t", "memory_id": "invalid"}',
            b'{"branch_name": "feature/x", "content": "c", "created_at": "t", "memory_id": "torn',
            b'["feature/x"]',
            b'"feature/x"',
            b"",
            b"   ",
            b"\t\r",
            b"\xef\xbb\xbf",
            b"\xef\xbb\xbf" + _entry_line(TARGET),
            b"\xff\xfe not utf-8 feature/x",
            b"{}",
            # Escapes that stand for no character of a branch name (real text: escaped newlines
            # and quotes) before one that does, in the same line or the next.
            b'{"branch_name": "feature\\/x", "content": "a\\nb \\"c\\"", "created_at": "t", "memory_id": "real",'
            b' "tags": ["x\\ny"]}',
            b'{"tags": ["x\\ty"], "content": "c\\n", "created_at": "t", "memory_id": "tagfirst",'
            b' "branch_name": "feature\\/x"}',
            b'{"branch_name": null, "content": "a\\nb", "created_at": "t", "memory_id": "plain", "tags": ["x\\ny"]}',
            # The value QUOTED (quote, backslash, newline, tab) written with two-character escapes only.
            b'{"branch_name": "q\\"\\\\\\n\\tq", "content": "c", "created_at": "t", "memory_id": "short"}',
            b'{"branch_name": "q\\u0022\\\\\\n\\tq", "content": "c", "created_at": "t", "memory_id": "wide"}',
            b'{"run_id": "q\\"\\\\\\n\\tq", "content": "c\\n", "created_at": "t", "memory_id": "shortrun"}',
        ]
    ),
    st.binary(max_size=30),
)
QUOTED = 'q"\\\n\tq'


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINES, max_size=25),
    unterminated=st.booleans(),
    block=st.sampled_from([1, 7, 64, 300, 8 * 1024 * 1024]),
    key=st.sampled_from(["branch_name", "run_id"]),
    value=st.sampled_from([TARGET, "", "\ud800", "feature/y", QUOTED]),
)
def test_the_block_scan_drops_what_the_line_scan_drops(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], unterminated: bool, block: int, key: str, value: str
) -> None:
    data = b"\n".join(line.replace(b"\n", b" ") for line in lines)
    if data and not unterminated:
        data += b"\n"
    path = tmp_path_factory.mktemp("scan") / "memory.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = scan_for_removal(fd, len(data), key=key, value=value, block=block)
        removed, starts, dropped, kept = _reference(fd, len(data), key, value)
        assert scan.removed == removed
        assert scan.removed_starts == starts
        assert _per_line(fd, scan.dropped) == dropped
        assert _kept_bytes(fd, scan) == kept
        assert _copied_while_scanning(fd, len(data), path.with_name("copy.jsonl"), key, value, block) == kept
    finally:
        os.close(fd)


def _copied_while_scanning(fd: int, size: int, target: Path, key: str, value: str, block: int) -> bytes:
    """The new file a scan writes from its own reads (``copy``), checked against its own digest.

    The file is opened at the first block that drops a line; when none does, the digest
    the copy kept without writing must be that of the bytes it would have written.
    """
    with Replacement(target, digest=True) as replacement:
        copy = KeptCopy(fd, 0, lambda: replacement)
        scan = scan_for_removal(fd, size, key=key, value=value, block=block, copy=copy)
        seen = copy.seen(size, scan.dropped)
        assert seen is not None
        if copy.replacement is None:
            assert not scan.dropped
            assert PrefixDigest.of(fd, size).pack() == seen.kept
            return os.pread(fd, size, 0) + scan.tail
        replacement.write(scan.tail)
        assert replacement.hasher is not None
        digest = replacement.hasher.pack()
        replacement.commit()
    written = target.read_bytes()
    written_fd = os.open(target, os.O_RDONLY)
    try:
        assert PrefixDigest.of(written_fd, len(written)).pack() == digest
    finally:
        os.close(written_fd)
    return written


def test_lines_longer_than_a_reader_accepts_are_kept_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memstore.files, "MAX_LINE_BYTES", 100)
    huge = _entry_line(TARGET, content="y" * 500)
    data = b"\n".join([_entry_line(TARGET), huge, _entry_line("keep"), huge]) + b"\n"
    path = tmp_path / "memory.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for block in (16, 200, 4096):
            scan = scan_for_removal(fd, len(data), key="branch_name", value=TARGET, block=block)
            assert [entry.memory_id for entry in scan.removed] == ["mnote"]
            expected = b"\n".join([huge, _entry_line("keep"), huge]) + b"\n"
            assert _kept_bytes(fd, scan) == expected
            copied = _copied_while_scanning(fd, len(data), tmp_path / "copy.jsonl", "branch_name", TARGET, block)
            assert copied == expected
    finally:
        os.close(fd)


def _scanned(path: Path, data: bytes, key: str, value: str) -> RemovalScan:
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        return scan_for_removal(fd, len(data), key=key, value=value)
    finally:
        os.close(fd)


def test_lines_whose_escapes_stand_for_no_character_of_the_value_are_not_parsed(tmp_path: Path) -> None:
    """Real text escapes newlines and quotes in nearly every line, also outside the content
    (tags): none of those can spell a branch name, so only the line with its bytes is parsed."""
    lines = [
        json.dumps({"branch_name": f"b{n}", "content": f'line\n"{n}"', "tags": ["a\nb", 'say "x"']}).encode()
        for n in range(200)
    ]
    lines[77] = _entry_line(TARGET, content='real\ntext "quoted"')
    scan = _scanned(tmp_path / "memory.jsonl", b"\n".join(lines) + b"\n", "branch_name", TARGET)
    assert [entry.memory_id for entry in scan.removed] == ['mreal\ntext "quoted"']
    assert scan.candidates == 1


def test_a_value_spelled_only_with_two_character_escapes_is_found(tmp_path: Path) -> None:
    """A value holding a quote, a backslash, a newline and a tab is written with ``\\"``,
    ``\\\\``, ``\\n`` and ``\\t``: those escapes are then looked for too, not only ``\\u``."""
    line = json.dumps({"branch_name": QUOTED, "content": "c", "created_at": "t", "memory_id": "short"}).encode()
    assert QUOTED.encode() not in line and b"\\u" not in line
    data = b"\n".join([_entry_line("keep"), line, _entry_line("keep too")]) + b"\n"
    scan = _scanned(tmp_path / "memory.jsonl", data, "branch_name", QUOTED)
    assert [entry.memory_id for entry in scan.removed] == ["short"]


def test_a_rewrite_copies_the_kept_lines_byte_for_byte(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(30):
        catalog.add(f"entry {n} caf\u00e9", branch_name="gone" if n % 3 == 0 else "stay")
    with open(catalog.path, "ab") as handle:
        handle.write(b"not json at all\n\n   \n")
    before = catalog.path.read_bytes()
    assert catalog.delete_by_branch("gone") == 10
    expected = b"".join(
        line + b"\n" for line in before.split(b"\n") if line.strip() and b'"branch_name": "gone"' not in line
    )
    assert catalog.path.read_bytes() == expected
    assert catalog.check_index().equal


def test_an_add_does_not_wait_for_the_index_to_follow_a_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(20):
        catalog.add(f"entry {n}", branch_name="gone" if n % 2 else "stay")
    catalog.list(limit=1)  # the index exists, so the rewrite follows it
    following, release = threading.Event(), threading.Event()
    real_apply = CatalogIndex.apply_rewrite

    def slow_apply(self: CatalogIndex, plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
        following.set()
        release.wait(60)
        return real_apply(self, plan, after, **held)

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", slow_apply)
    rewrite = threading.Thread(target=catalog.delete_by_branch, args=("gone",))
    rewrite.start()
    try:
        assert following.wait(60)
        added = threading.Thread(target=MemoryCatalog(tmp_path).add, args=("added meanwhile",))
        added.start()
        added.join(30)
        assert not added.is_alive(), "the add waited for the index work of the rewrite"
    finally:
        release.set()
        rewrite.join(60)
    assert sorted(e.content for e in catalog.list(limit=100)) == sorted(
        ["added meanwhile", *(f"entry {n}" for n in range(0, 20, 2))]
    )
    assert catalog.check_index().equal


# ------------------------------------------------------------------ the part done before the writer lock


def _between_phases(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """Run ``meanwhile`` after a rewrite prepared its copy without the lock, before it takes the lock."""
    real_prepare = catalog_rewrite.prepare
    pending = [meanwhile]

    def prepare(path: Path, *, key: str, value: str) -> catalog_rewrite.Prepared | None:
        prepared = real_prepare(path, key=key, value=value)
        while pending:  # once: ``meanwhile`` may rewrite too
            pending.pop()()
        return prepared

    monkeypatch.setattr(catalog_rewrite, "prepare", prepare)


def _expected_after(data: bytes, branch: str) -> bytes:
    return b"".join(
        line + b"\n" for line in data.split(b"\n") if line.strip() and json.loads(line).get("branch_name") != branch
    )


@pytest.mark.parametrize("early_match", [True, False], ids=["match-before", "match-only-after"])
def test_lines_appended_while_the_rewrite_prepared_are_rewritten_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_match: bool
) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(12):
        catalog.add(f"entry {n}", branch_name="gone" if early_match and n % 3 == 0 else "stay")
    catalog.list(limit=1)
    other = MemoryCatalog(tmp_path)

    def append_meanwhile() -> None:
        other.add("appended meanwhile, going", branch_name="gone")
        other.add("appended meanwhile, staying", branch_name="stay")

    _between_phases(monkeypatch, append_meanwhile)
    expected_count = 5 if early_match else 1
    removed = catalog.delete_by_branch("gone")
    assert removed == expected_count
    data = catalog.path.read_bytes()
    assert b"gone" not in data and b"appended meanwhile, staying" in data
    assert len(data.splitlines()) == 12 + 2 - expected_count
    assert catalog.check_index().equal
    assert not list(catalog.directory.glob("*.tmp"))


def test_a_file_replaced_while_the_rewrite_prepared_is_rewritten_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(12):
        catalog.add(f"entry {n}", branch_name=("gone", "other", "stay")[n % 3])
    other = MemoryCatalog(tmp_path)
    _between_phases(monkeypatch, lambda: other.delete_by_branch("other"))  # a new inode
    before = catalog.path.read_bytes()
    assert catalog.delete_by_branch("gone") == 4
    assert catalog.path.read_bytes() == _expected_after(_expected_after(before, "other"), "gone")
    assert not list(catalog.directory.glob("*.tmp"))


def test_a_torn_tail_at_prepare_time_is_set_aside_and_not_copied(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(6):
        catalog.add(f"entry {n}", branch_name="gone" if n % 2 else "stay")
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"memory_id": "torn", "cont')
    assert catalog.delete_by_branch("gone") == 3
    assert catalog.path.read_bytes().count(b"\n") == 3 and catalog.path.read_bytes().endswith(b"\n")
    assert len(list(catalog.directory.glob("memory.jsonl.torn-*"))) == 1


def test_a_temp_file_a_live_rewrite_holds_survives_the_cleanup_of_stale_ones(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"{}\n")
    stale = tmp_path / ".memory.jsonl.99999.dead.tmp"
    stale.write_bytes(b"left by a crash")
    with Replacement(path) as live:
        live.write(b"half done")
        assert temp_in_use(live.temp) and not temp_in_use(stale)
        assert remove_stale_temps(path) == 1
        assert live.temp.exists() and not stale.exists()
        live.write(b"\n")
        live.commit()
    assert path.read_bytes() == b"half done\n"
    assert not list(tmp_path.glob("*.tmp"))
