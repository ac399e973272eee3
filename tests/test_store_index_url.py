"""``index_url=`` on the stores: their own source of the team index, answering exactly what a scan does.

The reference is a store opened with ``use_index=False`` (the scan) over the same
files.  Reads through the shared index must equal it through memstore's writes and
the external edits other tools make; when the shared index cannot prove the source
current (a reader role, a stopped server) the store answers from its local files,
still equal, with one warning line.
"""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
from pathlib import Path

import pg_server
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_card_index_differential import ERRORS, TASKS, cards
from test_index_differential import IDS, QUERY_WORDS, TAGS, apply, lines, operations, write_raw

from memstore.catalog import MemoryCatalog
from memstore.errors import ArgumentTypeError, IndexUrlError, InvalidArgumentError
from memstore.failure_cards import FailureCardStorage

_names = itertools.count(1)
HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
FILTERS = [{}, {"tags": ["abc"]}, {"branch_name": "b1"}, {"tags": ["run-summary"], "branch_name": "b2"},
           {"run_id": "r1"}, {"branch_name": "\ud800"}, {"tags": [TAGS[0], TAGS[1]]}]
QUERIES = st.lists(st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=3).map(" ".join), min_size=1,
                   max_size=3)


def source() -> str:
    return f"store{next(_names)}/memory.jsonl"


def shared_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def assert_same(shared: MemoryCatalog, scan: MemoryCatalog, queries: list[str]) -> None:
    for query in queries:
        for limit in (1, 3, 50):
            for wanted in FILTERS:
                assert shared.search(query, limit=limit, **wanted) == scan.search(query, limit=limit, **wanted), (
                    query, limit, wanted)
    for limit in (1, 2, 100):
        for wanted in FILTERS:
            assert shared.list(limit=limit, **wanted) == scan.list(limit=limit, **wanted), (limit, wanted)
    for memory_id in IDS:
        expected = scan.show(memory_id) if any(e.memory_id == memory_id for e in scan.list(limit=10**6)) else None
        if expected is None:
            with pytest.raises(FileNotFoundError):
                shared.show(memory_id)
        else:
            assert shared.show(memory_id) == expected


# ----------------------------------------------------------------------------- the catalog


@pytest.mark.pg
@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(initial=lines, ops=operations, queries=QUERIES)
def test_shared_catalog_equals_scan_through_edits(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str,
                                                  initial: list[bytes], ops: list[tuple], queries: list[str]) -> None:
    root = tmp_path_factory.mktemp("shared")
    shared = MemoryCatalog(root, index_url=pg_writer_url, source_name=source())
    scan = MemoryCatalog(root, use_index=False)
    write_raw(shared.path, b"\n".join(initial) + b"\n")
    with pytest.MonkeyPatch.context() as patch:
        # Any fallback would hide a wrong answer of the shared index: here there must be none.
        patch.setattr(shared._index, "ask", lambda query: pytest.fail("answered from the local index"))
        assert_same(shared, scan, queries)
        for op in ops:
            apply(shared, op)  # memstore's writes through the shared handle, and other tools' edits
            assert_same(shared, scan, queries)
    assert not shared.index_path.exists(), "the local index is a fallback only"


@pytest.mark.pg
def test_an_add_on_the_handle_is_seen_by_the_next_read(tmp_path: Path, pg_writer_url: str) -> None:
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=source())
    assert catalog.search("alpha") == [] and catalog.list() == []
    first = catalog.add("alpha beta", tags=["x"], branch_name="b1")
    assert catalog.search("alpha") == [first] and catalog.show(first.memory_id) == first
    second = catalog.add("alpha gamma")
    assert catalog.search("alpha") == [second, first] or catalog.search("alpha") == [first, second]
    assert catalog.list(limit=1) == [second] and catalog.list(tags=["x"]) == [first]
    assert catalog.delete_by_branch("b1") == 1
    assert catalog.search("alpha") == [second]
    plan = catalog.explain("alpha")
    assert plan.path == "index" and plan.index_state == "fresh" and plan.memory_ids == (second.memory_id,)


