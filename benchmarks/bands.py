"""Counting a catalog's tokens: sampled document frequencies, then exact match counts and shape.

The real-text query mix (:mod:`benchmarks.realtext_queries`) is chosen in two passes over
the file.  The first estimates the document frequency of every lowered whitespace token
from a systematic sample of lines (enough to put a candidate in a band).  The second counts,
over every line, how many entries each candidate query matches with the search's own rule
(DESIGN.md §4: every token a substring of the lowered content or of a tag), so labels are
exact; it also measures the entries' shape.  A word's frequency is only a lower bound of a
token's matches ("the" also matches "other").

The counting pass does not test every candidate against every entry: a token without
whitespace is in a text exactly when it is inside one of the text's words, so each distinct
word is tested against the candidates once (per worker) and entries only look their words
up.  Files are split into one byte range per worker, counted in a process pool; results do
not depend on the number of workers (the sample is chosen by a checksum of each line, not
by its position).  The files read are ones memstore wrote (content
stripped, tags normalised), as the generators write them.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from pathlib import Path
from typing import Any

from benchmarks.measure import percentile

try:
    import orjson

    _loads: Any = orjson.loads
    _LOAD_ERRORS: tuple[type[Exception], ...] = (ValueError, orjson.JSONDecodeError)
except ImportError:  # orjson is optional: the stdlib parser gives the same payloads, slower
    _loads = json.loads
    _LOAD_ERRORS = (ValueError,)

SAMPLE_LINES = 100_000
"""About how many lines the frequency estimate reads (those whose CRC-32 is 0 modulo k)."""
READ_CHUNK = 1 << 24


def _entries(path: str, start: int, end: int, *, modulus: int = 1) -> Iterator[tuple[str, list[str]]]:
    """(content, tags) of the valid lines starting in [start, end) (with ``modulus`` > 1: those whose
    CRC-32 is a multiple of it, a sample that does not depend on how the file is split)."""
    with open(path, "rb") as handle:
        if start:
            handle.seek(start - 1)
            handle.readline()  # finish the line in progress; a line starting at ``start`` is ours
        position = handle.tell()
        while position < end:
            raw = handle.readline()
            if not raw:
                return
            position += len(raw)
            if modulus > 1 and zlib.crc32(raw) % modulus:
                continue
            try:
                payload = _loads(raw)
            except _LOAD_ERRORS:
                continue
            content = payload.get("content") if isinstance(payload, dict) else None
            tags = payload.get("tags")
            if isinstance(content, str) and content.strip() and isinstance(tags, list):
                yield content.strip(), [tag for tag in tags if isinstance(tag, str)]


def _workers(workers: int | None) -> int:
    return max(1, os.cpu_count() or 1) if workers is None else max(1, workers)


def _ranges(path: Path, pieces: int) -> list[tuple[str, int, int]]:
    size = path.stat().st_size
    bounds = [size * k // pieces for k in range(pieces + 1)]
    return [(str(path), low, high) for low, high in itertools.pairwise(bounds) if high > low]


def _map(job: Any, tasks: Sequence[Any]) -> list[Any]:
    if len(tasks) <= 1:
        return [job(task) for task in tasks]
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=len(tasks), mp_context=context) as pool:
        return list(pool.map(job, tasks))


def line_count(path: Path) -> int:
    count = 0
    with open(path, "rb") as handle:
        while block := handle.read(READ_CHUNK):
            count += block.count(b"\n")
    return count


# ---------------------------------------------------------------- pass 1: sampled frequencies


@dataclass
class Sample:
    """Document frequencies of the content tokens over ``entries`` sampled entries."""

    entries: int = 0
    df: Counter[str] = field(default_factory=Counter)

    def share(self, token: str) -> float:
        return self.df.get(token, 0) / self.entries if self.entries else 0.0


def _sample_job(args: tuple[str, int, int, int]) -> Sample:
    path, start, end, modulus = args
    token_sets = [set(content.lower().split()) for content, _ in _entries(path, start, end, modulus=modulus)]
    return Sample(len(token_sets), Counter(itertools.chain.from_iterable(token_sets)))


def sample_frequencies(path: Path, *, workers: int | None = None, sample_lines: int = SAMPLE_LINES) -> Sample:
    """Document frequencies estimated from about ``sample_lines`` lines (all of a smaller file)."""
    modulus = max(1, line_count(path) // max(1, sample_lines))
    total = Sample()
    for part in _map(_sample_job, [(*task, modulus) for task in _ranges(path, _workers(workers))]):
        total.entries += part.entries
        total.df.update(part.df)
    return total


# ---------------------------------------------------------------- pass 2: exact counts and shape


@dataclass
class Counts:
    """Exact match counts of the queries asked, and the shape of the entries."""

    entries: int
    matches: list[int]
    lengths: array[int]
    words: array[int]
    distinct_words: set[str]
    tags: Counter[str]

    def shape(self) -> dict[str, Any]:
        """Entry length, words per entry and vocabulary, for the dataset's metadata."""

        def spread(values: Sequence[int]) -> dict[str, float]:
            if not values:
                return {}
            return {
                "min": min(values),
                "p50": percentile(values, 0.5),
                "mean": round(sum(values) / len(values), 1),
                "p95": percentile(values, 0.95),
                "max": max(values),
            }

        return {
            "entries": self.entries,
            "content_chars": spread(self.lengths),
            "words_per_entry": spread(self.words),
            "distinct_words": len(self.distinct_words),
            "distinct_tags": len(self.tags),
        }


