"""How a failure card matches a task: shared paths, the error type, and task keywords.

Pure and free of I/O.  The JSON store (``memstore.failure_cards``) scores with
:func:`card_match_score` and orders with :func:`rank_cards`; the card index
(``memstore.index.card_index``) computes the same score in SQL from the points
below and scores its odd rows here, so the two can never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from memstore.checks import require_str, str_items

if TYPE_CHECKING:
    from memstore.cards import FailureCard

PATH_POINTS = 10
ERROR_TYPE_POINTS = 5
KEYWORD_POINTS = 2
MIN_SHARED_KEYWORDS = 2

# DESIGN.md §8, verbatim.
_STOPWORD_TEXT = """
    a an the and or but in on at to for of with by from as is was are were be been being have has had
    do does did will would could should may might must shall can it its this that these those i you he
    she we they what which who whom when where why how all any both each few more most other some such
    no nor not only own same so than too very just also now then here there use using make making get
    getting add adding fix fixing update updating change changing create creating implement implementing
    write writing test testing run running build building check checking ensure ensuring handle handling
    support supporting need needed want wanted try trying able unable new old first last next previous
    before after during while until since through without within about into over under again further once
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_KEYWORD_RE = re.compile(r"\b[a-z0-9]{3,}\b")


def task_keywords(text: str) -> frozenset[str]:
    """Words of 3+ ASCII letters/digits in ``text.lower()``, minus the stopwords."""
    return frozenset(_KEYWORD_RE.findall(require_str("task_description", text).lower())) - STOPWORDS


def check_file_paths(file_paths: object) -> tuple[str, ...]:
    """Validate a query's paths: an iterable of str, never a bare string."""
    return tuple(str_items("file_paths", file_paths))


def card_match_score(
    card: FailureCard,
    *,
    file_paths: Iterable[str],
    keywords: frozenset[str],
    error_type: str | None,
) -> int:
    """How well a card matches a query (activity is the caller's business).

    +10 once if any non-empty query path is a substring of the card's file_path;
    +5 if ``error_type`` is non-empty and equals the card's; +2 per keyword shared
    with the card's task description, but only when at least two are shared.
    """
    score = 0
    if any(path and path in card.file_path for path in file_paths):
        score += PATH_POINTS
    if error_type and error_type == card.error_type:
        score += ERROR_TYPE_POINTS
    shared = len(keywords & task_keywords(card.task_description))
    if shared >= MIN_SHARED_KEYWORDS:
        score += KEYWORD_POINTS * shared
    return score


def rank_cards(scored: Iterable[tuple[int, int, FailureCard]], limit: int) -> list[FailureCard]:
    """Order ``(score, file_order, card)`` triples and take ``limit``.

    Scores of 0 or less are dropped; then score descending, timestamp descending,
    file order ascending.
    """
    kept = [item for item in scored if item[0] > 0]
    kept.sort(key=lambda item: (-item[0], -item[2].timestamp, item[1]))
    return [item[2] for item in kept[:limit]]
