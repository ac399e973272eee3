"""The command as people use it, in process (click's CliRunner): one test per addition of issue 12."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.team import TeamMemory


def invoke(root: Path, *args: str, stdin: str | bytes | None = None) -> Result:
    return _main(root, list(args), stdin)


def _main(root: Path, args: list[str], stdin: str | bytes | None) -> Result:
    """Through memstore.cli.main, so exit codes and error lines are what the console script gives."""
    from memstore.cli import main

    return CliRunner().invoke(_Entry(main), ["--root", str(root), *args], input=stdin)  # type: ignore[arg-type]


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.stderr)
    return result.stdout


def put(root: Path, line: dict) -> None:
    path = root / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"tags": [], "created_at": "2026-01-01T00:00:00+00:00", "branch_name": None,
                                 "run_id": None, **line}) + "\n")


# ----------------------------------------------------------------------------- 1. input


def test_add_reads_stdin_and_files_of_any_size(tmp_path: Path) -> None:
    big = "line of a long note\n" * 12_000  # 240 KB: more than an argument list allows
    added = ok(invoke(tmp_path, "add", "-", "--tag", "piped", "--json", stdin=big))
    entry = json.loads(added)["entry"]
    assert entry["content"] == big.strip() and entry["tags"] == ["piped"]
    note = tmp_path / "note.md"
    note.write_text("from a file ✓\n", encoding="utf-8")
    from_file = json.loads(ok(invoke(tmp_path, "add", "--file", str(note), "--json")))["entry"]
    assert from_file["content"] == "from a file ✓"
    assert MemoryCatalog(tmp_path).show(from_file["memory_id"]).content == "from a file ✓"
    # Neither or both: a usage error; bytes that are not UTF-8: refused, nothing stored.
    assert invoke(tmp_path, "add").exit_code == 2
    assert invoke(tmp_path, "add", "x", "--file", str(note)).exit_code == 2
    assert invoke(tmp_path, "add", "-", stdin=b"\xff\xfe").exit_code == 2
    assert invoke(tmp_path, "add", "--file", str(tmp_path / "missing")).exit_code == 2
    assert len(MemoryCatalog(tmp_path).list(limit=10)) == 2


def test_add_reads_at_most_one_line_of_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endless source (/dev/zero, a pipe that never closes) is refused, not read into memory."""
    monkeypatch.setattr("memstore.cli.MAX_LINE_BYTES", 1000, raising=False)
    refused = invoke(tmp_path, "add", "-", stdin="x" * 5000)
    assert refused.exit_code == 2 and "more than 1000 bytes" in refused.stderr
    if Path("/dev/zero").exists():
        assert invoke(tmp_path, "add", "--file", "/dev/zero").exit_code == 2
    assert MemoryCatalog(tmp_path).list(limit=10) == []


def test_team_add_reads_stdin(tmp_path: Path) -> None:
    line = ok(invoke(tmp_path, "team", "add", "-", stdin="deploys freeze\non fridays\n")).strip()
    assert line.endswith("— deploys freeze on fridays")
    assert TeamMemory(tmp_path).list() == [line]


# ----------------------------------------------------------------------------- 2. filters


