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

import itertools
import re
from collections.abc import Iterable
from typing import NamedTuple, TypeVar

TERM_CHAR = r"[^\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]"
"""A term character: anything but an ASCII separator, i.e. ``[0-9A-Za-z\u0080-\U0010ffff]``.
Written as the complement because a class spanning all of Unicode takes ~10 ms to compile,
paid by every process at import; this one takes well under one."""
PIECE = re.compile(TERM_CHAR + "+")
"""One term: a maximal run of term characters (FTS5 ``ascii``: alphanumerics and all non-ASCII)."""

LONG_RUN_CHARS = 8000
"""A run of this many characters may exceed FTS5's 32,768-byte token limit (4 bytes a character)."""
_LONG_RUN = re.compile(TERM_CHAR + "{" + str(LONG_RUN_CHARS) + "}")


def pieces(token: str) -> tuple[str, ...]:
    """The distinct terms a token's occurrences must lie inside, in token order."""
    return tuple(dict.fromkeys(PIECE.findall(token)))


def is_whole_piece(token: str) -> bool:
    """True when the token is one run of term characters (its term sets are exact, not a superset)."""
    return PIECE.fullmatch(token) is not None


_SEPARATORS_TO_SPACE = bytes(0x20 if code < 128 and not chr(code).isalnum() else code for code in range(256))


def text_terms(text: str) -> set[str]:
    """The distinct terms a column's text is filed under (what the tokenizer emits).

    The same runs as ``PIECE.findall`` (a test holds it), found on the UTF-8 bytes, where
    one C pass turns every ASCII separator into a space: several times faster.
    """
    runs = set(text.encode("utf-8", "surrogatepass").translate(_SEPARATORS_TO_SPACE).split())
    return {run.decode("utf-8", "surrogatepass") for run in runs}


def has_long_run(texts: Iterable[str]) -> bool:
    """Whether any text holds a run of term characters FTS5 might truncate."""
    return any(len(text) >= LONG_RUN_CHARS and _LONG_RUN.search(text) is not None for text in texts)


MARK_CHARS = frozenset(chr(code) for code in range(1, 128) if not chr(code).isalnum() and not chr(code).isspace())
"""ASCII separators a token can hold (whitespace never is in a token; NUL rows are odd)."""


def mark(char: str) -> str:
    """The term a mark is filed under: ``x`` and its two hex digits (``"`` -> ``x22``)."""
    return f"x{ord(char):02x}"


_MARK_TERM = {char: mark(char) for char in MARK_CHARS}


def mark_chars(code: str) -> str:
    """The marks a mark term stands for (``x2dx3e`` -> ``->``): for reading a plan, not for matching."""
    return "".join(chr(int(code[i + 1 : i + 3], 16)) for i in range(0, len(code), 3))


_MARK_RUN = re.compile("[" + re.escape("".join(sorted(MARK_CHARS))) + "]{2,}")
_BYTE_TERM = {ord(char): term for char, term in _MARK_TERM.items()}


def _pairs(text: str) -> set[str]:
    """Mark terms of each pair of marks side by side (``'(`` in ``'('``)."""
    return {
        _MARK_TERM[a] + _MARK_TERM[b] for run in _MARK_RUN.findall(text) for a, b in itertools.pairwise(run)
    }


def token_marks(token: str) -> tuple[str, ...]:
    """The marks every occurrence of a token brings with it (single marks and adjacent pairs)."""
    return tuple(sorted({_MARK_TERM[char] for char in set(token) & MARK_CHARS} | _pairs(token)))


_MARKS_ONLY = bytes(code if code < 128 and chr(code) in MARK_CHARS else 0x20 for code in range(256))
"""Every byte but a mark made a space: the runs of marks side by side are then its words."""
_PAIR_TERM = {(a, b): term_a + term_b for a, term_a in _BYTE_TERM.items() for b, term_b in _BYTE_TERM.items()}


MARKS_CACHED = 16_384
"""Distinct mark runs whose text :func:`marks_text` remembers (then it starts over): about 13 MB
at worst per process (every key 64 bytes of varied marks, measured), far less for real texts.
The marks of single runs are remembered up to the same bound, in a table of their own."""
MARKS_KEY_BYTES = 64
"""Longer mark runs (code-heavy texts) are worked out each time, not remembered."""
RUN_MARKS_KEPT = 8
"""Runs with more marks than this are worked out each time: a frozenset of a varied 64-byte
run's ~95 marks is ~4 KB, 71 MB for a full table (measured); at most 8 keep it under ~14 MB.
The runs that recur in real texts (``.``, ``,``, ``()``, ``',``) have a handful."""
_Kept = TypeVar("_Kept")
_marks_cache: dict[bytes, str] = {}
_run_marks: dict[bytes, frozenset[str]] = {}


