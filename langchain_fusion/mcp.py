"""Serving a fusion index to agents over the Model Context Protocol (MCP): a ``search`` tool.

Needs the ``mcp`` extra (``pip install "langchain-fusion[mcp]"``); this is the only module that
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
"""

# No ``from __future__ import annotations``: FastMCP reads the search tool's annotations at run
# time, and they carry each server's own limits (the tool's signature is built per server).

import contextlib
import inspect
import io
import json
import math
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Annotated, Any, Literal

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import BaseModel, ConfigDict, Field

from langchain_fusion import metadata as keys
from langchain_fusion import sockets
from langchain_fusion._compat import filter_mcp_messages, mcp_lowlevel_server
from langchain_fusion.errors import InvalidParameterError, MissingDependencyError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.pipeline import Pipeline, PipelineSpec, ServeLimits, build
from langchain_fusion.pipeline.spec import TRANSPORTS, Transport, serving_spec
from langchain_fusion.retrievers.base import innermost_search
from langchain_fusion.search.options import (
    OPTION_CHECKS,
    SELECTION_OPTIONS,
    FusionOptions,
    SearchOptions,
    request_annotation,
)
from langchain_fusion.sockets import bind_socket, is_loopback
from langchain_fusion.threads import one_blas_thread

try:
    import anyio
    import uvicorn
    from anyio.abc import ObjectReceiveStream, ObjectSendStream
    from mcp.server.fastmcp import FastMCP
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp.types import (
        INVALID_PARAMS,
        CallToolResult,
        ErrorData,
        JSONRPCError,
        JSONRPCMessage,
        JSONRPCRequest,
        JSONRPCResponse,
        TextContent,
        ToolAnnotations,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError(
        f"serving over MCP needs the 'mcp' extra ({exc.name} is missing): pip install 'langchain-fusion[mcp]'"
    ) from None

_DEFAULTS = ServeLimits()
DEFAULT_HOST: str = _DEFAULTS.host
"""Where the streamable HTTP transport listens by default: this machine only."""
DEFAULT_PORT: int = _DEFAULTS.port
"""The default TCP port of the streamable HTTP transport."""
DEFAULT_MAX_K: int = _DEFAULTS.max_k
"""Largest ``k`` a search may ask for by default."""
DEFAULT_MAX_QUERY_CHARS: int = _DEFAULTS.max_query_chars
"""Longest query accepted by default, in characters."""
MCP_PATH = "/mcp"
"""Where the streamable HTTP transport serves the protocol."""
SEARCH_TOOL = "search"
"""The name of the search tool."""
SEARCH_ARGUMENTS: tuple[str, ...] = (
    "query",
    *(name for name in SearchOptions.model_fields if name not in FusionOptions.LOCAL_ONLY),
)
"""The arguments the search tool of a fused index takes (a hierarchical index's takes its own options)."""
INDEX_RESOURCE = "langchain-fusion://index"
"""The URI of the resource describing the served index."""


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
"""Log levels of the server (its log lines go to stderr)."""

Served = FusionIndex | HierarchicalIndex | BaseRetriever

SearchLimits = ServeLimits
"""The bounds every search is checked against (an alias of :class:`~langchain_fusion.pipeline.spec.ServeLimits`)."""


class SearchHit(BaseModel):
    """One retrieved chunk (or context window passage) with where it comes from and its scores."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    rank: int
    """1-based position in the results."""
    id: str | None
    """The chunk's stable id (``Document.id``)."""
    text: str
    """The chunk's text."""
    source: str | None
    """The file path or id the chunk comes from."""
    page: int | None
    """1-based PDF page; None for text and markdown."""
    fusion_score: float | None
    """The fused score the results are ordered by (its scale depends on the fusion method)."""
    vector_score: float | None
    """Raw vector similarity (cosine; higher is better)."""
    bm25_score: float | None
    """Raw BM25 score (0 when no query term occurs in the chunk)."""
    metadata: dict[str, Any]
    """All the chunk's metadata: chunk position, normalised scores and ranks of each side, and
    context window, hierarchical or rerank details when the retriever adds them."""


class SearchResults(BaseModel):
    """What the search tool returns: the query and its results, best first."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    query: str
    """The query searched for."""
    results: list[SearchHit]
    """The retrieved chunks, best first."""


def check_search_arguments(
    arguments: Mapping[str, Any],
    limits: ServeLimits = _DEFAULTS,
    accepted: Sequence[str] = SEARCH_ARGUMENTS,
) -> dict[str, Any]:
    """The search tool's arguments as sent, checked; an InvalidParameterError names the first bad one.

    Every option goes through its own check (:data:`~langchain_fusion.search.options.OPTION_CHECKS`);
    ``null`` means the server's default. A ``filter`` sent as a JSON object in a string (some
    clients do) is read as that object. ``accepted``: the arguments this server's tool takes.
    """
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        raise InvalidParameterError(f"unknown argument(s) {unknown}; the search tool takes {', '.join(accepted)}")
    query = arguments.get("query")
    if query is None:
        raise InvalidParameterError("query is required: the words or question to search for")
    if not isinstance(query, str):
        raise InvalidParameterError(f"query must be a string; got {type(query).__name__}")
    if not query.strip():
        raise InvalidParameterError("query is empty: give the words or question to search for")
    if len(query) > limits.max_query_chars:
        raise InvalidParameterError(f"query is {len(query)} characters long; the limit is {limits.max_query_chars}")
    checked: dict[str, Any] = {"query": query}
    for name in accepted:
        value = arguments.get(name)
        if name == "query" or value is None:
            continue
        if name == "filter" and isinstance(value, str):
            with contextlib.suppress(ValueError):
                parsed = json.loads(value)
                value = parsed if isinstance(parsed, dict) else value
        checked[name] = OPTION_CHECKS[name](value)
        if name in ("k", "k_summaries") and checked[name] > limits.max_k:
            raise InvalidParameterError(
                f"{name} must be at most {limits.max_k} (the server's max_k); got {checked[name]}"
            )
    return checked


def _hit(rank: int, doc: Document) -> SearchHit:
    meta = json.loads(json.dumps(doc.metadata, default=str))  # JSON values only, whatever the metadata held

    def number(key: str) -> float | None:
        value = meta.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    page = meta.get(keys.PAGE)
    source = meta.get(keys.SOURCE)
    return SearchHit(
        rank=rank,
        id=doc.id,
        text=doc.page_content,
        source=None if source is None else str(source),
        page=page if isinstance(page, int) and not isinstance(page, bool) else None,
        fusion_score=number(keys.FUSION_SCORE),
        vector_score=number(keys.VECTOR_SCORE),
        bm25_score=number(keys.BM25_SCORE),
        metadata=meta,
    )


def format_results(results: SearchResults) -> str:
    """The results as text for a language model: a numbered header line per chunk, then its text."""
    if not results.results:
        return f"No results for {results.query!r}."
    blocks = [f"{len(results.results)} result(s) for {results.query!r}, best first:"]
    for hit in results.results:
        where = hit.source or "unknown source"
        if hit.page is not None:
            where += f", page {hit.page}"
        copies = [c for c in hit.metadata.get(keys.ALSO_IN) or [] if isinstance(c, dict)]
        if copies:  # the same text under other files (returned once)
            where += "; also in " + ", ".join(str(c.get(keys.SOURCE) or c.get("id")) for c in copies)
        scores = [
            f"{label} {value:.3f}"
            for label, value in (("fused", hit.fusion_score), ("vector", hit.vector_score), ("bm25", hit.bm25_score))
            if value is not None
        ]
        details = "; ".join(part for part in (f"id {hit.id}" if hit.id else "", ", ".join(scores)) if part)
        blocks.append(f"[{hit.rank}] {where}" + (f" ({details})" if details else "") + f"\n{hit.text}")
    return "\n\n".join(blocks)


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
        filter_mcp_messages(self, _FiniteNumbersOnly)  # NaN and Infinity as sent, before the SDK reads them as null

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run a tool; a refused search argument is raised, and the SDK answers it with a tool error."""
        if name == SEARCH_TOOL:
            arguments = check_search_arguments(arguments, self.limits, self.accepted)
        return await super().call_tool(name, arguments)


