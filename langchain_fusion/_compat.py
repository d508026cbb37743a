"""Every workaround that reaches into a dependency's internals: one small function each.

Each docstring says which versions the workaround was written for and why it is needed.
``tests/test_compat.py`` pins those versions (the bounds of the extras in ``pyproject.toml``) and checks
that the private thing each one relies on still exists and behaves as assumed, so an upgrade fails
there, loudly, rather than deep in a request. The dependencies are optional extras: each is imported
only when its workaround runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP
    from mcp.server.lowlevel import Server


def fresh_sse_exit_event() -> None:
    """Forget sse-starlette's process-wide exit event at start-up, so that streaming works on this event loop.

    For sse-starlette 1.x (LangServe 0.3's ``server`` extra requires ``>=1.3,<2``): it creates one
    ``anyio.Event`` per process (``AppStatus.should_exit_event``), bound to the event loop of the first
    streamed response; streams on any later loop (a second test client, an app served again in the same
    process or notebook) then fail. Each start-up gets a fresh one.
    """
    try:
        sse = importlib.import_module("sse_starlette.sse")
    except ImportError:  # pragma: no cover - LangServe's server extra brings it
        return
    status = getattr(sse, "AppStatus", None)
    if status is not None and hasattr(status, "should_exit_event"):
        status.should_exit_event = None


def mcp_lowlevel_server(server: FastMCP) -> Server[Any, Any]:
    """FastMCP's low-level server (its private ``_mcp_server``), which runs a session on given streams.

    For mcp 1.24 to 1.x (the ``mcp`` extra). FastMCP's ``run_stdio_async`` always writes to
    ``sys.stdout``; serving over stdio on another stream, and filtering what the transports bring in
    (:func:`filter_mcp_messages`), needs the low-level server FastMCP keeps to itself. So does the
    version ``initialize`` reports: FastMCP takes none, and the low-level server then reports the SDK's.
    """
    return server._mcp_server


def filter_mcp_messages(server: FastMCP, wrap: Callable[[Any, Any], Any]) -> None:
    """Pass the incoming messages of every session of ``server`` through ``wrap(read_stream, write_stream)``.

    For mcp 1.24 to 1.x (the ``mcp`` extra). Every transport (stdio, streamable HTTP, in memory) hands
    its streams to the low-level server's ``run``, the last place where a request still holds the
    numbers as sent: the session re-reads it from a JSON dump that writes NaN and Infinity as null.
    FastMCP offers no hook there, so this server's ``run`` is wrapped: ``wrap`` returns the stream the
    session reads (and may answer a message itself on ``write_stream``).
    """
    lowlevel = mcp_lowlevel_server(server)
    run = lowlevel.run

    async def run_filtered(read_stream: Any, write_stream: Any, *args: Any, **kwargs: Any) -> None:
        # The SDK annotates a memory stream; its session only iterates over the stream and closes it.
        await run(wrap(read_stream, write_stream), write_stream, *args, **kwargs)

    lowlevel.run = run_filtered  # type: ignore[method-assign]


def pymilvus_column_upsert(client: Any) -> tuple[Any, Any] | None:
    """The client's connection and call context for a column upsert, or None where pymilvus has none.

    For pymilvus 3.0 (the ``milvus`` extra: ``>=3.0,<3.1``). ``MilvusClient`` takes rows only and checks
    every text row by row (half the client's CPU on a large upsert); its connection's column upsert
    (what its own ``Collection.upsert`` sends) is reached through the private ``_get_connection`` and
    ``_generate_call_context``, so a pymilvus without them gets rows.
    """
    try:
        return client._get_connection(), client._generate_call_context()
    except AttributeError:
        return None
