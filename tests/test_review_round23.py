"""Review round 23: the rewrite's new file written ``O_DIRECT`` and proven by direct reads.

Each test reproduces a defect found by the review of the change that added
``memstore/direct_io.py`` (or guards an attack that held but had no test).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import itertools
import mmap
import os
import threading
import types
from pathlib import Path
from typing import Any, NoReturn

import pytest
from test_reliability_faults import WATCHED, FaultyOS, _faulted, _fresh, _locks_free, _snapshot, _temps

from memstore import direct_io
from memstore.catalog import MemoryCatalog
from memstore.direct_io import read_direct
from memstore.errors import StorageError
from memstore.files import Replacement
from memstore.index import source
from memstore.index.catalog_index import RewritePlan
from memstore.jsonl import encode_entries


def _read_in_thread(fd: int, end: int) -> tuple[threading.Thread, bytearray, list[int]]:
    fed, reached = bytearray(), list[int]()
    reader = threading.Thread(target=lambda: reached.append(read_direct(fd, 0, end, fed.extend)), daemon=True)
    reader.start()
    reader.join(20)
    return reader, fed, reached


@pytest.mark.parametrize("planted", ["fifo", "symlink"])
def test_a_proc_that_is_not_procfs_cannot_hang_or_mislead_the_direct_proof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """Defect (low): ``_reopen_direct`` opened ``/proc/self/fd/N`` before checking what it names.

    Where ``/proc`` is not procfs (a container or chroot with its own), a FIFO at that
    path blocked the open, and with it the index's proof after a rewrite, forever (seen
    with a tmpfs mounted over /proc in a private mount namespace).  The link is now
    resolved and compared with the descriptor first, and opened non-blocking.
    """
    data = b"0123456789" * 100_000
    path = tmp_path / "data"
    path.write_bytes(data)
    fake = tmp_path / "proc-fd"
    fake.mkdir()
    monkeypatch.setattr(direct_io, "PROC_FD", str(fake / "{}"))
    fd = os.open(path, os.O_RDONLY)
    target = fake / str(fd)
    if planted == "fifo":
        os.mkfifo(target)
    else:
        other = tmp_path / "other"
        other.write_bytes(b"X" * len(data))
        target.symlink_to(other)
    try:
        reader, fed, reached = _read_in_thread(fd, len(data))
        hung = reader.is_alive()
    finally:
        if planted == "fifo":
            with contextlib.suppress(OSError):  # a writer releases an open still blocked on the FIFO
                os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        os.close(fd)
    assert not hung, "the proof blocked opening what /proc/self/fd named"
    assert bytes(fed) == data and reached == [len(data)]


def test_the_real_proc_link_is_still_opened_direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above does not turn direct reads off where /proc is procfs."""
    if not direct_io.O_DIRECT or not Path(direct_io.PROC_FD.format(0)).parent.is_dir():
        pytest.skip("no O_DIRECT or no procfs here")
    path = tmp_path / "data"
    path.write_bytes(b"a" * (3 * direct_io.ALIGN + 5))
    opened: list[int] = []
    reopen = direct_io._reopen_direct

    def recording(fd: int) -> int | None:
        direct = reopen(fd)
        opened.append(direct is not None)
        return direct

    monkeypatch.setattr(direct_io, "_reopen_direct", recording)
    fd = os.open(path, os.O_RDONLY)
    try:
        fed = bytearray()
        assert read_direct(fd, 0, 1 << 20, fed.extend) == 3 * direct_io.ALIGN + 5
    finally:
        os.close(fd)
    assert bytes(fed) == path.read_bytes()
    try:
        probe = os.open(tmp_path / "probe", os.O_CREAT | os.O_WRONLY | direct_io.O_DIRECT, 0o600)
    except OSError:
        pytest.skip("no O_DIRECT on this file system")
    os.close(probe)
    assert opened == [True]


def _temp_descriptors(folder: Path) -> list[str]:
    """This process's descriptors of temp files under ``folder`` (a live one keeps its file)."""
    held = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith(str(folder)) and ".tmp" in target:
                held.append(target)
    return sorted(held)


