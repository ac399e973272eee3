"""Differential tests of the team index: its answer equals a scan of the union of the sources' files.

The union is in the documented order — sources in registration order, each in line
order — and each file is taken as it was at its last catch-up.  The inputs are the
SQLite differential suite's (Unicode lower-casing, 1–2-character tokens, NUL and
lone surrogates, FTS and LIKE syntax, duplicate ids, corrupt lines) and its edits
(appends, rewrites, truncation, in-place edits, torn tails, replaced files), applied
to one source at a time, with every planner path forced in turn.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_reference import spec_search
from test_card_index_differential import ERRORS, TASKS, cards
from test_index_differential import FORCED, QUERY_WORDS, apply, lines, operations, reference, write_raw

from memstore.card_match import card_match_score, task_keywords
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.models import MemoryEntry
from memstore.team_index import TeamIndex

pytestmark = pytest.mark.pg

_names = itertools.count(1)
QUERIES = st.lists(st.lists(st.sampled_from([*QUERY_WORDS, "%", "_", "\\", "'", "a%b", "x_y", "\\x"]), min_size=1,
                            max_size=3).map(" ".join), min_size=1, max_size=4)


def labelled(union: list[tuple[str, MemoryEntry]], query: str, limit: int) -> list[tuple[str, MemoryEntry]]:
    """The spec's ranking over the union, with each entry's source (file order breaks the last ties)."""
    tokens = query.strip().lower().split()
    if not tokens:
        return []
    ranked = []
    for position, (name, entry) in enumerate(union):
        content = entry.content.lower()
        in_content = [token in content for token in tokens]
        in_tags = [any(token in tag for tag in entry.tags) for token in tokens]
        if all(a or b for a, b in zip(in_content, in_tags, strict=True)):
            score = 3 * sum(in_content) + 2 * sum(in_tags)
            score += 4 * ("auto-curated" in entry.tags) + 2 * ("run-summary" in entry.tags)
            ranked.append((-score, position, entry.created_at, name, entry))
    ranked.sort(key=lambda item: item[1])
    ranked.sort(key=lambda item: item[2], reverse=True)
    ranked.sort(key=lambda item: item[0])
    return [(item[3], item[4]) for item in ranked[:limit]]


class Team:
    """Sources under fresh names, a writer that catches them up and a reader that searches."""

    def __init__(self, base: Path, writer: str, reader: str, count: int) -> None:
        self.roots = {f"s{next(_names)}/memory.jsonl": base / f"r{i}" for i in range(count)}
        self.catalogs = {name: MemoryCatalog(root, use_index=False) for name, root in self.roots.items()}
        self.writer = TeamIndex(writer)
        self.reader = TeamIndex(reader)
        self.writer_url = writer
        self.seen: dict[str, list[MemoryEntry]] = {name: [] for name in self.roots}
        """Each source's entries as of its last catch-up (a vanished file keeps its rows)."""

    def catch_up(self) -> None:
        report = self.writer.reindex(self.roots)
        for source in report.sources:
            if source.action != "missing":
                self.seen[source.name] = [entry for _order, entry in reference(self.catalogs[source.name].path)]

    def check(self, queries: list[str]) -> None:
        union = [(name, entry) for name in self.roots for entry in self.seen[name]]
        for query in queries:
            for limit in (1, 3, 50):
                got = self.reader.search(query, limit=limit, sources=list(self.roots))
                expected = labelled(union, query, limit)
                assert [(hit.source, hit.entry) for hit in got.hits] == expected, (query, limit)
                assert [entry for _name, entry in expected] == spec_search([e for _n, e in union], query, limit)
        last = next(reversed(self.roots))
        alone = self.reader.search(queries[0], limit=50, sources=[last])
        assert [hit.entry for hit in alone.hits] == spec_search(self.seen[last], queries[0], 50)
        self.check_counts()

    def check_counts(self) -> None:
        """team_count (the planner's per-source term counts) equals the count of each term over the rows
        the source's current partition holds: a wrong count would change plans, never answers.

        Only this team's sources: the session's database also holds other tests' sources, some of
        them forged on purpose."""
        import psycopg

        names = list(self.roots)
        with psycopg.connect(self.writer_url, autocommit=True) as conn:
            held = conn.execute(
                "SELECT s.sid, u.tid, count(*) FROM team_source s JOIN team_doc d ON d.part = s.part,"
                " unnest(d.cterms || d.tterms) AS u(tid) WHERE s.name = ANY(%s) GROUP BY s.sid, u.tid",
                (names,),
            ).fetchall()
            counted = conn.execute(
                "SELECT n.sid, n.tid, n.n FROM team_count n JOIN team_source s ON s.sid = n.sid"
                " WHERE n.n <> 0 AND s.name = ANY(%s)",
                (names,),
            ).fetchall()
        assert sorted(counted) == sorted(held)

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


