"""Serving a fusion index over HTTP with LangServe: the retriever, the RAG chain and a health check.

Needs the ``server`` extra (``pip install "langchain-fusion[server]"``); this is the only module
that imports LangServe, FastAPI and uvicorn. LangServe is in maintenance mode upstream (bug fixes
only) but works with langchain-core 1.x::

    from langchain_fusion.server import create_app

    app = create_app("arden-index")     # run with `uvicorn module:app`, or `langchain-fusion serve arden-index`

:func:`create_app` loads the index once and serves, with LangServe's ``add_routes``:

- ``/retriever/invoke``, ``/batch``, ``/stream``, ``/stream_log``, ``/playground/`` and the input,
  output and config schemas: the fusion retriever (for a folder saved with page summaries, the
  hierarchical retriever). The input is the query string; the output is the documents with
  their score provenance.
- ``/rag/...``: the RAG chain of :func:`~langchain_fusion.chains.build_rag_chain`, from a question
  to ``{"answer", "sources"}``, when a chat model is available.
- ``GET /health``: the index (kind, counts, embeddings, the saved manifest), whether ``/rag`` is
  served (and if not, why), the defaults and the limits.

``k``, ``alpha`` and ``method`` (and ``k_summaries`` on a hierarchical index) can be set per request
through LangServe's configurable fields: ``{"input": "...", "config": {"configurable": {"k": 8}}}``.

Safety: the server serves the one index given at start-up and never opens a path taken from a
request (nothing in a request can name a file: the configurable fields are numbers and a fusion
method). Requests are bounded, with 4xx answers that say what was wrong: the query length
(``max_query_chars``), ``k`` (``max_k``), the inputs of a batch (``max_batch_size``) and the
body size (``max_request_bytes``, 413). There is no authentication: :func:`serve` and the
``serve`` command bind to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.runnables.configurable import RunnableConfigurableFields
from langchain_core.runnables.utils import AnyConfigurableField
from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from langchain_fusion import sockets
from langchain_fusion._checks import FusionMethod, check_alpha, check_method
from langchain_fusion.chains import (
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_RERANK_CANDIDATES,
    build_retriever_pipeline,
    check_selection,
    refuse_selection_on_hierarchical,
)
from langchain_fusion.errors import InvalidParameterError, MissingDependencyError, ProviderError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.index.opening import open_index
from langchain_fusion.models.chat import chat_model_or_reason
from langchain_fusion.search.options import SEARCH_DEFAULTS
from langchain_fusion.sockets import is_loopback
from langchain_fusion.stores.local.folder import MANIFEST, library_version
from langchain_fusion.stores.locations import is_store_location

try:
    import uvicorn
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from langserve import add_routes
    from langserve.server import EndpointName
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError(
        f"serving needs the 'server' extra ({exc.name} is missing): pip install 'langchain-fusion[server]'"
    ) from None

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
"""Where :func:`serve` and ``langchain-fusion serve`` listen by default: this machine only."""
DEFAULT_PORT = 8000
"""The default TCP port."""
DEFAULT_MAX_QUERY_CHARS = 2000
"""Longest query (or question) accepted, in characters."""
DEFAULT_MAX_K = 100
"""Largest ``k`` (and ``k_summaries``) a request may ask for."""
DEFAULT_MAX_BATCH_SIZE = 32
"""Most inputs in one ``/batch`` request."""
DEFAULT_MAX_REQUEST_BYTES = 1_000_000
"""Largest request body, in bytes (413 above it)."""

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

ServedIndex = FusionIndex | HierarchicalIndex


@dataclass(frozen=True)
class Limits:
    """The bounds every request is checked against (4xx answers beyond them)."""

    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    """Longest query (or question), in characters; longer ones get 422."""
    max_k: int = DEFAULT_MAX_K
    """Largest ``k`` (and ``k_summaries``) through the configurable fields; larger ones get 422."""
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    """Most inputs in one ``/batch`` request; more get 422."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Largest request body in bytes; larger ones get 413 before anything is parsed."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be a positive integer; got {value!r}")


