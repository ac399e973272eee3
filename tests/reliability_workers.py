"""Entry points for the processes the reliability suites spawn (multiprocessing "spawn").

Each worker reports what it has *acknowledged* (an ``add`` that returned, a rewrite
that returned) by appending a line to its own report file and fsyncing it before
going on, so a driver that SIGKILLs it afterwards still knows every acknowledged
id.  A worker that fails for any reason other than being killed writes its
traceback to ``<report>.err`` and exits with code 3.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAILED_EXIT = 3
FULL = os.environ.get("MEMSTORE_STRESS", "").lower() == "full"


def sized(small: int, full: int) -> int:
    """The CI size by default, the full size with ``MEMSTORE_STRESS=full``."""
    return full if FULL else small


def figure(name: str, **values: object) -> None:
    """Print one line of figures (shown with ``pytest -s``; docs/reliability.md quotes them)."""
    print(f"[reliability] {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)


ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def content_of(worker: int, seq: int, size: int, rng: random.Random) -> str:
    """``size`` bytes of ASCII content that names its writer and sequence number."""
    head = f"w{worker} n{seq} alpha "
    body_len = max(0, size - len(head))
    words = []
    total = 0
    while total < body_len:
        word = "".join(rng.choices(ALPHABET, k=rng.randint(3, 9)))
        words.append(word)
        total += len(word) + 1
    return (head + " ".join(words))[: max(size, len(head))]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def log_size(rng: random.Random, low: int = 100, high: int = 64 * 1024) -> int:
    """Sizes spread evenly on a log scale between ``low`` and ``high`` bytes."""
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


class Reporter:
    """Appends one line per acknowledged operation, fsynced before the worker goes on."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def report(self, *fields: str) -> None:
        os.write(self.fd, ("\t".join(fields) + "\n").encode("utf-8"))
        os.fsync(self.fd)