def test_no_memory_for_the_direct_stage_means_ordinary_writes_not_a_leaked_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (medium): the 1 MiB stage was mapped after ``Replacement`` had made its temp file.

    ``mmap`` failing (ENOMEM: a low RLIMIT_AS, a memory cgroup at its limit) raised out of
    ``Replacement.__init__``: the rewrite failed ("cannot read ..."), and the temp file's
    descriptor (holding its flock) leaked, so the temp file stayed for the life of the
    process, one more each attempt.  The stage is now mapped first; without it the
    writes are the ordinary ones.
    """

    def no_memory(*_args: object, **_kwargs: object) -> NoReturn:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    catalog = MemoryCatalog(tmp_path)
    for number in range(20):
        catalog.add(f"entry {number} alpha", branch_name=f"b{number % 2}")
    catalog.search("alpha")
    before = catalog.path.read_bytes()
    monkeypatch.setattr(direct_io, "mmap", types.SimpleNamespace(mmap=no_memory))
    assert catalog.delete_by_branch("b1") == 10
    gc.collect()
    assert [path.name for path in catalog.path.parent.iterdir() if path.name.endswith(".tmp")] == []
    assert _temp_descriptors(tmp_path) == []
    kept = [line for line in before.splitlines(keepends=True) if b'"b1"' not in line]
    assert catalog.path.read_bytes() == b"".join(kept)
    assert catalog.check_index().equal


def test_a_replacement_whose_direct_writer_fails_to_start_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the direct writer raises as it starts, the temp file and its descriptor go with it."""

    def failing(self: direct_io.DirectWriter, fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(direct_io.DirectWriter, "__init__", failing)
    with pytest.raises(KeyboardInterrupt):
        Replacement(tmp_path / "target", digest=True, direct=True)
    assert list(tmp_path.iterdir()) == []
    assert _temp_descriptors(tmp_path) == []


@pytest.mark.parametrize("refused", [1, 2], ids=["first_buffer", "second_buffer"])
def test_no_memory_for_the_proof_buffers_means_ordinary_reads_not_an_index_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: int
) -> None:
    """Defect (low, cost): mapping the proof's two 4 MiB read buffers could fail (ENOMEM).

    The OSError left ``apply_rewrite`` (the catalog logs it): the index did not follow
    the rewrite, and the next query rebuilt it whole, minutes at 1M entries.  The proof
    now reads the ordinary way, as it does when the direct reopen is refused.
    """
    catalog = MemoryCatalog(tmp_path)
    catalog.add("first note", branch_name="kept")
    entries = [
        catalog._new_entry(f"note {n} {'x' * 2000}", (), "gone" if n % 7 == 3 else "kept", None) for n in range(1500)
    ]
    with open(catalog.path, "ab") as handle:
        handle.write(encode_entries(entries))
    catalog.search("note")
    index = catalog._index.index()
    assert index is not None
    followed: list[bool] = []
    apply = index.apply_rewrite

    def recording(plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
        followed.append(apply(plan, after, **held))
        return followed[-1]

    monkeypatch.setattr(index, "apply_rewrite", recording)
    real, mapped = mmap.mmap, list[int]()

    def no_memory_for_reads(fileno: int, length: int) -> mmap.mmap:
        if length == direct_io.READ_BYTES:
            mapped.append(length)
            if len(mapped) == refused:
                raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))
        return real(fileno, length)

    monkeypatch.setattr(direct_io, "mmap", types.SimpleNamespace(mmap=no_memory_for_reads))
    monkeypatch.setattr(source, "FULL_PROOF_EVERY", 1)  # the full proof (an untouched file is otherwise not read back)
    assert catalog.delete_by_branch("gone") == len(range(3, 1500, 7))
    assert mapped, "the proof did not try to read direct"
    assert followed == [True]
    assert catalog.check_index().equal


