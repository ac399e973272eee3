"""Run a call that must not block, with a generous limit, so a regression fails instead of hanging."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

LIMIT_SECONDS = 120.0
"""Not a speed assertion: a call that blocks on a FIFO or reads /dev/zero never returns at all."""


def run_bounded(func: Callable[..., T], *args: Any, timeout: float = LIMIT_SECONDS, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in a daemon thread; AssertionError if it has not returned in ``timeout``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = func(*args, **kwargs)
        except BaseException as exc:  # handed back to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{getattr(func, '__name__', func)} did not return within {timeout} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]
