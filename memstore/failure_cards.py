"""FailureCardStorage: failure cards in one JSON array, rewritten whole under a lock.

All reads go through :meth:`FailureCardStorage._load_records` and all writes through
:meth:`FailureCardStorage._store_records` (always under the lock), so a derived
index can hook exactly those two places.  Stored dicts are kept as they are: keys
this version does not know (signatures, warnings, fields of newer versions) survive
every rewrite, and an object that is not a valid card is kept but never returned.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TypeVar

from memstore.cards import (
    WARNING_BEHAVIORS,
    AutoInvalidationRule,
    FailureCard,
    card_match_score,
    check_file_paths,
    default_auto_invalidation_rules,
    is_test_path,
    rank_cards,
    task_keywords,
)
from memstore.checks import check_limit, optional_str, require_path, require_str, wrong_type
from memstore.errors import IndexUnavailableError, InvalidArgumentError, StorageError
from memstore.files import READ_CHUNK, open_regular, read_regular_file, storage_error
from memstore.index.card_index import CardIndex
from memstore.index.db import IndexBusyError
from memstore.json_array import JsonArrayFile, parse_array
from memstore.layout import CONFIG_FILE, FAILURES_FILE, FAILURES_LOCK, ensure_memory_dir, store_dir

logger = logging.getLogger(__name__)

Record = dict[str, Any]
T = TypeVar("T")

SIGNATURES_KEY = "signatures"
"""Key inside a stored card dict holding its auto-invalidation baselines."""
AUTO_WARNING_KEY = "auto_warning"
"""Key inside a stored card dict holding why a rule raised its warning level."""

FILE_SIGNATURE_CHANGE = "file_signature_change"
TEST_REFACTOR = "test_refactor"
DEPENDENCY_VERSION_CHANGE = "dependency_version_change"
KNOWN_TRIGGERS = (FILE_SIGNATURE_CHANGE, TEST_REFACTOR, DEPENDENCY_VERSION_CHANGE)

DEPENDENCY_MANIFESTS = frozenset(
    {
        "pyproject.toml",
        "setup.cfg",
        "setup.py",
        "Pipfile",
        "Pipfile.lock",
        "poetry.lock",
        "uv.lock",
        "pdm.lock",
        "constraints.txt",
        "environment.yml",
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "bun.lockb",
        "Cargo.toml",
        "Cargo.lock",
        "go.mod",
        "go.sum",
        "Gemfile",
        "Gemfile.lock",
        "composer.json",
        "composer.lock",
    }
)
DEPENDENCY_PATTERNS = ("requirements*.txt",)

MAX_SIGNATURE_BYTES = 64 * 1024 * 1024
"""Files larger than this get no signature (never a change): hashing must stay bounded."""
MAX_CONFIG_BYTES = 1024 * 1024
"""A larger config.json is not read (acts on nothing, with a warning)."""


class _Unknown:
    """A file that exists but could not be read: never a change, never a baseline."""


UNKNOWN = _Unknown()
Signature = str | None | _Unknown
"""SHA-256 hex of the bytes, ``None`` for a missing file, UNKNOWN when unreadable."""


class FailureCardStorage:
    """Failure cards of one workspace: ``<root>/.teaagent/memory/failures.json``.

    Every write is a read-modify-write under ``failures.lock`` (never replaced), so
    concurrent processes never lose each other's cards.
    """

    def __init__(self, root: Path | str, *, use_index: bool = True) -> None:
        self.root = require_path("root", root)
        directory = ensure_memory_dir(self.root)
        self.path = directory / FAILURES_FILE
        self.lock_path = directory / FAILURES_LOCK
        self.config_path = store_dir(self.root) / CONFIG_FILE
        self._file = JsonArrayFile(self.path, self.lock_path)
        self._index: CardIndex | None = (
            CardIndex(self.path, store_dir(self.root), load_records=records_from_bytes) if use_index else None
        )

    def reindex(self, *, full: bool = False) -> dict[str, Any]:
        """Bring the card index up to date (``full`` rebuilds it); returns what was done."""
        if self._index is None:
            raise IndexUnavailableError("the failure-card index is disabled or unavailable")
        return self._index.refresh(full=full)

    def index_status(self) -> dict[str, Any]:
        """Entries, bytes indexed and bytes behind of the card index."""
        if self._index is None:
            return {"state": "disabled", "source": str(self.path)}
        try:
            return self._index.source_status()
        except IndexUnavailableError as exc:
            return {"state": "unavailable", "source": str(self.path), "error": str(exc)}

    def _indexed(self, query: Callable[[CardIndex], T]) -> T | None:
        """Answer from the derived index; None (scan instead) when it cannot be used."""
        if self._index is None:
            return None
        try:
            return query(self._index)
        except StorageError as exc:
            # failures.json is not a readable regular file: the scan reads it as no cards.
            logger.warning("failure cards answered from a scan: %s", exc)
            return None
        except IndexUnavailableError as exc:
            if not isinstance(exc, IndexBusyError):
                logger.warning("failure-card index unavailable, answering from a scan: %s", exc)
                self._index = None
            return None

    # -- the two hook points -------------------------------------------------------------

    def _load_records(self, *, strict: bool = False) -> list[Record]:
        """The stored card dicts in file order; ``[]`` for a missing or unreadable file.

        Unparseable JSON, invalid UTF-8 and a top level that is not a list all read
        as no cards; elements that are not objects are skipped (rewrites keep them).
        ``strict`` raises the typed error for a file that exists but cannot be read.
        """
        data = self._read_bytes(strict=strict)
        if data is None:
            return []
        return records_from_bytes(data)

    def _store_records(self, records: list[Any]) -> None:
        """Durably replace the file with ``records``. The caller holds the lock.

        Elements that are not objects are written back unchanged but never indexed.
        """
        stat = self._file.write(records)
        if self._index is not None:
            try:
                self._index.replace_records([record for record in records if isinstance(record, dict)], stat)
            except IndexUnavailableError as exc:
                logger.info("failure-card index will rebuild after this rewrite: %s", exc)

    # -- plumbing ------------------------------------------------------------------------

    def _read_bytes(self, *, strict: bool = False) -> bytes | None:
        return self._file.read_bytes(strict=strict)

    def _update(self, change: Callable[[list[Any]], tuple[T, bool]]) -> T:
        """Run ``change`` on the stored elements under the lock; store them if it says so.

        The list holds every element of the file (objects that are not valid cards,
        and non-objects, included) so a rewrite carries them through unchanged.
        """
        return self._file.update(change, store=self._store_records)

    @staticmethod
    def _cards(records: Iterable[Record]) -> list[tuple[int, FailureCard]]:
        """``(file_order, card)`` for every record that is a valid card."""
        cards = []
        for order, record in enumerate(records):
            card = FailureCard.from_dict(record)
            if card is None:
                logger.debug("skipping stored failure card that is not valid: %.200r", record)
            else:
                cards.append((order, card))
        return cards

    # -- reads ---------------------------------------------------------------------------

    def _read_cards(self) -> list[FailureCard]:
        """The spec's reader: every valid card, ``[]`` when the file is missing or unreadable."""
        return [card for _, card in self._cards(self._load_records())]

    def list_all(self) -> list[FailureCard]:
        """Every valid card in file order, active or not."""
        return self._read_cards()

    def list_active(self) -> list[FailureCard]:
        now = time.time()
        indexed = self._indexed(lambda index: index.list_active(now))
        if indexed is not None:
            return indexed
        return [card for card in self.list_all() if card.is_active(now=now)]

    def get_by_id(self, card_id: str) -> FailureCard | None:
        """The first card in file order with this id (surrounding whitespace ignored)."""
        wanted = _check_id(card_id)
        indexed = self._indexed(lambda index: index.get_by_id(wanted))
        if indexed is not None:
            return indexed[0] if indexed else None
        for _, card in self._cards(self._load_records()):
            if card.id == wanted:
                return card
        return None

    def resolve_id(self, prefix: str) -> str:
        """The full id of the one card whose id is ``prefix`` or starts with it (at least 4 characters)."""
        from memstore.id_prefix import resolve_among

        return resolve_among(prefix, (card.id for card in self.list_all()), what="failure card")

    def find_matching(
        self,
        file_paths: Iterable[str],
        task_description: str,
        error_type: str | None = None,
        limit: int = 3,
    ) -> list[FailureCard]:
        """Active cards ranked by :func:`memstore.cards.card_match_score` (score > 0 only)."""
        paths = check_file_paths(file_paths)
        keywords = task_keywords(task_description)
        optional_str("error_type", error_type)
        limit = check_limit(limit)
        if limit == 0:
            return []
        now = time.time()
        indexed = self._indexed(lambda index: index.find_matching(paths, keywords, error_type, limit, now))
        if indexed is not None:
            return indexed
        scored = (
            (card_match_score(card, file_paths=paths, keywords=keywords, error_type=error_type), order, card)
            for order, card in self._cards(self._load_records())
            if card.is_active(now=now)
        )
        return rank_cards(scored, limit)

    # -- writes --------------------------------------------------------------------------

    def append(self, card: FailureCard) -> None:
        if not isinstance(card, FailureCard):
            raise wrong_type("card must be a FailureCard", card)
        payload = card.to_dict()
        if FailureCard.from_dict(payload) is None:
            # Checked before anything is written: a card every reader would skip is refused.
            raise InvalidArgumentError(f"card {card.id!r} is not a valid failure card")

        def change(records: list[Record]) -> tuple[None, bool]:
            records.append(payload)
            return None, True

        self._update(change)

    def invalidate(self, card_id: str, *, reason: str) -> bool:
        """Mark every card with this id invalidated (permanently); True if any was found."""
        wanted = _check_id(card_id)
        require_str("reason", reason)

        def change(records: list[Record]) -> tuple[bool, bool]:
            found = changed = False
            for order, card in self._cards(records):
                if card.id != wanted:
                    continue
                found = True
                if card.invalidated and card.invalidation_reason == reason:
                    continue
                card.invalidated = True
                card.invalidation_reason = reason
                records[order].update(card.to_dict())
                changed = True
            return found, changed

        return self._update(change)

    def prune_expired(self) -> int:
        """Remove every inactive (expired or invalidated) card; return how many."""

        def change(records: list[Record]) -> tuple[int, bool]:
            now = time.time()
            doomed = {order for order, card in self._cards(records) if not card.is_active(now=now)}
            if doomed:
                records[:] = [record for order, record in enumerate(records) if order not in doomed]
            return len(doomed), bool(doomed)

        return self._update(change)

    def clear_all(self) -> None:
        """Leave an empty array (the file is created if it did not exist)."""
        self._file.replace([], store=self._store_records)

    def clear_by_id(self, card_id: str) -> bool:
        """Remove the first card with this id; True if one was removed."""
        wanted = _check_id(card_id)

        def change(records: list[Record]) -> tuple[bool, bool]:
            for order, card in self._cards(records):
                if card.id == wanted:
                    del records[order]
                    return True, True
            return False, False

        return self._update(change)

    # -- auto-invalidation ---------------------------------------------------------------

    def apply_auto_invalidation(self, config: Mapping[str, Any] | None = None) -> dict[str, int]:
        """Apply the auto-invalidation rules; return trigger → number of cards acted on.

        ``config`` may be the whole workspace config (``{"memory": {"auto_invalidation":
        {...}}}``, recognised by its ``memory`` key) or just the ``auto_invalidation``
        section; ``None`` reads ``<root>/.teaagent/config.json``.  Custom rules replace
        the default rule of the same trigger; unknown triggers never fire.  A missing
        config file, ``memory`` key or ``auto_invalidation`` key means the default rules.
        A config that cannot be read (not a regular file of at most MAX_CONFIG_BYTES,
        not JSON) or has the wrong shape at any level (``memory`` or
        ``auto_invalidation`` not an object, ``enabled`` not a boolean, ``custom_rules``
        not a list, a rule that is not a valid rule) acts on nothing and logs a
        warning: a half-understood config must not run rules it did not ask for.

        A file's first sighting only records its SHA-256 baseline in the card's stored
        dict.  Later, a changed, deleted or newly created file is a change; a file that
        exists but cannot be read is never a change (and keeps its old baseline).  Only
        a regular file inside the root of at most MAX_SIGNATURE_BYTES has a signature:
        a path that resolves outside the root (absolute, ``..``, a symlink out), a FIFO,
        a device, a directory or a larger file counts as unreadable, and opening never
        waits.  Acting moves the baseline, so a second run over unchanged files writes
        nothing.
        """
        enabled, rules = _auto_invalidation_settings(self._config_section(config))
        counts = dict.fromkeys(KNOWN_TRIGGERS, 0)
        for rule in rules:
            counts.setdefault(rule.trigger, 0)
        if not enabled:
            return counts

        def change(records: list[Record]) -> tuple[dict[str, int], bool]:
            scanner = _SignatureScanner(self.root)
            changed = False
            now = time.time()
            for order, card in self._cards(records):
                if not card.is_active(now=now):
                    continue
                record = records[order]
                before = copy.deepcopy(record)
                fired = scanner.update_card(card, record)
                for trigger in _apply_rules(card, record, rules, fired):
                    counts[trigger] += 1
                changed = changed or record != before
            return counts, changed

        return self._update(change)

    def _config_section(self, config: Mapping[str, Any] | None) -> object:
        if config is None:
            data = _read_json_file(self.config_path)
            if data is None:
                return _UNUSABLE
        elif isinstance(config, Mapping):
            data = config
        else:
            raise wrong_type("config must be a mapping or None", config)
        if isinstance(data, Mapping) and (config is None or "memory" in data):
            memory = data.get("memory", {})
            if not isinstance(memory, Mapping):
                logger.warning("config 'memory' must be an object, not %s; auto-invalidation skipped",
                               type(memory).__name__)
                return _UNUSABLE
            return memory.get("auto_invalidation", {})
        return data


