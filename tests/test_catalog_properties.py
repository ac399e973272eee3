"""Search, list and show over random raw catalog files equal a naive reading of the spec.

The expected results are computed here from the spec text alone (DESIGN.md §4),
not with memstore's helpers: read lines split on ``\\n``, skip blank and invalid
lines, then filter and sort.  Every property runs against the default catalog
(index when available) and the scan-only catalog.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog

both_paths = pytest.mark.parametrize("use_index", [True, False], ids=["index", "scan"])

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- the naive model


@dataclass(frozen=True)
class Expected:
    memory_id: str
    content: str
    tags: tuple[str, ...]
    created_at: str
    branch_name: str | None
    run_id: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "content": self.content,
            "tags": list(self.tags),
            "created_at": self.created_at,
            "branch_name": self.branch_name,
            "run_id": self.run_id,
        }


def naive_entry(payload: Any) -> Expected | None:
    """The spec's validity rules, written out independently."""
    if not isinstance(payload, dict):
        return None
    memory_id, content = payload.get("memory_id"), payload.get("content")
    tags, created_at = payload.get("tags", []), payload.get("created_at")
    branch, run = payload.get("branch_name"), payload.get("run_id")
    if not isinstance(memory_id, str) or not memory_id.strip():
        return None
    if not isinstance(content, str) or not content.strip():
        return None
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        return None
    if not isinstance(created_at, str) or created_at == "":
        return None
    if not (branch is None or isinstance(branch, str)) or not (run is None or isinstance(run, str)):
        return None
    clean_tags = tuple(sorted({tag.strip().lower() for tag in tags if tag.strip()}))
    return Expected(memory_id.strip(), content.strip(), clean_tags, created_at, branch, run)


def naive_read(data: bytes) -> list[Expected]:
    entries = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            payload = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            continue
        entry = naive_entry(payload)
        if entry is not None:
            entries.append(entry)
    return entries


def naive_search(entries: list[Expected], query: str, limit: int) -> list[Expected]:
    tokens = query.strip().lower().split()
    if not tokens:
        return []
    scored = []
    for position, entry in enumerate(entries):
        content = entry.content.lower()
        in_content = [token in content for token in tokens]
        in_tags = [any(token in tag for tag in entry.tags) for token in tokens]
        if not all(c or t for c, t in zip(in_content, in_tags, strict=True)):
            continue
        score = 3 * sum(in_content) + 2 * sum(in_tags)
        score += 4 if "auto-curated" in entry.tags else 0
        score += 2 if "run-summary" in entry.tags else 0
        scored.append((score, entry.created_at, position, entry))
    scored.sort(key=lambda item: item[2])  # file order first ...
    scored.sort(key=lambda item: item[1], reverse=True)  # ... then created_at desc (stable) ...
    scored.sort(key=lambda item: item[0], reverse=True)  # ... then score desc (stable)
    return [item[3] for item in scored[:limit]]


def naive_list(entries: list[Expected], limit: int) -> list[Expected]:
    return entries[::-1][:limit]


def naive_show(entries: list[Expected], memory_id: str) -> Expected | None:
    wanted = memory_id.strip()
    return next((entry for entry in entries if entry.memory_id == wanted), None)


# ---------------------------------------------------------------- random catalogs

WORDS = ["parser", "Parse", "bug", "BUILD", "ü", "straße", "İstanbul", "σς", "a", "ab", "fix", "x"]
SPECIAL_CHARS = ' \t\r\x85\u2028\u00a0İẞΣς\ud800\x00"\\/'
words = st.sampled_from(WORDS)
odd_text = st.text(alphabet=st.sampled_from(SPECIAL_CHARS) | st.characters(), max_size=4)
texts = st.lists(st.one_of(words, words, words, odd_text), min_size=1, max_size=6).map(" ".join)
tags = st.lists(
    st.sampled_from(["auto-curated", "run-summary", "Parser", " build ", "BUG", "misc", "", "Auto-Curated "])
    | texts,
    max_size=4,
)
ids = st.sampled_from([f"{n:032x}" for n in range(6)]) | st.sampled_from([" padded ", "x"])
timestamps = st.sampled_from(
    [
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:00.5+00:00",
        "2025-12-31T23:59:59+00:00",
        "2026",
        "z",
        " ",
    ]
)
optional = st.none() | st.sampled_from(["main", "feature", ""])

