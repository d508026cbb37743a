"""Serving a fusion index to agents over the Model Context Protocol (MCP): a ``search`` tool.

Needs the ``mcp`` extra (``pip install "langchain-fusion[mcp]"``); this is the only module that
imports the official MCP Python SDK. Any MCP client (Claude Desktop, IDEs, LangChain agents
through ``langchain-mcp-adapters``) can then search the index::

    from langchain_fusion.mcp import build_mcp_server, run_mcp

    server = build_mcp_server("arden-index")     # or a FusionIndex, HierarchicalIndex or retriever
    run_mcp(server)                               # stdio; or run_mcp(server, "streamable-http")

``langchain-fusion mcp INDEX`` does the same from the command line.

The ``search`` tool takes ``query`` (required), and optionally ``k``, ``alpha``, ``filter``
(metadata equality, as the retrievers' ``filter=``) and, when the served retriever takes them per
call (fused search; not a hierarchical index), the relevance floors ``min_vector_score`` and
``min_bm25_score``, ``lambda_mult`` (maximal marginal relevance) and ``max_per_source``. Its
arguments are checked as sent, by the same validators as every retriever option
(:data:`~langchain_fusion.retrievers.fusion.OPTION_CHECKS`): ``true`` is not a number, ``"0.5"``
is not a float, NaN is refused. A bad argument is a tool error (``isError``) with a one-line
message, and the server keeps serving. A result is a readable text block for the model and
structured content (:class:`SearchResults`) for programs. The resource ``langchain-fusion://index``
describes the served index, the server's defaults and its pipeline.

The server-side options are those of the LangServe app (:func:`langchain_fusion.server.create_app`)
and are built by the same code (:mod:`langchain_fusion.chains`): floor and diversity defaults, a
rerank step (``reranker="llm"`` or ``"cross-encoder:MODEL"``) and multi-query fusion
(``multi_query=N``), the last two around every search.

Safety: the server serves the one index it was built with; nothing in a request names a file.
There is no authentication: over HTTP, :func:`run_mcp` binds to 127.0.0.1 unless told otherwise.
"""

# No ``from __future__ import annotations``: FastMCP reads the search tool's annotations at run
# time, and they carry each server's own limits (the tool is defined inside build_mcp_server).

import contextlib
import inspect
import io
import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Annotated, Any, Literal, get_args

from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, Field

from langchain_fusion import metadata as keys
from langchain_fusion import sockets
from langchain_fusion._checks import (
    FusionMethod,
    check_alpha,
    check_fetch_k,
    check_k,
    check_method,
    check_positive_int,
)
from langchain_fusion.chains import (
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_RERANK_CANDIDATES,
    SELECTION_OPTIONS,
    RetrieverPipeline,
    build_retriever_pipeline,
    check_selection,
    refuse_selection_on_hierarchical,
    uses_chat_model,
)
from langchain_fusion.errors import InvalidParameterError, MissingDependencyError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.index.opening import open_index
from langchain_fusion.models.chat import chat_model_or_reason
from langchain_fusion.retrievers.fusion import OPTION_CHECKS, SearchRetriever
from langchain_fusion.search.options import SEARCH_DEFAULTS
from langchain_fusion.sockets import is_loopback
from langchain_fusion.stores.local.folder import library_version

try:
    import anyio
    import uvicorn
    from mcp.server.fastmcp import FastMCP
    from mcp.server.stdio import stdio_server
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError(
        f"serving over MCP needs the 'mcp' extra ({exc.name} is missing): pip install 'langchain-fusion[mcp]'"
    ) from None

DEFAULT_HOST = "127.0.0.1"
"""Where the streamable HTTP transport listens by default: this machine only."""
DEFAULT_PORT = 8000
"""The default TCP port of the streamable HTTP transport."""
DEFAULT_MAX_K = 100
"""Largest ``k`` a search may ask for."""
DEFAULT_MAX_QUERY_CHARS = 2000
"""Longest query accepted, in characters."""
MCP_PATH = "/mcp"
"""Where the streamable HTTP transport serves the protocol."""
SEARCH_TOOL = "search"
"""The name of the search tool."""
SEARCH_ARGUMENTS = ("query", "k", "alpha", "filter", *SELECTION_OPTIONS)
"""The arguments the search tool takes (the last four only when the served retriever takes them per call)."""
INDEX_RESOURCE = "langchain-fusion://index"
"""The URI of the resource describing the served index."""

