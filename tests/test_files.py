"""Durable file primitives: the lock, appends, atomic rewrites and line reading."""

from __future__ import annotations

import errno
import multiprocessing
import os
import stat
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import files
from memstore.errors import LockError, MemstoreError, StorageError
from memstore.files import (
    FileLock,
    RawLine,
    append_line,
    atomic_write,
    ensure_dir,
    iter_raw_lines,
    open_for_read,
    remove_stale_temps,
)
from tests.lock_probe import lock_is_free

SPAWN = multiprocessing.get_context("spawn")


def read_lines(path: Path, **kwargs: int) -> list[RawLine]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(iter_raw_lines(fd, **kwargs))
    finally:
        os.close(fd)


def temp_files(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


# ---------------------------------------------------------------- FileLock


def _child_try_lock(path: str, queue: multiprocessing.Queue[bool]) -> None:
    queue.put(lock_is_free(path))


def _run_child_try_lock(path: Path) -> bool:
    queue: multiprocessing.Queue[bool] = SPAWN.Queue()
    child = SPAWN.Process(target=_child_try_lock, args=(str(path), queue))
    child.start()
    result = queue.get(timeout=60)
    child.join(timeout=60)
    return result


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    lock_path = tmp_path / "memory.lock"
    lock = FileLock(lock_path)
    with lock:
        assert _run_child_try_lock(lock_path) is False
    assert _run_child_try_lock(lock_path) is True
    assert lock_path.exists()  # the lock file is never deleted


def _increment_counter(lock_path: str, counter_path: str, rounds: int) -> None:
    """Read-modify-write a counter under the lock, with a yield between read and write."""
    lock = FileLock(Path(lock_path))
    for _ in range(rounds):
        with lock:
            value = int(Path(counter_path).read_text() or "0")
            time.sleep(0.0005)  # widen the race window; correctness must not depend on it
            Path(counter_path).write_text(str(value + 1))


def test_lock_serialises_processes_read_modify_write(tmp_path: Path) -> None:
    lock_path, counter = tmp_path / "c.lock", tmp_path / "counter"
    counter.write_text("0")
    workers = [
        SPAWN.Process(target=_increment_counter, args=(str(lock_path), str(counter), 40)) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    assert counter.read_text() == "120"


@pytest.mark.parametrize("keep_open", [False, True])
@pytest.mark.parametrize("shared_instance", [True, False])
def test_lock_serialises_threads(tmp_path: Path, shared_instance: bool, keep_open: bool) -> None:
    lock_path, counter = tmp_path / "c.lock", tmp_path / "counter"
    counter.write_text("0")
    shared = FileLock(lock_path, keep_open=keep_open)
    errors: list[BaseException] = []

    def work() -> None:
        lock = shared if shared_instance else FileLock(lock_path, keep_open=keep_open)
        try:
            for _ in range(30):
                with lock:
                    value = int(counter.read_text())
                    time.sleep(0.0002)
                    counter.write_text(str(value + 1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert counter.read_text() == "120"


def _fds_to(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(path))
    return count


def test_a_kept_lock_descriptor_opens_the_file_once_and_still_excludes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_path = tmp_path / "memory.lock"
    lock = FileLock(lock_path, keep_open=True)
    opens = []
    real_open = os.open

    def counting_open(path: object, *args: object, **kwargs: object) -> int:
        opens.append(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os, "open", counting_open)
    for _ in range(3):
        with lock:
            assert _run_child_try_lock(lock_path) is False
        assert _run_child_try_lock(lock_path) is True  # released, though the descriptor stays open
    assert opens == [lock_path]
    assert _fds_to(lock_path) == 1
    del lock
    assert _fds_to(lock_path) == 0  # closed with the lock


def test_a_kept_lock_descriptor_is_dropped_when_its_file_loses_its_name(tmp_path: Path) -> None:
    """A lock file deleted or replaced since: locking the old one would exclude nobody who opens the name."""
    lock_path = tmp_path / "memory.lock"
    lock = FileLock(lock_path, keep_open=True)
    with lock:
        pass
    os.unlink(lock_path)
    with lock:
        assert lock_path.exists()
        assert _run_child_try_lock(lock_path) is False  # the file others open now is the one held
    replacement = tmp_path / "planted"
    replacement.write_bytes(b"")
    os.replace(replacement, lock_path)
    with lock:
        assert _run_child_try_lock(lock_path) is False
    assert _fds_to(tmp_path) == 1  # the orphans' descriptors were closed


def test_a_forked_child_does_not_lock_through_the_parents_kept_descriptor(tmp_path: Path) -> None:
    """The child's copy shares the parent's open file description: flock on it succeeds while the parent holds it."""
    lock_path = tmp_path / "memory.lock"
    lock = FileLock(lock_path, keep_open=True)
    with lock:
        pass  # kept, unlocked, when the process forks
    held_r, held_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            os.close(held_w)
            os.read(held_r, 1)  # the parent holds the lock now, through the kept descriptor
            try:
                lock.acquire(wait=0.05)
                code = 2  # taken while the parent holds it
            except LockError:
                code = 0
        finally:
            os._exit(code)
    os.close(held_r)
    with lock:
        os.write(held_w, b"x")
        _, status = os.waitpid(pid, 0)
    os.close(held_w)
    assert os.WEXITSTATUS(status) == 0


def test_lock_is_not_reentrant_in_one_thread(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "x.lock")
    with lock:
        with pytest.raises(LockError) as info:
            lock.acquire()
        assert info.value.errno == errno.EDEADLK
    lock.acquire()  # released properly, can be taken again
    lock.release()
    lock.release()  # releasing twice is harmless


def test_lock_file_mode_and_open_failure(tmp_path: Path) -> None:
    lock_path = tmp_path / "private.lock"
    with FileLock(lock_path, mode=0o600):
        pass
    assert stat.S_IMODE(os.stat(lock_path).st_mode) & 0o077 == 0
    with pytest.raises(LockError), FileLock(tmp_path / "missing-dir" / "x.lock"):
        pass  # pragma: no cover


# ---------------------------------------------------------------- append_line


def test_append_creates_the_file_and_appends_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    first = append_line(path, b'{"a": 1}')
    second = append_line(path, b'{"b": 2}\n')
    assert path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert (first.start, first.end) == (0, 9)
    assert (second.start, second.end) == (9, 18)


def test_append_adds_a_newline_when_the_file_lacks_one(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}')  # an existing file whose last line has no newline
    result = append_line(path, b'{"b": 2}\n')
    assert path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert path.read_bytes()[result.start : result.end] == b'{"b": 2}\n'


def test_append_to_an_empty_file_adds_no_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"")
    append_line(path, b"x")
    assert path.read_bytes() == b"x\n"


def test_append_new_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "private.jsonl"
    append_line(path, b"x", mode=0o600)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_append_fsyncs_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    append_line(path, b"x")
    assert os.stat(path).st_ino in synced


def test_append_failed_fsync_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError) as info:
        append_line(path, b"x")
    assert info.value.errno == errno.EIO
    assert isinstance(info.value, OSError) and isinstance(info.value, MemstoreError)


def test_append_failed_write_truncates_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"old\n")
    real_write = os.write
    calls = 0

    def short_then_failing_write(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data[:3]))  # a short write ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk fills

    monkeypatch.setattr(os, "write", short_then_failing_write)
    with pytest.raises(StorageError) as info:
        append_line(path, b"new line that will not fit")
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"old\n"  # no torn line left behind


