"""FailureCardStorage: the JSON store, its failure paths, concurrency and auto-invalidation."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from bounded import run_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.auto_invalidation import MAX_CONFIG_BYTES
from memstore.cards import FailureCard
from memstore.errors import ArgumentTypeError, InvalidArgumentError, MemstoreError
from memstore.failure_cards import FailureCardStorage
from memstore.file_signatures import MAX_SIGNATURE_BYTES

FUTURE = 4e12  # an expiry no test run will reach


def card(card_id: str = "c1", **overrides: Any) -> FailureCard:
    values: dict[str, Any] = {
        "id": card_id, "run_id": "run", "timestamp": 100.0, "error_type": "TypeError",
        "file_path": "src/app.py", "line_number": None, "error_message": "boom",
        "task_description": "parse yaml config", "context_files": [], "expires_at": FUTURE,
    }
    values.update(overrides)
    return FailureCard(**values)


@pytest.fixture
def store(tmp_path: Path) -> FailureCardStorage:
    return FailureCardStorage(tmp_path)


def stored_json(store: FailureCardStorage) -> Any:
    return json.loads(store.path.read_text())


def write_raw(store: FailureCardStorage, payload: object) -> None:
    store.path.write_text(json.dumps(payload))


# -- layout -----------------------------------------------------------------------------------


def test_paths_and_directory(tmp_path: Path) -> None:
    store = FailureCardStorage(str(tmp_path))
    assert store.root == tmp_path
    assert store.path == tmp_path / ".teaagent" / "memory" / "failures.json"
    assert store.lock_path == tmp_path / ".teaagent" / "memory" / "failures.lock"
    assert store.path.parent.is_dir()
    assert not store.path.exists()
    assert store.list_all() == [] and store.list_active() == []


def test_root_must_be_a_path() -> None:
    with pytest.raises(ArgumentTypeError):
        FailureCardStorage(3)  # type: ignore[arg-type]


def test_file_format_is_an_indented_array_ending_with_newline(store: FailureCardStorage) -> None:
    store.append(card("a"))
    text = store.path.read_text()
    assert text == json.dumps([card("a").to_dict()], indent=2) + "\n"


def test_lock_file_is_never_replaced(store: FailureCardStorage) -> None:
    store.append(card("a"))
    inode = os.stat(store.lock_path).st_ino
    store.append(card("b"))
    store.invalidate("a", reason="r")
    store.clear_by_id("b")
    store.prune_expired()
    store.clear_all()
    assert os.stat(store.lock_path).st_ino == inode
    assert not [name for name in os.listdir(store.path.parent) if name.endswith(".tmp")]


# -- append / list / get ------------------------------------------------------------------------


def test_append_list_and_get(store: FailureCardStorage) -> None:
    first, second = card("a"), card("b", file_path="lib/x.py")
    store.append(first)
    store.append(second)
    assert store.list_all() == [first, second]
    assert store.get_by_id("b") == second
    assert store.get_by_id(" b ") == second
    assert store.get_by_id("zzz") is None


def test_append_refuses_non_cards(store: FailureCardStorage) -> None:
    with pytest.raises(ArgumentTypeError):
        store.append(card("a").to_dict())  # type: ignore[arg-type]
    assert not store.path.exists()


def test_get_by_id_returns_the_first_duplicate(store: FailureCardStorage) -> None:
    store.append(card("a", error_message="first"))
    store.append(card("a", error_message="second"))
    found = store.get_by_id("a")
    assert found is not None and found.error_message == "first"
    with pytest.raises(ArgumentTypeError):
        store.get_by_id(None)  # type: ignore[arg-type]


def test_list_active_filters_expired_and_invalidated(store: FailureCardStorage) -> None:
    store.append(card("live"))
    store.append(card("expired", expires_at=time.time() - 10))
    store.append(card("dead", invalidated=True))
    store.append(card("forever", expires_at=None))
    assert [c.id for c in store.list_all()] == ["live", "expired", "dead", "forever"]
    assert [c.id for c in store.list_active()] == ["live", "forever"]


# -- invalidate -------------------------------------------------------------------------------


def test_invalidate_is_persisted_and_permanent(store: FailureCardStorage) -> None:
    store.append(card("a", expires_at=None))
    store.append(card("b"))
    assert store.invalidate("a", reason="fixed upstream") is True
    reopened = FailureCardStorage(store.root)
    found = reopened.get_by_id("a")
    assert found is not None
    assert found.invalidated and found.invalidation_reason == "fixed upstream"
    assert not found.is_active(now=0.0)
    assert found.effective_behavior() == "ignore"
    assert [c.id for c in reopened.list_active()] == ["b"]
    assert store.invalidate("missing", reason="x") is False


def test_invalidate_covers_duplicates_and_keeps_extra_keys(store: FailureCardStorage) -> None:
    write_raw(store, [{**card("a").to_dict(), "signatures": {"files": {"x": "1"}}},
                      {**card("a").to_dict(), "custom": [1, 2]}])
    assert store.invalidate("a", reason="r")
    records = stored_json(store)
    assert [r["invalidated"] for r in records] == [True, True]
    assert records[0]["signatures"] == {"files": {"x": "1"}}
    assert records[1]["custom"] == [1, 2]


def test_invalidate_again_is_true_but_does_not_rewrite(store: FailureCardStorage) -> None:
    store.append(card("a"))
    store.invalidate("a", reason="r")
    inode = os.stat(store.path).st_ino
    assert store.invalidate("a", reason="r") is True
    assert os.stat(store.path).st_ino == inode


def test_invalidate_checks_reason(store: FailureCardStorage) -> None:
    store.append(card("a"))
    with pytest.raises(ArgumentTypeError, match="reason"):
        store.invalidate("a", reason=None)  # type: ignore[arg-type]


# -- prune / clear ----------------------------------------------------------------------------


def test_prune_expired_removes_inactive_cards(store: FailureCardStorage) -> None:
    store.append(card("live"))
    store.append(card("expired", expires_at=time.time() - 1))
    store.append(card("dead", invalidated=True))
    assert store.prune_expired() == 2
    assert [c.id for c in store.list_all()] == ["live"]
    inode = os.stat(store.path).st_ino
    assert store.prune_expired() == 0
    assert os.stat(store.path).st_ino == inode  # nothing to do, nothing written


def test_clear_all(store: FailureCardStorage) -> None:
    store.clear_all()
    assert store.path.read_text() == "[]\n"
    store.append(card("a"))
    store.clear_all()
    assert store.list_all() == [] and stored_json(store) == []


def test_clear_by_id_removes_exactly_one(store: FailureCardStorage) -> None:
    store.append(card("a", error_message="1"))
    store.append(card("b"))
    store.append(card("a", error_message="2"))
    assert store.clear_by_id("a") is True
    assert [(c.id, c.error_message) for c in store.list_all()] == [("b", "boom"), ("a", "2")]
    assert store.clear_by_id("zzz") is False


# -- corruption tolerance ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"not json at all", b"[{\"id\": ", b"\xff\xfe\x00garbage", b"", b"   \n",
     b'{"id": "a"}', b'"just a string"', b"42", b"null"],
)
def test_unreadable_content_reads_as_no_cards(store: FailureCardStorage, content: bytes) -> None:
    store.path.write_bytes(content)
    assert store.list_all() == []
    assert store.list_active() == []
    assert store.get_by_id("a") is None
    assert store.find_matching(["src/app.py"], "parse yaml config") == []


def test_a_directory_in_place_of_the_file_reads_as_no_cards(store: FailureCardStorage) -> None:
    store.path.mkdir()
    assert store.list_all() == []


def test_garbage_file_is_kept_aside_before_the_next_write(store: FailureCardStorage) -> None:
    store.path.write_bytes(b"{ this is not json")
    store.append(card("a"))
    assert [c.id for c in store.list_all()] == ["a"]
    backups = [p for p in store.path.parent.iterdir() if p.name.startswith("failures.json.corrupt-")]
    assert len(backups) == 1
    assert backups[0].read_bytes() == b"{ this is not json"


def test_bad_elements_are_skipped_but_survive_rewrites(store: FailureCardStorage) -> None:
    good = card("good").to_dict()
    odd = {"id": "odd", "something": "from a newer version"}
    elements = [1, "x", None, [good], odd, good, {**good, "id": "bad", "timestamp": "soon"}]
    write_raw(store, elements)
    assert [c.id for c in store.list_all()] == ["good"]
    store.append(card("new"))
    records = stored_json(store)
    assert records == [*elements, card("new").to_dict()]
    assert [c.id for c in store.list_all()] == ["good", "new"]
    assert not [p for p in store.path.parent.iterdir() if ".corrupt-" in p.name]


def test_utf8_bom_is_accepted(store: FailureCardStorage) -> None:
    store.path.write_bytes(b"\xef\xbb\xbf" + json.dumps([card("a").to_dict()]).encode())
    assert [c.id for c in store.list_all()] == ["a"]


# -- find_matching ----------------------------------------------------------------------------


def test_find_matching_examples(store: FailureCardStorage) -> None:
    store.append(card("path", file_path="src/db/conn.py", task_description="zzz", error_type="X"))
    store.append(card("type", file_path="other.py", task_description="zzz", error_type="KeyError"))
    store.append(card("words", file_path="other.py", task_description="Retry the flaky database pool",
                      error_type="X"))
    store.append(card("none", file_path="other.py", task_description="unrelated", error_type="X"))
    found = store.find_matching(["db/conn.py"], "database pool retry", "KeyError", limit=10)
    assert [c.id for c in found] == ["path", "words", "type"]  # 10, 6, 5
    assert [c.id for c in store.find_matching(["db/conn.py"], "database pool", "KeyError")] == \
        ["path", "type", "words"]  # 10, 5, 4
    assert store.find_matching([], "nothing here", None) == []


def test_find_matching_ignores_inactive_cards(store: FailureCardStorage) -> None:
    store.append(card("dead", invalidated=True))
    store.append(card("old", expires_at=time.time() - 1))
    store.append(card("live", timestamp=1.0))
    assert [c.id for c in store.find_matching(["src/app.py"], "")] == ["live"]


def test_find_matching_ties_newest_first_then_file_order(store: FailureCardStorage) -> None:
    for card_id, stamp in [("a", 1.0), ("b", 3.0), ("c", 2.0), ("d", 3.0)]:
        store.append(card(card_id, timestamp=stamp))
    assert [c.id for c in store.find_matching(["app.py"], "", limit=3)] == ["b", "d", "c"]
    assert [c.id for c in store.find_matching(["app.py"], "")] == ["b", "d", "c"]  # default limit 3


def test_find_matching_limits_and_argument_checks(store: FailureCardStorage) -> None:
    store.append(card("a"))
    assert store.find_matching(["app.py"], "", limit=0) == []
    with pytest.raises(InvalidArgumentError):
        store.find_matching(["app.py"], "", limit=-1)
    with pytest.raises(ValueError):
        store.find_matching(["app.py"], "", limit=-5)
    with pytest.raises(ArgumentTypeError):
        store.find_matching(["app.py"], "", limit=1.5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="file_paths"):
        store.find_matching("src/app.py", "")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="task_description"):
        store.find_matching([], None)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="error_type"):
        store.find_matching([], "", 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [2**63, 10**30])
def test_find_matching_a_limit_beyond_sqlite_integers_means_every_card(store: FailureCardStorage, limit: int) -> None:
    store.append(card("a"))
    store.append(card("b"))
    assert sorted(c.id for c in store.find_matching(["app.py"], "", limit=limit)) == ["a", "b"]


# A brute-force reference, written independently of memstore.card_match.
_REF_STOPWORD_TEXT = """a an the and or but in on at to for of with by from as is was are were be been being
have has had do does did will would could should may might must shall can it its this that these those i you
he she we they what which who whom when where why how all any both each few more most other some such no nor
not only own same so than too very just also now then here there use using make making get getting add adding
fix fixing update updating change changing create creating implement implementing write writing test testing
run running build building check checking ensure ensuring handle handling support supporting need needed want
wanted try trying able unable new old first last next previous before after during while until since through
without within about into over under again further once"""
REF_STOPWORDS = set(_REF_STOPWORD_TEXT.split())


def reference_find(records: list[dict[str, Any]], paths: list[str], task: str, error_type: str | None,
                   limit: int, now: float) -> list[str]:
    def words(text: str) -> set[str]:
        return {w for w in re.findall(r"\b[a-z0-9]{3,}\b", text.lower()) if w not in REF_STOPWORDS}

    query_words = words(task)
    results = []
    for position, record in enumerate(records):
        if record["invalidated"] or (record["expires_at"] is not None and now >= record["expires_at"]):
            continue
        points = 0
        for path in paths:
            if path != "" and path in record["file_path"]:
                points = 10
                break
        if error_type and record["error_type"] == error_type:
            points += 5
        shared = query_words & words(record["task_description"])
        if len(shared) > 1:
            points += 2 * len(shared)
        if points > 0:
            results.append((points, record["timestamp"], position, record["id"]))
    results.sort(key=lambda r: (-r[0], -r[1], r[2]))
    return [r[3] for r in results[:limit]]


VOCAB = ["yaml", "config", "parser", "the", "fix", "database", "pool", "Retry", "db", "io", "loader", "tests"]
phrases = st.lists(st.sampled_from(VOCAB), max_size=6).map(" ".join)
PATHS = ["src/app.py", "src/db/pool.py", "lib/x.py", "tests/test_app.py", ""]
record_strategy = st.fixed_dictionaries({
    "file_path": st.sampled_from(PATHS),
    "error_type": st.sampled_from(["TypeError", "KeyError", ""]),
    "task_description": phrases,
    "timestamp": st.sampled_from([1.0, 2.0, 3.0]),
    "invalidated": st.booleans(),
    "expires_at": st.sampled_from([None, FUTURE, 1.0]),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(record_strategy, max_size=12),
    st.lists(st.sampled_from(["app.py", "db/", "src", "", "x.py", "nomatch"]), max_size=3),
    phrases,
    st.sampled_from([None, "TypeError", "KeyError", ""]),
    st.integers(0, 6),
)
def test_find_matching_equals_brute_force(
    records: list[dict[str, Any]], paths: list[str], task: str, error_type: str | None, limit: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = FailureCardStorage(root)
        stored = [card(f"id{n}", **fields).to_dict() for n, fields in enumerate(records)]
        write_raw(store, stored)
        expected = reference_find(stored, paths, task, error_type, limit, time.time())
        assert [c.id for c in store.find_matching(paths, task, error_type, limit)] == expected


# -- concurrency ------------------------------------------------------------------------------


def append_many(root: str, worker: int, count: int) -> None:
    store = FailureCardStorage(root)
    for n in range(count):
        store.append(card(f"w{worker}-{n}"))


def test_concurrent_processes_never_lose_a_card(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers, per_worker = 4, 25
    processes = [ctx.Process(target=append_many, args=(str(tmp_path), w, per_worker)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    ids = [c.id for c in FailureCardStorage(tmp_path).list_all()]
    assert sorted(ids) == sorted(f"w{w}-{n}" for w in range(workers) for n in range(per_worker))
    for w in range(workers):  # each writer's own cards stay in its order
        mine = [i for i in ids if i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{n}" for n in range(per_worker)]


# -- auto-invalidation ------------------------------------------------------------------------

ZERO = {"file_signature_change": 0, "test_refactor": 0, "dependency_version_change": 0}


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def rules_config(*rules: dict[str, Any], enabled: bool = True) -> dict[str, Any]:
    return {"enabled": enabled, "custom_rules": list(rules)}


def unchanged_run(store: FailureCardStorage, config: Any = None) -> None:
    """A second run over unchanged files: zeros and no rewrite at all."""
    before = os.stat(store.path)
    content = store.path.read_bytes()
    assert store.apply_auto_invalidation(config) == ZERO
    after = os.stat(store.path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.path.read_bytes() == content


def test_first_run_only_records_baselines(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    write(tmp_path, "requirements.txt", "requests==1\n")
    store.append(card("a", context_files=["tests/test_app.py", "src/util.py"]))
    assert store.apply_auto_invalidation() == ZERO
    record = stored_json(store)[0]
    files = record["signatures"]["files"]
    assert set(files) == {"src/app.py", "tests/test_app.py"}  # non-test context files are not tracked
    assert re.fullmatch(r"[0-9a-f]{64}", files["src/app.py"])
    assert files["tests/test_app.py"] is None  # missing at first sight
    assert re.fullmatch(r"[0-9a-f]{64}", record["signatures"]["dependencies"])
    assert store.list_active()[0].warning_behavior == "warning"
    unchanged_run(store)


def test_changed_file_invalidates(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.append(card("other", file_path="src/other.py"))
    store.apply_auto_invalidation()
    write(tmp_path, "src/app.py", "v2")
    assert store.apply_auto_invalidation() == {**ZERO, "file_signature_change": 1}
    found = store.get_by_id("a")
    assert found is not None and found.invalidated
    assert "file_signature_change" in (found.invalidation_reason or "")
    assert [c.id for c in store.list_active()] == ["other"]
    unchanged_run(store)


def test_rewriting_identical_bytes_is_not_a_change(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation()
    (tmp_path / "src/app.py").unlink()
    write(tmp_path, "src/app.py", "v1")
    unchanged_run(store)


def test_deleted_file_is_a_change(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation()
    (tmp_path / "src/app.py").unlink()
    assert store.apply_auto_invalidation()["file_signature_change"] == 1
    assert store.list_active() == []


def test_file_created_after_a_missing_baseline_is_a_change(tmp_path: Path, store: FailureCardStorage) -> None:
    store.append(card("a"))
    store.apply_auto_invalidation()
    unchanged_run(store)  # still missing: no change
    write(tmp_path, "src/app.py", "now here")
    assert store.apply_auto_invalidation()["file_signature_change"] == 1


def test_unreadable_file_is_not_a_change(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation()
    baseline = stored_json(store)[0]["signatures"]
    (tmp_path / "src/app.py").unlink()
    (tmp_path / "src/app.py").mkdir()  # exists but cannot be read as a file
    unchanged_run(store)
    assert stored_json(store)[0]["signatures"] == baseline
    (tmp_path / "src/app.py").rmdir()
    write(tmp_path, "src/app.py", "v1")
    unchanged_run(store)


def test_inactive_cards_are_not_touched(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("dead", invalidated=True))
    store.append(card("old", expires_at=1.0))
    assert store.apply_auto_invalidation() == ZERO
    assert all("signatures" not in r for r in stored_json(store))


def test_test_refactor_warns_for_changed_context_tests(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    write(tmp_path, "tests/test_app.py", "t1")
    store.append(card("a", context_files=["tests/test_app.py"], warning_behavior="info"))
    store.apply_auto_invalidation()
    write(tmp_path, "tests/test_app.py", "t2")
    assert store.apply_auto_invalidation() == {**ZERO, "test_refactor": 1}
    found = store.get_by_id("a")
    assert found is not None and found.is_active() and found.warning_behavior == "warning"
    assert "test_refactor" in stored_json(store)[0]["auto_warning"]
    unchanged_run(store)


def test_test_refactor_for_a_card_about_a_test_file(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "web/app.spec.ts", "t1")
    store.append(card("a", file_path="web/app.spec.ts", warning_behavior="info"))
    config = rules_config({"trigger": "file_signature_change", "action": "invalidate", "enabled": False})
    store.apply_auto_invalidation(config)
    write(tmp_path, "web/app.spec.ts", "t2")
    assert store.apply_auto_invalidation(config) == {**ZERO, "test_refactor": 1}
    unchanged_run(store, config)


def test_invalidation_stops_later_rules(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "tests/test_app.py", "t1")
    store.append(card("a", file_path="tests/test_app.py"))
    store.apply_auto_invalidation()
    write(tmp_path, "tests/test_app.py", "t2")
    assert store.apply_auto_invalidation() == {**ZERO, "file_signature_change": 1}


def test_non_test_context_changes_are_ignored(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/util.py", "u1")
    store.append(card("a", context_files=["src/util.py"]))
    store.apply_auto_invalidation()
    write(tmp_path, "src/util.py", "u2")
    unchanged_run(store)


def test_dependency_change_warns_every_card(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "requirements-dev.txt", "pytest==8\n")
    write(tmp_path, "notes.txt", "n1")
    store.append(card("a", warning_behavior="info"))
    store.append(card("b", warning_behavior="block"))
    store.apply_auto_invalidation()
    write(tmp_path, "notes.txt", "n2")  # not a manifest
    unchanged_run(store)
    write(tmp_path, "requirements-dev.txt", "pytest==9\n")
    assert store.apply_auto_invalidation() == {**ZERO, "dependency_version_change": 2}
    assert [c.warning_behavior for c in store.list_active()] == ["warning", "block"]  # raised, never lowered
    assert all("dependency_version_change" in r["auto_warning"] for r in stored_json(store))
    unchanged_run(store)


@pytest.mark.parametrize("manifest", ["package.json", "Cargo.lock", "go.sum", "poetry.lock", "uv.lock"])
def test_new_or_removed_manifest_is_a_dependency_change(
    tmp_path: Path, store: FailureCardStorage, manifest: str
) -> None:
    store.append(card("a"))
    store.apply_auto_invalidation()
    write(tmp_path, manifest, "{}")
    assert store.apply_auto_invalidation()["dependency_version_change"] == 1
    unchanged_run(store)
    (tmp_path / manifest).unlink()
    assert store.apply_auto_invalidation()["dependency_version_change"] == 1


def test_cards_added_later_get_their_own_baseline(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "pyproject.toml", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation()
    write(tmp_path, "pyproject.toml", "v2")
    store.append(card("b"))
    assert store.apply_auto_invalidation()["dependency_version_change"] == 1  # only "a" saw v1
    unchanged_run(store)


@pytest.mark.parametrize(
    ("action", "check"),
    [("invalidate", lambda c: c.invalidated),
     ("warn", lambda c: c.warning_behavior == "warning"),
     ("block", lambda c: c.warning_behavior == "block")],
)
def test_every_action_is_idempotent(
    tmp_path: Path, store: FailureCardStorage, action: str, check: Any
) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a", warning_behavior="info"))
    config = rules_config({"trigger": "file_signature_change", "confidence": "high", "action": action})
    store.apply_auto_invalidation(config)
    write(tmp_path, "src/app.py", "v2")
    assert store.apply_auto_invalidation(config) == {**ZERO, "file_signature_change": 1}
    (found,) = store.list_all()
    assert check(found)
    unchanged_run(store, config)
    unchanged_run(store, config)


def test_block_action_still_needs_a_human_high_confidence_card(
    tmp_path: Path, store: FailureCardStorage
) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("auto"))
    store.append(card("human", reviewer_type="human", confidence="high"))
    config = {"memory": {"auto_invalidation": rules_config(
        {"trigger": "file_signature_change", "confidence": "high", "action": "block"})}}
    store.apply_auto_invalidation(config)
    write(tmp_path, "src/app.py", "v2")
    assert store.apply_auto_invalidation(config)["file_signature_change"] == 2
    behaviors = {c.id: (c.warning_behavior, c.effective_behavior()) for c in store.list_all()}
    assert behaviors == {"auto": ("block", "warning"), "human": ("block", "block")}


def test_rule_paths_filter_by_prefix(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    write(tmp_path, "lib/app.py", "v1")
    store.append(card("src", file_path="src/app.py"))
    store.append(card("lib", file_path="lib/app.py"))
    config = rules_config({"trigger": "file_signature_change", "action": "invalidate", "paths": ["src/"]})
    store.apply_auto_invalidation(config)
    write(tmp_path, "src/app.py", "v2")
    write(tmp_path, "lib/app.py", "v2")
    assert store.apply_auto_invalidation(config) == {**ZERO, "file_signature_change": 1}
    assert [c.id for c in store.list_active()] == ["lib"]
    # the lib change was seen (baseline moved) even though no rule acted on it
    unchanged_run(store, config)


def test_custom_rules_replace_the_default_of_their_trigger(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    write(tmp_path, "tests/test_app.py", "t1")
    store.append(card("a", context_files=["tests/test_app.py"]))
    config = rules_config({"trigger": "test_refactor", "confidence": "high", "action": "invalidate"},
                          {"trigger": "no_such_trigger", "action": "warn"})
    store.apply_auto_invalidation(config)
    write(tmp_path, "tests/test_app.py", "t2")
    result = store.apply_auto_invalidation(config)
    assert result == {**ZERO, "test_refactor": 1, "no_such_trigger": 0}
    found = store.get_by_id("a")
    assert found is not None and found.invalidated
    assert "test_refactor (high confidence)" in (found.invalidation_reason or "")


def test_disabled_does_nothing(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    before = store.path.read_bytes()
    stat = os.stat(store.path)
    assert store.apply_auto_invalidation({"enabled": False}) == ZERO
    assert store.apply_auto_invalidation({"memory": {"auto_invalidation": {"enabled": False}}}) == ZERO
    assert store.path.read_bytes() == before and os.stat(store.path).st_ino == stat.st_ino
    store.apply_auto_invalidation()
    write(tmp_path, "src/app.py", "v2")
    unchanged_run(store, {"enabled": False})
    assert store.list_active() != []


def test_config_is_read_from_the_workspace_file(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    config_path = tmp_path / ".teaagent" / "config.json"
    config_path.write_text(json.dumps({"memory": {"auto_invalidation": {"enabled": False}}}))
    store.apply_auto_invalidation()
    assert "signatures" not in stored_json(store)[0]
    config_path.write_text(json.dumps({"memory": {"auto_invalidation": rules_config(
        {"trigger": "file_signature_change", "action": "warn"})}}))
    store.apply_auto_invalidation()
    write(tmp_path, "src/app.py", "v2")
    assert store.apply_auto_invalidation()["file_signature_change"] == 1
    assert store.list_active() != []  # warned, not invalidated
    # an explicit config overrides the file
    write(tmp_path, "src/app.py", "v3")
    assert store.apply_auto_invalidation({})["file_signature_change"] == 1
    assert store.list_active() == []


WRONG_SHAPES = [
    {"memory": 5}, {"memory": []}, {"memory": "x"}, {"memory": None}, {"memory": True},
    {"memory": {"auto_invalidation": []}}, {"memory": {"auto_invalidation": 5}},
    {"memory": {"auto_invalidation": None}}, {"memory": {"auto_invalidation": {"enabled": "yes"}}},
    {"memory": {"auto_invalidation": {"custom_rules": {}}}},
    {"memory": {"auto_invalidation": {"custom_rules": None}}},
    {"memory": {"auto_invalidation": {"custom_rules": "file_signature_change"}}},
    {"memory": {"auto_invalidation": {"custom_rules": [5]}}},
    {"memory": {"auto_invalidation": {"custom_rules": [{"trigger": "file_signature_change", "action": "nonsense"}]}}},
    {"memory": {"auto_invalidation": {"custom_rules": [
        {"trigger": "test_refactor", "action": "warn"}, {"trigger": "file_signature_change", "action": "?"}]}}},
]


@pytest.mark.parametrize("content", ["{broken", "[]", "5", '"x"', *(json.dumps(shape) for shape in WRONG_SHAPES)])
def test_invalid_config_acts_on_nothing(
    tmp_path: Path, store: FailureCardStorage, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The file changed since its baseline: the default rule would invalidate the card.
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation({})
    write(tmp_path, "src/app.py", "v2")
    (tmp_path / ".teaagent" / "config.json").write_text(content)
    before = store.path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="memstore.auto_invalidation"):
        assert store.apply_auto_invalidation() == ZERO
    assert store.path.read_bytes() == before
    assert "skipped" in caplog.text or "not valid JSON" in caplog.text


@pytest.mark.parametrize("shape", WRONG_SHAPES)
def test_wrong_shaped_config_argument_acts_on_nothing(
    tmp_path: Path, store: FailureCardStorage, shape: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation({})
    write(tmp_path, "src/app.py", "v2")
    before = store.path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="memstore.auto_invalidation"):
        assert store.apply_auto_invalidation(shape) == ZERO
    assert store.path.read_bytes() == before
    assert "skipped" in caplog.text
    # the same store with a well-shaped config does act
    assert store.apply_auto_invalidation({"memory": {}})["file_signature_change"] == 1


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "too-large"])
def test_config_that_is_not_a_small_regular_file_acts_on_nothing(
    tmp_path: Path, store: FailureCardStorage, kind: str
) -> None:
    write(tmp_path, "src/app.py", "v1")
    store.append(card("a"))
    store.apply_auto_invalidation({})
    write(tmp_path, "src/app.py", "v2")
    config_path = tmp_path / ".teaagent" / "config.json"
    if kind == "fifo":
        os.mkfifo(config_path)
    elif kind == "dev-zero":
        config_path.symlink_to("/dev/zero")
    elif kind == "directory":
        config_path.mkdir()
    else:
        config_path.write_text(json.dumps({"memory": {}, "pad": "x" * MAX_CONFIG_BYTES}))
    before = store.path.read_bytes()
    assert run_bounded(store.apply_auto_invalidation) == ZERO
    assert store.path.read_bytes() == before


def test_config_argument_must_be_a_mapping(store: FailureCardStorage) -> None:
    with pytest.raises(ArgumentTypeError):
        store.apply_auto_invalidation([])  # type: ignore[arg-type]


def test_auto_invalidation_keeps_other_records(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/app.py", "v1")
    odd = {"id": "odd", "note": "not a card"}
    write_raw(store, [odd, {**card("a").to_dict(), "extra": {"k": 1}}])
    store.apply_auto_invalidation()
    records = stored_json(store)
    assert records[0] == odd
    assert records[1]["extra"] == {"k": 1} and "signatures" in records[1]


# -- what auto-invalidation may hash (issue 9, item 9) ---------------------------------------------


def _hostile_target(tmp_path: Path, kind: str) -> str:
    """A card file_path naming something that must get no signature; returns the path string."""
    root = tmp_path
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("outside v1")
    if kind == "dev-zero":
        return "/dev/zero"
    if kind == "absolute-outside":
        return str(outside / "secret.txt")
    if kind == "dotdot":
        return f"../{outside.name}/secret.txt"
    if kind == "link-to-dev-zero":
        (root / "zero.py").symlink_to("/dev/zero")
        return "zero.py"
    if kind == "link-outside":
        (root / "out.py").symlink_to(outside / "secret.txt")
        return "out.py"
    if kind == "dir-link-outside":
        (root / "vendor").symlink_to(outside)
        return "vendor/secret.txt"
    if kind == "fifo":
        os.mkfifo(root / "pipe.py")
        return "pipe.py"
    if kind == "directory":
        (root / "pkg").mkdir()
        return "pkg"
    if kind == "too-large":
        with open(root / "big.bin", "wb") as handle:
            handle.truncate(MAX_SIGNATURE_BYTES + 1)  # sparse: costs no disk
        return "big.bin"
    if kind == "nul":
        return "src/a\x00b.py"
    if kind == "surrogate":
        return "src/\ud800.py"
    raise AssertionError(kind)


HOSTILE_KINDS = ["dev-zero", "absolute-outside", "dotdot", "link-to-dev-zero", "link-outside", "dir-link-outside",
                 "fifo", "directory", "too-large", "nul", "surrogate"]


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
def test_auto_invalidation_hashes_only_regular_files_inside_the_root(
    tmp_path: Path, store: FailureCardStorage, kind: str
) -> None:
    target = _hostile_target(tmp_path, kind)
    store.append(card("a", file_path=target, context_files=[target, "tests/test_x.py"]))
    assert run_bounded(store.apply_auto_invalidation, {}) == ZERO
    recorded = stored_json(store)[0]["signatures"]["files"]
    assert target not in recorded  # no baseline: never a change
    after_first = store.path.read_bytes()
    # Idempotent, and a change behind the path (outside the root) never fires.
    outside = tmp_path.parent / f"{tmp_path.name}-outside" / "secret.txt"
    outside.write_text("outside v2")
    assert run_bounded(store.apply_auto_invalidation, {}) == ZERO
    assert store.path.read_bytes() == after_first
    assert [c.id for c in store.list_active()] == ["a"]
    # the lock was released: another writer gets through
    store.append(card("b"))


def test_a_dependency_manifest_linked_to_a_device_is_no_signature(tmp_path: Path, store: FailureCardStorage) -> None:
    (tmp_path / "package.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "requirements.txt")
    store.append(card("a"))
    assert run_bounded(store.apply_auto_invalidation, {}) == ZERO
    # neither is a file: the manifests are as if absent (the hash of no files)
    assert stored_json(store)[0]["signatures"]["dependencies"] == hashlib.sha256().hexdigest()
    # a manifest that is a link out of the root has no signature, so neither has the set
    outside = tmp_path.parent / f"{tmp_path.name}-outside.toml"
    outside.write_text("[project]")
    (tmp_path / "pyproject.toml").symlink_to(outside)
    assert run_bounded(store.apply_auto_invalidation, {}) == ZERO
    before = store.path.read_bytes()
    outside.write_text("[project] changed")
    assert run_bounded(store.apply_auto_invalidation, {}) == ZERO
    assert store.path.read_bytes() == before


def test_links_and_dotdot_that_stay_inside_the_root_are_followed(tmp_path: Path, store: FailureCardStorage) -> None:
    write(tmp_path, "src/real.py", "v1")
    (tmp_path / "src" / "alias.py").symlink_to("real.py")
    store.append(card("link", file_path="src/alias.py"))
    store.append(card("dots", file_path="src/../src/real.py"))
    store.append(card("abs", file_path=str(tmp_path / "src" / "real.py")))
    store.apply_auto_invalidation({})
    write(tmp_path, "src/real.py", "v2")
    assert store.apply_auto_invalidation({})["file_signature_change"] == 3
    assert store.list_active() == []


# -- hostile numbers in failures.json (issue 9, item 10) --------------------------------------------

HOSTILE_NUMBERS: list[Any] = [10**400, -(10**400), float("inf"), float("-inf"), float("nan"), "123", True, None, [1]]


def short_id(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 12 else f"{text[:6]}..{len(text)}chars"


@pytest.mark.parametrize("field", ["timestamp", "expires_at"])
@pytest.mark.parametrize("value", HOSTILE_NUMBERS, ids=short_id)
@pytest.mark.parametrize("use_index", [True, False])
def test_unusable_numbers_skip_the_card_everywhere(
    tmp_path: Path, field: str, value: Any, use_index: bool
) -> None:
    store = FailureCardStorage(tmp_path, use_index=use_index)
    good = card("good", timestamp=200.0)
    hostile = {**card("bad").to_dict(), field: value}
    if field == "expires_at" and value is None:
        hostile[field] = 10**400
    write_raw(store, [hostile, good.to_dict()])
    raw = store.path.read_bytes()
    assert [c.id for c in store.list_all()] == ["good"]
    assert [c.id for c in store.list_active()] == ["good"]
    assert store.get_by_id("bad") is None
    assert [c.id for c in store.find_matching(["src/app.py"], "parse yaml config")] == ["good"]
    assert store.invalidate("bad", reason="x") is False
    assert store.clear_by_id("bad") is False
    assert store.path.read_bytes() == raw  # the skipped record is kept, untouched
    store.append(card("new"))  # the write path (and the index write-through) copes too
    assert [c.id for c in store.list_all()] == ["good", "new"]
    assert store.prune_expired() == 0
    assert json.loads(store.path.read_text())[0]["id"] == "bad"
    assert store.apply_auto_invalidation({}) == ZERO


def test_from_dict_never_raises_on_numbers() -> None:
    base = card("a").to_dict()
    for field in ("timestamp", "expires_at", "line_number", "evidence_exit_code"):
        for value in [*HOSTILE_NUMBERS, 10**4000, 1e308, -1e308, 2**64, -0.0]:
            FailureCard.from_dict({**base, field: value})  # must not raise
    assert FailureCard.from_dict({**base, "timestamp": 1e300}) is not None


def test_constructing_a_card_with_an_overflowing_number_is_a_typed_error() -> None:
    with pytest.raises(InvalidArgumentError):
        card("a", timestamp=10**400)
    with pytest.raises(InvalidArgumentError):
        FailureCard.create("r", "E", "a.py", "m", "t", [], ttl_seconds=10**400)
    valid = card("a")
    with pytest.raises(InvalidArgumentError):
        valid.expires_at = 10**400


def test_append_refuses_an_invalid_card_before_writing(store: FailureCardStorage) -> None:
    broken = card("a")
    object.__setattr__(broken, "timestamp", 10**400)  # bypasses the per-field check
    with pytest.raises(InvalidArgumentError):
        store.append(broken)
    assert not store.path.exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_failures_json_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    store = FailureCardStorage(tmp_path)
    if kind == "fifo":
        os.mkfifo(store.path)
    else:
        store.path.symlink_to("/dev/zero")
    assert run_bounded(store.list_all) == []
    assert run_bounded(store.list_active) == []
    assert run_bounded(store.get_by_id, "a") is None
    assert run_bounded(store.find_matching, ["a.py"], "parse yaml config") == []
    with pytest.raises(MemstoreError):  # a write never replaces what it could not read
        run_bounded(store.append, card("a"))


@pytest.mark.parametrize("use_index", [True, False])
@pytest.mark.parametrize("kind", ["link_to_dev_zero", "fifo", "link_to_a_file_outside"])
def test_a_failures_json_that_is_no_regular_file_is_neither_followed_nor_blocks(
    tmp_path: Path, kind: str, use_index: bool
) -> None:
    """A committed link to /dev/zero (git stores links) must not eat memory; a named pipe must not block."""
    from memstore.errors import NotRegularFileError

    root = tmp_path / "repo"
    storage = FailureCardStorage(root, use_index=use_index)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps([card("outside").to_dict()]))
    if kind == "fifo":
        os.mkfifo(storage.path)
    else:
        storage.path.symlink_to("/dev/zero" if kind == "link_to_dev_zero" else outside)
    assert storage.list_all() == []
    assert storage.list_active() == []
    assert storage.get_by_id("outside") is None
    assert storage.find_matching(["a.py"], "task", "TypeError") == []
    with pytest.raises(NotRegularFileError):
        storage.append(card("new"))
    assert outside.read_text() == json.dumps([card("outside").to_dict()])


def test_a_pinned_json_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    from memstore.pinned import PinnedFileStorage

    root = tmp_path / "repo"
    (root / ".teaagent" / "memory").mkdir(parents=True)
    os.mkfifo(root / ".teaagent" / "memory" / "pinned.json")
    assert PinnedFileStorage(root).list_all() == []
