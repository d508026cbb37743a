"""The MCP server: :func:`build_mcp_server` and :func:`server_for` build it, with its search tool and index resource."""

# No ``from __future__ import annotations``: FastMCP reads the annotations of the functions it is given
# (the index resource's here, the search tool's in tool.py) at run time.

import json
import os
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.retrievers import BaseRetriever
from mcp.server.fastmcp import FastMCP
from starlette.applications import Starlette

from langchain_fusion._compat import filter_mcp_messages, mcp_lowlevel_server
from langchain_fusion._version import library_version
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.mcp.arguments import check_search_arguments
from langchain_fusion.mcp.numbers import FiniteNumbersOnly, ReadableNumbersOnly
from langchain_fusion.mcp.tool import SEARCH_TOOL, add_search_tool
from langchain_fusion.pipeline import Pipeline, PipelineSpec, ServeLimits, build
from langchain_fusion.pipeline.spec import serving_spec
from langchain_fusion.search.options import SERVER_ONLY_OPTIONS
from langchain_fusion.threads import one_blas_thread

_DEFAULTS = ServeLimits()
DEFAULT_HOST: str = _DEFAULTS.host
"""Where the streamable HTTP transport listens by default: this machine only."""
DEFAULT_PORT: int = _DEFAULTS.port
"""The default TCP port of the streamable HTTP transport."""
MCP_PATH = "/mcp"
"""Where the streamable HTTP transport serves the protocol."""
INDEX_RESOURCE = "langchain-fusion://index"
"""The URI of the resource describing the served index."""


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
"""Log levels of the server (its log lines go to stderr)."""

Served = FusionIndex | HierarchicalIndex | BaseRetriever


def describe_index(served: Served) -> dict[str, Any]:
    """What is served, as the ``langchain-fusion://index`` resource says it: kind, counts, model (no manifest)."""
    from langchain_fusion.pipeline.composer import describe_served

    return {name: value for name, value in describe_served(served).items() if name != "manifest"}


