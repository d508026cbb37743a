"""The LangServe app: :func:`create_app` and :func:`app_for` build it, :func:`serve` runs it.

The retriever (and the RAG chain, when there is a chat model) served with LangServe's ``add_routes``
behind the request checks (:mod:`~langchain_fusion.server.guards`, :mod:`~langchain_fusion.server.bodies`,
:mod:`~langchain_fusion.server.origins`, :mod:`~langchain_fusion.server.streams`), and ``GET /health``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable
from langchain_core.runnables.utils import AnyConfigurableField
from langserve import add_routes
from langserve.server import EndpointName
from starlette.responses import JSONResponse

from langchain_fusion._compat import fresh_sse_exit_event
from langchain_fusion._version import library_version
from langchain_fusion.errors import InvalidParameterError, ProviderError, redact
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.pipeline import Pipeline, PipelineSpec, ServeLimits, build
from langchain_fusion.pipeline.spec import serving_spec
from langchain_fusion.search.options import describe_option, request_annotation
from langchain_fusion.server.batching import BatchByConfiguration
from langchain_fusion.server.bodies import RequestBody
from langchain_fusion.server.guards import RequestGuard, query_type, request_options
from langchain_fusion.server.origins import SameOrigin, allowed_hosts
from langchain_fusion.server.streams import StreamErrors
from langchain_fusion.sockets import bind_socket
from langchain_fusion.threads import one_blas_thread

logger = logging.getLogger(__name__)

_DEFAULTS = ServeLimits()
DEFAULT_HOST: str = _DEFAULTS.host
"""Where :func:`serve` and ``langchain-fusion serve`` listen by default: this machine only."""
DEFAULT_PORT: int = _DEFAULTS.port
"""The default TCP port."""
DEFAULT_MAX_QUERY_CHARS: int = _DEFAULTS.max_query_chars
"""Longest query (or question) accepted by default, in characters."""
DEFAULT_MAX_K: int = _DEFAULTS.max_k
"""Largest ``k`` (and ``k_summaries``) a request may ask for by default."""
DEFAULT_MAX_BATCH_SIZE: int = _DEFAULTS.max_batch_size
"""Most inputs in one ``/batch`` request by default."""
DEFAULT_MAX_REQUEST_BYTES: int = _DEFAULTS.max_request_bytes
"""Largest request body by default, in bytes (413 above it)."""

Limits = ServeLimits
"""The bounds every request is checked against (an alias of :class:`~langchain_fusion.pipeline.spec.ServeLimits`)."""

RETRIEVER_PATH = "/retriever"
"""Where the retriever is served."""
RAG_PATH = "/rag"
"""Where the RAG chain is served (when there is a chat model)."""
HEALTH_PATH = "/health"
"""The health endpoint."""

ENDPOINTS: Sequence[EndpointName] = (
    "invoke",
    "batch",
    "stream",
    "stream_log",  # the playground streams through it
    "playground",
    "input_schema",
    "output_schema",
    "config_schema",
    "config_hashes",  # the playground's shareable /c/<config>/ links; bounded like the rest
)
"""The LangServe endpoints served for each runnable (not ``stream_events`` or feedback)."""


def _configurable_retriever(pipeline: Pipeline, limits: ServeLimits) -> Runnable[str, list[Document]]:
    """The pipeline's retriever, its request options exposed as LangServe configurable fields."""
    fields: dict[str, AnyConfigurableField] = {
        name: ConfigurableField(
            id=name, name=name, description=describe_option(name), annotation=request_annotation(name, limits.max_k)
        )
        for name in request_options(pipeline)
    }
    wrap = pipeline.around if pipeline.steps.active else None
    configurable = BatchByConfiguration(default=pipeline.search, fields=fields, wrap=wrap)
    configurable.name = type(pipeline.search).__name__
    return configurable


async def _provider_failed(request: Request, exc: Exception) -> JSONResponse:
    """A chat model that failed for good is the upstream's fault: 502 with its one-line error."""
    message = redact(str(exc))
    logger.warning("%s %s: %s", request.method, request.url.path, message)
    return JSONResponse({"detail": message}, status_code=502)


async def _request_refused(request: Request, exc: Exception) -> JSONResponse:
    """An option the served index cannot honour (e.g. min_relevance without calibration): 422 with the reason."""
    return JSONResponse({"detail": str(exc)}, status_code=422)


def create_app(
    index: str | os.PathLike[str] | FusionIndex | HierarchicalIndex | PipelineSpec,
    *,
    limits: ServeLimits | None = None,
    title: str = "langchain-fusion",
    **options: Any,
) -> FastAPI:
    """A FastAPI app serving one index's retriever and RAG chain with LangServe, and ``/health``.

    Args:
        index: a saved index folder (plain, or hierarchical: saved with page summaries), loaded
            and verified now, once; a store location such as ``"milvus://HOST:19530/docs"``
            (see :mod:`~langchain_fusion.stores.registry`); an already loaded
            :class:`~langchain_fusion.index.fusion_index.FusionIndex` or
            :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`; or a whole
            :class:`~langchain_fusion.pipeline.spec.PipelineSpec` (then give no ``options``).
        limits: the request bounds (default :class:`~langchain_fusion.pipeline.spec.ServeLimits`);
            or name them among ``options`` (``max_k=50``).
        title: the app's title in its OpenAPI page.
        options: the pipeline, by name: the search options of
            :class:`~langchain_fusion.search.options.SearchOptions` (``k``, ``alpha``, ``method``,
            ``fetch_k``, relevance floors, diversity; requests may override all but ``fetch_k``)
            and of hierarchical search (``k_summaries``, ``summary_weight``), and the fields of
            :class:`~langchain_fusion.pipeline.spec.PipelineSpec`: ``embeddings``, ``llm`` (the
            chat model of ``/rag``; default OpenAI ``gpt-4o-mini`` when ``OPENAI_API_KEY`` is set,
            otherwise only the retriever is served, which ``/health`` and a log line say),
            ``llm_timeout`` (per try; a chat model that fails for good answers 502), ``reranker``
            (``"llm"``, ``"cross-encoder:MODEL"`` or any ``BaseDocumentCompressor``: each query
            then fetches ``max(rerank_candidates, k)`` candidates and keeps the request's ``k``),
            ``rerank_candidates``, ``multi_query`` (rewrites per query), ``window`` and
            ``window_max_chars`` (context windows).

    Raises:
        FusionError: the folder is not a valid index, an option is unknown or out of range, or the
            chat model or cross-encoder asked for cannot be built.
    """
    spec, limits = serving_spec(index, limits, options, answer="if_available")
    if isinstance(spec.index, BaseRetriever):
        raise InvalidParameterError(
            f"create_app serves an index (a folder, a store location, a FusionIndex or a HierarchicalIndex), not a "
            f"{type(spec.index).__name__}: its options are served as configurable fields, which a retriever given "
            "as it is cannot take (build_mcp_server serves one as it is)"
        )
    return app_for(build(spec).within(limits), limits, title)


