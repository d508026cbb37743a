"""What to serve or run, as data: :class:`PipelineSpec` (the index and the steps around it) and :class:`ServeLimits`.

Import-light (pydantic and the option schema; LangChain's runnables and no extras): the command line builds a spec from
its flags before anything heavy loads, the server and MCP build one from their arguments, and
:func:`~langchain_fusion.pipeline.composer.build` turns it into the retriever pipeline. A face
validates nothing a spec validates and restates none of its defaults.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from langchain_fusion._checks import CheckedModel, check_port, check_positive_int, check_rewrites
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.options import (
    FUSED_ONLY_OPTIONS,
    OPTION_CHECKS,
    HierarchyOptions,
    SearchOptions,
    check_options,
)
from langchain_fusion.sockets import DEFAULT_HOST, DEFAULT_PORT

AnswerMode = Literal["off", "if_available", "required"]
"""Whether the pipeline answers questions with a chat model (the RAG chain): ``off`` (retrieval only;
a chat model only where a step needs one), ``if_available`` (when one can be resolved, e.g. an API
key is set; otherwise retrieval only, and the reason is reported) or ``required``."""

DEFAULT_RERANK_CANDIDATES = 20
"""Candidates retrieved per query for a rerank step (at least the ``k`` kept)."""
DEFAULT_LLM_TIMEOUT = 60.0
"""Seconds to wait for one chat model answer (per try; for streams, per chunk)."""


Transport = Literal["stdio", "streamable-http"]
"""How MCP clients reach the server: ``stdio`` (the client starts the server as a subprocess) or
``streamable-http`` (the server listens on a TCP port; clients connect to ``/mcp``)."""
TRANSPORTS: tuple[str, ...] = get_args(Transport)
"""The accepted values of an MCP transport."""


def _check_reranker(value: Any) -> Any:
    """A rerank step: None, a compressor, or a spec string checked now (``llm`` or ``cross-encoder:MODEL``)."""
    if value is None or isinstance(value, str):
        from langchain_fusion.retrievers.rerank_spec import parse_rerank_spec

        return None if value is None else str(parse_rerank_spec(value))
    from langchain_core.documents import BaseDocumentCompressor

    if isinstance(value, BaseDocumentCompressor):
        return value
    from langchain_fusion.retrievers.rerank_spec import parse_rerank_spec

    return str(parse_rerank_spec(value))  # raises: says what a rerank step is


def check_embeddings(value: Any) -> Any:
    """An embeddings spec string, an ``Embeddings`` object, or None."""
    if value is None or isinstance(value, str):
        return value
    from langchain_core.embeddings import Embeddings

    if not isinstance(value, Embeddings):
        raise InvalidParameterError(
            f"embeddings must be a spec such as 'local' or 'openai:MODEL', or an Embeddings; got {type(value).__name__}"
        )
    return value


def check_llm(value: Any) -> Any:
    """A chat model spec string, a chat model (any Runnable from a prompt), or None."""
    if value is None or isinstance(value, str):
        return value
    from langchain_core.runnables import Runnable

    if not isinstance(value, Runnable):
        raise InvalidParameterError(
            f"llm must be a spec such as 'openai:MODEL' or 'PROVIDER:MODEL', or a chat model; "
            f"got {type(value).__name__}"
        )
    return value


def _positive(name: str, meaning: str) -> BeforeValidator:
    return BeforeValidator(lambda value: check_positive_int(value, name, meaning))


def _host_names(value: Any) -> Any:
    """``allowed_hosts`` from a tuple, a list or one comma-separated string, lowercased."""
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value):
        return tuple(name.strip().lower() for name in value if name.strip())
    raise InvalidParameterError(
        f"allowed_hosts must be host names such as 'search.example.com' (or '*' for any); got {value!r}"
    )


def _header_name(value: Any) -> str | None:
    """An HTTP header name (token characters), lowercased; None for none."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", value):
        raise InvalidParameterError(f"tenant_header must be an HTTP header name such as 'X-Tenant'; got {value!r}")
    return value.lower()


