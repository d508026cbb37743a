"""LangChain retrievers over a FusionIndex: vector-only, BM25-only and fused.

All three follow LangChain's conventions: ``invoke``/``ainvoke``/``batch``, ``k`` at
construction and per call (``invoke(query, k=3)``), callbacks and tracing through
``BaseRetriever``, and their fields work with ``configurable_fields``. They return copies of
the indexed documents with the score provenance of :mod:`langchain_fusion.metadata`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, ValidationInfo, field_validator

from langchain_fusion._checks import CheckedModel, FusionMethod, check_alpha, check_fetch_k, check_k, check_method
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.search.options import SEARCH_DEFAULTS
from langchain_fusion.search.pool import bm25_search, fused_search, hits_to_documents, vector_search
from langchain_fusion.stores.base import FloatMatrix, Where
from langchain_fusion.stores.filters import MetadataFilter, check_filter

OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    "k": check_k,
    "alpha": check_alpha,
    "fetch_k": check_fetch_k,
    "method": check_method,
    "filter": check_filter,
}
"""The validator of each search option, shared by fields, per-call overrides, the CLI and the server."""


def per_call_options(
    retriever: BaseRetriever,
    names: tuple[str, ...],
    overrides: dict[str, Any],
    checks: dict[str, Callable[[Any], Any]] = OPTION_CHECKS,
) -> dict[str, Any]:
    """The retriever's option fields ``names``, with per-call ``overrides`` validated by ``checks``."""
    unknown = set(overrides) - set(names)
    if unknown:
        raise InvalidParameterError(
            f"{type(retriever).__name__} got unexpected argument(s) {sorted(unknown)}; "
            f"per-call options are {list(names)}"
        )
    options = {name: getattr(retriever, name) for name in names}
    for name, value in overrides.items():
        options[name] = checks[name](value) if name in checks else value
    return options


class SearchRetriever(CheckedModel, BaseRetriever):
    """The template of every retriever here: validate options, embed (async when async), search.

    Subclasses say whether a query needs its embedding (:meth:`_needs_vector`), how to embed
    (:meth:`_embedder`), whether there is anything to search (:meth:`_is_empty`) and how to
    rank (:meth:`_search`, plain NumPy/engine work, run off the event loop when async).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _per_call_options: ClassVar[tuple[str, ...]] = ("k", "filter")
    _option_checks: ClassVar[dict[str, Callable[[Any], Any]]] = OPTION_CHECKS

    @field_validator("*", mode="before")
    @classmethod
    def _valid_option(cls, value: Any, info: ValidationInfo) -> Any:
        """Every option field goes through the same check as its per-call override."""
        check = cls._option_checks.get(info.field_name or "")
        return value if check is None else check(value)

    def _options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        return per_call_options(self, self._per_call_options, overrides, self._option_checks)

    def _needs_vector(self, options: dict[str, Any]) -> bool:
        return True

    @abstractmethod
    def _embedder(self) -> FusionIndex:
        """The index whose model embeds the query."""

    @abstractmethod
    def _is_empty(self) -> bool:
        """True when there is nothing to search."""

    @abstractmethod
    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        """Rank for one query with resolved options."""

    def _checked_query(self, query: Any) -> str:
        if not isinstance(query, str):
            raise InvalidParameterError(f"the query must be a string; got {type(query).__name__}")
        return query

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not self._checked_query(query).strip() or self._is_empty():
            return []
        query_vector = self._embedder().embed_query(query) if self._needs_vector(options) else None
        return self._search(query, query_vector, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not self._checked_query(query).strip() or self._is_empty():
            return []
        query_vector = await self._embedder().aembed_query(query) if self._needs_vector(options) else None
        # Scoring is NumPy/FAISS work: keep it off the event loop.
        return await run_in_executor(None, self._search, query, query_vector, options)


class _IndexRetriever(SearchRetriever):
    """Fields shared by the retrievers over one FusionIndex."""

    index: FusionIndex
    """The index to search."""
    k: int = SEARCH_DEFAULTS.k
    """How many documents to return; override per call with ``invoke(query, k=...)``."""
    filter: MetadataFilter | None = None
    """Restrict results to documents whose metadata matches, applied before ranking."""

    def _embedder(self) -> FusionIndex:
        return self.index

    def _is_empty(self) -> bool:
        return len(self.index) == 0

    @staticmethod
    def _where(options: dict[str, Any]) -> Where | None:
        return None if options["filter"] is None else Where(metadata=options["filter"])


class VectorRetriever(_IndexRetriever):
    """Dense retrieval only: cosine similarity over the index's vector side.

    Returned documents carry ``vector_score`` and ``vector_rank``.
    """

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        assert query_vector is not None
        view = self.index.view()
        return hits_to_documents(view, vector_search(view, query_vector, options["k"], self._where(options)))


class BM25Retriever(_IndexRetriever):
    """Keyword retrieval only: BM25 over the index's analyzer; never embeds the query.

    Only documents that contain at least one query term are returned. Returned documents
    carry ``bm25_score`` and ``bm25_rank``.
    """

    def _needs_vector(self, options: dict[str, Any]) -> bool:
        return False

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        view = self.index.view()
        return hits_to_documents(view, bm25_search(view, query, options["k"], self._where(options)))


class FusionRetriever(_IndexRetriever):
    """Hybrid retrieval: vector and BM25 scores normalised and fused per document.

    For every candidate found by either side, the other side's real score is looked up by
    row. ``alpha`` is the weight of the vector side (1 = pure vector, 0 = pure BM25).
    Every option can be set here, per call (``invoke(q, k=3, alpha=0.7)``) or through
    ``configurable_fields``. Returned documents carry the full score provenance.
    """

    alpha: float = SEARCH_DEFAULTS.alpha
    """Weight of the vector side; ``1 - alpha`` is the weight of BM25."""
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k
    """Candidates taken from each side before fusion; None scores the whole corpus (exact)."""
    method: FusionMethod = SEARCH_DEFAULTS.method
    """``weighted`` (min-max, the default), ``zscore`` or ``rrf``."""

    _per_call_options = ("k", "alpha", "fetch_k", "method", "filter")

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        assert query_vector is not None
        view = self.index.view()
        hits = fused_search(
            view,
            query,
            query_vector,
            k=options["k"],
            alpha=options["alpha"],
            fetch_k=options["fetch_k"],
            method=options["method"],
            where=self._where(options),
        )
        return hits_to_documents(view, hits, options["method"])
