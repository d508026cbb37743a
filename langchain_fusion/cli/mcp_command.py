"""The ``langchain-fusion mcp`` command: serve a saved index to agents over MCP (stdio or streamable HTTP).

The MCP SDK is imported only when the command runs (it needs the ``mcp`` extra), so the
defaults below mirror :mod:`langchain_fusion.mcp` instead of importing them.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from typing import Any

from langchain_fusion.cli.arguments import (
    DEFAULT_ALPHA,
    DEFAULT_FETCH_K,
    DEFAULT_K,
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_METHOD,
    INDEX_HELP,
    add_pipeline_options,
    add_selection_options,
    selection_options,
)
from langchain_fusion.cli.arguments import alpha as alpha_type
from langchain_fusion.cli.arguments import fetch_k as fetch_k_type
from langchain_fusion.cli.arguments import port as port_type
from langchain_fusion.cli.arguments import positive_int as positive_int_type
from langchain_fusion.cli.arguments import seconds as seconds_type
from langchain_fusion.cli.errors import UserError
from langchain_fusion.search.fusion import FUSION_METHODS

MCP_TRANSPORTS = ("stdio", "streamable-http")
MCP_HOST = "127.0.0.1"
MCP_PORT = 8000
MCP_MAX_K = 100
MCP_MAX_QUERY_CHARS = 2000
MCP_PATH = "/mcp"


def add_mcp_parser(commands: Any) -> None:
    """Register the ``mcp`` subcommand on the CLI's subparsers."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    parser = commands.add_parser(
        "mcp",
        help="serve a saved index to agents over MCP (Model Context Protocol): a 'search' tool",
        description="Load a saved index once and serve it as an MCP server whose 'search' tool is the fused "
        "retriever: arguments query, and optionally k, alpha, filter (metadata equality), the relevance floors "
        "min_vector_score and min_bm25_score, lambda_mult (maximal marginal relevance) and max_per_source "
        "(the last four not on a hierarchical index); results are the chunks' text, source, page, id and "
        "scores, as text and as structured content. The flags below set the server's defaults, and a rerank "
        "step or multi-query fusion around every search. By default the server "
        "speaks over stdin/stdout, for a client that starts it (Claude Desktop, IDEs, LangChain's MCP "
        "adapters); nothing but the protocol is written to stdout, logs go to stderr. With --transport "
        f"streamable-http it listens on --host/--port and clients connect to http://HOST:PORT{MCP_PATH}. "
        "There is no authentication. Needs the mcp extra: pip install 'langchain-fusion[mcp]'.",
    )
    parser.add_argument("index_dir", metavar="INDEX", help=INDEX_HELP)
    parser.add_argument(
        "--transport",
        choices=MCP_TRANSPORTS,
        default="stdio",
        help="stdio (the client starts this command) or streamable-http (a long-running server) (default: %(default)s)",
    )
    parser.add_argument(
        "--host",
        default=MCP_HOST,
        help="streamable-http: address to listen on (default: %(default)s, this machine only; 0.0.0.0 exposes "
        "the server to the network)",
    )
    parser.add_argument(
        "--port",
        type=port_type,
        default=MCP_PORT,
        help="streamable-http: TCP port (default: %(default)s; 0 picks a free port)",
    )
    parser.add_argument(
        "--embeddings", metavar="SPEC", help="embedding model; default: the one recorded in the index (must match it)"
    )
    parser.add_argument(
        "-k",
        type=positive_int_type,
        default=DEFAULT_K,
        help="chunks per search unless the call sets k (default: %(default)s)",
    )
    parser.add_argument(
        "--alpha",
        type=alpha_type,
        default=DEFAULT_ALPHA,
        help="weight of the vector side, 1-alpha of BM25, unless the call sets alpha (default: %(default)s)",
    )
    parser.add_argument(
        "--method", choices=FUSION_METHODS, default=DEFAULT_METHOD, help="fusion method (default: %(default)s)"
    )
    parser.add_argument(
        "--fetch-k",
        type=fetch_k_type,
        default=DEFAULT_FETCH_K,
        metavar="N",
        help="candidates per side before fusion, or 'all' (default: %(default)s)",
    )
    add_selection_options(parser, "a call may set its own")
    add_pipeline_options(parser)
    parser.add_argument(
        "--llm",
        metavar="PROVIDER:MODEL",
        help="chat model of --rerank llm and --multi-query: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), or "
        "any 'PROVIDER:MODEL' that LangChain's init_chat_model knows (default: "
        f"openai:{OPENAI_DEFAULT_CHAT_MODEL} when OPENAI_API_KEY is set)",
    )
    parser.add_argument(
        "--llm-timeout",
        type=seconds_type,
        default=DEFAULT_LLM_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for each chat model answer (rerank ratings, rewrites) before it counts as failed "
        "and is retried (default: %(default)g)",
    )
    parser.add_argument(
        "--max-k",
        type=positive_int_type,
        default=MCP_MAX_K,
        metavar="N",
        help="largest k a call may ask for (default: %(default)s)",
    )
    parser.add_argument(
        "--max-query-chars",
        type=positive_int_type,
        default=MCP_MAX_QUERY_CHARS,
        metavar="N",
        help="longest query accepted, in characters (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="log level of the server's lines on stderr (default: %(default)s)",
    )


