"""When a store asks its derived index, and when it answers from a scan instead.

Every store with an index (the catalog, the failure cards) follows one rule, so a
long-lived process (the MCP server, ``memstore watch``) behaves the same for both:

- a store opened with ``use_index=False`` never asks the index;
- a *busy* index (another process holds it past the busy timeout, or SQLite refused
  this one statement) answers only the call at hand from a scan: the next call asks
  again;
- any other failure (a damaged or unreadable index, a full disk) makes the store
  scan for RETRY_SECONDS and then ask again: a damaged or missing index is rebuilt
  on the next open, so giving it up for good would leave the process on scans.

The scan gives the same answers, so this decides speed, never results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from memstore.errors import IndexMigrationPendingError, IndexUnavailableError
from memstore.index.db import IndexBusyError
from memstore.logger import LazyLogger

log = LazyLogger(__name__)

IndexT = TypeVar("IndexT")
T = TypeVar("T")

RETRY_SECONDS = 30.0
"""After the index fails, reads scan for this long before trying the index again."""

clock: Callable[[], float] = time.monotonic
"""What the back-off is measured on (looked up on each use, so a test can replace it)."""


class IndexPolicy(Generic[IndexT]):
    """One store's use of its index: opened on first use, skipped while backing off after a failure.

    ``open_index`` makes the index (it is called once, lazily); None means the store
    was opened without an index.  ``source`` names the canonical file in log lines,
    ``fallback`` what answers instead (the shared index falls back to the local files).
    """

    def __init__(
        self,
        open_index: Callable[[], IndexT] | None,
        *,
        source: Path,
        retry_seconds: float = RETRY_SECONDS,
        fallback: str = "a scan",
    ) -> None:
        self._open_index = open_index
        self._source = source
        self._fallback = fallback
        self._retry_seconds = retry_seconds
        self._index: IndexT | None = None
        self._failure: IndexUnavailableError | None = None
        self._failed_at = 0.0

    @property
    def enabled(self) -> bool:
        """False for a store opened without an index (``use_index=False``)."""
        return self._open_index is not None

    @property
    def error(self) -> str | None:
        """Why the index failed, while the store is still answering from scans because of it."""
        return None if self._failure is None else str(self._failure)

    @property
    def failure(self) -> IndexUnavailableError | None:
        """The failure itself (its type tells an old schema awaiting migration from damage)."""
        return self._failure

    def index(self) -> IndexT | None:
        """The index to ask now, or None: disabled, or backing off after a failure."""
        if self._open_index is None:
            return None
        if self._failure is not None:
            if clock() - self._failed_at < self._retry_seconds:
                return None
            self._failure = None  # try again: a damaged or missing index heals itself
        if self._index is None:
            self._index = self._open_index()
        return self._index

    def failed(self, exc: IndexUnavailableError) -> None:
        """Record a failure of the index: busy ends this call only, anything else starts the back-off."""
        if isinstance(exc, IndexBusyError):
            log.info("memstore index busy for %s, answering this call from %s: %s", self._source, self._fallback, exc)
            return
        if isinstance(exc, IndexMigrationPendingError):  # healthy: a handle that may write migrates it
            log.info("memstore index of %s awaits migration; answering from %s: %s", self._source, self._fallback, exc)
        else:
            log.warning("memstore index unavailable for %s, answering from %s: %s", self._source, self._fallback, exc)
        # A fresh exception of the same kind: the raised one's traceback holds the frames of the
        # store that asked, a cycle that would keep every such store (and its files) until a gc pass.
        kind = IndexMigrationPendingError if isinstance(exc, IndexMigrationPendingError) else IndexUnavailableError
        self._failure = kind(str(exc))
        self._failed_at = clock()

    def ask(self, query: Callable[[IndexT], T]) -> T | None:
        """``query(index)``, or None when the index is not to be asked or fails (the caller scans)."""
        try:
            # Inside: an index that cannot even be opened (a missing driver) is a failure too.
            index = self.index()
            if index is None:
                return None
            return query(index)
        except IndexUnavailableError as exc:
            self.failed(exc)
            return None
