"""Smoke tests for the benchmark suite: the generator's bytes and shape, the baselines,
the gate, and one end-to-end run of the harness at a tiny size (with its exactness check)."""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import gate
from benchmarks.baselines import MemoryScan, grep_available, grep_count, load_entries, naive_search
from benchmarks.cards_data import card_dicts
from benchmarks.generate import dataset, parse_size, size_label, write_cards
from benchmarks.queries import SEARCH_MIX
from benchmarks.report import write_outputs
from benchmarks.run import Options, index_available, main, run_benchmarks
from memstore.jsonl import encode_entry
from memstore.models import memory_entry_from_payload
from memstore.sample.catalog import DELETE_BRANCH, CatalogWriter, encode_line, write_catalog
from memstore.sample.vocab import BONUS_TAGS, vocabulary

SHAPE_SIZE = 6_000


@pytest.fixture(scope="module")
def shape_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shape") / "memory.jsonl"
    write_catalog(path, SHAPE_SIZE, seed=11, workers=1, chunk_entries=2_000)
    return path


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("10k", 10_000),
        ("20k", 20_000),
        ("100k", 100_000),
        ("1m", 1_000_000),
        ("1M", 1_000_000),
        ("2.5k", 2_500),
        ("1_000", 1_000),
        ("37", 37),
    ],
)
def test_parse_size_accepts_names_and_integers(text: str, count: int) -> None:
    assert parse_size(text) == count


@pytest.mark.parametrize("text", ["", "abc", "10x", "0", "-5", "1e6"])
def test_parse_size_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_size_label_round_trips_named_sizes() -> None:
    for name in ("10k", "20k", "100k", "1m"):
        assert size_label(parse_size(name)) == name
    assert size_label(1234) == "1234"


# ---------------------------------------------------------------- determinism