def _count_job(args: tuple[str, int, int, tuple[str, ...], tuple[tuple[int, ...], ...]]) -> Counts:
    path, start, end, tokens, queries = args
    per_token = [0] * (len(tokens) + 1)  # by bit_length: index i + 1 counts tokens[i]
    multi = [(index, sum(1 << i for i in query)) for index, query in enumerate(queries) if len(query) > 1]
    multi_found = [0] * len(queries)
    words: dict[str, int] = {}  # every distinct content word -> bit i set when tokens[i] is inside it
    tag_bits: dict[str, int] = {}

    bit_of = {token: 1 << i for i, token in enumerate(tokens)}
    sizes = sorted({len(token) for token in tokens})

    def bits_of(text: str) -> int:  # look every substring of a token's length up, once per distinct word
        bits = 0
        for size in sizes:
            for offset in range(len(text) - size + 1):
                bits |= bit_of.get(text[offset : offset + size], 0)
        return bits

    lengths, word_counts, tags_seen = array("l"), array("l"), Counter[str]()
    for content, tags in _entries(path, start, end):
        split = content.lower().split()
        lengths.append(len(content))
        word_counts.append(len(split))
        tags_seen.update(tags)
        looked_up = list(map(words.get, split))
        if None in looked_up:
            for word in split:
                if word not in words:
                    words[word] = bits_of(word)
            looked_up = list(map(words.get, split))
        hits = reduce(or_, looked_up, 0)
        for tag in tags:
            bits = tag_bits.get(tag)
            if bits is None:
                bits = tag_bits[tag] = bits_of(tag)
            hits |= bits
        if not hits:
            continue
        for index, mask in multi:
            if hits & mask == mask:
                multi_found[index] += 1
        while hits:  # one step per token the entry holds
            low = hits & -hits
            per_token[low.bit_length()] += 1
            hits ^= low
    found = [multi_found[i] if len(query) > 1 else per_token[query[0] + 1] for i, query in enumerate(queries)]
    return Counts(len(lengths), found, lengths, word_counts, set(words), tags_seen)


def match_counts(path: Path, queries: Sequence[Sequence[str]], *, workers: int | None = None) -> Counts:
    """How many entries each query (lowered tokens) matches, plus the entries' shape, over every line."""
    tokens = tuple(sorted({token for query in queries for token in query}))
    position = {token: i for i, token in enumerate(tokens)}
    indexed = tuple(tuple(position[token] for token in query) for query in queries)
    parts = _map(_count_job, [(*task, tokens, indexed) for task in _ranges(path, _workers(workers))])
    total = Counts(0, [0] * len(indexed), array("l"), array("l"), set(), Counter())
    for part in parts:
        total.entries += part.entries
        total.matches = [a + b for a, b in zip(total.matches, part.matches, strict=True)]
        total.lengths.extend(part.lengths)
        total.words.extend(part.words)
        total.distinct_words |= part.distinct_words
        total.tags.update(part.tags)
    return total
