"""FTS5 expressions for the SQLite word index: how a :class:`~memstore.index.search.Match` is written.

Terms are always quoted, so no token is ever read as FTS5 syntax (``AND``, ``NEAR``,
``col:``, ``*`` are matched as text); the column names are the word index's own.
"""

from __future__ import annotations

from memstore.index.search import AllOf, AnyOf, Has, Match
from memstore.index.terms import CONTENT, CONTENT_MARKS, TAG_MARKS, TAGS, pieces, token_marks

COLUMN = {CONTENT: "c", TAGS: "t", CONTENT_MARKS: "mc", TAG_MARKS: "mt"}


def quoted(term: str) -> str:
    """A literal FTS5 string: a term is never read as an operator or column name."""
    return '"' + term.replace('"', '""') + '"'


def fts_expression(match: Match) -> str:
    """The FTS5 MATCH expression selecting the rows of ``match``."""
    if isinstance(match, Has):
        terms = " OR ".join(quoted(term) for term in match.terms)
        return f"{COLUMN[match.kind]} : ({terms})"
    joiner = " AND " if isinstance(match, AllOf) else " OR "
    assert isinstance(match, (AllOf, AnyOf))
    return "(" + joiner.join(fts_expression(part) for part in match.parts) + ")"


def tag_expression(tag: str) -> str | None:
    """Rows that may carry the tag ``tag`` (a superset: its pieces and marks in the tags column)."""
    parts: list[Match] = [Has(TAGS, (piece,)) for piece in pieces(tag)]
    parts += [Has(TAG_MARKS, (code,)) for code in token_marks(tag)]
    if not parts:
        return None
    return fts_expression(parts[0] if len(parts) == 1 else AllOf(tuple(parts)))
