"""What the index tells its callers: progress while it builds, a typed report when it is done.

Each report is a frozen dataclass whose ``to_dict()`` is the JSON document
``memstore ... --json`` prints and the MCP server returns, key for key, in the
order the human output lists them.  Callers read the fields; only the faces turn
a report into JSON.  Nothing here imports a store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memstore.errors import IndexMigrationPendingError, IndexUnavailableError

Progress = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``, called while a source is being indexed."""


@dataclass(frozen=True)
class RefreshReport:
    """What one refresh (catch-up or rebuild) of an indexed source did.

    ``action``: 'none' (already current), 'appended' (new lines indexed), 'rebuilt',
    'built' (a new index file) or 'missing' (no source file).  ``catch_up_seconds``
    is the time spent indexing, present when rows were indexed.
    """

    source: str
    action: str
    rows: int
    seconds: float
    catch_up_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.action == "missing":
            return {"source": self.source, "action": self.action, "rows": self.rows, "seconds": self.seconds}
        document: dict[str, Any] = {"action": self.action, "rows": self.rows}
        if self.catch_up_seconds is not None:
            document["catch_up_seconds"] = self.catch_up_seconds
        document.update(source=self.source, seconds=self.seconds)
        return document


@dataclass(frozen=True)
class SourceStatus:
    """How far the index is behind one canonical file (``memstore status``).

    ``state``: 'fresh', 'behind', 'not indexed' or 'missing' (no source file).
    ``corrupt_lines`` is known once the source has been indexed.
    """

    source: str
    source_bytes: int
    index_path: str
    index_bytes: int
    state: str
    entries: int
    bytes_indexed: int
    bytes_behind: int
    corrupt_lines: int | None = None

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "source": self.source,
            "source_bytes": self.source_bytes,
            "index_path": self.index_path,
            "index_bytes": self.index_bytes,
            "state": self.state,
            "entries": self.entries,
        }
        if self.corrupt_lines is not None:
            document["corrupt_lines"] = self.corrupt_lines
        document.update(bytes_indexed=self.bytes_indexed, bytes_behind=self.bytes_behind)
        return document


@dataclass(frozen=True)
class IndexOff:
    """The state of an index a store does not ask: 'disabled' (opened without one), 'unavailable',
    or 'old schema' (a read-only handle found a healthy index that the next writable open migrates).

    The catalog's report names no ``source`` (its health report names the file) and
    always says ``error``, None included; a source row of the failure cards names its
    file and says ``error`` only when there is one.
    """

    state: str
    error: str | None = None
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.source is None:
            return {"state": self.state, "error": self.error}
        document: dict[str, Any] = {"state": self.state, "source": self.source}
        if self.error is not None:
            document["error"] = self.error
        return document

    @classmethod
    def after(cls, failure: IndexUnavailableError | None, *, source: str | None = None) -> IndexOff:
        """The state an index failure leaves: an old schema awaiting its migration is not damage."""
        state = "old schema" if isinstance(failure, IndexMigrationPendingError) else "unavailable"
        return cls(state, None if failure is None else str(failure), source)


IndexState = SourceStatus | IndexOff
"""What a store says about its index: a status when it could ask, else why not."""


@dataclass(frozen=True)
class CheckResult:
    """``reindex --check``: whether the index equals a fresh scan of the file, and a one-line summary.

    ``indexed`` and ``scanned`` (row counts) are absent when there was no file to compare.
    """

    equal: bool
    summary: str
    indexed: int | None = None
    scanned: int | None = None

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"equal": self.equal, "summary": self.summary}
        if self.indexed is not None:
            document["indexed"] = self.indexed
        if self.scanned is not None:
            document["scanned"] = self.scanned
        return document
