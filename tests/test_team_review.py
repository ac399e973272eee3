"""Adversarial review of the team index on PostgreSQL (issue 15): each test pins one defect found and fixed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from spec_reference import spec_search
from test_index_differential import reference, write_raw
from test_team_index_differential import Team, entry_line

from memstore.errors import IndexServerError, MemstoreError
from memstore.team_index import TeamIndex

pytestmark = pytest.mark.pg
HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def entries(path: Path) -> list:
    return [entry for _order, entry in reference(path)]


def test_search_snapshot_survives_concurrent_rebuild(tmp_path: Path, pg_writer_url: str, pg_reader_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A searcher whose snapshot was taken before a rebuild must still see the old rows.

    Cause: TeamIndex._search reads team_source (fixing the snapshot, pointing at the old
    partition) before it touches team_doc, so it holds no lock on team_doc; the indexer's
    SourceLoader._drop_retired detaches CONCURRENTLY (which waits only for lockers of the
    parent) and drops the old partition meanwhile: the search then reads a partition that
    no longer exists and returns nothing for the source.  Severity: wrong answer.
    """
    from memstore.index.pg import loader

    monkeypatch.setattr(loader, "IN_PLACE_ROWS", 0)
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (name,) = team.roots
    (catalog,) = team.catalogs.values()
    try:
        write_raw(catalog.path, b"\n".join(entry_line(f"alpha {n}", memory_id=f"m{n}") for n in range(5)) + b"\n")
        team.catch_up()
        original = TeamIndex._chosen
        fired = []
        outcome: list[BaseException | None] = []

        def rebuild() -> None:
            try:
                team.writer.reindex(team.roots, full=True)
                outcome.append(None)
            except IndexServerError as exc:
                outcome.append(exc)

        def chosen(self, conn, names):  # type: ignore[no-untyped-def]
            result = original(self, conn, names)
            if not fired:
                fired.append(1)
                worker = threading.Thread(target=rebuild, daemon=True)
                worker.start()
                worker.join(timeout=60)
            return result

        monkeypatch.setattr(TeamIndex, "_chosen", chosen)
        got = team.reader.search("alpha", limit=10, sources=[name])
        assert [hit.entry for hit in got.hits] == spec_search(entries(catalog.path), "alpha", 10)
        # The rebuild either finished beside the snapshot or waited for it until its lock timeout.
        assert len(outcome) == 1 and (outcome[0] is None or "lock timeout" in str(outcome[0])), outcome
    finally:
        team.close()


def test_names_equal_after_strip_are_two_sources(tmp_path: Path, pg_writer_url: str) -> None:
    """Two sources whose names differ only by surrounding spaces must not silently become one.

    Cause: team_index._check_name strips the name, so {"x": A, " x": B} registers one
    source "x" and loads it from both roots at once (whichever finishes last wins);
    TeamIndex.reindex never rejects the duplicate.  Severity: wrong answer.
    """
    a, b = tmp_path / "a", tmp_path / "b"
    for root, word in ((a, "apple"), (b, "banana")):
        write_raw(root / ".teaagent" / "memory.jsonl", entry_line(word) + b"\n")
    name = f"dup{id(tmp_path)}"
    index = TeamIndex(pg_writer_url)
    try:
        with pytest.raises(MemstoreError):
            index.reindex({name: a, f" {name} ": b})
    finally:
        index.close()


