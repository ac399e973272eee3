"""The README's "Use it from an agent" commands, run as written: both start a working server."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memstore.catalog import MemoryCatalog
from tests.mcp_helpers import run_with_client, server_params

README = Path(__file__).resolve().parent.parent / "README.md"
CLAUDE_COMMAND = "claude mcp add memstore -- memstore mcp --root ."


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Use it from an agent")
    return text[start : text.index("\n## ", start + 1)]


def _command_lines() -> dict[str, list[str]]:
    section = _section()
    assert CLAUDE_COMMAND in section
    claude_argv = shlex.split(CLAUDE_COMMAND)
    from_claude = claude_argv[claude_argv.index("--") + 1 :]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None
    server = json.loads(block.group(1))["mcpServers"]["memstore"]
    return {"claude": from_claude, "mcpServers": [server["command"], *server["args"]]}


@pytest.mark.parametrize("source", ["claude", "mcpServers"])
def test_the_readme_command_lines_serve_the_directory_they_start_in(
    source: str, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = _command_lines()[source]
    assert argv == ["memstore", "mcp", "--root", "."]
    repo = tmp_path / "repo"
    repo.mkdir()
    # The console script of this environment, found on PATH as a client would find it.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    params = server_params(repo, home, command=argv, cwd=repo)
    params.env = {**(params.env or {}), "PATH": path}

    async def body(client: Client) -> Any:
        listed = await client.list_tools()
        added = await client.call_tool("memory_add", {"content": "from the README"})
        return listed, added

    listed, added = run_with_client(params, tmp_path / "err.log", body)
    assert "memory_search" in {tool.name for tool in listed.tools}
    assert not added.is_error
    assert [entry.content for entry in MemoryCatalog(repo).list()] == ["from the README"]
