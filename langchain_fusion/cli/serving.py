"""The ``serve`` and ``mcp`` commands: one start-up path for the LangServe app and the MCP server.

Both take the same pipeline flags (search defaults, hierarchy, multi-query, windows, rerank,
chat model) and serving limits, build the spec, bind the port first (a busy one fails in a
second, not after loading the index), build the pipeline, print what is served, and run until
interrupted. The server modules are imported only when a command runs (they need extras).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_fusion.cli.arguments import (
    LOG_LEVELS,
    add_hierarchy_flags,
    add_limit_flags,
    add_model_flags,
    add_search_flags,
    add_step_flags,
    index_help,
    limits_from_args,
    spec_from_args,
)
from langchain_fusion.cli.errors import UserError
from langchain_fusion.pipeline.spec import TRANSPORTS
from langchain_fusion.search.options import SERVER_ONLY_OPTIONS, HierarchyOptions, SearchOptions

_NO_AUTH = "There is no authentication: keep the default host unless the network in front of it is trusted."


def add_serve_parser(commands: Any) -> None:
    """Register ``serve``."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    serve = commands.add_parser(
        "serve",
        help="serve a saved index over HTTP with LangServe: the retriever, the RAG chain and a playground",
        description="Load a saved index once and serve it with LangServe and uvicorn: the retriever at /retriever "
        "(invoke, batch, stream, playground), the RAG chain at /rag when a chat model is available, and GET /health "
        "with the index manifest. Requests may set the search options (but --fetch-k) through LangServe's "
        f"configurable fields, within the limits below. {_NO_AUTH} Needs the server extra: "
        "pip install 'langchain-fusion[server]'. Stop it with Ctrl-C.",
    )
    _add_pipeline_arguments(
        serve,
        llm_help="chat model of /rag, --rerank llm and --multi-query: 'openai' or 'openai:MODEL' (needs "
        "OPENAI_API_KEY), or any 'PROVIDER:MODEL' that LangChain's init_chat_model knows. Default: "
        f"openai:{OPENAI_DEFAULT_CHAT_MODEL} when OPENAI_API_KEY is set; otherwise only /retriever is served",
    )
    add_limit_flags(
        serve, ("host", "port", "max_k", "max_query_chars", "max_batch_size", "allowed_hosts", "tenant_header")
    )
    serve.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="uvicorn's log level (default: %(default)s)"
    )


def add_mcp_parser(commands: Any) -> None:
    """Register ``mcp``."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    parser = commands.add_parser(
        "mcp",
        help="serve a saved index to agents over MCP (Model Context Protocol): a 'search' tool",
        description="Load a saved index once and serve it as an MCP server whose 'search' tool is the fused "
        f"retriever: its arguments are query and the search options ({_request_options()}; on a hierarchical "
        "index its own options); results are the chunks' text, source, page, id and scores, as text "
        "and as structured content. The flags set the server's defaults, and a rerank step, multi-query fusion or "
        "context windows around every search. By default the server speaks over stdin/stdout, for a client that "
        "starts it (Claude Desktop, IDEs, LangChain's MCP adapters); nothing but the protocol is written to stdout, "
        "logs go to stderr. With --transport streamable-http it listens on --host/--port and clients connect to "
        f"http://HOST:PORT/mcp. {_NO_AUTH} Needs the mcp extra: pip install 'langchain-fusion[mcp]'.",
    )
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="stdio",
        help="stdio (the client starts this command) or streamable-http (a long-running server) (default: %(default)s)",
    )
    _add_pipeline_arguments(
        parser,
        llm_help="chat model of --rerank llm and --multi-query: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), "
        "or any 'PROVIDER:MODEL' that LangChain's init_chat_model knows (default: "
        f"openai:{OPENAI_DEFAULT_CHAT_MODEL} when OPENAI_API_KEY is set)",
    )
    add_limit_flags(parser, ("host", "port", "max_k", "max_query_chars"))
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="log level of the server's lines on stderr (default: %(default)s)",
    )


def _request_options() -> str:
    """The options a request may set on a fused index, as their names."""
    return ", ".join(name for name in SearchOptions.model_fields if name not in SERVER_ONLY_OPTIONS)


def _add_pipeline_arguments(sub: argparse.ArgumentParser, llm_help: str) -> None:
    sub.add_argument("index_dir", metavar="INDEX", help=index_help())
    add_search_flags(sub, note="not settable per request", remote_note="a request may set its own")
    add_hierarchy_flags(sub, "on an index saved with page summaries; a request may set its own")
    add_step_flags(sub, served=True)
    add_model_flags(
        sub,
        llm_help=llm_help,
        timeout_help="seconds to wait for each chat model answer (answers, ratings, rewrites) before it counts as "
        "failed and is retried; a model that keeps failing answers 502 (HTTP) or a tool error (MCP)",
    )


@dataclass(frozen=True)
class _Face:
    """What differs between the two servers: how to build one, run it, and say what it serves."""

    module: str
    """The server module (imported when the command runs: it needs its extra)."""
    answer: str
    """Whether it answers questions (the RAG chain) when a chat model is available."""
    http: Callable[[argparse.Namespace], bool]
    """Whether it listens on a TCP port."""


SERVE = _Face("langchain_fusion.server", "if_available", lambda args: True)
MCP = _Face("langchain_fusion.mcp", "off", lambda args: args.transport == "streamable-http")


def run_serve(args: argparse.Namespace) -> int:
    """Serve a saved index with LangServe and uvicorn until interrupted."""
    return _run(args, SERVE)


def run_mcp_command(args: argparse.Namespace) -> int:
    """Serve a saved index over MCP until the client disconnects (stdio) or Ctrl-C."""
    return _run(args, MCP)


def _run(args: argparse.Namespace, face: _Face) -> int:
    import importlib

    from langchain_fusion.pipeline import build
    from langchain_fusion.pipeline.spec import serving_spec

    module = importlib.import_module(face.module)  # MissingDependencyError without its extra
    limits = limits_from_args(args)
    spec, limits = serving_spec(spec_from_args(args, face.answer, served=True), limits, {})
    with _bound(module, args, face) as sock:
        # stdout is the protocol channel over stdio: whatever loading the index prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr), _quiet(face.module):
            pipeline = build(spec).within(limits)
            served = _serve_object(module, pipeline, limits, args, face)
        for line in _banner(module, pipeline, args, sock, face):
            print(f"langchain-fusion: {line}", file=sys.stderr, flush=True)
        # After a Ctrl-C uvicorn shuts down cleanly and re-raises it, unless asyncio's own handler took the
        # re-raised signal as a cancellation of a task that was already finishing: then it returns. Either
        # way, and when a stdio client disconnects, the server has stopped.
        with contextlib.suppress(KeyboardInterrupt):
            if face is SERVE:
                module.serve(served, sock=sock, log_level=args.log_level)
            else:
                module.run_mcp(served, args.transport, sock=sock)
        print("langchain-fusion: stopped", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _bound(module: Any, args: argparse.Namespace, face: _Face) -> Iterator[socket.socket | None]:
    if not face.http(args):
        yield None
        return
    try:  # the port first: a busy one fails in a second, not after loading the index
        sock = module.bind_socket(args.host, args.port)
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    try:
        yield sock
    finally:
        sock.close()


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Silence the server module's start-up log lines: the command prints them itself."""
    import logging

    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _serve_object(module: Any, pipeline: Any, limits: Any, args: argparse.Namespace, face: _Face) -> Any:
    if face is SERVE:
        return module.app_for(pipeline, limits)
    return module.server_for(pipeline, limits, log_level=args.log_level.upper())


