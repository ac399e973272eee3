"""Review round 23: the rewrite's new file written ``O_DIRECT`` and proven by direct reads.

Each test reproduces a defect found by the review of the change that added
``memstore/direct_io.py`` (or guards an attack that held but had no test).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from memstore import direct_io
from memstore.direct_io import read_direct


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
