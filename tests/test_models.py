"""MemoryEntry invariants and the pure helpers that define search semantics."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.errors import ArgumentTypeError, EmptyContentError, InvalidArgumentError, MemstoreError
from memstore.models import (
    MemoryEntry,
    memory_entries_to_prompt,
    memory_entry_from_payload,
    memory_matches,
    memory_relevance_score,
    new_memory_id,
    normalize_tags,
    query_tokens,
)

# Text including whitespace of every kind, case pairs, and characters whose lowercase
# form is longer than themselves (İ → i̇).
any_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(" \t\n\r\x0b\x0c\x85\u2028\u00a0\u3000İẞΣσς"),
    ),
    max_size=30,
)
non_blank_text = any_text.filter(lambda s: s.strip() != "")
tag_lists = st.lists(any_text, max_size=8)
optional_text = st.none() | any_text


def valid_entries() -> st.SearchStrategy[MemoryEntry]:
    return st.builds(
        MemoryEntry,
        memory_id=non_blank_text,
        content=non_blank_text,
        tags=tag_lists.map(tuple),
        created_at=any_text.filter(bool),
        branch_name=optional_text,
        run_id=optional_text,
    )


# ---------------------------------------------------------------- invariants 1–3


@given(
    memory_id=any_text,
    content=any_text,
    tags=tag_lists,
    created_at=any_text,
    branch_name=optional_text,
    run_id=optional_text,
)
def test_constructed_entries_satisfy_invariants_or_refuse(
    memory_id: str,
    content: str,
    tags: list[str],
    created_at: str,
    branch_name: str | None,
    run_id: str | None,
) -> None:
    try:
        entry = MemoryEntry(memory_id, content, tuple(tags), created_at, branch_name, run_id)
    except ValueError:
        assert not memory_id.strip() or not content.strip() or not created_at
        return
    assert memory_id.strip() and content.strip() and created_at
    # 1. non-empty string id
    assert isinstance(entry.memory_id, str) and entry.memory_id
    assert entry.memory_id == memory_id.strip()
    # 2. non-empty stripped content
    assert isinstance(entry.content, str) and entry.content
    assert entry.content == entry.content.strip() == content.strip()
    # 3. tuple of lower-case stripped strings
    assert isinstance(entry.tags, tuple)
    for tag in entry.tags:
        assert isinstance(tag, str) and tag
        assert tag == tag.strip() == tag.lower()
    assert entry.tags == normalize_tags(tags)
    assert entry.created_at == created_at
    assert (entry.branch_name, entry.run_id) == (branch_name, run_id)


@pytest.mark.parametrize("content", ["", " ", "\n\t ", "\u3000"])
def test_blank_content_raises_the_spec_message(content: str) -> None:
    with pytest.raises(ValueError, match=r"^memory content cannot be empty$") as info:
        MemoryEntry("id1", content)
    assert isinstance(info.value, EmptyContentError) and isinstance(info.value, MemstoreError)


@pytest.mark.parametrize("memory_id", ["", "  ", "\n"])
def test_blank_id_is_refused(memory_id: str) -> None:
    with pytest.raises(InvalidArgumentError):
        MemoryEntry(memory_id, "content")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_id", 7),
        ("content", b"bytes"),
        ("content", None),
        ("created_at", 1.5),
        ("branch_name", 3),
        ("run_id", ["r"]),
    ],
)
def test_wrong_field_types_raise_type_error_naming_the_field(field: str, value: object) -> None:
    kwargs: dict[str, Any] = {"memory_id": "id1", "content": "c", "created_at": "t"}
    kwargs[field] = value
    with pytest.raises(TypeError, match=field):
        MemoryEntry(**kwargs)


def test_entry_is_frozen() -> None:
    entry = MemoryEntry("id1", "content")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.content = "other"  # type: ignore[misc]


def test_default_created_at_is_a_utc_isoformat() -> None:
    entry = MemoryEntry("id1", "content")
    assert entry.created_at.endswith("+00:00")
    assert "T" in entry.created_at


# ---------------------------------------------------------------- normalize_tags


@given(tag_lists)
def test_normalize_tags_properties(tags: list[str]) -> None:
    result = normalize_tags(tags)
    assert isinstance(result, tuple)
    assert list(result) == sorted(set(result))  # sorted, no duplicates
    assert set(result) == {tag.strip().lower() for tag in tags if tag.strip()}
    for tag in result:
        assert tag and tag == tag.strip() and tag == tag.lower()
    assert normalize_tags(result) == result  # idempotent
    assert normalize_tags(reversed(tags)) == result  # order-independent
    assert normalize_tags(iter(tags)) == result  # any iterable


def test_normalize_tags_examples() -> None:
    assert normalize_tags([" B ", "a", "b", "", "  ", "A"]) == ("a", "b")
    assert normalize_tags(()) == ()


@pytest.mark.parametrize("tags", ["abc", b"abc"])
def test_normalize_tags_refuses_a_bare_string(tags: object) -> None:
    with pytest.raises(TypeError, match="tags"):
        normalize_tags(tags)  # type: ignore[arg-type]


@pytest.mark.parametrize("tags", [None, 5, [1], ["a", None], [b"a"]])
def test_normalize_tags_refuses_non_str(tags: object) -> None:
    with pytest.raises(ArgumentTypeError, match="tags"):
        normalize_tags(tags)  # type: ignore[arg-type]


# ---------------------------------------------------------------- payload round trips


@given(valid_entries())
def test_to_dict_round_trips_through_from_payload(entry: MemoryEntry) -> None:
    payload = entry.to_dict()
    assert set(payload) == {"memory_id", "content", "tags", "created_at", "branch_name", "run_id"}
    assert isinstance(payload["tags"], list)
    assert memory_entry_from_payload(payload) == entry


@given(valid_entries(), st.booleans())
def test_round_trip_through_json_lines(entry: MemoryEntry, ensure_ascii: bool) -> None:
    line = json.dumps(entry.to_dict(), sort_keys=True, ensure_ascii=ensure_ascii)
    assert "\n" not in line
    assert memory_entry_from_payload(json.loads(line)) == entry


def test_from_payload_normalises_and_ignores_unknown_keys() -> None:
    payload = {
        "memory_id": " abc ",
        "content": "  text \n",
        "tags": ["B", " a ", "b"],
        "created_at": "2026-01-01T00:00:00+00:00",
        "branch_name": "main",
        "run_id": None,
        "quarantine": True,
        "provenance": {"reason": "x"},
        "future_field": [1, 2],
    }
    entry = memory_entry_from_payload(payload)
    assert entry == MemoryEntry("abc", "text", ("a", "b"), "2026-01-01T00:00:00+00:00", "main", None)


def test_from_payload_without_branch_and_run_keys() -> None:
    entry = memory_entry_from_payload({"memory_id": "a", "content": "c", "tags": [], "created_at": "t"})
    assert entry is not None and entry.branch_name is None and entry.run_id is None


VALID = {
    "memory_id": "a1",
    "content": "c",
    "tags": ["x"],
    "created_at": "t",
    "branch_name": None,
    "run_id": None,
}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != key}


INVALID_PAYLOADS: list[tuple[str, object]] = [
    ("missing id", _without("memory_id")),
    ("empty id", {**VALID, "memory_id": ""}),
    ("blank id", {**VALID, "memory_id": "  "}),
    ("null id", {**VALID, "memory_id": None}),
    ("int id", {**VALID, "memory_id": 12}),
    ("missing content", _without("content")),
    ("empty content", {**VALID, "content": ""}),
    ("blank content", {**VALID, "content": " \n\t"}),
    ("non-str content", {**VALID, "content": 5}),
    ("list content", {**VALID, "content": ["a"]}),
    ("str tags", {**VALID, "tags": "abc"}),
    ("dict tags", {**VALID, "tags": {"a": 1}}),
    ("int tags", {**VALID, "tags": 3}),
    ("non-str tag", {**VALID, "tags": ["a", 1]}),
    ("null tag", {**VALID, "tags": [None]}),
    ("nested tag", {**VALID, "tags": [["a"]]}),
    ("missing created_at", _without("created_at")),
    ("null created_at", {**VALID, "created_at": None}),
    ("int created_at", {**VALID, "created_at": 1700000000}),
    ("float created_at", {**VALID, "created_at": 1.5}),
    ("empty created_at", {**VALID, "created_at": ""}),
    ("int branch", {**VALID, "branch_name": 1}),
    ("list branch", {**VALID, "branch_name": ["main"]}),
    ("bool run", {**VALID, "run_id": True}),
    ("dict run", {**VALID, "run_id": {}}),
    ("list payload", [VALID]),
    ("str payload", json.dumps(VALID)),
    ("null payload", None),
    ("int payload", 42),
]


@pytest.mark.parametrize("payload", [p for _, p in INVALID_PAYLOADS], ids=[n for n, _ in INVALID_PAYLOADS])
def test_from_payload_returns_none_for_invalid_shapes(payload: object) -> None:
    assert memory_entry_from_payload(payload) is None


def test_the_valid_base_payload_is_valid() -> None:
    assert memory_entry_from_payload(VALID) == MemoryEntry("a1", "c", ("x",), "t")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
    )
)
def test_from_payload_never_raises(payload: object) -> None:
    result = memory_entry_from_payload(payload)
    assert result is None or isinstance(result, MemoryEntry)


# ---------------------------------------------------------------- matching and scoring


def entry(content: str, *tags: str) -> MemoryEntry:
    return MemoryEntry("id1", content, tags, "2026-01-01T00:00:00+00:00")


@pytest.mark.parametrize(
    ("item", "tokens", "score"),
    [
        (entry("Fix the Parser bug"), ["parser"], 3),
        (entry("fix the parser bug", "parser"), ["parser"], 5),
        (entry("nothing here", "parser"), ["pars"], 2),
        (entry("fix parser", "parser", "parsing"), ["pars"], 5),  # +2 once however many tags match
        (entry("bug bug bug"), ["bug"], 3),  # +3 once per token, not per occurrence
        (entry("bug"), ["bug", "bug"], 6),  # duplicate tokens count twice
        (entry("bug", "auto-curated"), ["bug"], 7),
        (entry("bug", "run-summary"), ["bug"], 5),
        (entry("bug", "auto-curated", "run-summary"), ["bug"], 9),
        (entry("bug", "auto-curated", "run-summary"), ["bug", "auto"], 3 + 2 + 6),
        (entry("bug", "auto-curated-ish"), ["bug"], 3),  # the bonus needs the exact tag
        (entry("alpha beta", "gamma"), ["alpha", "gamma"], 5),
        (entry("unrelated", "auto-curated"), ["zzz"], 4),  # the score does not check matching
        (entry("anything"), [], 0),
    ],
)
def test_memory_relevance_score_exact(item: MemoryEntry, tokens: list[str], score: int) -> None:
    assert memory_relevance_score(item, tokens) == score


@pytest.mark.parametrize(
    ("item", "query", "expected"),
    [
        (entry("Fix the Parser bug"), "PARSER", True),
        (entry("Fix the Parser bug"), "  parser   BUG ", True),
        (entry("Fix the Parser bug"), "parser crash", False),  # every token must match
        (entry("fix", "parser"), "fix pars", True),  # a token may match content or a tag
        (entry("fix", "parser"), "fix-pars", False),
        (entry("fix"), "", False),
        (entry("fix"), "   \n", False),
        (entry("İstanbul trip"), "i̇stanbul", True),  # query lowered with str.lower like content
        (entry("a", "run-summary"), "summary", True),
    ],
)
def test_memory_matches_exact(item: MemoryEntry, query: str, expected: bool) -> None:
    assert memory_matches(item, query) is expected


def test_memory_matches_accepts_tokens() -> None:
    item = entry("fix the parser", "build")
    assert memory_matches(item, ["parser", "build"]) is True
    assert memory_matches(item, ["parser", "deploy"]) is False
    assert memory_matches(item, []) is False


@given(valid_entries(), st.lists(st.text(max_size=4), max_size=3))
def test_matches_agrees_with_the_spec_definition(item: MemoryEntry, words: list[str]) -> None:
    query = " ".join(words)
    tokens = query.strip().lower().split()
    content = item.content.lower()
    expected = bool(tokens) and all(t in content or any(t in tag for tag in item.tags) for t in tokens)
    assert memory_matches(item, query) is expected
    assert query_tokens(query) == tokens


def test_query_tokens_refuses_non_str() -> None:
    with pytest.raises(TypeError, match="query"):
        query_tokens(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- prompt helper and limits


def test_memory_entries_to_prompt() -> None:
    first = MemoryEntry("a", "one", ("x",), "t1", "main", None)
    second = MemoryEntry("b", "two", (), "t2", None, "run-1")
    assert memory_entries_to_prompt([]) == []
    result = memory_entries_to_prompt(iter([first, second]))
    assert result == [first.to_dict(), second.to_dict()]
    assert result[0] == {
        "memory_id": "a",
        "content": "one",
        "tags": ["x"],
        "created_at": "t1",
        "branch_name": "main",
        "run_id": None,
    }
    json.dumps(result)  # prompt payloads are JSON-serialisable


def test_new_memory_ids_are_uuid4_hex() -> None:
    """Made from the random bytes directly, they are still what ``uuid.uuid4().hex`` gives: version 4, RFC 4122."""
    import uuid

    ids = [new_memory_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and len(value) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # every other bit still varies
    assert {value[12] for value in ids} == {"4"} and {value[16] for value in ids} == set("89ab")
    assert len({value[0] for value in ids}) == 16 and len({value[13] for value in ids}) == 16
