"""MemoryHierarchy: project, personal and auto-memory tiers, and the auto-memory parser."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bounded import run_bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.auto_memory import (
    AUTO_MEMORY_TAG,
    MAX_AUTO_MEMORY_BYTES,
    AutoMemory,
    AutoMemoryItem,
    auto_memory_item_id,
    is_thematic_break,
    parse_auto_memory,
    parse_heading,
)
from memstore.catalog import MemoryCatalog
from memstore.hierarchy import MemoryHierarchy
from memstore.models import MemoryEntry, memory_relevance_score, query_tokens

MEMORY_MD = """\
# Project notes

Uses uv for the virtualenv
and ruff for linting.

## Build & Test
- Run `make test` before pushing
  (the CI runs the same target)
* Parser tests live in tests/parser
1. Numbered item
   continued here

   second paragraph of the numbered item
-

```bash
# not a heading
make demo
```

### Flaky ###
- test_watch is flaky on CI

## Style
- Prefer small modules
---
- duplicate
- duplicate
"""


def write_memory_md(root: Path, text: str | bytes) -> Path:
    path = root / ".claude" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------- parsing


def test_parse_sections_bullets_and_continuations() -> None:
    items = parse_auto_memory(MEMORY_MD)
    assert [(item.heading_path, item.text, item.line) for item in items] == [
        (("Project notes",), "Uses uv for the virtualenv\nand ruff for linting.", 3),
        (("Project notes", "Build & Test"), "Run `make test` before pushing\n(the CI runs the same target)", 7),
        (("Project notes", "Build & Test"), "Parser tests live in tests/parser", 9),
        (
            ("Project notes", "Build & Test"),
            "Numbered item\ncontinued here\n\nsecond paragraph of the numbered item",
            10,
        ),
        (("Project notes", "Build & Test"), "```bash\n# not a heading\nmake demo\n```", 16),
        (("Project notes", "Build & Test", "Flaky"), "test_watch is flaky on CI", 22),
        (("Project notes", "Style"), "Prefer small modules", 25),
        (("Project notes", "Style"), "duplicate", 27),
        (("Project notes", "Style"), "duplicate", 28),
    ]
    assert len({item.item_id for item in items}) == len(items)  # duplicates get distinct ids
    for item in items:
        assert len(item.item_id) == 32 and int(item.item_id, 16) >= 0


def test_offsets_are_byte_offsets_of_the_first_line() -> None:
    data = MEMORY_MD.replace("Uses uv", "Usés ü").encode()
    for item in parse_auto_memory(data):
        line_start = data.split(b"\n")[item.line - 1]
        assert data[item.offset : item.offset + len(line_start)] == line_start


def test_item_id_formula() -> None:
    [item] = parse_auto_memory("## A\n### B\n- some   text\n  wrapped")
    assert item.heading_path == ("A", "B")
    expected = auto_memory_item_id(("A", "B"), "some text wrapped")
    assert item.item_id == expected
    assert item.item_id != auto_memory_item_id(("A",), "some text wrapped")
    assert item.item_id != auto_memory_item_id(("A", "B"), "some text wrapped", 1)


def test_ids_are_stable_across_unrelated_edits() -> None:
    before = {item.text: item.item_id for item in parse_auto_memory(MEMORY_MD)}
    edited = "Intro line added at the top\n\n" + MEMORY_MD.replace(
        "- Prefer small modules", "- Prefer small modules\n- A brand new item"
    ).replace("* Parser tests live in tests/parser", "*   Parser tests live in\n    tests/parser").replace("\n", "\r\n")
    after = {item.text.replace("\n", " "): item.item_id for item in parse_auto_memory(edited)}
    for text, item_id in before.items():
        if "\n" in text:
            continue
        assert after[text] == item_id, text
    parser_item = next(i for i in parse_auto_memory(edited) if i.text.startswith("Parser tests"))
    assert parser_item.item_id == before["Parser tests live in tests/parser"]  # re-wrapped, same id


def test_ids_change_when_the_item_or_its_heading_changes() -> None:
    base = {item.item_id for item in parse_auto_memory("## Build\n- run make\n")}
    assert base.isdisjoint(item.item_id for item in parse_auto_memory("## Build\n- run make test\n"))
    assert base.isdisjoint(item.item_id for item in parse_auto_memory("## Tests\n- run make\n"))


def test_parse_edge_cases() -> None:
    assert parse_auto_memory("") == []
    assert parse_auto_memory("# Only a heading\n\n## And another\n") == []
    assert parse_auto_memory("-\n* \n1.\n") == []
    [item] = parse_auto_memory("\ufeff- with a BOM\r\n")
    assert item.text == "with a BOM" and item.offset == 3
    # \x85 and U+2028 are not line breaks
    [item] = parse_auto_memory("- a\x85b\u2028c\n")
    assert item.text == "a\x85b\u2028c"
    with pytest.raises(UnicodeDecodeError):
        parse_auto_memory(b"- bad \xff byte\n")


MARKDOWN_PIECES = ["#", "## ", " ", "-", "- ", "* ", "1. ", "\n", "\r\n", "```", "~~~", "a", "Z", "\t", "é", "---"]


@given(st.lists(st.sampled_from(MARKDOWN_PIECES), max_size=40).map("".join))
def test_parse_never_fails_and_items_are_clean(text: str) -> None:
    items = parse_auto_memory(text)
    assert len({item.item_id for item in items}) == len(items)
    assert [item.line for item in items] == sorted(item.line for item in items)
    for item in items:
        assert item.text == item.text.strip() and item.text
        entry = item.to_entry("2026-01-01T00:00:00+00:00")
        assert entry.memory_id == item.item_id
    assert [i.item_id for i in parse_auto_memory(text)] == [i.item_id for i in items]  # deterministic


# ---------------------------------------------------------------- entries


def test_entries_carry_tags_and_the_file_mtime(tmp_path: Path) -> None:
    path = write_memory_md(tmp_path, MEMORY_MD)
    os.utime(path, (1_700_000_000.25, 1_700_000_000.25))
    entries = AutoMemory(path).entries()
    stamp = datetime.fromtimestamp(1_700_000_000.25, UTC).isoformat()
    assert {entry.created_at for entry in entries} == {stamp}
    flaky = next(entry for entry in entries if "flaky" in entry.content)
    assert flaky.tags == ("auto-memory", "build & test", "flaky", "project notes")
    assert flaky.branch_name is None and flaky.run_id is None
    assert all(AUTO_MEMORY_TAG in entry.tags for entry in entries)


@pytest.mark.parametrize("content", [None, b"- bad \xff\xfe utf-8\n", "directory"])
def test_missing_unreadable_or_invalid_files_give_no_items(tmp_path: Path, content: object) -> None:
    path = tmp_path / ".claude" / "MEMORY.md"
    if content == "directory":
        path.mkdir(parents=True)
    elif isinstance(content, bytes):
        write_memory_md(tmp_path, content)
    memory = AutoMemory(path)
    assert memory.items() == [] and memory.entries() == [] and memory.search("bad") == []


def test_unreadable_file_gives_no_items(tmp_path: Path) -> None:
    path = write_memory_md(tmp_path, "- secret\n")
    os.chmod(path, 0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read mode-0 files")
        assert AutoMemory(path).entries() == []
    finally:
        os.chmod(path, 0o600)


def test_startup_window() -> None:
    text = "".join(f"- item {n}\n" for n in range(1, 251))
    items = parse_auto_memory(text)
    assert [item.in_startup_window for item in items] == [n <= 200 for n in range(1, 251)]
    big = parse_auto_memory("- " + "x" * 30_000 + "\n- after the budget\n")
    assert [item.in_startup_window for item in big] == [True, False]
    sample = AutoMemoryItem("a" * 32, "t", (), line=1, offset=0)
    assert sample.in_startup_window


# ---------------------------------------------------------------- the hierarchy


def test_paths_and_personal_modes(tmp_path: Path, home: Path) -> None:
    hierarchy = MemoryHierarchy(tmp_path)
    assert hierarchy.project.path == tmp_path / ".teaagent" / "memory.jsonl"
    assert hierarchy.personal.path == home / ".config" / "teaagent" / "memory.jsonl"
    assert hierarchy.auto_memory_path == tmp_path / ".claude" / "MEMORY.md"
    entry = hierarchy.personal.add("personal preference")
    assert hierarchy.personal.show(entry.memory_id) == entry
    hierarchy.personal.search("preference")  # the index (when used) lives here too
    directory = home / ".config" / "teaagent"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(hierarchy.personal.path.stat().st_mode) == 0o600
    for path in [directory, *directory.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir():
            assert mode == 0o700, path
        elif path.name != ".gitignore":
            assert mode == 0o600, path
    assert not hierarchy.project.path.exists()  # personal writes never touch the project


def test_home_is_read_at_construction(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = MemoryHierarchy(tmp_path)
    other_home = tmp_path / "other-home"
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: cls(other_home)))
    second = MemoryHierarchy(tmp_path)
    assert first.personal.path.is_relative_to(home)
    assert second.personal.path.is_relative_to(other_home)


@pytest.mark.parametrize("query", ["anything", "", "   "])
def test_search_all_always_has_the_three_keys(tmp_path: Path, home: Path, query: str) -> None:
    result = MemoryHierarchy(tmp_path).search_all(query)
    assert result == {"project": [], "personal": [], "auto_memory": []}


def test_search_all_searches_each_tier(tmp_path: Path, home: Path) -> None:
    write_memory_md(tmp_path, MEMORY_MD)
    hierarchy = MemoryHierarchy(tmp_path)
    project = hierarchy.project.add("make test runs the parser suite", tags=["build"])
    personal = hierarchy.personal.add("I prefer make over tox")
    result = hierarchy.search_all("make")
    assert list(result) == ["project", "personal", "auto_memory"]
    assert result["project"] == [project]
    assert result["personal"] == [personal]
    assert [e.content.splitlines()[0] for e in result["auto_memory"]] == [
        "Run `make test` before pushing",
        "```bash",
    ]
    limited = hierarchy.search_all("make", limit=1)
    assert [len(v) for v in limited.values()] == [1, 1, 1]
    assert hierarchy.search_all("make", limit=0) == {"project": [], "personal": [], "auto_memory": []}
    with pytest.raises(ValueError, match="limit"):
        hierarchy.search_all("make", limit=-1)
    with pytest.raises(TypeError, match="query"):
        hierarchy.search_all(None)  # type: ignore[arg-type]


def test_auto_memory_ranking_equals_the_catalog(tmp_path: Path, home: Path) -> None:
    """The same entries in a catalog file rank exactly as the auto-memory tier ranks them."""
    write_memory_md(tmp_path, MEMORY_MD + "\n## Auto\n- parser run summary\n")
    hierarchy = MemoryHierarchy(tmp_path)
    entries = hierarchy.auto_memory.entries()
    other = tmp_path / "catalog-copy"
    catalog = MemoryCatalog(other, use_index=False)
    catalog.path.write_bytes(b"".join(json.dumps(e.to_dict(), sort_keys=True).encode() + b"\n" for e in entries))
    for query in ["parser", "test", "build", "auto-memory", "flaky ci", "make", "duplicate", "memory"]:
        assert hierarchy.search_all(query, limit=50)["auto_memory"] == catalog.search(query, limit=50), query
    tokens = query_tokens("test")
    ranked = hierarchy.search_all("test", limit=50)["auto_memory"]
    scores = [memory_relevance_score(entry, tokens) for entry in ranked]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1


def test_auto_memory_search_sees_edits(tmp_path: Path, home: Path) -> None:
    hierarchy = MemoryHierarchy(tmp_path)
    assert hierarchy.search_all("deploy")["auto_memory"] == []
    write_memory_md(tmp_path, "## Ops\n- deploy with make release\n")
    [entry] = hierarchy.search_all("deploy")["auto_memory"]
    assert entry.content == "deploy with make release"
    assert entry.tags == ("auto-memory", "ops")


def test_readonly_hierarchy_creates_nothing(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    hierarchy = MemoryHierarchy(root, readonly=True)
    assert hierarchy.search_all("x") == {"project": [], "personal": [], "auto_memory": []}
    assert "[project memory] none" in hierarchy.to_prompt_context()
    assert hierarchy.to_prompt_context("x")
    with pytest.raises(RuntimeError, match="readonly"):
        hierarchy.project.add("x")
    with pytest.raises(RuntimeError, match="readonly"):
        hierarchy.personal.add("x")
    assert tree(root) == []
    assert tree(home) == []  # no ~/.config/teaagent


def test_readonly_hierarchy_reads_existing_memory(tmp_path: Path, home: Path) -> None:
    writer = MemoryHierarchy(tmp_path)
    writer.project.add("project fact")
    writer.personal.add("personal fact")
    reader = MemoryHierarchy(tmp_path, readonly=True)
    result = reader.search_all("fact")
    assert [e.content for e in result["project"]] == ["project fact"]
    assert [e.content for e in result["personal"]] == ["personal fact"]


# ---------------------------------------------------------------- prompt context


def test_prompt_context_format(tmp_path: Path, home: Path) -> None:
    write_memory_md(tmp_path, "## Build\n- run make\n  twice\n- unrelated\n")
    hierarchy = MemoryHierarchy(tmp_path)
    hierarchy.project.add("make is the entry point", tags=["Build", "tools"])
    hierarchy.project.add("something else entirely")
    text = hierarchy.to_prompt_context("make")
    assert text == (
        "[project memory] 1 entry\n"
        "- make is the entry point (tags: build, tools)\n"
        "[personal memory] none\n"
        "[auto-memory] 1 entry\n"
        "- [Build] run make\n"
        "  twice"
    )


def test_prompt_context_without_query_lists_the_newest(tmp_path: Path, home: Path) -> None:
    write_memory_md(tmp_path, "- first\n- second\n- third\n")
    hierarchy = MemoryHierarchy(tmp_path)
    for n in range(5):
        hierarchy.project.add(f"note {n}")
    hierarchy.personal.add("mine")
    for query in (None, "", "  "):
        text = hierarchy.to_prompt_context(query, limit=2)
        assert text == (
            "[project memory] 2 entries\n- note 4\n- note 3\n"
            "[personal memory] 1 entry\n- mine\n"
            "[auto-memory] 2 entries\n- first\n- second"
        )


def test_prompt_context_auto_memory_respects_the_startup_budget(tmp_path: Path, home: Path) -> None:
    write_memory_md(tmp_path, "".join(f"- line {n}\n" for n in range(300)))
    hierarchy = MemoryHierarchy(tmp_path)
    text = hierarchy.to_prompt_context(limit=500, max_chars=1_000_000)
    assert "- line 199\n" in text + "\n" and "- line 200" not in text
    searched = hierarchy.to_prompt_context("line", limit=500, max_chars=1_000_000)
    assert searched.count("\n- line") <= 200
    assert len(hierarchy.search_all("line", limit=500)["auto_memory"]) == 300  # search covers all


_PROMPT_ROOTS: list[Path] = []


@settings(deadline=None, max_examples=60)
@given(max_chars=st.integers(0, 400), limit=st.integers(0, 6))
def test_prompt_context_never_exceeds_max_chars(
    tmp_path_factory: pytest.TempPathFactory, max_chars: int, limit: int
) -> None:
    if not _PROMPT_ROOTS:
        root = tmp_path_factory.mktemp("prompt")
        write_memory_md(root, "## H\n- auto one\n- auto two is longer\n")
        for n in range(4):
            MemoryCatalog(root).add(f"project entry {n} " + "x" * (n * 20))
        _PROMPT_ROOTS.append(root)
    hierarchy = MemoryHierarchy(_PROMPT_ROOTS[0], readonly=True)
    text = hierarchy.to_prompt_context(limit=limit, max_chars=max_chars)
    assert len(text) <= max_chars
    full = hierarchy.to_prompt_context(limit=limit, max_chars=100_000)
    if len(full) <= max_chars:
        assert text == full
    for line in text.splitlines():  # whole entries only, never a cut line (unless headers don't fit)
        if line.startswith("- ") and len(full) > max_chars and max_chars > 120:
            assert line in full.splitlines()


def test_prompt_context_takes_entries_rank_by_rank(tmp_path: Path, home: Path) -> None:
    hierarchy = MemoryHierarchy(tmp_path)
    for n in range(3):
        hierarchy.project.add(f"project {n} " + "p" * 30)
        hierarchy.personal.add(f"personal {n} " + "q" * 30)
    text = hierarchy.to_prompt_context(max_chars=200)
    assert "- project 2" in text and "- personal 2" in text  # the best of each tier first
    assert "more omitted" in text
    assert len(text) <= 200


def test_prompt_context_bad_arguments(tmp_path: Path, home: Path) -> None:
    hierarchy = MemoryHierarchy(tmp_path)
    with pytest.raises(ValueError, match="max_chars"):
        hierarchy.to_prompt_context(max_chars=-1)
    with pytest.raises(ValueError, match="limit"):
        hierarchy.to_prompt_context(limit=-1)
    with pytest.raises(TypeError, match="query"):
        hierarchy.to_prompt_context(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="readonly"):
        MemoryHierarchy(tmp_path, readonly=1)  # type: ignore[arg-type]


def test_auto_memory_entries_are_memory_entries(tmp_path: Path) -> None:
    write_memory_md(tmp_path, MEMORY_MD)
    for entry in AutoMemory(tmp_path / ".claude" / "MEMORY.md").entries():
        assert isinstance(entry, MemoryEntry)
        assert entry == MemoryEntry(**entry.to_dict())  # satisfies the invariants unchanged


def test_prompt_context_returns_the_whole_text_when_it_fits_exactly(tmp_path: Path, home: Path) -> None:
    """Regression: a greedy pass saw the longer "(1 more omitted)" header of a tier it had not
    reached yet and dropped an entry although the whole text fit in max_chars (hypothesis found it)."""
    write_memory_md(tmp_path, "## H\n- auto one\n- auto two is longer\n")
    for n in range(4):
        MemoryCatalog(tmp_path).add(f"project entry {n} " + "x" * (n * 20))
    hierarchy = MemoryHierarchy(tmp_path, readonly=True)
    full = hierarchy.to_prompt_context(limit=1, max_chars=100_000)
    assert hierarchy.to_prompt_context(limit=1, max_chars=len(full)) == full


# ---------------------------------------------------------------- repository content is input (issue 9)

# The regular expressions the parser used before: the reference the hand-written
# parsers must agree with on every line (they backtracked quadratically on long runs
# of spaces, which is why they are gone).
OLD_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
OLD_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
OLD_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")


def old_heading(line: str) -> tuple[int, str] | None:
    match = OLD_HEADING.match(line)
    if not match:
        return None
    title = OLD_CLOSING_HASHES.sub("", (match.group(2) or "").strip())
    return len(match.group(1)), " ".join(title.split())


HEADING_PIECES = [" ", "  ", "\t", "#", "##", "a", "b c", "-", "*", "_", "\x0b", "\r", "é", "\u3000", "`"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(HEADING_PIECES), max_size=14).map("".join))
def test_heading_and_break_parsers_equal_the_old_regexes(line: str) -> None:
    assert parse_heading(line) == old_heading(line)
    assert is_thematic_break(line) == bool(OLD_THEMATIC_BREAK.match(line))


LONG_LINE_SCRIPT = """
import sys
from memstore.auto_memory import parse_auto_memory
n = 1_000_000
lines = [
    "# x" + " " * n + "y",
    "# a" + " " * n + "#x",
    "## t" + " \\t" * (n // 2) + "##",
    "- " + " " * n + "x",
    "-" + " -" * (n // 2) + " x",
    " " * n + "x",
    "* " * (n // 2),
]
for line in lines:
    parse_auto_memory(line + "\\n")
print("parsed", len(lines))
"""


def test_a_megabyte_line_parses_in_linear_time() -> None:
    # Not a speed assertion: the old regexes needed ~10**12 steps on each of these
    # lines (hours); linear parsing needs ~10**6.  The limit only turns a hang into
    # a failure, and is generous for a loaded machine.
    done = subprocess.run(
        [sys.executable, "-c", LONG_LINE_SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "parsed 7"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "too-large", "link-to-too-large", "socket-dir"])
def test_memory_md_that_is_not_a_small_regular_file_reads_as_empty(
    tmp_path: Path, home: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / ".claude" / "MEMORY.md"
    path.parent.mkdir(parents=True)
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind in ("too-large", "link-to-too-large"):
        big = path if kind == "too-large" else tmp_path / "big.md"
        with open(big, "wb") as handle:
            handle.write(b"- item\n")
            handle.truncate(MAX_AUTO_MEMORY_BYTES + 1)
        if big != path:
            path.symlink_to(big)
    else:
        path.mkdir()
    with caplog.at_level(logging.WARNING, logger="memstore.auto_memory"):
        assert run_bounded(AutoMemory(path).items) == []
    assert run_bounded(MemoryHierarchy(tmp_path).search_all, "item")["auto_memory"] == []
    assert "[auto-memory] none" in run_bounded(MemoryHierarchy(tmp_path).to_prompt_context)
    assert "MEMORY.md" in caplog.text


def test_memory_md_at_the_cap_is_read(tmp_path: Path) -> None:
    path = write_memory_md(tmp_path, "- item\n\n" + "x" * (MAX_AUTO_MEMORY_BYTES - len("- item\n\n")))
    assert path.stat().st_size == MAX_AUTO_MEMORY_BYTES
    assert AutoMemory(path).items()[0].text == "item"
