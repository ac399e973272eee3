"""The smallest useful server on the same SDK: one tool, stdio.  The baseline ``memstore mcp`` is measured against.

Same SDK layer as memstore's server (``mcp.server.lowlevel.Server`` over ``stdio_server``), so
the difference in start-up is what memstore itself adds.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def _list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo the text.", input_schema=schema)])


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content={"text": text})


async def main() -> None:
    server: Server[Any] = Server("minimal", version="0", on_list_tools=_list_tools, on_call_tool=_call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
