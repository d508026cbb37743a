"""Serving a fusion index over HTTP with LangServe: the retriever, the RAG chain and a health check.

Needs the ``server`` extra (``pip install "langchain-fusion[server]"``); this is the only module
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
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableField, Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.runnables.configurable import RunnableConfigurableFields
from langchain_core.runnables.utils import AnyConfigurableField
from pydantic import StringConstraints, TypeAdapter, ValidationError

from langchain_fusion._compat import fresh_sse_exit_event
from langchain_fusion.errors import InvalidParameterError, MissingDependencyError, ProviderError, redact
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.pipeline import Pipeline, PipelineSpec, ServeLimits, build
from langchain_fusion.pipeline.spec import serving_spec
from langchain_fusion.search.options import OPTION_CHECKS, FusionOptions, describe_option, request_annotation
from langchain_fusion.sockets import bind_socket, is_loopback, url_of
from langchain_fusion.stores.local.folder import library_version
from langchain_fusion.threads import one_blas_thread

try:
    import uvicorn
    from fastapi import Depends, FastAPI, Request, Response
    from fastapi.concurrency import run_in_threadpool
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


def query_type(max_chars: int) -> Any:
    """The served input type: a non-empty string of at most ``max_chars`` characters."""
    return Annotated[str, StringConstraints(min_length=1, max_length=max_chars)]


def request_options(pipeline: Pipeline) -> tuple[str, ...]:
    """The search options a request may configure: those the served search takes per call, but ``fetch_k``."""
    return tuple(name for name in pipeline.per_call_options() if name not in FusionOptions.LOCAL_ONLY)


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


def _configurable_retriever(pipeline: Pipeline, limits: ServeLimits) -> Runnable[str, list[Document]]:
    """The pipeline's retriever, its request options exposed as LangServe configurable fields."""
    fields: dict[str, AnyConfigurableField] = {
        name: ConfigurableField(
            id=name, name=name, description=describe_option(name), annotation=request_annotation(name, limits.max_k)
        )
        for name in request_options(pipeline)
    }
    wrap = pipeline.around if pipeline.steps.active else None
    configurable = _BatchByConfiguration(default=pipeline.search, fields=fields, wrap=wrap)
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


class _RequestGuard:
    """Checks what LangServe's input schema cannot: configurable bounds, batch size and batch inputs."""

    def __init__(self, limits: ServeLimits, pipeline: Pipeline) -> None:
        self.limits = limits
        self.pipeline = pipeline
        names = request_options(pipeline)
        self.query: TypeAdapter[str] = TypeAdapter(query_type(limits.max_query_chars))
        self.fields = {name: TypeAdapter(request_annotation(name, limits.max_k)) for name in names}

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
                    OPTION_CHECKS[name](value)
                except ValidationError as exc:
                    errors.extend(_located(exc, *where, name))
                except InvalidParameterError as exc:
                    errors.append({"type": "value_error", "loc": (*where, name), "msg": str(exc), "input": None})
        if errors:
            raise RequestValidationError(errors)
        configurable = config.get("configurable")
        if isinstance(configurable, dict):  # null is the server's default; a filter narrows the server's
            ours = {name: value for name, value in configurable.items() if name in self.fields}
            others = {name: value for name, value in configurable.items() if name not in self.fields}
            config = {**config, "configurable": {**others, **self.pipeline.request_options(ours)}}
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


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""The names of this machine a browser uses for a server listening on a loopback address."""


def allowed_hosts(limits: ServeLimits) -> frozenset[str] | None:
    """The Host names the server answers (None: any), from ``limits.allowed_hosts`` and where it listens.

    On a loopback address, this machine's names and the ones given; on another address, the ones
    given and that address, or any when none are given (the network in front of it decides).
    """
    names = set(limits.allowed_hosts)
    if "*" in names:
        return None
    if is_loopback(limits.host):
        return frozenset(names | LOOPBACK_NAMES)
    if not names:
        return None
    return frozenset(names | {limits.host.strip("[]").lower()})


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port: ``[::1]:8000`` -> ``::1``, ``Name:80`` -> ``name``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class _SameOrigin:
    """ASGI middleware: no request a web page could send this server behind the user's back.

    A page the user visits can make the browser POST a "simple" request (a form or ``text/plain``
    body, no preflight) to ``127.0.0.1:8000`` and spend the user's key, and with DNS rebinding it can
    read the answers under a name it controls. So a request naming another Host is refused (421),
    and a body that is not JSON is refused (415) before anything reads it.
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.allowed is not None:
            host = _host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.allowed:
                detail = (
                    f"this server does not answer for the host {host!r}: it answers for "
                    f"{', '.join(sorted(self.allowed))} (allow another with --allowed-hosts or allowed_hosts)"
                )
                await JSONResponse({"detail": detail}, status_code=421)(scope, receive, send)
                return
        if scope.get("method") in ("POST", "PUT", "PATCH") and not _is_json(headers.get(b"content-type")):
            detail = "send the request body as JSON, with the header Content-Type: application/json"
            await JSONResponse({"detail": detail}, status_code=415)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _StreamErrors:
    """ASGI middleware: a stream whose chat model fails ends with an error event that says why, then normally.

    LangServe sends ``event: error`` with a generic 500 and re-raises, so the connection drops
    mid-stream and the server logs a traceback. Here the error event is held back until the stream
    either continues (it is sent as it was) or the exception arrives: for a
    :class:`~langchain_fusion.errors.ProviderError` the event carries status 502 and its one-line,
    redacted message, the body ends normally, and one warning line is logged.
    """

    _ERROR_EVENT = b"event: error"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").endswith("/stream"):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        ended = False

        async def holding(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.body" and message.get("body", b"").lstrip().startswith(
                self._ERROR_EVENT
            ):
                held.append(message)
                return
            for waiting in held:
                await send(waiting)
            held.clear()
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        try:
            await self.app(scope, receive, holding)
        except Exception as exc:
            failure = _provider_error_in(exc)
            if failure is None or not held or ended:
                raise
            message = redact(str(failure))
            logger.warning("%s %s: %s", scope.get("method", ""), scope.get("path", ""), message)
            data = json.dumps({"status_code": 502, "message": message})
            body = f"event: error\r\ndata: {data}\r\n\r\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        for waiting in held:  # an error event the stream went on from (not LangServe's way, but not lost)
            await send(waiting)


def _provider_error_in(exc: BaseException) -> ProviderError | None:
    """The ProviderError ``exc`` is, or holds (an exception group from the stream's task group)."""
    if isinstance(exc, ProviderError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _provider_error_in(inner)
        if found is not None:
            return found
    return None


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
    query = query_type(limits.max_query_chars)
    retriever = _configurable_retriever(pipeline, limits)
    guard = _RequestGuard(limits, pipeline)
    app = FastAPI(
        title=title,
        version=library_version(),
        description="Hybrid (FAISS vector + BM25 keyword) retrieval served with LangServe.",
    )
    app.add_middleware(_StreamErrors)
    app.add_middleware(_RequestBody, max_bytes=limits.max_request_bytes)
    app.add_middleware(_SameOrigin, allowed=allowed_hosts(limits))  # the outermost: before any body is read
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
"""How long a stopping server lets requests in flight finish (it waited for them without limit, 52-79 s seen)."""


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
