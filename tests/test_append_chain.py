"""memstore.append_chain and memstore.block_digest: a catch-up after memstore's own appends reads only the new bytes.

The chain lets the index skip re-reading the indexed prefix; every test here either
checks that it does skip (a counter on the whole-prefix proof) or that anything but
memstore's appends still gets the full proof and an exact answer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.append_chain import CHAIN_OFFSET, AppendChain, read_chain
from memstore.block_digest import BLOCK_BYTES, PrefixDigest
from memstore.catalog import MemoryCatalog
from memstore.group_commit import sync_lock_path
from memstore.index.source import SourceState
from memstore.sync_record import RECORD_BYTES

TICK = 0.03
"""Longer than a file timestamp tick (jiffy-grained on Linux), so ctimes differ."""


def block_digest(data: bytes) -> bytes:
    return b"mbd1" + b"".join(
        hashlib.sha256(data[i : i + BLOCK_BYTES]).digest()[:16] for i in range(0, len(data), BLOCK_BYTES)
    )


# ---------------------------------------------------------------- block digest


@settings(max_examples=40, deadline=None)
@given(
    st.binary(min_size=0, max_size=3 * 4096),
    st.lists(st.integers(min_value=0, max_value=3 * 4096), max_size=6),
)
def test_a_block_digest_fed_in_any_pieces_is_the_plain_one(data: bytes, cuts: list[int]) -> None:
    digest = PrefixDigest()
    points = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, stop in itertools.pairwise(points):
        digest.update(data[start:stop])
    assert digest.end == len(data)
    assert digest.pack() == block_digest(data)


@pytest.mark.parametrize("size", [0, 1, BLOCK_BYTES - 1, BLOCK_BYTES, BLOCK_BYTES + 1, 2 * BLOCK_BYTES + 77])
def test_a_resumed_digest_equals_a_fresh_one_and_extends_alike(tmp_path: Path, size: int) -> None:
    path = tmp_path / "data"
    data = os.urandom(size + 5000)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        packed = PrefixDigest.of(fd, size).pack()
        resumed = PrefixDigest.resume(packed, fd, size)
        assert resumed is not None and resumed.end == size and resumed.pack() == packed
        resumed.extend(fd, len(data))
        assert resumed.pack() == block_digest(data)
        assert PrefixDigest.resume(packed, fd, size + 1) is None or size % BLOCK_BYTES == BLOCK_BYTES - 1
        assert PrefixDigest.resume(packed[:-1], fd, size) is None
        assert PrefixDigest.resume(b"sha2" + packed[4:], fd, size) is None
    finally:
        os.close(fd)


def test_a_resumed_digest_rereads_the_partial_block_and_sees_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "data"
    size = BLOCK_BYTES + 1000
    path.write_bytes(bytes(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        packed = PrefixDigest.of(fd, size).pack()
        with open(path, "r+b") as handle:
            handle.seek(BLOCK_BYTES + 10)
            handle.write(b"x")
        assert PrefixDigest.resume(packed, fd, size) is None
    finally:
        os.close(fd)


# ---------------------------------------------------------------- the record


def test_the_chain_packs_and_rejects_damage() -> None:
    chain = AppendChain(dev=5, ino=9, nonce=12345, start_size=10, start_ctime_ns=1, end_size=20, end_ctime_ns=2)
    data = chain.pack()
    assert AppendChain.unpack(data) == chain
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x40
        assert AppendChain.unpack(bytes(damaged)) is None
    assert AppendChain.unpack(data[:-1]) is None
    assert AppendChain.unpack(b"") is None
    assert CHAIN_OFFSET >= RECORD_BYTES, "the chain must not overlap the sync record"


def _entry(n: int, content: str = "") -> dict[str, object]:
    text = content or f"note number {n}"
    return {"memory_id": f"m{n:06d}", "content": text, "tags": ["t"], "created_at": "2026-01-01"}


@pytest.fixture
def catalog(tmp_path: Path) -> MemoryCatalog:
    catalog = MemoryCatalog(tmp_path)
    for n in range(50):
        catalog.add(f"note number {n} about pumpkins", tags=["seed"])
    return catalog


def test_memstores_appends_extend_one_chain_ending_at_the_file(catalog: MemoryCatalog) -> None:
    chain = read_chain(sync_lock_path(catalog.path))
    assert chain is not None and chain.ends_at(os.stat(catalog.path))
    catalog.add("one more")
    later = read_chain(sync_lock_path(catalog.path))
    assert later is not None and later.nonce == chain.nonce and later.ends_at(os.stat(catalog.path))
    assert (later.start_size, later.start_ctime_ns) == (chain.start_size, chain.start_ctime_ns)


def test_another_tools_append_starts_a_new_chain(catalog: MemoryCatalog) -> None:
    chain = read_chain(sync_lock_path(catalog.path))
    time.sleep(TICK)
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(900)) + "\n").encode())
    foreign = os.stat(catalog.path)
    catalog.add("after the other tool")
    later = read_chain(sync_lock_path(catalog.path))
    assert chain is not None and later is not None and later.nonce != chain.nonce
    assert later.starts_at(foreign.st_dev, foreign.st_ino, foreign.st_size, foreign.st_ctime_ns)


def test_an_add_that_sets_a_torn_tail_aside_starts_a_new_chain_after_its_own_line(catalog: MemoryCatalog) -> None:
    """The cut is no append: the chain may not span it, though the add's first stat saw the torn file."""
    chain = read_chain(sync_lock_path(catalog.path))
    time.sleep(TICK)
    with open(catalog.path, "ab") as handle:
        handle.write(b'{"memory_id": "torn", "cont')  # a writer killed mid-append
    catalog.add("after the torn tail")
    later = read_chain(sync_lock_path(catalog.path))
    now = os.stat(catalog.path)
    assert chain is not None and later is not None and later.nonce != chain.nonce
    assert later.starts_at(now.st_dev, now.st_ino, now.st_size, now.st_ctime_ns) and later.ends_at(now)