def app_for(pipeline: Pipeline, limits: ServeLimits, title: str = "langchain-fusion") -> FastAPI:
    """The app serving a built pipeline within ``limits`` (what :func:`create_app` returns).

    Limits BLAS to one thread for the process (:func:`~langchain_fusion.threads.one_blas_thread`):
    concurrent requests, each on a worker thread, are the server's parallelism.
    """
    one_blas_thread()
    pipeline.check_tenancy(limits)
    query = query_type(limits.max_query_chars)
    retriever = _configurable_retriever(pipeline, limits)
    guard = RequestGuard(limits, pipeline)
    app = FastAPI(
        title=title,
        version=library_version(),
        description="Hybrid (FAISS vector + BM25 keyword) retrieval served with LangServe.",
    )
    app.add_middleware(StreamErrors)
    app.add_middleware(RequestBody, max_bytes=limits.max_request_bytes)
    app.add_middleware(SameOrigin, allowed=allowed_hosts(limits))  # the outermost: before any body is read
    app.add_exception_handler(ProviderError, _provider_failed)
    app.add_exception_handler(InvalidParameterError, _request_refused)
    app.router.on_startup.append(fresh_sse_exit_event)
    routes: dict[str, Any] = {
        "enabled_endpoints": ENDPOINTS,
        "per_req_config_modifier": guard.check_config,
        "dependencies": [Depends(guard.check_batch)],
    }
    add_routes(app, retriever.with_types(input_type=query), path=RETRIEVER_PATH, **routes)
    if pipeline.chat_model is not None:
        from langchain_fusion.chains import pipeline_rag_chain

        add_routes(app, pipeline_rag_chain(pipeline, retriever).with_types(input_type=query), path=RAG_PATH, **routes)
    status = health_status(pipeline, limits)
    app.state.langchain_fusion = status

    @app.get(HEALTH_PATH, tags=["health"], summary="The served index, its manifest, the chat model and the limits")
    async def health(response: Response) -> dict[str, Any]:
        reachable = await run_in_threadpool(pipeline.store_status)
        if reachable["status"] != "ok":
            response.status_code = 503
        return {**status, **reachable}

    logger.info("serving %s at %s", served_summary(status), RETRIEVER_PATH)
    if pipeline.chat_model is None:
        logger.warning(
            "no chat model, so only %s is served (not %s): %s", RETRIEVER_PATH, RAG_PATH, pipeline.no_chat_reason
        )
    else:
        logger.info("RAG chain with %s at %s", status["rag"]["chat_model"], RAG_PATH)
    return app


def health_status(pipeline: Pipeline, limits: ServeLimits) -> dict[str, Any]:
    """What ``GET /health`` answers: the pipeline's description, the routes, the RAG chain and the limits."""
    described = pipeline.describe()
    enabled = pipeline.chat_model is not None
    return {
        "status": "ok",
        "library_version": described["library_version"],
        "index": described["index"],
        "routes": {"retriever": RETRIEVER_PATH, "rag": RAG_PATH if enabled else None},
        "rag": {"enabled": enabled, "chat_model": described["chat_model"], "reason": described["no_chat_reason"]},
        "defaults": described["defaults"],
        "pipeline": described["pipeline"],
        "limits": limits.bounds(),
    }


def served_summary(status: dict[str, Any]) -> str:
    """``"8 chunks (model)"`` or ``"8 chunks and 2 summaries (model)"`` from a health status."""
    index = status["index"]
    what = f"{index['documents']} chunks"
    if index["kind"] == "hierarchical":
        what += f" and {index['summaries']} summaries"
    return f"{what} ({index['embeddings']})"


# --- running it ---------------------------------------------------------------------------------


SHUTDOWN_GRACE_SECONDS = 10
"""How long a stopping server lets requests in flight finish (without a limit it could wait for a minute)."""


def serve(
    app: FastAPI,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    sock: socket.socket | None = None,
    log_level: str = "info",
) -> None:
    """Run ``app`` with uvicorn until interrupted (Ctrl-C); on ``sock`` if given, else on ``host:port``.

    On SIGTERM or Ctrl-C, requests in flight get :data:`SHUTDOWN_GRACE_SECONDS` to finish (a RAG
    answer still streaming is cut then), so a stop never waits on a slow chat model.
    """
    bound = sock if sock is not None else bind_socket(host, port)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS)
    try:
        uvicorn.Server(config).run(sockets=[bound])
    finally:
        if sock is None:
            bound.close()