# ---------------------------------------------------------------- atomic_write


def test_atomic_write_replaces_content_and_keeps_mode(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o600)
    result = atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert result.st_size == 4 and result.st_ino == os.stat(path).st_ino
    assert temp_files(tmp_path) == []


def test_atomic_write_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "fresh.json"
    atomic_write(path, b"[]\n", mode=0o600)
    assert path.read_bytes() == b"[]\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_atomic_write_uses_os_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"old\n")
    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        replaced.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    atomic_write(path, b"new\n")
    assert len(replaced) == 1 and replaced[0][1] == str(path)
    assert Path(replaced[0][0]).parent == tmp_path  # the temp file lives beside the target


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_atomic_write_failure_leaves_old_content_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"old content\n")

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(StorageError):
        atomic_write(path, b"new content\n")
    monkeypatch.undo()
    assert path.read_bytes() == b"old content\n"
    assert temp_files(tmp_path) == []


def test_remove_stale_temps_only_removes_this_files_temps(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    (tmp_path / ".memory.jsonl.123.abc.tmp").write_bytes(b"x")
    (tmp_path / ".other.jsonl.123.abc.tmp").write_bytes(b"x")
    (tmp_path / "memory.jsonl").write_bytes(b"keep")
    assert remove_stale_temps(path) == 1
    assert sorted(os.listdir(tmp_path)) == [".other.jsonl.123.abc.tmp", "memory.jsonl"]


def test_ensure_dir_private_and_open_for_read(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    ensure_dir(directory, private=True)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert open_for_read(directory / "missing") is None
    assert open_for_read(tmp_path / "not-a-dir" / "x") is None
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError):
        ensure_dir(tmp_path / "file" / "sub")  # a regular file is in the way


# ---------------------------------------------------------------- iter_raw_lines


def test_lines_offsets_and_final_unterminated_line(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one\n\ntwo\r\nthree")
    assert read_lines(path) == [
        RawLine(0, 4, b"one", True),
        RawLine(4, 5, b"", True),
        RawLine(5, 10, b"two\r", True),
        RawLine(10, 15, b"three", False),
    ]


def test_lines_split_on_newline_only(tmp_path: Path) -> None:
    path = tmp_path / "f"
    tricky = "a\rb\x85c\u2028d\u2029e\x0bf\x0cg\x1ch".encode()
    path.write_bytes(tricky + b"\n" + b"\xff\xfe invalid utf-8\n")
    lines = read_lines(path)
    assert [line.data for line in lines] == [tricky, b"\xff\xfe invalid utf-8"]


def test_lines_start_and_stop(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"aa\nbb\ncc\n")
    assert read_lines(path, start=3) == [RawLine(3, 6, b"bb", True), RawLine(6, 9, b"cc", True)]
    assert read_lines(path, start=3, stop=7) == [RawLine(3, 6, b"bb", True), RawLine(6, 7, b"c", False)]
    assert read_lines(path, start=9) == []


@settings(max_examples=200)
@given(
    data=st.lists(st.binary(max_size=12) | st.sampled_from([b"\n", b"\r\n", b"\r", b"\n\n"]), max_size=12),
    chunk=st.sampled_from([1, 2, 3, 7, 1 << 20]),
)
def test_lines_reconstruct_the_file(
    tmp_path_factory: pytest.TempPathFactory, data: list[bytes], chunk: int
) -> None:
    content = b"".join(data)
    path = tmp_path_factory.mktemp("lines") / "f"
    path.write_bytes(content)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(files, "READ_CHUNK", chunk)
        lines = read_lines(path)
    expected = content.split(b"\n")
    if expected[-1] == b"":
        expected.pop()  # a final newline ends the last line, it does not start an empty one
    assert [line.data for line in lines] == expected
    position = 0
    for line in lines:
        assert line.start == position
        assert line.data is not None
        assert content[line.start : line.end] == line.data + (b"\n" if line.terminated else b"")
        position = line.end
    assert position == len(content)
    assert all(line.terminated for line in lines[:-1])
    if lines:
        assert lines[-1].terminated == content.endswith(b"\n")


def test_oversized_line_spanning_chunks_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 16)
    monkeypatch.setattr(files, "READ_CHUNK", 8)
    path = tmp_path / "f"
    path.write_bytes(b"short\n" + b"x" * 100 + b"\nafter\n" + b"y" * 50)
    assert read_lines(path) == [
        RawLine(0, 6, b"short", True),
        RawLine(6, 107, None, True),
        RawLine(107, 113, b"after", True),
        RawLine(113, 163, None, False),
    ]


def test_oversized_line_within_one_chunk_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 16)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100 + b"\nok\n")
    assert read_lines(path) == [RawLine(0, 101, None, True), RawLine(101, 104, b"ok", True)]


