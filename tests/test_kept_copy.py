"""The rewrite's one-pass copy and its proof: what it records pins every byte it read.

The copy made without the writer lock is used only when, under the lock, the file still
holds every byte the scan read: the lines kept (the new file's digest) and the lines
dropped (their own digest).  These tests change bytes of each kind in each window and
check that the change is neither lost nor copied over.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memstore.files
from memstore import catalog_rewrite, kept_copy
from memstore.block_digest import PrefixDigest
from memstore.catalog import MemoryCatalog
from memstore.digests import sha256
from memstore.errors import StorageError
from memstore.files import Replacement, writev_all
from memstore.kept_copy import CopySeen, KeptCopy, split


def _dropped_ranges(size: int, cuts: list[int]) -> list[tuple[int, int]]:
    """Sorted, disjoint (start, length) ranges inside ``[0, size)`` from sorted cut points."""
    points = sorted({min(cut, size) for cut in cuts})
    return [(a, b - a) for a, b in zip(points[::2], points[1::2], strict=False) if b > a]


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200),
    cuts=st.lists(st.integers(0, 200), max_size=12),
    chunk=st.integers(1, 50),
)
def test_split_parts_chunks_at_any_boundary_into_kept_and_dropped_bytes(
    data: bytes, cuts: list[int], chunk: int
) -> None:
    dropped = _dropped_ranges(len(data), cuts)
    inside = set()
    for start, length in dropped:
        inside.update(range(start, start + length))
    kept, gone, index = b"", b"", 0
    for at in range(0, len(data), chunk):
        kept_parts, gone_parts, index = split(memoryview(data)[at : at + chunk], at, dropped, index)
        kept += b"".join(kept_parts)
        gone += b"".join(gone_parts)
    assert kept == bytes(byte for i, byte in enumerate(data) if i not in inside)
    assert gone == bytes(byte for i, byte in enumerate(data) if i in inside)


def _seen_of(data: bytes, dropped: list[tuple[int, int]]) -> CopySeen:
    kept, gone, _index = split(memoryview(data), 0, dropped, 0)
    digest = PrefixDigest()
    for part in kept:
        digest.update(part)
    return CopySeen(len(data), tuple(dropped), digest.pack(), sha256(b"".join(gone)).digest())


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=8),
    where=st.integers(0, 299),
    flip=st.integers(1, 255),
)
def test_the_proof_fails_on_any_changed_byte_kept_or_dropped(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, cuts: list[int], where: int, flip: int
) -> None:
    seen = _seen_of(data, _dropped_ranges(len(data), cuts))
    path = tmp_path_factory.mktemp("proof") / "memory.jsonl"
    path.write_bytes(data + b"appended later")
    fd = os.open(path, os.O_RDWR)
    try:
        assert seen.holds(fd)
        at = where % len(data)
        os.pwrite(fd, bytes([data[at] ^ flip]), at)
        assert not seen.holds(fd)
        os.pwrite(fd, data[at : at + 1], at)
        assert seen.holds(fd)
        os.ftruncate(fd, len(data) - 1)
        assert not seen.holds(fd)
    finally:
        os.close(fd)


def test_the_proof_reads_across_its_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_copy, "BLOCK_BYTES", 7)
    data = bytes(range(256)) * 3
    seen = _seen_of(data, [(5, 20), (100, 1), (300, 200)])
    path = tmp_path / "memory.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        assert seen.holds(fd)
        os.pwrite(fd, b"\xff", 400)  # inside a dropped range that spans many chunks
        assert not seen.holds(fd)
    finally:
        os.close(fd)


def _between_phases(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[Path], None]) -> None:
    """Run ``meanwhile`` once a rewrite has scanned and copied without the lock, before it takes the lock."""
    real_prepare = catalog_rewrite.prepare
    pending = [meanwhile]

    def prepare(path: Path, *, key: str, value: str) -> catalog_rewrite.Prepared | None:
        prepared = real_prepare(path, key=key, value=value)
        while pending:
            pending.pop()(path)
        return prepared

    monkeypatch.setattr(catalog_rewrite, "prepare", prepare)


def _edit_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Another tool saves the file in place: same inode, same length."""
    assert len(old) == len(new)
    data = path.read_bytes()
    assert data.count(old) == 1
    with open(path, "r+b") as handle:
        handle.write(data.replace(old, new))


