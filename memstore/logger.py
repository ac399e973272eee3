"""A module logger that imports :mod:`logging` with its first message.

:mod:`logging` brings traceback, tokenize, textwrap and string (~5 ms of import), and a search
of a current index logs nothing: every library module logs through a :class:`LazyLogger`, so
the face that shows messages (the CLI's stderr handler) is set up by :func:`when_loaded` just
before the first one is emitted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

_pending: Callable[[], None] | None = None


def when_loaded(setup: Callable[[], None]) -> None:
    """Run ``setup`` (configure handlers) now if logging is loaded, else before the first message.

    A later call replaces a setup that has not run yet: the newest face's handlers win.
    """
    global _pending
    if "logging" in sys.modules:
        _pending = None
        setup()
    else:
        _pending = setup


class LazyLogger:
    """``logging.getLogger(name)``, fetched when the first message is logged."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    def logger(self) -> logging.Logger:
        if self._logger is None:
            global _pending
            import logging

            setup, _pending = _pending, None
            if setup is not None:
                setup()
            self._logger = logging.getLogger(self.name)
        return self._logger

    # stacklevel=2: the record names the caller, as a plain module logger would.
    def debug(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self.logger().debug(msg, *args, exc_info=exc_info, stacklevel=2)

    def info(self, msg: str, *args: object) -> None:
        self.logger().info(msg, *args, stacklevel=2)

    def warning(self, msg: str, *args: object) -> None:
        self.logger().warning(msg, *args, stacklevel=2)

    def error(self, msg: str, *args: object) -> None:
        self.logger().error(msg, *args, stacklevel=2)

    def exception(self, msg: str, *args: object) -> None:
        self.logger().exception(msg, *args, stacklevel=2)
