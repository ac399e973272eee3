"""memstore.index.terms: Python's idea of a row's terms is FTS5's, and a token's terms find every row holding it."""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.catalog import MemoryCatalog
from memstore.index.terms import (
    ENDS,
    INSIDE,
    LONG_RUN_CHARS,
    MARK_CHARS,
    PIECE,
    STARTS,
    WHOLE,
    gram_text,
    has_long_run,
    is_whole_piece,
    marks_text,
    piece_parts,
    pieces,
    text_terms,
    token_marks,
)

# Letters, digits, ASCII punctuation and controls, ASCII whitespace, non-ASCII whitespace (U+3000,
# U+00A0, U+2028: term characters for FTS5, separators for str.split), combining marks, emoji.
CHARS = st.sampled_from(
    list("ab z09") + list("-_./:;\"'*()[]{}<>!?#@$%^&|~`+=,\\") + ["\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f"]
    + ["\x01", "\x7f", "\u3000", "\xa0", "\u2028", "é", "e\u0301", "ß", "ı", "😀", "ΟΔΟΣ".lower(), "\u180e"]
)  # fmt: skip
TEXT = st.lists(CHARS, max_size=40).map("".join)


def fts_terms(texts: list[str]) -> set[str]:
    """The terms FTS5's ascii tokenizer files these texts under (its own vocabulary)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(c, tokenize='ascii', detail=none)")
    conn.executemany("INSERT INTO f(c) VALUES (?)", [(text,) for text in texts])
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'row')")
    return {term for (term,) in conn.execute("SELECT term FROM v")}


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(TEXT.map(str.lower), min_size=1, max_size=5))
def test_python_terms_are_the_tokenizers_terms(texts: list[str]) -> None:
    # The incremental catch-up computes terms in Python; a term it missed would hide rows.
    assert set().union(*(text_terms(text) for text in texts)) == fts_terms(texts)
    assert all(text_terms(text) == set(PIECE.findall(text)) for text in texts)


@settings(max_examples=500, deadline=None)
@given(text=TEXT.map(str.lower), token=TEXT.map(str.lower))
def test_a_token_in_a_text_has_every_piece_inside_a_term_and_every_mark(text: str, token: str) -> None:
    for word in token.split():
        if word not in text:
            continue
        terms = text_terms(text)
        assert all(any(piece in term for term in terms) for piece in pieces(word))
        assert set(token_marks(word)) <= set(marks_text(text).split())
        for piece, position in piece_parts(word):
            holders = [term for term in terms if piece in term]
            if position == WHOLE:
                assert piece in terms
            elif position == STARTS:
                assert any(term.startswith(piece) for term in holders)
            elif position == ENDS:
                assert any(term.endswith(piece) for term in holders)


@settings(max_examples=500, deadline=None)
@given(text=TEXT.map(str.lower), word=st.lists(st.sampled_from(list("abz09é😀ı")), min_size=1, max_size=4).map("".join))
def test_a_whole_piece_is_in_a_text_exactly_when_a_term_contains_it(text: str, word: str) -> None:
    assert is_whole_piece(word)
    assert (word in text) == any(word in term for term in text_terms(text))


def test_term_characters_are_ascii_alphanumerics_and_everything_beyond_ascii() -> None:
    """PIECE is written as a complement (it compiles ~30x faster): it admits exactly these characters."""
    import re

    spelled_out = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]")
    piece = re.compile(PIECE.pattern.removesuffix("+"))
    assert PIECE.pattern == piece.pattern + "+"
    characters = map(chr, range(0x110000))
    differ = [char for char in characters if (piece.match(char) is None) != (spelled_out.match(char) is None)]
    assert differ == []


def test_pieces_and_marks_of_tokens() -> None:
    assert pieces("sqlite3.operationalerror:") == ("sqlite3", "operationalerror")
    assert pieces("a-b-a") == ("a", "b")
    assert pieces("->") == ()
    assert token_marks('"memory"') == ("x22",)
    assert token_marks("a->b") == ("x2d", "x2dx3e", "x3e")  # each mark, and the pair side by side
    assert piece_parts("z.d") == (("z", ENDS), ("d", STARTS))
    assert piece_parts("__new__") == (("new", WHOLE),) and piece_parts("plain") == (("plain", INSIDE),)
    assert not is_whole_piece("src/") and is_whole_piece("straße")


def _marks_by_regex(text: str) -> str:
    """The plain definition marks_text must equal: each mark once, each pair of marks side by side."""
    singles = {f"x{ord(char):02x}" for char in text if char in MARK_CHARS}
    pairs = {
        f"x{ord(a):02x}x{ord(b):02x}"
        for run in re.findall("[" + re.escape("".join(sorted(MARK_CHARS))) + "]{2,}", text)
        for a, b in itertools.pairwise(run)
    }
    return " ".join(sorted(singles | pairs))


@settings(max_examples=500, deadline=None)
@given(text=TEXT | st.text(max_size=60))
def test_marks_found_on_the_bytes_are_the_marks_of_the_text(text: str) -> None:
    # Any text, lone surrogates and NUL among them: a non-ASCII character or a surrogate
    # between two marks must keep them from pairing.
    assert marks_text(text) == _marks_by_regex(text)


def test_marks_are_the_ascii_separators_a_token_can_hold() -> None:
    assert "\x00" not in MARK_CHARS and " " not in MARK_CHARS and "\x1c" not in MARK_CHARS
    assert {"-", "_", ".", '"', "\x01", "\x7f"} <= MARK_CHARS
    assert marks_text("a-b é\u3000c \"q\" \x01") == "x01 x22 x2d"
    assert marks_text("f('x')") == "x27 x27x29 x28 x28x27 x29"
    assert marks_text("") == "" and marks_text("plain words") == ""


def test_grams_find_a_term_by_any_one_or_two_characters() -> None:
    grams = set(gram_text("abcé").split())
    assert grams == {"a", "b", "c", "é", "ab", "bc", "cé", "aqs", "abqs", "éqe", "céqe"}


def test_long_runs_are_found_whatever_their_characters() -> None:
    assert not has_long_run(["x" * (LONG_RUN_CHARS - 1)])
    assert has_long_run(["short", "é" * LONG_RUN_CHARS])
    assert not has_long_run([("x" * 100 + " ") * 200])  # long text, short terms


def test_a_term_longer_than_fts5_keeps_is_searched_exactly(tmp_path: Path) -> None:
    """FTS5 cuts tokens at 32 KiB: a row holding such a run is kept out of SQL (odd) and still found."""
    catalog = MemoryCatalog(tmp_path)
    blob = "q" * 20_000 + "needle" + "é" * 3000  # one run of term characters, > 32 KiB in UTF-8
    kept = catalog.add(f"a base64 blob {blob} end")
    catalog.add("needle in a short note")
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert catalog.search("needle") == scan.search("needle") and kept in catalog.search("needle")
    assert catalog.search("qneedleé") == [kept]
    with sqlite3.connect(catalog.index_path) as conn:
        assert conn.execute("SELECT count(*) FROM doc WHERE odd = 1").fetchone()[0] == 1
    assert catalog.check_index().equal


def test_check_index_finds_a_term_missing_from_the_vocabulary(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("alpha beta", tags=["gamma"])
    catalog.add("beta delta")
    assert catalog.check_index().equal
    with sqlite3.connect(catalog.index_path) as conn:
        conn.execute("DELETE FROM term WHERE text = 'delta'")
    report = catalog.check_index()
    assert not report.equal and "vocabulary" in report.summary
    assert catalog.check_index().equal  # the failed check dropped the state: rebuilt
    assert [entry.content for entry in catalog.search("delt")] == ["beta delta"]


def test_marks_remembered_per_run_are_still_the_marks_of_each_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts whose runs differ as a whole but share single runs: each run's marks come from the
    per-run table (bounded, long runs never kept), and every text still gets exactly its marks."""
    from memstore.index import terms

    monkeypatch.setattr(terms, "_marks_cache", {})
    monkeypatch.setattr(terms, "_run_marks", {})
    monkeypatch.setattr(terms, "MARKS_CACHED", 3)
    texts = ["a.b c,d", "e.f (g)", "h,i (j) k.", "l-m n.o", "'p' q.r", "s.t " + "-+" * 40, "u,v w.x y()"]
    for text in texts * 2:
        assert marks_text(text) == _marks_by_regex(text), text
        assert len(terms._run_marks) <= 3
    assert terms._run_marks, "single runs were remembered"
    assert all(len(run) <= terms.MARKS_KEY_BYTES for run in terms._run_marks)
    terms._marks_cache.clear()
    terms._run_marks[b"."] = frozenset({"x2e"})  # what the table holds is what a text with that run is given
    assert marks_text("z.z") == "x2e"


def test_marks_remembered_for_the_same_runs_are_still_the_marks_of_each_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstore.index import terms

    monkeypatch.setattr(terms, "_marks_cache", {})
    monkeypatch.setattr(terms, "MARKS_CACHED", 2)
    texts = ["a-b c.d", "xx-yy zz.", "f('x')", "q('r') s", "é-\ud800-a", "-" * 70 + " x", "a+b", "a-b c.d e.f"]
    for text in texts * 2:  # the second pass answers from what the first remembered, where it did
        assert marks_text(text) == _marks_by_regex(text), text
        assert len(terms._marks_cache) <= 2
    assert all(len(key) <= terms.MARKS_KEY_BYTES for key in terms._marks_cache)
