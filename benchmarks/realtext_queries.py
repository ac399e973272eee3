"""The real-text query mix: tokens drawn from the catalog's own text by frequency band.

A fixed generated mix names words the generator planted; real text has no planted words,
so the mix is chosen from each dataset, deterministically from its seed: 40 slots (single
words per band, absent words, 1- and 2-character tokens, code-like, non-ASCII and
punctuation-only tokens, 2- and 3-token mixes).  A slot lists the bands it wants, in order
of preference; its candidates are drawn from the tokens whose document frequency falls in
those bands, every candidate's match count is then counted exactly (substring of the
lowered content or of a tag, as the search matches), and the slot takes the first
candidate whose counted band it prefers most.  Every query is labelled with the band it
*has* (a slot whose bands are empty at a small size takes the nearest one) and its count.

Bands are shares of the entries a query matches: very-common >= 10%, common 1-10%,
mid 0.1-1%, rare 0.01-0.1%, very-rare below 0.01% (but at least one entry), absent none.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bands import Sample, match_counts, sample_frequencies

SELECTOR_VERSION = 1
"""Bump when the same data would give a different mix, so cached mixes are not reused."""

BANDS: tuple[tuple[str, float], ...] = (
    ("very-common", 0.10),
    ("common", 0.01),
    ("mid", 0.001),
    ("rare", 0.0001),
    ("very-rare", 0.0),
)
CANDIDATES = 6
"""Candidates counted exactly per single-token slot; the one in the most preferred band wins."""
SHORT_CANDIDATES = 40
"""1- and 2-character tokens: their matches are far above their word frequency, so count many."""
ABSENT_CANDIDATES = 4
SAMPLE_ENTRIES = 4_000
"""Entries read to draw co-occurring tokens for the multi-token slots."""


def band_of(count: int, entries: int) -> str:
    """The band of a query matching ``count`` of ``entries`` entries."""
    if count <= 0 or entries <= 0:
        return "absent"
    share = count / entries
    for name, low in BANDS:
        if share >= low:
            return name
    return BANDS[-1][0]


def _band_rank(name: str) -> int:
    return [band for band, _ in BANDS].index(name) if name != "absent" else len(BANDS)


def _fullmatch(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda token: compiled.fullmatch(token) is not None


CLASSES: dict[str, Callable[[str], bool]] = {
    "word": _fullmatch(r"[a-z]{3,}"),
    "long": _fullmatch(r"[a-z]{10,}"),
    "1-char": _fullmatch(r"[a-z0-9]"),
    "1-any": lambda token: len(token) == 1,
    "2-char": _fullmatch(r"[a-z0-9]{2}"),
    "2-any": lambda token: len(token) == 2,
    "dotted": _fullmatch(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+"),
    "snake": _fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+"),
    "call": _fullmatch(r"[a-z_][a-z0-9_.]*\(\)"),
    "arrow": lambda token: token == "->",
    "operator": _fullmatch(r"->|=>|==|!=|<=|>=|\*\*|//|:="),
    "dunder": _fullmatch(r"__[a-z0-9]+(?:_[a-z0-9]+)*__"),
    "non-ascii": lambda token: not token.isascii(),
    "punct": lambda token: not any(ch.isalnum() or ch == "_" for ch in token),
}

VC, C, M, R, VR = (name for name, _ in BANDS)


@dataclass(frozen=True)
class Slot:
    """One query of the mix: its label, the token class, and the bands it prefers (best first)."""

    category: str
    token_class: str
    bands: tuple[str, ...]
    fallback_class: str | None = None  # when the class has no token at all (e.g. no "->" in the text)

    @property
    def quota(self) -> int:
        return SHORT_CANDIDATES if self.token_class in ("1-char", "1-any", "2-char", "2-any") else CANDIDATES


@dataclass(frozen=True)
class Mixed:
    """A multi-token query: parts (class, bands); ``together`` draws them from one entry."""

    category: str
    parts: tuple[tuple[str, tuple[str, ...]], ...]
    together: bool


SINGLE_SLOTS: tuple[Slot, ...] = (
    *(Slot(VC, "word", (VC,)) for _ in range(3)),
    *(Slot(C, "word", (C,)) for _ in range(3)),
    *(Slot(M, "word", (M,)) for _ in range(3)),
    *(Slot(R, "word", (R,)) for _ in range(3)),
    *(Slot(VR, "word", (VR, R)) for _ in range(3)),
    Slot("1-char common", "1-char", (C, VC, M)),
    Slot("1-char rare", "1-any", (R, VR, M, C)),
    Slot("2-char common", "2-char", (C, VC, M)),
    Slot("2-char rare", "2-any", (R, VR, M, C)),
    Slot("code: dotted", "dotted", (M, R, C)),
    Slot("code: snake_case", "snake", (R, M, VR)),
    Slot("code: call()", "call", (M, R, C)),
    Slot("code: ->", "arrow", (C, M, VC, R), fallback_class="operator"),
    Slot("code: __dunder__", "dunder", (C, M, VC)),
    Slot("non-ascii common", "non-ascii", (M, C, R, VC, VR)),
    Slot("non-ascii rare", "non-ascii", (VR, R, M)),
    Slot("punct common", "punct", (C, VC, M)),
    Slot("punct rare", "punct", (R, VR, M)),
)

MIXED_SLOTS: tuple[Mixed, ...] = (
    Mixed("2-token very-common+very-common", (("word", (VC,)), ("word", (VC,))), together=False),
    Mixed("2-token common+rare", (("word", (C,)), ("word", (R, VR))), together=True),
    Mixed("2-token mid+mid", (("word", (M,)), ("word", (M,))), together=True),
    Mixed("2-token mid+mid apart", (("word", (M,)), ("word", (M,))), together=False),
    Mixed("2-token short+long", (("2-char", (C, VC)), ("long", (R, M))), together=True),
    Mixed("2-token 1-char+mid", (("1-char", (C, VC)), ("word", (M,))), together=True),
    Mixed("3-token common+mid+rare", (("word", (C,)), ("word", (M,)), ("word", (R, VR))), together=True),
    Mixed("3-token very-common+common+very-rare", (("word", (VC,)), ("word", (C,)), ("word", (VR, R))), together=True),
    Mixed("3-token short+short+long", (("1-char", (C, VC)), ("2-char", (C, VC)), ("long", (M, R))), together=True),
    Mixed("3-token rare+rare+absent", (("word", (R,)), ("word", (R,)), ("absent", ("absent",))), together=False),
)


class _Vocabulary:
    """The sampled content tokens with their estimated shares, and a test for "no other word contains it"."""

    def __init__(self, sample: Sample) -> None:
        self.sample = sample
        self.tokens = sorted(sample.df)
        self._blob = "\n" + "\n".join(self.tokens) + "\n"
        self._bands = {token: band_of(count, sample.entries) for token, count in sample.df.items()}

    def band(self, token: str) -> str:
        """The band the sample puts ``token``'s document frequency in (its matches may be more)."""
        return self._bands.get(token, "absent")

    def alone(self, token: str) -> bool:
        """True when no other sampled word contains ``token`` (then its matches are close to its df)."""
        return self._blob.count(token) == 1 and f"\n{token}\n" in self._blob

    def unseen(self, token: str) -> bool:
        return token not in self._blob


