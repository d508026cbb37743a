"""Numbers JSON cannot carry (NaN, Infinity, 1e400) sent to the MCP server, over stdio and streamable HTTP.

Python's JSON readers accept these literals; the SDK then re-reads each request from a JSON dump
that writes them as null, so without a check they silently became the server's defaults. The
requests here are raw JSON text, as a client in any language could send them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from langchain_fusion import FusionIndex
from langchain_fusion.mcp import MCP_PATH, build_mcp_server
from tests.helpers.corpora import paged_animal_docs
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.mcp import server_env
from tests.helpers.paths import REPO

LITERALS = [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "Infinity")]
"""Each number as sent, and as the refusal names it (1e400 overflows to Infinity when read)."""
ARGUMENTS = [
    ('"alpha": {}', "alpha"),
    ('"k": {}', "k"),
    ('"min_vector_score": {}', "min_vector_score"),
    ('"lambda_mult": {}', "lambda_mult"),
    ('"filter": {{"page": {}}}', "filter['page']"),
    ('"filter": {{"page": [1, {}]}}', "filter['page'][1]"),
]
"""Where the number goes in the search tool's arguments, and how the refusal names that place."""
CASES = [(template.format(literal), path, shown) for template, path in ARGUMENTS for literal, shown in LITERALS]

Exchange = Callable[[str], Awaitable[dict[str, Any]]]
"""Sends one raw JSON-RPC request and returns the server's response to it."""

SERVER = textwrap.dedent(
    """
    from langchain_fusion import FusionIndex
    from langchain_fusion.mcp import build_mcp_server, run_mcp
    from tests.helpers.corpora import paged_animal_docs
    from tests.helpers.embeddings import HashingEmbeddings

    run_mcp(build_mcp_server(FusionIndex.from_documents(paged_animal_docs(), HashingEmbeddings()), log_level="WARNING"))
    """
)


def _call(request_id: int, arguments: str) -> str:
    return (
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
        f'"params": {{"name": "search", "arguments": {{"query": "cat", {arguments}}}}}}}'
    )


@asynccontextmanager
async def _over_http() -> AsyncIterator[Exchange]:
    """The streamable HTTP transport in process: each request is one POST to /mcp (the server is stateless)."""
    server = build_mcp_server(FusionIndex.from_documents(paged_animal_docs(), HashingEmbeddings()), log_level="WARNING")
    app = server.streamable_http_app()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    async def exchange(request: str) -> dict[str, Any]:
        response = await client.post(MCP_PATH, content=request, headers=headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async with (
        server.session_manager.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client,
    ):
        yield exchange


@asynccontextmanager
async def _over_stdio() -> AsyncIterator[Exchange]:
    """A server subprocess over stdio, initialized; each request is one line on its stdin."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=REPO,
        env=server_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def exchange(request: str) -> dict[str, Any]:
        stdin.write(request.replace("\n", " ") + "\n")
        stdin.flush()
        # Python reads NaN and Infinity too; integers past its digit limit are read as 0 (they are not ids here).
        request_id = json.loads(request, parse_int=lambda digits: int(digits) if len(digits) < 100 else 0)["id"]
        for line in stdout:  # skipping any notification the server sends
            message = dict(json.loads(line))
            if message.get("id") == request_id:
                return message
        raise AssertionError(f"the server closed stdout without answering request {request_id}")

    try:
        protocol = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        initialized = await exchange(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": protocol})
        )
        assert "result" in initialized, initialized
        stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        stdin.flush()
        yield exchange
    finally:
        stdin.close()
        process.wait(timeout=60)
        stdout.close()


TRANSPORTS = {"stdio": _over_stdio, "streamable-http": _over_http}


@pytest.mark.parametrize(
    "transport", [pytest.param(name, marks=[pytest.mark.subprocess] if name == "stdio" else []) for name in TRANSPORTS]
)
async def test_non_finite_arguments_are_tool_errors(transport: str) -> None:
    """Each such number, at the top or nested in a filter, is a tool error naming where it was; nothing is searched."""
    async with TRANSPORTS[transport]() as exchange:
        for request_id, (arguments, path, shown) in enumerate(CASES, 1):
            response = await exchange(_call(request_id, arguments))
            assert response["id"] == request_id
            result = response.get("result", {})
            assert result.get("isError") is True, (arguments, response)
            assert "structuredContent" not in result
            [block] = result["content"]
            assert f"{path} must be a finite number; got {shown} (" in block["text"], (arguments, block["text"])
            assert "\n" not in block["text"]
        good = await exchange(_call(100, '"alpha": 0.5, "k": 2, "filter": {"page": [1, 2.0]}'))
        # Other requests answer with a JSON-RPC error: they have no tool result to carry it.
        listing = await exchange('{"jsonrpc": "2.0", "id": 101, "method": "tools/list", "params": {"cursor": NaN}}')
    assert good["result"].get("isError") is not True  # the server keeps serving
    assert len(good["result"]["structuredContent"]["results"]) == 2
    assert listing["error"]["code"] == -32602
    assert "params['cursor'] must be a finite number; got NaN" in listing["error"]["message"]


HUGE = "9" * 5000
"""An integer of 5,000 digits: JSON allows it, Python reads at most 4,300 digits of an integer."""


@pytest.mark.parametrize(
    "transport", [pytest.param(name, marks=[pytest.mark.subprocess] if name == "stdio" else []) for name in TRANSPORTS]
)
async def test_numbers_with_too_many_digits_are_answered(transport: str) -> None:
    """A tool argument is a tool error naming it; any other request an invalid-params error; the server goes on."""
    async with TRANSPORTS[transport]() as exchange:
        for request_id, (arguments, path) in enumerate(
            [(f'"k": {HUGE}', "k"), (f'"filter": {{"page": [1, -{HUGE}]}}', "filter['page'][1]")], 1
        ):
            response = await exchange(_call(request_id, arguments))
            assert response["id"] == request_id, response
            result = response.get("result", {})
            assert result.get("isError") is True, response
            [block] = result["content"]
            assert f"{path} must be a number of at most 4300 digits; got one of 5000 digits" in block["text"]
            assert "\n" not in block["text"]
        listing = await exchange(
            f'{{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {{"cursor": {HUGE}}}}}'
        )
        good = await exchange(_call(8, '"k": 2'))
    assert listing["id"] == 7 and listing["error"]["code"] == -32602
    assert "params['cursor'] must be a number of at most 4300 digits" in listing["error"]["message"]
    assert len(good["result"]["structuredContent"]["results"]) == 2
