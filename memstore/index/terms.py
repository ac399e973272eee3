"""Terms: how indexed text is cut into words, and how a query token maps onto them.

The word index (FTS5's ``ascii`` tokenizer on SQLite, a generated ``text[]`` column on
PostgreSQL) files every row under its *terms*: the maximal runs of term characters —
ASCII letters and digits, and every character outside ASCII — of its Python-lowered
content and tags.  Every other ASCII character (spaces, punctuation, controls)
separates terms.  Lowered text holds no ASCII capitals, so the tokenizer's ASCII case
folding changes nothing: a term is exactly a substring of the text.

Why this answers the spec's substring search exactly:

* A token made only of term characters (one *piece*) lies, wherever it occurs,
  inside one maximal run: it occurs in a column exactly when some term of that column
  contains it.  The rows holding it are the union of the rows of those terms.
* A token with separators in it occurs only where each of its pieces lies inside some
  term; the rows of those terms are a superset, and every candidate is checked with the
  backend's exact substring test before it is scored.
* Separators are not lost: each column also files the row under its *marks*, the
  distinct ASCII separators other than whitespace it holds (``"``, ``/``, ``-`` …).  A
  token occurs in a column only where each of its marks occurs too, so ``"memory"``,
  ``->`` or ``mem*`` narrow to the rows holding those characters (a superset, checked).

A term longer than FTS5 keeps (it truncates tokens at 32,768 bytes) would lose its
tail, so rows holding a run that long are kept out of SQL like the other odd rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

PIECE = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]+")
"""One term: a maximal run of term characters (FTS5 ``ascii``: alphanumerics and all non-ASCII)."""

LONG_RUN_CHARS = 8000
"""A run of this many characters may exceed FTS5's 32,768-byte token limit (4 bytes a character)."""
_LONG_RUN = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]{" + str(LONG_RUN_CHARS) + "}")


def pieces(token: str) -> tuple[str, ...]:
    """The distinct terms a token's occurrences must lie inside, in token order."""
    return tuple(dict.fromkeys(PIECE.findall(token)))


def is_whole_piece(token: str) -> bool:
    """True when the token is one run of term characters (its term sets are exact, not a superset)."""
    return PIECE.fullmatch(token) is not None


def text_terms(text: str) -> set[str]:
    """The distinct terms a column's text is filed under (what the tokenizer emits)."""
    return set(PIECE.findall(text))


def has_long_run(texts: Iterable[str]) -> bool:
    """Whether any text holds a run of term characters FTS5 might truncate."""
    return any(len(text) >= LONG_RUN_CHARS and _LONG_RUN.search(text) is not None for text in texts)


MARK_CHARS = frozenset(chr(code) for code in range(1, 128) if not chr(code).isalnum() and not chr(code).isspace())
"""ASCII separators a token can hold (whitespace never is in a token; NUL rows are odd)."""


def mark(char: str) -> str:
    """The term a mark is filed under: ``x`` and its two hex digits (``"`` -> ``x22``)."""
    return f"x{ord(char):02x}"


_MARK_TERM = {char: mark(char) for char in MARK_CHARS}
_DROP_ALL_BUT_MARKS = {code: None for code in range(128) if chr(code) not in MARK_CHARS}
"""str.translate table keeping marks (and non-ASCII): much faster than a set of every character."""


def token_marks(token: str) -> tuple[str, ...]:
    """The marks every occurrence of a token brings with it."""
    return tuple(sorted(map(_MARK_TERM.__getitem__, set(token) & MARK_CHARS)))


def marks_text(text: str) -> str:
    """A column's marks, as the text of its marks column (space-separated terms)."""
    kept = set(text.translate(_DROP_ALL_BUT_MARKS))
    if not text.isascii():
        kept &= MARK_CHARS
    return " ".join(sorted(map(_MARK_TERM.__getitem__, kept)))


def gram_text(term: str) -> str:
    """The 1- and 2-character substrings of a term, space-separated: what finds it by a short piece."""
    grams = set(term)
    grams.update(term[i : i + 2] for i in range(len(term) - 1))
    return " ".join(grams)


CONTENT = 0
TAGS = 1
CONTENT_MARKS = 2
TAG_MARKS = 3
KINDS = (CONTENT, TAGS, CONTENT_MARKS, TAG_MARKS)
"""Term kinds: the column a term was seen in (the content, the newline-joined tags, or their marks)."""
MARKS_OF = {CONTENT: CONTENT_MARKS, TAGS: TAG_MARKS}


@dataclass(frozen=True, slots=True)
class TermSet:
    """The terms of one column containing a piece, and how many rows they cover at most.

    ``terms`` is None when there were more than the lookup's cap: the column is *dense*
    for this piece and its rows are never fetched as a set.
    """

    terms: tuple[str, ...] | None
    rows: int
    """Sum of the terms' row counts: an upper bound on the rows holding the piece (exact for one term)."""

    @property
    def empty(self) -> bool:
        return self.terms is not None and not self.terms

    @property
    def known(self) -> bool:
        return self.terms is not None