def query_type(max_chars: int) -> Any:
    """The served input type: a non-empty string of at most ``max_chars`` characters."""
    return Annotated[str, StringConstraints(min_length=1, max_length=max_chars)]


def _configurable_annotations(limits: Limits, hierarchical: bool) -> dict[str, Any]:
    """The type (with bounds) of each field a request may configure."""
    bounded_k = Annotated[int, Field(ge=1, le=limits.max_k)]
    annotations: dict[str, Any] = {
        "k": bounded_k,
        "alpha": Annotated[float, Field(ge=0.0, le=1.0)],
        "method": FusionMethod,
    }
    if hierarchical:
        annotations["k_summaries"] = bounded_k
    return annotations


_DESCRIPTIONS = {
    "k": "How many documents to return (1 to {max_k}).",
    "alpha": "Weight of the vector side, between 0 and 1; 1 - alpha is the weight of BM25.",
    "method": "Fusion method: weighted (min-max), zscore or rrf.",
    "k_summaries": "How many page summaries to select before searching their chunks (1 to {max_k}).",
}


class _BatchByConfiguration(RunnableConfigurableFields[str, list[Document]]):
    """Configurable fields whose ``batch`` keeps the retriever's real batch.

    LangChain's version answers a batch whose requests configure anything one ``invoke`` at a
    time (each request gets its own configured copy). Here the inputs are grouped by the values
    they configure, and each group runs through one configured retriever's ``batch``: one
    embedding call and one scoring pass per group, results in input order.
    """

    wrap: Callable[[BaseRetriever], Runnable[str, list[Document]]] | None = None
    """Builds the served pipeline (multi-query, rerank) around each configured retriever; None serves it as is."""

    def _prepare(self, config: RunnableConfig | None = None) -> tuple[Runnable[str, list[Document]], RunnableConfig]:
        bound, prepared = super()._prepare(config)
        if self.wrap is not None and isinstance(bound, BaseRetriever):
            return self.wrap(bound), prepared
        return bound, prepared

    def _groups(self, configs: list[RunnableConfig]) -> list[list[int]]:
        ids = {field.id for field in self.fields.values() if isinstance(field, ConfigurableField)}
        groups: dict[str, list[int]] = {}
        for position, config in enumerate(configs):
            chosen = {k: v for k, v in (config.get("configurable") or {}).items() if k in ids}
            groups.setdefault(json.dumps(chosen, sort_keys=True, default=repr), []).append(position)
        return list(groups.values())

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Each group of inputs configured alike goes through one configured retriever's ``batch``."""
        configs = get_config_list(config, len(inputs))
        results: list[Any] = [None] * len(inputs)
        for positions in self._groups(configs):
            bound, _ = self.prepare(configs[positions[0]])
            answers = bound.batch(
                [inputs[i] for i in positions],
                [configs[i] for i in positions],
                return_exceptions=return_exceptions,
                **kwargs,
            )
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of :meth:`batch`."""
        configs = get_config_list(config, len(inputs))
        results: list[Any] = [None] * len(inputs)
        for positions in self._groups(configs):
            bound, _ = self.prepare(configs[positions[0]])
            answers = await bound.abatch(
                [inputs[i] for i in positions],
                [configs[i] for i in positions],
                return_exceptions=return_exceptions,
                **kwargs,
            )
            for position, answer in zip(positions, answers, strict=True):
                results[position] = answer
        return results


def _configurable_retriever(
    served: ServedIndex,
    limits: Limits,
    defaults: dict[str, Any],
    wrap: Callable[[BaseRetriever], Runnable[str, list[Document]]] | None = None,
) -> Runnable[str, list[Document]]:
    """The retriever with its per-request fields exposed as LangServe configurable fields, wrapped by ``wrap``."""
    hierarchical = isinstance(served, HierarchicalIndex)
    base = served.as_retriever(**defaults)
    fields: dict[str, AnyConfigurableField] = {
        name: ConfigurableField(
            id=name,
            name=name,
            description=_DESCRIPTIONS[name].format(max_k=limits.max_k),
            annotation=annotation,
        )
        for name, annotation in _configurable_annotations(limits, hierarchical).items()
    }
    configurable = _BatchByConfiguration(default=base, fields=fields, wrap=wrap)
    configurable.name = "HierarchicalRetriever" if hierarchical else "FusionRetriever"
    return configurable


async def _provider_failed(request: Request, exc: Exception) -> JSONResponse:
    """A chat model that failed for good is the upstream's fault: 502 with its one-line error."""
    logger.warning("%s %s: %s", request.method, request.url.path, exc)
    return JSONResponse({"detail": str(exc)}, status_code=502)


