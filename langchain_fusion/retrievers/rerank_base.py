"""What this library's rerankers share: :class:`BaseReranker` (``top_n``, the LCEL and compressor interfaces).

A reranker is a ``BaseDocumentCompressor`` (for LangChain's ``ContextualCompressionRetriever``) and a
``Runnable`` from ``{"query": ..., "documents": [...]}`` to documents (for LCEL). Its results are
copies (:func:`reranked_copy`) carrying the keys of :data:`~langchain_fusion.metadata.RERANK_KEYS`;
ties break by fusion score (:func:`fusion_scores`, :func:`descending`).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, TypedDict

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun, Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel
from langchain_fusion.errors import FusionError, InvalidParameterError


class RerankInput(TypedDict):
    """The input of a reranker used as an LCEL step."""

    query: str
    """The query the documents were retrieved for."""
    documents: Sequence[Document]
    """The candidates, best first by fusion score."""


def check_top_n(top_n: Any) -> int | None:
    """How many reranked documents to keep: a positive whole number, or None for all (reordered)."""
    if top_n is None:
        return None
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise InvalidParameterError(
            f"top_n must be a positive integer (documents to keep) or None for all; got {top_n!r}"
        )
    return top_n


def finite_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fusion_scores(documents: Sequence[Document]) -> list[float | None]:
    """Each document's finite fused score (None where it has none)."""
    return [finite_number(doc.metadata.get(keys.FUSION_SCORE)) for doc in documents]


def descending(value: float | None) -> float:
    """A sort key putting higher values first and None last."""
    return math.inf if value is None else -value


def reranked_copy(doc: Document, updates: dict[str, Any]) -> Document:
    """A deep copy of ``doc`` with ``updates`` in its metadata (a reranker never mutates its input)."""
    copied = doc.model_copy(deep=True)
    copied.metadata.update(updates)
    return copied


def _unpack(input: Any) -> tuple[str, Sequence[Document]]:
    if not isinstance(input, dict) or not isinstance(input.get("query"), str) or "documents" not in input:
        raise FusionError(
            f'a reranker step takes {{"query": str, "documents": [Document, ...]}}; got {type(input).__name__}'
        )
    return input["query"], input["documents"]


class BaseReranker(CheckedModel, BaseDocumentCompressor, RunnableSerializable[RerankInput, list[Document]]):
    """What this library's rerankers share: ``top_n`` (also per call), the LCEL and compressor interfaces.

    A subclass implements :meth:`_rerank` and :meth:`_arerank` over a non-empty candidate list and
    returns copies carrying its :data:`~langchain_fusion.metadata.RERANK_KEYS`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    top_n: int | None = 4
    """How many documents to keep (None: all, reordered); override per call in
    :class:`~langchain_fusion.retrievers.rerank_retriever.RerankRetriever`."""

    @field_validator("top_n")
    @classmethod
    def _valid_top_n(cls, value: Any) -> int | None:
        return check_top_n(value)

    # --- the public API -----------------------------------------------------------------------

    def rerank(
        self, documents: Sequence[Document], query: str, *, top_n: Any = ..., callbacks: Callbacks = None
    ) -> list[Document]:
        """Rerank ``documents`` for ``query``; ``top_n`` overrides the field for this call."""
        limit = self.top_n if top_n is ... else check_top_n(top_n)
        if not documents:
            return []
        return self._rerank(list(documents), query, limit, callbacks)

    async def arerank(
        self, documents: Sequence[Document], query: str, *, top_n: Any = ..., callbacks: Callbacks = None
    ) -> list[Document]:
        """Async twin of :meth:`rerank`."""
        limit = self.top_n if top_n is ... else check_top_n(top_n)
        if not documents:
            return []
        return await self._arerank(list(documents), query, limit, callbacks)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Rerank and keep ``top_n`` (the ``BaseDocumentCompressor`` interface)."""
        return self.rerank(documents, query, callbacks=callbacks)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async twin of :meth:`compress_documents`."""
        return await self.arerank(documents, query, callbacks=callbacks)

    def invoke(self, input: RerankInput, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Rerank ``input["documents"]`` for ``input["query"]`` (the LCEL interface)."""
        return self._call_with_config(self._invoke, input, config)

    async def ainvoke(self, input: RerankInput, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Async twin of :meth:`invoke`."""
        return await self._acall_with_config(self._ainvoke, input, config)

    def _invoke(self, input: RerankInput, run_manager: CallbackManagerForChainRun) -> list[Document]:
        query, documents = _unpack(input)
        return self.rerank(documents, query, callbacks=run_manager.get_child())

    async def _ainvoke(self, input: RerankInput, run_manager: AsyncCallbackManagerForChainRun) -> list[Document]:
        query, documents = _unpack(input)
        return await self.arerank(documents, query, callbacks=run_manager.get_child())

    @abstractmethod
    def _rerank(self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks) -> list[Document]:
        """Rerank a non-empty candidate list."""

    @abstractmethod
    async def _arerank(
        self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks
    ) -> list[Document]:
        """Async twin of :meth:`_rerank`."""