@pytest.mark.pg
def test_a_forged_row_is_reloaded_never_returned(
    tmp_path: Path, pg_writer_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = source()
    catalog = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False)
    for n in range(3):
        catalog.add(f"alpha {n}")
    assert catalog.search("alpha") == scan.search("alpha")
    with pg_server.connect(pg_writer_url) as conn:  # every row of the source now names the first line
        sid = conn.execute("SELECT sid FROM team_source WHERE name = %s", (name,)).fetchone()[0]
        first = conn.execute("SELECT off, len FROM team_doc WHERE sid = %s ORDER BY id LIMIT 1", (sid,)).fetchone()
        conn.execute("UPDATE team_doc SET off = %s, len = %s WHERE sid = %s", (*first, sid))
    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as patch:
        patch.setattr(catalog._index, "ask", lambda query: pytest.fail("answered from the local index"))
        assert catalog.search("alpha") == scan.search("alpha")  # the source was reloaded from its file
        assert catalog.list() == scan.list()
    assert shared_warnings(caplog) == []


@pytest.mark.pg
def test_reader_role_answers_when_proven_current_and_falls_back_exactly_otherwise(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = source()
    writer = MemoryCatalog(tmp_path, index_url=pg_writer_url, source_name=name)
    writer.add("shared words", tags=["t"])
    assert len(writer.search("words")) == 1  # caught up by the writer
    reader = MemoryCatalog(tmp_path, readonly=True, index_url=pg_reader_url, source_name=name)
    scan = MemoryCatalog(tmp_path, use_index=False)
    with caplog.at_level(logging.WARNING):
        assert reader.search("words") == scan.search("words")
        assert shared_warnings(caplog) == []  # proven current: the shared index answered
        MemoryCatalog(tmp_path, use_index=False).add("more words")  # the reader cannot catch this up
        assert reader.search("words") == scan.search("words") and len(scan.search("words")) == 2
        assert reader.list(tags=["t"]) == scan.list(tags=["t"])
    warnings = shared_warnings(caplog)
    assert len(warnings) == 1 and "\n" not in warnings[0] and "the local files" in warnings[0]
    assert "Traceback" not in caplog.text


@pytest.mark.pg
def test_a_reader_on_an_unknown_source_falls_back(
    tmp_path: Path, pg_reader_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    MemoryCatalog(tmp_path).add("lonely entry")
    reader = MemoryCatalog(tmp_path, readonly=True, index_url=pg_reader_url, source_name=source())
    with caplog.at_level(logging.WARNING):
        assert [entry.content for entry in reader.search("lonely")] == ["lonely entry"]
    assert len(shared_warnings(caplog)) == 1


@pytest.mark.pg
def test_a_stopped_server_falls_back_exactly_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pg_server.running_cluster() as cluster:
        urls = pg_server.create_database(cluster, "memstore_store_down")
        catalog = MemoryCatalog(tmp_path, index_url=urls.writer, source_name="down/memory.jsonl")
        cards = FailureCardStorage(tmp_path, index_url=urls.writer, source_name="down/memory.jsonl")
        entry = catalog.add("before the outage", tags=["x"])
        assert catalog.search("outage") == [entry] and cards.list_active() == []
        cluster.stop()
        with caplog.at_level(logging.WARNING):
            later = catalog.add("during the outage")
            assert catalog.search("outage") == [later, entry] or catalog.search("outage") == [entry, later]
            assert catalog.search("outage") == MemoryCatalog(tmp_path, use_index=False).search("outage")
            assert catalog.list(tags=["x"]) == [entry] and catalog.show(later.memory_id) == later
            assert cards.find_matching(["a.py"], "fix the database migration") == []
    warnings = shared_warnings(caplog)
    assert len(warnings) == 2 and all("\n" not in w and "the local files" in w for w in warnings), warnings
    assert "Traceback" not in caplog.text


# ----------------------------------------------------------------------------- failure cards


def same_cards(shared: FailureCardStorage, scan: FailureCardStorage, paths: list[str], task: str,
               error: str | None) -> None:
    for limit in (1, 3, 20):
        assert shared.find_matching(paths, task, error, limit) == scan.find_matching(paths, task, error, limit)
    assert shared.list_active() == scan.list_active()
    for card_id in ("c1", "c2", "\ud800c", "missing"):
        assert shared.get_by_id(card_id) == scan.get_by_id(card_id)


@pytest.mark.pg
@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(
    records=st.lists(st.one_of(cards(), st.just({"not": "a card"})), max_size=8),
    more=st.lists(cards(), max_size=4),
    paths=st.lists(st.sampled_from(["src", "app.py", "models", "\x00", "\ud800", "", "tests/"]), max_size=3),
    task=st.sampled_from(TASKS),
    error=st.sampled_from([None, *ERRORS]),
)
def test_shared_cards_equal_scan(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str, records: list[dict],
                                 more: list[dict], paths: list[str], task: str, error: str | None) -> None:
    from memstore.cards import FailureCard

    root = tmp_path_factory.mktemp("cards")
    shared = FailureCardStorage(root, index_url=pg_writer_url, source_name=source())
    scan = FailureCardStorage(root, use_index=False)
    shared.path.write_text(json.dumps(records, indent=2))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared._index, "ask", lambda query: pytest.fail("answered from the local index"))
        same_cards(shared, scan, paths, task, error)
        for record in more:
            card = FailureCard.from_dict(record)
            if card is not None:
                shared.append(card)
        shared.invalidate("c1", reason="test")
        same_cards(shared, scan, paths, task, error)
        shared.path.write_text(json.dumps(more))  # another tool rewrites the file
        same_cards(shared, scan, paths, task, error)


# ----------------------------------------------------------------------------- arguments, imports


def test_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ArgumentTypeError, match="index_url must be a str or None"):
        MemoryCatalog(tmp_path, index_url=5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="source_name must be a str or None"):
        FailureCardStorage(tmp_path, index_url="postgresql://u@h/db", source_name=3)  # type: ignore[arg-type]
    for url in ("sqlite:///x.db", "mysql://u@h/db", "postgresql+asyncpg://u@h/db", "not a url"):
        with pytest.raises(IndexUrlError):
            MemoryCatalog(tmp_path, index_url=url)
        with pytest.raises(IndexUrlError):
            FailureCardStorage(tmp_path, index_url=url)
    with pytest.raises(IndexUrlError) as info:
        MemoryCatalog(tmp_path, index_url="mysql://me:hunter2@h/db")
    assert "hunter2" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="use_index"):
        MemoryCatalog(tmp_path, use_index=False, index_url="postgresql://u@h/db")
    with pytest.raises(InvalidArgumentError):
        MemoryCatalog(tmp_path, index_url="postgresql://u@h/db", source_name="  ")
    assert MemoryCatalog(tmp_path, index_url="")._shared is None  # as --index-url "": the local index


