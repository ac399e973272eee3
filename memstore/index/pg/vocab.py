"""The shared vocabulary: every term of every source once, findable by any piece of it.

A term's id never changes once given (terms are never deleted: a term no row holds
any more only widens candidates, and its per-source count says 0), so a loader may
keep the ids it has seen.  New terms are inserted in their own short autocommit
statement, sorted, before the catch-up transaction that uses them: two sources
adding the same new term never wait on each other's transaction nor deadlock
(docs/postgres-notes.md §8).
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from memstore.index.pg.copy_binary import id_element
from memstore.index.terms import CONTENT, CONTENT_MARKS, TAG_MARKS, TAGS, gram_text

KINDS = (CONTENT, TAGS, CONTENT_MARKS, TAG_MARKS)
LOOKED_UP = (CONTENT, TAGS)
"""Kinds found by a piece of a query token; marks are looked up whole and need no grams."""
CHUNK = 20_000


class Vocabulary:
    """Ids of terms, as elements of a binary int4 array (:mod:`.copy_binary`), cached for one load."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self.conn = conn
        """An autocommit connection of its own (the loader's is inside its transaction)."""
        self.ids: dict[int, dict[str, bytes]] = {kind: {} for kind in KINDS}

    def ensure(self, wanted: dict[int, set[str]]) -> None:
        """Give every wanted term an id (inserting the new ones) and remember them all."""
        missing = sorted(
            (kind, term) for kind, terms in wanted.items() for term in terms if term not in self.ids[kind]
        )
        for start in range(0, len(missing), CHUNK):
            self._ensure_chunk(missing[start : start + CHUNK])

    def _ensure_chunk(self, items: list[tuple[int, str]]) -> None:
        # Most terms of a source exist already (other sources, an earlier load): look them up
        # first, and insert (computing their grams) only the rest.
        self._look_up(items)
        missing = [(kind, term) for kind, term in items if term not in self.ids[kind]]
        if not missing:
            return
        # Each entry starts with "." so none is empty (one empty string would be an empty array).
        grams = ["." + gram_text(term) if kind in LOOKED_UP else "." for kind, term in missing]
        kinds, texts = _arrays(missing)
        self.conn.execute(
            "INSERT INTO team_term (kind, text, grams)"
            " SELECT k, t, CASE WHEN g = '.' THEN '{}'::text[] ELSE string_to_array(substr(g, 2), ' ') END"
            " FROM unnest(%s::smallint[], string_to_array(%s, E'\\n'), string_to_array(%s, E'\\n')) AS u(k, t, g)"
            " ORDER BY k, t ON CONFLICT (kind, text) DO NOTHING",
            (kinds, texts, "\n".join(grams)),
        )
        self._look_up(missing)

    def _look_up(self, items: list[tuple[int, str]]) -> None:
        kinds, texts = _arrays(items)
        rows = self.conn.execute(
            "SELECT v.kind, v.text, v.id FROM team_term v"
            " JOIN unnest(%s::smallint[], string_to_array(%s, E'\\n')) AS u(k, t) ON v.kind = u.k AND v.text = u.t",
            (kinds, texts),
        ).fetchall()
        for kind, text, tid in rows:
            self.ids[int(str(kind))][str(text)] = id_element(int(str(tid)))

    def known(self, kind: int, terms: Iterable[str]) -> bool:
        return all(term in self.ids[kind] for term in terms)


def _arrays(items: list[tuple[int, str]]) -> tuple[str, str]:
    """Kinds as an array literal, terms joined by newlines (no term holds one: terms are runs of
    letters, digits and non-ASCII characters).  Three times cheaper than psycopg's list dumper."""
    return "{" + ",".join(str(kind) for kind, _term in items) + "}", "\n".join(term for _kind, term in items)