class ServeLimits(CheckedModel):
    """Where a server listens, and the bounds every request is checked against (4xx answers or tool errors beyond)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    host: str = DEFAULT_HOST
    """Address to listen on: this machine only by default (there is no authentication; 0.0.0.0 exposes the
    server to the network)."""
    port: Annotated[int, BeforeValidator(check_port)] = DEFAULT_PORT
    """TCP port to listen on (0: any free port)."""
    max_k: Annotated[int, _positive("max_k", "the largest k a request may ask for")] = 100
    """Largest k (and k_summaries) a request may ask for."""
    max_query_chars: Annotated[int, _positive("max_query_chars", "the longest query accepted")] = 2000
    """Longest query (or question) accepted, in characters."""
    max_batch_size: Annotated[int, _positive("max_batch_size", "the most inputs in one batch request")] = 32
    """Most inputs in one batch request."""
    max_request_bytes: Annotated[int, _positive("max_request_bytes", "the largest request body")] = 1_000_000
    """Largest request body, in bytes."""
    allowed_hosts: Annotated[tuple[str, ...], BeforeValidator(_host_names)] = ()
    """Host names a request to the LangServe server may name, comma-separated (* for any), besides localhost,
    127.0.0.1 and ::1 when it listens on a loopback address. Another Host is refused (421): a web page cannot
    reach a server on this machine through a DNS name it controls."""

    tenant_header: Annotated[str | None, BeforeValidator(_header_name)] = None
    """On a tenant-keyed index: the request header that names each request's tenant, set by the authenticating
    proxy in front of the server (a request without it is refused with 401; a request can never name a tenant
    itself). None: the server searches the tenant of its own options, if any."""

    REQUEST_BOUNDS: ClassVar[tuple[str, ...]] = ("max_query_chars", "max_k", "max_batch_size", "max_request_bytes")
    """The limits that bound a request (the others say where the server listens)."""

    def bounds(self) -> dict[str, int]:
        """The request bounds (what a health check reports as the limits)."""
        return {name: getattr(self, name) for name in self.REQUEST_BOUNDS}


class PipelineSpec(CheckedModel):
    """The index to search and the steps composed around the fused search, as one checked value.

    Steps, in the order :func:`~langchain_fusion.pipeline.composer.build` composes them: the search
    (fused, or hierarchical when the index holds page summaries), multi-query fusion, context
    windows, a rerank step; then, when asked, the RAG chain's chat model answers from the results.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, use_attribute_docstrings=True)

    index: Any = None
    """What to search: a location (an index folder, or e.g. ``milvus://HOST:PORT/COLLECTION``), or an opened
    ``FusionIndex``, ``HierarchicalIndex`` or any LangChain retriever (served as it is: it brings its own options)."""
    embeddings: Annotated[Any, BeforeValidator(check_embeddings)] = None
    """The embedding model to open the index with (a spec such as ``local`` or ``openai:MODEL``, or an
    ``Embeddings``); None: the model recorded with the index."""
    search: SearchOptions = Field(default_factory=SearchOptions)
    """The search options (the defaults of every query; requests may override them)."""
    hierarchical: bool | None = None
    """Hierarchical (summaries first) search: None follows the index (a folder saved with page summaries is searched
    hierarchically), True requires it, False searches the chunks alone."""
    hierarchy: HierarchyOptions = Field(default_factory=HierarchyOptions)
    """The options of hierarchical search."""
    multi_query: Annotated[int | None, BeforeValidator(lambda v: None if v is None else check_rewrites(v))] = None
    """Multi-query fusion: a chat model writes this many rewrites of every query (1 to 10), each is searched
    too and the lists are fused; None: off."""
    window: Annotated[int, BeforeValidator(lambda v: _non_negative(v, "window"))] = 0
    """Context windows: each hit merged with this many neighbouring chunks on each side (0: off)."""
    window_max_chars: int | None = None
    """Character budget of each context window passage (None: the default, 4000)."""
    reranker: Annotated[Any, BeforeValidator(_check_reranker)] = None
    """A rerank step: ``llm`` (the chat model rates each candidate), ``cross-encoder:MODEL`` (a local
    cross-encoder), or any ``BaseDocumentCompressor``; it keeps k of the candidates. None: off."""
    rerank_candidates: Annotated[int, _positive("rerank_candidates", "candidates reranked per query")] = (
        DEFAULT_RERANK_CANDIDATES
    )
    """Candidates retrieved per query for the rerank step (at least k)."""
    llm: Annotated[Any, BeforeValidator(check_llm)] = None
    """The chat model of an llm rerank, multi-query rewrites and answers: a spec such as ``openai:MODEL`` or
    ``PROVIDER:MODEL``, or a chat model. None: OpenAI's default model when ``OPENAI_API_KEY`` is set."""
    llm_timeout: float | None = Field(default=DEFAULT_LLM_TIMEOUT, gt=0)
    """Seconds to wait for each chat model answer per try (None: the client's own limit)."""
    answer: AnswerMode = "off"
    """Whether the pipeline also answers with a chat model (see :data:`AnswerMode`)."""

    @model_validator(mode="after")
    def _consistent(self) -> PipelineSpec:
        # The messages name each option as the Python API writes it; the command line shows them with its flags.
        if self._is_retriever() and [name for name in self.options_set() if name != "answer"]:
            named = [name for name in self.options_set() if name != "answer"]
            raise InvalidParameterError(
                f"{', '.join(named)}: options of the retriever built from an index; a retriever given brings its "
                "own, so set them on it"
            )
        if self.window_max_chars is not None:
            check_positive_int(self.window_max_chars, "window_max_chars", "the character budget of a window")
            if not self.window:
                raise InvalidParameterError("window_max_chars is the character budget of context windows: set window=N")
        if self.hierarchical is False and self.hierarchy.model_fields_set:
            given = " and ".join(sorted(self.hierarchy.model_fields_set))
            raise InvalidParameterError(f"{given}: options of hierarchical search, which is off: set hierarchical=True")
        if self.hierarchical and self.selection():
            self.refuse_selection()
        if self.llm is not None and self.answer == "off" and not self.needs_chat_model:
            raise InvalidParameterError(
                "the chat model (llm) is used here only to rerank (reranker='llm') or to rewrite the query "
                "(multi_query=N): add one, or drop it"
            )
        return self

    def options_set(self) -> list[str]:
        """The options given a value other than their default, in schema order (search and hierarchy ones by name)."""
        named: list[str] = []
        for name, field in type(self).model_fields.items():
            if name in ("search", "hierarchy"):
                group = getattr(self, name)
                named += [
                    option
                    for option, info in type(group).model_fields.items()
                    if option in group.model_fields_set and getattr(group, option) != info.default
                ]
            elif name != "index" and name in self.model_fields_set and getattr(self, name) != field.default:
                named.append(name)
        return named

    def _is_retriever(self) -> bool:
        from langchain_core.retrievers import BaseRetriever

        return isinstance(self.index, BaseRetriever)

    @property
    def reranks_with_llm(self) -> bool:
        """Whether the rerank step is the chat model's (``reranker='llm'``)."""
        if not isinstance(self.reranker, str):
            return False
        from langchain_fusion.retrievers.rerank_spec import parse_rerank_spec

        return parse_rerank_spec(self.reranker).uses_chat_model

    @property
    def needs_chat_model(self) -> bool:
        """Whether a step needs a chat model (an llm rerank or multi-query fusion), answers aside."""
        return self.reranks_with_llm or self.multi_query is not None

    def selection(self) -> dict[str, Any]:
        """The raw-score floor and diversity options that are set (fused search only; not ``min_relevance``)."""
        return {
            name: getattr(self.search, name) for name in FUSED_ONLY_OPTIONS if getattr(self.search, name) is not None
        }

    def refuse_selection(self) -> None:
        """An InvalidParameterError naming the raw-score floors and diversity set (hierarchical search takes none)."""
        raise InvalidParameterError(
            f"{', '.join(self.selection())} apply to fused search, not to hierarchical search (an index saved with "
            "page summaries, or hierarchical=True)"
        )

    @classmethod
    def of(cls, index: Any = None, **options: Any) -> PipelineSpec:
        """A spec from flat keyword options: search and hierarchy options by name beside the spec's own fields.

        ``PipelineSpec.of("idx", k=8, alpha=0.3, reranker="llm")`` is
        ``PipelineSpec(index="idx", search=SearchOptions(k=8, alpha=0.3), reranker="llm")``. An unknown
        name is an InvalidParameterError that lists the known ones. None for an option that cannot be
        None (``k=None``) means "not given": its default.
        """
        options = {name: value for name, value in options.items() if value is not None or _takes_none(cls, name)}
        search = {name: options.pop(name) for name in list(options) if name in SearchOptions.model_fields}
        hierarchy = {name: options.pop(name) for name in list(options) if name in HierarchyOptions.model_fields}
        unknown = sorted(set(options) - set(cls.model_fields))
        if unknown:
            known = sorted({*cls.model_fields, *OPTION_CHECKS} - {"search", "hierarchy"})
            raise InvalidParameterError(f"unknown option(s) {unknown}; the options are {known}")
        check_options(search)
        groups: dict[str, Any] = {"search": SearchOptions(**search)} if search else {}
        groups |= {"hierarchy": HierarchyOptions(**hierarchy)} if hierarchy else {}
        return cls(index=index, **groups, **options)