def _contents(root: Path) -> list[str]:
    return sorted(entry.content for entry in MemoryCatalog(root, use_index=False).list(limit=1000))


def test_an_edit_of_a_line_the_copy_dropped_is_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept bytes are unchanged, so only the digest of the dropped lines sees this edit."""
    catalog = MemoryCatalog(tmp_path)
    for n in range(6):
        catalog.add(f"entry {n}", branch_name="stay")
    catalog.add("moved to another branch meanwhile", branch_name="gone")
    catalog.add("removed", branch_name="gone")
    moved = b'"branch_name": "gone", "content": "moved'
    _between_phases(monkeypatch, lambda path: _edit_in_place(path, moved, moved.replace(b"gone", b"kept")))
    assert catalog.delete_by_branch("gone") == 1
    assert "moved to another branch meanwhile" in _contents(tmp_path)
    assert "removed" not in _contents(tmp_path)
    assert catalog.check_index().equal


def test_an_edit_of_a_blank_line_the_copy_dropped_is_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("first", branch_name="stay")
    with open(catalog.path, "ab") as handle:
        handle.write(b"  \n")
    catalog.add("removed", branch_name="gone")
    _between_phases(monkeypatch, lambda path: _edit_in_place(path, b"\n  \n", b"\n{}\n"))
    assert catalog.delete_by_branch("gone") == 1
    assert b"\n{}\n" in catalog.path.read_bytes(), "the other tool's line was dropped as blank"
    assert catalog.check_index().equal


def test_an_edit_of_a_kept_line_after_it_was_copied_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("apple pie", branch_name="stay")
    catalog.add("removed", branch_name="gone")
    _between_phases(monkeypatch, lambda path: _edit_in_place(path, b"apple pie", b"grape pie"))
    assert catalog.delete_by_branch("gone") == 1
    assert _contents(tmp_path) == ["grape pie"]
    assert catalog.check_index().equal


def test_a_long_line_split_after_the_scan_found_its_end_is_rewritten_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line too long to hold is copied in chunks after the scan found its end: a newline an
    edit put inside it meanwhile makes a line the scan never looked at (here, one that goes)."""
    monkeypatch.setattr(memstore.files, "MAX_LINE_BYTES", 1024 * 1024)  # and longer than a scan block
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("kept", branch_name="stay")
    going = json.dumps(
        {"memory_id": "a" * 32, "content": "hidden", "tags": [], "created_at": "2026-01-01T00:00:00+00:00",
         "branch_name": "gone", "run_id": None}, sort_keys=True,
    ).encode()  # fmt: skip
    length = 9 * 1024 * 1024
    long_line = b"x" * length + b"\n"
    with open(catalog.path, "ab") as handle:
        handle.write(long_line)
    catalog.add("removed", branch_name="gone")
    start = catalog.path.read_bytes().index(long_line)
    real_long_line = KeptCopy.long_line
    edits = [b"x" * (length - len(going) - 1) + b"\n" + going]

    def edit_then_copy(self: KeptCopy, begin: int, end: int) -> None:
        while edits:
            with open(catalog.path, "r+b") as handle:
                handle.seek(start)
                handle.write(edits.pop())
        real_long_line(self, begin, end)

    monkeypatch.setattr(KeptCopy, "long_line", edit_then_copy)
    assert catalog.delete_by_branch("gone") == 2
    data = catalog.path.read_bytes()
    assert b"hidden" not in data and b"removed" not in data
    assert data.count(b"\n") == 2 and b"x" * (length - len(going) - 1) + b"\n" in data


