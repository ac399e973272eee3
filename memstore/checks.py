"""Argument checks of the public entry points: one wording for one mistake.

Every check returns the value it accepted (clamped or stripped where it says so),
so a caller checks and binds in one line.  A wrong type is an ``ArgumentTypeError``
that names the argument and the type it got (``"reason must be a str, not int"``);
a wrong value is an ``InvalidArgumentError``.  No I/O, no imports beyond the errors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from memstore.errors import ArgumentTypeError, InvalidArgumentError

MAX_LIMIT = 2**62
"""Larger limits are taken as this one: no file holds that many items, and SQLite binds
integers only below 2**63 (a bigger one raised OverflowError from the indexed path)."""


def wrong_type(expected: str, value: object, *, single: bool = False) -> ArgumentTypeError:
    """``"<expected>, not <type of value>"`` (``"..., not a single <type>"`` with ``single``).

    ``expected`` names the argument and what it must be: ``"root must be a str or Path"``.
    """
    article = "a single " if single else ""
    return ArgumentTypeError(f"{expected}, not {article}{type(value).__name__}")


def require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise wrong_type(f"{name} must be a str", value)
    return value


def optional_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise wrong_type(f"{name} must be a str or None", value)
    return value


def non_empty_str(name: str, value: object) -> str:
    """A str, stripped, that is not empty once stripped (an id, a trigger name)."""
    text = require_str(name, value).strip()
    if not text:
        raise InvalidArgumentError(f"{name} cannot be empty")
    return text


def require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(f"{name} must be a bool", value)
    return value


def check_readonly(value: object) -> bool:
    """The ``readonly`` flag of a store constructor (its message has always been this short one)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError("readonly must be a bool")
    return value


def optional_int(name: str, value: object) -> int | None:
    """An int (never a bool) or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(f"{name} must be an int or None", value)
    return value


def require_path(name: str, value: object) -> Path:
    """A str or ``os.PathLike`` as a Path (a root, a folder)."""
    if not isinstance(value, (str, os.PathLike)):
        raise wrong_type(f"{name} must be a str or Path", value)
    return Path(value)


def require_mapping(name: str, value: object, *, wanted: str = "a mapping") -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise wrong_type(f"{name} must be {wanted}", value)
    return value


def iterable_list(name: str, value: object, *, wanted: str = "an iterable of str") -> list[object]:
    """The items of an iterable as a list; a bare str or bytes is refused (it would iterate per character)."""
    if isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{name} must be {wanted}, not a single string")
    try:
        items = iter(value)  # type: ignore[call-overload]
    except TypeError:
        raise wrong_type(f"{name} must be {wanted}", value) from None
    return list(items)


def str_items(name: str, value: object, *, wanted: str = "an iterable of str") -> list[str]:
    """Like :func:`iterable_list`, and every item must be a str."""
    items = iterable_list(name, value, wanted=wanted)
    return _only_str(name, items)


def str_list(name: str, value: object) -> list[str]:
    """A list or tuple (not any iterable: this is a stored field) holding only str, as a new list."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise wrong_type(f"{name} must be a list of str", value)
    return _only_str(name, value)


def _only_str(name: str, items: Iterable[object]) -> list[str]:
    checked: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ArgumentTypeError(f"{name} must contain only str, got {type(item).__name__}")
        checked.append(item)
    return checked


def check_limit(limit: object, *, name: str = "limit") -> int:
    """Validate a result limit (ints only, not bool; never negative) and return it clamped to MAX_LIMIT.

    Every public entry point passes its limits through here and uses the returned value,
    so nothing past this point sees an integer SQLite or a float conversion cannot take.
    """
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise wrong_type(f"{name} must be an int", limit)
    if limit < 0:
        raise InvalidArgumentError(f"{name} must be >= 0, got {limit}")
    return min(limit, MAX_LIMIT)


def check_finite_number(name: str, value: object) -> float:
    """A stored or given timestamp as a float: an int or float (not bool), finite once converted.

    ``10**400`` (an int JSON accepts but no float holds), ``inf``, ``nan``, strings and
    bools are all ``InvalidArgumentError``/``ArgumentTypeError``, never OverflowError,
    so one check serves every reader.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(f"{name} must be a number", value)
    try:
        number = float(value)
    except OverflowError:
        raise InvalidArgumentError(f"{name} is too large for a float") from None
    if not math.isfinite(number):
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
    return number
