"""Review round 23b: defects found attacking the marshal answers, the replayed schema, the proof thread and marks."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_index_lines import ranges_parsed_here

from memstore.catalog import MemoryCatalog
from memstore.index import line_worker, lines
from memstore.index.lines import ParsedRange, parse_range, parsed_ranges

_DIGEST = b"\x01" * 32


def _answer(plain: object) -> object:
    worker = line_worker.LineWorker.__new__(line_worker.LineWorker)
    worker.frames = queue.Queue()
    worker.frames.put(marshal.dumps(plain))
    return worker.answer()


@pytest.mark.parametrize(
    "plain",
    [
        ([], "90", 0, 0, None, None, (0, 90, _DIGEST, ())),  # end not an int
        ([], 90, None, 0, None, None, (0, 90, _DIGEST, ())),  # blank
        ([], 90, 0, 1.5, None, None, (0, 90, _DIGEST, ())),  # corrupt
        ([], 90, 0, 0, [90, 5], 95, (0, 95, _DIGEST, ())),  # tail a list, not a row
        ([], 90, 0, 0, None, "95", (0, 95, _DIGEST, ())),  # tail_end
        ([], 90, 0, 0, None, None, "abcd"),  # seen: four characters unpack into LinesSeen
        ([], 90, 0, 0, None, None, (0, 90, 7, ())),  # seen's digest not bytes
        ([], 90, 0, 0, None, None, (0, 90, _DIGEST, [(1, 2)])),  # skipped a list
        ([], 90, 0, 0, None, None, (0, 90, _DIGEST, ((1, "2"),))),  # a skipped line's end
        ([], True, 0, 0, None, None, None),  # a bool is not an offset
    ],
)
def test_an_answer_with_a_field_of_the_wrong_type_means_the_worker_failed(plain: object) -> None:
    """Only rows were checked: any other field of the wrong type became a ParsedRange whose use
    failed later in the build with an untyped TypeError (a traceback), not a range parsed here."""
    assert _answer(plain) is None


def test_a_well_formed_answer_still_comes_back_whole() -> None:
    row = (0, 40, "m\ud800", "", "", None, 0, None, None, "", "", 1)
    plain = ([row], 41, 1, 2, (41, 5, "t", "x", "", "z", 0, None, None, "", "", 0), 46, (0, 46, _DIGEST, ((3, 9),)))
    parsed = _answer(plain)
    assert parsed is not None
    assert isinstance(parsed, line_worker.ParsedRange)
    assert (parsed.rows, parsed.end, parsed.blank, parsed.corrupt, parsed.tail, parsed.tail_end) == (
        [row],
        41,
        1,
        2,
        plain[4],
        46,
    )
    assert parsed.seen is not None and tuple(parsed.seen) == (0, 46, _DIGEST, ((3, 9),))


def _catalog(path: Path, count: int = 300) -> Path:
    lines_out = [
        json.dumps({"memory_id": f"m{i}", "content": f"entry {i} word-", "created_at": "2026-01-01T00:00:00+00:00"})
        for i in range(count)
    ]
    path.write_bytes("\n".join(lines_out).encode() + b"\n")
    return path


def test_a_hung_worker_is_given_up_and_its_ranges_parsed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped mid-build (SIGSTOP, or stuck mid-answer) used to hang the build for ever:
    the answer was awaited without a bound."""
    source = _catalog(tmp_path / "memory.jsonl")
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 700)
    monkeypatch.setattr(line_worker, "ANSWER_SECONDS", 0.5, raising=False)
    monkeypatch.setattr(line_worker, "STOP_SECONDS", 0.5)
    started: list[line_worker.LineWorker] = []
    real_start = line_worker.LineWorker.start

    def start(path: Path, identity: tuple[int, int]) -> line_worker.LineWorker | None:
        worker = real_start(path, identity)
        if worker is not None:
            os.kill(worker.process.pid, signal.SIGSTOP)
            started.append(worker)
        return worker

    monkeypatch.setattr(line_worker.LineWorker, "start", staticmethod(start))
    fd = os.open(source, os.O_RDONLY)
    result: list[list[ParsedRange]] = []
    try:
        build = threading.Thread(target=lambda: result.append(list(parsed_ranges(source, fd, 0, os.fstat(fd).st_size))))
        build.daemon = True
        build.start()
        build.join(timeout=30)
        hung = build.is_alive()
    finally:
        for worker in started:
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
            worker.process.wait()
    try:
        assert not hung, "the build waited for ever on a stopped worker"
        assert started
        whole = parse_range(fd, 0, os.fstat(fd).st_size)
        assert [row for parsed in result[0] for row in parsed.rows] == whole.rows
        assert all(not worker.reader.is_alive() for worker in started)
    finally:
        os.close(fd)


_LATE_BUILD = """
import sys, threading
from memstore.catalog import MemoryCatalog

def late() -> None:
    started.wait()
    hits = MemoryCatalog(sys.argv[1]).search("caching", limit=100)
    print(len(hits), MemoryCatalog(sys.argv[1]).index_path.exists(), flush=True)

started = threading.Event()
threading.Thread(target=late).start()
started.set()  # the main thread returns: the interpreter starts shutting down, the thread goes on
"""


