"""Differential tests: the indexed catalog answers exactly what a naive scan of the file answers.

The reference below is written from the spec text alone (it shares no code with the
index or memstore.scan), and every operation sequence mixes API writes with the
external edits git and editors make: appends, rewrites with a new inode, truncation,
in-place edits, torn tails, corrupt lines and CRLF.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_reference import spec_search

from memstore.catalog import MemoryCatalog
from memstore.models import memory_entry_from_payload

# Characters chosen to break naive indexes: case folding that differs between Python
# and SQLite, combining marks, emoji, NUL, lone surrogates, quotes and FTS syntax.
# Whitespace Python splits on but the word index does not (U+3000, U+00A0, U+2028) and ASCII
# whitespace it does split on (\x1c): terms are runs of letters, digits and non-ASCII.
ALPHABET = ["a", "b", "c", "ab", "abc", "İ", "ẞ", "Σ", "ς", "ǅ", "K", "é", "e\u0301", "😀", "\x00", "\ud800",
            " ", '"', "*", "-", ":", "^", "(", "\t", "\x01", "ß", "ı", "Ω", "x", "\u3000", "\xa0", "\u2028",
            "\x1c", ".", "_", "a_b", "x.y"]
QUERY_WORDS = ["a", "b", "ab", "abc", "bc", "c", "İ", "i̇", "ẞ", "ß", "σ", "ς", "ǆ", "k", "K", "é", "e\u0301",
               "😀", "\x00", "\ud800", "AND", "OR", "NEAR(", '"', "*", "col:x", "-x", "^x", "x", "auto",
               "run-summary", "curated", "tag", "zzz", '"ab"', "a*", "a-b", "ab.c", "->", "b:", ".a", "é-x", "😀x",
               "a_b", "x.y", "_", "b\x01", "y-", "ab_c"]
TAGS = ["auto-curated", "run-summary", "Tag", "abc", "ǅx", "İ", "x y", "😀", "\ud800", "a-b", "x.y_z", "é\u3000b"]
STAMPS = ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00", "2025-12-31T23:59:59+00:00", "2026"]
IDS = ["id1", "id2", "id3", "ÿ", "\ud800x"]

text = st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=8).map("".join)
# Very long lines (hundreds of KiB) next to short ones.
long_text = st.tuples(text, st.integers(min_value=5_000, max_value=30_000)).map(lambda pair: pair[0] * pair[1])


@st.composite
def entry_lines(draw: st.DrawFn) -> bytes:
    payload = {
        "memory_id": draw(st.sampled_from(IDS)),
        "content": draw(st.one_of(text, text, text, text, text, text, text, long_text)),
        "tags": draw(st.lists(st.sampled_from(TAGS), max_size=3)),
        "created_at": draw(st.sampled_from(STAMPS)),
        "branch_name": draw(st.sampled_from([None, "b1", "b2", "bé", "\ud800"])),
        "run_id": draw(st.sampled_from([None, "r1"])),
    }
    line = json.dumps(payload, sort_keys=True).encode()
    if draw(st.booleans()):
        # Other tools write UTF-8 without escapes (and other separators).
        with contextlib.suppress(UnicodeEncodeError):
            line = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    # A UTF-8 BOM, as editors write at the start of a file (or anywhere, after concatenation).
    return draw(st.sampled_from([b"", b"", b"", b"\xef\xbb\xbf"])) + line + draw(st.sampled_from([b"", b"\r"]))


junk_lines = st.sampled_from([b"{", b"}{", b"\xff\xfe", b"[]", b'{"content": "x"}', b"   ", b"", b"null",
                              b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf{}", b"\xef\xbb\xbf  ",
                              b'{"memory_id": "q", "content": "NaN", "created_at": NaN}',
                              b'{"memory_id":"n","content":"nan ok","created_at":"2026","tags":[],"x":NaN}'])
lines = st.lists(st.one_of(entry_lines(), entry_lines(), junk_lines), max_size=12)


def reference(path: Path) -> list[tuple[int, object]]:
    """Entries in file order, straight from the spec: split on \\n, skip what does not parse.

    Each line is decoded as UTF-8 with an optional leading BOM (README, "Files on disk").
    """
    if not path.exists():
        return []
    found = []
    for order, raw in enumerate(path.read_bytes().split(b"\n")):
        if not raw.strip():
            continue
        try:
            payload = json.loads(raw.decode("utf-8-sig"))
        except (ValueError, RecursionError):
            continue
        entry = memory_entry_from_payload(payload)
        if entry is not None:
            found.append((order, entry))
    return found


def reference_search(path: Path, query: str, limit: int) -> list[object]:
    return list(spec_search([entry for _order, entry in reference(path)], query, limit))  # type: ignore[misc]


def assert_same(catalog: MemoryCatalog, queries: list[str]) -> None:
    path = catalog.path
    for query in queries:
        for limit in (1, 3, 50):
            assert catalog.search(query, limit=limit) == reference_search(path, query, limit), (query, limit)
    expected = [entry for _order, entry in reference(path)]
    assert catalog.list(limit=100) == expected[::-1][:100]
    assert catalog.list(limit=2) == expected[::-1][:2]
    for memory_id in IDS:
        first = next((e for e in expected if e.memory_id == memory_id), None)  # type: ignore[attr-defined]
        if first is None:
            with pytest.raises(FileNotFoundError):
                catalog.show(memory_id)
        else:
            assert catalog.show(memory_id) == first


def write_raw(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def replace_file(path: Path, data: bytes) -> None:
    """What git checkout does: a new inode at the same path."""
    tmp = path.with_name("checkout.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), lines, st.booleans()),
        st.tuples(st.just("add"), text, st.lists(st.sampled_from(TAGS), max_size=2),
                  st.sampled_from([None, "b1", "b2"])),
        st.tuples(st.just("delete_branch"), st.sampled_from(["b1", "b2", "bé", "\ud800"])),
        st.tuples(st.just("delete_run"), st.just("r1")),
        st.tuples(st.just("quarantine"), st.sampled_from(["b1", "b2", "bé"])),
        st.tuples(st.just("replace"), lines),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=400)),
        st.tuples(st.just("edit"), st.integers(min_value=0, max_value=400)),
        st.tuples(st.just("torn"), st.binary(min_size=1, max_size=20)),
        st.tuples(st.just("delete_file")),
    ),
    min_size=1,
    max_size=8,
)


def apply(catalog: MemoryCatalog, op: tuple) -> None:
    path = catalog.path
    kind = op[0]
    if kind == "append":
        body = b"\n".join(op[1])
        with open(path, "ab") as handle:
            handle.write(body + (b"\n" if op[2] else b""))
    elif kind == "add":
        catalog.add(op[1], tags=op[2], branch_name=op[3]) if op[1].strip() else None
    elif kind in ("delete_branch", "quarantine"):
        before = reference(path)
        count = catalog.delete_by_branch(op[1]) if kind == "delete_branch" else catalog.quarantine_by_branch(
            op[1], "test")
        after = [entry for _order, entry in reference(path)]
        expected = [entry for _order, entry in before if entry.branch_name != op[1]]  # type: ignore[attr-defined]
        assert after == expected and count == len(before) - len(expected)
    elif kind == "delete_run":
        before = reference(path)
        count = catalog.delete_by_run_id(op[1])
        expected = [entry for _order, entry in before if entry.run_id != op[1]]  # type: ignore[attr-defined]
        assert [entry for _order, entry in reference(path)] == expected and count == len(before) - len(expected)
    elif kind == "replace":
        replace_file(path, b"\n".join(op[1]) + b"\n")
    elif kind == "truncate" and path.exists():
        data = path.read_bytes()
        with open(path, "r+b") as handle:
            handle.truncate(min(op[1], len(data)))
    elif kind == "edit" and path.exists():
        data = bytearray(path.read_bytes())
        if data:
            position = op[1] % len(data)
            data[position] = ord("Z") if data[position] != ord("Z") else ord("Y")
            with open(path, "r+b") as handle:
                handle.write(bytes(data))
    elif kind == "torn":
        with open(path, "ab") as handle:
            handle.write(op[1])
    elif kind == "delete_file" and path.exists():
        path.unlink()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(initial=lines, ops=operations, queries=st.lists(
    st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=3).map(" ".join), min_size=1, max_size=4))
def test_index_equals_scan_through_edits(tmp_path_factory: pytest.TempPathFactory, initial: list[bytes],
                                         ops: list[tuple], queries: list[str]) -> None:
    _index_equals_scan_through_edits(tmp_path_factory, initial, ops, queries)


FORCED = {
    # Every column dense: no term sets at all, so every query walks.
    "dense terms": {"TERM_CAP": 0},
    # Tiny caps and no intersections: expansions of one column or both, then walks.
    "expansions": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "AND_ROWS": 0},
    # Narrowed sets too big to score: the walk reads only them (or tests word-index filters).
    "narrowed walks": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SPARSE_WALK": 0},
    # Walks interrupted at once: the word-index fallback, or the walk resumed.
    "interrupted": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "WALK_SECONDS": 0.0, "SPARSE_WALK": 0},
    "interrupted, no fallback": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "WALK_SECONDS": 0.0,
                                 "FALLBACK_CAP": 0, "MATCH_TERMS": 0},
    # One-token walks that first run without their filter: to the end, or cut short at once.
    "probed walks": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "PROBE_FILTER_ROWS": 0},
    "probes cut short": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "PROBE_FILTER_ROWS": 0,
                         "PROBE_SECONDS": 0.0},
    # Filters that would take the walk's whole budget to build: the fallback, or the unbudgeted walk.
    "filters outlast the budget": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "FILTER_ROW_SECONDS": 1.0},
    "filters outlast, no fallback": {"CANDIDATE_CAP": 1, "DIRECT_ROWS": 1, "SET_ROWS": 1, "FILTER_ROW_SECONDS": 1.0,
                                     "FALLBACK_CAP": 0},
}


@pytest.mark.parametrize("plan", FORCED)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(initial=lines, ops=operations, queries=st.lists(
    st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=3).map(" ".join), min_size=1, max_size=4))
def test_index_equals_scan_on_every_planner_path(tmp_path_factory: pytest.TempPathFactory, plan: str,
                                                 initial: list[bytes], ops: list[tuple], queries: list[str]) -> None:
    from memstore.index import search

    with pytest.MonkeyPatch.context() as patch:
        for name, value in FORCED[plan].items():
            patch.setattr(search, name, value)
        _index_equals_scan_through_edits(tmp_path_factory, initial, ops, queries)


def _index_equals_scan_through_edits(tmp_path_factory: pytest.TempPathFactory, initial: list[bytes],
                                     ops: list[tuple], queries: list[str]) -> None:
    root = tmp_path_factory.mktemp("diff")
    catalog = MemoryCatalog(root)
    write_raw(catalog.path, b"\n".join(initial) + b"\n")
    assert_same(catalog, queries)
    for op in ops:
        apply(catalog, op)
        assert_same(catalog, queries)
        # A second process (a fresh catalog object) sees the same answers from the shared index.
        assert_same(MemoryCatalog(root), queries[:1])
    report = catalog.check_index()
    assert report.equal, report.summary
    # The answers above came from the index, not from the scan fallback.
    assert catalog.health_report()["index"]["state"] in ("fresh", "missing")


PLANS = {
    "default": {},
    # Tiny caps and no time budget push every query through expansions, walks and fallbacks.
    "walks": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3},
    "narrowed walks": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3},
    "interrupted walks": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "WALK_SECONDS": 0.0},
    "interrupted, no fts fallback": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "WALK_SECONDS": 0.0,
                                     "FALLBACK_CAP": 0},
    # Walks that give way to one SQL pass after a few rows, and limits that always take one pass.
    "walks give way": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "WALK_ROWS": 0, "WALK_SHARE": 10**9},
    "one pass": {"ONE_PASS_SHARE": 10**9},
    "dense terms": {"TERM_CAP": 0, "CANDIDATE_CAP": 3, "DIRECT_ROWS": 3},
    "no intersections": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "AND_ROWS": 0},
    "no word-index sets": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "MATCH_TERMS": 0, "WALK_SECONDS": 0.0},
    "probed walks": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "PROBE_FILTER_ROWS": 0},
    "probes cut short": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "PROBE_FILTER_ROWS": 0,
                         "PROBE_SECONDS": 0.0},
    "probes cut short, walks too": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "PROBE_FILTER_ROWS": 0,
                                    "PROBE_SECONDS": 0.0, "WALK_SECONDS": 0.0},
    "filters outlast the budget": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "FILTER_ROW_SECONDS": 1.0},
    "filters outlast, no fallback": {"CANDIDATE_CAP": 3, "DIRECT_ROWS": 3, "SET_ROWS": 3, "FILTER_ROW_SECONDS": 1.0,
                                     "FALLBACK_CAP": 0},
}


@pytest.mark.parametrize("plan", PLANS)
def test_common_token_topk_with_timestamp_ties(tmp_path: Path, plan: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The top-k walk must respect score, then created_at, then file order, whichever path it takes."""
    from memstore.index import search

    for name, value in PLANS[plan].items():
        monkeypatch.setattr(search, name, value)
    catalog = MemoryCatalog(tmp_path)
    rows = []
    for i in range(6000):
        tags = ["auto-curated"] if i % 97 == 0 else (["run-summary"] if i % 89 == 0 else ["misc"])
        if i % 13 == 0:
            tags.append("the-tag")
        stamp = STAMPS[i % 3]
        content = "the common word " + ("the " if i % 7 == 0 else "") + f"row{i}"
        rows.append(json.dumps({"memory_id": f"m{i}", "content": content, "tags": tags, "created_at": stamp,
                                "branch_name": None, "run_id": None}, sort_keys=True))
    write_raw(catalog.path, ("\n".join(rows) + "\n").encode())
    for query in ["the", "the the", "common", "the tag", "t", "e", "row1", "misc the", "auto", "the-tag row",
                  "ro w", "zz", "word auto-curated"]:
        for limit in (1, 10, 25, 700, 10**6) if query in ("the", "e", "misc the") else (1, 10, 25):
            assert catalog.search(query, limit=limit) == reference_search(catalog.path, query, limit), query
    assert catalog.health_report()["index"]["state"] == "fresh"