def marks_text(text: str) -> str:
    """A column's marks, as the text of its marks column (space-separated terms).

    They depend only on the text's runs of marks side by side, and most texts share a
    handful of those: the answer for the same runs is remembered (a build files two
    texts per entry; this halves what their marks cost).
    """
    # Making every byte but a mark a space is one C pass: the runs of marks are then its words.
    # A mark is one ASCII byte and any other character at least one byte that is not, so
    # marks side by side in the text are side by side here.
    runs = text.encode("utf-8", "surrogatepass").translate(_MARKS_ONLY).split()
    if not runs:
        return ""
    key = b" ".join(runs)  # runs hold no space: the same key means the same runs
    found = _marks_cache.get(key)
    if found is None:
        found = _marks_of_runs(runs)
        if len(key) <= MARKS_KEY_BYTES:
            _remember(_marks_cache, key, found)
    return found


def _marks_of_runs(runs: list[bytes]) -> str:
    """Each mark once and each pair of marks side by side in a run, sorted and space-separated.

    The union of each run's marks, remembered per run: prose and code comments seldom
    repeat a whole text's runs, but their runs (``.``, ``,``, ``()``, ``',``) recur in
    nearly every text (a fifth less CPU for the marks of a real-text build).
    """
    found: set[str] = set()
    for run in set(runs):
        marks = _run_marks.get(run)
        if marks is None:
            marks = _marks_of_run(run)
            if len(run) <= MARKS_KEY_BYTES and len(marks) <= RUN_MARKS_KEPT:
                _remember(_run_marks, run, marks)
        found |= marks
    return " ".join(sorted(found))


def _remember(memo: dict[bytes, _Kept], key: bytes, value: _Kept) -> None:
    """Keep ``value`` under ``key``, starting the memo over once it holds MARKS_CACHED entries."""
    if len(memo) >= MARKS_CACHED:
        memo.clear()
    memo[key] = value


def _marks_of_run(run: bytes) -> frozenset[str]:
    """The marks of one run: each of its marks, and each pair side by side."""
    marks = set(map(_BYTE_TERM.__getitem__, set(run)))
    if len(run) > 1:
        marks.update(map(_PAIR_TERM.__getitem__, itertools.pairwise(run)))
    return frozenset(marks)


START = "qs"
END = "qe"
"""Suffixes of the gram terms saying a gram starts or ends a term (``zq`` starting one: ``zqqs``).
Plain grams have one or two characters, so these (three or four) never collide with them."""


def gram_text(term: str) -> str:
    """The 1- and 2-character substrings of a term, and those it starts and ends with, space-separated:
    what finds it by a short piece (``z.d`` needs a term ending in ``z`` and one starting with ``d``)."""
    grams = set(term)
    grams.update(term[i : i + 2] for i in range(len(term) - 1))
    grams.update((term[:1] + START, term[:2] + START, term[-1:] + END, term[-2:] + END))
    return " ".join(grams)


INSIDE = "inside"
STARTS = "starts"
ENDS = "ends"
WHOLE = "whole"
"""Where a piece must lie in a term: anywhere, at its start (a separator before the piece in the
token), at its end (a separator after), or the whole term (both)."""


def piece_parts(token: str) -> tuple[tuple[str, str], ...]:
    """Each piece of the token with where it must lie in the term holding it, distinct, in token order.

    A separator next to a piece in the token is next to it in the text too, and a term
    never extends past a separator: so ``z.d`` needs a term ending with ``z`` and one
    starting with ``d``, and ``__new__`` the term ``new`` itself.
    """
    parts: dict[tuple[str, str], None] = {}
    for found in PIECE.finditer(token):
        before, after = found.start() > 0, found.end() < len(token)
        position = WHOLE if before and after else STARTS if before else ENDS if after else INSIDE
        parts[(found.group(), position)] = None
    return tuple(parts)


CONTENT = 0
TAGS = 1
CONTENT_MARKS = 2
TAG_MARKS = 3
KINDS = (CONTENT, TAGS, CONTENT_MARKS, TAG_MARKS)
"""Term kinds: the column a term was seen in (the content, the newline-joined tags, or their marks)."""
MARKS_OF = {CONTENT: CONTENT_MARKS, TAGS: TAG_MARKS}


class TermSet(NamedTuple):
    """The terms of one column containing a piece, and how many rows they cover at most.

    ``terms`` is None when there were more than the lookup's cap: the column is *dense*
    for this piece and its rows are never fetched as a set.
    """

    terms: tuple[str, ...] | None
    rows: int
    """Sum of the terms' row counts: an upper bound on the rows holding the piece (exact for one term).
    Not counted for a dense column (``terms`` None): the planner never uses those rows."""

    @property
    def empty(self) -> bool:
        return self.terms is not None and not self.terms

    @property
    def known(self) -> bool:
        return self.terms is not None
