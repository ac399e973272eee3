"""A failure-card store's reads on its own source of the team index.

The cards of a source are the ones ``sync_cards`` made from failures.json; a snapshot
is used only when the SHA-256 it recorded equals that of the local file's bytes, so
the cards are exactly those a scan of the file finds, in file order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memstore.cards import FailureCard
from memstore.index.pg.cards import find_matching, stored_card
from memstore.index.pg.loader import PgConn
from memstore.index.pg.store import SharedSource
from memstore.index.sqltext import sql_safe
from memstore.index_url import IndexUrl


class PgCardIndex:
    """The shared index of one failures.json, with the reads of the local CardIndex."""

    def __init__(self, url: IndexUrl, name: str, path: Path) -> None:
        self.shared = SharedSource(url, name, path)

    def list_active(self, now: float) -> list[FailureCard]:
        def answer(conn: PgConn, sid: int) -> list[FailureCard]:
            rows = conn.execute(
                "SELECT data FROM team_card WHERE sid = %s AND NOT invalidated ORDER BY ord", (sid,)
            ).fetchall()
            cards = [stored_card(str(data)) for (data,) in rows]
            return [card for card in cards if card.is_active(now=now)]

        return self.shared.read_cards(answer)

    def get_by_id(self, card_id: str) -> list[FailureCard]:
        """``[card]`` for the first card in file order with this id, ``[]`` when none."""

        def answer(conn: PgConn, sid: int) -> list[FailureCard]:
            if sql_safe(card_id):
                sql = "SELECT data FROM team_card WHERE sid = %s AND (card_id = %s OR odd) ORDER BY ord"
                rows = conn.execute(sql, (sid, card_id)).fetchall()
            else:  # only an odd card (one SQL cannot compare) can hold such an id
                rows = conn.execute("SELECT data FROM team_card WHERE sid = %s AND odd ORDER BY ord", (sid,)).fetchall()
            for (data,) in rows:
                card = stored_card(str(data))
                if card.id == card_id:
                    return [card]
            return []

        return self.shared.read_cards(answer)

    def find_matching(
        self, paths: Sequence[str], keywords: frozenset[str], error_type: str | None, limit: int, now: float
    ) -> list[FailureCard]:
        def answer(conn: PgConn, sid: int) -> list[FailureCard]:
            return [card for _sid, card in find_matching(conn, [sid], paths, keywords, error_type, limit, now)]

        return self.shared.read_cards(answer)
