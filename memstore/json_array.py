"""JsonArrayFile: one JSON array on disk, changed by read-modify-write under a lock.

failures.json and pinned.json are both stored this way.  Every change reads the
array under the file's lock, lets the caller edit the list of records in place, and
rewrites the file atomically.  Records are kept exactly as parsed, so elements the
caller cannot use and keys it does not know (other tools, newer versions) survive
every rewrite.  A file that exists but is not a JSON array is copied aside to
``<name>.corrupt-<ns>`` before anything overwrites it: nothing is lost silently.

The file is repository content, so it is read only as a regular file of at most
MAX_JSON_FILE_BYTES, never through a link and never waiting on a FIFO.  Readers
see such a file as empty (warned); a writer refuses it with the typed error, since
it can neither keep a copy of what it could not read nor replace a link.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from memstore.errors import StorageError
from memstore.files import MAX_JSON_FILE_BYTES, FileLock, atomic_write, read_regular_file
from memstore.logger import LazyLogger

logger = LazyLogger(__name__)

T = TypeVar("T")


def parse_array(data: bytes) -> list[Any] | None:
    """The top-level JSON array in ``data`` (a UTF-8 BOM allowed), else ``None``."""
    try:
        parsed = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def encode_array(records: list[Any]) -> bytes:
    """The on-disk form: two-space indented JSON and a final newline."""
    return (json.dumps(records, indent=2) + "\n").encode("utf-8")


class JsonArrayFile:
    """One JSON-array file and the lock file that serialises its writers."""

    def __init__(self, path: Path, lock_path: Path, *, prepare: Callable[[], object] | None = None) -> None:
        self.path = Path(path)
        self.lock_path = Path(lock_path)
        self._lock = FileLock(self.lock_path)
        self._prepare = prepare

    def read_bytes(self, *, strict: bool = False) -> bytes | None:
        """The file's bytes; None when it is missing, or (unless ``strict``) cannot be read.

        ``strict`` (writers) raises ``StorageError`` (``NotRegularFileError`` for a
        link, FIFO, device or directory) for a file that exists but cannot be read.
        """
        try:
            return read_regular_file(self.path, max_bytes=MAX_JSON_FILE_BYTES)
        except FileNotFoundError:
            return None
        except StorageError as exc:
            if strict:
                raise
            logger.warning("cannot read %s: %s", self.path, exc)
            return None

    def read(self) -> list[Any]:
        """Every element in file order; ``[]`` when missing or not a JSON array (warned)."""
        return self._load()[0]

    def _load(self, *, strict: bool = False) -> tuple[list[Any], bytes | None]:
        """The records, plus the file's bytes when they exist but are not a JSON array."""
        data = self.read_bytes(strict=strict)
        if data is None:
            return [], None
        records = parse_array(data)
        if records is None:
            if not data.strip():
                return [], None
            logger.warning("ignoring %s: not a JSON array", self.path)
            return [], data
        return records, None

    def update(
        self,
        change: Callable[[list[Any]], tuple[T, bool]],
        *,
        store: Callable[[list[Any]], object] | None = None,
    ) -> T:
        """Run ``change`` on the records under the lock; rewrite the file if it says so.

        ``store`` replaces the plain rewrite (a caller that also updates an index
        passes one that calls :meth:`write`).  A file that is not a JSON array is
        copied aside before it is overwritten; one that cannot be read at all (not a
        regular file, too large, an I/O error) raises ``StorageError`` and stays as it is.
        """
        if self._prepare is not None:
            self._prepare()
        with self._lock:
            records, unreadable = self._load(strict=True)
            result, changed = change(records)
            if changed:
                if unreadable is not None:
                    self._keep_copy(unreadable)
                (store or self.write)(records)
            return result

    def replace(self, records: list[Any], *, store: Callable[[list[Any]], object] | None = None) -> None:
        """Overwrite the whole array under the lock (an unreadable old file is kept aside)."""
        self.update(lambda current: (None, _assign(current, records)), store=store)

    def write(self, records: list[Any]) -> os.stat_result:
        """Atomically replace the file with ``records``; the caller holds the lock."""
        return atomic_write(self.path, encode_array(records))

    def _keep_copy(self, data: bytes) -> Path:
        backup = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        atomic_write(backup, data)
        logger.warning("%s was not a JSON array; kept a copy at %s", self.path, backup)
        return backup


def _assign(current: list[Any], records: list[Any]) -> bool:
    current[:] = records
    return True