def test_search_and_list_filter_by_tag_branch_and_run(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    a = catalog.add("flaky login test", tags=["ci", "auth"], branch_name="main", run_id="r1")
    b = catalog.add("flaky cache test", tags=["ci"], branch_name="dev", run_id="r2")
    catalog.add("flaky deploy", tags=["ops"], branch_name="main", run_id="r1")

    def ids(*args: str) -> list[str]:
        return [e["memory_id"] for e in json.loads(ok(invoke(tmp_path, *args, "--json")))["entries"]]

    assert ids("search", "flaky", "--tag", "ci") == [b.memory_id, a.memory_id]
    assert ids("search", "flaky", "--tag", "ci", "--tag", "AUTH") == [a.memory_id]
    assert ids("search", "flaky", "--tag", "ci", "--branch", "dev") == [b.memory_id]
    assert ids("list", "--run", "r1", "--tag", "auth") == [a.memory_id]
    assert ids("list", "--run-id", "r2") == [b.memory_id]
    assert ids("list", "--branch", "nowhere") == []


# ----------------------------------------------------------------------------- 3. ids


def test_unique_prefixes_ambiguity_and_short_ids(tmp_path: Path) -> None:
    for memory_id in ("28fed440aaaa", "28fed441bbbb", "28fed441bccc", "9abc0000"):
        put(tmp_path, {"memory_id": memory_id, "content": f"note {memory_id}"})
    shown = json.loads(ok(invoke(tmp_path, "show", "28fed440", "--json")))["entry"]
    assert shown["memory_id"] == "28fed440aaaa"
    assert "28fed441bbbb" in ok(invoke(tmp_path, "show", "28fed441bb"))
    ambiguous = invoke(tmp_path, "show", "28fed441")
    assert ambiguous.exit_code == 1
    assert "ambiguous" in ambiguous.stderr and "28fed441bbbb" in ambiguous.stderr and "28fed441bccc" in ambiguous.stderr
    short = invoke(tmp_path, "show", "9ab")
    assert short.exit_code == 1 and "shorter than 4" in short.stderr
    assert invoke(tmp_path, "show", "ffff").exit_code == 1
    # Human tables show the shortest unique prefix (at least 8); JSON the full id.
    table = ok(invoke(tmp_path, "list")).splitlines()
    firsts = sorted(line.split()[0] for line in table[1:])
    assert firsts == ["28fed440", "28fed441bb", "28fed441bc", "9abc0000"]
    assert {e["memory_id"] for e in json.loads(ok(invoke(tmp_path, "list", "--json")))["entries"]} == {
        "28fed440aaaa", "28fed441bbbb", "28fed441bccc", "9abc0000"}


def test_library_resolves_prefixes_on_both_paths(tmp_path: Path) -> None:
    from memstore.errors import AmbiguousIdError

    for memory_id in ("abcd1111", "abcd2222", "ffff0000"):
        put(tmp_path, {"memory_id": memory_id, "content": "x"})
    for catalog in (MemoryCatalog(tmp_path), MemoryCatalog(tmp_path, use_index=False)):
        assert catalog.resolve_id("abcd1") == "abcd1111"
        assert catalog.resolve_id("ffff0000") == "ffff0000"
        with pytest.raises(AmbiguousIdError) as info:
            catalog.resolve_id("abcd")
        assert info.value.candidates == ("abcd1111", "abcd2222")
        with pytest.raises(FileNotFoundError):
            catalog.resolve_id("0000")
        assert catalog.short_ids(["abcd1111", "ffff0000"], minimum=4) == {"abcd1111": "abcd1", "ffff0000": "ffff"}


def test_card_commands_take_prefixes(tmp_path: Path) -> None:
    storage = FailureCardStorage(tmp_path)
    card = FailureCard.create("r", "ImportError", "src/a.py", "boom", "task", [])
    storage.append(card)
    assert json.loads(ok(invoke(tmp_path, "failures", "show", card.id[:5], "--json")))["card"]["id"] == card.id
    assert ok(invoke(tmp_path, "failures", "invalidate", card.id[:4], "--reason", "fixed")).strip() == (
        f"invalidated {card.id}")
    assert storage.get_by_id(card.id).invalidated  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- 4. formats


def test_formats_on_listing_commands(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    first = catalog.add('says "hi", then, leaves', tags=["b", "a"])
    second = catalog.add("second")
    lines = ok(invoke(tmp_path, "list", "--format", "jsonl")).splitlines()
    assert [json.loads(line)["memory_id"] for line in lines] == [second.memory_id, first.memory_id]
    rows = list(csv.DictReader(io.StringIO(ok(invoke(tmp_path, "list", "--format", "csv")))))
    assert rows[1]["memory_id"] == first.memory_id and rows[1]["content"] == 'says "hi", then, leaves'
    assert rows[1]["tags"] == "a,b"
    assert json.loads(ok(invoke(tmp_path, "list", "--format", "json"))) == json.loads(
        ok(invoke(tmp_path, "list", "--json")))
    assert invoke(tmp_path, "list", "--json", "--format", "csv").exit_code == 2
    assert ok(invoke(tmp_path, "search", "nothing-matches", "--format", "jsonl")) == ""
    TeamMemory(tmp_path).add("a note")
    assert json.loads(ok(invoke(tmp_path, "team", "list", "--format", "jsonl")))["line"].endswith("a note")


def test_json_is_accepted_at_every_level_of_a_group(tmp_path: Path) -> None:
    FailureCardStorage(tmp_path).append(FailureCard.create("r", "E", "f.py", "m", "t", []))
    from memstore.cli import main

    for args in (["--json", "failures", "list"], ["failures", "--json", "list"], ["failures", "list", "--json"]):
        result = CliRunner().invoke(_Entry(main), ["--root", str(tmp_path), *args])
        assert result.exit_code == 0 and json.loads(result.stdout)["count"] == 1, args
    result = CliRunner().invoke(_Entry(main), ["team", "--root", str(tmp_path), "--json", "list"])
    assert json.loads(result.stdout) == {"count": 0, "lines": []}


class _Entry:
    """CliRunner wants a click command; main() is the entry point that maps errors to exit codes."""

    name = "memstore"

    def __init__(self, main: object) -> None:
        self._main = main

    def main(self, args: list[str], **_: object) -> None:
        raise SystemExit(self._main(args))  # type: ignore[operator]


def test_piped_tables_are_not_truncated(tmp_path: Path) -> None:
    long = "wide " * 100
    MemoryCatalog(tmp_path).add(long + "末尾")
    table = ok(invoke(tmp_path, "list"))
    assert "末尾" in table and "…" not in table


def test_table_fits_a_width_counting_display_columns() -> None:
    from memstore.cli_output import display_width, table

    rows = [("id1", "漢字" * 10), ("id2", "😀" * 14), ("id3", "plain")]
    text = table(("ID", "CONTENT"), rows, width=20)
    assert all(display_width(line) <= 20 for line in text.splitlines())
    assert text.splitlines()[1].endswith("…") and text.splitlines()[3].endswith("plain")


# ----------------------------------------------------------------------------- 5. safe deletes


def test_delete_and_quarantine_dry_run_change_nothing(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    for i in range(3):
        catalog.add(f"n{i}", branch_name="main")
    catalog.add("keep", branch_name="dev")
    before = (tmp_path / ".teaagent" / "memory.jsonl").read_bytes()
    preview = json.loads(ok(invoke(tmp_path, "delete", "--branch", "main", "--dry-run", "--json")))
    assert preview["would_delete"] == 3 and {e["content"] for e in preview["entries"]} == {"n0", "n1", "n2"}
    assert "would delete 3 entries" in ok(invoke(tmp_path, "delete", "--branch", "main", "--dry-run"))
    assert "would quarantine 3 entries" in ok(invoke(tmp_path, "quarantine", "--branch", "main", "--reason", "r",
                                                     "--dry-run"))
    assert (tmp_path / ".teaagent" / "memory.jsonl").read_bytes() == before
    # A dry run on a root without a store creates nothing, not even .teaagent/.
    bare = tmp_path / "bare"
    bare.mkdir()
    assert "would delete 0 entries" in ok(invoke(bare, "delete", "--branch", "main", "--dry-run"))
    assert "would quarantine 0 entries" in ok(invoke(bare, "quarantine", "--branch", "main", "--reason", "r",
                                                     "--dry-run"))
    assert list(bare.iterdir()) == []
    # stdin is not a terminal here: no prompt, as scripts always ran (and --yes says so explicitly).
    assert ok(invoke(tmp_path, "delete", "--branch", "main", "--yes")).strip() == "deleted 3 entries"
    assert ok(invoke(tmp_path, "quarantine", "--branch", "dev", "--reason", "r")).strip() == "quarantined 1 entry"


# ----------------------------------------------------------------------------- 6. every store writable


def test_failures_add_and_clear(tmp_path: Path) -> None:
    added = json.loads(ok(invoke(tmp_path, "failures", "add", "--error-type", "ImportError", "--file", "src/a.py",
                                 "--line", "3", "--message", "no module x", "--behavior", "block",
                                 "--reviewer", "human", "--confidence", "high", "--json")))["card"]
    storage = FailureCardStorage(tmp_path)
    card = storage.get_by_id(added["id"])
    assert card is not None and card.line_number == 3 and card.effective_behavior() == "block"
    shown = ok(invoke(tmp_path, "failures", "show", card.id))
    assert "timestamp:" in shown and "T" in shown.split("timestamp:")[1].split()[0]
    assert ok(invoke(tmp_path, "failures", "clear", card.id[:6])).strip() == f"removed {card.id}"
    assert storage.list_all() == []
    storage.append(FailureCard.create("r", "E", "f.py", "m", "t", []))
    assert invoke(tmp_path, "failures", "clear").exit_code == 2
    assert ok(invoke(tmp_path, "failures", "clear", "--all", "--yes")).strip() == "removed 1 card"
    assert storage.list_all() == []


def test_quarantined_list_and_show_keep_provenance(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = catalog.add("suspicious", branch_name="feature")
    catalog.quarantine_by_branch("feature", "untrusted source")
    listed = json.loads(ok(invoke(tmp_path, "quarantined", "--json")))["entries"]
    assert listed[0]["provenance"]["reason"] == "untrusted source"
    assert json.loads(ok(invoke(tmp_path, "quarantined", "list", "--json")))["entries"] == listed
    shown = ok(invoke(tmp_path, "quarantined", "show", entry.memory_id[:6]))
    assert "provenance.reason:" in shown and "untrusted source" in shown and "suspicious" in shown
    assert "provenance.original_branch: feature" in shown


def test_team_remove_rewrites_only_the_named_line(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    for text in ("alpha note", "beta note", "gamma"):
        team.add(text)
    before = team.path.read_bytes()
    assert invoke(tmp_path, "team", "remove", "note").exit_code == 1  # two notes match
    assert team.path.read_bytes() == before
    assert invoke(tmp_path, "team", "remove", "delta").exit_code == 1
    ok(invoke(tmp_path, "team", "remove", "beta"))
    lines = before.split(b"\n")
    assert team.path.read_bytes() == b"\n".join([lines[0], lines[2], lines[3]])
    ok(invoke(tmp_path, "team", "remove", "a", "--all"))
    assert team.list() == []


def test_human_timestamps_are_iso_8601(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("x")
    from memstore.pinned import PinnedFileStorage

    PinnedFileStorage(tmp_path).add("notes.md")
    row = ok(invoke(tmp_path, "pinned")).splitlines()[1].split()
    assert row[1].endswith("Z") and "T" in row[1]
    MemoryCatalog(tmp_path).add("x")
    assert ok(invoke(tmp_path, "list")).splitlines()[1].split()[1].endswith("Z")


# ----------------------------------------------------------------------------- 7. progress


def test_progress_bar_waits_before_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    from memstore import cli

    drawn: list[int] = []

    class Bar:
        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, step: int) -> None:
            drawn.append(step)

    monkeypatch.setattr(cli.click, "progressbar", lambda **_: Bar())
    clock = [100.0]
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock[0])
    with contextlib.ExitStack() as stack:
        bar = cli._ProgressBar(stack)
        bar(10, 100)  # within the first second: nothing drawn
        assert drawn == []
        clock[0] += 1.5
        bar(40, 100)
        bar(100, 100)
    assert sum(drawn) == 100


# ----------------------------------------------------------------------------- 8. export


def test_export_claude_md_keeps_a_persons_text_and_the_budget(tmp_path: Path) -> None:
    from memstore.claude_md import BEGIN_MARKER, END_MARKER

    catalog = MemoryCatalog(tmp_path)
    for i in range(400):
        catalog.add(f"memory number {i} " + "detail " * 20, tags=["auto-curated"] if i % 50 == 0 else [])
    TeamMemory(tmp_path).add("always run the linter")
    out = tmp_path / ".claude" / "MEMORY.md"
    out.parent.mkdir()
    out.write_text("# My notes\n\nwritten by hand\n", encoding="utf-8")
    report = json.loads(ok(invoke(tmp_path, "export", "claude-md", "--json")))
    first = out.read_bytes()
    text = first.decode()
    assert text.startswith("# My notes\n\nwritten by hand\n\n" + BEGIN_MARKER)
    assert text.rstrip().endswith(END_MARKER)
    assert len(first) <= 25 * 1024 and text.count("\n") <= 200 and report["bytes"] == len(first)
    assert "always run the linter" in text and "memory number 350" in text  # curated first, then newest
    # A second export replaces only its own section; text after it is kept too.
    out.write_text(text + "\nmore by hand\n", encoding="utf-8")
    ok(invoke(tmp_path, "export", "claude-md"))
    assert out.read_text(encoding="utf-8") == text + "\nmore by hand\n"
    ok(invoke(tmp_path, "export", "claude-md"))
    assert out.read_text(encoding="utf-8") == text + "\nmore by hand\n"
    other = tmp_path / "elsewhere.md"
    ok(invoke(tmp_path, "export", "claude-md", "--output", str(other)))
    assert other.read_text(encoding="utf-8").startswith(BEGIN_MARKER)


def test_export_is_idempotent_when_memories_quote_its_markers(tmp_path: Path) -> None:
    """An entry, tag or note holding a marker (or a newline in a tag) cannot end or split the section."""
    from memstore.claude_md import BEGIN_MARKER, END_MARKER

    catalog = MemoryCatalog(tmp_path)
    catalog.add(f"see {END_MARKER} here")
    catalog.add("tagged", tags=[f"x {BEGIN_MARKER}", "line\nbreak"])
    TeamMemory(tmp_path).add(f"team {END_MARKER}")
    out = tmp_path / "M.md"
    out.write_text("mine\n", encoding="utf-8")
    ok(invoke(tmp_path, "export", "claude-md", "--output", str(out)))
    first = out.read_text(encoding="utf-8")
    ok(invoke(tmp_path, "export", "claude-md", "--output", str(out)))
    assert out.read_text(encoding="utf-8") == first
    assert first.count(END_MARKER) == 1 and first.count("<!-- memstore:begin") == 1
    section = first.split(BEGIN_MARKER, 1)[1]
    assert all(line.startswith(("- ", "#")) or line in ("", END_MARKER) for line in section.splitlines()[1:])


def test_export_never_blocks_on_or_follows_what_memory_md_is(tmp_path: Path) -> None:
    """MEMORY.md under .claude/ is repository content: a FIFO or a link is refused, not read."""
    out = tmp_path / ".claude" / "MEMORY.md"
    out.parent.mkdir()
    os.mkfifo(out)
    fifo = invoke(tmp_path, "export", "claude-md")
    assert fifo.exit_code == 1 and "MEMORY.md" in fifo.stderr
    out.unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text("outside\n", encoding="utf-8")
    out.symlink_to(secret)
    linked = invoke(tmp_path, "export", "claude-md")
    assert linked.exit_code == 1 and secret.read_text(encoding="utf-8") == "outside\n"


def test_export_refuses_a_section_without_its_end_marker(tmp_path: Path) -> None:
    from memstore.claude_md import BEGIN_MARKER

    out = tmp_path / "M.md"
    out.write_text(f"mine\n{BEGIN_MARKER}\nhalf\n", encoding="utf-8")
    result = invoke(tmp_path, "export", "claude-md", "--output", str(out))
    assert result.exit_code == 1 and "end marker" in result.stderr
    assert out.read_text(encoding="utf-8") == f"mine\n{BEGIN_MARKER}\nhalf\n"



def test_team_remove_keeps_other_line_endings(tmp_path: Path) -> None:
    team = TeamMemory(tmp_path)
    team.path.parent.mkdir(parents=True)
    team.path.write_bytes(b"- a note\r- b note\r\n- c note\n- d note")
    assert team.remove("b note") == ["- b note"]
    assert team.path.read_bytes() == b"- a note\r- c note\n- d note"
    assert team.remove("d note") == ["- d note"]
    assert team.list() == ["- a note", "- c note"]
