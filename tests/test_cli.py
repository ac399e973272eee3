"""The `memstore` command, run as a real subprocess (``python -m memstore``) for every command.

Each test groups several invocations of one area; the library is only used in-process
to prepare fixtures (failure cards, a personal catalog) that have no command of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def run(root: Path, *args: str | bytes, home: Path | None = None, cwd: Path | None = None) -> Any:
    """Run ``python -m memstore ARGS`` with HOME moved into the test's directory."""
    env = dict(os.environ, HOME=str(home or root.parent / "home"), COLUMNS="200")
    env.pop("MEMSTORE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args],
        cwd=cwd or root,
        env=env,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=120,
        check=False,
    )


def ok(result: Any) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return str(result.stdout)


def ok_json(result: Any) -> Any:
    return json.loads(ok(result))


def error_line(result: Any, code: int, *, only_line: bool = True) -> str:
    """The one-line error of a failed run (exit ``code``): never a traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines, "no error message on stderr"
    if only_line:
        assert len(lines) == 1, lines
    assert lines[-1].startswith("memstore: error: "), lines
    return str(lines[-1])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    (tmp_path / "home").mkdir()
    return workspace


# ----------------------------------------------------------------------------- the command tree


def _walk(command: click.Command, path: str = "memstore") -> list[tuple[str, click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            found += _walk(sub, f"{path} {name}")
    return found


def test_every_command_and_option_has_help_text() -> None:
    from memstore.cli import cli

    missing = []
    for path, command in _walk(cli):
        if not (command.help or "").strip():
            missing.append(path)
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"{path} {param.opts[0]}")
    assert missing == []


def test_every_leaf_command_takes_root_and_json() -> None:
    from memstore.cli import cli

    leaves = [(path, c) for path, c in _walk(cli) if not isinstance(c, click.Group)]
    expected = (
        "add list show search delete quarantine quarantined.list quarantined.show health maintain pin unpin "
        "pinned recall reindex status watch failures.list failures.show failures.add failures.match "
        "failures.invalidate failures.clear failures.prune failures.auto-invalidate team.add team.list "
        "team.remove team.prompt export.claude-md mcp init doctor merge-json"
    )
    assert sorted(path for path, _ in leaves) == sorted(
        "memstore " + name.replace(".", " ") for name in expected.split()
    )
    for path, command in leaves:
        names = {param.name for param in command.params}
        # `mcp` speaks JSON-RPC on stdout whatever is asked: --json would mean nothing there.
        assert ({"root"} if path == "memstore mcp" else {"root", "as_json"}) <= names, path


def test_help_runs_for_groups_and_commands(root: Path) -> None:
    top = ok(run(root, "--help"))
    for name in ("add", "failures", "pin", "recall", "reindex", "status", "team", "watch"):
        assert name in top
    assert "--tokens" in ok(run(root, "team", "prompt", "--help"))
    assert "--error-type" in ok(run(root, "failures", "match", "--help"))
    bare = run(root)  # no subcommand: the help, as a usage error
    assert bare.returncode == 2 and bare.stderr.startswith("Usage: memstore")
    assert "Traceback" not in bare.stderr


def test_console_script_is_installed_and_runs(root: Path) -> None:
    script = Path(sys.executable).parent / "memstore"
    if not script.exists():
        pytest.skip(f"no console script at {script} (install with pip install -e .)")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "memstore" in result.stdout


def test_import_memstore_does_not_import_click(root: Path) -> None:
    code = "import sys, memstore; memstore.MemoryCatalog; print('click' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# ----------------------------------------------------------------------------- catalog commands


def test_add_list_show_search(root: Path) -> None:
    first = ok_json(
        run(root, "add", "Fix the flaky login test", "--tag", "auth", "--tag", " Flaky ",
            "--branch", "feat", "--run-id", "r1", "--json")
    )
    entry = first["entry"]
    assert first["quarantined"] is False
    assert set(entry) == {"memory_id", "content", "tags", "created_at", "branch_name", "run_id"}
    assert entry["tags"] == ["auth", "flaky"]
    assert (entry["branch_name"], entry["run_id"]) == ("feat", "r1")
    assert HEX32.match(entry["memory_id"])

    added = ok(run(root, "add", "second note\nabout the login cache"))
    match = re.fullmatch(r"added ([0-9a-f]{32})\n", added)
    assert match, added
    second_id = match.group(1)

    table = ok(run(root, "list")).splitlines()
    assert table[0].split() == ["ID", "CREATED", "TAGS", "CONTENT"]
    assert table[1].startswith(second_id[:8] + " ") and "second note about the login cache" in table[1]
    assert table[2].startswith(entry["memory_id"][:8] + " ") and "auth,flaky" in table[2]
    listed = ok_json(run(root, "list", "--limit", "1", "--json"))
    assert listed["count"] == 1 and listed["entries"][0]["memory_id"] == second_id

    shown = ok(run(root, "show", entry["memory_id"]))
    assert "branch_name: feat" in shown and "tags:        auth, flaky" in shown
    assert shown.rstrip().endswith("Fix the flaky login test")
    assert ok_json(run(root, "show", entry["memory_id"], "--json")) == {"entry": entry}

    found = ok_json(run(root, "search", "LOGIN flaky", "--json"))
    assert found["query"] == "LOGIN flaky" and found["count"] == 1
    assert found["entries"] == [entry]
    assert "no matches" in ok(run(root, "search", "nothing-like-this"))
    # Options may also come before the subcommand.
    before = ok_json(run(root.parent, "--root", str(root), "--json", "search", "login", "--limit", "5"))
    # Equal scores: the newer entry first.
    assert [e["memory_id"] for e in before["entries"]] == [second_id, entry["memory_id"]]


def test_unprintable_and_undecodable_content_is_printed_safely(root: Path) -> None:
    weird = os.fsencode("bell\x07 tab\there \U0001f600") + b" \xff byte"
    added = ok_json(run(root, "add", weird, "--json"))["entry"]
    assert "\udcff" in added["content"]  # the undecodable byte survives as an escape
    line = ok(run(root, "list")).splitlines()[1]
    assert "bell? tab here" in line
    assert ok_json(run(root, "search", "bell", "--json"))["entries"] == [added]


def test_delete_quarantine_and_quarantined(root: Path) -> None:
    catalog = MemoryCatalog(root)  # fixtures through the library: `add` has its own test
    for content, branch, run_id in [("a1", "b1", None), ("a2", "b1", "r9"), ("a3", None, "r9"),
                                    ("a4", "qb", None), ("a5", None, None)]:
        catalog.add(content, branch_name=branch, run_id=run_id)
    deleted = ok_json(run(root, "delete", "--branch", "b1", "--json"))
    assert deleted == {"deleted": 2, "branch": "b1", "run_id": None}
    assert ok(run(root, "delete", "--run-id", "r9")) == "deleted 1 entry\n"
    assert ok(run(root, "delete", "--run-id", "r9")) == "deleted 0 entries\n"
    moved = ok_json(run(root, "quarantine", "--branch", "qb", "--reason", "poisoned", "--json"))
    assert moved == {"quarantined": 1, "branch": "qb", "reason": "poisoned"}
    assert [e["content"] for e in ok_json(run(root, "list", "--json"))["entries"]] == ["a5"]

    added = ok_json(run(root, "add", "from the web", "--quarantine", "--provenance", '{"source": "web"}',
                        "--json"))
    assert added["quarantined"] is True
    assert ok(run(root, "add", "x", "--quarantine", "--provenance", "{}")).startswith("quarantined ")
    held = ok_json(run(root, "quarantined", "--json"))
    assert held["count"] == 3
    assert [e["content"] for e in held["entries"]] == ["x", "from the web", "a4"]
    lines = (root / ".teaagent" / "memory-quarantine.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["provenance"] == {"source": "web"}
    assert "a4" in ok(run(root, "quarantined", "--limit", "5"))
    assert "no quarantined entries" in ok(run(root, "quarantined", "--limit", "0"))
    # The quarantined entry never reached the catalog.
    assert ok_json(run(root, "search", "web", "--json"))["count"] == 0


def test_health_and_maintain(root: Path) -> None:
    ok(run(root, "add", "good entry"))
    with open(root / ".teaagent" / "memory.jsonl", "ab") as handle:
        handle.write(b"{not json\n")
    health = ok_json(run(root, "health", "--json"))
    assert health["total_entries"] == 1 and health["corrupt_entries"] == 1
    assert health["healthy"] is False and "index" in health
    text = ok(run(root, "health"))
    assert re.search(r"^corrupt_entries: +1$", text, re.M) and re.search(r"^healthy: +no$", text, re.M)
    report = ok_json(run(root, "maintain", "--json"))
    assert report["dry_run"] is True and report["corrupt_lines"] == 1 and report["would_change"] is True
    assert re.search(r"^would_change: +yes$", ok(run(root, "maintain")), re.M)


# ----------------------------------------------------------------------------- failure cards


def _card(
    storage: FailureCardStorage, file_path: str, task: str, *, error_type: str = "TypeError"
) -> FailureCard:
    card = FailureCard.create("run-1", error_type, file_path, f"{error_type} in {file_path}", task, [])
    storage.append(card)
    return card


def test_failures_list_show_match(root: Path) -> None:
    storage = FailureCardStorage(root)
    parser = _card(storage, "src/parser.py", "refactor parser tokenizer module", error_type="ValueError")
    other = _card(storage, "src/db.py", "migrate database schema")
    gone = _card(storage, "src/old.py", "legacy stuff")
    storage.invalidate(gone.id, reason="obsolete")

    cards = ok_json(run(root.parent, "--root", str(root), "--json", "failures", "list"))
    assert cards["count"] == 3 and cards["cards"][0] == parser.to_dict()
    active = ok_json(run(root, "failures", "list", "--active", "--json"))
    assert [c["id"] for c in active["cards"]] == [parser.id, other.id]
    table = ok(run(root, "failures", "list")).splitlines()
    assert table[0].split() == ["ID", "STATUS", "CONFIDENCE", "ERROR", "FILE", "MESSAGE"]
    assert table[3].startswith(gone.id) and "invalidated" in table[3]

    assert ok_json(run(root, "failures", "show", parser.id, "--json")) == {"card": parser.to_dict()}
    shown = ok(run(root, "failures", "show", f"  {other.id} "))
    assert re.search(r"^file_path: +src/db.py$", shown, re.M) and re.search(r"^active: +yes$", shown, re.M)
    assert "failure card not found: nope" in error_line(run(root, "failures", "show", "nope"), 1)

    matched = ok_json(run(root, "failures", "match", "--file", "src/parser.py", "--file", "README.md",
                          "--task", "tokenizer parser cleanup", "--error-type", "ValueError", "--json"))
    assert [c["id"] for c in matched["cards"]] == [parser.id]
    assert "no matching failure cards" in ok(run(root, "failures", "match", "--task", "unrelated words"))
    assert "--task" in error_line(run(root, "failures", "match", "--file", "x"), 2)


def test_failures_invalidate_prune_auto_invalidate(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print(1)\n")
    storage = FailureCardStorage(root)
    card = _card(storage, "src/app.py", "start the app server")
    doomed = _card(storage, "src/other.py", "something else")

    assert ok_json(run(root, "failures", "invalidate", doomed.id, "--reason", "fixed", "--json")) == {
        "id": doomed.id, "invalidated": True}
    result = run(root, "failures", "invalidate", "unknown1", "--reason", "x", "--json")
    assert json.loads(result.stdout) == {"id": "unknown1", "invalidated": False}
    assert "not found: unknown1" in error_line(result, 1)
    assert ok_json(run(root, "failures", "prune", "--json")) == {"pruned": 1}
    assert ok(run(root, "failures", "prune")) == "pruned 0 cards\n"

    first = ok_json(run(root, "failures", "auto-invalidate", "--json"))["counts"]
    assert first.get("file_signature_change") == 0  # the first run records baselines only
    (root / "src" / "app.py").write_text("print(2)\n")
    text = ok(run(root, "failures", "auto-invalidate"))
    assert re.search(r"^file_signature_change: +1$", text, re.M), text
    assert storage.get_by_id(card.id).invalidated  # type: ignore[union-attr]
    assert ok(run(root, "failures", "invalidate", card.id, "--reason", "again")) == f"invalidated {card.id}\n"


# ----------------------------------------------------------------------------- pins and team memory


def test_pin_unpin_pinned(root: Path) -> None:
    (root / "notes.md").write_text("# notes\n")
    (root / ".env").write_text("SECRET=1\n")
    assert ok(run(root, "pin", "notes.md")) == "pinned notes.md\n"
    refused = run(root, "pin", ".env", "--json")
    assert json.loads(refused.stdout) == {"path": ".env", "pinned": False}
    assert "not pinned: .env" in error_line(refused, 1, only_line=False)
    assert "secret" in refused.stderr  # the library's reason is shown too
    error_line(run(root, "pin", "notes.md"), 1, only_line=False)  # already pinned

    pins = ok_json(run(root, "pinned", "--json"))
    assert pins["count"] == 1 and pins["pinned"][0]["file_path"] == "notes.md"
    assert set(pins["pinned"][0]) == {"file_path", "pinned_at", "last_modified"}
    table = ok(run(root, "pinned")).splitlines()
    assert table[0].split() == ["PATH", "PINNED", "MODIFIED"] and table[1].startswith("notes.md ")

    assert ok_json(run(root, "unpin", "./notes.md", "--json")) == {"path": "./notes.md", "unpinned": True}
    assert "not pinned: notes.md" in error_line(run(root, "unpin", "notes.md"), 1)
    assert ok(run(root, "pinned")) == "no pinned files\n"


def test_team_add_list_prompt(root: Path) -> None:
    assert ok(run(root, "team", "list")) == "no team notes\n"
    assert "No shared team context" in ok(run(root, "team", "prompt"))
    line = ok(run(root, "team", "add", "Run make test before pushing")).rstrip("\n")
    assert re.fullmatch(r"- \S+ — Run make test before pushing", line), line
    added = ok_json(run(root, "team", "add", "multi\nline note", "--json"))
    assert added["line"].endswith(" — multi line note")
    lines = ok_json(run(root, "team", "list", "--json"))
    assert lines == {"count": 2, "lines": [line, added["line"]]}
    prompt = ok(run(root, "team", "prompt", "--tokens", "100"))
    assert prompt.splitlines()[0] == "[team-memory] Shared team context (2 entries):"
    small = ok_json(run(root, "team", "prompt", "--tokens", "15", "--json"))
    assert small["tokens"] == 15 and small["prompt"].splitlines()[1:] == [added["line"]]


# ----------------------------------------------------------------------------- recall and the index


def test_recall_searches_every_tier(root: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    MemoryCatalog.in_directory(home / ".config" / "teaagent", private=True).add("personal deploy habit")
    (root / ".claude").mkdir()
    (root / ".claude" / "MEMORY.md").write_text("# Deploy\n- deploy with the blue-green script\n")
    ok(run(root, "add", "project deploy checklist", "--tag", "ops"))

    found = ok_json(run(root, "recall", "deploy", "--json", home=home))
    assert set(found) == {"query", "project", "personal", "auto_memory"}
    assert [e["content"] for e in found["project"]] == ["project deploy checklist"]
    assert [e["content"] for e in found["personal"]] == ["personal deploy habit"]
    assert [e["content"] for e in found["auto_memory"]] == ["deploy with the blue-green script"]
    text = ok(run(root, "recall", "deploy", "--limit", "1", home=home))
    assert text.index("project (1)") < text.index("personal (1)") < text.index("auto_memory (1)")
    assert ok_json(run(root, "recall", "nothing-here", "--json", home=home))["project"] == []


def test_reindex_check_and_status(root: Path) -> None:
    ok(run(root, "add", "note number one"))
    ok(run(root, "add", "note number two"))
    report = ok_json(run(root, "reindex", "--full", "--json"))
    assert report["reindex"]["catalog"]["rows"] == 2 and "check" not in report
    assert re.search(r"^catalog.rows: +2$", ok(run(root, "reindex")), re.M)
    checked = ok_json(run(root, "reindex", "--check", "--json"))
    assert set(checked) == {"check"} and checked["check"]["equal"] is True
    assert "index matches the files" in ok(run(root, "reindex", "--full", "--check"))

    with open(root / ".teaagent" / "memory.jsonl", "ab") as handle:
        handle.write(b"not yet indexed\n")
    status = ok_json(run(root, "status", "--json"))["index"]["sources"][0]
    assert status["entries"] == 2 and status["bytes_behind"] == len(b"not yet indexed\n")
    lines = ok(run(root, "status")).splitlines()
    assert lines[0] == f"index: {Path('.teaagent', 'index', 'memstore.sqlite3')}"
    headers = ["SOURCE", "STATE", "ENTRIES", "INDEXED", "BEHIND", "FILE", "SIZE", "INDEX", "SIZE"]
    assert lines[1].split() == headers
    assert lines[2].split()[0] == str(Path(".teaagent", "memory.jsonl"))
    assert lines[2].split()[2] == "2" and " 16 B " in lines[2]

    # Damage the index behind memstore's back (a row lost): --check reports it and exits 1.
    # The connection is closed so SQLite folds its log back into the file: a log left beside a
    # closed index is never replayed (it could be planted), the index would just be rebuilt.
    with contextlib.closing(sqlite3.connect(root / ".teaagent" / "index" / "memstore.sqlite3")) as conn:
        conn.execute("DELETE FROM doc WHERE id = (SELECT max(id) FROM doc)")
        conn.commit()
    result = run(root, "reindex", "--check", "--json")
    assert json.loads(result.stdout)["check"]["equal"] is False
    assert "index differs from the files" in error_line(result, 1)
    ok(run(root, "reindex", "--full"))
    ok(run(root, "reindex", "--check"))


def test_reindex_draws_a_progress_bar_only_on_a_terminal(root: Path) -> None:
    catalog = MemoryCatalog(root)
    for number in range(5):
        catalog.add(f"entry {number}")
    plain = run(root, "reindex", "--full")
    assert "indexing" not in plain.stderr and re.search(r"^catalog.rows: +5$", ok(plain), re.M)

    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            # The bar appears only for builds longer than PROGRESS_DELAY; zero it for this small one.
            [sys.executable, "-c", "import sys, memstore.cli as c; c.PROGRESS_DELAY = 0; sys.exit(c.main())",
             "reindex", "--full", "--root", str(root)],
            stdout=subprocess.PIPE, stderr=terminal, env=dict(os.environ, HOME=str(root.parent / "home")),
        )
        os.close(terminal)
        stdout, _ = process.communicate(timeout=120)
        drawn = b""
        with contextlib.suppress(OSError):  # EIO once the terminal's other end is closed
            while chunk := os.read(controller, 4096):
                drawn += chunk
    finally:
        os.close(controller)
    assert process.returncode == 0
    assert b"indexing" in drawn and b"100%" in drawn
    assert b"rows:" in stdout and b"indexing" not in stdout


def test_an_unusable_index_is_a_one_line_error_and_queries_still_answer(root: Path) -> None:
    ok(run(root, "add", "hello there"))
    (root / ".teaagent" / "index").write_text("a file where the index directory belongs")
    assert "index" in error_line(run(root, "reindex"), 1)
    assert "index" in error_line(run(root, "reindex", "--check"), 1)
    found = run(root, "search", "hello", "--json")
    assert json.loads(ok(found))["count"] == 1  # answered by a scan, with a warning
    assert "warning" in found.stderr


# ----------------------------------------------------------------------------- errors and exit codes


def test_usage_errors_exit_2_with_one_line(root: Path) -> None:
    cases = [
        (["add", "x", "--quarantine", "--provenance", "{bad"], "--provenance"),
        (["add", "x", "--quarantine", "--provenance", "[1, 2]"], "JSON object"),
        (["add", "x", "--quarantine"], "--provenance"),
        (["list", "--limit", "abc"], "--limit"),
        (["search", "x", "--limit", "-1"], "--limit"),
        (["delete"], "exactly one"),
        (["delete", "--branch", "a", "--run-id", "b"], "exactly one"),
        (["quarantine", "--branch", "a"], "--reason"),
        (["no-such-command"], "no-such-command"),
        (["team", "prompt", "--tokens", "many"], "--tokens"),
    ]
    for args, expected in cases:
        assert expected in error_line(run(root, *args), 2), args
    assert not (root / ".teaagent" / "memory-quarantine.jsonl").exists()


def test_runtime_errors_exit_1_with_one_line(root: Path, tmp_path: Path) -> None:
    assert "not found: deadbeef" in error_line(run(root, "show", "  deadbeef  "), 1)
    assert "empty" in error_line(run(root, "add", "   "), 1)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = error_line(run(root, "add", "x", "--root", str(blocker / "sub")), 1)
    assert "a-file" in message
    error_line(run(root, "list", "--root", str(blocker / "sub")), 1)
    assert "is a file" in error_line(run(root, "list", "--root", str(blocker)), 2)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_store_reads_but_refuses_writes(root: Path) -> None:
    ok(run(root, "add", "kept"))
    store = root / ".teaagent"
    store.chmod(0o500)
    try:
        assert ok_json(run(root, "search", "kept", "--json"))["count"] == 1
        error_line(run(root, "add", "new"), 1, only_line=False)
    finally:
        store.chmod(0o700)


def test_keyboard_interrupt_exits_130_quietly(root: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from memstore import cli

    def interrupted(self: MemoryCatalog, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryCatalog, "list", interrupted)
    assert cli.main(["list", "--root", str(root)]) == 130
    assert "Traceback" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- the demo


def _demo(root: Path, *args: str) -> Any:
    repo = Path(__file__).resolve().parent.parent  # benchmarks/ is importable from here
    return subprocess.run(
        [sys.executable, "-m", "memstore.demo", "--size", "400", "--root", str(root), *args],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )


def test_demo_builds_the_index_and_agrees_with_the_scan(root: Path) -> None:
    out = ok(_demo(root / "demo"))
    assert "Built the index" in out
    searches = [line for line in out.splitlines() if line.startswith("  '")]
    assert len(searches) == 6
    assert all("same as the scan" in line for line in searches), searches
    assert (root / "demo" / ".teaagent" / "index" / "memstore.sqlite3").exists()
    refused = _demo(root / "demo")  # never overwrites an existing catalog
    assert refused.returncode == 2 and "already holds a catalog" in refused.stderr


def test_demo_without_a_usable_index_shows_scan_timings(root: Path) -> None:
    (root / ".teaagent").mkdir()
    (root / ".teaagent" / "index").write_text("not a directory")
    out = ok(_demo(root))
    assert "index is unavailable" in out
    searches = [line for line in out.splitlines() if line.startswith("  '")]
    assert len(searches) == 6 and all(" scan " in line and "index" not in line for line in searches)


# ----------------------------------------------------------------------------- hostile stored numbers (issue 9)


def test_pinned_prints_any_stored_timestamp(root: Path) -> None:
    (root / "a.md").write_text("a\n")
    (root / "b.md").write_text("b\n")
    (root / "c.md").write_text("c\n")
    pinned = root / ".teaagent" / "memory" / "pinned.json"
    pinned.parent.mkdir(parents=True, exist_ok=True)
    pinned.write_text(
        '[{"file_path": "a.md", "pinned_at": 1e300, "last_modified": -1e300},'
        ' {"file_path": "b.md", "pinned_at": 1' + "0" * 400 + ', "last_modified": 0},'
        ' {"file_path": "c.md", "pinned_at": 0, "last_modified": 253402300800}]'
    )
    table = ok(run(root, "pinned"))
    assert "a.md" in table and "1e+300" in table and "-1e+300" in table
    assert "b.md" not in table  # 10**400 is no timestamp: the pin is skipped
    assert "c.md" in table and "1970-01-01T00:00:00Z" in table and "253402300800.0" in table
    assert ok_json(run(root, "pinned", "--json"))["count"] == 2
    assert ok(run(root, "unpin", "c.md")) == "unpinned c.md\n"


def test_failure_cards_with_unusable_numbers_never_traceback(root: Path) -> None:
    storage = FailureCardStorage(root)
    good = FailureCard.create("r", "TypeError", "src/app.py", "boom", "fix database migration models", [])
    storage.append(good)
    records = json.loads(storage.path.read_text())
    hostile = dict(records[0], id="bad", timestamp="BIG")
    storage.path.write_text(json.dumps([records[0], hostile]).replace('"BIG"', "1" + "0" * 400))
    assert json.loads(storage.path.read_text())[1]["timestamp"] == 10**400
    assert [card["id"] for card in ok_json(run(root, "failures", "list", "--json"))["cards"]] == [good.id]
    assert ok_json(run(root, "failures", "list", "--active", "--json"))["count"] == 1
    error_line(run(root, "failures", "show", "bad"), 1)
    ok(run(root, "failures", "show", good.id))
    matched = ok_json(run(root, "failures", "match", "--file", "src/app.py", "--task", "database migration models",
                          "--json"))
    assert [card["id"] for card in matched["cards"]] == [good.id]
    ok(run(root, "failures", "prune"))
    ok(run(root, "failures", "auto-invalidate"))
    ok(run(root, "status"))


def test_recall_with_memory_md_linked_to_dev_zero(root: Path) -> None:
    claude = root / ".claude"
    claude.mkdir()
    (claude / "MEMORY.md").symlink_to("/dev/zero")
    result = run(root, "recall", "anything")
    ok(result)
    assert "MEMORY.md" in result.stderr  # the warning says what was skipped
    (claude / "MEMORY.md").unlink()
    os.mkfifo(claude / "MEMORY.md")
    ok(run(root, "recall", "anything"))