class _RequestGuard:
    """Checks what LangServe's input schema cannot: configurable bounds, batch size and batch inputs."""

    def __init__(self, limits: Limits, hierarchical: bool) -> None:
        self.limits = limits
        self.query: TypeAdapter[str] = TypeAdapter(query_type(limits.max_query_chars))
        self.fields = {
            name: TypeAdapter(annotation)
            for name, annotation in _configurable_annotations(limits, hierarchical).items()
        }

    async def check_config(self, config: dict[str, Any], request: Request) -> dict[str, Any]:
        """LangServe's per-request config modifier: unknown fields, wrong types and values out of bounds get 422.

        It sees the merged configuration (request body and ``/c/<config hash>/`` path) of every
        invoke, batch, stream and stream_log request. LangServe coerces the types (``true`` to
        1, ``"NaN"`` to a float), drops the bounds of the configurable fields and ignores
        unknown ones, so each value is checked here, strictly.
        """
        errors: list[dict[str, Any]] = []
        for where, raw in await _raw_configurables(request):
            for name, value in raw.items():
                adapter = self.fields.get(name)
                if adapter is None:
                    errors.append(
                        {
                            "type": "extra_forbidden",
                            "loc": (*where, name),
                            "msg": f"unknown configurable field {name!r}; the fields are {sorted(self.fields)}",
                            "input": None,
                        }
                    )
                    continue
                try:
                    # Strict: true is not a number, 5.0 is not an integer, "0.5" and "NaN" are not floats.
                    adapter.validate_python(value, strict=True)
                except ValidationError as exc:
                    errors.extend(_located(exc, *where, name))
        if errors:
            raise RequestValidationError(errors)
        return config

    async def check_batch(self, request: Request) -> None:
        """A route dependency: a ``/batch`` body holds at most ``max_batch_size`` valid queries (else 422).

        LangServe would validate batch inputs only after accepting the request, and answer a bad
        one with a 500; other malformed bodies are left to LangServe, which answers 422.
        """
        if request.method != "POST" or not request.url.path.endswith("/batch"):
            return
        try:
            body = await request.json()  # Starlette keeps it: the endpoint does not parse it again
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if not isinstance(body, dict) or "inputs" not in body:
            return
        inputs = body["inputs"]
        if not isinstance(inputs, list):  # LangServe would run each character of a string as a query
            raise RequestValidationError(
                [
                    {
                        "type": "list_type",
                        "loc": ("body", "inputs"),
                        "msg": "inputs must be a list of queries",
                        "input": None,
                    }
                ]
            )
        if len(inputs) > self.limits.max_batch_size:
            raise RequestValidationError(
                [
                    {
                        "type": "too_long",
                        "loc": ("body", "inputs"),
                        "msg": f"a batch holds at most {self.limits.max_batch_size} inputs; got {len(inputs)}",
                        "input": None,
                    }
                ]
            )
        errors: list[dict[str, Any]] = []
        for position, item in enumerate(inputs):
            try:
                self.query.validate_python(item)
            except ValidationError as exc:
                errors.extend(_located(exc, "body", "inputs", position))
        if errors:
            raise RequestValidationError(errors)


