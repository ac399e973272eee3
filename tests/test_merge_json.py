"""merge_arrays against a plain model of a three-way merge by id (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.merge_json import merge_arrays, record_key

IDS = [f"c{n}" for n in range(8)]


def card(card_id: str, version: int) -> dict[str, Any]:
    return {"id": card_id, "timestamp": float(version), "v": version}


# Per id: present in base?, then what each side does: keep, delete, change (to a version), or add.
side_action = st.one_of(st.just("keep"), st.just("delete"), st.integers(min_value=2, max_value=6))


@st.composite
def three_way(draw: st.DrawFn) -> tuple[list[Any], list[Any], list[Any], dict[str, Any]]:
    base: list[Any] = []
    ours: list[Any] = []
    theirs: list[Any] = []
    expected: dict[str, Any] = {}
    for card_id in IDS:
        in_base = draw(st.booleans())
        if in_base:
            original = card(card_id, 1)
            base.append(original)
            a, b = draw(side_action), draw(side_action)
            mine = None if a == "delete" else original if a == "keep" else card(card_id, a)
            yours = None if b == "delete" else original if b == "keep" else card(card_id, b)
            if mine is not None:
                ours.append(mine)
            if yours is not None:
                theirs.append(yours)
            if mine is None and yours is None:
                continue
            if mine is None:
                result = None if yours == original else yours
            elif yours is None:
                result = None if mine == original else mine
            elif mine == yours or yours == original:
                result = mine
            elif mine == original:
                result = yours
            else:
                result = yours if yours["v"] > mine["v"] else mine
            if result is not None:
                expected[card_id] = result
        else:
            where = draw(st.sampled_from(["none", "ours", "theirs", "both"]))
            mine = card(card_id, draw(st.integers(1, 5)))
            yours = card(card_id, draw(st.integers(1, 5)))
            if where in ("ours", "both"):
                ours.append(mine)
            if where in ("theirs", "both"):
                theirs.append(yours)
            if where == "ours":
                expected[card_id] = mine
            elif where == "theirs":
                expected[card_id] = yours
            elif where == "both":
                expected[card_id] = mine if mine == yours or mine["v"] >= yours["v"] else yours
    ours = draw(st.permutations(ours))
    theirs = draw(st.permutations(theirs))
    return base, ours, theirs, expected


@settings(max_examples=300, deadline=None)
@given(three_way())
def test_merge_matches_the_model_and_keeps_each_id_once(case: tuple[list[Any], list[Any], list[Any], Any]) -> None:
    base, ours, theirs, expected = case
    merged = merge_arrays(base, ours, theirs)
    keys = [record_key(record) for record in merged]
    assert len(keys) == len(set(keys))
    assert {record["id"]: record for record in merged} == expected
    # Ours' order first, then what only theirs added, in theirs' order.
    ours_ids = [r["id"] for r in ours if r["id"] in expected]
    assert [r["id"] for r in merged][: len(ours_ids)] == ours_ids


@settings(max_examples=200, deadline=None)
@given(three_way())
def test_both_directions_keep_the_same_records(case: tuple[list[Any], list[Any], list[Any], Any]) -> None:
    base, ours, theirs, _expected = case
    forward = {record_key(r) for r in merge_arrays(base, ours, theirs)}
    backward = {record_key(r) for r in merge_arrays(base, theirs, ours)}
    assert forward == backward


def test_unkeyed_records_merge_by_their_exact_json() -> None:
    assert merge_arrays([1, "x"], [1, "x", {"a": 1}], ["x", {"a": 1}, None]) == ["x", {"a": 1}, None]


def test_a_side_holding_one_id_twice_keeps_both_records() -> None:
    """append() may store a second card with an id already present: a merge must not drop either."""
    first, second = card("c1", 1), {**card("c1", 2), "note": "appended again"}
    other = card("d", 1)
    merged = merge_arrays([first], [first, second], [first, other])
    assert merged == [first, second, other]
    assert merge_arrays([first], [first, other], [first, second]) == [first, other, second]
    # The n-th copy is matched with the n-th copy of the other side: a deleted copy stays deleted.
    assert merge_arrays([first, second], [first, second, other], [first]) == [first, other]
    assert merge_arrays([1, 1], [1, 1], [1]) == [1]
