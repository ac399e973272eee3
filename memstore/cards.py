"""Failure cards, auto-invalidation rules and the pure matching semantics.

No I/O lives here.  The JSON store (``memstore.failure_cards``) and the SQLite
index both rank cards through :func:`card_match_score` and :func:`rank_cards`,
so the two can never disagree about what matches a query.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar

from memstore.checks import (
    check_finite_number,
    non_empty_str,
    optional_int,
    optional_str,
    require_bool,
    require_str,
    str_items,
    str_list,
)
from memstore.errors import InvalidArgumentError

CONFIDENCE_LEVELS = ("low", "medium", "high")
WARNING_BEHAVIORS = ("info", "warning", "block")
REVIEWER_TYPES = ("auto", "human")
RULE_ACTIONS = ("invalidate", "warn", "block")

DEFAULT_CONFIDENCE = "low"
"""Unknown confidence degrades to the weakest claim, never to a stronger one."""
DEFAULT_WARNING_BEHAVIOR = "warning"
"""Unknown behaviour degrades to a visible warning: neither silent nor blocking."""
DEFAULT_REVIEWER_TYPE = "auto"
"""Unknown reviewers are treated as automatic, which can never unlock 'block'."""

PATH_POINTS = 10
ERROR_TYPE_POINTS = 5
KEYWORD_POINTS = 2
MIN_SHARED_KEYWORDS = 2

# DESIGN.md §8, verbatim.
_STOPWORD_TEXT = """
    a an the and or but in on at to for of with by from as is was are were be been being have has had
    do does did will would could should may might must shall can it its this that these those i you he
    she we they what which who whom when where why how all any both each few more most other some such
    no nor not only own same so than too very just also now then here there use using make making get
    getting add adding fix fixing update updating change changing create creating implement implementing
    write writing test testing run running build building check checking ensure ensuring handle handling
    support supporting need needed want wanted try trying able unable new old first last next previous
    before after during while until since through without within about into over under again further once
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_KEYWORD_RE = re.compile(r"\b[a-z0-9]{3,}\b")


def _clamp(allowed: tuple[str, ...], default: str) -> Callable[[str, object], str]:
    """A normaliser that maps anything outside ``allowed`` (any type) to ``default``."""

    def normalise(name: str, value: object) -> str:
        if isinstance(value, str):
            folded = value.strip().lower()
            if folded in allowed:
                return folded
        return default

    return normalise


def _optional_finite_float(name: str, value: object) -> float | None:
    return None if value is None else check_finite_number(name, value)


_NORMALISERS: dict[str, Callable[[str, object], Any]] = {
    "id": non_empty_str,
    "run_id": require_str,
    "timestamp": check_finite_number,
    "error_type": require_str,
    "file_path": require_str,
    "line_number": optional_int,
    "error_message": require_str,
    "task_description": require_str,
    "context_files": str_list,
    "confidence": _clamp(CONFIDENCE_LEVELS, DEFAULT_CONFIDENCE),
    "expires_at": _optional_finite_float,
    "invalidated": require_bool,
    "invalidation_reason": optional_str,
    "warning_behavior": _clamp(WARNING_BEHAVIORS, DEFAULT_WARNING_BEHAVIOR),
    "reviewer_type": _clamp(REVIEWER_TYPES, DEFAULT_REVIEWER_TYPE),
    "evidence_command": optional_str,
    "evidence_exit_code": optional_int,
}


