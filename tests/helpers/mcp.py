"""Talking to our MCP server as a client does: the SDK's in-memory session, the search tool's results."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult, TextContent

from langchain_fusion.mcp import SEARCH_TOOL, SearchResults
from tests.helpers.paths import REPO

TIMEOUT = timedelta(seconds=60)
"""How long a client waits for one answer of the server."""


@contextlib.asynccontextmanager
async def connected(server: FastMCP) -> AsyncIterator[ClientSession]:
    """The SDK's own client, connected to ``server`` in memory; the session is initialized."""
    async with create_connected_server_and_client_session(server, read_timeout_seconds=TIMEOUT) as session:
        yield session


async def call_search(session: ClientSession, **arguments: Any) -> CallToolResult:
    """Call the search tool with ``arguments``."""
    return await session.call_tool(SEARCH_TOOL, arguments)


def text_of(result: CallToolResult) -> str:
    """The one text block of a tool result (an error's message, or the results as text)."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def results_of(result: CallToolResult) -> SearchResults:
    """The structured results of a successful search (a failed one fails the test with its message)."""
    assert result.isError is False, text_of(result)
    assert result.structuredContent is not None
    return SearchResults.model_validate(result.structuredContent)


def server_env() -> dict[str, str]:
    """The environment of a server subprocess: this checkout's code, offline, no proxy for loopback."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY" and "proxy" not in k.lower()}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env