def run(tmp: Path, writer: str, reader: str, initial: list[list[bytes]], ops: list[tuple[int, tuple]],
        queries: list[str]) -> None:
    team = Team(tmp, writer, reader, len(initial))
    try:
        for catalog, body in zip(team.catalogs.values(), initial, strict=True):
            write_raw(catalog.path, b"\n".join(body) + b"\n")
        team.catch_up()
        team.check(queries)
        for which, op in ops:
            name = list(team.catalogs)[which % len(team.catalogs)]
            apply(team.catalogs[name], op)
            team.catch_up()
            team.check(queries)
        freshness = {source.name: source for source in team.reader.search("a", sources=list(team.roots)).sources}
        assert [name for name in freshness] == list(team.roots)
        assert all(freshness[name].entries == len(team.seen[name]) for name in team.roots)
    finally:
        team.close()


initial_sources = st.lists(lines, min_size=1, max_size=3)
source_ops = st.lists(st.tuples(st.integers(min_value=0, max_value=2), operations.map(lambda ops: ops[0])),
                      min_size=1, max_size=6)
HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@given(initial=initial_sources, ops=source_ops, queries=QUERIES)
def test_team_index_equals_scan_of_union(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str,
                                         pg_reader_url: str, initial: list[list[bytes]], ops: list[tuple[int, tuple]],
                                         queries: list[str]) -> None:
    run(tmp_path_factory.mktemp("team"), pg_writer_url, pg_reader_url, initial, ops, queries)


LOADS = {"new partitions": {"IN_PLACE_ROWS": 0}, "in place": {"IN_PLACE_ROWS": 10**9}}


@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("plan", FORCED)
@settings(max_examples=6, deadline=None, suppress_health_check=HEALTH)
@given(initial=initial_sources, ops=source_ops, queries=QUERIES)
def test_team_index_equals_scan_on_every_path(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str,
                                              pg_reader_url: str, plan: str, load: str, initial: list[list[bytes]],
                                              ops: list[tuple[int, tuple]], queries: list[str]) -> None:
    from memstore.index import search
    from memstore.index.pg import loader

    with pytest.MonkeyPatch.context() as patch:
        for name, value in FORCED[plan].items():
            patch.setattr(search, name, value)
        for name, value in LOADS[load].items():
            patch.setattr(loader, name, value)
        run(tmp_path_factory.mktemp("team"), pg_writer_url, pg_reader_url, initial, ops, queries)


# ---------------------------------------------------------------------------- examples


def entry_line(content: str, *, tags: tuple[str, ...] = (), stamp: str = "2026-01-01T00:00:00+00:00",
               memory_id: str = "m") -> bytes:
    payload = {"memory_id": memory_id, "content": content, "tags": list(tags), "created_at": stamp}
    return json.dumps(payload).encode()


EXAMPLE_SOURCES = [
    [entry_line("İstanbul ẞtraße", tags=("Tag",)), entry_line("ǅemal σοφία ς"), entry_line("a%b x_y \\x 'q' \"d\"")],
    [entry_line("NUL \x00 here"), entry_line("lone \ud800 surrogate", tags=("\ud800",)),
     entry_line("AND OR NEAR( col:x -x ^x a* \"ab\"", tags=("auto-curated",))],
    [entry_line("ab abc bc c", stamp="2026-01-02T00:00:00+00:00"), entry_line("ab", tags=("run-summary",)),
     entry_line("ab"), entry_line("ab")],
]
EXAMPLE_QUERIES = ["i̇", "İ", "ß", "ẞ", "σ", "ς", "ǆ", "a", "ab", "c", "%", "_", "\\", "'", '"', "a%b", "x_y", "\\x",
                   "\x00", "\ud800", "AND", "OR", "NEAR(", "col:x", "-x", "^x", "a*", '"ab"', "ab c", "q", "zzz"]


