"""Filtered search and list (tags, branch, run): the index answers exactly what a filtered scan answers.

The reference filters the spec's plain entries first and then runs the spec's search
over what is left; memstore must agree on the index path (under every planner path)
and on the scan path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_reference import spec_search
from test_index_differential import PLANS, QUERY_WORDS, apply, operations, reference, write_raw

from memstore.catalog import MemoryCatalog
from memstore.errors import ArgumentTypeError, InvalidArgumentError

TAGS = ["auto-curated", "run-summary", "abc", "a", "a\nb", "x y", "😀", "\ud800", "Tag"]
BRANCHES = [None, "b1", "b2", "bé", "\ud800", "b1\x00"]
RUNS = [None, "r1", "r2"]
WORDS = ["alpha", "beta", "abc", "a", "b", "😀", "x", "\ud800"]


@st.composite
def entry_line(draw: st.DrawFn) -> bytes:
    payload = {
        "memory_id": draw(st.sampled_from(["id1", "id2", "id3", "abcd1", "abcd2"])),
        "content": " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))),
        "tags": draw(st.lists(st.sampled_from(TAGS), max_size=3)),
        "created_at": draw(st.sampled_from(["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00", "2026"])),
        "branch_name": draw(st.sampled_from(BRANCHES)),
        "run_id": draw(st.sampled_from(RUNS)),
    }
    return json.dumps(payload, sort_keys=True).encode()


filters = st.fixed_dictionaries(
    {
        "tags": st.lists(st.sampled_from([t.lower() for t in TAGS] + ["TAG", " abc "]), max_size=2),
        "branch_name": st.sampled_from(BRANCHES),
        "run_id": st.sampled_from(RUNS),
    }
)


def admitted(entry: object, flt: dict) -> bool:
    """Written from the issue's words: every tag present (as stored, i.e. lowercased), branch and run equal."""
    tags = {tag.strip().lower() for tag in flt["tags"]}
    if flt["branch_name"] is not None and entry.branch_name != flt["branch_name"]:  # type: ignore[attr-defined]
        return False
    if flt["run_id"] is not None and entry.run_id != flt["run_id"]:  # type: ignore[attr-defined]
        return False
    return tags <= set(entry.tags)  # type: ignore[attr-defined]


def assert_filtered_same(catalog: MemoryCatalog, queries: list[str], flts: list[dict]) -> None:
    entries = [entry for _order, entry in reference(catalog.path)]
    for flt in flts:
        kept = [entry for entry in entries if admitted(entry, flt)]
        for limit in (1, 4, 100):
            assert catalog.list(limit=limit, **flt) == kept[::-1][:limit], flt
            for query in queries:
                expected = spec_search(kept, query, limit)  # type: ignore[arg-type]
                assert catalog.search(query, limit=limit, **flt) == expected, (query, flt, limit)


settings_ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
queries = st.lists(st.lists(st.sampled_from(WORDS + QUERY_WORDS[:8]), min_size=1, max_size=2).map(" ".join),
                   min_size=1, max_size=3)


@pytest.mark.parametrize(("path", "plan"), [("index", "default"), ("index", "walks"),
                                            ("index", "interrupted walks"), ("scan", "default")])
@settings_
@given(initial=st.lists(entry_line(), max_size=25), ops=operations, qs=queries,
       flts=st.lists(filters, min_size=1, max_size=3))
def test_filtered_search_and_list_equal_a_filtered_scan(
    tmp_path_factory: pytest.TempPathFactory, path: str, plan: str,
    initial: list[bytes], ops: list[tuple], qs: list[str], flts: list[dict]
) -> None:
    from memstore.index import search

    saved = {name: getattr(search, name) for name in PLANS[plan]}
    for name, value in PLANS[plan].items():
        setattr(search, name, value)
    try:
        root = tmp_path_factory.mktemp("filters")
        catalog = MemoryCatalog(root, use_index=(path == "index"))
        write_raw(catalog.path, b"\n".join(initial) + b"\n")
        assert_filtered_same(catalog, qs, flts)
        for op in ops[:4]:
            apply(catalog, op)
            assert_filtered_same(catalog, qs, flts)
        if path == "index":
            assert catalog.health_report()["index"]["state"] in ("fresh", "missing")
    finally:
        for name, value in saved.items():
            setattr(search, name, value)


@pytest.mark.parametrize("plan", PLANS)
def test_selective_and_common_filters_at_size(tmp_path: Path, plan: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of rows: a rare branch (filter candidates scored outright) and a common one (the walk)."""
    from memstore.index import search

    for name, value in PLANS[plan].items():
        monkeypatch.setattr(search, name, value)
    catalog = MemoryCatalog(tmp_path)
    rows = []
    for i in range(5000):
        tags = ["auto-curated"] if i % 97 == 0 else (["ci"] if i % 3 == 0 else ["misc"])
        rows.append(json.dumps({"memory_id": f"m{i}", "content": f"the common word row{i}", "tags": tags,
                                "created_at": f"2026-01-{1 + i % 28:02d}", "branch_name": "rare" if i % 1000 == 7
                                else "main", "run_id": f"r{i % 2}"}, sort_keys=True))
    write_raw(catalog.path, ("\n".join(rows) + "\n").encode())
    entries = [entry for _order, entry in reference(catalog.path)]
    for flt in ({"branch_name": "rare"}, {"branch_name": "main"}, {"tags": ["ci"]}, {"tags": ["ci"], "run_id": "r1"},
                {"tags": ["auto-curated", "misc"]}, {"branch_name": "none"}):
        full = {"tags": [], "branch_name": None, "run_id": None, **flt}
        kept = [entry for entry in entries if admitted(entry, full)]
        for query in ("the", "row1", "common word"):
            assert catalog.search(query, limit=10, **flt) == spec_search(kept, query, 10), (flt, query)  # type: ignore[arg-type]
        assert catalog.list(limit=7, **flt) == kept[::-1][:7]
    assert catalog.health_report()["index"]["state"] == "fresh"


def test_calls_without_filters_are_unchanged(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for i in range(5):
        catalog.add(f"note {i}", tags=["t"], branch_name="b")
    assert catalog.search("note", limit=3) == catalog.search("note", limit=3, tags=(), branch_name=None, run_id=None)
    assert catalog.list() == catalog.list(tags=[])


def test_bad_filters_are_typed_errors(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    with pytest.raises(ArgumentTypeError):
        catalog.search("x", tags="ci")
    with pytest.raises(InvalidArgumentError):
        catalog.list(tags=["  "])
    with pytest.raises(ArgumentTypeError):
        catalog.list(branch_name=3)  # type: ignore[arg-type]
