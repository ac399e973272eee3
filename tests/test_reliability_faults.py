"""Fault injection on every write path: the Nth open/write/fsync/replace/ftruncate fails.

``memstore.files`` and ``memstore.group_commit`` do all of memstore's durable I/O
(locks, appends and their shared fsyncs, rewrites, directory fsyncs), so their ``os``
is swapped for one stand-in that raises EIO, ENOSPC or EACCES on the Nth call of one
function, once or from then on.  For every N up
to the number of calls a clean run makes, each operation must:

- raise a typed memstore error (a StorageError, LockError included) or succeed;
- never return after a failed fsync (nothing is acknowledged that may be lost);
- leave every file byte-identical to before or exactly as a clean run leaves it
  (quarantine moves: the entries are never in neither file);
- leak no lock (a new flock succeeds and the same call works once faults stop),
  no file descriptor and no temp file;
- keep the index equal to a rebuild.

Full size (``MEMSTORE_STRESS=full``) tries all three errnos for every call; the
default rotates through them.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import itertools
import os
import shutil
import types
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import reliability_workers as workers

import memstore.catalog
import memstore.direct_io
import memstore.files
import memstore.group_commit
import memstore.pinned
import memstore.team
from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.errors import MemstoreError, StorageError
from memstore.failure_cards import FailureCardStorage
from memstore.pinned import PinnedFileStorage
from memstore.team import TeamMemory

FUNCTIONS = ["open", "write", "writev", "fsync", "replace", "ftruncate", "copy_file_range"]
ERRNOS = [errno.EIO, errno.ENOSPC, errno.EACCES]
WATCHED = ["memory.jsonl", "memory-quarantine.jsonl", "failures.json", "pinned.json", "team-memory.md"]


class FaultyOS:
    """``os`` for memstore.files, failing one function's Nth call (once, or from then on)."""

    def __init__(self, function: str | None = None, nth: int = 0, code: int = errno.EIO, persistent: bool = False):
        self.function = function
        self.nth = nth
        self.code = code
        self.persistent = persistent
        self.calls: Counter[str] = Counter()
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        count = self.calls[name]
        if name == self.function and (count == self.nth or (self.persistent and count > self.nth)):
            self.fired += 1
            raise OSError(self.code, os.strerror(self.code))
        return getattr(os, name)(*args, **kwargs)

    def open(self, *args: Any, **kwargs: Any) -> int:
        return int(self._call("open", *args, **kwargs))

    def write(self, *args: Any, **kwargs: Any) -> int:
        return int(self._call("write", *args, **kwargs))

    def fsync(self, *args: Any, **kwargs: Any) -> None:
        self._call("fsync", *args, **kwargs)

    def replace(self, *args: Any, **kwargs: Any) -> None:
        self._call("replace", *args, **kwargs)

    def ftruncate(self, *args: Any, **kwargs: Any) -> None:
        self._call("ftruncate", *args, **kwargs)

    def writev(self, *args: Any, **kwargs: Any) -> int:
        return int(self._call("writev", *args, **kwargs))

    def copy_file_range(self, *args: Any, **kwargs: Any) -> int:
        return int(self._call("copy_file_range", *args, **kwargs))


@dataclass
class Operation:
    """One write operation: ``setup`` fills a root, ``run`` performs the write on a fresh object."""

    name: str
    setup: Callable[[Path], None]
    run: Callable[[Path], object]
    catalog: bool = False
    two_files: bool = False


def _card(card_id: str) -> FailureCard:
    return FailureCard(
        id=card_id,
        run_id="run-1",
        timestamp=1_800_000_000.0,
        error_type="TypeError",
        file_path="src/app.py",
        line_number=3,
        error_message="boom",
        task_description="fix the parser",
        expires_at=4_000_000_000.0,
    )


def _seed_catalog(root: Path, *, torn: bool = False) -> None:
    catalog = MemoryCatalog(root)
    for n in range(12):
        catalog.add(f"entry {n} alpha", tags=["t"], branch_name=f"b{n % 3}", run_id=f"r{n % 2}")
    catalog.list(limit=1)  # build the index, so rewrites follow it
    if torn:
        with open(catalog.path, "ab") as handle:
            handle.write(b'{"memory_id": "torn", "cont')


def _seed_cards(root: Path) -> None:
    storage = FailureCardStorage(root)
    storage.append(_card("c1"))
    storage.append(_card("c2"))


def _seed_pins(root: Path) -> None:
    (root / "a.txt").write_text("a")
    (root / "b.txt").write_text("b")
    PinnedFileStorage(root).add("a.txt")


def _seed_team(root: Path) -> None:
    TeamMemory(root).add("first note")


