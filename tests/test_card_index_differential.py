"""Differential tests: failure-card answers from the index equal the storage's own scan."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.cards import FailureCard
from memstore.failure_cards import FailureCardStorage

PATHS = ["src/app.py", "src/db/models.py", "tests/test_app.py", "a\x00b.py", "bad\ud800.py", "ÿ/ü.py", ""]
ERRORS = ["TypeError", "ImportError", "KeyError", "\ud800Err", ""]
TASKS = ["fix the database migration script", "database migration broke the models", "render template cache",
         "cache invalidation in template render", "the and of", "migration models database template cache"]
NOW = time.time()
# Numbers a card cannot hold (issue 9): such a card is skipped by the index and the scan alike.
HOSTILE = [10**400, -(10**400), float("inf"), float("-inf"), float("nan"), "123", True, False, [1.0], {}]
# Numbers it can: huge or odd but finite as floats.
ODD_FINITE = [1e300, -1e300, 2**63, 2**64 + 1, -0.0, 0]


@st.composite
def cards(draw: st.DrawFn) -> dict:
    return {
        "id": draw(st.sampled_from(["c1", "c2", "c3", "\ud800c"])),
        "run_id": "r",
        "timestamp": draw(st.sampled_from([NOW - 100, NOW - 50, NOW - 50, 1000.0, *ODD_FINITE, *HOSTILE])),
        "error_type": draw(st.sampled_from(ERRORS)),
        "file_path": draw(st.sampled_from(PATHS)),
        "line_number": None,
        "error_message": "boom",
        "task_description": draw(st.sampled_from(TASKS)),
        "context_files": [],
        "confidence": "high",
        "expires_at": draw(st.sampled_from([None, NOW + 3600, NOW - 1, *ODD_FINITE, *HOSTILE])),
        "invalidated": draw(st.booleans()),
        "invalidation_reason": None,
        "warning_behavior": "warning",
        "reviewer_type": "auto",
        "evidence_command": None,
        "evidence_exit_code": None,
    }


def same(root: Path, paths: list[str], task: str, error: str | None) -> None:
    indexed, scanned = FailureCardStorage(root), FailureCardStorage(root, use_index=False)
    assert indexed.list_all() == scanned.list_all()
    for limit in (1, 3, 20):
        assert indexed.find_matching(paths, task, error, limit) == scanned.find_matching(paths, task, error, limit)
    assert indexed.list_active() == scanned.list_active()
    for card_id in ("c1", "c2", "\ud800c", "missing"):
        assert indexed.get_by_id(card_id) == scanned.get_by_id(card_id)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(st.one_of(cards(), st.just({"not": "a card"})), max_size=10),
    rewrite=st.lists(cards(), max_size=5),
    paths=st.lists(st.sampled_from(["src", "app.py", "models", "\x00", "\ud800", "", "tests/"]), max_size=3),
    task=st.sampled_from(TASKS),
    error=st.sampled_from([None, *ERRORS]),
)
def test_index_equals_scan(tmp_path_factory: pytest.TempPathFactory, records: list[dict], rewrite: list[dict],
                           paths: list[str], task: str, error: str | None) -> None:
    root = tmp_path_factory.mktemp("cards")
    storage = FailureCardStorage(root)
    storage.path.write_text(json.dumps(records, indent=2))
    same(root, paths, task, error)
    # memstore's own rewrites (write-through) ...
    for record in rewrite[:2]:
        card = FailureCard.from_dict(record)
        if card is not None:
            storage.append(card)
    storage.invalidate("c1", reason="test")
    same(root, paths, task, error)
    # ... and an external rewrite with a new inode (git checkout).
    tmp = storage.path.with_name("co.tmp")
    tmp.write_text(json.dumps(rewrite + records, indent=2))
    os.replace(tmp, storage.path)
    same(root, paths, task, error)
    storage.path.write_text("not json")
    same(root, paths, task, error)


def test_card_answers_come_from_the_index(tmp_path: Path) -> None:
    storage = FailureCardStorage(tmp_path)
    card = FailureCard.create("r", "TypeError", "src/app.py", "boom", "fix database migration models", [])
    storage.append(card)
    assert storage.find_matching(["app.py"], "database migration models") == [card]
    status = storage.index_status()
    assert status.state == "fresh" and status.entries == 1
    assert storage.reindex().action == "none"
    assert storage.reindex(full=True).action == "rebuilt"
