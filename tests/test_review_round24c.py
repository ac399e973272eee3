"""Review round 24c: the 0005 migration (doc_fts without column sizes) and the per-run marks memo.

An index is migrated in place while other processes may hold it open (a long-running
server of the previous release): what they read meanwhile must be the old committed
file or the new one, never a word index dropped and not yet refilled.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memstore.catalog import MemoryCatalog
from tests.test_index_internals import _as_0004, index_path


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
