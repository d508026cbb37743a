"""Running an MCP server: over stdio (stdout kept for the protocol) or streamable HTTP (uvicorn)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
from collections.abc import Iterator
from typing import IO

import anyio
import uvicorn
from mcp.server.fastmcp import FastMCP
from mcp.server.stdio import stdio_server

from langchain_fusion import sockets
from langchain_fusion._compat import mcp_lowlevel_server
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.mcp.build import MCP_PATH
from langchain_fusion.pipeline.spec import TRANSPORTS, Transport


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT/mcp``: where clients of the streamable HTTP transport connect, for a bound socket."""
    return sockets.url_of(sock, MCP_PATH)


@contextlib.contextmanager
def _stdout_for_protocol_only() -> Iterator[IO[str] | None]:
    """While serving over stdio: the protocol keeps the real stdout; anything else printed leads to stderr.

    File descriptor 1 is pointed at stderr, so a stray ``print`` or native library output cannot
    corrupt the protocol stream; the yielded text stream writes to the original stdout. Yields
    None (and changes nothing) when stdout is not a file descriptor (e.g. in a notebook).
    """
    try:
        fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        yield None
        return
    sys.stdout.flush()
    original = os.dup(fd)
    os.dup2(err_fd, fd)
    try:
        with os.fdopen(os.dup(original), "wb") as raw:
            yield io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=True)
    finally:
        sys.stdout.flush()
        os.dup2(original, fd)
        os.close(original)


async def _serve_stdio(server: FastMCP, stdout: IO[str] | None) -> None:
    async with stdio_server(stdout=None if stdout is None else anyio.wrap_file(stdout)) as (read, write):
        # FastMCP's run_stdio_async always writes to sys.stdout; its low-level server takes our stream.
        lowlevel = mcp_lowlevel_server(server)
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def run_mcp(
    server: FastMCP,
    transport: Transport = "stdio",
    *,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``server`` until the client disconnects (stdio) or until interrupted (Ctrl-C).

    ``stdio``: JSON-RPC over stdin and stdout, nothing else on stdout (see :mod:`langchain_fusion.mcp`).
    ``streamable-http``: uvicorn on ``sock`` if given, else on the host and port given to
    :func:`~langchain_fusion.mcp.build.build_mcp_server`; clients connect to ``http://HOST:PORT/mcp``.
    """
    if transport == "stdio":
        with _stdout_for_protocol_only() as stdout:
            anyio.run(_serve_stdio, server, stdout)
    elif transport == "streamable-http":
        bound = sock if sock is not None else sockets.bind_socket(server.settings.host, server.settings.port)
        try:
            config = uvicorn.Config(server.streamable_http_app(), log_level=server.settings.log_level.lower())
            uvicorn.Server(config).run(sockets=[bound])
        finally:
            if sock is None:
                bound.close()
    else:
        raise InvalidParameterError(f"transport must be one of {', '.join(TRANSPORTS)}; got {transport!r}")