# ---------------------------------------------------------------- the index follows


class ProofCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.whole = 0
        real = SourceState.verified_prefix

        def counted(state: SourceState, fd: int) -> PrefixDigest | None:
            self.whole += 1
            return real(state, fd)

        monkeypatch.setattr(SourceState, "verified_prefix", counted)


def _ids(catalog: MemoryCatalog, query: str) -> list[str]:
    return [entry.memory_id for entry in catalog.search(query, limit=1000)]


def _scan_ids(catalog: MemoryCatalog, query: str) -> list[str]:
    plain = MemoryCatalog(catalog.path.parent.parent, use_index=False, readonly=True)
    return [entry.memory_id for entry in plain.search(query, limit=1000)]


def test_a_catch_up_after_memstores_appends_reads_no_prefix(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _ids(catalog, "pumpkins")  # built
    counter = ProofCounter(monkeypatch)
    for n in range(3):
        catalog.add(f"fresh squash {n}")
        assert _ids(catalog, "squash") == _scan_ids(catalog, "squash")
    assert counter.whole == 0
    assert catalog.check_index().equal


def test_a_second_handles_appends_are_followed_without_a_prefix_read(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _ids(catalog, "pumpkins")
    other = MemoryCatalog(catalog.path.parent.parent)
    counter = ProofCounter(monkeypatch)
    other.add("from the other handle: gourds")
    catalog.add("from this handle: gourds too")
    assert _ids(catalog, "gourds") == _scan_ids(catalog, "gourds")
    assert len(_ids(catalog, "gourds")) == 2
    assert counter.whole == 0


def test_another_tools_append_gets_the_whole_proof(catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ids(catalog, "pumpkins")
    counter = ProofCounter(monkeypatch)
    time.sleep(TICK)
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(901, "marrow from elsewhere")) + "\n").encode())
    assert _ids(catalog, "marrow") == _scan_ids(catalog, "marrow") == ["m000901"]
    assert counter.whole == 1


