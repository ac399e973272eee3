"""A worker process that parses byte ranges of one catalog file for a build (see memstore.index.lines).

A plain subprocess running this module, not multiprocessing: multiprocessing's spawn
re-imports the caller's ``__main__`` in the child, which runs an unguarded script a
second time.  The protocol is length-prefixed frames over the pipes: the parent sends
the file's path and identity once, then ``(start, stop)`` requests, as pickles; the worker
answers each, in order, with the ParsedRange of that range (marshalled, as
:meth:`ParsedRange.plain`), or ``None`` (and stops) when the path no longer names that
file.  Both ends are this module; nothing read from disk is ever unpickled or unmarshalled.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import memstore
from memstore.index.lines import ParsedRange

_LENGTH = struct.Struct("<Q")
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from memstore.index.line_worker import main; main()"
STOP_SECONDS = 5.0
ANSWER_SECONDS = 120.0
"""A worker that has not answered a range in this long is taken for hung (a range takes a second or
two): its ranges are parsed here instead, rather than the build waiting on it for ever."""


def _send(stream: IO[bytes], value: Any) -> None:
    _send_frame(stream, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _send_frame(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) != _LENGTH.size:
        raise EOFError("the other end closed the pipe")
    (length,) = _LENGTH.unpack(head)
    data = stream.read(length)
    if len(data) != length:
        raise EOFError("the other end closed the pipe mid-message")
    return pickle.loads(data)


def spawn(boot: str) -> subprocess.Popen[bytes] | None:
    """A Python subprocess running ``boot`` with this memstore importable, its pipes ours; None if it cannot start.

    Isolated (``-I``: no user site, no ``PYTHON*`` variables) and not a re-import of the
    caller's ``__main__``; its stderr is discarded, so a dying worker prints nothing.
    """
    root = str(Path(memstore.__file__).resolve().parent.parent)
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-c", boot, root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError:
        return None


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) != _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    data = stream.read(length)
    return data if len(data) == length else None


class LineWorker:
    """The parent's handle on one worker: ask for ranges, read the answers in the same order.

    A thread drains the worker's output as it comes (the pipe holds only 64 KiB, so a
    worker whose answers were not read would stop working ahead); the answers are
    unmarshalled by the caller, when it needs them.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.frames: queue.Queue[bytes | None] = queue.Queue()
        self.reader = threading.Thread(target=self._drain, name="memstore-parse-reader", daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        try:
            while (frame := _read_frame(stream)) is not None:
                self.frames.put(frame)
        except (OSError, ValueError):
            pass
        self.frames.put(None)

    @classmethod
    def start(cls, path: Path, identity: tuple[int, int]) -> LineWorker | None:
        """A running worker for the file ``path`` with (dev, ino) ``identity``; None when it cannot start."""
        process = spawn(_BOOT)
        if process is None:
            return None
        worker = cls(process)
        if not worker._write((str(path), identity)):
            return None
        return worker

    def _write(self, value: Any) -> bool:
        assert self.process.stdin is not None
        try:
            _send(self.process.stdin, value)
        except (OSError, ValueError):
            self.stop()
            return False
        return True

    def ask(self, start: int, stop: int) -> bool:
        """Queue the parse of bytes ``[start, stop)``; False when the worker is gone."""
        return self._write((start, stop))

    def answer(self) -> ParsedRange | None:
        """The next ParsedRange, in the order asked; None when the worker failed, stopped or hangs."""
        try:
            frame = self.frames.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            frame = None  # hung (stopped, or stuck mid-answer): the caller stops it and parses here
        if frame is None:
            self.frames.put(None)  # every later answer is None too
            return None
        try:
            plain = marshal.loads(frame)
            return None if plain is None else ParsedRange.from_plain(plain)
        except (EOFError, ValueError, TypeError):
            return None

    def stop(self) -> None:
        end_process(self.process, reader=self.reader)


def end_process(
    process: subprocess.Popen[bytes], *, reader: threading.Thread | None = None, seconds: float = STOP_SECONDS
) -> None:
    """Stop a worker: close its input (its signal to end), kill it if it lingers, then close its output.

    ``reader``, the thread draining its output, is joined before the output closes under it;
    each wait lasts ``seconds`` at most.
    """
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if reader is not None:
        reader.join(timeout=seconds)
    if process.stdout is not None:
        with contextlib.suppress(OSError):
            process.stdout.close()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off for one piece of work, back as it was afterwards, whatever happens.

    A parse or a load allocates millions of short-lived, acyclic objects (rows, term sets,
    id strings) that reference counting frees: the collector would walk the live ones again
    and again, about a quarter of the work's Python time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def main() -> None:
    """The worker's loop: parse each requested range of the file it was given, until told to stop."""
    from memstore.files import open_for_read
    from memstore.index.lines import parse_range

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    path, identity = _receive(stdin)
    fd = open_for_read(Path(path))
    try:
        st = os.fstat(fd) if fd is not None else None
        # A parse builds hundreds of thousands of tuples and frees them all when sent.
        with collector_paused():
            while True:
                try:
                    start, stop = _receive(stdin)
                except EOFError:
                    return
                if st is None or (st.st_dev, st.st_ino) != tuple(identity):
                    _send_frame(stdout, marshal.dumps(None))
                    return
                _send_frame(stdout, marshal.dumps(parse_range(fd, start, stop).plain()))  # type: ignore[arg-type]
    finally:
        if fd is not None:
            os.close(fd)
