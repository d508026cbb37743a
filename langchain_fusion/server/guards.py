"""What a request may carry, checked where LangServe's input schema cannot: configurable fields and batches.

:class:`RequestGuard` is LangServe's per-request config modifier (every configurable value checked, as
sent, by the option's own check) and a route dependency of ``/batch`` (its size and every input).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints, TypeAdapter, ValidationError

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.pipeline import Pipeline, ServeLimits
from langchain_fusion.search.options import OPTION_CHECKS, SERVER_ONLY_OPTIONS, request_annotation
from langchain_fusion.server.batching import TENANT_CONFIG
from langchain_fusion.stores.tenants import check_tenant


def query_type(max_chars: int) -> Any:
    """The served input type: a non-empty string of at most ``max_chars`` characters."""
    return Annotated[str, StringConstraints(min_length=1, max_length=max_chars)]


def request_options(pipeline: Pipeline) -> tuple[str, ...]:
    """The search options a request may configure: those the served search takes per call, but ``fetch_k``."""
    return tuple(name for name in pipeline.per_call_options() if name not in SERVER_ONLY_OPTIONS)


class RequestGuard:
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
        if self.limits.tenant_header is not None:
            bound = {**(config.get("configurable") or {}), TENANT_CONFIG: self.tenant_of(request)}
            config = {**config, "configurable": bound}
        return config

    def tenant_of(self, request: Request) -> str:
        """The tenant the proxy named in the tenant header; 401 when it named none."""
        header = self.limits.tenant_header or ""
        try:
            tenant = check_tenant(request.headers.get(header, "").strip() or None)
        except InvalidParameterError:
            tenant = None
        if tenant is None:
            raise HTTPException(
                status_code=401,
                detail=f"this server answers for the tenant its proxy names in the {header!r} header; the request "
                "has none",
            )
        return tenant

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