def test_oversized_line_is_read_in_bounded_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(files, "READ_CHUNK", 1024)
    path = tmp_path / "f"
    huge = 8 * 1024 * 1024
    with open(path, "wb") as handle:
        handle.write(b"{")
        handle.truncate(huge)  # a sparse 8 MiB line of NULs
    with open(path, "ab") as handle:
        handle.write(b"\nnext\n")
    fd = os.open(path, os.O_RDONLY)
    tracemalloc.start()
    try:
        lines = [(line.start, line.end, line.data) for line in iter_raw_lines(fd)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        os.close(fd)
    assert lines == [(0, huge + 1, None), (huge + 1, huge + 6, b"next")]
    assert peak < 256 * 1024  # far below the 8 MiB line


def test_a_lock_kept_open_until_interpreter_exit_closes_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept lock descriptor collected while the interpreter tears its modules down prints nothing.

    Teardown sets module globals to None in no fixed order; this sets the ones ``__del__`` uses.
    """
    import gc
    import sys

    lock = FileLock(tmp_path / "memory.lock", keep_open=True)
    with lock:
        pass
    kept = lock._local.kept
    fd = kept.fd
    raised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    with monkeypatch.context() as torn_down:
        for name in ("os", "_KEPT_FDS"):
            torn_down.setattr(files, name, None)
        del lock, kept
        gc.collect()
    assert raised == []
    os.close(fd)  # left open: at exit the process closes it
    files._KEPT_FDS.discard(fd)
