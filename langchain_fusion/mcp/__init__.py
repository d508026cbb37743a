"""Serving a fusion index to agents over the Model Context Protocol (MCP): a ``search`` tool.

Needs the ``mcp`` extra (``pip install "langchain-fusion[mcp]"``); this is the only package that
imports the official MCP Python SDK. Any MCP client (Claude Desktop, IDEs, LangChain agents
through ``langchain-mcp-adapters``) can then search the index::

    from langchain_fusion.mcp import build_mcp_server, run_mcp

    server = build_mcp_server("arden-index")     # or a FusionIndex, HierarchicalIndex or retriever
    run_mcp(server)                               # stdio; or run_mcp(server, "streamable-http")

``langchain-fusion mcp INDEX`` does the same from the command line.

The ``search`` tool takes ``query`` (required) and, optionally, every search option the served
search takes per call except ``fetch_k`` (which bounds a call's cost): its input schema is derived
from the option schema (:mod:`langchain_fusion.search.options`), with each option's bounds and
description. Arguments are checked as sent, by the same checks as every retriever option:
``true`` is not a number, ``"0.5"`` is not a float, NaN is refused. So are the numbers JSON has no
room for, which Python's JSON readers accept anyway: ``NaN``, ``Infinity`` and ``-Infinity``
literals, and numbers beyond the float range such as ``1e400``, anywhere in the arguments (a
``filter`` value too). A bad argument is a tool error (``isError``) with a one-line message, and
the server keeps serving. A result is a readable text
block for the model and structured content (:class:`SearchResults`) for programs. The resource
``langchain-fusion://index`` describes the served index, the server's defaults and its pipeline,
and whether the index's store answers now (``status``: ``ok``, or ``unavailable`` with the error; a
remote store's server is asked on each read, as ``GET /health`` asks it).

The server's options are those of the LangServe app (:func:`langchain_fusion.server.create_app`),
and it is built by the same code (:func:`~langchain_fusion.pipeline.composer.build`): defaults of
every search option, and a rerank step, multi-query fusion or context windows around every search.

Safety: the server serves the one index it was built with; nothing in a request names a file.
There is no authentication: over HTTP, :func:`run_mcp` binds to 127.0.0.1 unless told otherwise.

The package: :mod:`~langchain_fusion.mcp.build` (the server, its index resource),
:mod:`~langchain_fusion.mcp.tool` (the search tool), :mod:`~langchain_fusion.mcp.arguments` (its
arguments checked as sent), :mod:`~langchain_fusion.mcp.numbers` (NaN and Infinity refused before the
SDK reads them), :mod:`~langchain_fusion.mcp.results` (what a search returns) and
:mod:`~langchain_fusion.mcp.running` (stdio and streamable HTTP).
"""

import importlib

from langchain_fusion.errors import MissingDependencyError

try:  # before the modules that need the extra: without it, one line saying how to install it
    for _needed in (
        "anyio",
        "uvicorn",
        "anyio.abc",
        "mcp.server.fastmcp",
        "mcp.server.stdio",
        "mcp.shared.message",
        "mcp.types",
    ):
        importlib.import_module(_needed)
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError(
        f"serving over MCP needs the 'mcp' extra ({exc.name} is missing): pip install 'langchain-fusion[mcp]'"
    ) from None

# The public API (__all__), and (aliased as themselves) the other names the single module had.
from langchain_fusion.mcp.arguments import (
    DEFAULT_MAX_K,
    DEFAULT_MAX_QUERY_CHARS,
    SEARCH_ARGUMENTS,
    SearchLimits,
    check_search_arguments,
    per_call_selection,
)
from langchain_fusion.mcp.build import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    INDEX_RESOURCE,
    MCP_PATH,
    build_mcp_server,
    describe_index,
    describe_server,
    server_for,
)
from langchain_fusion.mcp.build import LogLevel as LogLevel
from langchain_fusion.mcp.build import Served as Served
from langchain_fusion.mcp.results import SearchHit, SearchResults, format_results
from langchain_fusion.mcp.running import run_mcp, url_of
from langchain_fusion.mcp.tool import SEARCH_TOOL
from langchain_fusion.pipeline.spec import TRANSPORTS, Transport
from langchain_fusion.sockets import bind_socket, is_loopback

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_K",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_PORT",
    "INDEX_RESOURCE",
    "MCP_PATH",
    "SEARCH_ARGUMENTS",
    "SEARCH_TOOL",
    "TRANSPORTS",
    "SearchHit",
    "SearchLimits",
    "SearchResults",
    "Transport",
    "bind_socket",
    "build_mcp_server",
    "check_search_arguments",
    "server_for",
    "describe_index",
    "describe_server",
    "format_results",
    "is_loopback",
    "per_call_selection",
    "run_mcp",
    "url_of",
]
