"""Unique id prefixes: what a person may type instead of a whole entry or card id.

An exact id always wins; otherwise a prefix of at least :data:`MIN_PREFIX`
characters must match exactly one id.  Shown ids are the shortest prefix that is
unique in the store, never shorter than :data:`SHORT_ID_MIN`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from memstore.checks import require_str
from memstore.errors import AmbiguousIdError, EntryNotFoundError, InvalidArgumentError

MIN_PREFIX = 4
SHORT_ID_MIN = 8
SHOWN_CANDIDATES = 10


def clean_prefix(prefix: object) -> str:
    return require_str("id", prefix).strip()


def pick(prefix: str, matches: Sequence[str], *, what: str) -> str:
    """The one id ``prefix`` names among ``matches`` (the ids starting with it, sorted)."""
    if prefix in matches:
        return prefix
    if not matches:
        raise EntryNotFoundError(f"{what} not found: {prefix}")
    if len(prefix) < MIN_PREFIX:
        raise InvalidArgumentError(f"{what} id prefix {prefix!r} is shorter than {MIN_PREFIX} characters")
    if len(matches) > 1:
        shown = tuple(matches[:SHOWN_CANDIDATES])
        more = " and more" if len(matches) > len(shown) else ""
        raise AmbiguousIdError(
            f"{what} id prefix {prefix!r} is ambiguous: {', '.join(shown)}{more}", tuple(matches)
        )
    return matches[0]


def resolve_among(prefix: object, ids: Iterable[str], *, what: str) -> str:
    """:func:`pick` over every id of a small store (failure cards, the quarantine)."""
    wanted = clean_prefix(prefix)
    if not wanted:
        raise EntryNotFoundError(f"{what} not found: {wanted}")
    return pick(wanted, sorted({value for value in ids if value.startswith(wanted)}), what=what)


def _common(a: str, b: str | None) -> int:
    if b is None:
        return 0
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def shortest_unique(value: str, before: str | None, after: str | None, *, minimum: int = SHORT_ID_MIN) -> str:
    """The shortest prefix of ``value`` that its sorted neighbours do not share (at least ``minimum``)."""
    return value[: max(minimum, max(_common(value, before), _common(value, after)) + 1)]


def short_ids_among(values: Iterable[str], universe: Iterable[str], *, minimum: int = SHORT_ID_MIN) -> dict[str, str]:
    """Shortest unique prefixes of ``values`` among every id in ``universe``."""
    ordered = sorted(set(universe))
    result: dict[str, str] = {}
    for value in values:
        at = bisect.bisect_left(ordered, value)
        before = ordered[at - 1] if at > 0 else None
        end = at + 1 if at < len(ordered) and ordered[at] == value else at
        after = ordered[end] if end < len(ordered) else None
        result[value] = shortest_unique(value, before, after, minimum=minimum)
    return result
