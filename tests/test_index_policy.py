"""memstore.index_policy: when a store asks its index, and the one back-off the catalog and the cards share."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from memstore import index_policy
from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.errors import IndexUnavailableError, StorageError
from memstore.failure_cards import FailureCardStorage
from memstore.index.card_index import CardIndex
from memstore.index.catalog_index import CatalogIndex
from memstore.index.db import IndexBusyError
from memstore.index.report import IndexOff
from memstore.index_policy import RETRY_SECONDS, IndexPolicy

SOURCE = Path("memory.jsonl")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(index_policy, "clock", fake)
    return fake


class Index:
    """A stand-in index that counts the questions it is asked and fails on demand."""

    def __init__(self) -> None:
        self.asked = 0
        self.fail_with: Exception | None = None

    def answer(self) -> str:
        self.asked += 1
        if self.fail_with is not None:
            raise self.fail_with
        return "from the index"


def policy_with(index: Index, opened: list[int] | None = None) -> IndexPolicy[Index]:
    def open_index() -> Index:
        if opened is not None:
            opened.append(1)
        return index

    return IndexPolicy(open_index, source=SOURCE)


def test_a_disabled_policy_never_opens_or_asks() -> None:
    policy: IndexPolicy[Index] = IndexPolicy(None, source=SOURCE)
    assert not policy.enabled and policy.index() is None and policy.error is None
    assert policy.ask(lambda index: pytest.fail("a disabled index was asked")) is None


def test_the_index_opens_on_first_use_and_only_once() -> None:
    opened: list[int] = []
    index = Index()
    policy = policy_with(index, opened)
    assert policy.enabled and opened == []
    assert policy.ask(Index.answer) == "from the index"
    assert policy.ask(Index.answer) == "from the index"
    assert opened == [1] and index.asked == 2 and policy.index() is index


def test_busy_answers_only_this_call_from_a_scan(clock: Clock) -> None:
    index = Index()
    policy = policy_with(index)
    index.fail_with = IndexBusyError("database is locked")
    assert policy.ask(Index.answer) is None
    assert policy.error is None
    index.fail_with = None
    assert policy.ask(Index.answer) == "from the index"  # at once, no back-off
    assert index.asked == 2


def test_a_failure_backs_off_for_the_retry_time_then_asks_again(clock: Clock) -> None:
    index = Index()
    policy = policy_with(index)
    index.fail_with = IndexUnavailableError("file is not a database")
    assert policy.ask(Index.answer) is None
    assert policy.error == "file is not a database"
    index.fail_with = None
    clock.now += RETRY_SECONDS - 0.001
    assert policy.ask(Index.answer) is None and policy.index() is None
    assert index.asked == 1, "the index is not asked while backing off"
    clock.now += 0.002
    assert policy.ask(Index.answer) == "from the index"
    assert policy.error is None and index.asked == 2


def test_a_failure_after_a_retry_starts_a_new_back_off(clock: Clock) -> None:
    index = Index()
    policy = policy_with(index)
    index.fail_with = IndexUnavailableError("first")
    policy.ask(Index.answer)
    clock.now += RETRY_SECONDS
    index.fail_with = IndexUnavailableError("second")
    assert policy.ask(Index.answer) is None and policy.error == "second"
    clock.now += RETRY_SECONDS / 2
    assert policy.index() is None and index.asked == 2


def test_errors_that_are_not_the_index_are_not_swallowed() -> None:
    index = Index()
    policy = policy_with(index)
    index.fail_with = StorageError("the canonical file cannot be read")
    with pytest.raises(StorageError):
        policy.ask(Index.answer)
    index.fail_with = ValueError("a bug")
    with pytest.raises(ValueError, match="a bug"):
        policy.ask(Index.answer)
    assert policy.error is None


def test_failures_are_logged_once_each_with_the_source(caplog: pytest.LogCaptureFixture) -> None:
    index = Index()
    policy = policy_with(index)
    with caplog.at_level(logging.INFO, logger="memstore.index_policy"):
        index.fail_with = IndexBusyError("locked")
        policy.ask(Index.answer)
        index.fail_with = IndexUnavailableError("damaged")
        policy.ask(Index.answer)
    levels = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert levels[0][0] == logging.INFO and "busy for memory.jsonl" in levels[0][1] and "locked" in levels[0][1]
    assert levels[1][0] == logging.WARNING and "unavailable for memory.jsonl" in levels[1][1]
    assert len(levels) == 2


# ---------------------------------------------------------------- both stores follow the one policy


def _failing(monkeypatch: pytest.MonkeyPatch, cls: type, name: str, error: Exception) -> list[int]:
    """Make ``cls.name`` raise ``error`` while the returned list is empty; count every call."""
    calls: list[int] = []
    real: Callable[..., object] = getattr(cls, name)

    def patched(self: object, *args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, patched)
    return calls


def test_the_catalog_scans_during_the_back_off_and_returns_to_the_index(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = catalog.add("deploys freeze on fridays")
    calls = _failing(monkeypatch, CatalogIndex, "search", IndexUnavailableError("damaged"))
    assert catalog.search("fridays") == [entry]  # answered by the scan
    assert catalog.search("fridays") == [entry]
    assert len(calls) == 1, "no index call during the back-off"
    assert catalog.health_report()["index"] == {"state": "unavailable", "error": "damaged"}
    clock.now += RETRY_SECONDS
    assert catalog.search("fridays") == [entry]
    assert len(calls) == 2


@pytest.fixture
def stored(tmp_path: Path) -> tuple[FailureCardStorage, FailureCard]:
    storage = FailureCardStorage(tmp_path)
    card = FailureCard.create("r", "TypeError", "src/app.py", "boom", "fix database migration models", [])
    storage.append(card)
    return storage, card


def test_the_failure_cards_scan_during_the_back_off_and_return_to_the_index(
    stored: tuple[FailureCardStorage, FailureCard], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card storage once gave its index up for the life of the object; now it backs off like the catalog."""
    storage, card = stored
    calls = _failing(monkeypatch, CardIndex, "find_matching", IndexUnavailableError("damaged"))
    assert storage.find_matching(["app.py"], "database migration models") == [card]
    assert storage.find_matching(["app.py"], "database migration models") == [card]
    assert len(calls) == 1, "no index call during the back-off"
    status = storage.index_status()
    assert status == IndexOff("unavailable", "damaged", source=str(storage.path))
    assert status.to_dict() == {"state": "unavailable", "source": str(storage.path), "error": "damaged"}
    with pytest.raises(IndexUnavailableError, match="damaged"):
        storage.reindex()
    clock.now += RETRY_SECONDS
    assert storage.find_matching(["app.py"], "database migration models") == [card]
    assert len(calls) == 2
    assert storage.index_status().state == "fresh"


def test_a_busy_card_index_answers_only_that_call_from_a_scan(
    stored: tuple[FailureCardStorage, FailureCard], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, card = stored
    calls = _failing(monkeypatch, CardIndex, "list_active", IndexBusyError("database is locked"))
    assert storage.list_active() == [card]
    assert storage.list_active() == [card]
    assert len(calls) == 2, "the next call asks the index again"


def test_a_store_opened_without_an_index_reports_it_disabled(tmp_path: Path) -> None:
    storage = FailureCardStorage(tmp_path, use_index=False)
    assert storage.index_status().to_dict() == {"state": "disabled", "source": str(storage.path)}
    with pytest.raises(IndexUnavailableError, match="disabled"):
        storage.reindex()
    catalog = MemoryCatalog(tmp_path, use_index=False)
    assert catalog.health_report()["index"] == {"state": "disabled", "error": None}
