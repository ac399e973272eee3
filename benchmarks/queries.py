"""The fixed query mixes every run measures, so runs stay comparable.

Word frequencies refer to the generated catalogs (memstore/sample/vocab.py pins the rare
words at fixed Zipf ranks): ``the`` is in ~97% of entries, ``memory`` ~3%,
``benchmarkable`` ~0.1%, ``caltrivo`` ~0.01%, ``zyxwq`` nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    category: str
    text: str
    band: str | None = None  # real-text mixes: the frequency band the query was counted in
    matches: int | None = None  # and how many entries it matched when the mix was chosen


SEARCH_MIX: tuple[Query, ...] = (
    Query("common", "the"),
    Query("common", "and"),
    Query("mid", "memory"),
    Query("mid", "benchmarkable"),
    Query("rare", "caltrivo"),
    Query("rare", "quorvenil"),
    Query("absent", "zyxwq"),
    Query("absent", "notaword123"),
    Query("tag-heavy", "python"),
    Query("tag-heavy", "testing"),
    Query("1-char", "x"),
    Query("1-char", "q"),
    Query("2-char", "ai"),
    Query("2-char", "db"),
    Query("2-char", "zq"),
    Query("2-token", "memory python"),
    Query("2-token", "the caltrivo"),
    Query("2-token", "retry timeout"),
    Query("3-token", "the memory caltrivo"),
    Query("3-token", "db ai memory"),
    Query("3-token", "error handler config"),
    Query("code", "typeerror"),
    Query("code", "sqlite3.operationalerror"),
    Query("code", "src/"),
    Query("code", "retry_backoff"),
    Query("non-ascii", "straße"),
    Query("non-ascii", "İstanbul"),
    Query("non-ascii", "ΟΔΟΣ"),
    Query("fts-syntax", "AND"),
    Query("fts-syntax", "the AND of"),
    Query("fts-syntax", '"memory"'),
    Query("fts-syntax", "mem*"),
    Query("fts-syntax", "content:memory"),
    Query("fts-syntax", "col:x"),
    Query("fts-syntax", "NEAR(the"),
    Query("fts-syntax", "-memory OR NOT"),
)

ABSENT_TOKEN = "zyxwq"
"""The no-change probe: a query that matches nothing, so its cost is pure overhead."""

FIRST_QUERY_PROBES: tuple[str, ...] = ("the", "caltrivo", "memory python", "zq")
"""Queries timed as the first search of a fresh process (index built, page cache warm)."""


@dataclass(frozen=True)
class CardQuery:
    label: str
    file_paths: tuple[str, ...]
    task_description: str
    error_type: str | None


def card_mix(popular_file: str, rare_file: str) -> tuple[CardQuery, ...]:
    """find_matching queries; the file arguments come from the generated vocabulary."""
    return (
        CardQuery(
            "path+error+words", (popular_file,), "Fix retry logic when the network times out", "TimeoutError"
        ),
        CardQuery("path only", (rare_file,), "look around", None),
        CardQuery("words only", (), "Speed up cache invalidation for large repositories", None),
        CardQuery("error only", (), "", "KeyError"),
        CardQuery("dir prefix", ("src/",), "Harden lock handling under concurrent writers", None),
        CardQuery("nothing matches", ("nowhere/at/all.py",), "zyxwq qwxyz", "NoSuchError"),
    )
