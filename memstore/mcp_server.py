"""``memstore mcp``: the Model Context Protocol face of memstore, over stdio.

A sibling of ``cli.py`` over the same library calls: the tools are declared in
:mod:`memstore.mcp_tools`, their answers are the documents of
:mod:`memstore.reports`.  This module only puts them on the wire with the
official ``mcp`` SDK, which is imported here and nowhere else.

Robustness: every tool call runs in one worker thread (library calls block on
file locks; the event loop keeps reading and answering pings meanwhile), one at
a time, and any failure becomes a tool error with a one-line message, so no
request can stop the server.  Writes are durable before a result is sent, so
killing the server loses nothing it acknowledged.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from memstore import __version__, reports
from memstore.logger import when_loaded
from memstore.mcp_tools import ToolError, ToolSpec, available_tools, call_tool, one_line
from memstore.workspace import Workspace

log = logging.getLogger(__name__)

SERVER_NAME = "memstore"
INSTRUCTIONS = (
    "memstore is this repository's persistent memory. Search it (memory_search, memory_recall) before a task "
    "and check failure_cards_match before editing files; store what later sessions should know with "
    "memory_add, and record failures with failure_card_add."
)

CONTEXT_URI = "memstore://context"
TEAM_NOTES_URI = "memstore://team-notes"
PINNED_URI = "memstore://pinned"

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def wire_safe(value: Any) -> Any:
    """The value with lone surrogates shown as U+FFFD: the wire is UTF-8 and cannot carry them.

    Only a ``\\udXXX`` escape in a file can put one in an entry; the text block of a
    result keeps the exact escapes (it is ASCII JSON), the structured copy shows U+FFFD.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _LONE_SURROGATE.sub("\ufffd", value)
        return value
    if isinstance(value, dict):
        return {wire_safe(key): wire_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [wire_safe(item) for item in value]
    return value


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=dict(spec.output_schema) if spec.output_schema is not None else None,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=wire_safe(message))], is_error=True)


class MemstoreMCP:
    """The server of one workspace: tools, resources, and the worker that makes the library calls."""

    def __init__(self, root: Path, *, allow_destructive: bool = False) -> None:
        self.workspace = Workspace(root)
        self.tools = available_tools(allow_destructive=allow_destructive)
        self._listed = [_tool(spec) for spec in self.tools.values()]
        self._worker = anyio.CapacityLimiter(1)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            title="memstore",
            description="Persistent memory for AI coding agents, kept in plain files in the repository.",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )

    async def _in_worker(self, func: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(func, *args, limiter=self._worker)

    # ------------------------------------------------------------------ tools

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._listed)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            payload = await self._in_worker(call_tool, self.tools, self.workspace, params.name, params.arguments)
        except ToolError as exc:
            return _error_result(str(exc))
        except Exception as exc:  # the server outlives any request: report, log, go on
            log.exception("tool %s failed unexpectedly", params.name)
            return _error_result(f"internal error in {params.name}: {one_line(str(exc) or type(exc).__name__)}")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=reports.json_text(payload))],
            structured_content=wire_safe(payload),
        )

    # ------------------------------------------------------------------ resources

    async def _list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=CONTEXT_URI,
                    name="memory-context",
                    title="Memory context",
                    description=(
                        "Prompt-ready memory of this repository: the newest project and personal notes and the "
                        "MEMORY.md items Claude Code loads at startup."
                    ),
                    mime_type="text/plain",
                ),
                types.Resource(
                    uri=TEAM_NOTES_URI,
                    name="team-notes",
                    title="Team notes",
                    description="The team's shared notes as a prompt block (newest that fit 2,048 tokens).",
                    mime_type="text/plain",
                ),
                types.Resource(
                    uri=PINNED_URI,
                    name="pinned-files",
                    title="Pinned files",
                    description="The files pinned to stay in context, as JSON ({count, pinned: [...]}).",
                    mime_type="application/json",
                ),
            ]
        )

    def _resource_text(self, uri: str) -> tuple[str, str]:
        if uri == CONTEXT_URI:
            return "text/plain", self.workspace.hierarchy.to_prompt_context()
        if uri == TEAM_NOTES_URI:
            return "text/plain", self.workspace.team.inject_prompt()
        if uri == PINNED_URI:
            return "application/json", reports.json_text(reports.pins_report(self.workspace.pins.list_all()))
        raise MCPError(types.INVALID_PARAMS, f"unknown resource {uri!r}")

    async def _read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            mime_type, text = await self._in_worker(self._resource_text, uri)
        except MCPError:
            raise
        except Exception as exc:
            log.warning("reading %s failed: %s", uri, exc)
            raise MCPError(types.INTERNAL_ERROR, one_line(f"reading {uri} failed: {exc}")) from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime_type, text=wire_safe(text))]
        )

    # ------------------------------------------------------------------ running

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())


def serve(root: Path, *, allow_destructive: bool = False) -> None:
    """Serve the workspace at ``root`` over stdin/stdout until the client closes stdin."""
    when_loaded(_log_to_stderr)  # replaces the CLI's setup if that has not run yet
    anyio.run(MemstoreMCP(root, allow_destructive=allow_destructive).serve_stdio)


def _log_to_stderr() -> None:
    """Library warnings (a refused pin, an index answered by a scan) go to stderr, never to the wire."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("memstore mcp: %(levelname)s: %(message)s"))
    for name in ("memstore", "mcp"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.WARNING)
        logger.propagate = False

