"""memstore.jsonl: catalog lines parsed exactly as the stdlib would, and written as older readers expect."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore import jsonl
from memstore.errors import ArgumentTypeError, InvalidArgumentError
from memstore.jsonl import BOM, MAX_EXTRA_DEPTH, decode_entry, encode_entry, is_blank, is_json, parse_json_bytes
from memstore.models import MemoryEntry

LINES = [
    b'{"a": 1}',
    b'  [1, 2.5, "x"]  ',
    b'{"n": NaN, "i": Infinity}',
    b'{"s": "\\ud800 lone surrogate"}',
    b'{"u": "caf\\u00e9 \xc3\xa9"}',
    b'"just a string"',
    b"null",
    BOM + b'{"after": "bom"}',
]
BAD_LINES = [b"", b"{", b'{"a": 1} trailing', b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000, b"{'single': 1}"]


def stdlib(data: bytes) -> Any:
    return json.loads(data.decode("utf-8-sig"))


def same(left: Any, right: Any) -> bool:
    """Equal as the stdlib compares them, NaN included (NaN != NaN)."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


@pytest.fixture(params=["orjson", "stdlib"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the orjson fast path (when installed) and without it."""
    if request.param == "stdlib":
        monkeypatch.setattr(jsonl, "_orjson", False)
    elif not jsonl.load_orjson():
        pytest.skip("orjson is not installed")
    return str(request.param)


@pytest.mark.parametrize("data", LINES)
def test_parsing_equals_the_stdlib(parser: str, data: bytes) -> None:
    assert same(parse_json_bytes(data), stdlib(data))


@pytest.mark.parametrize("data", BAD_LINES)
def test_what_the_stdlib_refuses_is_a_value_error(parser: str, data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_json_bytes(data)
    assert not is_json(data)


def test_entries_decode_the_same_whatever_else_the_line_holds(parser: str) -> None:
    """orjson reads an integer beyond 64 bits as a float where the stdlib keeps it exact; no entry
    field is a number, so the entry a line holds does not depend on the parser."""
    line = b'{"memory_id": "a", "content": "x", "created_at": "t", "big": 123456789012345678901234567890}'
    assert decode_entry(line) == MemoryEntry(memory_id="a", content="x", created_at="t")


def test_decode_entry_reads_valid_entries_only(parser: str) -> None:
    good = MemoryEntry(memory_id="a1", content="Deploys freeze", tags=("ci",), created_at="2026-01-01T00:00:00+00:00")
    assert decode_entry(encode_entry(good).rstrip(b"\n")) == good
    assert decode_entry(BOM + encode_entry(good)) == good
    for line in (None, b"", b"   ", b"{broken", b'{"memory_id": "a"}', b'{"memory_id": "a", "content": " "}', b"[]"):
        assert decode_entry(line) is None, line


def test_blank_lines_are_whitespace_or_a_lone_bom() -> None:
    assert is_blank(b"") and is_blank(b" \t\r") and is_blank(BOM) and is_blank(BOM + b"  ")
    assert not is_blank(None) and not is_blank(b"{}") and not is_blank(b"x")


def test_encode_entry_writes_sorted_keys_with_default_separators() -> None:
    entry = MemoryEntry(memory_id="a1", content="café ☕", tags=("b", "a"), created_at="t", run_id="r")
    line = encode_entry(entry)
    assert line == (json.dumps(entry.to_dict(), sort_keys=True) + "\n").encode("utf-8")
    assert line.isascii() and line.count(b"\n") == 1 and b'", "' in line and b'": "' in line
    quarantined = encode_entry(entry, quarantine=True, provenance={"reason": "bad branch"})
    payload = json.loads(quarantined)
    assert payload["quarantine"] is True and payload["provenance"] == {"reason": "bad branch"}
    assert list(payload) == sorted(payload)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(
    content=st.text(min_size=1).filter(str.strip),
    tags=st.lists(st.text(max_size=8), max_size=4),
    branch=st.none() | st.text(max_size=10),
    extra=st.dictionaries(st.sampled_from(["quarantine", "provenance", "zz", "aa"]), _json_values, max_size=2),
)
def test_encode_entry_is_byte_for_byte_json_dumps(
    content: str, tags: list[str], branch: str | None, extra: dict[str, Any]
) -> None:
    """The encoder made once writes what ``json.dumps(..., sort_keys=True, allow_nan=False)`` writes."""
    entry = MemoryEntry(memory_id="a1", content=content, tags=tags, created_at="t", branch_name=branch)
    expected = json.dumps({**entry.to_dict(), **extra}, sort_keys=True, allow_nan=False) + "\n"
    assert encode_entry(entry, **extra) == expected.encode("utf-8")


def test_encode_entry_refuses_what_json_cannot_hold() -> None:
    entry = MemoryEntry(memory_id="a1", content="x", created_at="t")
    with pytest.raises(ArgumentTypeError, match="provenance cannot be written as JSON"):
        encode_entry(entry, provenance={"when": datetime.datetime(2026, 1, 1)})
    with pytest.raises(InvalidArgumentError, match="provenance cannot be written as JSON"):
        encode_entry(entry, provenance={"score": float("nan")})
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with pytest.raises(InvalidArgumentError, match="contains itself"):
        encode_entry(entry, provenance=circular)
    deep: Any = "leaf"
    for _ in range(MAX_EXTRA_DEPTH + 1):
        deep = [deep]
    with pytest.raises(InvalidArgumentError, match="nested more than"):
        encode_entry(entry, provenance={"deep": deep})


def test_a_shared_value_is_not_mistaken_for_a_circle() -> None:
    entry = MemoryEntry(memory_id="a1", content="x", created_at="t")
    shared = {"k": 1}
    line = encode_entry(entry, provenance={"one": shared, "two": [shared, shared]})
    assert json.loads(line)["provenance"] == {"one": {"k": 1}, "two": [{"k": 1}, {"k": 1}]}


ORJSON_PROBE = """
import sys
from memstore import jsonl
line = b'{"memory_id": "a", "content": "x", "created_at": "2025-01-01T00:00:00+00:00"}'
for _ in range(jsonl.STDLIB_FIRST_LINES):
    jsonl.parse_json_bytes(line)
print("orjson" in sys.modules)
jsonl.parse_json_bytes(line)
print("orjson" in sys.modules)
"""


def test_orjson_loads_only_once_a_process_parses_more_than_a_search_needs() -> None:
    """A search decodes at most its limit of lines: importing orjson (uuid, platform, dataclasses)
    would cost it more than the stdlib parse; a scan or build switches to orjson at once."""
    if not jsonl.load_orjson():
        pytest.skip("orjson is not installed")
    probe = [sys.executable, "-c", ORJSON_PROBE]
    result = subprocess.run(probe, capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.split() == ["False", "True"]