def _banner(module: Any, pipeline: Any, args: argparse.Namespace, sock: socket.socket | None, face: _Face) -> list[str]:
    """What the command prints on start-up: what is served, where, and the steps around every search."""
    described = pipeline.describe()
    index = described["index"]
    what = f"{index['documents']} chunks" + (
        f" and {index['summaries']} summaries" if index["kind"] == "hierarchical" else ""
    )
    what += f", {index['embeddings']}"
    if face is SERVE:
        url = module.url_of(sock)
        lines = [
            f"serving {args.index_dir} ({what}) at {url}",
            f"retriever: {url}{module.RETRIEVER_PATH}/ (playground: {url}{module.RETRIEVER_PATH}/playground/); "
            f"health: {url}{module.HEALTH_PATH}",
        ]
    else:
        lines = [f"MCP tool {module.SEARCH_TOOL!r} searches {args.index_dir} ({what})"]
    lines += pipeline_lines(described["pipeline"], args)
    unused = [
        f"--{name.replace('_', '-')}"
        for name in HierarchyOptions.model_fields
        if name in pipeline.spec.hierarchy.model_fields_set
    ]
    if unused and index["kind"] != "hierarchical":
        lines.append(f"note: {' and '.join(unused)} apply to an index saved with page summaries; this one has none")
    if face is SERVE:
        if described["chat_model"] is not None:
            lines.append(f"RAG chain with {described['chat_model']}: {module.url_of(sock)}{module.RAG_PATH}/")
        else:
            lines.append(f"no chat model, so /rag is not served: {described['no_chat_reason']}")
    else:
        lines.append("serving MCP clients " + ("over stdio" if sock is None else f"at {module.url_of(sock)}"))
    if sock is not None and not module.is_loopback(args.host):
        lines.append(
            f"warning: listening on {args.host} makes the server reachable from other machines; it has no "
            "authentication"
        )
    return lines


def pipeline_lines(steps: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The start-up lines of the steps around every search (from :meth:`Pipeline.describe`)."""
    lines = []
    if steps["multi_query"]:
        lines.append(f"multi-query fusion: {steps['multi_query']} rewrites per query")
    if steps["window"]:
        lines.append(f"context windows: {steps['window']['n']} neighbouring chunks on each side")
    if steps["rerank"]:
        lines.append(f"rerank: {args.rerank} ({steps['rerank']['candidates']} candidates per query)")
    return lines