def _distance(count: int, entries: int, bands: Sequence[str]) -> float:
    """How far (in decades of share) a count lies from the nearest preferred band; 0 inside one."""
    if count == 0:
        return 0.0 if "absent" in bands else math.inf
    share = math.log10(count / entries)
    best = math.inf
    for index, (band, low) in enumerate(BANDS):
        if band not in bands:
            continue
        low_log = math.log10(low) if low > 0 else -math.inf
        high_log = 0.0 if index == 0 else math.log10(BANDS[index - 1][1])
        best = min(best, max(0.0, low_log - share, share - high_log))
    return best


def _candidates(vocab: _Vocabulary, slot: Slot, used: set[str], rng: random.Random) -> list[str]:
    """Up to ``slot``'s quota of tokens of its class: the preferred bands first (each shuffled), then the nearest."""
    pool: list[str] = []
    for token_class in (slot.token_class, slot.fallback_class):
        if token_class is not None and not pool:
            accept = CLASSES[token_class]
            pool = [token for token in vocab.tokens if accept(token) and token not in used]
    ordered: list[str] = []
    for band in slot.bands:
        group = [token for token in pool if vocab.band(token) == band]
        rng.shuffle(group)
        ordered += group
    quota = slot.quota
    if len(ordered) < quota:
        chosen = set(ordered)
        entries = vocab.sample.entries
        rest = sorted(
            (token for token in pool if token not in chosen),
            key=lambda token: (_distance(vocab.sample.df[token], entries, slot.bands), token),
        )
        ordered += rest
    return ordered[:quota]


def _absents(vocab: _Vocabulary, rng: random.Random, *, near_miss: bool, count: int) -> list[str]:
    """Tokens no sampled word contains: random letters, or a common word with one letter inserted.

    A near miss shares most of its trigrams with a frequent word, so a trigram index finds
    many candidates it must then reject.  The counting pass confirms they match nothing.
    """
    found: list[str] = []
    if near_miss:
        words = [t for t in vocab.tokens if len(t) >= 6 and t.isascii() and t.isalpha() and vocab.band(t) in (VC, C)]
        rng.shuffle(words)
        for word in words:
            cut = 1 + rng.randrange(len(word) - 1)
            token = word[:cut] + rng.choice(string.ascii_lowercase) + word[cut:]
            if vocab.unseen(token) and token not in found:
                found.append(token)
            if len(found) == count:
                return found
    while len(found) < count:
        token = "".join(rng.choice(string.ascii_lowercase) for _ in range(7))
        if vocab.unseen(token) and token not in found:
            found.append(token)
    return found


def _sample_entries(path: Path, count: int) -> list[list[str]]:
    """The token lists of the first ``count`` entries (to draw co-occurring multi-token queries from)."""
    out: list[list[str]] = []
    with open(path, "rb") as handle:
        for raw in handle:
            if len(out) >= count:
                break
            try:
                content = json.loads(raw).get("content")
            except (ValueError, AttributeError):
                continue
            if isinstance(content, str) and content.strip():
                out.append(sorted(set(content.lower().split())))
    return out


