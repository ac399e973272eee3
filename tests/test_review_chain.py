"""Review of the append chain (memstore.append_chain, memstore.block_digest, SourceState.classify).

Each test began as a defect found by an adversarial review: the index answered
differently from a plain scan of the files.  Each builds a catalog larger than two
digest blocks, so that an in-place edit in the middle of the first block lies outside
every re-read byte: the head, edge and body samples, and the partial last block a
resumed digest re-reads.  What the chain cannot see (an edit made inside memstore's
own write, or a chain forged by a local program that could as well forge the index)
is bounded: every FULL_PROOF_EVERY chained catch-ups the whole prefix is proven again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

import memstore.group_commit as group_commit
from memstore.append_chain import CHAIN_OFFSET, AppendChain, read_chain
from memstore.block_digest import BLOCK_BYTES
from memstore.catalog import MemoryCatalog
from memstore.group_commit import sync_lock_path
from memstore.index.source import FULL_PROOF_EVERY

TICK = 0.03
"""Longer than a file timestamp tick: none of these edits hides inside one."""

EDIT_NEAR = 80_000
"""In the first block, between the head sample (0-4 KiB) and the first body sample (~190 KB)."""


def _entry(n: int, content: str) -> dict[str, object]:
    return {"memory_id": f"m{n:06d}", "content": content, "tags": ["t"], "created_at": "2026-01-01"}


def _big_catalog(tmp_path: Path) -> MemoryCatalog:
    catalog = MemoryCatalog(tmp_path)
    lines = [json.dumps(_entry(n, f"pumpkins {n} " + "padding " * 60)) for n in range(5000)]
    catalog.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert catalog.path.stat().st_size > 2 * BLOCK_BYTES
    assert _ids(catalog, "pumpkins")  # built
    catalog.add("made by memstore: the sync lock and its chain exist")
    assert _ids(catalog, "memstore")  # caught up, state recorded on the chain
    return catalog


def _ids(catalog: MemoryCatalog, query: str) -> list[str]:
    return [entry.memory_id for entry in catalog.search(query, limit=10_000)]


def _scan_ids(catalog: MemoryCatalog, query: str) -> list[str]:
    plain = MemoryCatalog(catalog.path.parent.parent, use_index=False, readonly=True)
    return [entry.memory_id for entry in plain.search(query, limit=10_000)]


def _until_the_full_proof(catalog: MemoryCatalog) -> None:
    """memstore's appends, each caught up on the chain, until the periodic full proof comes due."""
    for n in range(FULL_PROOF_EVERY):
        catalog.add(f"filler {n}")
        assert _ids(catalog, f"filler {n}")


def _edit_in_place(catalog: MemoryCatalog) -> None:
    """Another tool saves the file in place with one word of an old line changed (same length)."""
    data = catalog.path.read_bytes()
    at = data.index(b"pumpkins", EDIT_NEAR)
    assert at < BLOCK_BYTES - 4096
    with open(catalog.path, "r+b") as handle:
        handle.seek(at)
        handle.write(b"zucchini")


def test_a_chain_forged_by_another_program_is_caught_by_the_periodic_full_proof(tmp_path: Path) -> None:
    """A forged chain record makes the index skip the prefix proof: found at the next full proof.

    Decision: a local program that can write ``.teaagent/`` can also write the index (its
    origin record is readable), so no record memstore keeps there can be authenticated
    against it; what a planted or copied lock file cannot know (inode, ctime, nonce) is
    what the chain is bound to.  The damage of a forgery is bounded by FULL_PROOF_EVERY,
    and ``memstore reindex --check`` finds it at once.  The review's account follows.

    ``memory.sync.lock`` is not a canonical file: anything under ``.teaagent/`` but the
    canonical files is untrusted input, and the CRC is no authentication.  Here another
    program edits an old line in place (well after any timestamp tick), appends a line,
    and rewrites the existing chain record with its end moved to the file's new stat
    (same nonce, so no knowledge of the index is needed).  ``appended_since`` believes
    the chain, ``resumed_prefix`` only re-reads the samples and the partial last block,
    and the index keeps the old text: ``search("zucchini")`` finds nothing while a scan
    finds the edited entry (and ``search("pumpkins")`` still returns it).  The module
    docstring calls the record "a hint", but it is used as a proof; a chain should at
    least be bound to something another program cannot produce from what it can read
    (e.g. a secret kept only in the index, or a digest of the bytes the chain covers).
    """
    catalog = _big_catalog(tmp_path)
    time.sleep(TICK)
    _edit_in_place(catalog)
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(902, "late squash")) + "\n").encode())
    now = os.stat(catalog.path)
    chain = read_chain(sync_lock_path(catalog.path))
    assert chain is not None
    extended = AppendChain(
        chain.dev, chain.ino, chain.nonce, chain.start_size, chain.start_ctime_ns, now.st_size, now.st_ctime_ns
    )
    fd = os.open(sync_lock_path(catalog.path), os.O_RDWR)
    try:
        os.pwrite(fd, extended.pack(), CHAIN_OFFSET)
    finally:
        os.close(fd)
    assert _scan_ids(catalog, "zucchini") == ["m000140"]
    _until_the_full_proof(catalog)
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini")
    assert _ids(catalog, "pumpkins") == _scan_ids(catalog, "pumpkins")
    assert catalog.check_index().equal