def test_an_unreachable_server_never_breaks_a_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from test_team_index_failures import dead_url

    MemoryCatalog(tmp_path).add("still answered")
    catalog = MemoryCatalog(tmp_path, readonly=True, index_url=dead_url())
    with caplog.at_level(logging.WARNING):
        assert [entry.content for entry in catalog.search("answered")] == ["still answered"]
        assert [entry.content for entry in catalog.search("answered")] == ["still answered"]  # backing off
    assert len(shared_warnings(caplog)) == 1


def test_a_missing_driver_is_a_fallback_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    MemoryCatalog(tmp_path).add("no driver here")
    monkeypatch.setitem(sys.modules, "memstore.index.pg.store_reads", None)  # import raises ImportError
    catalog = MemoryCatalog(tmp_path, index_url="postgresql://u@localhost/db", source_name="x/memory.jsonl")
    with caplog.at_level(logging.WARNING):
        assert [entry.content for entry in catalog.search("driver")] == ["no driver here"]
    warnings = shared_warnings(caplog)
    assert len(warnings) == 1 and "memstore[pg]" in warnings[0]


def test_a_read_creates_nothing(tmp_path: Path) -> None:
    from test_team_index_failures import dead_url

    root = tmp_path / "empty"
    root.mkdir()
    catalog = MemoryCatalog(root, readonly=True, index_url=dead_url(), source_name="x/memory.jsonl")
    assert catalog.search("anything") == [] and catalog.list() == []
    assert list(root.iterdir()) == []
    storage = FailureCardStorage(root, index_url=dead_url())  # its constructor makes its folder, as ever
    made = sorted(root.rglob("*"))
    assert storage.list_active() == [] and storage.get_by_id("c1") is None
    assert sorted(root.rglob("*")) == made


PROBE = """
import json, sys
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
MemoryCatalog(sys.argv[1], index_url="postgresql://reader@localhost/memstore")
FailureCardStorage(sys.argv[1], index_url="postgresql://reader@localhost/memstore")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "psycopg"})))
"""


def test_the_driver_loads_only_on_the_first_read(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, check=True,
                         timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