payloads = st.fixed_dictionaries(
    {
        "memory_id": ids,
        "content": texts,
        "tags": tags,
        "created_at": timestamps,
        "branch_name": optional,
        "run_id": optional,
    },
    optional={"extra": st.integers() | st.text(max_size=3)},
)

CORRUPT = [
    b"not json",
    b"\xff\xfe bad utf-8",
    b"}{",
    b'{"memory_id": "x"}{"memory_id": "y"}',
    b'{"memory_id": "00000000000000000000000000000001", "content": "parser',
    b'{"memory_id": "x", "content": "parser", "tags": "parser", "created_at": "t"}',
    b'{"memory_id": "x", "content": "parser", "tags": [1], "created_at": "t"}',
    b'{"memory_id": "x", "content": "parser", "tags": [], "created_at": 3}',
    b'{"memory_id": "x", "content": "parser", "tags": [], "created_at": NaN}',
    b"[1]",
    b"null",
    b"   ",
    b"\r",
    b"",
]


@st.composite
def raw_lines(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(CORRUPT))
    payload = draw(payloads)
    ensure_ascii = draw(st.booleans())
    text = json.dumps(payload, sort_keys=draw(st.booleans()), ensure_ascii=ensure_ascii)
    return text.encode("utf-8", "surrogatepass")  # raw surrogates make the line invalid UTF-8


@st.composite
def catalog_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(raw_lines(), max_size=14))
    endings = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(lines), max_size=len(lines)))
    data = b"".join(line + ending for line, ending in zip(lines, endings, strict=True))
    if data and draw(st.booleans()):
        data = data.rstrip(b"\n")  # the last line without its newline
    return data


QUERY_WORDS = ["parser", "pars", "PARSE", "bug", "build", "ü", "straße", "i̇stanbul", "σς", "a", "fix", "x"]
word_queries = st.lists(
    st.sampled_from([*QUERY_WORDS, "auto", "summary", "curated", "-", "ς", "\ud800"]), min_size=1, max_size=2
).map(" ".join)
queries = st.one_of(
    word_queries, word_queries, word_queries, word_queries, odd_text, st.sampled_from(["", " \t\n"])
)


@st.composite
def catalogs_with_queries(draw: st.DrawFn) -> tuple[bytes, str]:
    """A catalog file and a query that usually matches some of its entries."""
    data = draw(catalog_files())
    entries = naive_read(data)
    if not entries or draw(st.integers(0, 4)) == 0:
        return data, draw(queries)
    parts = []
    for _ in range(draw(st.integers(1, 2))):
        entry = draw(st.sampled_from(entries))
        pool = entry.content.split() + list(entry.tags)
        word = draw(st.sampled_from(pool)) if pool else entry.content
        start = draw(st.integers(0, max(0, len(word) - 1)))
        piece = word[start : start + draw(st.integers(1, max(1, len(word))))]
        parts.append(piece.upper() if draw(st.booleans()) else piece)
    return data, " ".join(parts)


_WORKSPACES: dict[str, str] = {}


def workspace(key: str) -> str:
    """One directory per test and path, reused across examples (the index then sees replaced files)."""
    if key not in _WORKSPACES:
        _WORKSPACES[key] = tempfile.mkdtemp(prefix="memstore-props-")
        atexit.register(shutil.rmtree, _WORKSPACES[key], True)
    return _WORKSPACES[key]


def open_catalog(key: str, data: bytes, use_index: bool) -> MemoryCatalog:
    """Replace the catalog file with ``data`` (a new inode, as git or an editor would) and open it."""
    directory = workspace(f"{key}-{use_index}")
    path = Path(directory) / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name("incoming")
    temp.write_bytes(data)
    os.replace(temp, path)
    return MemoryCatalog(directory, use_index=use_index)


