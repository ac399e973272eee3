"""``MemoryCatalog.explain`` and ``memstore search --explain``: the plan a search took, and the same answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog
from memstore.errors import ArgumentTypeError, InvalidArgumentError
from memstore.index import search as planner_module

WORDS = ["alpha", "beta", "gamma", "delta", "ab", "x", "commonword", "rareword"]


def _fill(root: Path, count: int = 120) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for n in range(count):
        words = ["commonword", WORDS[n % 4], WORDS[(n * 7) % 6]]
        if n % 40 == 0:
            words.append("rareword")
        tags = ["auto-curated"] if n % 9 == 0 else (["alpha", "ab"] if n % 5 == 0 else [])
        catalog.add(" ".join(words) + f" note {n}", tags=tags)
    return catalog


@contextmanager
def _small_caps(*, walk_seconds: float | None = None) -> Iterator[None]:
    """A tiny candidate cap, so a catalog of a hundred entries takes every branch of the planner."""
    with (
        mock.patch.object(planner_module, "CANDIDATE_CAP", 3),
        mock.patch.object(planner_module, "DIRECT_ROWS", 3),
        mock.patch.object(planner_module, "SET_ROWS", 3),
    ):
        if walk_seconds is None:
            yield
        else:
            with mock.patch.object(planner_module, "WALK_SECONDS", walk_seconds):
                yield


def _ids(catalog: MemoryCatalog, query: str, limit: int = 10) -> tuple[str, ...]:
    return tuple(entry.memory_id for entry in catalog.search(query, limit=limit))


def test_a_rare_word_is_narrowed_and_the_answer_is_the_search(tmp_path: Path) -> None:
    catalog = _fill(tmp_path)
    plan = catalog.explain("rareword")
    assert plan.path == "index" and plan.reason == ""
    assert plan.index_state == "not indexed"  # the first query builds it
    assert [step.step for step in plan.steps] == ["terms", "narrow", "narrow", "read"]
    terms, probe, score, read = plan.steps
    assert terms.detail == "terms containing 'rareword'" and terms.outcome.startswith("content: 1 terms")
    assert probe.candidates is not None and probe.candidates >= 3 and probe.outcome.startswith("few")
    assert score.candidates == probe.candidates
    assert read.candidates == 3
    assert plan.memory_ids == _ids(catalog, "rareword") and len(plan.memory_ids) == 3
    assert all(step.seconds >= 0 for step in plan.steps) and plan.seconds >= 0
    assert catalog.explain("rareword").index_state == "fresh"
    with open(catalog.path, "ab") as handle:  # another process appends
        handle.write(b'{"content": "rareword late", "created_at": "2030-01-01T00:00:00+00:00", "memory_id": "m1"}\n')
    behind = catalog.explain("rareword")
    assert behind.index_state == "behind"
    assert "m1" in behind.memory_ids and behind.memory_ids == _ids(catalog, "rareword")


def test_a_common_word_expands_and_walks(tmp_path: Path) -> None:
    catalog = _fill(tmp_path)
    with _small_caps():
        plan = catalog.explain("commonword ab")
        expected = _ids(catalog, "commonword ab")
    steps = [(step.step, step.detail) for step in plan.steps]
    assert steps[:2] == [("terms", "terms containing 'commonword'"), ("terms", "terms containing 'ab'")]
    # No tag holds 'commonword': its tags column is known empty, so only its content is large.
    assert plan.steps[0].outcome.endswith("tags: none")
    together = plan.steps[2]
    assert together.detail == "rows of 2 tokens together in the word index"
    assert together.candidates is None and "too many" in together.outcome
    assert ("expand", "'ab' in content and tags") in steps
    walks = [step for step in plan.steps if step.step == "walk"]
    assert len(walks) == 1 and walks[0].detail.startswith("every bonus class, best first")
    assert walks[0].outcome == "done" and walks[0].candidates
    assert plan.memory_ids == expected == _ids(MemoryCatalog(tmp_path, use_index=False), "commonword ab")


def test_a_walk_over_its_budget_shows_the_fallback(tmp_path: Path) -> None:
    catalog = _fill(tmp_path)
    with _small_caps(walk_seconds=-1.0):
        plan = catalog.explain("commonword", limit=10)
        expected = _ids(catalog, "commonword", limit=10)
    names = [step.step for step in plan.steps]
    assert "fallback" in names
    walk = plan.steps[names.index("fallback") - 1]
    assert walk.step == "walk" and walk.outcome == "over its time budget"
    count = plan.steps[names.index("fallback")]
    assert count.detail == "rows the word index admits for every token" and count.candidates == 120
    assert plan.memory_ids == expected == _ids(MemoryCatalog(tmp_path, use_index=False), "commonword", limit=10)


def test_without_the_index_the_plan_is_a_scan_and_says_why(tmp_path: Path) -> None:
    _fill(tmp_path, 20)
    plan = MemoryCatalog(tmp_path, use_index=False).explain("alpha")
    assert plan.path == "scan" and "disabled" in plan.reason and plan.index_state is None
    assert [(step.step, step.candidates) for step in plan.steps] == [("scan", 20)]
    assert plan.memory_ids == _ids(MemoryCatalog(tmp_path), "alpha")

    broken = tmp_path / "broken"
    (broken / ".teaagent").mkdir(parents=True)
    (broken / ".teaagent" / "index").write_text("not a directory")
    _fill(broken, 5)
    failed = MemoryCatalog(broken).explain("alpha")
    assert failed.path == "scan" and failed.reason.startswith("the index failed")
    assert failed.memory_ids == _ids(MemoryCatalog(broken, use_index=False), "alpha")


def test_nothing_to_search(tmp_path: Path) -> None:
    catalog = _fill(tmp_path, 3)
    for query, limit, reason in [("   ", 10, "no tokens"), ("alpha", 0, "limit is 0")]:
        plan = catalog.explain(query, limit=limit)
        assert plan.path == "none" and reason in plan.reason
        assert plan.steps == () and plan.memory_ids == ()


def test_arguments_are_checked_like_search(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    with pytest.raises(InvalidArgumentError):
        catalog.explain("x", limit=-1)
    with pytest.raises(ArgumentTypeError):
        catalog.explain(None)  # type: ignore[arg-type]


def test_the_plan_is_frozen_and_serialises(tmp_path: Path) -> None:
    plan = _fill(tmp_path, 10).explain("alpha beta")
    with pytest.raises(AttributeError):
        plan.path = "scan"  # type: ignore[misc]
    data = json.loads(json.dumps(plan.to_dict()))
    assert set(data) == {
        "query", "tokens", "limit", "path", "reason", "index_state", "steps", "memory_ids", "results", "seconds"
    }  # fmt: skip
    assert data["tokens"] == ["alpha", "beta"] and data["results"] == len(plan.memory_ids)
    assert set(data["steps"][0]) == {"step", "detail", "candidates", "outcome", "seconds"}


@pytest.fixture(scope="module")
def shared_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("explained")
    _fill(root, 150).reindex()
    return root


QUERIES = st.lists(st.sampled_from([*WORDS, "note", "1", "12", "zzz", "com"]), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=QUERIES, limit=st.integers(0, 40), small=st.booleans())
def test_explain_answers_exactly_what_search_and_a_scan_answer(
    shared_catalog: Path, query: str, limit: int, small: bool
) -> None:
    catalog = MemoryCatalog(shared_catalog, readonly=True)
    with _small_caps() if small else _no_patch():
        plan = catalog.explain(query, limit=limit)
        searched = _ids(catalog, query, limit)
    assert plan.memory_ids == searched == _ids(MemoryCatalog(shared_catalog, use_index=False), query, limit)
    assert plan.path == ("none" if limit == 0 else "index")


@contextmanager
def _no_patch() -> Iterator[None]:
    yield


def _cli(root: Path, *args: str) -> str:
    env = dict(os.environ, HOME=str(root), COLUMNS="200")
    run = subprocess.run(
        [sys.executable, "-m", "memstore", "search", *args, "--root", str(root)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    return run.stdout


def test_cli_search_explain(tmp_path: Path) -> None:
    _fill(tmp_path, 30).reindex()
    text = _cli(tmp_path, "rareword", "--explain")
    assert "answered: by the index (fresh)" in text
    assert "results:  1 (limit 10)" in text
    assert "STEP" in text and "narrow" in text and "read" in text
    data = json.loads(_cli(tmp_path, "rareword", "--explain", "--json"))
    assert data["path"] == "index" and data["results"] == 1
    assert [step["step"] for step in data["steps"]] == ["terms", "narrow", "narrow", "read"]
    plain = json.loads(_cli(tmp_path, "rareword", "--json"))
    assert [entry["memory_id"] for entry in plain["entries"]] == data["memory_ids"]



@pytest.mark.parametrize("limit", [2**63, 10**400])
def test_a_huge_limit_is_clamped_like_search(tmp_path: Path, limit: int) -> None:
    # explain validated the limit but kept the unclamped value: OverflowError from SQLite.
    catalog = MemoryCatalog(tmp_path)
    catalog.add(content="alpha beta")
    catalog.add(content="alpha gamma")
    plan = catalog.explain("alpha", limit=limit)
    assert plan.path == "index"
    assert list(plan.memory_ids) == [entry.memory_id for entry in catalog.search("alpha", limit=limit)]
