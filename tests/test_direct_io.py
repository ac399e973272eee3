"""The rewrite's new file written around the page cache: every byte lands, in order, at any length.

Whole aligned blocks go ``O_DIRECT``; the last partial block and everything after it go
through the page cache.  Where direct I/O is refused (at open or at a write) the bytes
are written the ordinary way.  A rewrite of a catalog uses it, and stays exact.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import direct_io
from memstore.catalog import MemoryCatalog
from memstore.direct_io import ALIGN, READ_BYTES, STAGE_BYTES, DirectWriter, read_direct
from memstore.files import Replacement
from memstore.index import source
from memstore.index.catalog_index import RewritePlan
from memstore.jsonl import encode_entries


def _supports_direct(folder: Path) -> bool:
    probe = folder / "direct-probe"
    if not direct_io.O_DIRECT:
        return False
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | direct_io.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


def _big_catalog(root: Path) -> MemoryCatalog:
    """A catalog of a few MB (several direct blocks), every seventh entry on branch ``gone``, indexed."""
    catalog = MemoryCatalog(root)
    catalog.add("first note", branch_name="kept")  # creates the store
    filler = "x" * 2000
    entries = [
        catalog._new_entry(f"note {number} {filler}", (), _branch(number), f"r{number % 5}")
        for number in range(1500)
    ]
    with open(catalog.path, "ab") as handle:
        handle.write(encode_entries(entries))
    catalog.search("note")  # an index to follow the rewrite
    return catalog


def _branch(number: int) -> str:
    return "gone" if number % 7 == 3 else f"kept-{number % 3}"


_SIZES = st.sampled_from([0, 1, 7, ALIGN - 1, ALIGN, ALIGN + 1, 70_000, STAGE_BYTES - 3, STAGE_BYTES, STAGE_BYTES + 9])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(_SIZES, min_size=1, max_size=3), min_size=1, max_size=6),
    after=st.integers(0, 3 * ALIGN),
    seed=st.integers(0, 255),
)
def test_direct_writes_then_ordinary_ones_hold_every_byte_in_order(
    tmp_path: Path, batches: list[list[int]], after: int, seed: int
) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    expected = bytearray()
    try:
        writer = DirectWriter(fd)
        assert writer.direct
        for number, sizes in enumerate(batches):
            parts = [bytes([(seed + number + i) % 251]) * size for i, size in enumerate(sizes)]
            writer.write([memoryview(part) for part in parts])
            expected += b"".join(parts)
        writer.finish()
        assert not writer.direct
        tail = bytes([seed]) * after
        os.write(fd, tail)  # the flag is cleared: unaligned writes work
        expected += tail
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(expected)


def test_a_file_system_without_direct_io_gets_ordinary_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refusing(fd: int, command: int, arg: int = 0) -> int:
        if command == direct_io.fcntl.F_SETFL and arg & direct_io.O_DIRECT:
            raise OSError(errno.EINVAL, "no direct I/O here")
        return real(fd, command, arg)

    real = direct_io.fcntl.fcntl
    monkeypatch.setattr(direct_io.fcntl, "fcntl", refusing)
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        writer = DirectWriter(fd)
        assert not writer.direct
        writer.write([memoryview(b"a" * (STAGE_BYTES + 5)), memoryview(b"b")])
        writer.finish()
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a" * (STAGE_BYTES + 5) + b"b"


def test_a_direct_write_refused_midway_goes_on_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    calls = []

    def refusing_second(fd: int, data: memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 2:
            raise OSError(errno.EINVAL, "alignment")
        return real(fd, data)

    real = os.write
    monkeypatch.setattr(direct_io.os, "write", refusing_second)
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    payload = bytes(range(256)) * (3 * STAGE_BYTES // 256) + b"end"
    try:
        writer = DirectWriter(fd)
        writer.write([memoryview(payload)])
        assert not writer.direct
        writer.finish()
        os.write(fd, b"!")
    finally:
        os.close(fd)
    assert path.read_bytes() == payload + b"!"
    assert calls[0] == calls[1] == STAGE_BYTES


def test_other_write_errors_are_raised_not_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")

    def full(fd: int, data: memoryview) -> int:
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr(direct_io.os, "write", full)
    with Replacement(tmp_path / "target", direct=True) as replacement, pytest.raises(OSError):
        replacement.write(b"x" * STAGE_BYTES)
    assert list(tmp_path.iterdir()) == []  # the temp file went with the error


def test_a_catalog_rewrite_writes_its_new_file_direct_and_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    staged: list[int] = []
    real = DirectWriter._write_staged

    def counting(self: DirectWriter, size: int) -> None:
        staged.append(size)
        real(self, size)

    monkeypatch.setattr(DirectWriter, "_write_staged", counting)
    catalog = _big_catalog(tmp_path)
    before = catalog.path.read_bytes()
    assert catalog.delete_by_branch("gone") == len(range(3, 1500, 7))
    assert staged and staged[0] == STAGE_BYTES  # whole blocks went direct
    kept = [line for line in before.splitlines(keepends=True) if json.loads(line)["branch_name"] != "gone"]
    assert catalog.path.read_bytes() == b"".join(kept)
    found = {entry.content for entry in catalog.search("note", limit=5000)}
    assert found == {json.loads(line)["content"] for line in kept}
    assert catalog.check_index().equal


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.sampled_from([0, 1, ALIGN - 1, ALIGN + 3, READ_BYTES, READ_BYTES + ALIGN + 7, 2 * READ_BYTES + 1]),
    start=st.integers(0, 2 * READ_BYTES + 9),
    length=st.integers(0, 2 * READ_BYTES + 9),
)
def test_read_direct_feeds_exactly_the_bytes_asked_for_up_to_the_end_of_the_file(
    tmp_path: Path, size: int, start: int, length: int
) -> None:
    path = tmp_path / "data"
    data = bytes(range(251)) * (size // 251) + bytes(range(size % 251))
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    fed = bytearray()
    try:
        reached = read_direct(fd, start, start + length, lambda view: fed.extend(view))
    finally:
        os.close(fd)
    assert bytes(fed) == data[start : start + length]
    assert reached == max(start, min(start + length, size))


def test_read_direct_falls_back_when_the_file_cannot_be_reopened_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_io, "_reopen_direct", lambda fd: None)
    path = tmp_path / "data"
    path.write_bytes(b"0123456789" * 1000)
    fd = os.open(path, os.O_RDONLY)
    fed = bytearray()
    try:
        assert read_direct(fd, 5, 20_000, lambda view: fed.extend(view)) == 10_000
    finally:
        os.close(fd)
    assert bytes(fed) == (b"0123456789" * 1000)[5:]


def test_the_index_follow_up_proves_a_directly_written_file_by_direct_reads_and_sees_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof after the replace reads around the page cache and still catches another tool's edit."""
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    reads: list[tuple[int, int]] = []
    real = direct_io.read_direct

    def recording(fd: int, start: int, end: int, feed: Callable[[memoryview], None]) -> int:
        reads.append((start, end))
        return real(fd, start, end, feed)

    monkeypatch.setattr(direct_io, "read_direct", recording)
    # The full proof, as every FULL_PROOF_EVERY follow-ups (otherwise an untouched file is not read back).
    monkeypatch.setattr(source, "FULL_PROOF_EVERY", 1)
    catalog = _big_catalog(tmp_path)
    assert catalog.delete_by_branch("gone") > 0
    assert reads == [(0, catalog.path.stat().st_size)]
    assert catalog.check_index().equal

    # The same again, with an in-place edit made between the replace and the follow-up.
    index = catalog._index.index()
    assert index is not None
    apply = index.apply_rewrite

    def edit_then_apply(plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
        with open(catalog.path, "r+b") as handle:
            first = handle.readline()
            handle.seek(0)
            handle.write(first.replace(b"first", b"zqxwv", 1))  # same length: an in-place save
        return apply(plan, after, **held)

    monkeypatch.setattr(index, "apply_rewrite", edit_then_apply)
    assert catalog.delete_by_branch("kept-2") > 0
    assert [entry.content for entry in catalog.search("zqxwv")] == ["zqxwv note"]
    assert catalog.check_index().equal


def test_read_direct_refused_midway_reads_the_rest_the_ordinary_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    path = tmp_path / "data"
    data = bytes(range(256)) * (3 * READ_BYTES // 256) + b"tail"
    path.write_bytes(data)
    calls = []
    real = os.preadv

    def refusing_second(fd: int, buffers: list[memoryview], offset: int) -> int:
        calls.append(offset)
        if len(calls) == 2:
            raise OSError(errno.EINVAL, "alignment")
        return real(fd, buffers, offset)

    monkeypatch.setattr(direct_io.os, "preadv", refusing_second)
    fd = os.open(path, os.O_RDONLY)
    fed = bytearray()
    try:
        assert read_direct(fd, 10, len(data), lambda view: fed.extend(view)) == len(data)
    finally:
        os.close(fd)
    assert bytes(fed) == data[10:]
    assert calls[:2] == [0, READ_BYTES]