class _CheckedArgumentsServer(FastMCP):
    """FastMCP whose search tool sees only arguments checked, as sent, by the library's validators.

    FastMCP's own argument parsing is lax (``true`` becomes 1, unknown arguments are dropped) and
    reports problems on several lines; checking the raw arguments first gives one-line tool errors.
    """

    def __init__(self, limits: ServeLimits, accepted: Sequence[str], info: dict[str, Any], **settings: Any) -> None:
        super().__init__(**settings)
        self.limits = limits
        self.accepted = tuple(accepted)
        self.info = info
        filter_mcp_messages(self, FiniteNumbersOnly)  # NaN and Infinity as sent, before the SDK reads them as null
        # FastMCP takes no version: without one, initialize reports the SDK's own as the server's.
        mcp_lowlevel_server(self).version = library_version()

    def streamable_http_app(self) -> Starlette:
        """FastMCP's HTTP app, behind :class:`~langchain_fusion.mcp.numbers.ReadableNumbersOnly`."""
        app = super().streamable_http_app()
        app.add_middleware(ReadableNumbersOnly)
        return app

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run a tool; a refused search argument is raised, and the SDK answers it with a tool error."""
        if name == SEARCH_TOOL:
            arguments = check_search_arguments(arguments, self.limits, self.accepted)
        return await super().call_tool(name, arguments)


def describe_server(server: FastMCP) -> dict[str, Any]:
    """What the ``langchain-fusion://index`` resource of a server from :func:`build_mcp_server` says.

    The library version, what is served (see :func:`describe_index`), the limits and, for an
    index, the defaults and the pipeline (rerank step, multi-query rewrites and windows, None if none).
    """
    if not isinstance(server, _CheckedArgumentsServer):
        raise InvalidParameterError(f"not a server built by build_mcp_server: {type(server).__name__}")
    return dict(server.info)


def build_mcp_server(
    index: str | os.PathLike[str] | Served | PipelineSpec,
    *,
    limits: ServeLimits | None = None,
    name: str = "langchain-fusion",
    log_level: LogLevel = "INFO",
    **options: Any,
) -> FastMCP:
    """An MCP server whose ``search`` tool searches ``index`` (see :mod:`langchain_fusion.mcp`).

    Args:
        index: an index folder (plain or hierarchical) or a store location such as
            ``"milvus://HOST:19530/docs"``, opened and verified now; a loaded
            :class:`~langchain_fusion.index.fusion_index.FusionIndex` or
            :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`; any LangChain retriever
            (served as it is: it brings its own options); or a whole
            :class:`~langchain_fusion.pipeline.spec.PipelineSpec` (then give no ``options``).
        limits: ``host`` and ``port`` of the streamable HTTP transport (see
            :func:`~langchain_fusion.mcp.running.run_mcp`; on a loopback address, requests naming another
            host are refused: DNS rebinding protection), ``max_k`` and ``max_query_chars``
            (:class:`~langchain_fusion.pipeline.spec.ServeLimits`); or name them among ``options``
            (``max_k=50``).
        name: the server's name, as clients show it.
        log_level: the server's log level (its log lines go to stderr).
        options: the pipeline, by name, as for :func:`langchain_fusion.server.create_app`: the
            search options (the defaults of every call), ``embeddings``, ``reranker``,
            ``rerank_candidates``, ``multi_query``, ``window``, ``window_max_chars``, and ``llm``
            and ``llm_timeout`` for an ``"llm"`` rerank and the rewrites (default: OpenAI
            ``gpt-4o-mini`` when ``OPENAI_API_KEY`` is set, else an error naming what is missing;
            an error when neither needs it).

    Raises:
        FusionError: the folder is not a valid index, an option is unknown or out of range, or the
            chat model or cross-encoder asked for cannot be built.
    """
    spec, limits = serving_spec(index, limits, options, answer="off")
    return server_for(build(spec).within(limits), limits, name=name, log_level=log_level)


def server_for(
    pipeline: Pipeline, limits: ServeLimits, *, name: str = "langchain-fusion", log_level: LogLevel = "INFO"
) -> FastMCP:
    """The MCP server of a built pipeline within ``limits`` (what :func:`build_mcp_server` returns).

    Limits BLAS to one thread for the process (:func:`~langchain_fusion.threads.one_blas_thread`):
    concurrent calls, each on a worker thread, are the server's parallelism.
    """
    one_blas_thread()
    if limits.tenant_header is not None:
        raise InvalidParameterError("an MCP server serves one tenant (tenant=..., mcp --tenant T), not a tenant header")
    pipeline.check_tenancy(limits)
    accepted = ("query", *(n for n in pipeline.per_call_options() if n not in SERVER_ONLY_OPTIONS))
    described = pipeline.describe()
    index_info = {name: value for name, value in described["index"].items() if name != "manifest"}
    info: dict[str, Any] = {"library_version": described["library_version"], **index_info}
    info["limits"] = {"max_k": limits.max_k, "max_query_chars": limits.max_query_chars}
    if not isinstance(pipeline.served, BaseRetriever):
        info.update(defaults=described["defaults"], pipeline=described["pipeline"])
    what = (
        f"{info['documents']} chunks of documents"
        if "documents" in info
        else f"the documents behind a {info['retriever']}"
    )
    server = _CheckedArgumentsServer(
        limits,
        accepted,
        info,
        name=name,
        instructions=f"Hybrid (vector + BM25 keyword) search over {what}. Call {SEARCH_TOOL} with a question "
        "or keywords; each result has its source, page, chunk id, text and scores. Cite the sources you use.",
        host=limits.host,
        port=limits.port,
        streamable_http_path=MCP_PATH,
        # A search needs no session: every HTTP request stands alone and is answered with plain JSON.
        stateless_http=True,
        json_response=True,
        log_level=log_level,
    )
    add_search_tool(server, pipeline, limits, accepted, what)

    async def index_info_text() -> str:
        from anyio import to_thread  # the MCP SDK's own dependency

        # The store is asked on each read, off the event loop: "status" says whether it answers now.
        reachable = await to_thread.run_sync(pipeline.store_status)
        return json.dumps({**info, **reachable}, indent=2)

    server.resource(
        INDEX_RESOURCE,
        name="index",
        title="The served index",
        description="What the search tool searches: kind, number of chunks, embedding model, defaults, pipeline, "
        "limits, and whether its store answers now (status: ok, or unavailable with the error).",
        mime_type="application/json",
    )(index_info_text)
    return server