def _takes_none(spec: type[PipelineSpec], name: str) -> bool:
    """Whether option ``name`` has a meaning for None (``fetch_k=None``: the whole corpus), so None is not "unset"."""
    check = OPTION_CHECKS.get(name)
    if check is not None:
        try:
            check(None)
        except InvalidParameterError:
            return False
        return True
    field = spec.model_fields.get(name)
    return field is None or field.default is None or name == "llm_timeout"


def _non_negative(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParameterError(f"{name} must be a whole number of 0 or more; got {value!r}")
    return value


def serving_spec(
    index: Any, limits: ServeLimits | None, options: dict[str, Any], answer: AnswerMode = "off"
) -> tuple[PipelineSpec, ServeLimits]:
    """The spec and limits of a server's arguments: flat options (limits among them, or ``limits``), or a spec whole.

    The one start-up path of the LangServe app and the MCP server; the spec's default ``k`` is
    checked against ``max_k`` here, before anything is opened.
    """
    rest = dict(options)
    named = ServeLimits(**{name: rest.pop(name) for name in list(rest) if name in ServeLimits.model_fields})
    if limits is not None and named.model_fields_set:
        raise InvalidParameterError(f"give limits=... or {', '.join(sorted(named.model_fields_set))}, not both")
    limits = limits if limits is not None else named
    if isinstance(index, PipelineSpec):
        if rest:
            raise InvalidParameterError(f"{', '.join(sorted(rest))}: set them on the PipelineSpec given")
        spec = index
    else:
        spec = PipelineSpec.of(index, **({"answer": answer} | rest))
    if spec.search.k > limits.max_k and not spec._is_retriever():  # a retriever given keeps its own k
        raise InvalidParameterError(f"k ({spec.search.k}) must be at most max_k ({limits.max_k})")
    return spec, limits