def test_long_created_at_does_not_break_catch_up(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    """A line whose created_at is long (incompressible, > 2704 bytes) must not make its source unindexable.

    Cause: memstore/index/pg/rows.py doc_of only makes rows with long *terms* odd; created_at goes
    into the team_doc_walk B-tree (schema.py) as is, so COPY fails ("index row size ... exceeds btree
    maximum 2704") in SourceLoader._load_table/_append: every catch-up of the source fails and its
    entries are never searchable (the error even says "unreachable").  Severity: wrong answer
    (source missing from every team search; one appended line blocks the source for good).
    """
    import random
    import string

    rnd = random.Random(1)
    stamp = "2026-01-01T00:00:00" + "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(6000))
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (name,) = team.roots
    (catalog,) = team.catalogs.values()
    try:
        write_raw(catalog.path, entry_line("alpha beta") + b"\n" + entry_line("alpha long", stamp=stamp) + b"\n")
        team.catch_up()
        got = team.reader.search("alpha", limit=10, sources=[name])
        assert [hit.entry for hit in got.hits] == spec_search(entries(catalog.path), "alpha", 10)
    finally:
        team.close()


def test_nul_in_created_at_does_not_break_catch_up(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    """A line whose created_at holds a NUL must be indexed (odd) like any other hostile line.

    Cause: memstore/index/lines.py row_values checks created_at with encodable() (surrogates only),
    not sql_safe() (NUL too) — enough for SQLite, but PostgreSQL text cannot hold NUL: the team
    loader (memstore/index/pg/rows.py doc_of, loader._RowWriter) sends it to COPY, which fails, so
    every catch-up of the source fails.  Severity: wrong answer (the whole source is missing).
    """
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (name,) = team.roots
    (catalog,) = team.catalogs.values()
    try:
        write_raw(catalog.path, entry_line("alpha beta") + b"\n"
                  + entry_line("alpha nul", stamp="2026-01-01T00:00:00\x00+00:00") + b"\n")
        team.catch_up()
        got = team.reader.search("alpha", limit=10, sources=[name])
        assert [hit.entry for hit in got.hits] == spec_search(entries(catalog.path), "alpha", 10)
    finally:
        team.close()


def test_query_with_many_distinct_words_is_answered(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    """A query of 2,001 distinct words must be answered (the scan answers it: no entry matches).

    Cause: TeamIndex._hits calls memstore.index.search.sql_tokens, which raises QueryTooLargeError
    (an IndexBusyError, "answering from a scan") above MAX_SQL_TOKENS; the SQLite index catches it
    and scans, the team index does not, so the search raises instead of answering.
    Severity: crash.
    """
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (name,) = team.roots
    (catalog,) = team.catalogs.values()
    words = [f"w{n}" for n in range(2001)]
    try:
        write_raw(catalog.path, entry_line(" ".join(words)) + b"\n" + entry_line("w1 only") + b"\n")
        team.catch_up()
        query = " ".join(words)
        got = team.reader.search(query, limit=10, sources=[name])
        assert [hit.entry for hit in got.hits] == spec_search(entries(catalog.path), query, 10)
    finally:
        team.close()


def test_missing_memory_file_keeps_cards_too(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    """A source whose files are gone keeps its rows (docs/team-index.md): its failure cards too.

    Cause: TeamIndex._load runs sync_cards (memstore/index/pg/cards.py) even when
    SourceLoader._catch_up returned "missing"; sync_cards reads a missing failures.json as
    b"" and deletes every card of the source, while its memory rows are kept.  A checkout
    briefly without .teaagent/ (or a wrong root) wipes the team's cards of that source.
    Severity: data loss (cards gone from the shared index until the files are back).
    """
    import time

    from memstore.failure_cards import FailureCardStorage

    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (name,) = team.roots
    (root,) = team.roots.values()
    (catalog,) = team.catalogs.values()
    card = {"id": "c1", "run_id": "r", "timestamp": time.time(), "error_type": "ValueError", "file_path": "src/pay.py",
            "error_message": "boom", "task_description": "parse payment retries"}
    try:
        write_raw(catalog.path, entry_line("alpha") + b"\n")
        storage = FailureCardStorage(root, use_index=False)
        storage.path.parent.mkdir(parents=True, exist_ok=True)
        storage.path.write_text(json.dumps([card]))
        team.catch_up()
        before = team.reader.find_matching(["src"], "parse payment retries", "ValueError", 5, sources=[name])
        assert [hit.card.id for hit in before.hits] == ["c1"]
        catalog.path.unlink()
        storage.path.unlink()
        report = team.writer.reindex(team.roots)
        assert [source.action for source in report.sources] == ["missing"]
        assert [hit.entry.content for hit in team.reader.search("alpha", sources=[name]).hits] == ["alpha"]
        after = team.reader.find_matching(["src"], "parse payment retries", "ValueError", 5, sources=[name])
        assert [hit.card.id for hit in after.hits] == ["c1"]
    finally:
        team.close()
