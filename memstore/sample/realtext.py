"""Catalogs of real text: windows over the docstrings and comments of installed Python source.

The generated catalogs (:mod:`memstore.sample.catalog`) draw words from one synthetic Zipf
table; a planner tuned on them may be tuned to that table.  These catalogs hold prose and
code comments nobody on this project wrote (:mod:`memstore.sample.pytext`), with the word
frequencies, punctuation, code fragments and odd characters real text has.

An entry is a window of whole words: it starts at a word drawn uniformly from all the text,
runs to the last word that ends within a target length (triangular 50..600, mode 100) and
never crosses a file.  Windows are drawn in one seeded sequence and a window whose text
repeats an earlier one is drawn again, so every entry's content is distinct (the
stdlib alone gives tens of millions of windows; a million is a small share).  Lines are
byte-for-byte what memstore writes, with the generated catalogs' timestamps (ties,
back-dating), branches, run ids and bonus tags.  The same (size, seed, text fingerprint)
gives the same bytes with any number of workers, and a smaller catalog is a prefix of a
larger one.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import re
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from memstore.sample.catalog import (
    AUTO_CURATED,
    AUTO_CURATED_RATE,
    CHUNK_ADVANCE_US,
    RUN_SUMMARY,
    RUN_SUMMARY_RATE,
    Clock,
    Provenance,
    encode_line,
)
from memstore.sample.pytext import KINDS, TextCorpus

GENERATOR_VERSION = 1
"""Bump when the bytes for the same text change, so stale cached files are never reused."""

CHUNK_ENTRIES = 20_000
MIN_CHARS, MAX_CHARS, MODE_CHARS = 50, 600, 100
MAX_DRAWS_PER_ENTRY = 50
"""A text too small for the size asked gives up instead of drawing forever."""
_WORD = re.compile(r"\S+")  # the same whitespace as str.split(); a test pins it


def _below(rng: random.Random, n: int) -> int:
    return (rng.getrandbits(32) * n) >> 32


@dataclass(frozen=True)
class FileTags:
    module: str
    package: str
    source: str

    def tags(self, kinds: set[str]) -> list[str]:
        tags = {self.module, self.package, *kinds}
        if self.source != "stdlib":
            tags.add(self.source)
        return sorted(tags)


class WordStream:
    """All files' text in one string, with every word's span, so a window is two bisects.

    Units of a file are joined by newlines; files too, but a window never crosses a file.
    """

    def __init__(self, corpus: TextCorpus) -> None:
        parts: list[str] = []
        self.starts = array("q")
        self.ends = array("q")
        self.file_first = array("q")  # first word of each file, plus a sentinel
        self.unit_first = array("q")  # first word of each unit, plus a sentinel
        self.unit_kind = bytearray()
        self.files: list[FileTags] = []
        offset = 0
        for item in corpus.files:
            self.file_first.append(len(self.starts))
            self.files.append(FileTags(item.module, item.module.split(".", 1)[0], item.source))
            for kind, text in item.units:
                self.unit_first.append(len(self.starts))
                self.unit_kind.append(KINDS.index(kind))
                for match in _WORD.finditer(text):
                    self.starts.append(offset + match.start())
                    self.ends.append(offset + match.end())
                parts.append(text)
                offset += len(text) + 1
        self.file_first.append(len(self.starts))
        self.unit_first.append(len(self.starts))
        self.file_end = array("q")  # per word: the end (exclusive) of its file's words
        for begin, end in zip(self.file_first, self.file_first[1:], strict=False):
            self.file_end.extend([end] * (end - begin))
        self.text = "\n".join(parts)
        self.fingerprint = corpus.fingerprint

    @property
    def word_count(self) -> int:
        return len(self.starts)

    def draw(self, rng: random.Random) -> tuple[int, int] | None:
        """A window (first word, last word) from one start and one target length; None if too short."""
        first = _below(rng, len(self.starts))
        start = self.starts[first]
        limit = start + int(rng.triangular(MIN_CHARS, MAX_CHARS, MODE_CHARS))
        last = bisect_right(self.ends, limit, first, self.file_end[first]) - 1
        if last < first or self.ends[last] - start < MIN_CHARS:
            return None
        return first, last

    def content(self, first: int, last: int) -> str:
        return self.text[self.starts[first] : self.ends[last]]

    def tags(self, first: int, last: int) -> list[str]:
        file_tags = self.files[bisect_right(self.file_first, first) - 1]
        low = bisect_right(self.unit_first, first) - 1
        high = bisect_right(self.unit_first, last)
        return file_tags.tags({KINDS[kind] for kind in self.unit_kind[low:high]})


def draw_windows(words: WordStream, count: int, *, seed: int) -> tuple[array[int], array[int]]:
    """``count`` windows with pairwise distinct text, in one seeded sequence (a prefix per size)."""
    rng = random.Random(f"realtext-windows:{seed}")
    firsts, lasts = array("q"), array("q")
    seen: set[bytes] = set()
    draw, text, starts, ends, blake2b = words.draw, words.text, words.starts, words.ends, hashlib.blake2b
    budget = MAX_DRAWS_PER_ENTRY * count + 1_000
    while len(firsts) < count:
        budget -= 1
        if budget < 0:
            raise ValueError(f"the text gives fewer than {count:,} distinct windows (got {len(firsts):,})")
        window = draw(rng)
        if window is None:
            continue
        first, last = window
        key = blake2b(text[starts[first] : ends[last]].encode(), digest_size=8).digest()
        if key not in seen:
            seen.add(key)
            firsts.append(first)
            lasts.append(last)
    return firsts, lasts


class RealTextWriter:
    """Entries for given windows, or for windows it draws itself; ``stream`` names an independent sequence.

    The metadata (ids, timestamps, branches, run ids, bonus tags) follows the generated
    catalogs' rates, so the rewrite benchmark finds its ~1% branch here too.
    """

    def __init__(self, words: WordStream, seed: int, *, stream: str = "0", start_us: int = 0) -> None:
        self.words = words
        self._rng = random.Random(f"realtext:{seed}:{stream}")
        self._clock = Clock(self._rng, start_us)
        self._provenance = Provenance(self._rng, self._clock)

    def entry(self, first: int, last: int, *, extra_word: str | None = None) -> dict[str, object]:
        rng = self._rng
        words = self.words
        content = words.content(first, last)
        if extra_word is not None:  # after a random word of the window
            cut = words.ends[first + _below(rng, last - first + 1)] - words.starts[first]
            content = f"{content[:cut]} {extra_word}{content[cut:]}"
        tags = words.tags(first, last)
        bonus = [
            tag
            for tag, rate in ((AUTO_CURATED, AUTO_CURATED_RATE), (RUN_SUMMARY, RUN_SUMMARY_RATE))
            if rng.random() < rate
        ]
        if bonus:
            tags = sorted({*tags, *bonus})
        return self._provenance.entry(content, tags)

    def entries(self, count: int, *, extra_word: str | None = None) -> list[dict[str, object]]:
        """The next ``count`` entries over freshly drawn windows (not checked for repeats)."""
        out: list[dict[str, object]] = []
        while len(out) < count:
            window = self.words.draw(self._rng)
            if window is not None:
                out.append(self.entry(*window, extra_word=extra_word))
        return out

    def lines(self, count: int, *, extra_word: str | None = None) -> str:
        """The next ``count`` catalog lines, each ``json.dumps(..., sort_keys=True)`` + newline."""
        return "".join(map(encode_line, self.entries(count, extra_word=extra_word)))


def realtext_end_us(size: int) -> int:
    """A clock start for extra lines (appends, adds): after nearly every entry of a catalog of ``size``."""
    return (size + 2 * CHUNK_ENTRIES) * CHUNK_ADVANCE_US


# Set in the parent before the pool forks, so workers share the text instead of pickling it.
_JOB_STATE: tuple[WordStream, array[int], array[int]] | None = None


def chunk_lines(
    words: WordStream, firsts: Sequence[int], lasts: Sequence[int], *, seed: int, index: int, start: int, count: int
) -> str:
    """One chunk of a catalog: depends only on its arguments, so workers can share the job."""
    writer = RealTextWriter(words, seed, stream=str(index), start_us=start * CHUNK_ADVANCE_US)
    return "".join(encode_line(writer.entry(firsts[k], lasts[k])) for k in range(start, start + count))


def _chunk_job(args: tuple[int, int, int, int]) -> bytes:
    assert _JOB_STATE is not None
    seed, index, start, count = args
    words, firsts, lasts = _JOB_STATE
    return chunk_lines(words, firsts, lasts, seed=seed, index=index, start=start, count=count).encode("ascii")


def write_realtext_catalog(
    path: Path,
    count: int,
    *,
    corpus: TextCorpus,
    seed: int,
    workers: int | None = None,
    chunk_entries: int = CHUNK_ENTRIES,
) -> int:
    """Write ``count`` entries of ``corpus``'s text to ``path`` (atomically); return its size in bytes."""
    global _JOB_STATE
    words = WordStream(corpus)
    firsts, lasts = draw_windows(words, count, seed=seed)
    jobs = [
        (seed, index, start, min(chunk_entries, count - start))
        for index, start in enumerate(range(0, count, chunk_entries))
    ]
    methods = multiprocessing.get_all_start_methods()
    workers = (os.cpu_count() or 1) if workers is None else workers
    workers = max(1, min(workers, len(jobs))) if "fork" in methods else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _JOB_STATE = (words, firsts, lasts)
    try:
        with open(tmp, "wb") as handle:
            if workers == 1:
                for job in jobs:
                    handle.write(_chunk_job(job))
            else:
                context = multiprocessing.get_context("fork")
                with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                    for data in pool.map(_chunk_job, jobs):
                        handle.write(data)
        os.replace(tmp, path)
    finally:
        _JOB_STATE = None
        if tmp.exists():
            tmp.unlink()
    return path.stat().st_size
