"""The index of failures.json: card rows and task keywords for exact ``find_matching`` in SQL.

failures.json is one JSON array rewritten whole, so any change to it replaces this
source's rows; memstore's own rewrites hand over the records they just wrote
(write-through), so the file is never parsed twice.  How bytes become records is
the storage's business: it passes its own loader in, which keeps one definition.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memstore.append_chain import AppendChain
from memstore.card_match import (
    ERROR_TYPE_POINTS,
    KEYWORD_POINTS,
    MIN_SHARED_KEYWORDS,
    PATH_POINTS,
    card_match_score,
    task_keywords,
)
from memstore.cards import FailureCard
from memstore.files import MAX_JSON_FILE_BYTES, read_fd
from memstore.index.base import IndexedSource, StaleRowError
from memstore.index.db import IndexFile, Populate
from memstore.index.source import Change, PrefixDigest, SourceState, record_state
from memstore.index.sqltext import encodable
from memstore.lines_seen import LinesSeen

SOURCE_NAME = "failures"
LoadRecords = Callable[[bytes], list[dict[str, Any]]]

VERIFY_BYTES = 1 << 20
"""Up to this size failures.json is re-read to check every card an answer returns."""

ACTIVE_SQL = "invalidated = 0 AND (expires_at IS NULL OR expires_at > :now)"


class CardIndex(IndexedSource):
    """Failure cards of one workspace, mirrored into the workspace's index database."""

    SOURCE_NAME = SOURCE_NAME

    def __init__(self, source_path: Path, store_dir: Path, *, load_records: LoadRecords) -> None:
        super().__init__(source_path, IndexFile(store_dir))
        self._load_records = load_records

    def _populate_hook(self) -> Populate | None:
        return None

    def _apply_change(
        self,
        conn: sqlite3.Connection,
        fd: int,
        st: os.stat_result,
        change: Change,
        state: SourceState | None,
        prefix: PrefixDigest | None,
        *,
        chain: AppendChain | None = None,
    ) -> int:
        # A JSON array is rewritten whole: whatever changed, the rows are rebuilt.  A file
        # over the cap holds no cards, as for the storage's own read.
        data = read_fd(fd, st.st_size) if st.st_size <= MAX_JSON_FILE_BYTES else b""
        # The digest kept must be of the bytes the cards came from (a file over the cap holds none whatever its bytes).
        seen = (LinesSeen.of_bytes(0, data),) if data else ()
        return self._replace_rows(conn, fd, st, self._load_records(data), seen=seen)

    def _replace_rows(
        self,
        conn: sqlite3.Connection,
        fd: int,
        st: os.stat_result,
        records: Sequence[dict[str, Any]],
        *,
        seen: Sequence[LinesSeen] = (),
    ) -> int:
        conn.execute("DELETE FROM card")
        conn.execute("DELETE FROM card_kw")
        rows: list[tuple[Any, ...]] = []
        keywords: list[tuple[str, int]] = []
        for order, record in enumerate(records):
            card = FailureCard.from_dict(record)
            if card is None:
                continue
            row_id = order + 1
            # Strings SQLite cannot bind (lone surrogates) keep the card out of SQL matching.
            odd = not (encodable(card.id) and encodable(card.file_path) and encodable(card.error_type))
            rows.append(
                (
                    row_id,
                    None if odd else card.id,
                    None if odd else card.file_path,
                    None if odd else card.error_type,
                    card.timestamp,
                    card.expires_at,
                    int(card.invalidated),
                    int(odd),
                    json.dumps(record),
                )
            )
            if not odd:
                keywords.extend((word, row_id) for word in task_keywords(card.task_description))
        conn.executemany(
            "INSERT INTO card(id, card_id, file_path, error_type, timestamp, expires_at, invalidated, odd, data)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            rows,
        )
        conn.executemany("INSERT OR IGNORE INTO card_kw(word, card) VALUES (?, ?)", keywords)
        state = SourceState.of_file(
            SOURCE_NAME, fd, st, indexed_to=st.st_size, tail_end=None, rows=len(rows), corrupt=0, blank=0, seen=seen
        )
        record_state(conn, SOURCE_NAME, state)
        return len(rows)

    # ------------------------------------------------------------------ write-through

    def replace_records(self, records: Sequence[dict[str, Any]], after: os.stat_result) -> bool:
        """Follow the storage's own rewrite with the records it just wrote (caller holds its lock)."""

        def change(conn: sqlite3.Connection, fd: int) -> bool:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size) != (after.st_dev, after.st_ino, after.st_size):
                return False
            self._replace_rows(conn, fd, st, records)
            return True

        return self._write(change)

    # ------------------------------------------------------------------ answers

    @staticmethod
    def _card(data: str) -> FailureCard:
        card = FailureCard.from_dict(json.loads(data))
        if card is None:  # pragma: no cover - rows are only written for valid cards
            raise ValueError("indexed card no longer decodes")
        return card

    def _checked(self, fd: int, found: Sequence[tuple[int, FailureCard]]) -> list[FailureCard]:
        """The cards as failures.json holds them at their positions (re-read when the file is small).

        The index is input: a row it holds is only a claim.  Up to VERIFY_BYTES the file is
        parsed again and every returned card must equal the record at its position, else the
        rows are rebuilt; a bigger file relies on the checks made when the index was opened.
        """
        size = os.fstat(fd).st_size
        if not found or size > VERIFY_BYTES:
            return [card for _row_id, card in found]
        records = self._load_records(read_fd(fd, size))
        checked = []
        for row_id, card in found:
            held = FailureCard.from_dict(records[row_id - 1]) if 0 < row_id <= len(records) else None
            if held is None or held != card:
                raise StaleRowError(f"card row {row_id} is not what failures.json holds")
            checked.append(held)
        return checked

    def _odd_cards(self, conn: sqlite3.Connection) -> list[tuple[int, FailureCard]]:
        rows = conn.execute("SELECT id, data FROM card WHERE odd = 1 ORDER BY id").fetchall()
        return [(row_id, self._card(data)) for row_id, data in rows]

    def find_matching(
        self, paths: Sequence[str], keywords: frozenset[str], error_type: str | None, limit: int, now: float
    ) -> list[FailureCard]:
        """Active cards by score desc, timestamp desc, file order; exactly as the scan ranks them."""

        def answer(conn: sqlite3.Connection, fd: int, _state: SourceState) -> list[FailureCard]:
            params: dict[str, Any] = {"now": now, "k": limit, "kw": json.dumps(sorted(keywords))}
            usable = [path for path in paths if path and encodable(path)]
            params.update({f"p{i}": path for i, path in enumerate(usable)})
            path_sql = " OR ".join(f"instr(file_path, :p{i}) > 0" for i in range(len(usable))) or "0"
            error_sql = "0"
            if error_type and encodable(error_type):
                params["e"] = error_type
                error_sql = "error_type = :e"
            sql = (
                "SELECT id, timestamp, data, score FROM ("
                f" SELECT card.id AS id, timestamp, data,"
                f" (CASE WHEN {path_sql} THEN {PATH_POINTS} ELSE 0 END)"
                f" + (CASE WHEN {error_sql} THEN {ERROR_TYPE_POINTS} ELSE 0 END)"
                f" + (CASE WHEN coalesce(k.n, 0) >= {MIN_SHARED_KEYWORDS} THEN {KEYWORD_POINTS} * k.n ELSE 0 END)"
                " AS score"
                " FROM card LEFT JOIN (SELECT card, count(*) AS n FROM card_kw"
                "  WHERE word IN (SELECT value FROM json_each(:kw)) GROUP BY card) k ON k.card = card.id"
                f" WHERE odd = 0 AND {ACTIVE_SQL}"
                ") WHERE score > 0 ORDER BY score DESC, timestamp DESC, id LIMIT :k"
            )
            ranked = [
                (-score, -timestamp, row_id, self._card(data))
                for row_id, timestamp, data, score in conn.execute(sql, params)
            ]
            for row_id, card in self._odd_cards(conn):
                if card.is_active(now=now):
                    score = card_match_score(card, file_paths=paths, keywords=keywords, error_type=error_type)
                    if score > 0:
                        ranked.append((-score, -card.timestamp, row_id, card))
            ranked.sort(key=lambda item: (item[0], item[1], item[2]))
            return self._checked(fd, [(item[2], item[3]) for item in ranked[:limit]])

        return self._read(answer, [])

    def list_active(self, now: float) -> list[FailureCard]:
        def answer(conn: sqlite3.Connection, fd: int, _state: SourceState) -> list[FailureCard]:
            rows = conn.execute(f"SELECT id, data FROM card WHERE {ACTIVE_SQL} ORDER BY id", {"now": now})
            return self._checked(fd, [(row_id, self._card(data)) for row_id, data in rows])

        return self._read(answer, [])

    def get_by_id(self, card_id: str) -> list[FailureCard]:
        """``[card]`` for the first card in file order with this id, ``[]`` when none."""

        def answer(conn: sqlite3.Connection, fd: int, _state: SourceState) -> list[FailureCard]:
            found: list[tuple[int, FailureCard]] = []
            if encodable(card_id):
                row = conn.execute(
                    "SELECT id, data FROM card WHERE card_id = ? ORDER BY id LIMIT 1", (card_id,)
                ).fetchone()
                if row is not None:
                    found.append((row[0], self._card(row[1])))
            found.extend(item for item in self._odd_cards(conn) if item[1].id == card_id)
            return self._checked(fd, [min(found, key=lambda item: item[0])]) if found else []

        return self._read(answer, [])