@pytest.mark.parametrize("when", ["just_before_the_write", "just_after_the_write"])
def test_an_edit_made_inside_memstores_write_is_found_by_the_periodic_full_proof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A same-size edit by another tool during memstore's write cannot be told from the write.

    The chain's "before" stat is taken right before the write and its "after" right
    after, so only the write itself is a window (ctime records only the last change).
    The review found the window was the whole append path (from the open); an edit
    there is now caught at once (the next test).  Inside the write, the periodic full
    proof finds it.
    """
    catalog = _big_catalog(tmp_path)
    real_write_all = group_commit.write_all

    def racing_write_all(fd: int, data: bytes) -> None:
        if when == "just_before_the_write":
            time.sleep(TICK)
            _edit_in_place(catalog)
            real_write_all(fd, data)
        else:
            real_write_all(fd, data)
            time.sleep(TICK)
            _edit_in_place(catalog)

    monkeypatch.setattr(group_commit, "write_all", racing_write_all)
    catalog.add("a note added while another tool saves the file")
    monkeypatch.setattr(group_commit, "write_all", real_write_all)
    assert _scan_ids(catalog, "zucchini") == ["m000140"]
    _until_the_full_proof(catalog)
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini")
    assert catalog.check_index().equal


def test_an_edit_between_memstores_open_and_its_write_is_found_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tool saves the file in place after memstore opened it for an append, before the write."""
    catalog = _big_catalog(tmp_path)
    real_check = group_commit.GroupCommit._check_record

    def edit_then_check(self: group_commit.GroupCommit, *args: object) -> object:
        time.sleep(TICK)
        _edit_in_place(catalog)
        return real_check(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(group_commit.GroupCommit, "_check_record", edit_then_check)
    catalog.add("a note added after another tool's save")
    monkeypatch.setattr(group_commit.GroupCommit, "_check_record", real_check)
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini") == ["m000140"]


def test_another_tools_append_during_memstores_write_breaks_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file longer than memstore's own append made it is not taken for memstore's append alone."""
    catalog = _big_catalog(tmp_path)
    real_write_all = group_commit.write_all

    def write_then_other(fd: int, data: bytes) -> None:
        real_write_all(fd, data)
        _edit_in_place(catalog)
        with open(catalog.path, "ab") as handle:
            handle.write((json.dumps(_entry(903, "marrow from elsewhere")) + "\n").encode())

    monkeypatch.setattr(group_commit, "write_all", write_then_other)
    catalog.add("a note added while another tool appends")
    monkeypatch.setattr(group_commit, "write_all", real_write_all)
    assert _ids(catalog, "zucchini") == _scan_ids(catalog, "zucchini") == ["m000140"]
    assert _ids(catalog, "marrow") == ["m000903"]


def test_a_text_body_hash_in_a_damaged_index_is_rebuilt_not_a_traceback(tmp_path: Path) -> None:
    """A source row whose ``body_hash`` reads back as TEXT makes every search after an add raise TypeError.

    The ``source`` table is not STRICT, so a damaged or edited index (a flipped serial
    type, another tool's UPDATE) can hand ``SourceState`` a ``str``.  Before this change
    the comparisons simply failed and the catch-up rebuilt (checked against the previous
    commit); now ``SourceState.anchor`` calls ``struct.unpack`` on the slice and the
    query dies with ``TypeError: a bytes-like object is required`` — not an
    IndexUnavailableError, not a rebuild (tests/test_reliability_index_damage.py: the
    index "may be hit by anything ... the next query must still equal a scan").
    """
    catalog = MemoryCatalog(tmp_path)
    for n in range(20):
        catalog.add(f"pumpkins {n}")
    assert _ids(catalog, "pumpkins")
    database = catalog.path.parent / "index" / "memstore.sqlite3"
    conn = sqlite3.connect(database)
    try:
        conn.execute("UPDATE source SET body_hash = ?", ("x" * 40,))
        conn.commit()
    finally:
        conn.close()
    again = MemoryCatalog(tmp_path)
    again.add("squash, appended by memstore: the chain ends at the file")
    assert _ids(again, "squash") == _scan_ids(again, "squash") != []


@pytest.mark.parametrize("damage", ["tail_end = 3", "tail_end = -1", "indexed_to = size + 5", "rows = -2"])
def test_a_state_whose_numbers_cannot_describe_the_file_is_rebuilt(tmp_path: Path, damage: str) -> None:
    """A damaged ``source`` row (a tail that is not after the indexed bytes, an offset past the
    file): the catch-up must rebuild, not drop the newest row for a tail that is not there."""
    catalog = MemoryCatalog(tmp_path)
    for n in range(5):
        catalog.add(f"pumpkins {n}")
    assert len(_ids(catalog, "pumpkins")) == 5
    conn = sqlite3.connect(catalog.path.parent / "index" / "memstore.sqlite3")
    try:
        conn.execute(f"UPDATE source SET {damage}")
        conn.commit()
    finally:
        conn.close()
    time.sleep(TICK)
    with open(catalog.path, "ab") as handle:
        handle.write((json.dumps(_entry(905, "pumpkins from elsewhere")) + "\n").encode())
    again = MemoryCatalog(tmp_path)
    assert _ids(again, "pumpkins") == _scan_ids(again, "pumpkins")
    assert len(_ids(again, "pumpkins")) == 6