def _pick_part(
    vocab: _Vocabulary,
    tokens: Sequence[str],
    part: tuple[str, tuple[str, ...]],
    taken: Sequence[str],
    rng: random.Random,
    absent: str,
) -> str | None:
    """A token of the part's class and band; one no other word contains when there is one."""
    token_class, bands = part
    if token_class == "absent":
        return absent
    accept = CLASSES[token_class]
    for band in bands:
        fits = [t for t in tokens if t not in taken and accept(t) and vocab.band(t) == band]
        rng.shuffle(fits)
        for token in fits:
            if vocab.alone(token):
                return token
        if fits:
            return fits[0]
    return None


def _mixed_tokens(
    vocab: _Vocabulary, slot: Mixed, sample: Sequence[Sequence[str]], rng: random.Random, absent: str
) -> list[str] | None:
    if slot.together:
        order = list(range(len(sample)))
        rng.shuffle(order)
        sources: list[Sequence[str]] = [sample[i] for i in order]
    else:
        sources = [vocab.tokens]
    for tokens in sources:
        picked: list[str] = []
        for part in slot.parts:
            token = _pick_part(vocab, tokens, part, picked, rng, absent)
            if token is None:
                break
            picked.append(token)
        else:
            return picked
    return None


def choose_queries(path: Path, *, seed: int, workers: int | None = None) -> dict[str, Any]:
    """The mix for the catalog at ``path``: every query with its category, band and exact count."""
    vocab = _Vocabulary(sample_frequencies(path, workers=workers))
    absent_rng = random.Random(f"bands:{seed}:absent")
    absent_sets = {
        "absent": _absents(vocab, absent_rng, near_miss=False, count=ABSENT_CANDIDATES),
        "absent near-miss": _absents(vocab, absent_rng, near_miss=True, count=ABSENT_CANDIDATES),
    }
    used = {token for tokens in absent_sets.values() for token in tokens}
    singles: list[tuple[str, tuple[str, ...], list[str]]] = []
    missing: list[str] = []
    for index, slot in enumerate(SINGLE_SLOTS):
        found = _candidates(vocab, slot, used, random.Random(f"bands:{seed}:{index}:{slot.category}"))
        if found:
            used.add(found[0])  # reserve the first choice; later slots may still share the rest
            singles.append((slot.category, slot.bands, found))
        else:
            missing.append(slot.category)
    singles += [(category, ("absent",), tokens) for category, tokens in absent_sets.items()]
    sample = _sample_entries(path, SAMPLE_ENTRIES)
    mixed: list[tuple[str, list[str]]] = []
    for index, mixed_slot in enumerate(MIXED_SLOTS):
        rng = random.Random(f"bands:{seed}:mixed:{index}:{mixed_slot.category}")
        tokens = _mixed_tokens(vocab, mixed_slot, sample, rng, absent_sets["absent"][0])
        if tokens is None:
            missing.append(mixed_slot.category)
        else:
            mixed.append((mixed_slot.category, tokens))
    asked = sorted(
        {(t,) for _, _, found in singles for t in found}
        | {(t,) for _, ts in mixed for t in ts}
        | {tuple(ts) for _, ts in mixed}
    )
    counted = match_counts(path, asked, workers=workers)
    exact = dict(zip(asked, counted.matches, strict=True))
    entries = counted.entries
    queries: list[dict[str, Any]] = []
    taken: set[str] = set()
    for category, bands, found in singles:

        def rank(token: str, bands: Sequence[str] = bands, found: Sequence[str] = found) -> tuple[float, int]:
            count = exact[(token,)]
            band = band_of(count, entries)
            preference = bands.index(band) if band in bands else len(bands)
            return (preference + _distance(count, entries, bands), found.index(token))

        choice = min((token for token in found if token not in taken), key=rank, default=None)
        if choice is None:
            missing.append(category)
            continue
        taken.add(choice)
        queries.append(_describe(category, [choice], exact, entries))
    for category, tokens in mixed:  # counted as drawn: a part that turns out to match is labelled so
        queries.append(_describe(category, tokens, exact, entries))
    return {
        "selector_version": SELECTOR_VERSION,
        "seed": seed,
        "entries": entries,
        "bands": dict(BANDS),
        "sampled_entries": vocab.sample.entries,
        "shape": counted.shape(),
        "queries": queries,
        "missing": missing,
    }


def _describe(category: str, tokens: Sequence[str], exact: dict[tuple[str, ...], int], entries: int) -> dict[str, Any]:
    count = exact[tuple(tokens)]
    parts = [{"token": t, "matches": exact[(t,)], "band": band_of(exact[(t,)], entries)} for t in tokens]
    band = "+".join(part["band"] for part in parts) if len(tokens) > 1 else band_of(count, entries)
    return {
        "category": category,
        "text": " ".join(tokens),
        "band": band,
        "matches": count,
        "share": count / entries if entries else 0.0,
        "parts": parts if len(tokens) > 1 else [],
    }
