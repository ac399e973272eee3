"""Failure cards of every team source in ``team_card``: replaced whole when failures.json changes.

failures.json is one JSON array rewritten whole, so a source's cards are compared by
the SHA-256 of the file's bytes and, when it differs, deleted and inserted again in
one transaction.  ``find_matching`` scores in SQL with the points of
:mod:`memstore.card_match`; cards whose strings PostgreSQL cannot compare exactly
(lone surrogates, NUL) are *odd* and scored in Python, so the two never disagree.
Order: score desc, timestamp desc, then source order and file order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from memstore.card_match import (
    ERROR_TYPE_POINTS,
    KEYWORD_POINTS,
    MIN_SHARED_KEYWORDS,
    PATH_POINTS,
    card_match_score,
    task_keywords,
)
from memstore.cards import FailureCard
from memstore.files import MAX_JSON_FILE_BYTES, read_regular_file
from memstore.index.sqltext import sql_safe

PgConn = psycopg.Connection[Any]
LoadRecords = Callable[[bytes], list[dict[str, Any]]]


def card_bytes(path: Path) -> bytes:
    """The bytes of failures.json as the cards are made from them: ``b""`` when missing or unreadable."""
    try:
        return read_regular_file(path, max_bytes=MAX_JSON_FILE_BYTES) if path.exists() else b""
    except (OSError, ValueError):
        return b""


def cards_digest(data: bytes) -> bytes:
    """What ``team_source.cards_hash`` records for these bytes."""
    return hashlib.sha256(data).digest()


def sync_cards(conn: PgConn, sid: int, path: Path, load_records: LoadRecords, *, full: bool = False) -> int | None:
    """Bring the source's cards level with ``path``; the card count when they changed, else None.

    ``full`` reloads them even when the recorded digest matches (a row found edited since).
    """
    data = card_bytes(path)
    digest = cards_digest(data)
    held = conn.execute("SELECT cards_hash FROM team_source WHERE sid = %s", (sid,)).fetchone()
    if not full and held is not None and held[0] is not None and bytes(held[0]) == digest:
        return None
    rows: list[tuple[Any, ...]] = []
    for order, record in enumerate(load_records(data) if data else []):
        card = FailureCard.from_dict(record)
        if card is None:
            continue
        odd = not all(sql_safe(value) for value in (card.id, card.file_path, card.error_type))
        keywords = [] if odd else sorted(task_keywords(card.task_description))
        rows.append(
            (
                sid,
                order,
                None if odd else card.id,
                None if odd else card.file_path,
                None if odd else card.error_type,
                card.timestamp,
                card.expires_at,
                card.invalidated,
                odd,
                keywords,
                json.dumps(record),
            )
        )
    with conn.transaction():
        conn.execute("DELETE FROM team_card WHERE sid = %s", (sid,))
        with conn.cursor().copy(
            "COPY team_card (sid, ord, card_id, file_path, error_type, timestamp, expires_at, invalidated, odd,"
            " keywords, data) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute("UPDATE team_source SET cards_hash = %s, cards = %s WHERE sid = %s", (digest, len(rows), sid))
    return len(rows)


def stored_card(data: str) -> FailureCard:
    card = FailureCard.from_dict(json.loads(data))
    if card is None:  # pragma: no cover - rows are only written for valid cards
        raise ValueError("an indexed card no longer decodes")
    return card


def find_matching(
    conn: PgConn,
    sids: Sequence[int],
    paths: Sequence[str],
    keywords: frozenset[str],
    error_type: str | None,
    limit: int,
    now: float,
) -> list[tuple[int, FailureCard]]:
    """(sid, card) of the best active cards of these sources, exactly as a scan ranks them."""
    params: dict[str, Any] = {"sids": list(sids), "now": now, "k": limit, "kw": sorted(keywords)}
    usable = [path for path in paths if path and sql_safe(path)]
    params.update({f"p{i}": path for i, path in enumerate(usable)})
    path_sql = " OR ".join(f"strpos(c.file_path, %(p{i})s) > 0" for i in range(len(usable))) or "false"
    error_sql = "false"
    if error_type and sql_safe(error_type):
        params["e"] = error_type
        error_sql = "c.error_type = %(e)s"
    shared = "cardinality(ARRAY(SELECT unnest(c.keywords) INTERSECT SELECT unnest(%(kw)s::text[])))"
    sql = (
        "SELECT sid, ord, timestamp, data, score FROM ("
        " SELECT c.sid, c.ord, c.timestamp, c.data,"
        f" (CASE WHEN {path_sql} THEN {PATH_POINTS} ELSE 0 END)"
        f" + (CASE WHEN {error_sql} THEN {ERROR_TYPE_POINTS} ELSE 0 END)"
        f" + (CASE WHEN {shared} >= {MIN_SHARED_KEYWORDS} THEN {KEYWORD_POINTS} * {shared} ELSE 0 END) AS score"
        " FROM team_card c WHERE c.sid = ANY(%(sids)s) AND NOT c.odd AND NOT c.invalidated"
        " AND (c.expires_at IS NULL OR c.expires_at > %(now)s)"
        ") x WHERE score > 0 ORDER BY score DESC, timestamp DESC, sid, ord LIMIT %(k)s"
    )
    ranked = [
        (-int(score), -float(timestamp), int(sid), int(order), stored_card(str(data)))
        for sid, order, timestamp, data, score in conn.execute(sql, params).fetchall()
    ]
    odd = conn.execute(
        "SELECT sid, ord, data FROM team_card WHERE sid = ANY(%(sids)s) AND odd", {"sids": list(sids)}
    ).fetchall()
    for sid, order, data in odd:
        card = stored_card(str(data))
        if card.is_active(now=now):
            score = card_match_score(card, file_paths=paths, keywords=keywords, error_type=error_type)
            if score > 0:
                ranked.append((-score, -card.timestamp, int(sid), int(order), card))
    ranked.sort(key=lambda item: item[:4])
    return [(item[2], item[4]) for item in ranked[:limit]]