@pytest.mark.parametrize("when", ["before_the_add", "after_the_add"])
def test_an_in_place_edit_around_memstores_appends_is_never_missed(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A same-size edit of an indexed line by another tool, before or after a memstore append: found."""
    assert _ids(catalog, "pumpkins")
    data = catalog.path.read_bytes()
    at = data.index(b"pumpkins", len(data) // 2)

    def edit() -> None:
        time.sleep(TICK)
        with open(catalog.path, "r+b") as handle:
            handle.seek(at)
            handle.write(b"zucchini")

    if when == "before_the_add":
        edit()
    catalog.add("an appended note")
    if when == "after_the_add":
        edit()
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini") != []
    assert _ids(catalog, "pumpkins") == _scan_ids(catalog, "pumpkins")


def test_a_forged_chain_does_not_hide_an_edit_in_the_sampled_blocks(tmp_path: Path) -> None:
    """A chain written by someone else, claiming an append over an edited head, is caught by the samples.

    The file spans whole digest blocks, so the head is not in the partial block a resume re-reads.
    """
    catalog = MemoryCatalog(tmp_path)
    lines = [json.dumps(_entry(n, f"pumpkins {n} " + "padding " * 60)) for n in range(5000)]
    catalog.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert catalog.path.stat().st_size > 2 * BLOCK_BYTES
    assert _ids(catalog, "pumpkins")
    catalog.add("made by memstore: the sync lock and its chain exist")
    assert _ids(catalog, "memstore")
    recorded = os.stat(catalog.path)
    time.sleep(TICK)
    data = catalog.path.read_bytes()
    at = data.index(b"pumpkins")  # in the head sample
    with open(catalog.path, "r+b") as handle:
        handle.seek(at)
        handle.write(b"zucchini")
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(902)) + "\n").encode())
    now = os.stat(catalog.path)
    forged = AppendChain(
        now.st_dev, now.st_ino, 77, recorded.st_size, recorded.st_ctime_ns, now.st_size, now.st_ctime_ns
    )
    fd = os.open(sync_lock_path(catalog.path), os.O_RDWR)
    try:
        os.pwrite(fd, forged.pack(), CHAIN_OFFSET)
    finally:
        os.close(fd)
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini") != []


def test_a_damaged_or_linked_chain_record_only_costs_the_whole_proof(
    catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _ids(catalog, "pumpkins")
    lock = sync_lock_path(catalog.path)
    fd = os.open(lock, os.O_RDWR)
    try:
        os.pwrite(fd, b"\xff" * 40, CHAIN_OFFSET)
    finally:
        os.close(fd)
    counter = ProofCounter(monkeypatch)
    time.sleep(TICK)
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(903, "kale")) + "\n").encode())
    assert _ids(catalog, "kale") == ["m000903"]
    assert counter.whole == 1
    lock.unlink()
    lock.symlink_to(tmp_path / "elsewhere")
    assert read_chain(lock) is None
    assert not (tmp_path / "elsewhere").exists()


def test_the_team_index_follows_memstores_appends_on_the_chain_too(
    tmp_path: Path, pg_writer_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team source fed from a checkout memstore appends to: catch-ups resume the digest, answers stay exact."""
    from memstore.team_index import TeamIndex

    root = tmp_path / "repo"
    catalog = MemoryCatalog(root)
    for n in range(30):
        catalog.add(f"seed note {n} about pumpkins")
    name = f"chain-{tmp_path.name}"
    with TeamIndex(pg_writer_url) as team:
        assert team.reindex({name: root}).sources[0].action == "built"
        counter = ProofCounter(monkeypatch)
        for n in range(3):
            catalog.add(f"gourd {n}")
            assert team.reindex({name: root}).sources[0].action == "appended"
            got = [hit.entry.memory_id for hit in team.search("gourd", limit=100, sources=[name]).hits]
            assert got == _scan_ids(catalog, "gourd")
        assert counter.whole == 0
        time.sleep(TICK)
        with open(catalog.path, "ab") as handle:
            handle.write((json.dumps(_entry(904, "gourd from elsewhere")) + "\n").encode())
        assert team.reindex({name: root}).sources[0].action == "appended"
        assert counter.whole == 1
        got = [hit.entry.memory_id for hit in team.search("gourd", limit=100, sources=[name]).hits]
        assert got == _scan_ids(catalog, "gourd")


class ChainReads:
    """How many times the append chain is read from its lock file (each read opens the file)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = AppendChain.read.__func__  # type: ignore[attr-defined]

        def counted(cls: type[AppendChain], fd: int) -> AppendChain | None:
            self.count += 1
            chain: AppendChain | None = real(cls, fd)
            return chain

        monkeypatch.setattr(AppendChain, "read", classmethod(counted))


def test_a_catch_up_reads_the_append_chain_once(catalog: MemoryCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chain that classified the change is the one the new state is anchored on: no second open."""
    assert _ids(catalog, "pumpkins")
    counter = ProofCounter(monkeypatch)
    reads = ChainReads(monkeypatch)
    for n in range(3):
        catalog.add(f"fresh squash {n}")
        reads.count = 0
        assert catalog.reindex().action == "appended"
        assert reads.count == 1
    assert counter.whole == 0  # every catch-up was still anchored on the chain
    assert _ids(catalog, "squash") == _scan_ids(catalog, "squash")


def test_a_team_catch_up_reads_the_append_chain_once(
    tmp_path: Path, pg_writer_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore.team_index import TeamIndex

    root = tmp_path / "repo"
    catalog = MemoryCatalog(root)
    for n in range(30):
        catalog.add(f"seed note {n} about pumpkins")
    name = f"chain-once-{tmp_path.name}"
    with TeamIndex(pg_writer_url) as team:
        assert team.reindex({name: root}).sources[0].action == "built"
        counter = ProofCounter(monkeypatch)
        reads = ChainReads(monkeypatch)
        for n in range(3):
            catalog.add(f"gourd {n}")
            reads.count = 0
            assert team.reindex({name: root}).sources[0].action == "appended"
            assert reads.count == 1
        assert counter.whole == 0
        got = [hit.entry.memory_id for hit in team.search("gourd", limit=100, sources=[name]).hits]
        assert got == _scan_ids(catalog, "gourd")
