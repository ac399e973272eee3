"""FailureCard: one remembered failure, with the invariants every stored card keeps.

No I/O lives here.  How a card matches a task is :mod:`memstore.card_match`; the
rules that retire cards when files change are :mod:`memstore.auto_invalidation`.
"""

from __future__ import annotations

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

CONFIDENCE_LEVELS = ("low", "medium", "high")
WARNING_BEHAVIORS = ("info", "warning", "block")
REVIEWER_TYPES = ("auto", "human")

DEFAULT_CONFIDENCE = "low"
"""Unknown confidence degrades to the weakest claim, never to a stronger one."""
DEFAULT_WARNING_BEHAVIOR = "warning"
"""Unknown behaviour degrades to a visible warning: neither silent nor blocking."""
DEFAULT_REVIEWER_TYPE = "auto"
"""Unknown reviewers are treated as automatic, which can never unlock 'block'."""


def _clamp(allowed: tuple[str, ...], default: str) -> Callable[[str, object], str]:
    """A normaliser that maps anything outside ``allowed`` (any type) to ``default``."""

    def normalise(name: str, value: object) -> str:
        if isinstance(value, str):
            folded = value.strip().lower()
            if folded in allowed:
                return folded
        return default

    return normalise


clamp_confidence = _clamp(CONFIDENCE_LEVELS, DEFAULT_CONFIDENCE)
"""``clamp_confidence(name, value)``: a confidence level, anything unknown as the weakest."""


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
    "confidence": clamp_confidence,
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