@dataclass
class FailureCard:
    """A remembered failure: where it happened, what went wrong, and how loudly to warn.

    Every assignment (construction included) goes through a per-field check, so the
    spec's invariants hold for the card's whole life: text fields must be ``str``
    (``ArgumentTypeError`` names the field), ``confidence``, ``warning_behavior`` and
    ``reviewer_type`` are clamped into their valid sets (case-insensitively, anything
    else becomes the safe default), timestamps must be numbers that are finite as
    floats (``10**400`` is refused like ``inf``).
    """

    id: str
    run_id: str
    timestamp: float
    error_type: str
    file_path: str
    line_number: int | None
    error_message: str
    task_description: str
    context_files: list[str] = field(default_factory=list)
    confidence: str = DEFAULT_CONFIDENCE
    expires_at: float | None = None
    invalidated: bool = False
    invalidation_reason: str | None = None
    warning_behavior: str = DEFAULT_WARNING_BEHAVIOR
    reviewer_type: str = DEFAULT_REVIEWER_TYPE
    evidence_command: str | None = None
    evidence_exit_code: int | None = None
    DEFAULT_TTL_SECONDS: ClassVar[int] = 2592000  # 30 days

    def __setattr__(self, name: str, value: object) -> None:
        normalise = _NORMALISERS.get(name)
        if normalise is not None:
            value = normalise(name, value)
        object.__setattr__(self, name, value)

    @classmethod
    def create(
        cls,
        run_id: str,
        error_type: str,
        file_path: str,
        error_message: str,
        task_description: str,
        context_files: Iterable[str],
        line_number: int | None = None,
        *,
        confidence: str = DEFAULT_CONFIDENCE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        warning_behavior: str = DEFAULT_WARNING_BEHAVIOR,
        reviewer_type: str = DEFAULT_REVIEWER_TYPE,
        evidence_command: str | None = None,
        evidence_exit_code: int | None = None,
    ) -> FailureCard:
        """A new active card with a fresh 8-character id, expiring ``ttl_seconds`` from now.

        ``ttl_seconds <= 0`` means the card never expires.
        """
        ttl = check_finite_number("ttl_seconds", ttl_seconds)
        files = str_items("context_files", context_files)
        now = datetime.now().timestamp()
        return cls(
            id=str(uuid.uuid4())[:8],
            run_id=run_id,
            timestamp=now,
            error_type=error_type,
            file_path=file_path,
            line_number=line_number,
            error_message=error_message,
            task_description=task_description,
            context_files=files,
            confidence=confidence,
            expires_at=now + ttl if ttl > 0 else None,
            warning_behavior=warning_behavior,
            reviewer_type=reviewer_type,
            evidence_command=evidence_command,
            evidence_exit_code=evidence_exit_code,
        )

    def is_active(self, *, now: float | None = None) -> bool:
        """False once invalidated (forever) or once ``now >= expires_at``."""
        if self.invalidated:
            return False
        if self.expires_at is None:
            return True
        current = time.time() if now is None else now
        return current < self.expires_at

    def effective_behavior(self, *, now: float | None = None) -> str:
        """'ignore' when inactive; 'block' only for a human-reviewed, high-confidence block.

        A 'block' that does not qualify degrades to 'warning'; otherwise the card's
        own ``warning_behavior`` ('info' or 'warning').
        """
        if not self.is_active(now=now):
            return "ignore"
        if self.warning_behavior == "block":
            if self.reviewer_type == "human" and self.confidence == "high":
                return "block"
            return "warning"
        return self.warning_behavior

    def to_dict(self) -> dict[str, Any]:
        """Every field, in declaration order, as JSON-compatible values."""
        payload: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            payload[item.name] = list(value) if isinstance(value, list) else value
        return payload

    @classmethod
    def from_dict(cls, payload: object) -> FailureCard | None:
        """Rebuild a card from a stored dict; ``None`` when the dict cannot be a card.

        Unknown keys are ignored.  Required: ``id`` (non-empty), ``run_id``,
        ``timestamp``, ``error_type``, ``file_path``, ``error_message`` and
        ``task_description``; every other key may be missing and takes its default
        (``context_files`` may also be null).  A present value of the wrong type makes
        the whole dict invalid, except the three clamped fields, which are clamped.
        A ``timestamp`` or ``expires_at`` that is not a finite float (``10**400``,
        ``inf``, ``nan``, a string, a bool) makes the dict invalid too: such a card is
        skipped by every reader, index and scan alike, and kept in the file untouched.
        Never raises: corrupt stored data is skipped by readers, not fatal.
        """
        if not isinstance(payload, Mapping):
            return None
        required = (
            "id",
            "run_id",
            "timestamp",
            "error_type",
            "file_path",
            "error_message",
            "task_description",
        )
        if any(key not in payload for key in required):
            return None
        kwargs: dict[str, Any] = {item.name: payload[item.name] for item in fields(cls) if item.name in payload}
        kwargs.setdefault("line_number", None)
        if kwargs.get("context_files", ()) is None:
            kwargs["context_files"] = []
        try:
            return cls(**kwargs)
        except (TypeError, ValueError):
            return None


