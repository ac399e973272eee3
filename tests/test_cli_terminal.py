"""The command on a real terminal (a pseudo-terminal): tables fit its width, deletes ask first."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from memstore.catalog import MemoryCatalog
from memstore.cli_output import display_width

CONTENTS = [
    "漢字のメモ：データベースの移行は必ずバックアップの後で行うこと。" * 3,
    "emoji 😀🚀🎉 in a note that goes on and on " * 4,
    "plain ascii note " * 10,
    "mixed 한국어 text and ｆｕｌｌｗｉｄｔｈ letters " * 3,
]


def on_terminal(root: Path, columns: int, *args: str, answer: bytes | None = None) -> tuple[int, str]:
    """Run memstore with stdin, stdout and stderr on a pty of ``columns`` columns; returns (code, screen)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(HOME=str(root.parent / "home"), PYTHONIOENCODING="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "memstore", "--root", str(root), *args],
                               stdin=terminal, stdout=terminal, stderr=terminal, env=env, start_new_session=True)
    os.close(terminal)
    screen = b""
    answered = answer is None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the other side closed
                    break
                if not chunk:
                    break
                screen += chunk
                if not answered and b"[y/N]" in screen:
                    os.write(controller, answer)  # type: ignore[arg-type]
                    answered = True
            elif process.poll() is not None:
                break
        code = process.wait(timeout=30)
    finally:
        with contextlib.suppress(OSError):
            os.close(controller)
    return code, screen.decode("utf-8").replace("\r\n", "\n")


@pytest.mark.parametrize("columns", [80, 200])
def test_tables_fit_the_terminal_width(tmp_path: Path, columns: int) -> None:
    catalog = MemoryCatalog(tmp_path)
    for content in CONTENTS:
        catalog.add(content, tags=["タグ", "emoji-😀"])
    catalog.reindex()  # built now, so no progress bar shares the screen
    code, screen = on_terminal(tmp_path, columns, "list")
    assert code == 0, screen
    lines = [line for line in screen.split("\n") if line]
    assert len(lines) == 1 + len(CONTENTS), screen  # one line per row: nothing wraps
    assert all(display_width(line) <= columns for line in lines), [display_width(line) for line in lines]
    if columns == 80:
        assert all(line.endswith("…") for line in lines[1:])
    else:
        assert any(not line.endswith("…") for line in lines[1:])


def test_delete_asks_on_a_terminal(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for i in range(3):
        catalog.add(f"note {i}", branch_name="main")
    code, screen = on_terminal(tmp_path, 80, "delete", "--branch", "main", answer=b"n\n")
    assert code == 1 and re.search(r"delete 3 entries of branch 'main'\? \[y/N\]", screen), screen
    assert "nothing deleted" in screen and len(catalog.list()) == 3
    code, screen = on_terminal(tmp_path, 80, "delete", "--branch", "main", answer=b"y\n")
    assert code == 0 and "deleted 3 entries" in screen and catalog.list() == []


def test_yes_skips_the_question_on_a_terminal(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("note", branch_name="main")
    code, screen = on_terminal(tmp_path, 80, "quarantine", "--branch", "main", "--reason", "r", "--yes")
    assert code == 0 and "[y/N]" not in screen and "quarantined 1 entry" in screen