def _first_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The path (``alpha``, ``filter['page'][1]``) and value of the first NaN or infinite float in it, or None."""
    pending = [(path, value)]
    while pending:  # a loop, not recursion: a request may nest as deep as its parser allowed
        where, item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where, item
        if isinstance(item, dict):
            children = [(f"{where}[{key!r}]" if where else str(key), child) for key, child in item.items()]
        elif isinstance(item, list):
            children = [(f"{where}[{i}]", child) for i, child in enumerate(item)]
        else:
            continue
        pending.extend(reversed(children))  # depth first, in the order sent
    return None


def _refusal(message: SessionMessage | Exception) -> SessionMessage | None:
    """The answer to a request carrying a number JSON has no room for (None for any other message).

    A ``tools/call`` is answered with a tool error, as any other bad argument; other requests, with
    a JSON-RPC invalid-params error. Notifications and responses pass as they are: nothing answers them.
    """
    if isinstance(message, Exception) or not isinstance(message.message.root, JSONRPCRequest):
        return None
    request = message.message.root
    params = request.params or {}
    arguments = params.get("arguments") if request.method == "tools/call" else None
    found = _first_non_finite(arguments) if isinstance(arguments, dict) else None
    if found is None:
        found = _first_non_finite(params, "params")
        if found is None:
            return None
        answer: JSONRPCResponse | JSONRPCError = JSONRPCError(
            jsonrpc="2.0",
            id=request.id,
            error=ErrorData(code=INVALID_PARAMS, message=f"Invalid request parameters: {_not_finite(*found)}"),
        )
    else:
        result = CallToolResult(content=[TextContent(type="text", text=_not_finite(*found))], isError=True)
        answer = JSONRPCResponse(
            jsonrpc="2.0", id=request.id, result=result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
    return SessionMessage(JSONRPCMessage(answer))


def _not_finite(where: str, number: float) -> str:
    shown = "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return (
        f"{where} must be a finite number; got {shown} (JSON has no NaN or Infinity, and a number beyond the "
        "float range, such as 1e400, reads as Infinity)"
    )


class _FiniteNumbersOnly(ObjectReceiveStream[SessionMessage | Exception]):
    """A transport's incoming messages, less the requests carrying a NaN or infinite number: those are answered here."""

    def __init__(
        self,
        messages: ObjectReceiveStream[SessionMessage | Exception],
        answers: ObjectSendStream[SessionMessage],
    ) -> None:
        self._messages = messages
        self._answers = answers

    async def receive(self) -> SessionMessage | Exception:
        """The next message that may go on to the session."""
        while True:
            message = await self._messages.receive()
            refusal = _refusal(message)
            if refusal is None:
                return message
            await self._answers.send(refusal)

    async def aclose(self) -> None:
        """Close the transport's stream."""
        await self._messages.aclose()