OPERATIONS = [
    Operation("catalog.add", _seed_catalog, lambda r: MemoryCatalog(r).add("new alpha", branch_name="b9"), True),
    Operation(
        "catalog.add after a torn tail",
        lambda r: _seed_catalog(r, torn=True),
        lambda r: MemoryCatalog(r).add("new alpha"),
        True,
    ),
    Operation(
        "catalog.add_quarantined",
        _seed_catalog,
        lambda r: MemoryCatalog(r).add_quarantined("web alpha", provenance={"source": "web"}),
        True,
    ),
    Operation("catalog.delete_by_branch", _seed_catalog, lambda r: MemoryCatalog(r).delete_by_branch("b1"), True),
    Operation("catalog.delete_by_run_id", _seed_catalog, lambda r: MemoryCatalog(r).delete_by_run_id("r0"), True),
    Operation(
        "catalog.quarantine_by_branch",
        _seed_catalog,
        lambda r: MemoryCatalog(r).quarantine_by_branch("b2", "poisoned"),
        True,
        True,
    ),
    Operation("cards.append", _seed_cards, lambda r: FailureCardStorage(r).append(_card("c3"))),
    Operation("cards.invalidate", _seed_cards, lambda r: FailureCardStorage(r).invalidate("c1", reason="stale")),
    Operation("pinned.add", _seed_pins, lambda r: PinnedFileStorage(r).add("b.txt")),
    Operation("team.add", _seed_team, lambda r: TeamMemory(r).add("second note")),
]


@pytest.fixture
def deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed ids and clocks, so a clean run's files are the exact 'fully updated' state."""
    monkeypatch.setattr(memstore.catalog, "new_memory_id", lambda: f"{next(_IDS[0]):032x}")
    monkeypatch.setattr(memstore.catalog, "utc_now_iso", lambda: "2026-11-30T00:00:00+00:00")
    monkeypatch.setattr(memstore.team, "utc_now_iso", lambda: "2026-11-30T00:00:00+00:00")
    monkeypatch.setattr(memstore.pinned, "time", types.SimpleNamespace(time=lambda: 1_800_000_000.0))


_IDS = [itertools.count()]


def _reset_ids() -> None:
    """Every run of an operation gets the same ids, so its files are comparable byte for byte."""
    _IDS[0] = itertools.count(10_000)


def _snapshot(root: Path) -> dict[str, bytes]:
    """The watched files' bytes; a missing file reads as empty, as every reader treats it."""
    found = dict.fromkeys(WATCHED, b"")
    for path in root.rglob("*"):
        if path.name in found and path.is_file():
            found[path.name] = path.read_bytes()
    return found


def _without_torn_tail(data: bytes) -> bytes:
    """What setting aside a torn last line leaves (a repair readers cannot tell from the original)."""
    return data if data.endswith(b"\n") or not data else data[: data.rfind(b"\n") + 1]


def _temps(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name.endswith(".tmp") or ".build-" in path.name]


