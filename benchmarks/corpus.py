"""What the harness needs from a corpus: the catalog, its query mix, its probes and more lines like it.

Two corpora share one harness (benchmarks/run.py), so every figure and every exactness
check means the same on both: ``generated`` (memstore.sample.catalog, the fixed mix of
benchmarks/queries.py) and ``realtext`` (windows of the standard library's docstrings and
comments, with a mix drawn from that text by frequency band, benchmarks/realtext_queries.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks.generate import Dataset, TextChoice, dataset
from benchmarks.queries import ABSENT_TOKEN, FIRST_QUERY_PROBES, SEARCH_MIX, Query
from memstore.sample.catalog import CatalogWriter, catalog_end_us
from memstore.sample.realtext import RealTextWriter, WordStream, realtext_end_us

CORPORA = ("generated", "realtext")


class Writer(Protocol):
    """More entries of the corpus's kind, for the catch-up and add measurements."""

    def entries(self, count: int, *, extra_word: str | None = None) -> list[dict[str, object]]: ...

    def lines(self, count: int, *, extra_word: str | None = None) -> str: ...


@dataclass(frozen=True)
class Corpus:
    name: str
    data: Dataset
    mix: tuple[Query, ...]
    absent: str  # matches nothing: the build's first query and the no-change probe
    probes: tuple[str, ...]  # timed as the first query of a fresh process
    verify_catchup: tuple[str, ...]  # re-checked against the scan after the catch-ups
    verify_rewrite: tuple[str, ...]  # and after delete_by_branch
    cli_query: str
    writer: Callable[[str], Writer]  # stream name -> a writer whose clock starts after the catalog
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def result_prefix(self) -> str:
        """Result files are ``<size>.*`` for the generated corpus and ``<name>-<size>.*`` for others."""
        return "" if self.name == "generated" else f"{self.name}-"


def load(name: str, size: int, *, seed: int, data_dir: Path, text: TextChoice | None = None) -> Corpus:
    """The corpus ``name`` at ``size`` entries, generated (and its mix chosen) on first use."""
    if name == "generated":
        data = dataset("catalog", size, seed=seed, data_dir=data_dir)
        return Corpus(
            name=name,
            data=data,
            mix=SEARCH_MIX,
            absent=ABSENT_TOKEN,
            probes=FIRST_QUERY_PROBES,
            verify_catchup=("memory python", "the"),
            verify_rewrite=("memory python", "caltrivo", "the"),
            cli_query="caltrivo",
            writer=lambda stream: CatalogWriter(seed, stream=stream, start_us=catalog_end_us(size)),
        )
    if name == "realtext":
        choice = text or TextChoice()
        data = dataset("realtext", size, seed=seed, data_dir=data_dir, text=choice)
        return _realtext(data, choice, data_dir=data_dir)
    raise ValueError(f"unknown corpus {name!r} (choose from {', '.join(CORPORA)})")


def _realtext(data: Dataset, choice: TextChoice, *, data_dir: Path) -> Corpus:
    chosen = data.info["queries"]
    mix = tuple(Query(q["category"], q["text"], band=q["band"], matches=q["matches"]) for q in chosen["queries"])

    def first(category: str, *, default: str) -> str:
        return next((q.text for q in mix if q.category == category), default)

    absent = first("absent", default="zyxwq")
    common = first("very-common", default="the")
    rare = first("very-rare", default=first("rare", default=absent))
    pair = first("2-token common+rare", default=common)
    words: list[WordStream] = []

    def writer(stream: str) -> Writer:
        if not words:  # the text is cached on disk; only the runs that append need it in memory
            words.append(WordStream(choice.corpus(data_dir)))
        return RealTextWriter(words[0], data.seed, stream=stream, start_us=realtext_end_us(data.size))

    return Corpus(
        name="realtext",
        data=data,
        mix=mix,
        absent=absent,
        probes=(common, rare, pair, first("2-char common", default="do")),
        verify_catchup=(pair, common),
        verify_rewrite=(pair, rare, common),
        cli_query=first("rare", default=rare),
        writer=writer,
        info={
            "text": data.info.get("text"),
            "shape": chosen.get("shape"),
            "missing_slots": chosen.get("missing", []),
            "generate_seconds": data.info.get("generate_seconds"),
            "choose_queries_seconds": chosen.get("seconds"),
        },
    )
