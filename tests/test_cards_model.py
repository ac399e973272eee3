"""FailureCard, AutoInvalidationRule and the card-matching helpers (cards, auto_invalidation, card_match)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.auto_invalidation import AutoInvalidationRule, default_auto_invalidation_rules, is_test_path
from memstore.card_match import STOPWORDS, card_match_score, check_file_paths, rank_cards, task_keywords
from memstore.cards import FailureCard
from memstore.errors import ArgumentTypeError, InvalidArgumentError

API_FIELDS = [
    "id", "run_id", "timestamp", "error_type", "file_path", "line_number", "error_message",
    "task_description", "context_files", "confidence", "expires_at", "invalidated",
    "invalidation_reason", "warning_behavior", "reviewer_type", "evidence_command", "evidence_exit_code",
]

DESIGN_STOPWORDS = """a an the and or but in on at to for of with by from as is was are were be been being
have has had do does did will would could should may might must shall can it its this that these those i
you he she we they what which who whom when where why how all any both each few more most other some such
no nor not only own same so than too very just also now then here there use using make making get getting
add adding fix fixing update updating change changing create creating implement implementing write writing
test testing run running build building check checking ensure ensuring handle handling support supporting
need needed want wanted try trying able unable new old first last next previous before after during while
until since through without within about into over under again further once"""


def make_card(**overrides: object) -> FailureCard:
    values: dict[str, object] = {
        "id": "abcd1234", "run_id": "run-1", "timestamp": 1000.0, "error_type": "TypeError",
        "file_path": "src/app.py", "line_number": 12, "error_message": "boom",
        "task_description": "parse yaml config", "context_files": ["src/util.py"],
    }
    values.update(overrides)
    return FailureCard(**values)  # type: ignore[arg-type]


# -- FailureCard construction -----------------------------------------------------------


def test_fields_are_exactly_the_api_fields_in_order() -> None:
    assert list(make_card().to_dict()) == API_FIELDS
    assert FailureCard.DEFAULT_TTL_SECONDS == 2592000


def test_create_sets_id_timestamp_and_expiry() -> None:
    card = FailureCard.create("r", "KeyError", "a.py", "msg", "task", ["b.py"], 7, ttl_seconds=60)
    assert len(card.id) == 8
    assert re.fullmatch(r"[0-9a-f]{8}", card.id)
    assert card.expires_at == pytest.approx(card.timestamp + 60)
    assert card.line_number == 7
    assert card.context_files == ["b.py"]
    assert (card.confidence, card.warning_behavior, card.reviewer_type) == ("low", "warning", "auto")
    assert card.invalidated is False and card.invalidation_reason is None
    assert card.is_active()


def test_create_default_ttl_is_thirty_days() -> None:
    card = FailureCard.create("r", "E", "a.py", "m", "t", [])
    assert card.expires_at == pytest.approx(card.timestamp + 2592000)


@pytest.mark.parametrize("ttl", [0, -1, -3600.5])
def test_create_non_positive_ttl_never_expires(ttl: float) -> None:
    card = FailureCard.create("r", "E", "a.py", "m", "t", [], ttl_seconds=ttl)
    assert card.expires_at is None
    assert card.is_active(now=1e12)


def test_create_passes_keyword_options_through() -> None:
    card = FailureCard.create(
        "r", "E", "a.py", "m", "t", ("x.py",), confidence="high", warning_behavior="block",
        reviewer_type="human", evidence_command="pytest -x", evidence_exit_code=1,
    )
    assert (card.confidence, card.warning_behavior, card.reviewer_type) == ("high", "block", "human")
    assert (card.evidence_command, card.evidence_exit_code) == ("pytest -x", 1)
    assert card.context_files == ["x.py"]


def test_create_ids_are_fresh() -> None:
    ids = {FailureCard.create("r", "E", "a.py", "m", "t", []).id for _ in range(50)}
    assert len(ids) == 50


def test_create_refuses_a_bare_string_for_context_files() -> None:
    with pytest.raises(ArgumentTypeError, match="context_files"):
        FailureCard.create("r", "E", "a.py", "m", "t", "a.py")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("low", "low"), ("medium", "medium"), ("high", "high"), (" HIGH ", "high"), ("bogus", "low"),
     ("", "low"), (None, "low"), (3, "low")],
)
def test_confidence_is_clamped(given: object, expected: str) -> None:
    assert make_card(confidence=given).confidence == expected
    assert FailureCard.create("r", "E", "a", "m", "t", [], confidence=given).confidence == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [("info", "info"), ("warning", "warning"), ("block", "block"), ("Block", "block"),
     ("warn", "warning"), ("ignore", "warning"), (None, "warning")],
)
def test_warning_behavior_is_clamped(given: object, expected: str) -> None:
    assert make_card(warning_behavior=given).warning_behavior == expected


def test_reviewer_type_is_clamped() -> None:
    assert make_card(reviewer_type="HUMAN").reviewer_type == "human"
    assert make_card(reviewer_type="robot").reviewer_type == "auto"


def test_invariants_hold_after_assignment() -> None:
    card = make_card()
    card.confidence = "extreme"
    card.warning_behavior = "explode"
    assert (card.confidence, card.warning_behavior) == ("low", "warning")
    with pytest.raises(ArgumentTypeError, match="file_path"):
        card.file_path = None  # type: ignore[assignment]


TEXT_FIELDS = ["id", "run_id", "error_type", "file_path", "error_message", "task_description"]


@pytest.mark.parametrize("name", TEXT_FIELDS)
@pytest.mark.parametrize("bad", [None, 5, b"bytes", ["x"]])
def test_text_fields_must_be_str(name: str, bad: object) -> None:
    with pytest.raises(TypeError, match=name):
        make_card(**{name: bad})


@pytest.mark.parametrize(
    ("name", "bad"),
    [("line_number", "12"), ("line_number", 1.5), ("line_number", True), ("timestamp", "now"),
     ("timestamp", None), ("expires_at", "soon"), ("invalidated", 1), ("invalidation_reason", 3),
     ("evidence_command", 0), ("evidence_exit_code", "1"), ("context_files", "a.py"),
     ("context_files", [1])],
)
def test_other_fields_are_type_checked(name: str, bad: object) -> None:
    with pytest.raises(ArgumentTypeError, match=name):
        make_card(**{name: bad})


@pytest.mark.parametrize(("name", "bad"), [("timestamp", float("nan")), ("expires_at", float("inf")),
                                            ("id", "   ")])
def test_bad_values_are_invalid(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        make_card(**{name: bad})


# -- activity and behaviour ------------------------------------------------------------------


def test_ttl_boundary() -> None:
    card = make_card(expires_at=2000.0)
    assert card.is_active(now=1999.999)
    assert not card.is_active(now=2000.0)
    assert not card.is_active(now=2001.0)


def test_no_expiry_is_active_forever() -> None:
    assert make_card(expires_at=None).is_active(now=1e15)


def test_invalidation_beats_expiry() -> None:
    card = make_card(expires_at=None, invalidated=True)
    assert not card.is_active(now=0.0)
    assert card.effective_behavior(now=0.0) == "ignore"


def test_is_active_defaults_to_the_clock() -> None:
    assert make_card(expires_at=1.0).is_active() is False
    assert make_card(expires_at=4e12).is_active() is True


# Every active combination, written out: (reviewer, confidence, warning_behavior) -> effective.
EFFECTIVE_TABLE = {
    ("human", "high", "block"): "block",
    ("human", "medium", "block"): "warning",
    ("human", "low", "block"): "warning",
    ("auto", "high", "block"): "warning",
    ("auto", "medium", "block"): "warning",
    ("auto", "low", "block"): "warning",
    **{(r, c, "warning"): "warning" for r in ("auto", "human") for c in ("low", "medium", "high")},
    **{(r, c, "info"): "info" for r in ("auto", "human") for c in ("low", "medium", "high")},
}


@pytest.mark.parametrize(("combo", "expected"), sorted(EFFECTIVE_TABLE.items()))
def test_effective_behavior_table(combo: tuple[str, str, str], expected: str) -> None:
    reviewer, confidence, behavior = combo
    card = make_card(reviewer_type=reviewer, confidence=confidence, warning_behavior=behavior,
                     expires_at=5000.0)
    assert card.effective_behavior(now=4000.0) == expected
    assert card.effective_behavior(now=5000.0) == "ignore"
    card.invalidated = True
    assert card.effective_behavior(now=4000.0) == "ignore"


def test_effective_behavior_table_is_complete() -> None:
    assert len(EFFECTIVE_TABLE) == 2 * 3 * 3


# -- serialisation ---------------------------------------------------------------------------


def test_to_dict_is_json_compatible_and_copies_lists() -> None:
    card = make_card()
    payload = card.to_dict()
    assert json.loads(json.dumps(payload)) == payload
    payload["context_files"].append("other.py")
    assert card.context_files == ["src/util.py"]


def test_from_dict_ignores_unknown_keys_and_fills_optional_ones() -> None:
    minimal = {"id": "x1", "run_id": "r", "timestamp": 5, "error_type": "E", "file_path": "f",
               "error_message": "m", "task_description": "t", "signatures": {"files": {}}, "new": 1}
    card = FailureCard.from_dict(minimal)
    assert card is not None
    assert card.timestamp == 5.0 and isinstance(card.timestamp, float)
    assert card.line_number is None and card.context_files == []
    assert (card.confidence, card.expires_at, card.invalidated) == ("low", None, False)
    assert FailureCard.from_dict({**minimal, "context_files": None}) == card


@pytest.mark.parametrize("missing", ["id", "run_id", "timestamp", "error_type", "file_path",
                                     "error_message", "task_description"])
def test_from_dict_without_a_required_key_is_none(missing: str) -> None:
    payload = make_card().to_dict()
    del payload[missing]
    assert FailureCard.from_dict(payload) is None


@pytest.mark.parametrize(
    "bad",
    [None, [], "card", 3, {"id": 5}, {**make_card().to_dict(), "timestamp": "x"},
     {**make_card().to_dict(), "invalidated": "yes"}, {**make_card().to_dict(), "id": ""},
     {**make_card().to_dict(), "context_files": "a.py"}],
)
def test_from_dict_returns_none_for_hopeless_input(bad: object) -> None:
    assert FailureCard.from_dict(bad) is None


def test_from_dict_clamps_rather_than_rejects_enum_fields() -> None:
    payload = {**make_card().to_dict(), "confidence": 7, "warning_behavior": "BLOCK", "reviewer_type": None}
    card = FailureCard.from_dict(payload)
    assert card is not None
    assert (card.confidence, card.warning_behavior, card.reviewer_type) == ("low", "block", "auto")


text = st.text(max_size=30)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
cards = st.builds(
    FailureCard,
    id=st.text(min_size=1, max_size=10).filter(lambda s: s.strip() == s and s != ""),
    run_id=text, timestamp=finite, error_type=text, file_path=text,
    line_number=st.none() | st.integers(), error_message=text, task_description=text,
    context_files=st.lists(text, max_size=4), confidence=st.sampled_from(["low", "medium", "high"]),
    expires_at=st.none() | finite, invalidated=st.booleans(), invalidation_reason=st.none() | text,
    warning_behavior=st.sampled_from(["info", "warning", "block"]),
    reviewer_type=st.sampled_from(["auto", "human"]), evidence_command=st.none() | text,
    evidence_exit_code=st.none() | st.integers(-255, 255),
)


@given(cards)
def test_round_trip_through_dict_and_json(card: FailureCard) -> None:
    assert FailureCard.from_dict(card.to_dict()) == card
    assert FailureCard.from_dict(json.loads(json.dumps(card.to_dict()))) == card


@given(st.dictionaries(st.sampled_from([*API_FIELDS, "extra"]),
                       st.none() | st.booleans() | st.integers() | text | finite | st.lists(text)))
def test_from_dict_never_raises_and_keeps_invariants(payload: dict[str, object]) -> None:
    card = FailureCard.from_dict(payload)
    if card is not None:
        assert card.confidence in {"low", "medium", "high"}
        assert card.warning_behavior in {"info", "warning", "block"}


# -- keywords --------------------------------------------------------------------------------


def test_stopwords_are_the_design_list() -> None:
    assert frozenset(DESIGN_STOPWORDS.split()) == STOPWORDS
    assert len(STOPWORDS) == len(DESIGN_STOPWORDS.split())


def test_task_keywords_examples() -> None:
    sentence = "Fix the YAML config-loader in parser_v2 for py3"
    assert task_keywords(sentence) == {"yaml", "config", "loader", "py3"}
    assert task_keywords("The test is running and we should fix it") == frozenset()
    assert task_keywords("tests testing") == {"tests"}  # only the listed forms are stopwords
    assert task_keywords("ab abc ABCD 1234") == {"abc", "abcd", "1234"}
    # \b needs a non-word neighbour: letters glued to non-ASCII word characters do not count.
    assert task_keywords("café naïve résumé") == frozenset()
    assert task_keywords("") == frozenset()


def test_task_keywords_requires_str() -> None:
    with pytest.raises(ArgumentTypeError):
        task_keywords(None)  # type: ignore[arg-type]


words = st.sampled_from(["config", "parser", "yaml", "the", "fix", "tests", "a1b", "xy", "Loader", "ÉTÉ",
                         "under", "db_conn", "v2", "HTTP"])
sentences = st.lists(words | st.text(max_size=6), max_size=8).map(lambda ws: " ".join(ws))


@given(sentences)
def test_task_keywords_properties(sentence: str) -> None:
    keywords = task_keywords(sentence)
    lowered = sentence.lower()
    for word in keywords:
        assert re.fullmatch(r"[a-z0-9]{3,}", word)
        assert word not in STOPWORDS
        assert re.search(rf"(?<!\w){word}(?!\w)", lowered)
    for token in re.split(r"[^a-z0-9]+", lowered):
        if len(token) >= 3 and token not in STOPWORDS and re.search(rf"(?<!\w){token}(?!\w)", lowered):
            assert token in keywords


# -- scoring and ranking ---------------------------------------------------------------------


def score(card: FailureCard, paths: list[str], task: str, error_type: str | None) -> int:
    return card_match_score(card, file_paths=paths, keywords=task_keywords(task), error_type=error_type)


def test_path_points_are_given_once_for_substrings() -> None:
    card = make_card(file_path="src/pkg/app.py", task_description="zzz")
    assert score(card, ["app.py"], "", None) == 10
    assert score(card, ["app.py", "src/pkg", "pkg/app"], "", None) == 10
    assert score(card, ["other.py"], "", None) == 0
    assert score(card, [""], "", None) == 0  # an empty path matches nothing
    assert score(card, ["", "pkg"], "", None) == 10


def test_error_type_points() -> None:
    card = make_card(error_type="TypeError", task_description="zzz")
    assert score(card, [], "", "TypeError") == 5
    assert score(card, [], "", "typeerror") == 0
    assert score(card, [], "", None) == 0
    assert score(make_card(error_type="", task_description="zzz"), [], "", "") == 0


def test_keyword_points_need_two_shared_words() -> None:
    card = make_card(task_description="parse the yaml config loader", file_path="x", error_type="E")
    assert score(card, [], "yaml something", None) == 0
    assert score(card, [], "yaml config", None) == 4
    assert score(card, [], "YAML config loader parse parse", None) == 8
    assert score(card, ["x"], "yaml config", "E") == 19


def test_check_file_paths() -> None:
    assert check_file_paths(["a", "b"]) == ("a", "b")
    assert check_file_paths(iter(["a"])) == ("a",)
    for bad in ("a.py", b"a.py", 3, [1], None):
        with pytest.raises(ArgumentTypeError):
            check_file_paths(bad)


def test_rank_cards_orders_by_score_then_timestamp_then_file_order() -> None:
    a = make_card(id="a", timestamp=1.0)
    b = make_card(id="b", timestamp=2.0)
    c = make_card(id="c", timestamp=2.0)
    d = make_card(id="d", timestamp=9.0)
    z = make_card(id="z", timestamp=99.0)
    ranked = rank_cards([(5, 0, a), (5, 1, b), (5, 2, c), (10, 3, d), (0, 4, z)], 10)
    assert [card.id for card in ranked] == ["d", "b", "c", "a"]
    assert [card.id for card in rank_cards([(5, 2, c), (5, 1, b)], 10)] == ["b", "c"]
    assert [card.id for card in rank_cards([(5, 0, a), (5, 1, b), (10, 3, d)], 2)] == ["d", "b"]
    assert rank_cards([(1, 0, a)], 0) == []


# -- rules and test paths --------------------------------------------------------------------


def test_default_rules() -> None:
    rules = default_auto_invalidation_rules()
    assert [(r.trigger, r.confidence, r.action, r.paths, r.enabled) for r in rules] == [
        ("file_signature_change", "high", "invalidate", None, True),
        ("test_refactor", "medium", "warn", None, True),
        ("dependency_version_change", "medium", "warn", None, True),
    ]
    rules[0].action = "warn"
    assert default_auto_invalidation_rules()[0].action == "invalidate"


def test_rule_from_dict() -> None:
    rule = AutoInvalidationRule.from_dict({"trigger": "test_refactor", "action": "BLOCK", "paths": "src/"})
    assert rule == AutoInvalidationRule("test_refactor", "medium", "block", ["src/"], True)
    assert AutoInvalidationRule.from_dict({"trigger": "x", "action": "warn", "confidence": "??"}) == \
        AutoInvalidationRule("x", "low", "warn")
    for bad in (None, [], {"trigger": "x"}, {"trigger": "x", "action": "delete"},
                {"action": "warn"}, {"trigger": "x", "action": "warn", "enabled": "no"},
                {"trigger": "x", "action": "warn", "paths": [1]}):
        assert AutoInvalidationRule.from_dict(bad) is None


def test_rule_constructor_validates() -> None:
    with pytest.raises(InvalidArgumentError):
        AutoInvalidationRule("file_signature_change", "high", "explode")
    with pytest.raises(ArgumentTypeError):
        AutoInvalidationRule("file_signature_change", "high", "warn", paths="src/")  # type: ignore[arg-type]


def test_rule_paths_are_prefixes() -> None:
    rule = AutoInvalidationRule("t", "high", "warn", paths=["src/core", "./lib/"])
    assert rule.applies_to("src/core/a.py")
    assert rule.applies_to("src/core2.py")
    assert rule.applies_to("./src/core/a.py")
    assert rule.applies_to("lib/x.py")
    assert not rule.applies_to("tests/src/core/a.py")
    assert AutoInvalidationRule("t", "high", "warn", paths=[]).applies_to("anything")
    assert AutoInvalidationRule("t", "high", "warn").applies_to("anything")


@pytest.mark.parametrize(
    ("path", "expected"),
    [("tests/unit/test_a.py", True), ("tests/helpers.py", True), ("test_a.py", True), ("a_test.py", True),
     ("pkg/a_test.go", True), ("web/app.spec.ts", True), ("web/app.test.js", True), ("conftest.py", True),
     ("src/__tests__/x.js", True), ("src/app.py", False), ("src/testing.py", False),
     ("src/contest.py", False), ("latest/a.py", False), ("", False)],
)
def test_is_test_path(path: str, expected: bool) -> None:
    assert is_test_path(path) is expected