def _open_fds(root: Path) -> list[str]:
    """Descriptors of this process pointing into ``root``, except the index's own connection."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and "/index/" not in target:
            held.append(target)
    return sorted(held)


def _locks_free(root: Path) -> bool:
    """No writer lock is left held.  ``index/open.lock`` is not one: every open index connection
    holds it shared for its lifetime (so that a log beside a closed index is never replayed)."""
    for lock in root.rglob("*.lock"):
        if lock.parent.name == "index" and lock.name == "open.lock":
            continue
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    return True


def _faulted(monkeypatch: pytest.MonkeyPatch, faulty: FaultyOS) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setattr(memstore.files, "os", faulty)
        patch.setattr(memstore.group_commit, "os", faulty)
        patch.setattr(memstore.direct_io, "os", faulty)  # a rewrite's new file is written there
        yield


def _fresh(template: Path, into: Path) -> Path:
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(template, into, symlinks=True)
    if (into / ".teaagent" / "index").is_dir():
        # A copied index is foreign (its origin names the template's inode): let it be replaced
        # now, unfaulted, so the run under faults finds the same usable index the template had.
        MemoryCatalog(into).list(limit=1)
        if (into / ".teaagent" / "memory" / "failures.json").exists():
            FailureCardStorage(into).list_active()
    return into


def _plans(calls: Counter[str]) -> list[tuple[str, int, bool, int]]:
    """(function, n, persistent, errno) for every call a clean run makes."""
    plans = []
    rotation = itertools.cycle(ERRNOS)
    for function in FUNCTIONS:
        for nth in range(1, calls[function] + 1):
            for persistent in (False, True):
                codes = ERRNOS if workers.FULL else [next(rotation)]
                plans.extend((function, nth, persistent, code) for code in codes)
    return plans


@pytest.mark.stress
@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_every_failing_call_leaves_files_whole_and_nothing_leaked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: Operation
) -> None:
    template = tmp_path / "template"
    template.mkdir()
    operation.setup(template)
    before = _snapshot(template)

    clean_root = _fresh(template, tmp_path / "clean")
    counter = FaultyOS()
    _reset_ids()
    for _ in _faulted(monkeypatch, counter):
        operation.run(clean_root)
    after = _snapshot(clean_root)
    assert after != before, "the clean run changed nothing"
    calls = counter.calls

    outcomes: Counter[str] = Counter()
    for function, nth, persistent, code in _plans(calls):
        label = f"{operation.name}: {function} #{nth} {'persistent' if persistent else 'once'} {errno.errorcode[code]}"
        root = _fresh(template, tmp_path / "case")
        fds_before = _open_fds(root)
        faulty = FaultyOS(function, nth, code, persistent)
        raised: BaseException | None = None
        _reset_ids()
        for _ in _faulted(monkeypatch, faulty):
            try:
                operation.run(root)
            except Exception as exc:
                raised = exc
        assert faulty.fired, label
        if raised is not None:
            assert isinstance(raised, MemstoreError) and isinstance(raised, StorageError), f"{label}: {raised!r}"
            outcomes[type(raised).__name__] += 1
        else:
            outcomes["absorbed"] += 1
        if function == "fsync":
            assert raised is not None, f"{label}: acknowledged after a failed fsync"
        state = _snapshot(root)
        for name in WATCHED:
            allowed = (before[name], _without_torn_tail(before[name]), after[name])
            assert state[name] in allowed, f"{label}: {name} is neither old nor new"
        if raised is None:
            assert state == after, f"{label}: succeeded but the files are not fully updated"
        if operation.two_files and state["memory.jsonl"] == after["memory.jsonl"]:
            assert state["memory-quarantine.jsonl"] == after["memory-quarantine.jsonl"], f"{label}: entries lost"
        assert _temps(root) == [], label
        # A catalog keeps its append descriptors for its next add until it is collected; a kept
        # exception keeps the catalog.  Nothing may stay open once nothing refers to them.
        raised = None
        gc.collect()
        assert _open_fds(root) == fds_before, f"{label}: leaked a file descriptor"
        assert _locks_free(root), f"{label}: leaked the lock"
        # Once the faults stop, the same store works again in this process.
        (root / "b.txt").write_text("b") if operation.name == "pinned.add" else None
        operation.run(root)
        if operation.catalog:
            catalog = MemoryCatalog(root)
            catalog.add("after the fault alpha")
            assert catalog.check_index().equal, label
            scan = MemoryCatalog(root, use_index=False, readonly=True)
            assert catalog.search("alpha", limit=100) == scan.search("alpha", limit=100), label
    workers.figure("faults", operation=operation.name, injected=sum(outcomes.values()), **outcomes)


def test_failed_fsync_of_an_add_is_not_acknowledged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("kept")
    for _ in _faulted(monkeypatch, FaultyOS("fsync", 1, errno.EIO)):
        with pytest.raises(StorageError) as caught:
            catalog.add("not acknowledged")
    assert caught.value.errno == errno.EIO
    assert catalog.add("next").content == "next"  # the lock was released
    assert catalog.list(limit=1)[0].content == "next"


class NoKernelCopyOS(FaultyOS):
    """A file system without ``copy_file_range``: rewrites fall back to reads and writes."""

    def copy_file_range(self, *args: Any, **kwargs: Any) -> int:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))


class NoSpaceOS(NoKernelCopyOS):
    """A full disk: every ``write`` and ``writev`` from the Nth on fails (whichever one a rewrite uses)."""

    def writev(self, *args: Any, **kwargs: Any) -> int:
        self.calls["write"] += 1  # counted as one function with ``write``
        if self.calls["write"] >= self.nth:
            self.fired += 1
            raise OSError(self.code, os.strerror(self.code))
        return int(os.writev(*args, **kwargs))


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "no_o_direct"])
def test_enospc_keeps_its_errno(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool) -> None:
    """A rewrite copies through this process (it digests what it writes, staged for ``O_DIRECT``
    and written with ``write``, or gathered in ``writev`` where the file system has no direct
    I/O): a full disk fails its write.  Review round 23: the test failed where ``O_DIRECT``
    was refused (macOS, an older tmpfs), as it faulted ``write`` only."""
    if not direct:
        monkeypatch.setattr(memstore.direct_io, "O_DIRECT", 0)
    catalog = MemoryCatalog(tmp_path)
    catalog.add("a", branch_name="b")
    catalog.add("kept", branch_name="c")
    for _ in _faulted(monkeypatch, NoSpaceOS("write", 1, errno.ENOSPC, persistent=True)):
        with pytest.raises(StorageError) as caught:
            catalog.delete_by_branch("b")
    assert caught.value.errno == errno.ENOSPC
    assert catalog.delete_by_branch("b") == 1
