"""LangChain retrievers over a FusionIndex: vector-only, BM25-only and fused.

All three follow LangChain's conventions: ``invoke``/``ainvoke``/``batch``, ``k`` at
construction and per call (``invoke(query, k=3)``), callbacks and tracing through
``BaseRetriever``, and their fields work with ``configurable_fields``. They return copies of
the indexed documents with the score provenance of :mod:`langchain_fusion.metadata`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from numpy.typing import NDArray
from pydantic import ConfigDict, Field, field_validator

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.filters import MetadataFilter, as_predicate
from langchain_fusion.fusion import FusionMethod, check_alpha, check_method
from langchain_fusion.index import FusionIndex
from langchain_fusion.search import Hit, bm25_search, fused_search, scored_copy, vector_search
from langchain_fusion.vector import FloatMatrix


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidParameterError(f"k must be a positive integer (the number of documents to return); got {k!r}")
    return int(k)


def _check_fetch_k(fetch_k: Any) -> int | None:
    if fetch_k is None:
        return None
    if isinstance(fetch_k, bool) or not isinstance(fetch_k, (int, np.integer)) or fetch_k < 1:
        raise InvalidParameterError(
            f"fetch_k must be a positive integer, or None for the whole corpus; got {fetch_k!r}"
        )
    return int(fetch_k)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "k": _check_k,
    "alpha": check_alpha,
    "fetch_k": _check_fetch_k,
    "method": check_method,
}


def per_call_options(retriever: BaseRetriever, names: tuple[str, ...], overrides: dict[str, Any]) -> dict[str, Any]:
    """The retriever's option fields ``names``, with validated per-call ``overrides`` applied."""
    unknown = set(overrides) - set(names)
    if unknown:
        raise TypeError(
            f"{type(retriever).__name__} got unexpected argument(s) {sorted(unknown)}; "
            f"per-call options are {list(names)}"
        )
    options = {name: getattr(retriever, name) for name in names}
    for name, value in overrides.items():
        options[name] = _CHECKS[name](value) if name in _CHECKS else value
    return options


class _IndexRetriever(BaseRetriever):
    """Fields and plumbing shared by the retrievers over a FusionIndex."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: FusionIndex
    """The index to search."""
    k: int = Field(default=4, ge=1)
    """How many documents to return; override per call with ``invoke(query, k=...)``."""
    filter: MetadataFilter | None = None
    """Restrict results to documents whose metadata matches, applied before ranking."""

    _per_call_options: tuple[str, ...] = ("k", "filter")

    def _options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        return per_call_options(self, self._per_call_options, overrides)

    def _mask(self, spec: MetadataFilter | None) -> NDArray[np.bool_] | None:
        return None if spec is None else self.index.row_mask(as_predicate(spec))

    def _documents(self, hits: list[Hit], method: str | None = None) -> list[Document]:
        return [scored_copy(self.index.document(hit.row), hit, method) for hit in hits]

    def _needs_vector(self) -> bool:
        return True

    @abstractmethod
    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        """Rank the index for one query with resolved options."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or len(self.index) == 0:
            return []
        query_vector = self.index.embed_query(query) if self._needs_vector() else None
        return self._search(query, query_vector, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or len(self.index) == 0:
            return []
        query_vector = await self.index.aembed_query(query) if self._needs_vector() else None
        # Scoring is NumPy/FAISS work: keep it off the event loop.
        return await run_in_executor(None, self._search, query, query_vector, options)


class VectorRetriever(_IndexRetriever):
    """Dense retrieval only: cosine similarity over the index's FAISS side.

    Returned documents carry ``vector_score`` and ``vector_rank``.
    """

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        assert query_vector is not None
        return self._documents(vector_search(self.index, query_vector, options["k"], self._mask(options["filter"])))


class BM25Retriever(_IndexRetriever):
    """Keyword retrieval only: BM25 over the index's analyzer; never embeds the query.

    Only documents that contain at least one query term are returned. Returned documents
    carry ``bm25_score`` and ``bm25_rank``.
    """

    def _needs_vector(self) -> bool:
        return False

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        return self._documents(bm25_search(self.index, query, options["k"], self._mask(options["filter"])))


class FusionRetriever(_IndexRetriever):
    """Hybrid retrieval: vector and BM25 scores normalised and fused per document.

    For every candidate found by either side, the other side's real score is looked up by
    row id. ``alpha`` is the weight of the vector side (1 = pure vector, 0 = pure BM25).
    Every option can be set here, per call (``invoke(q, k=3, alpha=0.7)``) or through
    ``configurable_fields``. Returned documents carry the full score provenance.
    """

    alpha: float = 0.5
    """Weight of the vector side; ``1 - alpha`` is the weight of BM25."""
    fetch_k: int | None = Field(default=100, ge=1)
    """Candidates taken from each side before fusion; None scores the whole corpus (exact)."""
    method: FusionMethod = "weighted"
    """``weighted`` (min-max, the default), ``zscore`` or ``rrf``."""

    _per_call_options = ("k", "alpha", "fetch_k", "method", "filter")

    @field_validator("alpha")
    @classmethod
    def _valid_alpha(cls, value: float) -> float:
        return check_alpha(value)

    def _search(self, query: str, query_vector: FloatMatrix | None, options: dict[str, Any]) -> list[Document]:
        assert query_vector is not None
        hits = fused_search(
            self.index,
            query,
            query_vector,
            k=options["k"],
            alpha=options["alpha"],
            fetch_k=options["fetch_k"],
            method=options["method"],
            mask=self._mask(options["filter"]),
        )
        return self._documents(hits, options["method"])