async def _raw_configurables(request: Request) -> list[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """The ``configurable`` mappings a client sent, as sent: in the body and in a ``/c/<config hash>/`` path.

    LangServe coerces them (``true`` to 1, ``"NaN"`` to a float) and drops unknown keys before
    the per-request modifier sees them, so the modifier checks these instead.
    """
    found: list[tuple[tuple[str | int, ...], dict[str, Any]]] = []
    config_hash = request.path_params.get("config_hash")
    if config_hash:
        try:
            from langserve.lzstring import LZString

            decoded = json.loads(LZString.decompressFromEncodedURIComponent(config_hash) or "")  # type: ignore[no-untyped-call]
        except Exception:  # any garbage: LangServe answers an undecodable hash with 400
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("configurable"), dict):
            found.append((("path", "config_hash", "configurable"), decoded["configurable"]))
    if request.method == "POST":
        try:
            body = await request.json()  # Starlette caches it: LangServe does not parse it again
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        config = body.get("config") if isinstance(body, dict) else None
        configs = config if isinstance(config, list) else [config]
        for position, item in enumerate(configs):
            if isinstance(item, dict) and isinstance(item.get("configurable"), dict):
                where: tuple[str | int, ...] = ("body", "config")
                where += (position, "configurable") if isinstance(config, list) else ("configurable",)
                found.append((where, item["configurable"]))
    return found


def _located(exc: ValidationError, *prefix: str | int) -> list[dict[str, Any]]:
    """Pydantic errors as FastAPI reports them, located in the request body."""
    return [
        {**error, "loc": (*prefix, *error["loc"])} for error in exc.errors(include_url=False, include_context=False)
    ]


class _NonFiniteNumber(ValueError):
    """A JSON body holds NaN or an infinite number."""


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFiniteNumber(text)
    return value


def _no_constant(name: str) -> float:
    raise _NonFiniteNumber(name)


