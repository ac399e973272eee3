"""What the index is measured against, all written independently of memstore's own readers.

* ``naive_search``: the spec's algorithm as the reference implementation runs it —
  re-read the file and parse every line with the stdlib ``json`` on every query.
  It is also the oracle of the exactness check.
* ``MemoryScan``: the same scoring over entries already parsed and held in memory
  (the best a pure-Python scan can do without an index).
* ``grep_count``: ``grep -F -c`` over the file in a subprocess, the floor any
  scan-based answer must beat (it only counts lines holding one token).
* ``CardScan``: find_matching's ranking over cards already loaded, using the
  scoring functions of ``memstore.card_match``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstore.models import (
    MemoryEntry,
    memory_entry_from_payload,
    memory_matches,
    memory_relevance_score,
    query_tokens,
    rank_matches,
)


def parse_line(raw: bytes) -> MemoryEntry | None:
    """One catalog line the plain way (stdlib json); None for blank, corrupt or invalid lines."""
    if not raw.strip():
        return None
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return memory_entry_from_payload(payload)


def naive_search(path: Path, query: str, *, limit: int = 10) -> list[MemoryEntry]:
    """The spec's search: every call re-reads and json-parses the whole file."""
    tokens = query_tokens(query)
    if not tokens or limit == 0:
        return []
    scored: list[tuple[int, str, int, MemoryEntry]] = []
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; binary splits on b"\n" only
    except FileNotFoundError:
        return []
    with handle:
        for order, raw in enumerate(handle):
            entry = parse_line(raw)
            if entry is not None and memory_matches(entry, tokens):
                scored.append((memory_relevance_score(entry, tokens), entry.created_at, order, entry))
    return rank_matches(scored, limit)


def load_entries(path: Path) -> list[MemoryEntry]:
    """Every valid entry of a catalog file, parsed once (stdlib json), in file order."""
    entries: list[MemoryEntry] = []
    with open(path, "rb") as handle:
        for raw in handle:
            entry = parse_line(raw)
            if entry is not None:
                entries.append(entry)
    return entries


class MemoryScan:
    """The spec's scoring over parsed entries: no I/O, no parsing, just the scan."""

    def __init__(self, entries: Sequence[MemoryEntry]) -> None:
        self.entries = entries
        self.last_match_count = 0

    def search(self, query: str, *, limit: int = 10) -> list[MemoryEntry]:
        tokens = query_tokens(query)
        if not tokens or limit == 0:
            return []
        scored: list[tuple[int, str, int, MemoryEntry]] = []
        for order, entry in enumerate(self.entries):
            content = entry.content.lower()
            tags = entry.tags
            score = 0
            for token in tokens:
                in_content = token in content
                in_tags = any(token in tag for tag in tags)
                if not (in_content or in_tags):
                    break
                score += 3 * in_content + 2 * in_tags
            else:
                if "auto-curated" in tags:
                    score += 4
                if "run-summary" in tags:
                    score += 2
                scored.append((score, entry.created_at, order, entry))
        self.last_match_count = len(scored)
        return rank_matches(scored, limit)


def grep_available() -> bool:
    return shutil.which("grep") is not None


def grep_token(query: str) -> str | None:
    """The token grep looks for: the query's longest (most selective) token."""
    tokens = query_tokens(query)
    return max(tokens, key=len) if tokens else None


def grep_count(path: Path, query: str) -> int:
    """``grep -F -c -i`` for the query's longest token, byte-wise (LC_ALL=C)."""
    token = grep_token(query)
    if token is None:
        return 0
    env = {**os.environ, "LC_ALL": "C"}
    proc = subprocess.run(
        ["grep", "-F", "-c", "-i", "-e", token, str(path)],
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {proc.stderr.decode(errors='replace').strip()}")
    return int(proc.stdout.strip() or 0)


class CardScan:
    """find_matching's ranking over cards already parsed, via memstore.card_match's own scoring."""

    def __init__(self, failures_json: Path) -> None:
        from memstore.cards import FailureCard

        records: list[Any] = json.loads(failures_json.read_text(encoding="utf-8"))
        cards = (FailureCard.from_dict(record) for record in records)
        self.cards = [(order, card) for order, card in enumerate(cards) if card is not None]

    def find_matching(
        self, file_paths: Sequence[str], task_description: str, error_type: str | None = None, limit: int = 3
    ) -> list[Any]:
        import time

        from memstore.card_match import card_match_score, check_file_paths, rank_cards, task_keywords

        paths = check_file_paths(list(file_paths))
        keywords = task_keywords(task_description)
        now = time.time()
        scored = (
            (card_match_score(card, file_paths=paths, keywords=keywords, error_type=error_type), order, card)
            for order, card in self.cards
            if card.is_active(now=now)
        )
        return rank_cards(scored, limit)