def test_a_first_build_on_a_thread_that_outlives_the_main_thread_answers(tmp_path: Path) -> None:
    """The build proved the file on a ThreadPoolExecutor: after the main thread returned (a server's
    worker thread finishing its work), importing or submitting to it raised RuntimeError ("can't
    register atexit after shutdown"), an untyped traceback where the scan and the old build answered."""
    catalog = MemoryCatalog(tmp_path, use_index=False)
    for number in range(30):
        catalog.add(f"entry {number} about caching")
    out = subprocess.run(
        [sys.executable, "-c", _LATE_BUILD, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.split() == ["30", "True"]


def _odd_line(rng: random.Random) -> bytes:
    """One line of a hostile catalog: odd text in every field, or a line that is not an entry."""
    alphabet = ["a", "-", "\x00", "\ud800", "\udfff", "é", "\u3000", " ", "\t", "\r", "\n", "\x01", "\x7f", "(", '"']
    alphabet += ["\\", "\U0001f600", "\u0301", "\x1c", "X"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))

    kind = rng.random()
    if kind < 0.05:
        return b""
    if kind < 0.08:
        return b"   \r"
    if kind < 0.10:
        return b"{bad"
    if kind < 0.12:
        return b'{"memory_id":"x","content":"y","created_at":"z","big":123456789012345678901234567890123,"f":1.5e308}'
    if kind < 0.13:
        return b'\xef\xbb\xbf{"memory_id":"bom","content":"y","created_at":"z"}'
    if kind < 0.14:
        return b'{"memory_id":"inv\xff","content":"y","created_at":"z"}'
    if kind < 0.15:
        return b'[1,2,{"a":[[[[]]]]}]'
    payload = {
        "memory_id": text() or "m",
        "content": text() or "c",
        "created_at": text() or "t",
        "tags": [text() for _ in range(rng.randint(0, 3))],
        "branch_name": rng.choice([None, text()]),
        "run_id": rng.choice([None, text()]),
    }
    line = json.dumps(payload, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    return line + b"\r" if rng.random() < 0.05 else line


def _fields(parsed: ParsedRange) -> tuple[object, ...]:
    return (parsed.rows, parsed.end, parsed.blank, parsed.corrupt, parsed.tail, parsed.tail_end, parsed.seen)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_field_of_hostile_lines_survives_the_trip_from_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Held in review: lone surrogates, NUL, CRLF, BOM, huge ints, invalid UTF-8, blank and torn lines
    come back from a worker exactly (values and types) as parse_range makes them here."""
    rng = random.Random(seed)
    tail = b'{"memory_id":"tail","content":"t\\ud800","created_at":"z"}'
    source = tmp_path / "memory.jsonl"
    source.write_bytes(b"\n".join(_odd_line(rng) for _ in range(1500)) + b"\n" + tail)
    monkeypatch.setattr(lines, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(lines, "RANGE_BYTES", 1500)
    parsed_here = ranges_parsed_here(monkeypatch)
    fd = os.open(source, os.O_RDONLY)
    try:
        ranges = list(parsed_ranges(source, fd, 0, os.fstat(fd).st_size))
        assert parsed_here == []
        for parsed in ranges:
            assert parsed.seen is not None
            here = parse_range(fd, parsed.seen.start, parsed.seen.stop)
            assert repr(_fields(parsed)) == repr(_fields(here))
            assert type(parsed.seen) is type(here.seen)
        assert ranges[-1].tail is not None
    finally:
        os.close(fd)


_LATE_DELETE = """
import sys, threading
from memstore.catalog import MemoryCatalog

catalog = MemoryCatalog(sys.argv[1])
for number in range(150):
    catalog.add(f"entry {number} about caching", branch_name="b" if number % 3 else "keep")
catalog.search("caching")

def late() -> None:
    started.wait()
    print(MemoryCatalog(sys.argv[1]).delete_by_branch("b"), flush=True)

started = threading.Event()
threading.Thread(target=late).start()
started.set()
"""


def test_a_delete_on_a_thread_that_outlives_the_main_thread_deletes(tmp_path: Path) -> None:
    """Pre-existing, same kind as the build's proof: a rewrite (delete_by_branch) on a thread still running
    after the main thread returned dies with RuntimeError ("can't register atexit after shutdown")."""
    out = subprocess.run(
        [sys.executable, "-c", _LATE_DELETE, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stdout.split() == ["100"]


def test_a_build_proves_the_file_here_when_no_thread_can_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of threads (RuntimeError "can't start new thread"): the proof runs after the word index, not never."""
    from memstore import background

    class NoThread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    catalog = MemoryCatalog(tmp_path, use_index=False)
    for number in range(40):
        catalog.add(f"entry {number} about caching", tags=["misc"])
    monkeypatch.setattr(background.threading, "Thread", NoThread)
    indexed = MemoryCatalog(tmp_path)
    assert [hit.memory_id for hit in indexed.search("caching", limit=50)] == [
        hit.memory_id for hit in MemoryCatalog(tmp_path, use_index=False, readonly=True).search("caching", limit=50)
    ]
    assert indexed.index_path.exists() and indexed.check_index().equal
