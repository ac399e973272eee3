"""memstore.index.source: what the index remembers about a file, and how it tells unchanged, grown, replaced."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore.index.schema_sql import CREATE_STATEMENTS
from memstore.index.source import (
    BODY_SAMPLES,
    DIGEST_BYTES,
    FINGERPRINT_BYTES,
    WHOLE_BODY_BYTES,
    Change,
    PrefixDigest,
    SourceState,
    body_fingerprint,
    edge_fingerprint,
    head_fingerprint,
)

NAME = "memory"


def block_digest(data: bytes) -> bytes:
    """The packed block digest of ``data``, computed plainly: SHA-256 of each 1 MiB block, 16 bytes each."""
    step = 1024 * 1024
    return b"mbd1" + b"".join(hashlib.sha256(data[i : i + step]).digest()[:16] for i in range(0, len(data), step))


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    """An in-memory database holding the index's ``source`` table, as the migrations create it."""
    connection = sqlite3.connect(":memory:")
    (ddl,) = [sql for sql in CREATE_STATEMENTS if sql.startswith("CREATE TABLE source ")]
    connection.execute(ddl)
    yield connection
    connection.close()


class Opened:
    """A file kept open for reading, as the index holds the source it checks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def reopen(self) -> None:
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDONLY)

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Opened]:
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"".join(b'{"line": %d}\n' % number for number in range(50)))
    opened = Opened(path)
    yield opened
    opened.close()


def recorded(opened: Opened, *, settled: bool = True) -> SourceState:
    """The state of the whole file as a catch-up records it.

    ``settled``: recorded long after the file last changed (outside the racy window);
    otherwise recorded right now, as a catch-up just after a write would.
    """
    st = opened.stat()
    state = SourceState.of_file(NAME, opened.fd, st, indexed_to=st.st_size, tail_end=None, rows=50, corrupt=0, blank=0)
    if settled:
        state = state._replace(recorded_ns=st.st_mtime_ns + 10**12)
    return state


def test_a_state_survives_save_and_load_and_forget_drops_it(conn: sqlite3.Connection, source: Opened) -> None:
    state = recorded(source)
    state.save(conn)
    assert SourceState.load(conn, NAME) == state
    assert SourceState.load(conn, "failures") is None
    SourceState.forget(conn, NAME)
    assert SourceState.load(conn, NAME) is None


def test_an_untouched_file_is_current(source: Opened) -> None:
    state = recorded(source)
    assert state.is_current(source.fd, source.stat())
    assert state.classify(source.fd, source.stat()) == (Change.NONE, None)


def test_an_append_is_grown_with_the_verified_prefix(source: Opened) -> None:
    state = recorded(source)
    with open(source.path, "ab") as handle:
        handle.write(b'{"line": 50}\n')
    change, prefix = state.classify(source.fd, source.stat())
    assert change is Change.GROWN and prefix is not None
    assert prefix.end == state.indexed_to
    assert prefix.pack() == block_digest(source.path.read_bytes()[: state.indexed_to])


def test_an_edit_anywhere_in_the_indexed_prefix_makes_a_grown_file_a_rebuild(source: Opened) -> None:
    state = recorded(source)
    data = bytearray(source.path.read_bytes())
    middle = len(data) // 2 + 3  # far from the head and edge fingerprints
    data[middle] = ord("9") if data[middle] != ord("9") else ord("8")
    with open(source.path, "r+b") as handle:
        handle.write(bytes(data) + b'{"line": 50}\n')
    assert state.classify(source.fd, source.stat()) == (Change.REPLACED, None)


def test_a_touched_file_whose_bytes_are_intact_is_caught_up_not_rebuilt(source: Opened) -> None:
    """New times but every indexed byte proven unchanged: only what follows them is read again."""
    state = recorded(source)
    os.utime(source.path, ns=(state.mtime_ns + 10**9, state.mtime_ns + 10**9))
    assert not state.is_current(source.fd, source.stat())
    change, prefix = state.classify(source.fd, source.stat())
    assert change is Change.GROWN and prefix is not None and prefix.end == state.indexed_to


def test_a_same_size_edit_with_new_times_is_replaced(source: Opened) -> None:
    state = recorded(source)
    data = bytearray(source.path.read_bytes())
    middle = len(data) // 2 + 3
    data[middle] = ord("9") if data[middle] != ord("9") else ord("8")
    source.path.write_bytes(bytes(data))
    os.utime(source.path, ns=(state.mtime_ns + 10**9, state.mtime_ns + 10**9))
    assert state.classify(source.fd, source.stat()) == (Change.REPLACED, None)


@pytest.mark.parametrize("how", ["truncated", "new inode"])
def test_anything_but_an_append_is_replaced(source: Opened, how: str) -> None:
    state = recorded(source)
    data = source.path.read_bytes()
    if how == "truncated":
        os.truncate(source.path, len(data) - 13)
    else:
        replacement = source.path.with_name("new")
        replacement.write_bytes(data + b'{"line": 50}\n')
        os.replace(replacement, source.path)
        source.reopen()
    assert not state.is_current(source.fd, source.stat())
    assert state.classify(source.fd, source.stat()) == (Change.REPLACED, None)


def test_within_the_racy_window_the_samples_catch_a_same_size_edit(source: Opened) -> None:
    """An edit inside one timestamp tick leaves every stat field as it was: the sampled fingerprints are checked."""
    racy = recorded(source, settled=False)
    settled = recorded(source)
    st = source.stat()
    with open(source.path, "r+b") as handle:
        handle.write(b'{"line": 9}')  # the same length as the first line's start
    # The stat the file had when it was recorded: what a coarse clock would show after the edit.
    assert not racy.is_current(source.fd, st)
    assert settled.is_current(source.fd, st), "outside the racy window only the stat is compared"


def test_the_fingerprints_cover_head_edge_and_samples(tmp_path: Path) -> None:
    path = tmp_path / "big"
    size = 3 * WHOLE_BODY_BYTES
    path.write_bytes(bytes(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        before = (head_fingerprint(fd, size), edge_fingerprint(fd, size), body_fingerprint(fd, size))
        assert head_fingerprint(fd, 10) != head_fingerprint(fd, FINGERPRINT_BYTES)  # covers min(4 KiB, indexed)
        with open(path, "r+b") as handle:
            handle.seek(FINGERPRINT_BYTES + 1)  # inside no sample: after the head, before the second sample
            handle.write(b"x")
        after = (head_fingerprint(fd, size), edge_fingerprint(fd, size), body_fingerprint(fd, size))
        assert after == before, "a large prefix is sampled, not hashed whole"
        span = size - FINGERPRINT_BYTES
        with open(path, "r+b") as handle:
            handle.seek(span * 1 // (BODY_SAMPLES - 1))  # the second sample
            handle.write(b"y")
        assert body_fingerprint(fd, size) != before[2]
        assert PrefixDigest.of(fd, size).pack() == block_digest(path.read_bytes())
    finally:
        os.close(fd)


def test_a_small_prefix_is_fingerprinted_whole(source: Opened) -> None:
    size = source.stat().st_size
    assert size <= WHOLE_BODY_BYTES
    before = body_fingerprint(source.fd, size)
    with open(source.path, "r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"#")
    assert body_fingerprint(source.fd, size) != before


def test_a_prefix_digest_extends_and_stops_at_the_end_of_the_file(source: Opened) -> None:
    data = source.path.read_bytes()
    digest = PrefixDigest()
    digest.extend(source.fd, 100)
    digest.extend(source.fd, len(data) + 1000)  # asks past the end: stops at the end
    assert digest.end == len(data)
    assert digest.pack() == block_digest(data)


def test_of_file_extends_a_given_prefix_instead_of_reading_it_again(source: Opened) -> None:
    st = source.stat()
    prefix = PrefixDigest.of(source.fd, 100)
    state = SourceState.of_file(
        NAME, source.fd, st, indexed_to=st.st_size, tail_end=None, rows=1, corrupt=0, blank=0, prefix=prefix
    )
    fresh = SourceState.of_file(NAME, source.fd, st, indexed_to=st.st_size, tail_end=None, rows=1, corrupt=0, blank=0)
    assert state.body_hash == fresh.body_hash
    assert state.body_hash[DIGEST_BYTES + 12 :] == block_digest(source.path.read_bytes())
