"""An add whose torn-tail cut is refused (another program wrote at that moment) reads the file again.

``GroupCommit._truncate(..., unless_changed_since=...)`` refuses to cut a file that changed
after its torn last line was copied aside: the other program may have appended past the
copied bytes.  The refusal stands; the add retries on the file as it now is, the fragment
ends up in exactly one place (the file or one copy beside it) and the add lands after
whatever the other program wrote.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import group_commit
from memstore.catalog import MemoryCatalog
from memstore.errors import StorageError

TORN = b'{"memory_id": "torn", "content": "cut short'


def _seed(root: Path) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for n in range(5):
        catalog.add(f"note {n} about caching", tags=["ci"])
    assert len(catalog.search("note", limit=100)) == 5
    with open(catalog.path, "ab") as handle:
        handle.write(TORN)  # a writer killed mid-append
    return catalog


def _other_program(path: Path, writes: list[bytes]) -> Callable[[], None]:
    """Between the copy aside and the cut, another program appends the next of ``writes``."""
    real = group_commit.keep_torn_tail

    def keep(path_: Path, fd: int, start: int, size: int) -> Path:
        aside = real(path_, fd, start, size)
        if writes:
            with open(path, "ab") as handle:
                handle.write(writes.pop(0))
        return aside

    return keep  # type: ignore[return-value]


def _asides(catalog: MemoryCatalog) -> list[bytes]:
    return [p.read_bytes() for p in sorted(catalog.path.parent.glob(f"{catalog.path.name}.torn-*"))]


def _answers_as_a_scan(root: Path, catalog: MemoryCatalog) -> None:
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    for query in ("note", "caching", "other", "after", "torn"):
        assert catalog.search(query, limit=100) == scan.search(query, limit=100), query
    assert MemoryCatalog(root).search("note", limit=100) == scan.search("note", limit=100)
    assert catalog.check_index().equal


def test_a_refused_cut_retries_and_sets_the_longer_fragment_aside_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other program went on writing the torn line: the retry copies the whole fragment
    aside once (the first copy is dropped) and cuts it; the add follows the last whole line."""
    catalog = _seed(tmp_path)
    monkeypatch.setattr(group_commit, "keep_torn_tail", _other_program(catalog.path, [b" and more"]))
    entry = catalog.add("after the refused cut")
    monkeypatch.undo()
    assert _asides(catalog) == [TORN + b" and more"]
    lines = catalog.path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 6 and all(line.endswith(b"\n") for line in lines)
    assert json.loads(lines[-1])["memory_id"] == entry.memory_id
    _answers_as_a_scan(tmp_path, catalog)


def test_a_refused_cut_retries_and_keeps_a_fragment_the_other_program_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other program ended the torn line and added its own: the fragment is now a line in
    the middle of the file (counted corrupt, as a scan counts it), copied nowhere; the add
    lands after the other program's line."""
    catalog = _seed(tmp_path)
    other = b'{"memory_id": "other", "content": "other program line", "created_at": "2026-01-01T00:00:00Z"}\n'
    monkeypatch.setattr(group_commit, "keep_torn_tail", _other_program(catalog.path, [b"\n" + other]))
    entry = catalog.add("after the other program")
    monkeypatch.undo()
    assert _asides(catalog) == []
    lines = catalog.path.read_bytes().splitlines(keepends=True)
    assert lines[5:] == [TORN + b"\n", other, lines[-1]]
    assert json.loads(lines[-1])["memory_id"] == entry.memory_id
    assert catalog.health().corrupt_entries == 1
    _answers_as_a_scan(tmp_path, catalog)


