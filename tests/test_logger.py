"""memstore.logger: library messages import logging only when one is emitted, and still reach
the face's handler (the CLI's ``memstore: warning: ...`` on stderr)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from memstore import logger as lazy
from memstore.catalog import MemoryCatalog
from memstore.logger import LazyLogger, when_loaded


def test_a_message_reaches_the_named_logger_and_names_its_caller(caplog: pytest.LogCaptureFixture) -> None:
    log = LazyLogger("memstore.test_logger_probe")

    def refuse() -> None:
        log.warning("refused %s after %d tries", "alpha", 3)

    with caplog.at_level(logging.INFO, logger="memstore.test_logger_probe"):
        refuse()
        log.info("plain")
        log.debug("below the level")
    records = [r for r in caplog.records if r.name == "memstore.test_logger_probe"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "refused alpha after 3 tries"),
        (logging.INFO, "plain"),
    ]
    assert records[0].funcName == "refuse" and records[0].filename == "test_logger.py"


def test_with_logging_loaded_a_setup_runs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(lazy, "_pending", None)
    when_loaded(lambda: ran.append("now"))
    assert ran == ["now"] and lazy._pending is None


PENDING_PROBE = """
import sys
from memstore.logger import LazyLogger, when_loaded
log = LazyLogger("memstore.probe")
ran = []
when_loaded(lambda: ran.append("first"))
when_loaded(lambda: ran.append("second"))  # the newest face wins
print("loaded before the message:", "logging" in sys.modules, ran)
log.info("hello")
log.info("again")
print("loaded after the message:", "logging" in sys.modules, ran)
"""


def test_a_setup_waits_for_the_first_message_and_runs_once() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PENDING_PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.splitlines() == [
        "loaded before the message: False []",
        "loaded after the message: True ['second']",
    ]


def test_the_cli_still_prints_a_library_warning_on_stderr(tmp_path: Path) -> None:
    """The CLI's handler is set up lazily: an index that cannot be used still says so, in its format."""
    MemoryCatalog(tmp_path, use_index=False).add("alpha beta")
    (tmp_path / ".teaagent" / "index").write_text("not a folder\n")
    result = subprocess.run(
        [sys.executable, "-m", "memstore", "search", "alpha", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "alpha beta" in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("memstore: warning: memstore index unavailable for ")
