"""Shared fixtures: no test may touch the real home directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Tests never assert wall-clock time: hypothesis's per-example deadline is one, and it fails
# on a loaded machine (a first call that imports or builds an index).  Examples stay bounded
# by max_examples.
settings.register_profile("memstore", deadline=None)
settings.load_profile("memstore")


def _point_home_at(mp: pytest.MonkeyPatch, home: Path) -> None:
    mp.setenv("HOME", str(home))
    mp.setattr(Path, "home", classmethod(lambda cls: cls(home)))


@pytest.fixture(autouse=True, scope="session")
def _session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test runs with HOME in a temp dir (session-scoped, so hypothesis tests may use it)."""
    home = tmp_path_factory.mktemp("session-home")
    with pytest.MonkeyPatch.context() as mp:
        _point_home_at(mp, home)
        yield home


@pytest.fixture
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty home directory for this test: ``Path.home()`` and ``$HOME`` point at it."""
    path = tmp_path_factory.mktemp("home")
    _point_home_at(monkeypatch, path)
    return path
