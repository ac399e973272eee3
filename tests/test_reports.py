"""One JSON document per answer: the CLI's --json prints exactly what memstore.reports builds (the MCP results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstore import reports
from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.cli import main
from memstore.failure_cards import FailureCardStorage
from memstore.hierarchy import MemoryHierarchy
from memstore.pinned import PinnedFileStorage
from memstore.workspace import Workspace, status_report


def _cli_json(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> object:
    assert main([*args, "--root", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_json_is_the_shared_document(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = MemoryCatalog(tmp_path)
    first = catalog.add("flaky tests need retries", tags=["ci"])
    catalog.add("redis holds the login cache \udc80", branch_name="b")
    cards = FailureCardStorage(tmp_path)
    blocking = FailureCard.create(
        "r", "E", "src/a.py", "m", "t", [], warning_behavior="block", reviewer_type="human", confidence="high"
    )
    cards.append(blocking)
    (tmp_path / "a.md").write_text("a", encoding="utf-8")
    PinnedFileStorage(tmp_path).add("a.md")

    def same(document: object, *args: str) -> None:
        assert _cli_json(capsys, tmp_path, *args) == json.loads(reports.json_text(document))

    same(reports.entries_report(catalog.search("tests", limit=10), query="tests"), "search", "tests")
    same(reports.entries_report(catalog.list(limit=20)), "list")
    same(reports.entry_report(first), "show", first.memory_id)
    same(reports.recall_report("redis", MemoryHierarchy(tmp_path).search_all("redis", limit=10)), "recall", "redis")
    same(reports.cards_report(cards.list_all()), "failures", "list")
    same(reports.card_report(blocking), "failures", "show", blocking.id)
    same(reports.pins_report(PinnedFileStorage(tmp_path).list_all()), "pinned")
    matched = _cli_json(capsys, tmp_path, "failures", "match", "--file", "src/a.py", "--task", "x")
    assert matched == reports.matching_cards_report([blocking])
    assert matched["cards"][0]["effective_behavior"] == "block"  # type: ignore[index]


def test_status_report_counts_every_store(tmp_path: Path, home: Path) -> None:
    MemoryCatalog(tmp_path).add("one")
    with (tmp_path / ".teaagent" / "memory.jsonl").open("a") as handle:
        handle.write("not json\n")
    report = status_report(Workspace(tmp_path))
    assert report["counts"]["entries"] == 1 and report["counts"]["corrupt_entries"] == 1
    assert report["health"]["healthy"] is False and "index" not in report["health"]
    assert report["index"]["sources"][0]["source"].endswith("memory.jsonl")