def test_team_index_examples(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    """Named cases: Unicode lower-casing, short tokens, NUL, lone surrogates, LIKE and FTS syntax, ties."""
    run(tmp_path, pg_writer_url, pg_reader_url, EXAMPLE_SOURCES, [], EXAMPLE_QUERIES)


def test_ties_break_by_source_order_then_line_order(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 3)
    try:
        for index, catalog in enumerate(team.catalogs.values()):
            write_raw(catalog.path, b"\n".join(entry_line("same words", memory_id=f"s{index}l{n}")
                                               for n in range(3)) + b"\n")
        team.catch_up()
        got = team.reader.search("same", limit=9, sources=list(team.roots))
        assert [hit.entry.memory_id for hit in got.hits] == [f"s{i}l{n}" for i in range(3) for n in range(3)]
        assert [hit.source for hit in got.hits] == [name for name in team.roots for _n in range(3)]
        # Choosing sources keeps the order among those chosen.
        chosen = list(team.roots)[::-2]
        got = team.reader.search("same", limit=9, sources=chosen)
        assert [hit.source for hit in got.hits] == [name for name in team.roots if name in chosen for _n in range(3)]
    finally:
        team.close()


# ---------------------------------------------------------------------------- catch-up


def test_catch_up_follows_every_kind_of_change(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 2)
    queries = ["ab", "c", "x", "zz", "İ"]
    first, second = team.catalogs.values()
    try:
        write_raw(first.path, b"\n".join(entry_line(f"ab line {n}", memory_id=f"a{n}") for n in range(5)) + b"\n")
        write_raw(second.path, entry_line("c in the other source") + b"\n")
        team.catch_up()
        team.check(queries)
        steps: list[tuple[str, Callable[[], None]]] = [
            ("append", lambda: apply(first, ("append", [entry_line("x appended")], True))),
            ("torn tail", lambda: apply(first, ("torn", b'{"memory_id": "t", "content": "zz torn'))),
            ("tail completed", lambda: apply(first, ("torn", b'", "tags": [], "created_at": "2026"}\n'))),
            ("add", lambda: first.add("ab added through memstore", tags=["İ"])),
            ("rewrite", lambda: apply(first, ("delete_branch", "b1"))),
            ("truncate", lambda: apply(first, ("truncate", 150))),
            ("in-place edit", lambda: apply(first, ("edit", 20))),
            ("replaced file", lambda: apply(first, ("replace", [entry_line("zz new file"), entry_line("ab c")]))),
            ("deleted file", lambda: apply(first, ("delete_file",))),
            ("file back", lambda: write_raw(first.path, entry_line("x is back") + b"\n")),
        ]
        for _label, step in steps:
            step()
            team.catch_up()
            team.check(queries)
        report = team.writer.reindex(team.roots)
        assert {source.action for source in report.sources} == {"none"}
    finally:
        team.close()


def test_full_reload_and_freshness(tmp_path: Path, pg_writer_url: str, pg_reader_url: str) -> None:
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    (catalog,) = team.catalogs.values()
    try:
        body = entry_line("ab") + b"\n"
        write_raw(catalog.path, body)
        report = team.writer.reindex(team.roots)
        assert [source.action for source in report.sources] == ["built"]
        assert report.schema in ("created", "migrated", "current")
        report = team.writer.reindex(team.roots, full=True)
        assert [source.action for source in report.sources] == ["rebuilt"]
        (fresh,) = team.reader.sources()[-1:]
        assert fresh.entries == 1 and fresh.bytes_indexed == len(body) and fresh.caught_up_at is not None
        assert fresh.caught_up_at.endswith("Z")
    finally:
        team.close()


# ---------------------------------------------------------------------------- failure cards


def scan_union(roots: dict[str, Path], paths: list[str], task: str, error: str | None,
               limit: int) -> list[tuple[str, object]]:
    """Each source's own scan, merged: score, newest, then source order and each source's order."""
    keywords = task_keywords(task)
    merged = []
    for position, (name, root) in enumerate(roots.items()):
        ranked = FailureCardStorage(root, use_index=False).find_matching(paths, task, error, 10**6)
        for order, card in enumerate(ranked):
            score = card_match_score(card, file_paths=paths, keywords=keywords, error_type=error)
            merged.append((-score, -card.timestamp, position, order, name, card))
    merged.sort(key=lambda item: item[:4])
    return [(item[4], item[5]) for item in merged[:limit]]


@settings(max_examples=30, deadline=None, suppress_health_check=HEALTH)
@given(
    per_source=st.lists(st.lists(st.one_of(cards(), st.just({"not": "a card"})), max_size=6), min_size=1,
                        max_size=3),
    paths=st.lists(st.sampled_from(["src", "app.py", "models", "\x00", "\ud800", "", "tests/"]), max_size=3),
    task=st.sampled_from(TASKS),
    error=st.sampled_from([None, *ERRORS]),
)
def test_team_cards_equal_per_source_scans(tmp_path_factory: pytest.TempPathFactory, pg_writer_url: str,
                                           pg_reader_url: str, per_source: list[list[dict]], paths: list[str],
                                           task: str, error: str | None) -> None:
    team = Team(tmp_path_factory.mktemp("cards"), pg_writer_url, pg_reader_url, len(per_source))
    try:
        roots = list(team.roots.values())
        for root, records in zip(roots, per_source, strict=True):
            storage = FailureCardStorage(root, use_index=False)
            storage.path.parent.mkdir(parents=True, exist_ok=True)
            storage.path.write_text(json.dumps(records))
        team.writer.reindex(team.roots)
        for limit in (1, 3, 20):
            got = team.reader.find_matching(paths, task, error, limit, sources=list(team.roots))
            assert [(hit.source, hit.card) for hit in got.hits] == scan_union(team.roots, paths, task, error,
                                                                                limit), limit
        # A rewrite of one source's cards is followed.
        FailureCardStorage(roots[0], use_index=False).path.write_text(json.dumps(per_source[0][::-1][:2]))
        team.writer.reindex(team.roots)
        got = team.reader.find_matching(paths, task, error, 20, sources=list(team.roots))
        assert [(hit.source, hit.card) for hit in got.hits] == scan_union(team.roots, paths, task, error, 20)
    finally:
        team.close()
