"""Running a real ``memstore mcp`` subprocess and talking to it with the SDK's own client."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

T = TypeVar("T")


def server_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path), "PATH": os.environ.get("PATH", "")}


def server_params(
    root: Path, home: Path, *, extra: Sequence[str] = (), command: Sequence[str] | None = None, cwd: Path | None = None
) -> StdioServerParameters:
    argv = list(command) if command is not None else [sys.executable, "-m", "memstore", "mcp", "--root", str(root)]
    return StdioServerParameters(command=argv[0], args=[*argv[1:], *extra], env=server_env(home), cwd=cwd)


@asynccontextmanager
async def connected(params: StdioServerParameters, errlog: Path, *, mode: str = "legacy") -> AsyncIterator[Client]:
    with errlog.open("a") as log:
        async with Client(stdio_client(params, errlog=log), mode=mode, read_timeout_seconds=60) as client:
            yield client


def run_with_client(
    params: StdioServerParameters, errlog: Path, body: Callable[[Client], Awaitable[T]], *, mode: str = "legacy"
) -> T:
    async def main() -> T:
        async with connected(params, errlog, mode=mode) as client:
            return await body(client)

    return anyio.run(main)


def structured(result: Any) -> dict[str, Any]:
    """A successful tool result's structured JSON, checked against its text block."""
    assert not result.is_error, result.content
    text = json.loads(result.content[0].text)
    assert text == result.structured_content
    return dict(result.structured_content)


def error_message(result: Any) -> str:
    assert result.is_error, result.structured_content
    message = result.content[0].text
    assert "\n" not in message and message.strip() == message and message
    return str(message)