@dataclass
class AutoInvalidationRule:
    """What to do to cards when something they depend on changes.

    ``trigger`` names the change ('file_signature_change', 'test_refactor',
    'dependency_version_change'; unknown triggers are kept but never fire).
    ``action`` is 'invalidate', 'warn' or 'block' (anything else is an
    ``InvalidArgumentError``).  ``confidence`` says how sure the rule is; it is
    clamped like a card's and recorded in the reason it writes.  ``paths``, when
    non-empty, limits the rule to cards whose file_path starts with one of them.
    """

    trigger: str
    confidence: str
    action: str
    paths: list[str] | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        self.trigger = non_empty_str("trigger", self.trigger)
        self.confidence = _clamp(CONFIDENCE_LEVELS, DEFAULT_CONFIDENCE)("confidence", self.confidence)
        action = require_str("action", self.action).strip().lower()
        if action not in RULE_ACTIONS:
            raise InvalidArgumentError(f"action must be one of {RULE_ACTIONS}, got {self.action!r}")
        self.action = action
        if self.paths is not None:
            self.paths = str_list("paths", self.paths)
        self.enabled = require_bool("enabled", self.enabled)

    def applies_to(self, file_path: str) -> bool:
        """The ``paths`` filter: a prefix match on the card's path (a leading './' ignored)."""
        if not self.paths:
            return True
        target = _strip_dot_slash(file_path)
        return any(target.startswith(_strip_dot_slash(prefix)) for prefix in self.paths)

    @classmethod
    def from_dict(cls, payload: object) -> AutoInvalidationRule | None:
        """A rule from config; ``None`` when it is not one.

        ``paths`` may be a single string (one prefix); ``confidence`` defaults to
        'medium' and ``enabled`` to True when missing.
        """
        if not isinstance(payload, Mapping):
            return None
        paths = payload.get("paths")
        if isinstance(paths, str):
            paths = [paths]
        try:
            return cls(
                trigger=payload.get("trigger"),  # type: ignore[arg-type]
                confidence=payload.get("confidence", "medium"),  # type: ignore[arg-type]
                action=payload.get("action"),  # type: ignore[arg-type]
                paths=paths,  # type: ignore[arg-type]
                enabled=payload.get("enabled", True),  # type: ignore[arg-type]
            )
        except (TypeError, ValueError):
            return None


def _strip_dot_slash(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


def default_auto_invalidation_rules() -> list[AutoInvalidationRule]:
    """The rules that apply unless config replaces them (fresh objects each call)."""
    return [
        AutoInvalidationRule("file_signature_change", "high", "invalidate"),
        AutoInvalidationRule("test_refactor", "medium", "warn"),
        AutoInvalidationRule("dependency_version_change", "medium", "warn"),
    ]


_TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs"})


def is_test_path(path: str) -> bool:
    """True for paths that look like tests: tests/…, test_*.py, *_test.py, *.spec.*, *.test.*."""
    parts = [part for part in re.split(r"[\\/]", path) if part]
    if not parts:
        return False
    name = parts[-1].lower()
    if any(part.lower() in _TEST_DIRS for part in parts[:-1]):
        return True
    stem = name.split(".", 1)[0]
    return (
        name.startswith("test_")
        or stem.endswith("_test")
        or name == "conftest.py"
        or ".test." in name
        or ".spec." in name
    )


def task_keywords(text: str) -> frozenset[str]:
    """Words of 3+ ASCII letters/digits in ``text.lower()``, minus the stopwords."""
    return frozenset(_KEYWORD_RE.findall(require_str("task_description", text).lower())) - STOPWORDS


def check_file_paths(file_paths: object) -> tuple[str, ...]:
    """Validate a query's paths: an iterable of str, never a bare string."""
    return tuple(str_items("file_paths", file_paths))


def card_match_score(
    card: FailureCard,
    *,
    file_paths: Iterable[str],
    keywords: frozenset[str],
    error_type: str | None,
) -> int:
    """How well a card matches a query (activity is the caller's business).

    +10 once if any non-empty query path is a substring of the card's file_path;
    +5 if ``error_type`` is non-empty and equals the card's; +2 per keyword shared
    with the card's task description, but only when at least two are shared.
    """
    score = 0
    if any(path and path in card.file_path for path in file_paths):
        score += PATH_POINTS
    if error_type and error_type == card.error_type:
        score += ERROR_TYPE_POINTS
    shared = len(keywords & task_keywords(card.task_description))
    if shared >= MIN_SHARED_KEYWORDS:
        score += KEYWORD_POINTS * shared
    return score


def rank_cards(scored: Iterable[tuple[int, int, FailureCard]], limit: int) -> list[FailureCard]:
    """Order ``(score, file_order, card)`` triples and take ``limit``.

    Scores of 0 or less are dropped; then score descending, timestamp descending,
    file order ascending.
    """
    kept = [item for item in scored if item[0] > 0]
    kept.sort(key=lambda item: (-item[0], -item[2].timestamp, item[1]))
    return [item[2] for item in kept[:limit]]
