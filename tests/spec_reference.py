"""The spec's search written out plainly, shared by the tests that compare memstore against it.

It deliberately shares no code with memstore: filter on every token, score (+3 per token in the
lowered content, +2 per token in some tag, +4 auto-curated, +2 run-summary), then order by score,
created_at (as plain strings) and file order, all descending but the last.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstore.models import MemoryEntry


def spec_search(entries: Sequence[MemoryEntry], query: str, limit: int) -> list[MemoryEntry]:
    """``entries`` in file order; the top ``limit`` matches of ``query``."""
    tokens = query.strip().lower().split()
    if not tokens:
        return []
    ranked = []
    for position, entry in enumerate(entries):
        content = entry.content.lower()
        in_content = [token in content for token in tokens]
        in_tags = [any(token in tag for tag in entry.tags) for token in tokens]
        if all(a or b for a, b in zip(in_content, in_tags, strict=True)):
            score = 3 * sum(in_content) + 2 * sum(in_tags)
            score += 4 * ("auto-curated" in entry.tags) + 2 * ("run-summary" in entry.tags)
            ranked.append((score, entry.created_at, position, entry))
    ranked.sort(key=lambda item: item[2])
    ranked.sort(key=lambda item: item[1], reverse=True)
    ranked.sort(key=lambda item: item[0], reverse=True)
    return [item[3] for item in ranked[:limit]]
