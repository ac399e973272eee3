"""The real-text corpus: extraction without imports, deterministic memstore lines, truthful query bands,
and one end-to-end run of the harness on it (tiny: a few stdlib packages, a few hundred entries)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.bands import match_counts, sample_frequencies
from benchmarks.baselines import MemoryScan, load_entries
from benchmarks.generate import TextChoice, dataset
from benchmarks.realtext_queries import BANDS, MIXED_SLOTS, SINGLE_SLOTS, band_of, choose_queries
from benchmarks.run import Options, index_available, run_benchmarks
from memstore.jsonl import encode_entry
from memstore.models import memory_entry_from_payload, memory_matches
from memstore.sample import pytext
from memstore.sample.catalog import DELETE_BRANCH
from memstore.sample.realtext import (
    _WORD,
    MAX_CHARS,
    MIN_CHARS,
    RealTextWriter,
    WordStream,
    realtext_end_us,
    write_realtext_catalog,
)

PACKAGES = ("argparse", "ast", "email", "inspect", "json", "re", "typing", "urllib")
SIZE = 2_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> pytext.TextCorpus:
    return pytext.load_corpus(packages=PACKAGES, workers=1, cache_dir=tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def catalog(corpus: pytext.TextCorpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("realtext") / "memory.jsonl"
    write_realtext_catalog(path, SIZE, corpus=corpus, seed=3, workers=1, chunk_entries=700)
    return path


@pytest.fixture(scope="module")
def mix(catalog: Path) -> dict[str, object]:
    return choose_queries(catalog, seed=3, workers=1)


# ---------------------------------------------------------------- extraction


SOURCE = b'''#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""Module docstring."""
import os  # trailing comment


# first line of a block
#   second line, indented
class Thing:
    """Class docstring."""

    if os.name:
        def method(self):
            """Nested   docstring
            on two lines."""
            return "# not a comment"