class _LongInteger(ValueError):
    """A JSON body holds an integer with more digits than Python converts."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > sys.get_int_max_str_digits():
        raise _LongInteger(text[:20])
    return int(text)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"detail": "Not Found"}, status_code=404)(scope, receive, send)


class _RequestBody:
    """ASGI middleware: 413 for a body above ``max_bytes`` (before parsing), 422 for bad JSON, 404 for a NUL in a path.

    Bad JSON is what Python's parser accepts but would fail later (see :func:`_json_problem`). A
    playground path that names no file LangServe can open (a folder, a name too long for the file
    system, a file used as a folder) is a 404 too: LangServe only turns a missing file into one.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", ""):  # e.g. /playground/assets/%00: no file has a NUL in its name
            await _not_found(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        problem = _json_problem(bytes(body))
        if problem is not None:
            error = {"type": "json_invalid", "loc": ["body"], "msg": problem}
            await JSONResponse({"detail": [error]}, status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # e.g. a streaming response waiting for the client to disconnect

        if "/playground/" in scope.get("path", ""):
            await self._playground(scope, replay, send)
        else:
            await self.app(scope, replay, send)

    async def _playground(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a playground file; a path the file system refuses (not only a missing file) is a 404."""
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except OSError:  # IsADirectoryError, NotADirectoryError, ENAMETOOLONG from LangServe's open()
            if started:
                raise
            await _not_found(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"the request body is larger than the limit of {self.max_bytes} bytes"}, status_code=413
        )
        await response(scope, receive, send)


def _fresh_stream_exit_event() -> None:
    """Forget sse-starlette's process-wide exit event at start-up, so that streaming works on this event loop.

    sse-starlette 1.x (what LangServe 0.3 uses) creates one ``anyio.Event`` per process, bound to the
    event loop of the first streamed response; streams on any later loop (a second test client, an
    app served again in the same process or notebook) then fail. Each start-up gets a fresh one.
    """
    try:
        sse = importlib.import_module("sse_starlette.sse")
    except ImportError:  # pragma: no cover - LangServe's server extra brings it
        return
    status = getattr(sse, "AppStatus", None)
    if status is not None and hasattr(status, "should_exit_event"):
        status.should_exit_event = None


def _json_problem(body: bytes) -> str | None:
    r"""What is wrong with a body that LangServe would not answer with a 4xx, if anything.

    Python's parser accepts NaN, Infinity, numbers out of range and unpaired surrogates (``\ud800``),
    guesses UTF-16 and UTF-32 from the first bytes, and fails on deep nesting with a RecursionError;
    LangServe fails on ``"config": null``. Each would become a 500 further on. Bodies that are not
    JSON at all are left to LangServe, which answers 422.
    """
    if not body:
        return None
    try:
        value = json.loads(
            body.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int
        )
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8 text"
    except _NonFiniteNumber:
        return "NaN and Infinity are not JSON numbers"
    except _LongInteger:
        return f"integers in the body are limited to {sys.get_int_max_str_digits()} digits"
    except UnicodeEncodeError:
        return "the body holds an unpaired surrogate escape (\\ud800 to \\udfff), which is not text"
    except RecursionError:
        return "the body is nested too deeply"
    except ValueError:
        return None
    if isinstance(value, dict) and "config" in value and value["config"] is None:
        return "config must be an object (or, for /batch, a list of objects) when given"
    return None


def load_served_index(
    location: str | os.PathLike[str], embeddings: Embeddings | None = None
) -> tuple[ServedIndex, dict[str, Any]]:
    """Open an index (a saved folder, plain or hierarchical, or a Milvus location) and describe it.

    The description is a folder's manifest, or a Milvus collection's location and settings.
    """
    served = open_index(location, embeddings)
    if is_store_location(location):
        settings = served.store.settings if isinstance(served, FusionIndex) else None
        return served, {
            "store": "milvus",
            "location": str(location),
            "settings": settings.model_dump(mode="json") if settings is not None else None,
        }
    manifest = json.loads((Path(location).expanduser() / MANIFEST).read_text(encoding="utf-8"))
    return served, manifest


def _check_k(name: str, value: Any, limits: Limits) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limits.max_k:
        raise InvalidParameterError(f"{name} must be an integer from 1 to max_k ({limits.max_k}); got {value!r}")
    return value


def create_app(
    index: str | os.PathLike[str] | FusionIndex | HierarchicalIndex,
    *,
    embeddings: Embeddings | None = None,
    llm: Runnable[Any, Any] | str | None = None,
    k: int = SEARCH_DEFAULTS.k,
    alpha: float = SEARCH_DEFAULTS.alpha,
    method: FusionMethod = SEARCH_DEFAULTS.method,
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k,
    min_vector_score: float | None = SEARCH_DEFAULTS.min_vector_score,
    min_bm25_score: float | None = SEARCH_DEFAULTS.min_bm25_score,
    lambda_mult: float | None = SEARCH_DEFAULTS.lambda_mult,
    max_per_source: int | None = SEARCH_DEFAULTS.max_per_source,
    k_summaries: int = SEARCH_DEFAULTS.k_summaries,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    max_k: int = DEFAULT_MAX_K,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    llm_timeout: float | None = DEFAULT_LLM_TIMEOUT,
    reranker: BaseDocumentCompressor | str | None = None,
    rerank_candidates: int = DEFAULT_RERANK_CANDIDATES,
    multi_query: int | None = None,
    title: str = "langchain-fusion",
) -> FastAPI:
    """A FastAPI app serving one index's retriever and RAG chain with LangServe, and ``/health``.

    Args:
        index: a saved index folder (plain, or hierarchical: saved with page summaries), loaded
            and verified now, once; a Milvus location such as ``"milvus://HOST:19530/docs"``
            (see :mod:`~langchain_fusion.stores.locations`); or an already loaded
            :class:`~langchain_fusion.index.fusion_index.FusionIndex`
            or :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`.
        embeddings: the embeddings to load a folder with; default: the model named in its manifest.
        llm: the chat model of ``/rag``: a chat model (or any Runnable from a prompt), or a spec
            such as ``"openai:gpt-4o-mini"`` or ``"anthropic:claude-sonnet-4-5"`` (see
            :func:`~langchain_fusion.models.chat.resolve_chat_model`; an error if it cannot be built).
            Default: OpenAI ``gpt-4o-mini`` when ``OPENAI_API_KEY`` is set; otherwise only the
            retriever is served, which ``/health`` and a log line say.
        k: documents per query unless a request configures another ``k``.
        alpha: the default weight of the vector side.
        method: the default fusion method.
        fetch_k: candidates per side before fusion (None: the whole corpus); not configurable
            per request.
        min_vector_score: relevance floor on the raw cosine similarity (None: none); see
            :mod:`~langchain_fusion.search.floors`. Not configurable per request, as are the next three.
        min_bm25_score: relevance floor on the raw BM25 score (None: none).
        lambda_mult: re-rank by maximal marginal relevance with this weight of relevance (None: no MMR).
        max_per_source: the most results from one source (None: no cap).
        k_summaries: summaries selected per query on a hierarchical index (default of its
            configurable field).
        max_query_chars: longest query accepted (422 beyond).
        max_k: largest ``k`` (and ``k_summaries``) a request may configure (422 beyond).
        max_batch_size: most inputs in one ``/batch`` request (422 beyond).
        max_request_bytes: largest request body (413 beyond).
        llm_timeout: seconds ``/rag`` waits for the chat model per try (for streams: per chunk;
            None: the model client's own limit). A chat model that fails for good (after its
            retries) answers 502 with the provider's error on one line.
        reranker: a rerank step for ``/retriever`` and ``/rag``: ``"llm"`` (the chat model rates each
            candidate), ``"cross-encoder:MODEL"`` (a local cross-encoder, loaded now), or any
            ``BaseDocumentCompressor``. Each query then fetches ``max(rerank_candidates, k)``
            candidates and the step keeps the request's ``k``.
        rerank_candidates: candidates retrieved per query for ``reranker``.
        multi_query: if given, the chat model writes this many rewrites of each query (1 to 10),
            each is searched too and the lists are fused
            (:class:`~langchain_fusion.retrievers.multi_query.MultiQueryFusionRetriever`).
        title: the app's title in its OpenAPI page.

    Raises:
        FusionError: the folder is not a valid index, a parameter is out of range, or the chat
            model asked for cannot be built.
    """
    limits = Limits(max_query_chars, max_k, max_batch_size, max_request_bytes)
    defaults: dict[str, Any] = {"k": k, "alpha": check_alpha(alpha), "method": check_method(method), "fetch_k": fetch_k}
    _check_k("k", k, limits)
    if fetch_k is not None and (isinstance(fetch_k, bool) or not isinstance(fetch_k, int) or fetch_k < 1):
        raise InvalidParameterError(
            f"fetch_k must be a positive integer, or None for the whole corpus; got {fetch_k!r}"
        )

    selection = check_selection(
        {
            "min_vector_score": min_vector_score,
            "min_bm25_score": min_bm25_score,
            "lambda_mult": lambda_mult,
            "max_per_source": max_per_source,
        }
    )

    chat_model, no_rag_reason = chat_model_or_reason(llm)  # before loading: a bad model spec fails fast
    pipeline = build_retriever_pipeline(
        reranker,
        rerank_candidates=rerank_candidates,
        multi_query=multi_query,
        chat_model=chat_model,
        no_chat_reason=no_rag_reason,
        llm_timeout=llm_timeout,
    )
    manifest: dict[str, Any] | None = None
    if isinstance(index, (FusionIndex, HierarchicalIndex)):
        served: ServedIndex = index
    else:
        served, manifest = load_served_index(index, embeddings)
    hierarchical = isinstance(served, HierarchicalIndex)
    if hierarchical:
        defaults["k_summaries"] = _check_k("k_summaries", k_summaries, limits)
    refuse_selection_on_hierarchical(selection, hierarchical)
    defaults.update(selection)

    query = query_type(limits.max_query_chars)
    wrap = pipeline if pipeline.active else None
    retriever = _configurable_retriever(served, limits, defaults, wrap)
    guard = _RequestGuard(limits, hierarchical)
    app = FastAPI(
        title=title,
        version=library_version(),
        description="Hybrid (FAISS vector + BM25 keyword) retrieval served with LangServe.",
    )
    app.add_middleware(_RequestBody, max_bytes=limits.max_request_bytes)
    app.add_exception_handler(ProviderError, _provider_failed)
    app.router.on_startup.append(_fresh_stream_exit_event)
    routes: dict[str, Any] = {
        "enabled_endpoints": ENDPOINTS,
        "per_req_config_modifier": guard.check_config,
        "dependencies": [Depends(guard.check_batch)],
    }
    add_routes(app, retriever.with_types(input_type=query), path=RETRIEVER_PATH, **routes)
    if chat_model is not None:
        from langchain_fusion.chains import build_rag_chain
        from langchain_fusion.models.llm_calls import chat_model_id

        chain = build_rag_chain(retriever, chat_model, timeout=llm_timeout).with_types(input_type=query)
        add_routes(app, chain, path=RAG_PATH, **routes)

    chunks = served.chunks if isinstance(served, HierarchicalIndex) else served
    status: dict[str, Any] = {
        "status": "ok",
        "library_version": library_version(),
        "index": {
            "kind": "hierarchical" if hierarchical else "index",
            "documents": len(chunks),
            **({"summaries": len(served.summaries)} if isinstance(served, HierarchicalIndex) else {}),
            "embeddings": chunks.embeddings_id,
            "dimension": chunks.dimension,
            "manifest": manifest,
        },
        "routes": {"retriever": RETRIEVER_PATH, "rag": RAG_PATH if chat_model is not None else None},
        "rag": {
            "enabled": chat_model is not None,
            "chat_model": chat_model_id(chat_model) if chat_model is not None else None,
            "reason": no_rag_reason,
        },
        "defaults": defaults,
        "pipeline": pipeline.describe(),
        "limits": asdict(limits),
    }
    app.state.langchain_fusion = status

    @app.get(HEALTH_PATH, tags=["health"], summary="The served index, its manifest, the chat model and the limits")
    async def health() -> dict[str, Any]:
        return status

    what = f"{len(chunks)} chunks"
    if isinstance(served, HierarchicalIndex):
        what += f" and {len(served.summaries)} summaries"
    logger.info("serving %s (%s) at %s", what, chunks.embeddings_id, RETRIEVER_PATH)
    if chat_model is None:
        logger.warning("no chat model, so only %s is served (not %s): %s", RETRIEVER_PATH, RAG_PATH, no_rag_reason)
    else:
        logger.info("RAG chain with %s at %s", status["rag"]["chat_model"], RAG_PATH)
    return app


# --- running it ---------------------------------------------------------------------------------


def bind_socket(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: a free one), for :func:`serve`; OSError if it cannot bind."""
    return sockets.bind_socket(host, port)


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket."""
    return sockets.base_url(sock)


def serve(
    app: FastAPI,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    sock: socket.socket | None = None,
    log_level: str = "info",
) -> None:
    """Run ``app`` with uvicorn until interrupted (Ctrl-C); on ``sock`` if given, else on ``host:port``."""
    bound = sock if sock is not None else bind_socket(host, port)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[bound])
    finally:
        if sock is None:
            bound.close()


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_K",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_PORT",
    "Limits",
    "bind_socket",
    "create_app",
    "is_loopback",
    "load_served_index",
    "query_type",
    "serve",
    "url_of",
]
