"""``memstore mcp`` end to end: a real server subprocess, the SDK's own client, the library as the oracle."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memstore import reports
from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.failure_cards import FailureCardStorage
from memstore.hierarchy import MemoryHierarchy
from memstore.mcp_tools import ToolError, available_tools, check_arguments
from memstore.pinned import PinnedFileStorage
from memstore.team import TeamMemory
from memstore.workspace import Workspace, status_report
from tests.mcp_helpers import error_message, run_with_client, server_env, server_params, structured

READ_TOOLS = {
    "memory_search",
    "memory_recall",
    "memory_list",
    "memory_show",
    "failure_cards_match",
    "pins_list",
    "team_notes",
    "memory_status",
}
WRITE_TOOLS = {"memory_add", "failure_card_add", "pin_add", "team_note_add"}
DESTRUCTIVE_TOOLS = {"memory_delete_by_branch", "memory_quarantine_by_branch"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def seeded(root: Path, home: Path) -> Path:
    """A workspace with something in every store, written through the library."""
    catalog = MemoryCatalog(root)
    catalog.add("Run pytest with -x when debugging flaky tests", tags=["testing", "ci"])
    catalog.add("The login cache lives in redis", tags=["auth"], branch_name="feat/login")
    catalog.add("Flaky tests: the redis fixture needs a fresh port", tags=["testing"], branch_name="feat/login")
    catalog.add("auto curated tip about tests", tags=["auto-curated"])
    MemoryCatalog.in_directory(home / ".config" / "teaagent", private=True).add("personal: prefer tests -x")
    (root / ".claude").mkdir()
    (root / ".claude" / "MEMORY.md").write_text("# Notes\n- flaky tests need a retry budget\n", encoding="utf-8")
    cards = FailureCardStorage(root)
    for behavior, reviewer, confidence in (
        ("block", "human", "high"),
        ("warning", "auto", "low"),
        ("block", "auto", "high"),
    ):
        cards.append(
            FailureCard.create(
                "run-1",
                "ImportError",
                "src/app.py",
                "cannot import name x",
                "refactor the app module imports",
                [],
                warning_behavior=behavior,
                reviewer_type=reviewer,
                confidence=confidence,
            )
        )
    (root / "ARCHITECTURE.md").write_text("layers\n", encoding="utf-8")
    (root / ".env").write_text("SECRET=1\n", encoding="utf-8")
    PinnedFileStorage(root).add("ARCHITECTURE.md")
    TeamMemory(root).add("staging is frozen until Friday")
    return root


def _tool_map(listed: Any) -> dict[str, Any]:
    return {tool.name: tool for tool in listed.tools}


# ----------------------------------------------------------------------------- the handshake and the tool list


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_initialize_and_list_tools(root: Path, home: Path, tmp_path: Path, mode: str) -> None:
    async def body(client: Client) -> Any:
        return client.server_info, client.server_capabilities, await client.list_tools()

    info, capabilities, listed = run_with_client(server_params(root, home), tmp_path / "err.log", body, mode=mode)
    assert info is not None and info.name == "memstore"
    assert capabilities.tools is not None and capabilities.resources is not None
    tools = _tool_map(listed)
    assert set(tools) == READ_TOOLS | WRITE_TOOLS  # nothing destructive without the flag
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 40, name
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.annotations.read_only_hint is (name in READ_TOOLS), name
        assert tool.annotations.destructive_hint is False, name
    assert tools["memory_add"].input_schema["required"] == ["content"]
    assert tools["memory_search"].input_schema["properties"]["limit"]["minimum"] == 0


def test_destructive_tools_only_with_the_flag(root: Path, home: Path, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        return await client.list_tools()

    params = server_params(root, home, extra=["--allow-destructive"])
    tools = _tool_map(run_with_client(params, tmp_path / "err.log", body))
    assert set(tools) == READ_TOOLS | WRITE_TOOLS | DESTRUCTIVE_TOOLS
    for name in DESTRUCTIVE_TOOLS:
        assert tools[name].annotations.destructive_hint is True
        assert tools[name].annotations.read_only_hint is False


# ----------------------------------------------------------------------------- every tool against the library


def test_every_read_tool_answers_what_the_library_answers(seeded: Path, home: Path, tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_search", {"query": "tests"}),
        ("memory_search", {"query": "TESTS flaky", "limit": 1}),
        ("memory_search", {"query": "   "}),
        ("memory_recall", {"query": "tests"}),
        ("memory_list", {}),
        ("memory_list", {"limit": 2}),
        ("failure_cards_match", {"file_paths": ["src/app.py"], "task_description": "refactor the app module"}),
        ("failure_cards_match", {"file_paths": [], "task_description": "x", "error_type": "ImportError", "limit": 10}),
        ("pins_list", {}),
        ("team_notes", {}),
        ("team_notes", {"limit_tokens": 1}),
        ("memory_status", {}),
    ]

    async def body(client: Client) -> Any:
        answers = [structured(await client.call_tool(name, args)) for name, args in calls]
        first_id = answers[4]["entries"][-1]["memory_id"]
        answers.append(structured(await client.call_tool("memory_show", {"memory_id": f"  {first_id} "})))
        return answers

    answers = run_with_client(server_params(seeded, home), tmp_path / "err.log", body)
    catalog = MemoryCatalog(seeded)
    cards = FailureCardStorage(seeded)
    team = TeamMemory(seeded)
    expected = [
        reports.entries_report(catalog.search("tests", limit=10), query="tests"),
        reports.entries_report(catalog.search("TESTS flaky", limit=1), query="TESTS flaky"),
        reports.entries_report([], query="   "),
        reports.recall_report("tests", MemoryHierarchy(seeded).search_all("tests", limit=10)),
        reports.entries_report(catalog.list(limit=10)),
        reports.entries_report(catalog.list(limit=2)),
        reports.matching_cards_report(cards.find_matching(["src/app.py"], "refactor the app module", None, 3)),
        reports.matching_cards_report(cards.find_matching([], "x", "ImportError", 10)),
        reports.pins_report(PinnedFileStorage(seeded).list_all()),
        {"prompt": team.inject_prompt(limit_tokens=2048), "tokens": 2048},
        {"prompt": team.inject_prompt(limit_tokens=1), "tokens": 1},
    ]
    for (name, args), answer, want in zip(calls, answers, expected, strict=False):
        assert answer == json.loads(reports.json_text(want)), (name, args)
    assert [len(answers[3][tier]) for tier in ("project", "personal", "auto_memory")] == [3, 1, 1]
    behaviors = [card["effective_behavior"] for card in answers[6]["cards"]]
    assert sorted(behaviors) == ["block", "warning", "warning"]

    status = answers[11]
    want_status = status_report(Workspace(seeded))
    assert (
        status["counts"]
        == want_status["counts"]
        == {
            "entries": 4,
            "corrupt_entries": 0,
            "quarantined_entries": 0,
            "failure_cards": 3,
            "active_failure_cards": 3,
            "pinned_files": 1,
            "team_notes": 1,
        }
    )
    assert status["health"]["healthy"] is True
    assert [source["state"] for source in status["index"]["sources"]] == ["fresh", "fresh"]

    shown = answers[12]
    assert shown == reports.entry_report(catalog.show(shown["entry"]["memory_id"]))


def test_every_write_tool_lands_in_the_files(seeded: Path, home: Path, tmp_path: Path) -> None:
    async def body(client: Client) -> list[dict[str, Any]]:
        return [
            structured(
                await client.call_tool(
                    "memory_add",
                    {"content": "Use uv for installs", "tags": ["Tooling", "ci"], "branch_name": "b1", "run_id": "r1"},
                )
            ),
            structured(await client.call_tool("memory_add", {"content": "plain note"})),
            structured(
                await client.call_tool(
                    "failure_card_add",
                    {
                        "run_id": "run-9",
                        "error_type": "TypeError",
                        "file_path": "src/b.py",
                        "error_message": "bad operand",
                        "task_description": "speed up the parser loop",
                        "context_files": ["src/c.py"],
                        "line_number": 12,
                        "confidence": "high",
                        "ttl_seconds": 0,
                        "warning_behavior": "info",
                        "evidence_command": "pytest -q",
                        "evidence_exit_code": 1,
                    },
                )
            ),
            structured(await client.call_tool("pin_add", {"path": "./notes.md"})),
            structured(await client.call_tool("team_note_add", {"text": "deploys on\nTuesdays"})),
            structured(await client.call_tool("memory_search", {"query": "uv installs"})),
        ]

    (seeded / "notes.md").write_text("n\n", encoding="utf-8")
    added, plain, card, pin, note, search = run_with_client(server_params(seeded, home), tmp_path / "err.log", body)
    catalog = MemoryCatalog(seeded)
    assert added == reports.entry_report(catalog.show(added["entry"]["memory_id"]), quarantined=False)
    assert added["entry"]["tags"] == ["ci", "tooling"] and added["entry"]["branch_name"] == "b1"
    assert plain["entry"]["tags"] == [] and plain["entry"]["run_id"] is None
    assert search["entries"] == [added["entry"]]
    stored = FailureCardStorage(seeded).get_by_id(card["card"]["id"])
    assert stored is not None and card == reports.card_report(stored)
    assert stored.expires_at is None and stored.line_number == 12 and stored.context_files == ["src/c.py"]
    assert pin == {"path": "./notes.md", "pinned": True}
    assert PinnedFileStorage(seeded).is_pinned("notes.md")
    assert note["line"] == TeamMemory(seeded).list()[-1] and note["line"].endswith(" — deploys on Tuesdays")


def test_destructive_tools_match_the_library(seeded: Path, home: Path, tmp_path: Path) -> None:
    MemoryCatalog(seeded).add("old branch note", branch_name="old")

    async def body(client: Client) -> list[dict[str, Any]]:
        return [
            structured(
                await client.call_tool("memory_quarantine_by_branch", {"branch_name": "feat/login", "reason": "r"})
            ),
            structured(await client.call_tool("memory_delete_by_branch", {"branch_name": "old"})),
            structured(await client.call_tool("memory_delete_by_branch", {"branch_name": "no-such-branch"})),
            structured(await client.call_tool("memory_status", {})),
        ]

    params = server_params(seeded, home, extra=["--allow-destructive"])
    moved, deleted, none, status = run_with_client(params, tmp_path / "err.log", body)
    assert moved == {"quarantined": 2, "branch": "feat/login", "reason": "r"}
    assert deleted == {"deleted": 1, "branch": "old", "run_id": None}
    assert none["deleted"] == 0
    catalog = MemoryCatalog(seeded)
    assert {entry.branch_name for entry in catalog.list(limit=100)} == {None}
    assert len(catalog.list_quarantined(limit=100)) == 2
    assert status["counts"]["entries"] == 2 and status["counts"]["quarantined_entries"] == 2


def test_destructive_tools_are_refused_without_the_flag(seeded: Path, home: Path, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        return await client.call_tool("memory_delete_by_branch", {"branch_name": "feat/login"})

    result = run_with_client(server_params(seeded, home), tmp_path / "err.log", body)
    assert "unknown tool 'memory_delete_by_branch'" in error_message(result)
    assert len(MemoryCatalog(seeded).list(limit=100)) == 4


def test_resources_are_the_library_prompt_blocks(seeded: Path, home: Path, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        listed = await client.list_resources()
        texts = {str(r.uri): (await client.read_resource(str(r.uri))).contents[0] for r in listed.resources}
        try:
            await client.read_resource("memstore://nothing")
        except Exception as exc:  # a protocol error, and the server goes on
            unknown = str(exc)
        after = await client.list_tools()
        return texts, unknown, after

    texts, unknown, after = run_with_client(server_params(seeded, home), tmp_path / "err.log", body)
    assert texts["memstore://context"].text == MemoryHierarchy(seeded).to_prompt_context()
    assert texts["memstore://team-notes"].text == TeamMemory(seeded).inject_prompt()
    assert json.loads(texts["memstore://pinned"].text) == reports.pins_report(PinnedFileStorage(seeded).list_all())
    assert texts["memstore://pinned"].mime_type == "application/json"
    assert "unknown resource" in unknown
    assert after.tools


# ----------------------------------------------------------------------------- bad input


BAD_CALLS: list[tuple[str, Any, str]] = [
    ("memory_search", {}, "missing required argument 'query'"),
    ("memory_search", {"query": 5}, "argument 'query' must be a string, not an integer"),
    ("memory_search", {"query": "x", "limit": -1}, "argument 'limit' must be >= 0, got -1"),
    ("memory_search", {"query": "x", "limit": "10"}, "argument 'limit' must be an integer, not a string"),
    ("memory_search", {"query": "x", "limit": True}, "argument 'limit' must be an integer, not a boolean"),
    ("memory_search", {"query": "x", "limit": 2.5}, "argument 'limit' must be an integer, not a number"),
    ("memory_search", {"query": "x", "colour": 1}, "unknown argument 'colour'"),
    ("memory_recall", {"query": None}, "argument 'query' must be a string, not null"),
    ("memory_list", {"limit": -5}, "argument 'limit' must be >= 0"),
    ("memory_add", {"content": ""}, "memory content cannot be empty"),
    ("memory_add", {"content": " \n\t "}, "memory content cannot be empty"),
    ("memory_add", {"content": ["a"]}, "argument 'content' must be a string, not an array"),
    ("memory_add", {"content": "x", "tags": "ci"}, "argument 'tags' must be an array, not a string"),
    ("memory_add", {"content": "x", "tags": ["ok", 3]}, "argument 'tags[1]' must be a string, not an integer"),
    ("memory_add", {"content": "x", "branch_name": 7}, "argument 'branch_name' must be a string or null"),
    ("memory_show", {"memory_id": "0123456789abcdef"}, "memory entry not found: 0123456789abcdef"),
    ("memory_show", {"memory_id": "   "}, "memory entry not found"),
    ("memory_show", {}, "missing required argument 'memory_id'"),
    (
        "failure_cards_match",
        {"file_paths": "src/a.py", "task_description": "t"},
        "argument 'file_paths' must be an array",
    ),
    ("failure_cards_match", {"file_paths": [], "task_description": "t", "limit": -1}, "argument 'limit' must be >= 0"),
    ("failure_card_add", {"run_id": "r"}, "missing required argument 'error_type'"),
    (
        "failure_card_add",
        {
            "run_id": "r",
            "error_type": "E",
            "file_path": "f",
            "error_message": "m",
            "task_description": "t",
            "confidence": "sure",
        },
        "argument 'confidence' must be one of 'low', 'medium', 'high'",
    ),
    ("pin_add", {"path": "../outside.txt"}, "path must not contain '..'"),
    ("pin_add", {"path": "/etc/passwd"}, "path must be relative to the root"),
    ("pin_add", {"path": ".env"}, "path looks like a secret"),
    ("pin_add", {"path": "link-out"}, "path resolves outside the root"),
    ("pin_add", {"path": "missing.md"}, "file does not exist"),
    ("pin_add", {"path": "ARCHITECTURE.md"}, "already pinned"),
    ("team_notes", {"limit_tokens": -1}, "argument 'limit_tokens' must be >= 0"),
    ("team_note_add", {"text": "\n \n"}, "team memory entry cannot be empty"),
    ("memory_status", {"verbose": True}, "unknown argument 'verbose'"),
    ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
]


def _store_files(root: Path) -> dict[str, bytes]:
    store = root / ".teaagent"
    return {
        str(path.relative_to(store)): path.read_bytes()
        for path in sorted(store.rglob("*"))
        if path.is_file() and "index" not in path.parts and not path.name.endswith(".lock")
    }


def test_bad_input_is_a_one_line_tool_error_and_changes_nothing(seeded: Path, home: Path, tmp_path: Path) -> None:
    (seeded / "link-out").symlink_to(tmp_path / "elsewhere.txt")
    (tmp_path / "elsewhere.txt").write_text("x", encoding="utf-8")
    before = _store_files(seeded)

    async def body(client: Client) -> Any:
        results = [await client.call_tool(name, args) for name, args, _ in BAD_CALLS]
        return results, structured(await client.call_tool("memory_list", {"limit": 100}))

    results, listing = run_with_client(server_params(seeded, home), tmp_path / "err.log", body)
    for (name, args, fragment), result in zip(BAD_CALLS, results, strict=True):
        assert fragment in error_message(result), (name, args, result.content[0].text)
    assert listing["count"] == 4  # the server is alive and nothing was added
    assert _store_files(seeded) == before  # no partial file, no stray temp file, nothing changed
    assert "Traceback" not in (tmp_path / "err.log").read_text(encoding="utf-8")


def _tree(*folders: Path) -> list[str]:
    return sorted(str(path) for folder in folders for path in folder.rglob("*"))


def test_reads_on_a_root_without_a_store_create_nothing(root: Path, home: Path, tmp_path: Path) -> None:
    """DESIGN.md §9: a read creates nothing, as the CLI's reads; the first write then creates the store."""
    reads: list[tuple[str, dict[str, Any]]] = [
        ("memory_search", {"query": "x"}),
        ("memory_recall", {"query": "x"}),
        ("memory_list", {}),
        ("failure_cards_match", {"file_paths": ["a.py"], "task_description": "edit a"}),
        ("pins_list", {}),
        ("team_notes", {}),
        ("memory_status", {}),
    ]

    async def body(client: Client) -> Any:
        answers = [structured(await client.call_tool(name, args)) for name, args in reads]
        missing = await client.call_tool("memory_show", {"memory_id": "abc"})
        for uri in ("memstore://context", "memstore://team-notes", "memstore://pinned"):
            await client.read_resource(uri)
        created_by_reads = _tree(root, home)
        added = structured(await client.call_tool("memory_add", {"content": "first note"}))
        listed = structured(await client.call_tool("memory_list", {}))
        recalled = structured(await client.call_tool("memory_recall", {"query": "first"}))
        return answers, missing, created_by_reads, added, listed, recalled

    answers, missing, created_by_reads, added, listed, recalled = run_with_client(
        server_params(root, home), tmp_path / "err.log", body
    )
    assert created_by_reads == []
    assert answers[0]["count"] == 0 and answers[2]["count"] == 0 and answers[3]["count"] == 0
    assert answers[6]["counts"]["entries"] == 0 and answers[6]["counts"]["failure_cards"] == 0
    assert "not found" in error_message(missing)
    assert [entry["memory_id"] for entry in listed["entries"]] == [added["entry"]["memory_id"]]
    assert [entry["memory_id"] for entry in recalled["project"]] == [added["entry"]["memory_id"]]
    assert (root / ".teaagent" / "memory.jsonl").is_file()