def read_reports(path: Path) -> list[list[str]]:
    """Complete report lines only (a worker killed mid-report leaves a partial last line)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    return [line.split("\t") for line in complete.decode("utf-8").splitlines() if line]


def _guarded(report_path: str, body: Callable[[], None]) -> None:
    try:
        body()
    except BaseException:
        Path(report_path + ".err").write_text(traceback.format_exc())
        sys.stderr.write(traceback.format_exc())
        os._exit(FAILED_EXIT)


# ----------------------------------------------------------------------------- crash safety


def crash_worker(root: str, worker: int, report_path: str, seed: int, ops: int, rewrite_rate: float) -> None:
    """Add entries of 100 B – 64 KiB and now and then delete this worker's doomed branch.

    Reports ``A <id> <branch> <digest>`` per acknowledged add and ``R <branch> <n>`` per
    acknowledged rewrite; entries on ``doomed-<worker>`` may be deleted deliberately.
    """

    def body() -> None:
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        rng = random.Random(seed)
        reporter = Reporter(report_path)
        doomed = f"doomed-{worker}"
        for seq in range(ops):
            if rng.random() < rewrite_rate:
                removed = catalog.delete_by_branch(doomed)
                reporter.report("R", doomed, str(removed))
                continue
            branch = doomed if rng.random() < 0.25 else f"keep-{worker}"
            text = content_of(worker, seq, log_size(rng), rng)
            entry = catalog.add(text, branch_name=branch, tags=[f"w{worker}"])
            reporter.report("A", entry.memory_id, branch, digest(text))

    _guarded(report_path, body)


def lock_holder(lock_path: str, ready_path: str) -> None:
    """Take the catalog lock, say so, and hold it until killed."""

    def body() -> None:
        from memstore.files import FileLock

        lock = FileLock(Path(lock_path))
        lock.acquire()
        Path(ready_path).write_text("held")
        time.sleep(600)

    _guarded(ready_path, body)


# ----------------------------------------------------------------------------- kill during a rewrite


class _KillingOS:
    """Stands in for ``os`` inside memstore.files and memstore.group_commit and SIGKILLs the process at one point."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.armed = False
        self.temp_fds: set[int] = set()
        self.append_fds: set[int] = set()
        self.replaced = False
        """A rewrite's ``os.replace`` has run: the next directory fsync is the rewrite's own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    def open(self, path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        fd = os.open(path, flags, mode, **kwargs)
        if self.armed and str(path).endswith(".tmp"):
            self.temp_fds.add(fd)
            if self.point == "after_temp_create":
                self.die()
        elif self.armed and flags & os.O_APPEND:
            self.append_fds.add(fd)
        return fd

    def write(self, fd: int, data: Any) -> int:
        if self.armed and fd in self.temp_fds and self.point == "mid_write":
            os.write(fd, bytes(data[: len(data) // 2]))
            self.die()
        if self.armed and fd in self.append_fds and self.point == "append_mid_write":
            os.write(fd, bytes(data[: len(data) // 2]))
            self.die()
        written = os.write(fd, data)
        if self.armed and fd in self.append_fds and self.point == "append_before_fsync":
            self.die()
        return written

    def writev(self, fd: int, buffers: Any) -> int:
        if self.armed and fd in self.temp_fds and self.point == "mid_write":
            os.writev(fd, buffers[: max(1, len(buffers) // 2)])
            self.die()
        return os.writev(fd, buffers)

    def copy_file_range(self, src: int, dst: int, count: int, *args: Any) -> int:
        if self.armed and dst in self.temp_fds and self.point == "mid_write":
            os.copy_file_range(src, dst, max(1, count // 2), *args)
            self.die()
        return os.copy_file_range(src, dst, count, *args)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        if self.armed and fd in self.temp_fds and self.point == "after_fsync":
            self.die()

    def replace(self, src: Any, dst: Any, **kwargs: Any) -> None:
        if self.armed and self.point == "before_replace":
            self.die()
        os.replace(src, dst, **kwargs)
        self.replaced = True
        if self.armed and self.point == "after_replace":
            self.die()


def rewrite_killer(root: str, point: str, action: str, argument: str, report_path: str) -> None:
    """Run one rewrite (``delete_by_branch``/``quarantine_by_branch``/``delete_by_run_id``) and die at ``point``."""

    def body() -> None:
        import memstore.files as files
        import memstore.group_commit as group_commit
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        catalog.list(limit=1)  # the index is built before the kill point is armed
        killer = _KillingOS(point)
        files.os = killer  # type: ignore[attr-defined]
        group_commit.os = killer  # type: ignore[attr-defined]
        real_fsync_dir = files.fsync_dir

        def fsync_dir(directory: Path) -> None:
            real_fsync_dir(directory)
            # Creating a file syncs its directory too (the quarantine file's first append):
            # the kill point is the directory sync that follows the rewrite's replace.
            if killer.armed and killer.replaced and point == "after_dir_fsync":
                killer.die()

        files.fsync_dir = fsync_dir  # type: ignore[assignment]
        killer.armed = True
        if action == "delete_by_branch":
            catalog.delete_by_branch(argument)
        elif action == "delete_by_run_id":
            catalog.delete_by_run_id(argument)
        else:
            catalog.quarantine_by_branch(argument, "test")
        Path(report_path).write_text("finished")

    _guarded(report_path, body)


def rewrite_loop(root: str, runs: list[str], ready_path: str, go_path: str) -> None:
    """Delete one run id after another (each a full rewrite) once ``go_path`` exists."""

    def body() -> None:
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        catalog.list(limit=1)
        Path(ready_path).write_text("ready")
        while not os.path.exists(go_path):
            time.sleep(0.001)
        for run in runs:
            catalog.delete_by_run_id(run)

    _guarded(ready_path + ".r", body)


# ----------------------------------------------------------------------------- readers and writers


def concurrent_writer(root: str, worker: int, report_path: str, seed: int, until: float, rewrites: bool) -> None:
    """Add checksummed entries until ``until`` (time.time()); optionally rewrite its doomed branch."""

    def body() -> None:
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        rng = random.Random(seed)
        reporter = Reporter(report_path)
        seq = 0
        while time.time() < until:
            if rewrites and seq % 10 == 9:
                removed = catalog.delete_by_branch(f"doomed-{worker}")
                reporter.report("R", f"doomed-{worker}", str(removed))
            branch = f"doomed-{worker}" if rewrites and rng.random() < 0.3 else f"keep-{worker}"
            text = content_of(worker, seq, log_size(rng, 60, 4096), rng)
            text = f"{text} sum{digest(text)}"
            entry = catalog.add(text, branch_name=branch, tags=[f"w{worker}", "shared"])
            reporter.report("A", entry.memory_id, branch, digest(text))
            seq += 1

    _guarded(report_path, body)


def checksum_ok(content: str) -> bool:
    """Writers end every entry with ``sum<digest of the rest>``: a torn or glued record fails this."""
    text, _, tail = content.rpartition(" sum")
    return bool(text) and tail == digest(text)


def concurrent_reader(root: str, reader: int, report_path: str, seed: int, until: float) -> None:
    """Search, list and show until ``until``; report every entry seen and any invalid result."""

    def body() -> None:
        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        rng = random.Random(seed)
        reporter = Reporter(report_path)
        queries = ["alpha", "w0", "w1 alpha", "shared", "n1", "sum", "alpha n2", *ALPHABET[:6]]
        seen: dict[str, str] = {}
        calls = 0
        while time.time() < until:
            choice = rng.random()
            if choice < 0.6:
                query = rng.choice(queries)
                results = catalog.search(query, limit=rng.choice([1, 5, 20]))
                tokens = query.lower().split()
                for entry in results:
                    text = entry.content.lower()
                    if not all(t in text or any(t in tag for tag in entry.tags) for t in tokens):
                        reporter.report("BAD", "nomatch", entry.memory_id, query)
            elif choice < 0.9 or not seen:
                results = catalog.list(limit=rng.choice([1, 10, 50]))
            else:
                wanted = rng.choice(list(seen))
                try:
                    results = [catalog.show(wanted)]
                except FileNotFoundError:
                    results = []  # a doomed entry may have been deleted since
            calls += 1
            for entry in results:
                if not checksum_ok(entry.content):
                    reporter.report("BAD", "checksum", entry.memory_id, entry.content[:80])
                if entry.memory_id not in seen:
                    seen[entry.memory_id] = entry.branch_name or ""
                    reporter.report("S", entry.memory_id, entry.branch_name or "", digest(entry.content))
        reporter.report("CALLS", str(calls))

    _guarded(report_path, body)


# ----------------------------------------------------------------------------- bounded memory


def peak_rss_growth(root: str, mode: str, out_path: str) -> None:
    """Read a catalog by ``mode`` ('scan' or 'index') and write the peak RSS growth in bytes."""
    import resource

    def body() -> None:
        from memstore.catalog import MemoryCatalog

        def peak() -> int:
            # ru_maxrss survives execve (it would report the parent's peak), so the
            # per-address-space high-water mark VmHWM is read when Linux offers it.
            try:
                status = Path("/proc/self/status").read_text()
            except OSError:
                return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

        warm = Path(root + "-warm")
        warm.mkdir(exist_ok=True)
        warm_catalog = MemoryCatalog(warm, use_index=(mode == "index"))
        warm_catalog.add("warm up the imports and sqlite")
        warm_catalog.search("warm")
        catalog = MemoryCatalog(root, use_index=(mode == "index"))
        before = peak()
        if mode == "index":
            catalog.reindex(full=True)
        results = catalog.search("needle", limit=5)
        health = catalog.health_report()
        after = peak()
        Path(out_path).write_text(
            f"{after - before}\t{len(results)}\t{health['corrupt_entries']}\t{health['total_entries']}"
        )

    _guarded(out_path, body)


# ----------------------------------------------------------------------------- index damage


def index_then_vanish(root: str, entries: int, report_path: str) -> None:
    """Add and query (so the index's WAL holds commits), then exit without closing anything.

    A reader holds a snapshot from the first query on, so the WAL cannot be folded back
    after the writes that follow (as when another process is reading at the time)."""

    def body() -> None:
        import sqlite3

        from memstore.catalog import MemoryCatalog

        catalog = MemoryCatalog(root)
        catalog.search("alpha")
        reader = sqlite3.connect(catalog.index_path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM doc").fetchone()
        for n in range(entries):
            catalog.add(f"wal entry {n} alpha")
            if n % 10 == 0:
                catalog.search("alpha")
        catalog.search("alpha")
        Path(report_path).write_text("done")
        os._exit(0)

    _guarded(report_path, body)