def test_same_seed_gives_same_bytes_whatever_the_worker_count(tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    two = tmp_path / "two.jsonl"
    write_catalog(one, 2_500, seed=7, workers=1, chunk_entries=1_000)
    write_catalog(two, 2_500, seed=7, workers=2, chunk_entries=1_000)
    assert one.read_bytes() == two.read_bytes()
    assert one.read_bytes().count(b"\n") == 2_500


def test_different_seed_gives_different_bytes(tmp_path: Path) -> None:
    first = tmp_path / "a.jsonl"
    second = tmp_path / "b.jsonl"
    write_catalog(first, 300, seed=1, workers=1)
    write_catalog(second, 300, seed=2, workers=1)
    assert first.read_bytes() != second.read_bytes()


def test_card_sets_are_deterministic() -> None:
    assert card_dicts(300, seed=5) == card_dicts(300, seed=5)
    assert card_dicts(300, seed=5) != card_dicts(300, seed=6)


def test_dataset_is_cached_by_kind_size_and_seed(tmp_path: Path) -> None:
    first = dataset("catalog", 200, seed=3, data_dir=tmp_path)
    again = dataset("catalog", 200, seed=3, data_dir=tmp_path)
    assert first.generate_seconds is not None
    assert again.generate_seconds is None
    assert again.file == first.file and again.bytes == first.bytes
    other = dataset("catalog", 200, seed=4, data_dir=tmp_path)
    assert other.file != first.file
    # A damaged cache entry is regenerated, not trusted.
    first.file.write_bytes(b"truncated\n")
    healed = dataset("catalog", 200, seed=3, data_dir=tmp_path)
    assert healed.generate_seconds is not None
    assert healed.file.stat().st_size == first.bytes


# ---------------------------------------------------------------- the catalog's shape


def test_every_line_is_what_memstore_itself_would_write(shape_catalog: Path) -> None:
    for raw in shape_catalog.read_bytes().splitlines(keepends=True):
        payload = json.loads(raw)
        entry = memory_entry_from_payload(payload)
        assert entry is not None, raw
        assert encode_entry(entry) == raw
        assert (json.dumps(payload, sort_keys=True) + "\n").encode() == raw


def test_encode_line_matches_json_dumps_on_awkward_strings() -> None:
    entry: dict[str, object] = {
        "memory_id": "0" * 32,
        "content": 'quote " backslash \\ tab \t nul \x00 İ ΟΔΟΣ 🚀 \ud800',
        "tags": ['a"b', "ü"],
        "created_at": "2025-01-01T00:00:00+00:00",
        "branch_name": None,
        "run_id": "r\n1",
    }
    assert encode_line(entry) == json.dumps(entry, sort_keys=True) + "\n"


def test_catalog_shape(shape_catalog: Path) -> None:
    vocab = vocabulary()
    allowed_tags = set(vocab.tags) | set(BONUS_TAGS)
    payloads = [json.loads(line) for line in shape_catalog.read_text().splitlines()]
    n = len(payloads)
    assert n == SHAPE_SIZE
    ids = [p["memory_id"] for p in payloads]
    assert len(set(ids)) == n
    assert all(re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", mid) for mid in ids)

    tag_counts = Counter(len(p["tags"]) for p in payloads)
    assert set(tag_counts) <= set(range(6)) and tag_counts[0] > 0 and tag_counts[5] > 0
    for p in payloads:
        assert set(p["tags"]) <= allowed_tags
        assert p["tags"] == sorted(set(p["tags"]))
    auto = sum("auto-curated" in p["tags"] for p in payloads) / n
    summary = sum("run-summary" in p["tags"] for p in payloads) / n
    assert 0.035 <= auto <= 0.065
    assert 0.018 <= summary <= 0.042
    assert len({t for p in payloads for t in p["tags"]}) > 150  # a few hundred tags in play

    lengths = [len(p["content"]) for p in payloads]
    assert 190 <= sum(lengths) / n <= 250
    assert any(any(ord(ch) > 127 for ch in p["content"]) for p in payloads)
    assert any(re.search(r"[A-Za-z]+Error\b", p["content"]) for p in payloads)
    assert any(re.search(r"\b[a-z]+_[a-z]+\b", p["content"]) for p in payloads)
    assert any(re.search(r"\b[a-z]+-[a-z]+\b", p["content"]) for p in payloads)
    assert any(re.search(r"\b[A-Z][a-z]+[A-Z][a-z]+\b", p["content"]) for p in payloads)
    assert any(re.search(r"\w+/\w+\.\w+", p["content"]) for p in payloads)

    stamps = [p["created_at"] for p in payloads]
    ties = sum(a == b for a, b in itertools.pairwise(stamps)) / n
    backdated = sum(b < a for a, b in itertools.pairwise(stamps)) / n
    assert ties >= 0.2
    assert 0.004 <= backdated <= 0.02
    assert all(s.endswith("+00:00") for s in stamps)

    to_delete = sum(p["branch_name"] == DELETE_BRANCH for p in payloads) / n
    assert 0.005 <= to_delete <= 0.02
    assert 0.25 <= sum(p["branch_name"] is not None for p in payloads) / n <= 0.45
    assert 0.2 <= sum(p["run_id"] is not None for p in payloads) / n <= 0.45


def test_word_frequencies_follow_the_zipf_table() -> None:
    vocab = vocabulary()
    rng = random.Random(1)
    draws = Counter(vocab.word_sampler.many(rng, 200_000))
    total = vocab.word_cum_weights[-1]
    for rank in (0, 1, 5, 50):
        previous = vocab.word_cum_weights[rank - 1] if rank else 0.0
        expected = (vocab.word_cum_weights[rank] - previous) / total * 200_000
        assert abs(draws[vocab.words[rank]] - expected) < 0.05 * expected + 30
    assert len(draws) > 5_000  # the long tail is reached


def test_extra_word_survives_in_every_entry() -> None:
    writer = CatalogWriter(9, stream="append")
    for entry in writer.entries(500, extra_word="markerword"):
        assert "markerword" in str(entry["content"]).lower()


def test_card_dicts_are_valid_cards_and_files_read_back(tmp_path: Path) -> None:
    cards_module = pytest.importorskip("memstore.cards")
    storage_module = pytest.importorskip("memstore.failure_cards")
    dicts = card_dicts(400, seed=2)
    for payload in dicts:
        card = cards_module.FailureCard.from_dict(payload)
        assert card is not None
        assert card.to_dict() == payload
    assert len({d["id"] for d in dicts}) == 400
    path = tmp_path / ".teaagent" / "memory" / "failures.json"
    write_cards(path, 400, seed=2)
    assert path.read_text() == json.dumps(dicts, indent=2) + "\n"
    storage = storage_module.FailureCardStorage(tmp_path)
    assert [card.id for card in storage.list_all()] == [d["id"] for d in dicts]
    active = storage.list_active()
    assert 0.7 * 400 < len(active) < 400


# ---------------------------------------------------------------- baselines and gate


def test_naive_and_in_memory_scans_agree_and_skip_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    write_catalog(path, 1_500, seed=4, workers=1)
    with open(path, "ab") as handle:
        handle.write(b"\n   \nnot json\n" + b'{"memory_id": "x", "content": "   "}\n' + b"\xff\xfe\n")
    scan = MemoryScan(load_entries(path))
    assert len(scan.entries) == 1_500
    for query in SEARCH_MIX:
        naive = [e.memory_id for e in naive_search(path, query.text)]
        assert [e.memory_id for e in scan.search(query.text)] == naive
    assert naive_search(path, "   ") == []
    assert naive_search(tmp_path / "missing.jsonl", "the") == []


@pytest.mark.skipif(not grep_available(), reason="grep not installed")
def test_grep_counts_lines_with_the_longest_token(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text("Alpha beta\nalphabet\ngamma\n")
    assert grep_count(path, "x ALPHA") == 2
    assert grep_count(path, "zzz") == 0


def test_gate_passes_and_fails_on_each_floor() -> None:
    good = {
        "search_indexed_p50_ms": 1.0,
        "search_scan_memory_p50_ms": 40.0,
        "catchup_1_ms": 1.0,
        "build_seconds": 2.0,
        "nochange_query_median_ms": 0.2,
    }
    assert all(floor.passed for floor in gate.evaluate(good))
    slow_search = {**good, "search_indexed_p50_ms": 5.0}
    slow_catchup = {**good, "catchup_1_ms": 150.0}
    slow_nochange = {**good, "nochange_query_median_ms": 1.5}
    for metrics, name in (
        (slow_search, "search_speedup"),
        (slow_catchup, "catchup_share"),
        (slow_nochange, "nochange_query"),
    ):
        failed = [floor.name for floor in gate.evaluate(metrics) if not floor.passed]
        assert failed == [name]
    assert not any(floor.passed for floor in gate.evaluate({}))


# ---------------------------------------------------------------- the harness end to end


def _tiny_options(tmp_path: Path, **overrides: object) -> Options:
    values: dict[str, object] = {
        "size": 400,
        "seed": 5,
        "repeats": 2,
        "data_dir": tmp_path / "data",
        "results_dir": tmp_path / "results",
        "card_sizes": (300,),
        "catchup_sizes": (1, 100),
        "add_count": 30,
        "writer_rounds": 1,
        "process_runs": 2,
        "log": lambda message: None,
    }
    values.update(overrides)
    return Options(**values)  # type: ignore[arg-type]


@pytest.mark.skipif(not index_available(), reason="memstore's index has not landed")
def test_harness_runs_end_to_end_and_results_are_exact(tmp_path: Path) -> None:
    options = _tiny_options(tmp_path, gate=True)
    ballast = b"x" * (256 * 1024 * 1024)  # a big parent must not inflate the child's peak RSS
    report = run_benchmarks(options)
    del ballast
    assert report["exact"], report["mismatches"]
    assert all(q["exact"] for q in report["queries"])
    assert all(card["exact"] for card in report["cards"])
    metrics = report["metrics"]
    for key in (
        "search_indexed_p50_ms",
        "search_scan_memory_p50_ms",
        "search_scan_naive_p50_ms",
        "build_seconds",
        "index_over_jsonl",
        "catchup_1_ms",
        "catchup_100_ms",
        "nochange_query_median_ms",
        "nochange_without_freshness_median_ms",
        "nochange_overhead_ms",
        "add_per_s",
        "writers_1_per_s",
        "writers_4_per_s",
        "bare_over_writers_1",
        "bare_4_per_s",
        "delete_branch_seconds",
        "writer_max_add_during_rewrite_ms",
        "find_matching_300_p50_ms",
        "import_memstore_ms",
        "first_query_fresh_process_max_ms",
    ):
        assert isinstance(metrics.get(key), (int, float)), key
    assert {floor["name"] for floor in report["gate"]} == {
        "search_speedup",
        "catchup_share",
        "nochange_query",
    }
    if sys.platform.startswith("linux"):
        assert metrics["build_peak_rss_mb"] < 200, "the child reported its parent's peak RSS"
    assert "memstore.sqlite3" in metrics["index_files_bytes"]
    results = tmp_path / "results"
    assert json.loads((results / "400-gate.json").read_text())["metrics"] == metrics
    assert "| search p50 over the mix, indexed (ms) |" in (results / "400-gate.md").read_text()
    write_outputs(report, results)  # a second run appends, never rewrites
    history = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert [line["size"] for line in history] == ["400", "400"]
    assert all(line["exact"] and "git_sha" in line for line in history)
    assert not (tmp_path / "data" / "work").exists() or not any((tmp_path / "data" / "work").iterdir())


@pytest.mark.skipif(not index_available(), reason="memstore's index has not landed")
def test_wrong_answers_and_crashing_steps_fail_the_run_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import benchmarks.run as harness

    def reversed_search(path: Path, query: str, *, limit: int = 10) -> list[object]:
        return list(reversed(naive_search(path, query, limit=limit)))

    def rewrite(self: object) -> None:  # stands in for a library crash in the rewrite step
        raise RuntimeError("simulated library crash")

    monkeypatch.setattr(harness, "naive_search", reversed_search)
    monkeypatch.setattr(harness.Bench, "rewrite", rewrite)
    results = tmp_path / "results"
    status = main(
        [
            "--size", "300", "--seed", "5", "--queries", "1", "--cards", "100", "--catchup", "1",
            "--adds", "3", "--process-runs", "1", "--data-dir", str(tmp_path / "data"),
            "--results-dir", str(results),
        ]
    )  # fmt: skip
    assert status == 1
    err = capsys.readouterr().err
    assert "EXACTNESS FAILURE" in err
    assert "BENCHMARK ERROR: rewrite failed: RuntimeError: simulated library crash" in err
    report = json.loads((results / "300.json").read_text())
    assert not report["exact"] and report["errors"]
    assert "import_memstore_ms" in report["metrics"]  # later groups still ran
    assert "find_matching_100_p50_ms" in report["metrics"]


def test_snapshot_exports_the_committed_tree(tmp_path: Path) -> None:
    from benchmarks.snapshot import export_commit

    try:
        sha, root = export_commit(tmp_path)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not inside a git checkout")
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    assert (root / "memstore" / "__init__.py").is_file()
    assert (root / "benchmarks" / "run.py").is_file()
    assert (root / ".complete").read_text().strip() == sha
    assert export_commit(tmp_path) == (sha, root)  # reused, not exported again


def test_working_copies_of_killed_runs_are_removed(tmp_path: Path) -> None:
    from benchmarks.run import _remove_stale_work

    code = "import os; print(os.getpid())"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    dead_pid = int(finished.stdout)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f"1m-{dead_pid}").mkdir()
        (tmp_path / f"1m-{alive.pid}").mkdir()
        (tmp_path / "notes").mkdir()
        _remove_stale_work(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"1m-{alive.pid}", "notes"])
    finally:
        alive.kill()
        alive.wait()
