"""Parsing catalog lines exactly as the stdlib would, fast when orjson is present.

orjson is only a fast path: whenever it refuses a line (NaN, lone surrogates,
numbers out of a double's range, deep nesting) the stdlib parser decides.  It does
accept an integer beyond 64 bits, as a float: for catalog entries the two still agree
on every line, because every field that matters must be a string; values shown as
they are (provenance) are parsed with ``exact``.  Nesting is the one thing the stdlib
refuses first: its limit is the recursion limit less the stack in use, so a line it
finds too deep goes to orjson (1024 levels, wherever it is called from) when installed.

A line may start with a UTF-8 byte order mark (editors put one at the start of a
file); it is dropped before parsing, as ``bytes.decode('utf-8-sig')`` would.  This
is the one place lines are decoded, so the scan, the index and the writers agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from memstore.errors import ArgumentTypeError, InvalidArgumentError
from memstore.models import MemoryEntry, memory_entry_from_payload

BOM = b"\xef\xbb\xbf"
MAX_EXTRA_DEPTH = 64
"""How deeply a written line's extra values (provenance) may nest: far inside what every
reader parses (orjson stops at 1024 levels, the stdlib at its recursion limit), so an
acknowledged line is always readable."""

STDLIB_FIRST_LINES = 64
"""Lines a process parses with the stdlib before it imports orjson.

Importing orjson loads uuid, platform, dataclasses and inspect (~4 ms), more than the
stdlib takes for the few lines a search answers with; a scan or a build passes this
count at once and runs on orjson from there.  Either parser gives the same payloads.
"""

_orjson: Any = None
"""The orjson module once loaded; None before that; False when it is not installed."""
_stdlib_lines = 0


def load_orjson() -> Any:
    """Import orjson now (False when it is not installed); parsing uses it from here on."""
    global _orjson
    if _orjson is None:
        try:  # pragma: no cover - exercised by both CI variants
            import orjson
        except ImportError:  # pragma: no cover
            _orjson = False
        else:
            _orjson = orjson
    return _orjson


def _fast_parser() -> Any:
    """orjson once STDLIB_FIRST_LINES lines were parsed without it, else None (or False)."""
    global _stdlib_lines
    _stdlib_lines += 1
    return load_orjson() if _stdlib_lines > STDLIB_FIRST_LINES else None


def parse_json_bytes(data: bytes, *, exact: bool = False) -> Any:
    """Parse one line as ``json.loads(data.decode('utf-8-sig'))`` would; raise ValueError if invalid.

    orjson reads an integer beyond 64 bits as a float: harmless to an entry (no field is a
    number), not to values shown as they are (provenance), which pass ``exact`` for the stdlib.
    """
    if data.startswith(BOM):
        data = data[len(BOM) :]
    fast = None if exact else _orjson if _orjson is not None else _fast_parser()
    if fast:
        try:
            return fast.loads(data)
        except ValueError:
            pass
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError as exc:
        # The stdlib's depth limit is the recursion limit less the stack in use, orjson's a
        # fixed 1024: a line orjson takes is read so in a process's first lines too.
        deeper = None if exact or fast is not None else load_orjson()
        if deeper:
            return deeper.loads(data)
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


def is_json(data: bytes | None) -> bool:
    """True when the line is one complete JSON value (of any kind)."""
    if data is None:
        return False
    try:
        parse_json_bytes(data)
    except ValueError:
        return False
    return True


def is_blank(data: bytes | None) -> bool:
    """Blank lines (a lone BOM counts as blank) are skipped silently; what fails to parse is corrupt."""
    return data is not None and not data.removeprefix(BOM).strip()


def encode_entries(entries: Iterable[MemoryEntry], **extra: Any) -> bytes:
    """The lines of many entries that share the same extra fields (checked once, not per entry)."""
    for name, value in extra.items():
        _check_encodable(name, value)
    return b"".join(_encode(entry, extra) for entry in entries)


_ENCODER = json.JSONEncoder(sort_keys=True, allow_nan=False)
"""What ``json.dumps(payload, sort_keys=True, allow_nan=False)`` builds on every call: made once (it keeps no state)."""


def _encode(entry: MemoryEntry, extra: dict[str, Any]) -> bytes:
    payload = entry.to_dict()
    payload.update(extra)
    return (_ENCODER.encode(payload) + "\n").encode("utf-8")


def encode_entry(entry: MemoryEntry, **extra: Any) -> bytes:
    """The on-disk form: ``json.dumps(..., sort_keys=True)`` with default separators, plus newline.

    Strict JSON only: an extra value JSON cannot hold (a datetime, set, bytes, a
    circular or too deeply nested structure, NaN or infinity) raises a typed error
    (ArgumentTypeError for a type, InvalidArgumentError for a value) and nothing is written.
    """
    for name, value in extra.items():
        _check_encodable(name, value)
    return _encode(entry, extra)


def _check_encodable(name: str, value: Any) -> None:
    """Raise the typed error for a value ``json.dumps`` would refuse, naming the field."""
    _check_nesting(name, value, depth=0, parents=set())
    try:
        json.dumps(value, sort_keys=True, allow_nan=False)
    except TypeError as exc:
        raise ArgumentTypeError(f"{name} cannot be written as JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"{name} cannot be written as JSON: {exc}") from None


def _check_nesting(name: str, value: Any, *, depth: int, parents: set[int]) -> None:
    """Refuse circular and too deeply nested containers before json.dumps recurses into them."""
    if isinstance(value, dict):
        children: Any = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return
    if depth >= MAX_EXTRA_DEPTH:
        raise InvalidArgumentError(f"{name} cannot be written as JSON: nested more than {MAX_EXTRA_DEPTH} levels deep")
    if id(value) in parents:
        raise InvalidArgumentError(f"{name} cannot be written as JSON: it contains itself (a circular reference)")
    parents.add(id(value))
    for child in children:
        _check_nesting(name, child, depth=depth + 1, parents=parents)
    parents.discard(id(value))