class _FaultyReadsOS(FaultyOS):
    """The fault injector's ``os``, also failing reads: the proof's direct ``preadv``, the fallback ``pread``."""

    def preadv(self, *args: Any, **kwargs: Any) -> int:
        return int(self._call("preadv", *args, **kwargs))

    def pread(self, *args: Any, **kwargs: Any) -> bytes:
        return bytes(self._call("pread", *args, **kwargs))


class _ShortDirectOS(_FaultyReadsOS):
    """Every direct write of two blocks or more is accepted only in part (an aligned half)."""

    def write(self, fd: int, data: Any) -> int:
        view = memoryview(data)
        if len(view) >= 2 * direct_io.ALIGN:
            self.fired += 1
            half = len(view) // 2
            view = view[: half - half % direct_io.ALIGN]
        return int(self._call("write", fd, view))


def _seed_direct_sized(root: Path) -> None:
    """About 6.8 MB (4.5 MB kept): the rewrite writes whole 1 MiB blocks direct, the proof reads two 4 MiB blocks."""
    catalog = MemoryCatalog(root)
    catalog.add("first alpha", branch_name="b0")
    filler = "y" * 1800
    entries = [catalog._new_entry(f"entry {n} alpha {filler}", (), f"b{n % 3}", None) for n in range(3600)]
    with open(catalog.path, "ab") as handle:
        handle.write(encode_entries(entries))
    catalog.list(limit=1)


@pytest.mark.stress
@pytest.mark.parametrize("full_proof", [True, False], ids=["full_proof", "untouched_not_read_back"])
def test_every_failing_call_of_a_direct_rewrite_and_its_proof_leaves_files_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full_proof: bool
) -> None:
    """Held (no defect): the fault harness's catalogs are under one block, so no direct write or read
    ever met a fault there.  Here every write, fsync, replace and read call of a rewrite that goes
    direct fails in turn (once and from then on), and every direct write is short once; with the
    follow-up's full proof, and with the shortcut that reads back only sampled blocks."""
    if full_proof:
        monkeypatch.setattr(source, "FULL_PROOF_EVERY", 1)
    template = tmp_path / "template"
    template.mkdir()
    _seed_direct_sized(template)
    before = _snapshot(template)
    clean = _fresh(template, tmp_path / "clean")
    counter = _FaultyReadsOS()
    for _ in _faulted(monkeypatch, counter):
        MemoryCatalog(clean).delete_by_branch("b1")
    after = _snapshot(clean)
    assert after != before
    assert counter.calls["preadv"] >= 2 or not full_proof, "the proof did not read direct blocks"
    plans: list[tuple[str, int, bool]] = [
        (function, nth, persistent)
        for function in ("write", "writev", "fsync", "replace", "preadv", "pread")
        for nth in range(1, counter.calls[function] + 1)
        for persistent in (False, True)
    ]
    codes = itertools.cycle([errno.EIO, errno.ENOSPC])
    for function, nth, persistent in [*plans, ("short", 0, False)]:
        label = f"{function} #{nth} {'persistent' if persistent else 'once'}"
        root = _fresh(template, tmp_path / "case")
        faulty = _ShortDirectOS() if function == "short" else _FaultyReadsOS(function, nth, next(codes), persistent)
        raised: BaseException | None = None
        for _ in _faulted(monkeypatch, faulty):
            try:
                MemoryCatalog(root).delete_by_branch("b1")
            except Exception as exc:
                raised = exc
        assert faulty.fired, label
        if raised is not None:
            assert isinstance(raised, StorageError), f"{label}: {raised!r}"
        state = _snapshot(root)
        for name in WATCHED:
            assert state[name] in (before[name], after[name]), f"{label}: {name} is neither old nor new"
        if raised is None:
            assert state == after, f"{label}: succeeded but the file is not the new one"
        assert _temps(root) == [], label
        raised = None
        gc.collect()
        assert _temp_descriptors(root) == [], label
        assert _locks_free(root), label
        catalog = MemoryCatalog(root)
        catalog.delete_by_branch("b1")
        assert catalog.check_index().equal, label  # row by row against a fresh scan