def as_dicts(entries: list[Any]) -> list[dict[str, Any]]:
    return [entry.to_dict() if hasattr(entry, "to_dict") else entry.as_dict() for entry in entries]


# ---------------------------------------------------------------- properties


@both_paths
@SETTINGS
@given(case=catalogs_with_queries(), limit=st.integers(0, 12))
def test_search_equals_naive_filter_and_sort(use_index: bool, case: tuple[bytes, str], limit: int) -> None:
    data, query = case
    expected = naive_search(naive_read(data), query, limit)
    catalog = open_catalog("search", data, use_index)
    assert as_dicts(catalog.search(query, limit=limit)) == as_dicts(expected)


@both_paths
@SETTINGS
@given(data=catalog_files(), limit=st.integers(0, 16))
def test_list_equals_reversed_file_order(use_index: bool, data: bytes, limit: int) -> None:
    entries = naive_read(data)
    catalog = open_catalog("list", data, use_index)
    assert as_dicts(catalog.list(limit=limit)) == as_dicts(naive_list(entries, limit))
    assert catalog.health_report()["total_entries"] == len(entries)


@both_paths
@SETTINGS
@given(data=catalog_files(), wanted=ids | st.sampled_from(["", "  ", "nope", f"\t{0:032x}\n"]))
def test_show_equals_first_match(use_index: bool, data: bytes, wanted: str) -> None:
    expected = naive_show(naive_read(data), wanted)
    catalog = open_catalog("show", data, use_index)
    if expected is None:
        with pytest.raises(FileNotFoundError):
            catalog.show(wanted)
    else:
        assert catalog.show(wanted).to_dict() == expected.as_dict()


@both_paths
@SETTINGS
@given(
    data=catalog_files(),
    queries_=st.lists(queries, min_size=1, max_size=4),
    extra=st.lists(raw_lines(), max_size=4),
)
def test_repeated_queries_after_appends_stay_exact(
    use_index: bool, data: bytes, queries_: list[str], extra: list[bytes]
) -> None:
    """The same catalog object answers exactly before and after the file grows (cache / catch-up)."""
    catalog = open_catalog("repeat", data, use_index)
    current = data
    for query in queries_:
        assert as_dicts(catalog.search(query, limit=50)) == as_dicts(
            naive_search(naive_read(current), query, 50)
        )
    for line in extra:
        if current and not current.endswith(b"\n"):
            line = b"\n" + line
        current += line + b"\n"
        with open(catalog.path, "ab") as handle:
            handle.write(line + b"\n")
        for query in queries_:
            expected = naive_search(naive_read(current), query, 50)
            assert as_dicts(catalog.search(query, limit=50)) == as_dicts(expected)
        assert as_dicts(catalog.list(limit=50)) == as_dicts(naive_list(naive_read(current), 50))


def test_the_naive_model_itself() -> None:
    """The model the properties compare against reads and ranks a known file as the spec says."""
    line = json.dumps(
        {"memory_id": "a", "content": "Parser bug", "tags": ["Auto-Curated "], "created_at": "t"},
        sort_keys=True,
    ).encode()
    [entry] = naive_read(line)
    assert entry.tags == ("auto-curated",)
    assert naive_search([entry], "parser", 5) == [entry]
    data = b"\n".join(
        [
            json.dumps({"memory_id": "1", "content": "parser", "tags": [], "created_at": "b"}).encode(),
            b"}{",
            json.dumps({"memory_id": "2", "content": "x", "tags": ["parser"], "created_at": "c"}).encode(),
            json.dumps({"memory_id": "3", "content": "parser", "tags": [], "created_at": "b"}).encode(),
            json.dumps(
                {"memory_id": "4", "content": "parser", "tags": ["run-summary"], "created_at": "a"}
            ).encode(),
        ]
    )
    entries = naive_read(data)
    assert [e.memory_id for e in entries] == ["1", "2", "3", "4"]
    assert [e.memory_id for e in naive_search(entries, "PARSER", 10)] == ["4", "1", "3", "2"]
    assert [e.memory_id for e in naive_list(entries, 2)] == ["4", "3"]