def describe_server(server: FastMCP) -> dict[str, Any]:
    """What the ``langchain-fusion://index`` resource of a server from :func:`build_mcp_server` says.

    The library version, what is served (see :func:`describe_index`), the limits and, for an
    index, the defaults and the pipeline (rerank step, multi-query rewrites and windows, None if none).
    """
    if not isinstance(server, _CheckedArgumentsServer):
        raise InvalidParameterError(f"not a server built by build_mcp_server: {type(server).__name__}")
    return dict(server.info)


def per_call_selection(retriever: BaseRetriever) -> tuple[str, ...]:
    """The relevance floor and diversity options ``retriever`` takes per call (through wrappers it passes them to)."""
    inner = innermost_search(retriever)
    takes = inner.per_call_option_names() if inner is not None else ()
    return tuple(name for name in SELECTION_OPTIONS if name in takes)


def build_mcp_server(
    index: str | os.PathLike[str] | Served | PipelineSpec,
    *,
    limits: ServeLimits | None = None,
    name: str = "langchain-fusion",
    log_level: LogLevel = "INFO",
    **options: Any,
) -> FastMCP:
    """An MCP server whose ``search`` tool searches ``index`` (see the module docstring).

    Args:
        index: an index folder (plain or hierarchical) or a store location such as
            ``"milvus://HOST:19530/docs"``, opened and verified now; a loaded
            :class:`~langchain_fusion.index.fusion_index.FusionIndex` or
            :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`; any LangChain retriever
            (served as it is: it brings its own options); or a whole
            :class:`~langchain_fusion.pipeline.spec.PipelineSpec` (then give no ``options``).
        limits: ``host`` and ``port`` of the streamable HTTP transport (see :func:`run_mcp`; on a
            loopback address, requests naming another host are refused: DNS rebinding protection),
            ``max_k`` and ``max_query_chars`` (:class:`~langchain_fusion.pipeline.spec.ServeLimits`);
            or name them among ``options`` (``max_k=50``).
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
    accepted = ("query", *(n for n in pipeline.per_call_options() if n not in FusionOptions.LOCAL_ONLY))
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
    server.add_tool(
        _search_tool(pipeline, limits, accepted[1:]),
        name=SEARCH_TOOL,
        title="Search the documents",
        description=f"Hybrid search over {what}: meaning (vector) and keywords (BM25), fused. Returns the best "
        "chunks, best first, each with its source, page, chunk id, text and scores."
        + _options_text(pipeline, accepted),
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )

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


def _search_tool(pipeline: Pipeline, limits: ServeLimits, options: Sequence[str]) -> Any:
    """The search tool's function, its signature (what FastMCP reads as the input schema) built from the options."""

    async def search(query: str, **given: Any) -> Any:
        overrides = pipeline.request_options(given)
        searcher: BaseRetriever = pipeline.search
        if pipeline.steps.active:  # the call's k is what the pipeline keeps; its other options reach every search
            call_k = overrides.pop("k", None)
            searcher = pipeline.around(searcher if call_k is None else searcher.model_copy(update={"k": call_k}))
        docs = await searcher.ainvoke(query, **overrides)
        results = SearchResults(query=query, results=[_hit(rank, doc) for rank, doc in enumerate(docs, 1)])
        return CallToolResult(
            content=[TextContent(type="text", text=format_results(results))],
            structuredContent=results.model_dump(mode="json"),
        )

    query = inspect.Parameter(
        "query",
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        annotation=Annotated[
            str,
            Field(
                description="What to search for: a question or keywords.",
                min_length=1,
                max_length=limits.max_query_chars,
            ),
        ],
    )
    parameters = [query] + [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=request_annotation(name, limits.max_k, nullable=True),
            default=None,
        )
        for name in options
    ]
    signature = inspect.Signature(parameters, return_annotation=Annotated[CallToolResult, SearchResults])
    setattr(search, "__signature__", signature)  # noqa: B010 - mypy: no such attribute
    return search