def test_an_edit_before_the_copy_reads_its_first_blocks_again_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is written until a block drops a line; the blocks before it are then read again and
    must be what the scan read (here a kept line became one to remove in between)."""
    catalog = MemoryCatalog(tmp_path)
    catalog.add("turned to go", branch_name="stax")
    for n in range(8):
        catalog.add(f"entry {n}", branch_name="stay")
    catalog.add("removed", branch_name="gone")
    real_scan = catalog_rewrite.scan_for_removal
    monkeypatch.setattr(catalog_rewrite, "scan_for_removal", functools.partial(real_scan, block=200))
    real_open_at = KeptCopy._open_at
    edits = [lambda: _edit_in_place(catalog.path, b'"stax", "content": "turned', b'"gone", "content": "turned')]

    def edit_then_open(self: KeptCopy, at: int) -> None:
        while edits:
            edits.pop()()
        real_open_at(self, at)

    monkeypatch.setattr(KeptCopy, "_open_at", edit_then_open)
    assert catalog.delete_by_branch("gone") == 2
    assert "turned to go" not in _contents(tmp_path) and len(_contents(tmp_path)) == 8
    assert catalog.check_index().equal


def test_a_scan_that_drops_nothing_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = MemoryCatalog(tmp_path)
    for n in range(5):
        catalog.add(f"entry {n}", branch_name="stay")
    opened: list[Replacement] = []
    real_init = Replacement.__init__

    def spy(self: Replacement, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(self)

    monkeypatch.setattr(Replacement, "__init__", spy)
    before = catalog.path.read_bytes()
    assert catalog.delete_by_branch("gone") == 0
    assert opened == [] and catalog.path.read_bytes() == before


def test_writev_all_finishes_short_writes_and_more_parts_than_one_call_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = [memoryview(bytes([n % 251]) * (n % 5)) for n in range(3000)]
    real_writev = os.writev
    calls = []

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        calls.append(len(buffers))
        assert len(buffers) <= memstore.files.WRITEV_PARTS
        return real_writev(fd, [bytes(buffers[0])[:3], *buffers[1:2]]) if len(buffers) > 1 else real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", short_writev)
    with Replacement(tmp_path / "out", digest=True) as replacement:
        replacement.write_parts(parts)
        replacement.commit()
    assert (tmp_path / "out").read_bytes() == b"".join(parts)
    assert len(calls) > 2


def test_writev_all_refuses_a_file_that_takes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "writev", lambda fd, buffers: 0)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError):
            writev_all(fd, [memoryview(b"abc")])
    finally:
        os.close(fd)


def test_a_failed_fsync_of_the_copy_fails_the_rewrite_and_leaves_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy's fsync runs while the lock is taken and the copy proven; its error still stops the replace."""
    catalog = MemoryCatalog(tmp_path)
    for n in range(6):
        catalog.add(f"entry {n}", branch_name="gone" if n % 2 else "stay")
    before = catalog.path.read_bytes()
    real_sync = Replacement.sync
    syncs: list[str] = []

    def failing_sync(self: Replacement) -> None:
        syncs.append(threading.current_thread().name)
        self._do(lambda: _raise(OSError(errno.EIO, "fsync failed")))

    monkeypatch.setattr(Replacement, "sync", failing_sync)
    with pytest.raises(StorageError) as caught:
        catalog.delete_by_branch("gone")
    assert caught.value.errno == errno.EIO
    assert syncs and syncs[0].startswith("memstore-rewrite-sync")
    assert catalog.path.read_bytes() == before
    assert not list(catalog.directory.glob("*.tmp"))
    monkeypatch.setattr(Replacement, "sync", real_sync)
    assert catalog.delete_by_branch("gone") == 3
    assert catalog.check_index().equal


def _raise(exc: BaseException) -> None:
    raise exc