def test_a_root_removed_while_the_server_runs_is_not_recreated(root: Path, home: Path, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        structured(await client.call_tool("memory_add", {"content": "before"}))
        shutil.rmtree(root)
        writes = [
            await client.call_tool("memory_add", {"content": "after"}),
            await client.call_tool("team_note_add", {"text": "after"}),
            await client.call_tool(
                "failure_card_add",
                {"run_id": "r", "error_type": "E", "file_path": "a.py", "error_message": "m", "task_description": "t"},
            ),
        ]
        return writes, await client.call_tool("memory_list", {})

    writes, listing = run_with_client(server_params(root, home), tmp_path / "err.log", body)
    for result in [*writes, listing]:
        assert "no longer exists" in error_message(result)
    assert not root.exists()


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_number_is_named_as_such(value: float) -> None:
    """JSON text such as 1e400 parses to inf: the message must not read "must be a number, not a number"."""
    spec = available_tools(allow_destructive=False)["failure_card_add"]
    card = {"run_id": "r", "error_type": "E", "file_path": "a.py", "error_message": "m", "task_description": "t"}
    with pytest.raises(ToolError, match="'ttl_seconds' must be a finite number"):
        check_arguments(spec, {**card, "ttl_seconds": value})


def test_a_missing_root_is_a_one_line_error(tmp_path: Path, home: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memstore", "mcp", "--root", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env={**os.environ, **server_env(home)},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode == 1
    expected = f"memstore: error: --root: directory does not exist: {tmp_path / 'nope'}"  # memstore.root
    assert result.stderr.strip().splitlines() == [expected]
    assert not (tmp_path / "nope").exists()


def test_lone_surrogates_reach_the_client(root: Path, home: Path, tmp_path: Path) -> None:
    """JSON on the wire is UTF-8: the text block keeps the escape, the structured copy shows U+FFFD."""
    store = root / ".teaagent"
    store.mkdir()
    line = {"memory_id": "s1", "content": "bad \udc80 byte", "tags": [], "created_at": "2026-01-01T00:00:00+00:00"}
    (store / "memory.jsonl").write_text(json.dumps(line) + "\n", encoding="ascii")

    async def body(client: Client) -> Any:
        return await client.call_tool("memory_search", {"query": "bad"})

    found = run_with_client(server_params(root, home), tmp_path / "err.log", body)
    assert found.structured_content["entries"][0]["content"] == "bad \ufffd byte"
    assert json.loads(found.content[0].text)["entries"][0]["content"] == "bad \udc80 byte"

    # The SDK client cannot even send one.  A raw client can, as an escape in the JSON text:
    # the SDK's transport drops a line it cannot parse (as it drops garbage), and goes on.
    process = _start_raw(root, home)
    try:
        _rpc(process, _call(1, "memory_add", {"content": "also \ud800 here"}))
        assert process.stdin is not None
        process.stdin.write(b"not json at all{\n")
        _rpc(process, _call(2, "memory_list", {}))
        listing = _reply(process)
    finally:
        process.kill()
        process.wait()
    assert listing["id"] == 2 and listing["result"]["structuredContent"]["count"] == 1


# ----------------------------------------------------------------------------- other writers and a killed server

WRITER = """
import sys
from memstore.catalog import MemoryCatalog
catalog = MemoryCatalog(sys.argv[1])
for i in range(int(sys.argv[2])):
    catalog.add(f"outside writer note {i}", tags=["outside"])
"""


def test_other_processes_append_while_the_server_runs(root: Path, home: Path, tmp_path: Path) -> None:
    count = 60

    async def body(client: Client) -> Any:
        import anyio

        structured(await client.call_tool("memory_add", {"content": "warm the index up"}))
        writer = await anyio.open_process([sys.executable, "-c", WRITER, str(root), str(count)])
        ours = []
        seen: list[int] = []
        while writer.returncode is None:
            ours.append(structured(await client.call_tool("memory_add", {"content": f"server note {len(ours)}"})))
            seen.append(
                structured(await client.call_tool("memory_search", {"query": "outside writer", "limit": 1000}))["count"]
            )
            await anyio.sleep(0.01)
        assert await writer.wait() == 0
        final = structured(await client.call_tool("memory_search", {"query": "outside writer", "limit": 1000}))
        total = structured(await client.call_tool("memory_status", {}))
        return ours, seen, final, total

    ours, seen, final, total = run_with_client(server_params(root, home), tmp_path / "err.log", body)
    assert seen == sorted(seen)  # searches see appends as they come, never lose one
    assert final["count"] == count
    assert final == json.loads(
        reports.json_text(
            reports.entries_report(MemoryCatalog(root).search("outside writer", limit=1000), query="outside writer")
        )
    )
    ids = [entry.memory_id for entry in MemoryCatalog(root, use_index=False).list(limit=10_000)]
    assert len(ids) == len(set(ids)) == count + len(ours) + 1  # no lost write on either side
    assert {added["entry"]["memory_id"] for added in ours} <= set(ids)
    assert total["counts"]["entries"] == len(ids)


def _rpc(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def _call(number: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _reply(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert process.stdout is not None
    return dict(json.loads(process.stdout.readline()))


def _start_raw(root: Path, home: Path) -> subprocess.Popen[bytes]:
    """A server driven by hand-written JSON-RPC lines (the initialize handshake done)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "memstore", "mcp", "--root", str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **server_env(home)},
    )
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    _rpc(process, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    assert _reply(process)["id"] == 0
    _rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return process


def test_a_killed_server_loses_no_acknowledged_add(root: Path, home: Path, tmp_path: Path) -> None:
    process = _start_raw(root, home)
    assert process.stdout is not None
    try:
        for number in range(1, 201):  # many in flight: the kill lands in the middle of them
            _rpc(process, _call(number, "memory_add", {"content": f"note {number}"}))
        acknowledged: list[str] = []
        deadline = time.monotonic() + 60
        while len(acknowledged) < 20 and time.monotonic() < deadline:
            reply = json.loads(process.stdout.readline())
            acknowledged.append(reply["result"]["structuredContent"]["entry"]["memory_id"])
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        for line in process.stdout.read().splitlines():  # replies already written before the kill
            reply = json.loads(line)
            if "result" in reply:
                acknowledged.append(reply["result"]["structuredContent"]["entry"]["memory_id"])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert len(acknowledged) >= 20
    catalog = MemoryCatalog(root)
    stored = {entry.memory_id for entry in catalog.list(limit=1000)}
    assert set(acknowledged) <= stored
    assert catalog.health_report()["corrupt_entries"] == 0
    assert not [p for p in (root / ".teaagent").iterdir() if p.name.endswith(".tmp")]
