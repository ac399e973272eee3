"""Catalog lines as ``team_doc`` rows: the SQLite index's parse, with terms as vocabulary ids.

Each parsed line (:func:`memstore.index.lines.row_values`) keeps its columns; what
PostgreSQL cannot hold exactly becomes an *odd* row, decided here before the row
reaches ``COPY`` (one bad row would abort the whole ``COPY``).  Beyond the SQLite
index's odd rows (NUL, lone surrogates, newlines in tags), a row holding a term too
long for a GIN or B-tree key is odd too.  An odd row keeps only its raw line and is
scored in Python.

A row's ``cterms`` hold the ids of its content terms and content marks, ``tterms``
those of its tag terms and tag marks: ids are unique across kinds, so one array per
column serves both.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memstore.index.lines import Row
from memstore.index.pg.copy_binary import int4_array
from memstore.index.terms import CONTENT, CONTENT_MARKS, PIECE, TAG_MARKS, TAGS

LONG_TERM_CHARS = 400
"""Terms of this many characters or more make a row odd: at 4 bytes a character they stay well
below PostgreSQL's index key limit (about 2,700 bytes) in the vocabulary's B-tree and trigram index."""
_findall = PIECE.findall


@dataclass(slots=True)
class Doc:
    """One line of a source as the team index holds it (``terms`` empty for an odd row)."""

    off: int
    length: int
    c: str
    t: str
    created_at: str | None
    bonus: int
    odd: bool
    terms: tuple[set[str], set[str], list[str], list[str]]
    """Content terms, tag terms, content marks, tag marks."""


_NO_TERMS: tuple[set[str], set[str], list[str], list[str]] = (set(), set(), [], [])


def doc_of(row: Row) -> Doc:
    """A parsed row (offset, length, doc columns) as a team row."""
    off, length, _mid, c, t, created_at, bonus, _br, _run, mc, mt, odd = row
    if odd or not _indexable_stamp(created_at):
        return Doc(off, length, "", "", None, 0, True, _NO_TERMS)
    content, tags = set(_findall(c)), set(_findall(t))
    # Terms are maximal runs of term characters: a long run is a long term (and a short text has none).
    if (len(c) >= LONG_TERM_CHARS and _longest(content) >= LONG_TERM_CHARS) or (
        len(t) >= LONG_TERM_CHARS and _longest(tags) >= LONG_TERM_CHARS
    ):
        return Doc(off, length, "", "", None, 0, True, _NO_TERMS)
    return Doc(off, length, c, t, created_at, bonus, False, (content, tags, mc.split(), mt.split()))


def _longest(terms: set[str]) -> int:
    return max(map(len, terms)) if terms else 0


MAX_STAMP_BYTES = 512
"""A ``created_at`` longer than this stays out of the walk's B-tree (its rows ceiling is ~2.7 kB)."""


def _indexable_stamp(created_at: str | None) -> bool:
    """PostgreSQL text holds no NUL, and a B-tree entry is bounded: other stamps make the row odd."""
    return created_at is not None and "\x00" not in created_at and len(created_at.encode("utf-8")) <= MAX_STAMP_BYTES


KIND_OF_COLUMN = (CONTENT, TAGS, CONTENT_MARKS, TAG_MARKS)
"""The vocabulary kind of each slot of :attr:`Doc.terms`."""


def wanted_terms(docs: Iterable[Doc]) -> dict[int, set[str]]:
    """Every distinct term of these rows, per kind."""
    wanted: dict[int, set[str]] = {kind: set() for kind in KIND_OF_COLUMN}
    content, tags, content_marks, tag_marks = (wanted[kind].update for kind in KIND_OF_COLUMN)
    for doc in docs:
        doc_content, doc_tags, doc_content_marks, doc_tag_marks = doc.terms
        content(doc_content)
        tags(doc_tags)
        content_marks(doc_content_marks)
        tag_marks(doc_tag_marks)
    return wanted


IdLookups = tuple[Callable[[str], bytes], Callable[[str], bytes], Callable[[str], bytes], Callable[[str], bytes]]
"""The vocabulary's id of a term, per slot of :attr:`Doc.terms` (bound ``dict.__getitem__``)."""


def id_lookups(ids: dict[int, dict[str, bytes]]) -> IdLookups:
    """Bound once per load: the dicts grow as terms are added, the lookups stay valid."""
    content, tags, content_marks, tag_marks = (ids[kind].__getitem__ for kind in KIND_OF_COLUMN)
    return content, tags, content_marks, tag_marks


def id_arrays(doc: Doc, lookups: IdLookups, held: list[list[bytes]]) -> tuple[bytes, bytes]:
    """The row's ``cterms`` and ``tterms`` binary fields.

    Both arrays' elements go to ``held``, for the caller to count per batch (:func:`count_held`):
    one pass in C instead of two ``Counter.update`` calls a row.
    """
    content, tags, content_marks, tag_marks = doc.terms
    content_id, tag_id, content_mark_id, tag_mark_id = lookups
    c_ids = [*map(content_id, content), *map(content_mark_id, content_marks)]
    t_ids = [*map(tag_id, tags), *map(tag_mark_id, tag_marks)]
    held.append(c_ids)
    held.append(t_ids)
    return int4_array(c_ids), int4_array(t_ids)


def count_held(counts: Counter[bytes], held: list[list[bytes]]) -> None:
    """Add the rows' ids to ``counts`` (each row holds a term once: rows holding it) and forget them."""
    counts.update(itertools.chain.from_iterable(held))
    held.clear()