Transport = Literal["stdio", "streamable-http"]
"""How clients reach the server: ``stdio`` (the client starts the server as a subprocess) or
``streamable-http`` (the server listens on a TCP port; clients connect to ``/mcp``)."""
TRANSPORTS: tuple[str, ...] = get_args(Transport)
"""The accepted values of ``transport``."""

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
"""Log levels of the server (its log lines go to stderr)."""

Served = FusionIndex | HierarchicalIndex | BaseRetriever

FilterValue = str | int | float | bool | None | list[str | int | float | bool | None]
"""A filter condition: a metadata value to equal, or a list of values (any of them)."""


@dataclass(frozen=True)
class SearchLimits:
    """The bounds every search is checked against (a tool error beyond them)."""

    max_k: int = DEFAULT_MAX_K
    """Largest ``k`` a search may ask for."""
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    """Longest query, in characters."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            check_positive_int(value, name)


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
    limits: SearchLimits = SearchLimits(),
    accepted: Sequence[str] = SEARCH_ARGUMENTS,
) -> dict[str, Any]:
    """The search tool's arguments as sent, checked; an InvalidParameterError names the first bad one.

    Every option goes through the retrievers' own per-call checks
    (:data:`~langchain_fusion.retrievers.fusion.OPTION_CHECKS`); ``null`` means the server's
    default. A ``filter`` sent as a JSON object in a string (some clients do) is read as that object.
    ``accepted``: the arguments this server's tool takes (a subset of :data:`SEARCH_ARGUMENTS`).
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
        if name == "query":
            continue
        value = arguments.get(name)
        if name == "filter" and isinstance(value, str):
            with contextlib.suppress(ValueError):
                parsed = json.loads(value)
                value = parsed if isinstance(parsed, dict) else value
        if value is not None:
            checked[name] = OPTION_CHECKS[name](value)
    if checked.get("k", 1) > limits.max_k:
        raise InvalidParameterError(f"k must be at most {limits.max_k} (the server's max_k); got {checked['k']}")
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
        scores = [
            f"{label} {value:.3f}"
            for label, value in (("fused", hit.fusion_score), ("vector", hit.vector_score), ("bm25", hit.bm25_score))
            if value is not None
        ]
        details = "; ".join(part for part in (f"id {hit.id}" if hit.id else "", ", ".join(scores)) if part)
        blocks.append(f"[{hit.rank}] {where}" + (f" ({details})" if details else "") + f"\n{hit.text}")
    return "\n\n".join(blocks)


def describe_index(served: Served) -> dict[str, Any]:
    """What the ``langchain-fusion://index`` resource says about what is served: kind, counts, model."""
    if isinstance(served, HierarchicalIndex):
        chunks = served.chunks
        return {
            "kind": "hierarchical",
            "documents": len(chunks),
            "summaries": len(served.summaries),
            "embeddings": chunks.embeddings_id,
            "dimension": chunks.dimension,
        }
    if isinstance(served, FusionIndex):
        return {
            "kind": "index",
            "documents": len(served),
            "embeddings": served.embeddings_id,
            "dimension": served.dimension,
        }
    return {"kind": "retriever", "retriever": type(served).__name__}


