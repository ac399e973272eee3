from __future__ import annotations

import multiprocessing
import re
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.errors import ArgumentTypeError, EmptyContentError, InvalidArgumentError, MemstoreError
from memstore.team import EMPTY_PROMPT, TeamMemory

LINE = re.compile(r"^- (\S+) — (.+)$")


def test_add_writes_one_line_and_returns_it(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    line = team.add("  use uv, not pip  ")
    match = LINE.match(line)
    assert match is not None
    assert match.group(2) == "use uv, not pip"
    assert datetime.fromisoformat(match.group(1)).utcoffset() is not None
    path = tmp_path / ".teaagent" / "team-memory.md"
    assert path.read_text(encoding="utf-8") == line + "\n"
    assert (tmp_path / ".teaagent" / "team-memory.lock").exists()
    assert team.list() == [line]


def test_default_root_is_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    TeamMemory().add("note")
    assert (tmp_path / ".teaagent" / "team-memory.md").exists()


def test_list_missing_file_is_empty(tmp_path: Path) -> None:
    assert TeamMemory(tmp_path).list() == []
    assert not (tmp_path / ".teaagent").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("first\nsecond", "first second"),
        ("a\r\nb\rc", "a b c"),
        ("a\n\n\n  b  \n", "a b"),
        ("x\u2028y\x85z", "x y z"),
        ("keep  inner  spaces", "keep  inner  spaces"),
    ],
)
def test_multiline_text_collapses_to_one_line(tmp_path: Path, text: str, expected: str) -> None:
    team = TeamMemory(tmp_path)
    line = team.add(text)
    assert line.endswith(" — " + expected)
    assert team.list() == [line]
    assert (tmp_path / ".teaagent" / "team-memory.md").read_bytes().count(b"\n") == 1


@pytest.mark.parametrize("text", ["", "   ", "\n\n", "\t\r\n "])
def test_empty_text_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(EmptyContentError) as info:
        TeamMemory(tmp_path).add(text)
    assert isinstance(info.value, ValueError)
    assert not (tmp_path / ".teaagent" / "team-memory.md").exists()


@pytest.mark.parametrize("bad", [None, 5, b"bytes", ["a"]])
def test_non_str_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ArgumentTypeError):
        TeamMemory(tmp_path).add(bad)  # type: ignore[arg-type]


def test_append_after_unterminated_line_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / ".teaagent" / "team-memory.md"
    path.parent.mkdir()
    path.write_bytes(b"# Team notes\n\n- 2020-01-01T00:00:00+00:00 \xe2\x80\x94 old\r\n\n- torn")
    team = TeamMemory(tmp_path)
    line = team.add("new")
    assert team.list() == ["# Team notes", "- 2020-01-01T00:00:00+00:00 — old", "- torn", line]
    assert path.read_bytes().endswith(b"- torn\n" + line.encode() + b"\n")


def test_inject_prompt_empty(tmp_path: Path) -> None:
    assert TeamMemory(tmp_path).inject_prompt() == EMPTY_PROMPT
    assert EMPTY_PROMPT == "[team-memory] No shared team context available."


def test_inject_prompt_all_fit_oldest_first(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    lines = [team.add(f"note {i}") for i in range(3)]
    assert team.inject_prompt() == "\n".join(["[team-memory] Shared team context (3 entries):", *lines])


def test_inject_prompt_keeps_newest_within_budget(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    lines = [team.add(f"note {i:02d} " + "x" * 20) for i in range(10)]
    # room for exactly the three newest lines and their two separating newlines
    tokens = (len("\n".join(lines[-3:])) + 3) // 4
    assert 4 * tokens < len("\n".join(lines[-4:]))
    prompt = team.inject_prompt(limit_tokens=tokens)
    assert prompt.split("\n") == ["[team-memory] Shared team context (3 entries):", *lines[-3:]]


def test_inject_prompt_when_nothing_fits(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    team.add("a long note that does not fit in one token")
    assert team.inject_prompt(limit_tokens=0) == "[team-memory] Shared team context (0 entries):"
    assert team.inject_prompt(limit_tokens=1) == "[team-memory] Shared team context (0 entries):"


def test_inject_prompt_bad_limits(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    with pytest.raises(InvalidArgumentError):
        team.inject_prompt(limit_tokens=-1)
    with pytest.raises(ArgumentTypeError):
        team.inject_prompt(limit_tokens="10")  # type: ignore[arg-type]
    with pytest.raises(MemstoreError):
        team.inject_prompt(limit_tokens=True)


entry_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), min_size=1)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(entry_text.filter(lambda t: t.strip()), max_size=15), tokens=st.integers(0, 80))
def test_inject_prompt_budget_and_newest(tmp_path: Path, entries: list[str], tokens: int) -> None:
    path = tmp_path / ".teaagent" / "team-memory.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(e + "\n" for e in entries), encoding="utf-8")
    team = TeamMemory(tmp_path)
    lines = team.list()
    prompt = team.inject_prompt(limit_tokens=tokens)
    if not lines:
        assert prompt == EMPTY_PROMPT
        return
    header, *shown = prompt.split("\n")
    assert header == f"[team-memory] Shared team context ({len(shown)} entries):"
    body = "\n".join(shown)
    assert len(body) <= tokens * 4
    assert shown == lines[len(lines) - len(shown) :]
    if len(shown) < len(lines):
        older = lines[len(lines) - len(shown) - 1]
        assert len(body) + len(older) + (1 if shown else 0) > tokens * 4


def _append_many(root: str, worker: int, count: int) -> None:
    team = TeamMemory(root)
    for i in range(count):
        team.add(f"worker {worker} note {i} " + "y" * (1 + i * 37 % 300))


def test_concurrent_processes_append_without_loss(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers, count = 4, 40
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, count)) for w in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    lines = TeamMemory(tmp_path).list()
    assert len(lines) == workers * count
    seen = set()
    for line in lines:
        match = LINE.match(line)
        assert match is not None, line
        words = match.group(2).split()
        seen.add((int(words[1]), int(words[3])))
        assert match.group(2) == f"worker {words[1]} note {words[3]} " + "y" * (1 + int(words[3]) * 37 % 300)
    assert seen == {(w, i) for w in range(workers) for i in range(count)}
    for w in range(workers):
        mine = [int(LINE.match(x).group(2).split()[3]) for x in lines if f"worker {w} " in x]  # type: ignore[union-attr]
        assert mine == list(range(count))
