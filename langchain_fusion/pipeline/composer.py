"""The one composer: :func:`build` turns a :class:`~langchain_fusion.pipeline.spec.PipelineSpec` into a Pipeline.

It resolves the chat model, loads a cross-encoder, opens the index, and composes, once and in
this order: the search (fused, or hierarchical) -> multi-query fusion -> context windows -> a
rerank step that keeps ``k``. The command line, the LangServe app, the MCP server and the
evaluation rows all get their retrievers here; :meth:`Pipeline.describe` is what they report.
Cheap checks and the chat model come first, so a bad option or a missing key fails before an
index or a model is loaded.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import BaseDocumentCompressor
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable

from langchain_fusion._version import library_version
from langchain_fusion.errors import FusionError, IndexFormatError, InvalidParameterError, MissingCredentialsError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.index.opening import open_index
from langchain_fusion.pipeline.spec import PipelineSpec, ServeLimits
from langchain_fusion.retrievers.base import SearchRetriever, innermost_search
from langchain_fusion.retrievers.multi_query import MultiQueryFusionRetriever
from langchain_fusion.retrievers.rerank_retriever import RerankRetriever, with_top_n
from langchain_fusion.retrievers.windows import ContextWindowRetriever
from langchain_fusion.search.options import (
    DEFAULT_WINDOW_MAX_CHARS,
    SELECTION_OPTIONS,
    FusionOptions,
    HierarchicalSearchOptions,
    HierarchyOptions,
)
from langchain_fusion.stores.filters import merge_filters
from langchain_fusion.stores.registry import engine_for

Served = FusionIndex | HierarchicalIndex | BaseRetriever
"""What a pipeline searches: an index (plain or hierarchical), or a retriever given as it is."""


@dataclass(frozen=True)
class Steps:
    """What is composed around a search: multi-query fusion, context windows, a rerank step (each optional)."""

    multi_query: MultiQueryFusionRetriever | None = None
    """A template (its ``retriever`` and ``k`` are set per search), or None."""
    window: int = 0
    """Neighbouring chunks merged on each side of a hit (0: no windows)."""
    window_max_chars: int = DEFAULT_WINDOW_MAX_CHARS
    """Character budget of each window passage."""
    reranker: BaseDocumentCompressor | None = None
    """The rerank step, or None."""
    candidates: int = 20
    """Candidates reranked per search (at least the ``k`` kept)."""

    @property
    def active(self) -> bool:
        """Whether anything is composed around the search."""
        return self.multi_query is not None or self.window > 0 or self.reranker is not None

    def around(self, search: BaseRetriever, chunks: FusionIndex | None = None) -> BaseRetriever:
        """The steps around ``search`` (a configured retriever); the result returns ``search.k`` documents.

        Keywords given to the result's ``invoke`` (``alpha``, ``filter``, ...) reach every search.
        ``chunks`` is where context windows look up neighbours (default: the search's index).
        """
        if not self.active:
            return search
        k = int(getattr(search, "k"))  # noqa: B009 - every searched retriever has one; mypy does not know it
        depth = max(self.candidates, k) if self.reranker is not None else k
        retriever: BaseRetriever = search if depth == k else search.model_copy(update={"k": depth})
        if self.multi_query is not None:
            per_query = max(depth, self.multi_query.k_per_query)
            retriever = self.multi_query.model_copy(update={"retriever": search, "k": depth, "k_per_query": per_query})
        if self.window:
            retriever = ContextWindowRetriever(
                retriever=retriever, index=chunks, n=self.window, max_chars=self.window_max_chars
            )
        if self.reranker is not None:
            retriever = RerankRetriever(retriever=retriever, reranker=with_top_n(self.reranker, k), top_n=k)
        return retriever

    def describe(self) -> dict[str, Any]:
        """The rerank step (class, model, candidates), the rewrites and the window, None for each that is off."""
        rerank = None
        if self.reranker is not None:
            model = getattr(self.reranker, "model_id", None)
            rerank = {"step": type(self.reranker).__name__, "model": model, "candidates": self.candidates}
        rewrites = None if self.multi_query is None else self.multi_query.n
        window = {"n": self.window, "max_chars": self.window_max_chars} if self.window else None
        return {"rerank": rerank, "multi_query": rewrites, "window": window}


@dataclass(frozen=True)
class Pipeline:
    """A spec, built: the opened index, the configured search, the steps around it and the chat model."""

    spec: PipelineSpec
    """What was asked for."""
    served: Served
    """The opened index (or the retriever given)."""
    search: BaseRetriever
    """The search with the spec's options: a fusion or hierarchical retriever (or the retriever given)."""
    steps: Steps
    """What is composed around every search."""
    chat_model: Runnable[Any, Any] | None = None
    """The chat model (steps that need one, and answers), or None."""
    no_chat_reason: str | None = None
    """Why there is no chat model, when answers were asked for if available."""
    location: dict[str, Any] | None = None
    """What the index's engine says about its location (a folder's manifest...), or None for an object given."""

    @property
    def hierarchical(self) -> bool:
        """Whether the search is hierarchical (summaries first)."""
        return isinstance(self.served, HierarchicalIndex) and self.spec.hierarchical is not False

    @property
    def chunks(self) -> FusionIndex | None:
        """The index of the chunks (of a hierarchical index, its chunk index), or None for a retriever given."""
        if isinstance(self.served, HierarchicalIndex):
            return self.served.chunks
        return self.served if isinstance(self.served, FusionIndex) else None

    def store_status(self) -> dict[str, str]:
        """Whether the served index's store answers now: ``{"status": "ok"}``, or ``"unavailable"`` and the error.

        Asks the store on each call (a remote store's server; a store in this process always answers),
        so a health check or a status resource says what holds now, not what held at start.
        """
        store = self.chunks.store if self.chunks is not None else None
        if store is not None:
            try:
                store.check_reachable()
            except FusionError as exc:
                return {"status": "unavailable", "error": str(exc)}
        return {"status": "ok"}

    @property
    def retriever(self) -> BaseRetriever:
        """The whole retriever: the steps around the search with the spec's options."""
        return self.around(self.search)

    def around(self, search: BaseRetriever) -> BaseRetriever:
        """The steps around ``search``, a copy of :attr:`search` with other options (e.g. a request's ``k``)."""
        return self.steps.around(search, self.chunks)

    def per_call_options(self) -> tuple[str, ...]:
        """The search options a call may set: those the innermost search takes per call.

        A retriever given that wraps one of ours (context windows, rerank, multi-query) passes its
        options on to it; a retriever from elsewhere takes none.
        """
        inner = innermost_search(self.search)
        return inner.per_call_option_names() if inner is not None else ()

    def request_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """A request's search options as the search takes them.

        None (or absent) is the server's default, and a filter narrows the server's own
        (:func:`~langchain_fusion.stores.filters.merge_filters`), never widens it.
        """
        options = {name: value for name, value in given.items() if value is not None}
        if "filter" in options:
            options["filter"] = merge_filters(self.spec.search.filter, options["filter"])
        return options

    def check_tenancy(self, limits: ServeLimits) -> None:
        """How a server binds tenants: a tenant-keyed index needs a tenant or a tenant header; another needs none."""
        tenant_key = self.chunks.tenant_key if self.chunks is not None else None
        tenant, header = self.spec.search.tenant, limits.tenant_header
        if tenant is not None and header is not None:
            raise InvalidParameterError(
                "give the server one tenant (tenant=...) or the header its proxy names each request's tenant in "
                "(tenant_header=...), not both"
            )
        if tenant_key is None and header is not None:
            raise InvalidParameterError("tenant_header applies to a tenant-keyed index; this one is not")
        if tenant_key is not None and tenant is None and header is None:
            raise InvalidParameterError(
                f"the index is tenant-keyed (by {tenant_key!r}): serve one tenant (tenant=...) or bind each "
                "request's tenant from its proxy's header (tenant_header=...)"
            )

    def within(self, limits: ServeLimits) -> Pipeline:
        """The pipeline as a server with ``limits`` serves it: a hierarchical ``k_summaries`` at most ``max_k``.

        A ``k_summaries`` above ``max_k`` that was asked for is an error. Returns a new pipeline
        (this one is not changed).
        """
        hierarchy = self.spec.hierarchy
        if not (self.hierarchical and hierarchy.k_summaries > limits.max_k):
            return self
        if "k_summaries" in hierarchy.model_fields_set:
            raise InvalidParameterError(f"k_summaries ({hierarchy.k_summaries}) must be at most max_k ({limits.max_k})")
        return dataclasses.replace(self, search=self.search.model_copy(update={"k_summaries": limits.max_k}))

    def describe(self) -> dict[str, Any]:
        """What is served, as JSON values: the index, the default options, the steps and the chat model."""
        from langchain_fusion.models.answer_cache import chat_model_id

        return {
            "library_version": library_version(),
            "index": describe_served(self.served, self.hierarchical, self.location, self.spec.search.tenant),
            "defaults": self.defaults(),
            "pipeline": self.steps.describe(),
            "chat_model": None if self.chat_model is None else chat_model_id(self.chat_model),
            "no_chat_reason": self.no_chat_reason,
        }

    def defaults(self) -> dict[str, Any] | None:
        """The search options every query starts from: the pool and weights, and any other option set."""
        if not isinstance(self.search, SearchRetriever):
            return None
        options = self.spec.search
        shown = {name: getattr(options, name) for name in FusionOptions.model_fields}
        names = self.per_call_options()
        shown.update({n: v for n, v in options.model_dump(exclude_unset=True).items() if n in names})
        shown.update({n: getattr(options, n) for n in SELECTION_OPTIONS if getattr(options, n) is not None})
        if self.hierarchical:
            shown["k_summaries"] = getattr(self.search, "k_summaries")  # noqa: B009 - a HierarchicalRetriever's
        if "filter" in shown:
            shown["filter"] = _json_filter(shown["filter"])
        return shown


def describe_served(
    served: Served,
    hierarchical: bool | None = None,
    location: dict[str, Any] | None = None,
    tenant: str | None = None,
) -> dict[str, Any]:
    """What is served: kind, counts, embedding model and dimension, and the location's manifest (or description).

    ``hierarchical`` None: hierarchical when ``served`` is a :class:`HierarchicalIndex`. On a
    tenant-keyed index the counts are ``tenant``'s (None when each request names its own), and no
    other tenant is named or counted.
    """
    hierarchical = isinstance(served, HierarchicalIndex) if hierarchical is None else hierarchical
    if isinstance(served, HierarchicalIndex):
        chunks, parts = served.chunks, {"documents": served.chunks, "summaries": served.summaries}
    elif isinstance(served, FusionIndex):
        chunks, parts = served, {"documents": served}
    else:
        return {"kind": "retriever", "retriever": type(served).__name__}
    keyed = chunks.tenant_key is not None
    counts: dict[str, Any] = {
        name: (len(index.view(tenant)) if tenant is not None or not keyed else None) for name, index in parts.items()
    }
    tenancy = {"tenant_key": chunks.tenant_key, "tenant": tenant} if keyed else {}
    return {
        "kind": "hierarchical" if hierarchical else "index",
        **counts,
        **tenancy,
        "embeddings": chunks.embeddings_id,
        "dimension": chunks.dimension,
        "manifest": _manifest(location),
    }


def _json_filter(spec: Any) -> Any:
    """A filter as JSON shows it: lists for sets and tuples, a description for a callable."""
    if callable(spec):
        return f"<callable {getattr(spec, '__qualname__', type(spec).__name__)}>"
    if isinstance(spec, Mapping):
        return {
            key: sorted(value, key=repr)
            if isinstance(value, (set, frozenset))
            else list(value)
            if isinstance(value, tuple)
            else value
            for key, value in spec.items()
        }
    return spec


def _manifest(location: dict[str, Any] | None) -> dict[str, Any] | None:
    """A folder's manifest, or another engine's description of its location (None for an object given)."""
    if location is None:
        return None
    manifest: dict[str, Any] = location.get("manifest", location)
    if "tenants" in manifest:  # a tenant-keyed folder lists its tenants: no served surface names them
        manifest = {key: value for key, value in manifest.items() if key != "tenants"}
    return manifest


def chat_model_for(spec: PipelineSpec) -> tuple[Runnable[Any, Any] | None, str | None]:
    """The chat model the spec needs (or may use), or None and why; a missing one that is needed fails here."""
    from langchain_fusion.models import chat

    if spec.answer == "required":
        return chat.resolve_chat_model(spec.llm) if not isinstance(spec.llm, Runnable) else spec.llm, None
    if spec.needs_chat_model:
        if isinstance(spec.llm, Runnable):
            return spec.llm, None
        try:
            return chat.resolve_chat_model(spec.llm), None
        except MissingCredentialsError as exc:
            what = "rerank 'llm'" if spec.reranks_with_llm else "multi_query"
            raise InvalidParameterError(f"{what} needs a chat model: {exc}") from None
    if spec.answer == "off":
        return None, None
    return chat.chat_model_or_reason(spec.llm)


def build_steps(spec: PipelineSpec, chat_model: Runnable[Any, Any] | None = None) -> Steps:
    """The steps of ``spec`` (a cross-encoder is loaded now, so a missing one fails before any search)."""
    from langchain_fusion.retrievers.cross_encoder import CrossEncoderReranker
    from langchain_fusion.retrievers.rerank_spec import build_reranker

    reranker: BaseDocumentCompressor | None = None
    if isinstance(spec.reranker, BaseDocumentCompressor):
        reranker = spec.reranker
    elif spec.reranker is not None:
        reranker = build_reranker(spec.reranker, llm=chat_model, top_n=None, timeout=spec.llm_timeout)
    if isinstance(reranker, CrossEncoderReranker):
        reranker.load_model()
    template = None
    if spec.multi_query is not None:
        if chat_model is None:
            raise InvalidParameterError("multi_query needs a chat model to write the rewrites (llm=...)")
        template = MultiQueryFusionRetriever(
            retriever=_NoRetriever(), llm=chat_model, n=spec.multi_query, timeout=spec.llm_timeout
        )
    return Steps(
        multi_query=template,
        window=spec.window,
        window_max_chars=DEFAULT_WINDOW_MAX_CHARS if spec.window_max_chars is None else spec.window_max_chars,
        reranker=reranker,
        candidates=spec.rerank_candidates,
    )


def build(spec: PipelineSpec) -> Pipeline:
    """Open the index of ``spec`` and compose its pipeline (see the module docstring)."""
    chat_model, no_chat_reason = chat_model_for(spec)
    steps = build_steps(spec, chat_model)
    served, location = _open(spec)
    if isinstance(served, BaseRetriever):
        search: BaseRetriever = served
    elif isinstance(served, HierarchicalIndex) and spec.hierarchical is not False:
        if spec.selection():
            spec.refuse_selection()
        taken = set(HierarchicalSearchOptions.model_fields) - set(HierarchyOptions.model_fields)
        options = spec.search.model_dump(include=taken)
        search = served.as_retriever(**options, **spec.hierarchy.model_dump())
    else:
        if spec.hierarchical:
            raise IndexFormatError(
                f"{spec.index} is a plain index without page summaries: rebuild it with them (langchain-fusion index "
                "PATH... --summaries --out DIR) for hierarchical search"
            )
        chunks = served.chunks if isinstance(served, HierarchicalIndex) else served
        if isinstance(served, HierarchicalIndex) and spec.search.min_relevance is not None:
            _check_flat_calibration(served)
        search = chunks.as_retriever(**spec.search.model_dump())
    return Pipeline(spec, served, search, steps, chat_model, no_chat_reason, location)


def _check_flat_calibration(served: HierarchicalIndex) -> None:
    """min_relevance on the chunks of a folder calibrated for hierarchical search only: say how to use that model."""
    if served.chunks.relevance_model is None and served.relevance_model is not None:
        raise InvalidParameterError(
            "min_relevance: this index is calibrated for hierarchical search only; search it hierarchically "
            "(hierarchical=True), or calibrate its chunk index (index.chunks.calibrate)"
        )


def _open(spec: PipelineSpec) -> tuple[Served, dict[str, Any] | None]:
    index = spec.index
    if spec.hierarchical and isinstance(index, (str, os.PathLike)) and engine_for(index).folder(str(index)) is None:
        raise InvalidParameterError(
            f"hierarchical search needs page summaries, which are kept in index folders only ({index} is a "
            f"{engine_for(index).name} store): langchain-fusion index PATH... --summaries --out DIR"
        )
    if isinstance(index, (FusionIndex, HierarchicalIndex, BaseRetriever)):
        if spec.embeddings is not None and not isinstance(index, BaseRetriever):
            raise InvalidParameterError(
                "embeddings open an index folder or location; a loaded index brings its own: drop embeddings"
            )
        return index, None
    if not isinstance(index, (str, os.PathLike)):
        raise InvalidParameterError(
            "index must be a location (an index folder or a store location such as milvus://HOST:PORT/COLLECTION), "
            f"a FusionIndex, a HierarchicalIndex or a retriever; got {type(index).__name__}"
        )
    from langchain_fusion.models.embeddings import resolve_embeddings

    embeddings = resolve_embeddings(spec.embeddings) if isinstance(spec.embeddings, str) else spec.embeddings
    served = open_index(index, embeddings)
    engine = engine_for(index)
    store = served.chunks.store if isinstance(served, HierarchicalIndex) else served.store
    return served, engine.describe(str(index), store)


class _NoRetriever(BaseRetriever):
    """The placeholder in the multi-query template; each search sets the configured retriever."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Any]:
        raise RuntimeError("the multi-query template is never searched")
