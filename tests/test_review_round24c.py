"""Review round 24c: the 0005 migration (doc_fts without column sizes) and the per-run marks memo.

An index is migrated in place while other processes may hold it open (a long-running
server of the previous release): what they read meanwhile must be the old committed
file or the new one, never a word index dropped and not yet refilled.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog
from tests.test_index_internals import _as_0004, index_path
from tests.test_index_terms import _marks_by_regex


def test_a_reader_holding_the_file_never_sees_the_word_index_half_migrated(tmp_path: Path) -> None:
    """Alembic on pysqlite ran ``DROP TABLE doc_fts`` and its ``CREATE`` each in autocommit: while
    'rebuild' refilled it (tens of seconds at 1M entries), another process's open connection to
    the same file found an empty word index and answered 0 hits (an old release's server did)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    catalog = MemoryCatalog(tmp_path)
    for i in range(40):
        catalog.add(f"entry {i} about caching", tags=["ci"])
    assert len(catalog.search("entry", limit=50)) == 40
    _as_0004(index_path(tmp_path))
    reader = sqlite3.connect(index_path(tmp_path), isolation_level=None)
    seen: list[object] = []

    def look(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "'rebuild'" in statement or "DROP TABLE doc_fts" in statement:
            try:
                seen.append(reader.execute("SELECT count(*) FROM doc_fts WHERE doc_fts MATCH 'entry'").fetchone()[0])
            except sqlite3.Error as exc:
                seen.append(str(exc))

    event.listen(Engine, "before_cursor_execute", look)
    try:
        migrated = MemoryCatalog(tmp_path)
        assert len(migrated.search("entry", limit=50)) == 40
    finally:
        event.remove(Engine, "before_cursor_execute", look)
        reader.close()
    assert seen and all(count == 40 for count in seen), seen
    assert sqlite3.connect(index_path(tmp_path)).execute("PRAGMA user_version").fetchone()[0] == 5


def test_the_per_run_marks_memo_stays_within_the_documented_memory() -> None:
    """MARKS_CACHED promises about 13 MB at worst per process (each parse worker holds its own):
    a frozenset per 64-byte run of varied marks (~95 terms) took ~71 MB more for the run table."""
    import random
    import tracemalloc

    from memstore.index import terms

    marks = sorted(terms.MARK_CHARS)
    rnd = random.Random(24)
    varied = ["".join(rnd.choice(marks) for _ in range(terms.MARKS_KEY_BYTES)) for _ in range(terms.MARKS_CACHED)]
    # Four marks in a cycle: 8 terms (each mark, each pair), as many as a kept run may have.
    cycles = ["".join(rnd.sample(marks, 4)) * 16 for _ in range(terms.MARKS_CACHED)]
    pairs = zip(varied, cycles, strict=True)
    texts = [text[: rnd.randint(40, terms.MARKS_KEY_BYTES)] for pair in pairs for text in pair]
    saved_runs, saved_texts = dict(terms._run_marks), dict(terms._marks_cache)
    terms._run_marks.clear()
    tracemalloc.start()
    try:
        for text in texts:
            terms.marks_text(text)
            terms._marks_cache.clear()  # the whole-text memo has its own bound: measure the run table
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        terms._run_marks.clear()
        terms._run_marks.update(saved_runs)
        terms._marks_cache.update(saved_texts)
    assert held < 16_000_000, f"{held / 1e6:.1f} MB"


_RUN_ALPHABET = st.sampled_from([*"!\"#'()*+,-./:;<=>?@[\\]^_`{|}~", "a", " ", "\0", "é", "\ud800", "😀"])


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.lists(_RUN_ALPHABET, max_size=140).map("".join), min_size=1, max_size=12))
def test_marks_of_texts_marked_at_once_from_many_threads_equal_the_regex_definition(texts: list[str]) -> None:
    """The MCP server marks texts from several threads: with both memos evicting all the time
    (three entries), runs at 63/64/65 bytes, NUL, surrogates and non-ASCII, every answer is the
    plain definition's."""
    import threading

    from memstore.index import terms

    texts = [*texts, "." * 63, "," * 64, "-" * 65, "'" + "()" * 32, "ab" + "!?" * 40]
    expected = [_marks_by_regex(text) for text in texts]
    wrong: list[str] = []
    saved = terms.MARKS_CACHED
    terms.MARKS_CACHED = 3
    try:
        def mark_all() -> None:
            for _ in range(20):
                for text, want in zip(texts, expected, strict=True):
                    if terms.marks_text(text) != want:
                        wrong.append(text)

        threads = [threading.Thread(target=mark_all) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        terms.MARKS_CACHED = saved
        terms._marks_cache.clear()
        terms._run_marks.clear()
    assert wrong == []


def test_doctor_does_not_call_an_index_awaiting_its_migration_damaged(tmp_path: Path) -> None:
    """Every index an earlier release built is at 0004 after this upgrade: ``memstore doctor``
    (read-only, so it never migrates) reported ``error: damaged-index ... the index schema is
    old and is not migrated`` and exited 1, for a healthy file the next write migrates."""
    from memstore.doctor import diagnose

    catalog = MemoryCatalog(tmp_path)
    catalog.add("entry about caching", tags=["ci"])
    assert catalog.search("entry")
    _as_0004(index_path(tmp_path))
    report = diagnose(tmp_path)
    assert report.healthy, [finding.to_dict() for finding in report.findings]
    assert [finding.kind for finding in report.findings] == ["stale-index"]
    state = MemoryCatalog(tmp_path, readonly=True).health().index
    assert (state.state, type(state).__name__) == ("old schema", "IndexOff")
    assert len(MemoryCatalog(tmp_path).search("entry")) == 1