class _CheckedArgumentsServer(FastMCP):
    """FastMCP whose search tool sees only arguments checked, as sent, by the library's validators.

    FastMCP's own argument parsing is lax (``true`` becomes 1, unknown arguments are dropped) and
    reports problems on several lines; checking the raw arguments first gives one-line tool errors.
    """

    def __init__(self, limits: SearchLimits, accepted: Sequence[str], info: dict[str, Any], **settings: Any) -> None:
        super().__init__(**settings)
        self.limits = limits
        self.accepted = tuple(accepted)
        self.info = info

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run a tool; a refused search argument is raised, and the SDK answers it with a tool error."""
        if name == SEARCH_TOOL:
            arguments = check_search_arguments(arguments, self.limits, self.accepted)
        return await super().call_tool(name, arguments)


def describe_server(server: FastMCP) -> dict[str, Any]:
    """What the ``langchain-fusion://index`` resource of a server from :func:`build_mcp_server` says.

    The library version, what is served (see :func:`describe_index`), the limits and, for an
    index, the defaults and the pipeline (rerank step and multi-query rewrites, None if none).
    """
    if not isinstance(server, _CheckedArgumentsServer):
        raise InvalidParameterError(f"not a server built by build_mcp_server: {type(server).__name__}")
    return dict(server.info)


def per_call_selection(retriever: BaseRetriever) -> tuple[str, ...]:
    """The relevance floor and diversity options ``retriever`` takes per call (through wrappers it passes them to).

    A wrapper (context windows, rerank, multi-query) passes them to its ``retriever``; the
    innermost one says which it takes (its ``per_call_option_names()``): all of them for a fused
    retriever, none for a hierarchical one or a retriever from elsewhere.
    """
    inner: Any = retriever
    while isinstance(getattr(inner, "retriever", None), BaseRetriever):
        inner = inner.retriever
    takes = inner.per_call_option_names() if isinstance(inner, SearchRetriever) else ()
    return tuple(name for name in SELECTION_OPTIONS if name in takes)


def build_mcp_server(
    index: str | os.PathLike[str] | Served,
    *,
    embeddings: Embeddings | None = None,
    k: int | None = None,
    alpha: float | None = None,
    method: FusionMethod | None = None,
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k,
    min_vector_score: float | None = SEARCH_DEFAULTS.min_vector_score,
    min_bm25_score: float | None = SEARCH_DEFAULTS.min_bm25_score,
    lambda_mult: float | None = SEARCH_DEFAULTS.lambda_mult,
    max_per_source: int | None = SEARCH_DEFAULTS.max_per_source,
    reranker: BaseDocumentCompressor | str | None = None,
    rerank_candidates: int = DEFAULT_RERANK_CANDIDATES,
    multi_query: int | None = None,
    llm: Runnable[Any, Any] | str | None = None,
    llm_timeout: float | None = DEFAULT_LLM_TIMEOUT,
    max_k: int = DEFAULT_MAX_K,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    name: str = "langchain-fusion",
    log_level: LogLevel = "INFO",
) -> FastMCP:
    """An MCP server (FastMCP) whose ``search`` tool is the fused retriever over ``index``.

    The options from ``k`` to ``llm_timeout`` mean what they mean for
    :func:`langchain_fusion.server.create_app`, and are checked and built by the same code.

    Args:
        index: a saved index folder (plain or hierarchical) or a Milvus location, opened and
            verified now, once; a loaded :class:`~langchain_fusion.index.fusion_index.FusionIndex`
            or :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`; or a retriever
            that takes ``k``, ``alpha`` and ``filter`` per call (e.g. a ``FusionRetriever``, or a
            ``ContextWindowRetriever`` around one). A retriever brings its own options: none of
            those below up to ``llm_timeout`` may be given with one.
        embeddings: the embeddings to open a folder or location with; default: the model it records.
        k: documents per search unless the call sets ``k`` (default 4).
        alpha: weight of the vector side unless the call sets ``alpha`` (default 0.5).
        method: fusion method (default ``weighted``).
        fetch_k: candidates per side before fusion (None: the whole corpus).
        min_vector_score: relevance floor on the raw cosine similarity unless the call sets one
            (None: none); see :mod:`~langchain_fusion.search.floors`. Fused search only, as are
            the next three (not a hierarchical index).
        min_bm25_score: relevance floor on the raw BM25 score unless the call sets one (None: none).
        lambda_mult: re-rank by maximal marginal relevance with this weight of relevance unless
            the call sets one (None: no MMR).
        max_per_source: the most results from one source unless the call sets it (None: no cap).
        reranker: a rerank step around every search: ``"llm"`` (the chat model rates each
            candidate), ``"cross-encoder:MODEL"`` (a local cross-encoder, loaded now), or any
            ``BaseDocumentCompressor``. Each search then fetches ``max(rerank_candidates, k)``
            candidates and the step keeps the call's ``k``.
        rerank_candidates: candidates retrieved per search for ``reranker``.
        multi_query: if given, the chat model writes this many rewrites of each query (1 to 10),
            each is searched too and the lists are fused.
        llm: the chat model of an ``"llm"`` rerank and of ``multi_query``: a chat model (or any
            Runnable from a prompt) or a spec such as ``"openai:gpt-4o-mini"``. Default: OpenAI
            ``gpt-4o-mini`` when ``OPENAI_API_KEY`` is set, else an error naming what is missing.
            An error when neither needs it.
        llm_timeout: seconds to wait for each chat model answer per try (None: the client's own limit).
        max_k: the largest ``k`` a call may ask for.
        max_query_chars: the longest query a call may send.
        host: the address the streamable HTTP transport listens on (see :func:`run_mcp`). On a
            loopback address, requests naming another host are refused (DNS rebinding protection).
        port: its TCP port (0: any free port).
        name: the server's name, as clients show it.
        log_level: the server's log level (its log lines go to stderr).

    Raises:
        FusionError: the folder is not a valid index, a parameter is out of range, or the chat
            model or cross-encoder asked for cannot be built.
    """
    limits = SearchLimits(max_k=max_k, max_query_chars=max_query_chars)
    served: Served
    retriever: BaseRetriever
    selection_given = {
        "min_vector_score": min_vector_score,
        "min_bm25_score": min_bm25_score,
        "lambda_mult": lambda_mult,
        "max_per_source": max_per_source,
    }
    if isinstance(index, BaseRetriever):
        given = {
            "embeddings": embeddings,
            "k": k,
            "alpha": alpha,
            "method": method,
            **selection_given,
            "reranker": reranker,
            "multi_query": multi_query,
            "llm": llm,
        }
        named = [option for option, value in given.items() if value is not None]
        named += ["fetch_k"] if fetch_k != SEARCH_DEFAULTS.fetch_k else []
        named += ["rerank_candidates"] if rerank_candidates != DEFAULT_RERANK_CANDIDATES else []
        named += ["llm_timeout"] if llm_timeout != DEFAULT_LLM_TIMEOUT else []
        if named:
            raise InvalidParameterError(
                f"{', '.join(named)}: options of the retriever built from an index; "
                "a retriever given brings its own, so set them on it"
            )
        served = retriever = index
        defaults: dict[str, Any] | None = None
        pipeline = RetrieverPipeline()
    else:
        # Checked before the index is opened: a bad option fails at once.
        default_k = check_k(SEARCH_DEFAULTS.k if k is None else k)
        if default_k > limits.max_k:
            raise InvalidParameterError(f"k ({default_k}) must be at most max_k ({limits.max_k})")
        defaults = {
            "k": default_k,
            "alpha": check_alpha(SEARCH_DEFAULTS.alpha if alpha is None else alpha),
            "method": check_method(SEARCH_DEFAULTS.method if method is None else method),
            "fetch_k": check_fetch_k(fetch_k),
        }
        selection = check_selection(selection_given)
        chat_model, no_chat_reason = None, None
        if uses_chat_model(reranker, multi_query):
            chat_model, no_chat_reason = chat_model_or_reason(llm)
        elif llm is not None:
            raise InvalidParameterError(
                "llm rates candidates (reranker='llm') and writes rewrites (multi_query=N) only: add one, or drop llm"
            )
        pipeline = build_retriever_pipeline(
            reranker,
            rerank_candidates=rerank_candidates,
            multi_query=multi_query,
            chat_model=chat_model,
            no_chat_reason=no_chat_reason,
            llm_timeout=llm_timeout,
        )
        if isinstance(index, (FusionIndex, HierarchicalIndex)):
            if embeddings is not None:
                raise InvalidParameterError(
                    "embeddings open an index folder or location; a loaded index brings its own: drop embeddings"
                )
            served = index
        else:
            served = open_index(index, embeddings)
        refuse_selection_on_hierarchical(selection, isinstance(served, HierarchicalIndex))
        defaults.update(selection)
        retriever = served.as_retriever(**defaults)
    selection_per_call = per_call_selection(retriever)
    accepted = ("query", "k", "alpha", "filter", *selection_per_call)
    info = {"library_version": library_version(), **describe_index(served), "limits": asdict(limits)}
    if defaults is not None:
        info.update(defaults=defaults, pipeline=pipeline.describe())
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
        host=host,
        port=port,
        streamable_http_path=MCP_PATH,
        # A search needs no session: every HTTP request stands alone and is answered with plain JSON.
        stateless_http=True,
        json_response=True,
        log_level=log_level,
    )

    async def search(
        query: Annotated[
            str,
            Field(
                description="What to search for: a question or keywords.",
                min_length=1,
                max_length=limits.max_query_chars,
            ),
        ],
        k: Annotated[
            int | None,
            Field(description=f"How many chunks to return (1 to {limits.max_k}).", ge=1, le=limits.max_k),
        ] = None,
        alpha: Annotated[
            float | None,
            Field(
                description="Weight of meaning-based (vector) search, 0 to 1; 1 - alpha is the weight of exact "
                "keyword (BM25) search. Higher for paraphrases, lower for names, codes and rare terms.",
                ge=0.0,
                le=1.0,
            ),
        ] = None,
        filter: Annotated[
            dict[str, FilterValue] | None,
            Field(
                description='Only chunks whose metadata equals these values, e.g. {"source": "report.pdf", '
                '"page": [3, 4]} (a list means any of its values).'
            ),
        ] = None,
        min_vector_score: Annotated[
            float | None,
            Field(
                description="Relevance floor on the vector (cosine) similarity, -1 to 1: a chunk is returned only "
                "if it clears this floor or min_bm25_score's, so a search with no good answer returns fewer "
                "chunks, or none. Default: the server's.",
                ge=-1.0,
                le=1.0,
            ),
        ] = None,
        min_bm25_score: Annotated[
            float | None,
            Field(
                description="Relevance floor on the keyword (BM25) score, 0 or more (0: the chunk contains a "
                "query word); see min_vector_score. Default: the server's.",
                ge=0.0,
            ),
        ] = None,
        lambda_mult: Annotated[
            float | None,
            Field(
                description="Diversity (maximal marginal relevance): the weight of relevance against variety, 0 to "
                "1 (1: the plain relevance order); lower it when the results repeat one another. Default: the "
                "server's.",
                ge=0.0,
                le=1.0,
            ),
        ] = None,
        max_per_source: Annotated[
            int | None,
            Field(
                description="At most this many chunks from one source (file), the next best filling their place. "
                "Default: the server's.",
                ge=1,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SearchResults]:
        given: dict[str, Any] = {
            "k": k,
            "alpha": alpha,
            "filter": filter,
            "min_vector_score": min_vector_score,
            "min_bm25_score": min_bm25_score,
            "lambda_mult": lambda_mult,
            "max_per_source": max_per_source,
        }
        overrides = {option: value for option, value in given.items() if value is not None}
        searcher: Runnable[str, list[Document]] = retriever
        if pipeline.active:  # the call's k is what the pipeline keeps; its other options reach every search
            call_k = overrides.pop("k", None)
            searcher = pipeline(retriever if call_k is None else retriever.model_copy(update={"k": call_k}))
        docs = await searcher.ainvoke(query, **overrides)
        results = SearchResults(query=query, results=[_hit(rank, doc) for rank, doc in enumerate(docs, 1)])
        return CallToolResult(
            content=[TextContent(type="text", text=format_results(results))],
            structuredContent=results.model_dump(mode="json"),
        )

    # The tool's input schema lists only what this server's retriever takes (FastMCP reads the signature).
    signature = inspect.signature(search)
    trimmed = [parameter for parameter in signature.parameters.values() if parameter.name in accepted]
    setattr(search, "__signature__", signature.replace(parameters=trimmed))  # noqa: B010 - mypy: no such attribute
    options_text = ""
    if selection_per_call:
        options_text = (
            " Optional relevance floors (min_vector_score, min_bm25_score) leave out weak matches; lambda_mult and "
            "max_per_source make the results more varied."
        )
    steps = []
    if pipeline.multi_query is not None:
        steps.append(f"also searches {pipeline.multi_query.n} rewrites of the query")
    if pipeline.reranker is not None:
        steps.append("reranks the candidates")
    pipeline_text = f" The server {' and '.join(steps)}." if steps else ""
    server.add_tool(
        search,
        name=SEARCH_TOOL,
        title="Search the documents",
        description=f"Hybrid search over {what}: meaning (vector) and keywords (BM25), fused. Returns the best "
        "chunks, best first, each with its source, page, chunk id, text and scores." + options_text + pipeline_text,
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )

    def index_info() -> str:
        return json.dumps(info, indent=2)

    server.resource(
        INDEX_RESOURCE,
        name="index",
        title="The served index",
        description="What the search tool searches: kind, number of chunks, embedding model, defaults, pipeline, "
        "limits.",
        mime_type="application/json",
    )(index_info)
    return server


# --- running it ---------------------------------------------------------------------------------


def bind_socket(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: a free one), for :func:`run_mcp`; OSError if it cannot bind."""
    return sockets.bind_socket(host, port)


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT/mcp``: where clients of the streamable HTTP transport connect, for a bound socket."""
    return sockets.base_url(sock) + MCP_PATH


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
        lowlevel = server._mcp_server
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
    "describe_index",
    "describe_server",
    "format_results",
    "is_loopback",
    "per_call_selection",
    "run_mcp",
    "url_of",
]
