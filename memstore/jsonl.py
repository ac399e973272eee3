"""Parsing catalog lines exactly as the stdlib would, fast when orjson is present.

orjson is only a fast path: whenever it refuses a line (NaN, lone surrogates,
huge numbers, deep nesting) the stdlib parser decides, so results never depend on
whether orjson is installed.  For catalog entries the two agree on every line
orjson accepts, because every field that matters must be a string.
"""

from __future__ import annotations

import json
from typing import Any

from memstore.models import MemoryEntry, memory_entry_from_payload

_orjson: Any
try:  # pragma: no cover - exercised by both CI variants
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None


def parse_json_bytes(data: bytes) -> Any:
    """Parse one line as ``json.loads(data.decode('utf-8'))`` would; raise ValueError if invalid."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except ValueError:
            pass
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def decode_entry(data: bytes | None) -> MemoryEntry | None:
    """The entry a raw line holds, or ``None`` for a blank, corrupt or invalid line."""
    if data is None:
        return None
    try:
        payload = parse_json_bytes(data)
    except ValueError:
        return None
    return memory_entry_from_payload(payload)


def is_blank(data: bytes | None) -> bool:
    """Blank lines are skipped silently; everything else that fails to parse is corrupt."""
    return data is not None and not data.strip()


def encode_entry(entry: MemoryEntry, **extra: Any) -> bytes:
    """The on-disk form: ``json.dumps(..., sort_keys=True)`` with default separators, plus newline."""
    payload = entry.to_dict()
    payload.update(extra)
    return (json.dumps(payload, sort_keys=True) + "\n").encode("utf-8")
