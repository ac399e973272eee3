"""Auto-invalidation: rules that retire or sharpen failure cards when what they depend on changes.

A card's dict in failures.json keeps the signatures (see :mod:`memstore.file_signatures`)
of its file, of the test files among its context files, and of the dependency
manifests; a run compares them with the files now and fires a trigger per change:

- ``file_signature_change``: the card's own file changed;
- ``test_refactor``: a test file among its context files changed (:func:`is_test_path`);
- ``dependency_version_change``: the manifests and lock files in the root changed.

A rule says what a fired trigger does to a card ('invalidate', 'warn', 'block').  The
rules come from ``<root>/.teaagent/config.json`` (``memory.auto_invalidation``) or the
defaults.  :class:`memstore.failure_cards.FailureCardStorage` runs this under its lock.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.cards import WARNING_BEHAVIORS, FailureCard, clamp_confidence
from memstore.checks import non_empty_str, require_bool, require_str, str_list, wrong_type
from memstore.errors import InvalidArgumentError
from memstore.file_signatures import UNKNOWN, SignatureCache, Unknown
from memstore.files import read_regular_file
from memstore.logger import LazyLogger

logger = LazyLogger(__name__)

Record = dict[str, Any]

FILE_SIGNATURE_CHANGE = "file_signature_change"
TEST_REFACTOR = "test_refactor"
DEPENDENCY_VERSION_CHANGE = "dependency_version_change"
KNOWN_TRIGGERS = (FILE_SIGNATURE_CHANGE, TEST_REFACTOR, DEPENDENCY_VERSION_CHANGE)
RULE_ACTIONS = ("invalidate", "warn", "block")

SIGNATURES_KEY = "signatures"
"""Key inside a stored card dict holding its auto-invalidation baselines."""
AUTO_WARNING_KEY = "auto_warning"
"""Key inside a stored card dict holding why a rule raised its warning level."""
MAX_CONFIG_BYTES = 1024 * 1024
"""A larger config.json is not read (acts on nothing, with a warning)."""


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
        self.confidence = clamp_confidence("confidence", self.confidence)
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
        AutoInvalidationRule(FILE_SIGNATURE_CHANGE, "high", "invalidate"),
        AutoInvalidationRule(TEST_REFACTOR, "medium", "warn"),
        AutoInvalidationRule(DEPENDENCY_VERSION_CHANGE, "medium", "warn"),
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


def act_on_cards(
    root: Path, active: Iterable[tuple[FailureCard, Record]], rules: list[AutoInvalidationRule], counts: dict[str, int]
) -> bool:
    """Compare each active card's baselines, move them forward and apply the rules that fire.

    ``active`` pairs each card with its stored dict, which is updated in place;
    ``counts`` (trigger → cards acted on) is added to.  True when any dict changed.
    """
    cache = SignatureCache(root)
    changed = False
    for card, record in active:
        before = copy.deepcopy(record)
        fired = _fired(card, record, cache)
        for trigger in _apply_rules(card, record, rules, fired):
            counts[trigger] += 1
        changed = changed or record != before
    return changed


def settings_from(config: object, *, config_path: Path) -> tuple[bool, list[AutoInvalidationRule], dict[str, int]]:
    """(enabled, rules, a zero count per trigger) from ``config``, or from ``config_path`` when None.

    See :meth:`memstore.failure_cards.FailureCardStorage.apply_auto_invalidation` for
    what is accepted; anything else acts on nothing and logs why.
    """
    enabled, rules = _settings(_config_section(config, config_path))
    counts = dict.fromkeys(KNOWN_TRIGGERS, 0)
    for rule in rules:
        counts.setdefault(rule.trigger, 0)
    return enabled, rules, counts


def _config_section(config: object, config_path: Path) -> object:
    if config is None:
        data = _read_json_file(config_path)
        if data is None:
            return _UNUSABLE
    elif isinstance(config, Mapping):
        data = config
    else:
        raise wrong_type("config must be a mapping or None", config)
    if isinstance(data, Mapping) and (config is None or "memory" in data):
        memory = data.get("memory", {})
        if not isinstance(memory, Mapping):
            logger.warning(
                "config 'memory' must be an object, not %s; auto-invalidation skipped", type(memory).__name__
            )
            return _UNUSABLE
        return memory.get("auto_invalidation", {})
    return data


_UNUSABLE = object()
"""A config that could not be read or used; the reason was logged where it was found."""


def _read_json_file(path: Path) -> object:
    """The parsed config; ``{}`` when absent, ``None`` (warned) when unreadable or corrupt."""
    try:
        data = read_regular_file(path, max_bytes=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        logger.warning("cannot read %s: %s", path, exc)
        return None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        logger.warning("%s is not valid JSON", path)
        return None


def _settings(section: object) -> tuple[bool, list[AutoInvalidationRule]]:
    """(enabled, rules) from the ``auto_invalidation`` section; bad config acts on nothing.

    ``_UNUSABLE`` is a config already found unusable (and warned about).
    """
    if section is _UNUSABLE:
        return False, []
    if not isinstance(section, Mapping):
        logger.warning("auto_invalidation config must be an object; auto-invalidation skipped")
        return False, []
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        logger.warning("auto_invalidation.enabled must be true or false; auto-invalidation skipped")
        return False, []
    raw_rules = section.get("custom_rules", [])
    if not isinstance(raw_rules, list):
        logger.warning("auto_invalidation.custom_rules must be a list; auto-invalidation skipped")
        return False, []
    custom: list[AutoInvalidationRule] = []
    for raw in raw_rules:
        rule = AutoInvalidationRule.from_dict(raw)
        if rule is None:
            logger.warning("invalid auto-invalidation rule %.200r; auto-invalidation skipped", raw)
            return False, []
        if rule.trigger not in KNOWN_TRIGGERS:
            logger.warning("auto-invalidation trigger %r is unknown and never fires", rule.trigger)
        custom.append(rule)
    rules: list[AutoInvalidationRule] = []
    for default in default_auto_invalidation_rules():
        replacements = [rule for rule in custom if rule.trigger == default.trigger]
        rules.extend(replacements or [default])
    rules.extend(rule for rule in custom if rule.trigger not in KNOWN_TRIGGERS)
    return enabled, rules


def _apply_rules(
    card: FailureCard, record: Record, rules: list[AutoInvalidationRule], fired: dict[str, str]
) -> list[str]:
    """Apply the enabled rules whose trigger fired; return the triggers that acted."""
    acted: list[str] = []
    for rule in rules:
        if not rule.enabled or rule.trigger not in fired or not rule.applies_to(card.file_path):
            continue
        reason = f"auto: {rule.trigger} ({rule.confidence} confidence): {fired[rule.trigger]}"
        if rule.action == "invalidate":
            card.invalidated = True
            card.invalidation_reason = reason
        else:
            target = "block" if rule.action == "block" else "warning"
            if WARNING_BEHAVIORS.index(card.warning_behavior) < WARNING_BEHAVIORS.index(target):
                card.warning_behavior = target
            record[AUTO_WARNING_KEY] = reason
        record.update(card.to_dict())
        if rule.trigger not in acted:
            acted.append(rule.trigger)
        if card.invalidated:
            break
    return acted


def _fired(card: FailureCard, record: Record, cache: SignatureCache) -> dict[str, str]:
    """Compare with the stored baselines, store the new ones; return trigger → what changed."""
    stored = record.get(SIGNATURES_KEY)
    stored = stored if isinstance(stored, dict) else {}
    old_files = stored.get("files")
    old_files = old_files if isinstance(old_files, dict) else {}
    new_files: dict[str, str | None] = {}
    changed_files: list[str] = []
    tracked = [card.file_path, *(p for p in card.context_files if is_test_path(p))]
    for path in dict.fromkeys(tracked):
        current = cache.file(path)
        previous = old_files.get(path, UNKNOWN)
        if previous is not None and not isinstance(previous, str):
            previous = UNKNOWN
        if isinstance(current, Unknown):
            if not isinstance(previous, Unknown):
                new_files[path] = previous
            continue
        new_files[path] = current
        if not isinstance(previous, Unknown) and previous != current:
            changed_files.append(path)

    fired: dict[str, str] = {}
    if card.file_path in changed_files:
        fired[FILE_SIGNATURE_CHANGE] = f"{card.file_path} changed"
    changed_tests = [path for path in changed_files if is_test_path(path)]
    if changed_tests:
        fired[TEST_REFACTOR] = f"test file {', '.join(changed_tests)} changed"

    signatures: dict[str, Any] = {"files": new_files}
    old_deps = stored.get("dependencies", UNKNOWN)
    if old_deps is not None and not isinstance(old_deps, str):
        old_deps = UNKNOWN
    deps = cache.dependencies()
    if isinstance(deps, Unknown):
        if not isinstance(old_deps, Unknown):
            signatures["dependencies"] = old_deps
    else:
        signatures["dependencies"] = deps
        if not isinstance(old_deps, Unknown) and old_deps != deps:
            fired[DEPENDENCY_VERSION_CHANGE] = "dependency manifests or lock files changed"
    if signatures != stored:
        record[SIGNATURES_KEY] = signatures
    return fired
