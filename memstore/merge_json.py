"""Three-way merge of the JSON-array files (failures.json, pinned.json) for git.

``memstore merge-json %O %A %B`` is registered as a git merge driver by
``memstore init --git``.  A line-based merge would break a JSON array (both sides
append before the same closing bracket), and a union of lines would corrupt it, so
records are merged by identity: a card by ``id``, a pin by its normalised
``file_path``, anything else by its exact JSON.  Records added on either side are
kept; a record deleted on one side and untouched on the other is deleted; for a
record both sides changed, the newer one wins (see :func:`newness`).
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
from pathlib import Path
from typing import Any

from memstore.errors import InvalidArgumentError, StorageError
from memstore.files import atomic_write
from memstore.json_array import encode_array, parse_array
from memstore.layout import MERGE_DRIVER

DRIVER_COMMAND = "memstore merge-json %O %A %B"

TIME_KEYS = ("last_modified", "pinned_at", "timestamp", "updated_at")


class UnmergeableError(InvalidArgumentError):
    """One side is not a JSON array: git must leave the conflict to a person (or ``doctor``)."""


def record_key(record: Any) -> str:
    """What identifies a record across branches."""
    if isinstance(record, dict):
        card_id = record.get("id")
        if isinstance(card_id, str) and card_id.strip():
            return "id:" + card_id.strip()
        path = record.get("file_path")
        if isinstance(path, str) and path:
            return "path:" + posixpath.normpath(path.replace("\\", "/"))
    return "raw:" + json.dumps(record, sort_keys=True)


def newness(record: Any) -> tuple[float, int]:
    """Which of two edits of one record is newer: its latest timestamp, then invalidation (permanent)."""
    if not isinstance(record, dict):
        return (float("-inf"), 0)
    times = [
        float(value)
        for key in TIME_KEYS
        if isinstance(value := record.get(key), (int, float)) and not isinstance(value, bool)
    ]
    finite = [value for value in times if value == value and abs(value) != float("inf")]
    return (max(finite, default=float("-inf")), 1 if record.get("invalidated") is True else 0)


def merge_arrays(base: list[Any], ours: list[Any], theirs: list[Any]) -> list[Any]:
    """The merged records: ours in order (with their merged versions), then what only theirs added.

    A side may hold one key more than once (``append`` does not refuse a known card
    id): the n-th record of a key is matched with the n-th of the other sides, so no
    copy is dropped and a copy deleted on one side stays deleted.
    """
    base_by = _by_key(base)
    ours_by = _by_key(ours)
    theirs_by = _by_key(theirs)
    merged: list[Any] = []
    for key in [*ours_by, *(key for key in theirs_by if key not in ours_by)]:
        winner = _resolve(base_by.get(key, _MISSING), ours_by.get(key, _MISSING), theirs_by.get(key, _MISSING))
        if winner is not _MISSING:
            merged.append(winner)
    return merged


_MISSING: Any = object()


def _by_key(records: list[Any]) -> dict[tuple[str, int], Any]:
    """Records by (key, how many records of that key came before it), in file order."""
    out: dict[tuple[str, int], Any] = {}
    seen: dict[str, int] = {}
    for record in records:
        key = record_key(record)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        out[(key, occurrence)] = record
    return out


def _resolve(base: Any, ours: Any, theirs: Any) -> Any:
    if ours is _MISSING and theirs is _MISSING:
        return _MISSING
    if theirs is _MISSING:
        return _MISSING if base is not _MISSING and ours == base else ours
    if ours is _MISSING:
        return _MISSING if base is not _MISSING and theirs == base else theirs
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return theirs if newness(theirs) > newness(ours) else ours


def _read_side(path: Path) -> list[Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if not data.strip():
        return []
    records = parse_array(data)
    if records is None:
        raise UnmergeableError(f"{path} is not a JSON array")
    return records


def merge_files(base: Path, ours: Path, theirs: Path) -> int:
    """git's merge-driver contract: the result replaces ``ours``; returns how many records it holds.

    :class:`UnmergeableError` (nothing written) when a side is not a JSON array.
    """
    merged = merge_arrays(_read_side(base), _read_side(ours), _read_side(theirs))
    atomic_write(ours, encode_array(merged))
    return len(merged)


def register_driver(root: str | os.PathLike[str]) -> str:
    """Define the ``memstore-json`` merge driver in the git config of the repository holding ``root``.

    ``.teaagent/.gitattributes`` names the driver for the JSON arrays; git reads the
    command from the repository's config, which is not versioned, so each clone
    registers it once.  Returns the registered command.
    """
    settings = {
        f"merge.{MERGE_DRIVER}.name": "memstore: JSON arrays merged by id",
        f"merge.{MERGE_DRIVER}.driver": DRIVER_COMMAND,
    }
    for key, value in settings.items():
        try:
            result = subprocess.run(
                ["git", "-C", str(root), "config", "--local", key, value],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
        except OSError as exc:
            raise StorageError(exc.errno or 1, f"cannot run git: {exc.strerror or exc}") from exc
        if result.returncode != 0:
            message = " ".join(result.stderr.split()) or f"git config exited {result.returncode}"
            raise InvalidArgumentError(f"cannot register the merge driver in {root}: {message}")
    return DRIVER_COMMAND
