"""Serving a fusion index over HTTP with LangServe: the retriever, the RAG chain and a health check.

Needs the ``server`` extra (``pip install "langchain-fusion[server]"``); this is the only package
that imports LangServe, FastAPI and uvicorn. LangServe is in maintenance mode upstream (bug fixes
only) but works with langchain-core 1.x::

    from langchain_fusion.server import create_app

    app = create_app("arden-index")     # run with `uvicorn module:app`, or `langchain-fusion serve arden-index`

:func:`create_app` builds the pipeline of a :class:`~langchain_fusion.pipeline.spec.PipelineSpec`
once (the index, and a rerank step, multi-query fusion or context windows around every search)
and serves, with LangServe's ``add_routes``:

- ``/retriever/invoke``, ``/batch``, ``/stream``, ``/stream_log``, ``/playground/`` and the input,
  output and config schemas: the retriever (for a folder saved with page summaries, the
  hierarchical retriever). The input is the query string; the output is the documents with
  their score provenance.
- ``/rag/...``: the RAG chain of :func:`~langchain_fusion.chains.build_rag_chain`, from a question
  to ``{"answer", "sources"}``, when a chat model is available.
- ``GET /health``: the index (kind, counts, embeddings, the saved manifest), whether ``/rag`` is
  served (and if not, why), the defaults, the pipeline and the limits. A remote store (Milvus)
  is asked whether it answers on each call: if not, 503 with ``"status": "unavailable"`` and the
  error.

The search options a request may set are LangServe configurable fields, derived from the option
schema (:mod:`langchain_fusion.search.options`): every option the served search takes per call
except those that bound its cost (``fetch_k``), e.g.
``{"input": "...", "config": {"configurable": {"k": 8, "alpha": 0.3}}}``.

Safety: the server serves the one index given at start-up and never opens a path taken from a
request (nothing in a request can name a file). Requests are bounded
(:class:`~langchain_fusion.pipeline.spec.ServeLimits`), with 4xx answers that say what was wrong:
the query length (``max_query_chars``), ``k`` (``max_k``), the inputs of a batch
(``max_batch_size``) and the body size (``max_request_bytes``, 413). There is no authentication:
:func:`serve` and the ``serve`` command bind to 127.0.0.1 unless told otherwise.

The package: :mod:`~langchain_fusion.server.app` (the app, ``/health`` and :func:`serve`),
:mod:`~langchain_fusion.server.batching` (batches grouped by configuration),
:mod:`~langchain_fusion.server.guards` (configurable fields and batches checked as sent),
:mod:`~langchain_fusion.server.bodies` (body size and JSON), :mod:`~langchain_fusion.server.origins`
(Host names and JSON bodies only) and :mod:`~langchain_fusion.server.streams` (a failed chat model's
stream error).
"""

from __future__ import annotations

import importlib

from langchain_fusion.errors import MissingDependencyError

try:  # before the modules that need the extra: without it, one line saying how to install it
    for _needed in (
        "uvicorn",
        "fastapi",
        "fastapi.concurrency",
        "fastapi.exceptions",
        "langserve",
        "langserve.server",
        "starlette.responses",
        "starlette.types",
    ):
        importlib.import_module(_needed)
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError(
        f"serving needs the 'server' extra ({exc.name} is missing): pip install 'langchain-fusion[server]'"
    ) from None

# The public API (__all__), and (aliased as themselves) the other names the single module had.
from langchain_fusion.server.app import (
    DEFAULT_HOST,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_K,
    DEFAULT_MAX_QUERY_CHARS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_PORT,
    Limits,
    app_for,
    create_app,
    health_status,
    serve,
)
from langchain_fusion.server.app import ENDPOINTS as ENDPOINTS
from langchain_fusion.server.app import HEALTH_PATH as HEALTH_PATH
from langchain_fusion.server.app import RAG_PATH as RAG_PATH
from langchain_fusion.server.app import RETRIEVER_PATH as RETRIEVER_PATH
from langchain_fusion.server.app import SHUTDOWN_GRACE_SECONDS as SHUTDOWN_GRACE_SECONDS
from langchain_fusion.server.app import served_summary as served_summary
from langchain_fusion.server.guards import query_type
from langchain_fusion.server.guards import request_options as request_options
from langchain_fusion.server.origins import LOOPBACK_NAMES as LOOPBACK_NAMES
from langchain_fusion.server.origins import allowed_hosts as allowed_hosts
from langchain_fusion.sockets import bind_socket, is_loopback, url_of

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_K",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_PORT",
    "Limits",
    "app_for",
    "bind_socket",
    "create_app",
    "health_status",
    "is_loopback",
    "query_type",
    "serve",
    "url_of",
]