def _options_text(pipeline: Pipeline, accepted: Sequence[str]) -> str:
    """What the tool description adds about its options and the server's steps."""
    text = ""
    selection = [name for name in SELECTION_OPTIONS if name in accepted]
    if selection == ["min_relevance"]:  # hierarchical search: no raw-score floors, no diversity
        text += " An optional relevance floor (min_relevance) leaves out weak matches."
    elif selection:
        text += (
            f" Optional relevance floors and diversity ({', '.join(selection)}) leave out weak matches and make the "
            "results more varied."
        )
    steps = []
    if pipeline.steps.multi_query is not None:
        steps.append(f"also searches {pipeline.steps.multi_query.n} rewrites of the query")
    if pipeline.steps.window:
        steps.append(f"widens each hit to {pipeline.steps.window} neighbouring chunks on each side")
    if pipeline.steps.reranker is not None:
        steps.append("reranks the candidates")
    return text + (f" The server {' and '.join(steps)}." if steps else "")


# --- running it ---------------------------------------------------------------------------------


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

    ``stdio``: JSON-RPC over stdin and stdout, nothing else on stdout (see the module notes).
    ``streamable-http``: uvicorn on ``sock`` if given, else on the host and port given to
    :func:`build_mcp_server`; clients connect to ``http://HOST:PORT/mcp``.
    """
    if transport == "stdio":
        with _stdout_for_protocol_only() as stdout:
            anyio.run(_serve_stdio, server, stdout)
    elif transport == "streamable-http":
        bound = sock if sock is not None else bind_socket(server.settings.host, server.settings.port)
        try:
            config = uvicorn.Config(server.streamable_http_app(), log_level=server.settings.log_level.lower())
            uvicorn.Server(config).run(sockets=[bound])
        finally:
            if sock is None:
                bound.close()
    else:
        raise InvalidParameterError(f"transport must be one of {', '.join(TRANSPORTS)}; got {transport!r}")


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