def run_mcp_command(args: argparse.Namespace) -> int:
    """Serve a saved index over MCP until the client disconnects (stdio) or Ctrl-C."""
    from langchain_fusion import mcp  # MissingDependencyError without the mcp extra
    from langchain_fusion.models.embeddings import resolve_embeddings

    if args.k > args.max_k:
        raise UserError(f"-k {args.k} is more than --max-k {args.max_k}: raise --max-k or lower -k")
    selection = selection_options(args)
    http = args.transport == "streamable-http"
    sock: socket.socket | None = None
    if http:
        try:  # the port first: a busy one fails in a second, not after loading the index
            sock = mcp.bind_socket(args.host, args.port)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    try:
        # stdout is the protocol channel over stdio: whatever loading the index prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
            # It checks the options, the chat model and the cross-encoder before opening the index.
            server = mcp.build_mcp_server(
                args.index_dir,
                embeddings=embeddings,
                k=args.k,
                alpha=args.alpha,
                method=args.method,
                fetch_k=args.fetch_k,
                **selection,
                reranker=None if args.rerank is None else str(args.rerank),
                rerank_candidates=args.rerank_candidates,
                multi_query=args.multi_query,
                llm=args.llm,
                llm_timeout=args.llm_timeout,
                max_k=args.max_k,
                max_query_chars=args.max_query_chars,
                host=args.host,
                log_level=args.log_level.upper(),
            )
        info = mcp.describe_server(server)
        what = f"{info['documents']} chunks" + (
            f" and {info['summaries']} summaries" if info["kind"] == "hierarchical" else ""
        )
        where = f"at {mcp.url_of(sock)}" if sock is not None else "over stdio"
        lines = [
            f"MCP tool {mcp.SEARCH_TOOL!r} searches {args.index_dir} ({what}, {info['embeddings']})",
        ]
        pipeline = info["pipeline"]
        if pipeline["multi_query"]:
            lines.append(f"multi-query fusion: {pipeline['multi_query']} rewrites per query")
        if pipeline["rerank"]:
            lines.append(f"rerank: {args.rerank} ({pipeline['rerank']['candidates']} candidates per query)")
        lines.append(f"serving MCP clients {where}")
        if http and not mcp.is_loopback(args.host):
            lines.append(
                f"warning: listening on {args.host} makes the server reachable from other machines; "
                "it has no authentication"
            )
        for line in lines:
            print(f"langchain-fusion: {line}", file=sys.stderr, flush=True)
        # uvicorn shuts down cleanly on Ctrl-C and then re-raises it, unless asyncio's own handler
        # took the re-raised signal as a cancellation of a task that was already finishing: then
        # it returns. Either way, and when a stdio client disconnects, the server has stopped.
        with contextlib.suppress(KeyboardInterrupt):
            mcp.run_mcp(server, args.transport, sock=sock)
        print("langchain-fusion: stopped", file=sys.stderr)
    finally:
        if sock is not None:
            sock.close()
    return 0