def test_a_cut_refused_every_time_fails_typed_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused on each of the bounded tries: StorageError(EAGAIN), no copy left beside the
    file (the bytes are all still in it) and nothing of the add written."""
    catalog = _seed(tmp_path)
    writes = [b" more"] * (group_commit.TORN_TAIL_TRIES + 1)
    monkeypatch.setattr(group_commit, "keep_torn_tail", _other_program(catalog.path, writes))
    with pytest.raises(StorageError) as caught:
        catalog.add("never written")
    monkeypatch.undo()
    assert caught.value.errno == errno.EAGAIN
    assert len(writes) == 1, "tried exactly TORN_TAIL_TRIES times"
    assert _asides(catalog) == []
    assert catalog.path.read_bytes().endswith(TORN + b" more" * group_commit.TORN_TAIL_TRIES)
    assert b"never written" not in catalog.path.read_bytes()
    catalog.add("once it settles")
    assert _asides(catalog) == [TORN + b" more" * group_commit.TORN_TAIL_TRIES]
    _answers_as_a_scan(tmp_path, catalog)


def test_cut_torn_tail_retries_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cut a rewrite makes first (``cut_torn_tail``) takes the same retry."""
    catalog = _seed(tmp_path)
    monkeypatch.setattr(group_commit, "keep_torn_tail", _other_program(catalog.path, [b" tail"]))
    aside = catalog._group(catalog.path).cut_torn_tail(is_whole=lambda data: False)
    monkeypatch.undo()
    assert aside is not None and aside.read_bytes() == TORN + b" tail"
    assert _asides(catalog) == [TORN + b" tail"]
    assert catalog.path.read_bytes().endswith(b"\n")
    assert os.path.exists(catalog.path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fragment=st.binary(min_size=1, max_size=40).filter(lambda data: b"\n" not in data),
    writes=st.lists(st.binary(min_size=1, max_size=30), max_size=group_commit.TORN_TAIL_TRIES + 1),
)
def test_whatever_the_other_program_writes_every_byte_stays_once(
    tmp_path_factory: pytest.TempPathFactory, fragment: bytes, writes: list[bytes]
) -> None:
    """Property: the other program's writes land between the copy aside and the cut, one per try.
    Every byte of the fragment and of those writes is then in exactly one place, in order: the
    file, then at most one copy beside it (a torn line with no newline); the add comes last, or
    it failed with EAGAIN after TORN_TAIL_TRIES refusals and the file holds exactly what it held."""
    root = tmp_path_factory.mktemp("prop")
    catalog = MemoryCatalog(root)
    catalog.add("note before the crash")
    with open(catalog.path, "ab") as handle:
        handle.write(b"\xff" + fragment)  # never JSON: a torn line
    prefix = catalog.path.read_bytes()[: -len(fragment) - 1]
    pending = list(writes)
    real = group_commit.keep_torn_tail

    def keep(path_: Path, fd: int, start: int, size: int) -> Path:
        aside = real(path_, fd, start, size)
        if pending:
            with open(catalog.path, "ab") as handle:
                handle.write(pending.pop(0))
        return aside

    group_commit.keep_torn_tail = keep  # type: ignore[assignment]
    try:
        try:
            entry = catalog.add("the add under test")
        except StorageError as exc:
            assert exc.errno == errno.EAGAIN
            entry = None
    finally:
        group_commit.keep_torn_tail = real  # type: ignore[assignment]
    written = b"\xff" + fragment + b"".join(writes[: len(writes) - len(pending)])
    after = catalog.path.read_bytes()
    asides = _asides(catalog)
    assert after.startswith(prefix) and len(asides) <= 1
    if entry is None:
        assert len(writes) - len(pending) == group_commit.TORN_TAIL_TRIES
        assert after == prefix + written and asides == []
        return
    last = after.splitlines()[-1]
    assert json.loads(last)["memory_id"] == entry.memory_id
    body = after[len(prefix) : len(after) - len(last) - 1]
    if asides:
        assert body + asides[0] == written and b"\n" not in asides[0] and body[-1:] in (b"", b"\n")
    else:
        assert body in (written, written + b"\n") and (body == b"" or body.endswith(b"\n"))
    scan = MemoryCatalog(root, use_index=False, readonly=True)
    assert catalog.search("note", limit=100) == scan.search("note", limit=100)
