"""memstore.maintenance: reindex and status over every indexed source of a workspace."""

from __future__ import annotations

from pathlib import Path

from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.index.report import IndexOff, SourceStatus
from memstore.maintenance import reindex_workspace, workspace_index_status


def card(card_id: str) -> FailureCard:
    return FailureCard(
        id=card_id, run_id="r", timestamp=100.0, error_type="TypeError", file_path="src/app.py",
        line_number=None, error_message="boom", task_description="parse yaml config", expires_at=4e12,
    )  # fmt: skip


def test_a_catalog_alone_is_the_only_source_reindexed(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    catalog.add("two")
    report = reindex_workspace(catalog)
    assert report.failure_cards is None
    assert report.catalog.source == str(catalog.path) and report.catalog.rows == 2
    assert report.catalog.action == "built"  # no index file yet: built from the catalog
    assert set(report.to_dict()) == {"catalog"}
    again = reindex_workspace(catalog)
    assert again.catalog.action == "none" and again.catalog.rows == 2


def test_cards_are_reindexed_when_their_file_exists(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    storage = FailureCardStorage(tmp_path)
    storage.append(card("c1"))
    storage.append(card("c2"))
    report = reindex_workspace(catalog)
    assert report.failure_cards is not None
    assert report.failure_cards.source == str(storage.path) and report.failure_cards.rows == 2
    assert set(report.to_dict()) == {"catalog", "failure_cards"}


def test_a_full_reindex_rebuilds_both_sources_into_one_new_file(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    FailureCardStorage(tmp_path).append(card("c1"))
    reindex_workspace(catalog)
    report = reindex_workspace(catalog, full=True)
    assert report.catalog.action == "rebuilt" and report.catalog.rows == 1
    assert report.failure_cards is not None and report.failure_cards.rows == 1
    status = workspace_index_status(catalog)
    assert [source.state for source in status.sources] == ["fresh", "fresh"]


def test_progress_is_reported_for_the_catalog(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for number in range(3):
        catalog.add(f"entry {number}")
    seen: list[tuple[int, int]] = []
    reindex_workspace(catalog, full=True, progress=lambda done, total: seen.append((done, total)))
    size = catalog.path.stat().st_size
    assert seen and seen[-1] == (size, size)


def test_a_readonly_catalog_reindexes_and_reports_only_itself(tmp_path: Path) -> None:
    MemoryCatalog(tmp_path).add("one")
    FailureCardStorage(tmp_path).append(card("c1"))
    readonly = MemoryCatalog(tmp_path, readonly=True)
    assert reindex_workspace(readonly).failure_cards is None
    assert len(workspace_index_status(readonly).sources) == 1


def test_status_has_one_row_per_source_catalog_first(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    only = workspace_index_status(catalog)
    assert len(only.sources) == 1
    storage = FailureCardStorage(tmp_path)
    storage.append(card("c1"))
    reindex_workspace(catalog)
    with open(catalog.path, "ab") as handle:
        handle.write(b"\n")  # one byte the index has not seen
    first, second = workspace_index_status(catalog).sources
    assert isinstance(first, SourceStatus) and isinstance(second, SourceStatus)
    assert (first.source, first.state, first.entries, first.bytes_behind) == (str(catalog.path), "behind", 1, 1)
    assert (second.source, second.state, second.entries) == (str(storage.path), "fresh", 1)
    assert first.index_path == second.index_path, "one index file holds both sources"
    document = workspace_index_status(catalog).to_dict()
    assert [row["source"] for row in document["sources"]] == [str(catalog.path), str(storage.path)]


def test_status_of_a_catalog_without_an_index_says_why(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path, use_index=False)
    catalog.add("one")
    (source,) = workspace_index_status(catalog).sources
    assert source == IndexOff("disabled")
    assert source.to_dict() == {"state": "disabled", "error": None}


def test_status_reads_create_nothing(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path, readonly=True)
    (source,) = workspace_index_status(catalog).sources
    assert isinstance(source, SourceStatus) and source.state == "missing"
    assert not (tmp_path / ".teaagent").exists()