# 0x00 -> NULL
''' + b"".join(b"# 0x%02X -> LATIN CAPITAL LETTER X\n" % n for n in range(20))


def test_docstrings_and_comment_blocks_come_out_in_line_order() -> None:
    units = pytext.extract_units(SOURCE)
    assert units == [
        ("docstring", "Module docstring."),
        ("comment", "trailing comment"),
        ("comment", "first line of a block\nsecond line, indented"),
        ("docstring", "Class docstring."),
        ("docstring", "Nested   docstring\non two lines."),
    ]  # shebang, coding line, the string holding '#' and the generated table are not text


def test_files_that_do_not_parse_give_no_text() -> None:
    assert pytext.extract_units(b"def broken(:\n    '''doc'''\n") == []
    assert pytext.extract_units(b"\xff\xfe garbage") == []


def test_test_suites_and_per_machine_files_are_skipped(tmp_path: Path) -> None:
    for relative in (
        "pkg/__init__.py",
        "pkg/mod.py",
        "pkg/tests/test_mod.py",
        "test/test_x.py",
        "__editable___thing_finder.py",
        "other.py",
        "pkg-1.0.dist-info/x.py",
        "notes.txt",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("# x\n")
    assert pytext.python_files(tmp_path) == ["other.py", "pkg/__init__.py", "pkg/mod.py"]
    assert pytext.python_files(tmp_path, packages=["pkg"]) == ["pkg/__init__.py", "pkg/mod.py"]
    assert pytext.module_name("pkg/__init__.py") == "pkg"
    assert pytext.module_name("email/mime/text.py") == "email.mime.text"


def test_the_fingerprint_names_the_text_and_the_cache_is_checked(tmp_path: Path) -> None:
    small = pytext.load_corpus(packages=["json"], workers=1, cache_dir=tmp_path)
    again = pytext.load_corpus(packages=["json"], workers=1, cache_dir=tmp_path)
    other = pytext.load_corpus(packages=["csv"], workers=1, cache_dir=tmp_path)
    assert again == small and re.fullmatch(r"[0-9a-f]{64}", small.fingerprint)
    assert other.fingerprint != small.fingerprint
    assert small.describe()["sources"][0]["name"] == "stdlib"
    (cached,) = [p for p in tmp_path.glob("pytext-*.json") if json.loads(p.read_text())["files"][0]["module"] == "json"]
    tampered = json.loads(cached.read_text())
    tampered["files"][0]["units"][0][1] = "forged text"
    cached.write_text(json.dumps(tampered))
    assert pytext.load_corpus(packages=["json"], workers=1, cache_dir=tmp_path) == small  # re-extracted


def test_words_are_what_str_split_finds() -> None:
    spaces = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    text = "a" + "b".join(spaces) + "c\u200bd e\xa0f"
    assert _WORD.findall(text) == text.split()


# ---------------------------------------------------------------- the catalog


def test_same_text_and_seed_give_the_same_bytes_whatever_the_workers(corpus: pytext.TextCorpus, tmp_path: Path) -> None:
    one, two, short, other = (tmp_path / name for name in ("one", "two", "short", "other"))
    write_realtext_catalog(one, 1_500, corpus=corpus, seed=5, workers=1, chunk_entries=400)
    write_realtext_catalog(two, 1_500, corpus=corpus, seed=5, workers=2, chunk_entries=400)
    write_realtext_catalog(short, 900, corpus=corpus, seed=5, workers=1, chunk_entries=400)
    write_realtext_catalog(other, 900, corpus=corpus, seed=6, workers=1, chunk_entries=400)
    assert one.read_bytes() == two.read_bytes()
    lines = one.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1_500
    assert b"".join(lines[:900]) == short.read_bytes()  # a smaller catalog is a prefix of a larger one
    assert other.read_bytes() != short.read_bytes()


def test_every_line_is_a_memstore_line_of_real_text(corpus: pytext.TextCorpus, catalog: Path) -> None:
    words = WordStream(corpus)
    modules = {item.module for item in corpus.files}
    contents: list[str] = []
    tags: Counter[str] = Counter()
    branches: Counter[str | None] = Counter()
    for raw in catalog.read_bytes().splitlines(keepends=True):
        payload = json.loads(raw)
        entry = memory_entry_from_payload(payload)
        assert entry is not None, raw
        assert encode_entry(entry) == raw
        assert (json.dumps(payload, sort_keys=True) + "\n").encode() == raw
        assert MIN_CHARS <= len(entry.content) <= MAX_CHARS
        assert entry.content in words.text  # a window of the extracted text, not made up
        assert set(entry.tags) & modules and set(entry.tags) & {"docstring", "comment"}
        contents.append(entry.content)
        tags.update(entry.tags)
        branches[entry.branch_name] += 1
    assert len(set(contents)) == SIZE  # distinct windows
    assert 0.02 < tags["auto-curated"] / SIZE < 0.08 and 0.01 < tags["run-summary"] / SIZE < 0.05
    assert 0.003 < branches[DELETE_BRANCH] / SIZE < 0.02
    assert 180 < sum(map(len, contents)) / SIZE < 320


def test_appended_entries_carry_the_marker(corpus: pytext.TextCorpus) -> None:
    writer = RealTextWriter(WordStream(corpus), 3, stream="append", start_us=realtext_end_us(SIZE))
    for line in writer.lines(200, extra_word="catchupmark").splitlines():
        entry = memory_entry_from_payload(json.loads(line))
        assert entry is not None and "catchupmark" in entry.content.split()


def test_too_little_text_for_the_size_is_an_error(tmp_path: Path) -> None:
    tiny = pytext.TextCorpus((pytext.SourceFile("stdlib", "m", (("comment", "one two three " * 6),)),), (), "f")
    with pytest.raises(ValueError, match="distinct windows"):
        write_realtext_catalog(tmp_path / "x.jsonl", 500, corpus=tiny, seed=1, workers=1)


# ---------------------------------------------------------------- the query mix


def test_band_edges() -> None:
    assert [band_of(n, 100_000) for n in (0, 1, 9, 10, 99, 100, 999, 1_000, 9_999, 10_000, 100_000)] == [
        "absent", "very-rare", "very-rare", "rare", "rare", "mid", "mid", "common", "common",
        "very-common", "very-common",
    ]  # fmt: skip
    assert [name for name, _ in BANDS] == ["very-common", "common", "mid", "rare", "very-rare"]


def test_every_query_has_the_band_and_count_it_claims(catalog: Path, mix: dict[str, object]) -> None:
    queries = mix["queries"]
    assert isinstance(queries, list)
    assert len(queries) == len(SINGLE_SLOTS) + 2 + len(MIXED_SLOTS) == 40
    assert mix["missing"] == []
    entries = load_entries(catalog)
    scan = MemoryScan(entries)
    for query in queries:
        scan.search(query["text"])
        assert scan.last_match_count == query["matches"], query
        tokens = query["text"].split()
        if len(tokens) == 1:
            assert query["band"] == band_of(query["matches"], SIZE), query
        else:
            for part in query["parts"]:
                count = sum(1 for entry in entries if memory_matches(entry, [part["token"]]))
                assert (count, band_of(count, SIZE)) == (part["matches"], part["band"])
            assert query["band"] == "+".join(part["band"] for part in query["parts"])
    by_category = {q["category"]: q for q in queries}
    assert by_category["absent"]["matches"] == by_category["absent near-miss"]["matches"] == 0
    assert by_category["very-common"]["band"] == "very-common"
    assert len(by_category["1-char common"]["text"]) == 1 and len(by_category["2-char rare"]["text"]) == 2
    assert by_category["code: ->"]["text"] == "->"
    assert not by_category["non-ascii rare"]["text"].isascii()
    assert not any(ch.isalnum() for ch in by_category["punct common"]["text"])
    assert len({q["text"] for q in queries}) == len(queries)


def test_the_mix_does_not_depend_on_the_workers(catalog: Path, mix: dict[str, object]) -> None:
    assert choose_queries(catalog, seed=3, workers=2) == mix
    assert choose_queries(catalog, seed=4, workers=1)["queries"] != mix["queries"]
    assert (
        sample_frequencies(catalog, workers=2, sample_lines=500).df
        == sample_frequencies(catalog, workers=1, sample_lines=500).df
    )


def test_match_counts_follow_the_search_rule_on_tags_too(catalog: Path) -> None:
    entries = load_entries(catalog)
    queries = [["docstring"], ["doc"], ["comment", "json"], ["zzzzqq"], ["e"]]
    counts = match_counts(catalog, queries, workers=2)
    assert counts.entries == SIZE
    assert counts.matches == [sum(1 for e in entries if memory_matches(e, q)) for q in queries]


def test_the_dataset_keeps_text_metadata_and_mix_beside_the_catalog(tmp_path: Path) -> None:
    choice = TextChoice(packages=("json",))
    first = dataset("realtext", 300, seed=2, data_dir=tmp_path, text=choice)
    again = dataset("realtext", 300, seed=2, data_dir=tmp_path, text=choice)
    assert first.generate_seconds is not None and again.generate_seconds is None
    assert again.file == first.file and first.info["text"]["fingerprint"] in (first.root / "dataset.json").read_text()
    assert first.info["text"]["fingerprint"][:12] in first.root.name
    assert again.info["queries"]["queries"] == first.info["queries"]["queries"]
    assert (first.root / "queries.json").is_file()


# ---------------------------------------------------------------- the harness


@pytest.mark.skipif(not index_available(), reason="memstore's index has not landed")
def test_the_harness_runs_on_real_text_and_checks_every_answer(tmp_path: Path) -> None:
    options = Options(
        size=400,
        seed=5,
        corpus="realtext",
        text=TextChoice(packages=PACKAGES),
        repeats=1,
        data_dir=tmp_path / "data",
        results_dir=tmp_path / "results",
        card_sizes=(),
        catchup_sizes=(1, 100),
        add_count=20,
        process_runs=1,
        log=lambda message: None,
    )
    report = run_benchmarks(options)
    assert report["exact"], report["mismatches"]
    assert not report["errors"]
    assert report["corpus"] == "realtext"
    assert len(report["queries"]) + len(report["dataset"]["missing_slots"]) == 40  # small text: some slots empty
    assert all(q["exact"] and q["band"] for q in report["queries"])
    metrics = report["metrics"]
    for key in ("search_indexed_p50_ms", "search_indexed_p95_ms", "search_indexed_max_ms",
                "speedup_vs_scan_memory_per_query_min", "catchup_100_ms", "delete_branch_seconds"):  # fmt: skip
        assert isinstance(metrics.get(key), (int, float)), key
    results = tmp_path / "results"
    table = (results / "realtext-400.md").read_text()
    assert "| category | query | band | share | hits |" in table and "fingerprint" in table
    assert json.loads((results / "realtext-400.json").read_text())["dataset"]["text"]["fingerprint"]
    (history,) = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert history["corpus"] == "realtext" and history["exact"]