def _check_id(card_id: object) -> str:
    return require_str("card_id", card_id).strip()


def records_from_bytes(data: bytes) -> list[Record]:
    """The card dicts of a failures.json, in file order; ``[]`` when it is not a JSON array.

    Elements that are not objects are skipped here (rewrites carry them through).
    Shared with the index, so both read exactly the same records.
    """
    parsed = parse_array(data)
    if parsed is None:
        return []
    return [item for item in parsed if isinstance(item, dict)]


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


def _auto_invalidation_settings(section: object) -> tuple[bool, list[AutoInvalidationRule]]:
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


class _SignatureScanner:
    """Hashes files once per run and moves each card's stored baselines forward."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, Signature] = {}
        self._dependencies: Signature | None = None
        self._dependencies_done = False

    def file(self, path: str) -> Signature:
        if path not in self._files:
            self._files[path] = _file_signature(self.root, path)
        return self._files[path]

    def dependencies(self) -> Signature:
        if not self._dependencies_done:
            self._dependencies = _dependency_signature(self.root)
            self._dependencies_done = True
        return self._dependencies

    def update_card(self, card: FailureCard, record: Record) -> dict[str, str]:
        """Compare with the stored baselines, store the new ones; return trigger → what changed."""
        stored = record.get(SIGNATURES_KEY)
        stored = stored if isinstance(stored, dict) else {}
        old_files = stored.get("files")
        old_files = old_files if isinstance(old_files, dict) else {}
        new_files: dict[str, str | None] = {}
        changed_files: list[str] = []
        tracked = [card.file_path, *(p for p in card.context_files if is_test_path(p))]
        for path in dict.fromkeys(tracked):
            current = self.file(path)
            previous = old_files.get(path, UNKNOWN)
            if previous is not None and not isinstance(previous, str):
                previous = UNKNOWN
            if isinstance(current, _Unknown):
                if not isinstance(previous, _Unknown):
                    new_files[path] = previous
                continue
            new_files[path] = current
            if not isinstance(previous, _Unknown) and previous != current:
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
        deps = self.dependencies()
        if isinstance(deps, _Unknown):
            if not isinstance(old_deps, _Unknown):
                signatures["dependencies"] = old_deps
        else:
            signatures["dependencies"] = deps
            if not isinstance(old_deps, _Unknown) and old_deps != deps:
                fired[DEPENDENCY_VERSION_CHANGE] = "dependency manifests or lock files changed"
        if signatures != stored:
            record[SIGNATURES_KEY] = signatures
        return fired


def _inside_root(root: Path, path: str) -> str | None:
    """``path`` (relative to ``root``) with every link resolved, or None when it leaves the root."""
    if not path or "\x00" in path:
        return None
    try:
        real_root = os.path.realpath(root)
        target = os.path.realpath(os.path.join(real_root, path))
    except (OSError, ValueError):
        return None
    if target == real_root or os.path.commonpath([real_root, target]) != real_root:
        return None
    return target


def _file_signature(root: Path, path: str) -> Signature:
    """SHA-256 of a regular file inside ``root``; None when missing; UNKNOWN for anything else.

    The path is resolved first (links included) and must stay inside the root; the
    resolved file is opened without following a link, without blocking, and hashed
    only when it is a regular file of at most MAX_SIGNATURE_BYTES.
    """
    target = _inside_root(root, path)
    if target is None:
        return UNKNOWN
    try:
        fd = open_regular(Path(target), max_bytes=MAX_SIGNATURE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return UNKNOWN
    digest = hashlib.sha256()
    total = 0
    try:
        while chunk := os.read(fd, READ_CHUNK):
            total += len(chunk)
            if total > MAX_SIGNATURE_BYTES:
                return UNKNOWN
            digest.update(chunk)
    except OSError:
        return UNKNOWN
    finally:
        os.close(fd)
    return digest.hexdigest()


def _dependency_signature(root: Path) -> Signature:
    """One SHA-256 over the names and hashes of the dependency files in ``root``."""
    try:
        with os.scandir(root) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if (
                    entry.name in DEPENDENCY_MANIFESTS
                    or any(fnmatchcase(entry.name, pattern) for pattern in DEPENDENCY_PATTERNS)
                )
                and entry.is_file()
            )
    except FileNotFoundError:
        names = []
    except OSError as exc:
        logger.warning("%s", storage_error("list", root, exc))
        return UNKNOWN
    combined = hashlib.sha256()
    for name in names:
        signature = _file_signature(root, name)
        if isinstance(signature, _Unknown):
            return UNKNOWN
        if signature is not None:
            combined.update(f"{name}\0{signature}\n".encode())
    return combined.hexdigest()
