"""FailureCardStorage: failure cards in one JSON array, rewritten whole under a lock.

All reads go through :meth:`FailureCardStorage._load_records` and all writes through
:meth:`FailureCardStorage._store_records` (always under the lock), so a derived
index can hook exactly those two places.  Stored dicts are kept as they are: keys
this version does not know (signatures, warnings, fields of newer versions) survive
every rewrite, and an object that is not a valid card is kept but never returned.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from memstore.auto_invalidation import act_on_cards, settings_from
from memstore.card_match import card_match_score, check_file_paths, rank_cards, task_keywords
from memstore.cards import FailureCard
from memstore.checks import check_limit, optional_str, require_path, require_str, wrong_type
from memstore.errors import IndexUnavailableError, InvalidArgumentError, StorageError
from memstore.index.card_index import CardIndex
from memstore.index.report import IndexOff, IndexState, RefreshReport
from memstore.index_policy import IndexPolicy
from memstore.json_array import JsonArrayFile, parse_array
from memstore.layout import CONFIG_FILE, FAILURES_FILE, FAILURES_LOCK, ensure_memory_dir, store_dir
from memstore.logger import LazyLogger
from memstore.shared_index import cards_policy, check_index_url, check_name

if TYPE_CHECKING:
    from memstore.index.pg.store_cards import PgCardIndex

logger = LazyLogger(__name__)

Record = dict[str, Any]
T = TypeVar("T")


class CardReads(Protocol):
    """The reads a card store asks of an index, whichever backend holds it."""

    def list_active(self, now: float) -> list[FailureCard]: ...

    def get_by_id(self, card_id: str) -> list[FailureCard]: ...

    def find_matching(
        self, paths: tuple[str, ...], keywords: frozenset[str], error_type: str | None, limit: int, now: float
    ) -> list[FailureCard]: ...


class FailureCardStorage:
    """Failure cards of one workspace: ``<root>/.teaagent/memory/failures.json``.

    Every write is a read-modify-write under ``failures.lock`` (never replaced), so
    concurrent processes never lose each other's cards.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        use_index: bool = True,
        index_url: str | None = None,
        source_name: str | None = None,
    ) -> None:
        self.root = require_path("root", root)
        url = check_index_url(index_url, use_index=use_index)
        name = check_name(source_name)
        directory = ensure_memory_dir(self.root)
        self.path = directory / FAILURES_FILE
        self.lock_path = directory / FAILURES_LOCK
        self.config_path = store_dir(self.root) / CONFIG_FILE
        self._file = JsonArrayFile(self.path, self.lock_path)
        self._index: IndexPolicy[CardIndex] = IndexPolicy(
            functools.partial(CardIndex, self.path, store_dir(self.root), load_records=records_from_bytes)
            if use_index
            else None,
            source=self.path,
        )
        self._shared: IndexPolicy[PgCardIndex] | None = cards_policy(url, name, root=self.root, path=self.path)

    def reindex(self, *, full: bool = False) -> RefreshReport:
        """Bring the card index up to date (``full`` rebuilds it); returns what was done."""
        index = self._index.index()
        if index is None:
            raise IndexUnavailableError(self._index.error or "the failure-card index is disabled or unavailable")
        return index.refresh(full=full)

    def index_status(self) -> IndexState:
        """Entries, bytes indexed and bytes behind of the card index (or why there are none)."""
        index = self._index.index()
        if index is None:
            if self._index.enabled:
                return IndexOff.after(self._index.failure, source=str(self.path))
            return IndexOff("disabled", source=str(self.path))
        try:
            return index.source_status()
        except IndexUnavailableError as exc:
            return IndexOff.after(exc, source=str(self.path))

    def _indexed(self, query: Callable[[CardReads], T]) -> T | None:
        """Answer from the shared index, else the local one; None (scan instead) when neither can be used."""
        if self._shared is not None:
            found = self._shared.ask(query)
            if found is not None:
                return found
        try:
            return self._index.ask(query)
        except StorageError as exc:
            # failures.json is not a readable regular file: the scan reads it as no cards.
            logger.warning("failure cards answered from a scan: %s", exc)
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
        if self._shared is not None:
            return  # the shared index follows on the next read; the local one is only a fallback
        index = self._index.index()
        if index is not None:
            try:
                index.replace_records([record for record in records if isinstance(record, dict)], stat)
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

    def list_all(self) -> list[FailureCard]:
        """Every valid card in file order, active or not; ``[]`` when the file is missing or unreadable."""
        return [card for _, card in self._cards(self._load_records())]

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
        """Active cards ranked by :func:`memstore.card_match.card_match_score` (score > 0 only)."""
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
        enabled, rules, counts = settings_from(config, config_path=self.config_path)
        if not enabled:
            return counts

        def change(records: list[Record]) -> tuple[dict[str, int], bool]:
            now = time.time()
            active = [(card, records[order]) for order, card in self._cards(records) if card.is_active(now=now)]
            return counts, act_on_cards(self.root, active, rules, counts)

        return self._update(change)


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
