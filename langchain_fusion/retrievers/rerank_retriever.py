"""A rerank step around any retriever: :class:`RerankRetriever` retrieves candidates, reranks them, keeps ``top_n``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel
from langchain_fusion.retrievers.rerank_base import BaseReranker, check_top_n, finite_number, reranked_copy


def with_top_n(compressor: BaseDocumentCompressor, top_n: int | None) -> BaseDocumentCompressor:
    """``compressor`` set to keep ``top_n`` documents, where it has a ``top_n`` field (a copy; else itself).

    Ours and most of LangChain's rerankers (``CrossEncoderReranker``, ``CohereRerank``...) have one.
    """
    if "top_n" in type(compressor).model_fields and getattr(compressor, "top_n", None) != top_n:
        return compressor.model_copy(update={"top_n": top_n})
    return compressor


class RerankRetriever(CheckedModel, BaseRetriever):
    """Wraps a retriever with a rerank step: retrieve candidates, rerank them, keep ``top_n``.

    The rerank step is any LangChain ``BaseDocumentCompressor``: ours
    (:class:`~langchain_fusion.retrievers.rerank.LLMReranker`,
    :class:`~langchain_fusion.retrievers.rerank.LLMListwiseReranker`,
    :class:`~langchain_fusion.retrievers.cross_encoder.CrossEncoderReranker`),
    LangChain's ``CrossEncoderReranker``, a hosted reranker, or your own. Retrieve more candidates
    than you keep (e.g. ``k=20`` on the wrapped retriever and ``top_n=4``): ``top_n`` here, or the
    rerank step's own. ``invoke(query, top_n=3)`` overrides it per call; any other keyword goes to
    the wrapped retriever (``invoke(query, top_n=3, k=20)``).

    Our rerankers write their own :data:`~langchain_fusion.metadata.RERANK_KEYS`. The results of
    any other compressor are copies with ``rerank_rank`` (their 1-based position in its output)
    and ``rerank_score`` (its ``relevance_score`` metadata when it writes one, else None); the
    candidates' fusion scores stay. A per-call ``top_n`` is applied through the compressor's own
    ``top_n`` field when it has one, and by keeping the first ``top_n`` of its output otherwise.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: BaseRetriever
    """The retriever that finds the candidates."""
    reranker: BaseDocumentCompressor
    """The rerank step: any ``BaseDocumentCompressor`` (e.g.
    :class:`~langchain_fusion.retrievers.rerank.LLMReranker` or ``CrossEncoderReranker``)."""
    top_n: int | None = None
    """How many reranked documents to keep; None: what the rerank step keeps (its own ``top_n``)."""

    @field_validator("top_n", mode="before")
    @classmethod
    def _valid_top_n(cls, value: Any) -> int | None:
        return check_top_n(value)

    def _split(self, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        rest = dict(kwargs)
        default = ... if self.top_n is None else self.top_n
        top_n = check_top_n(rest.pop("top_n")) if "top_n" in rest else default
        return top_n, rest

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n, rest = self._split(kwargs)
        candidates = self.retriever.invoke(query, config={"callbacks": run_manager.get_child()}, **rest)
        if isinstance(self.reranker, BaseReranker):
            return self.reranker.rerank(candidates, query, top_n=top_n, callbacks=run_manager.get_child())
        if not candidates:
            return []
        compressor = self.reranker if top_n is ... else with_top_n(self.reranker, top_n)
        kept = compressor.compress_documents(candidates, query, callbacks=run_manager.get_child())
        return self._recorded(kept, top_n)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n, rest = self._split(kwargs)
        candidates = await self.retriever.ainvoke(query, config={"callbacks": run_manager.get_child()}, **rest)
        if isinstance(self.reranker, BaseReranker):
            return await self.reranker.arerank(candidates, query, top_n=top_n, callbacks=run_manager.get_child())
        if not candidates:
            return []
        compressor = self.reranker if top_n is ... else with_top_n(self.reranker, top_n)
        kept = await compressor.acompress_documents(candidates, query, callbacks=run_manager.get_child())
        return self._recorded(kept, top_n)

    @staticmethod
    def _recorded(kept: Sequence[Document], top_n: Any) -> list[Document]:
        """Copies of another compressor's output with the rerank keys, cut to a per-call ``top_n``."""
        if top_n is not ... and top_n is not None:
            kept = kept[:top_n]
        results = []
        for rank, doc in enumerate(kept, 1):
            score = finite_number(doc.metadata.get(keys.RELEVANCE_SCORE))
            results.append(reranked_copy(doc, {keys.RERANK_RANK: rank, keys.RERANK_SCORE: score}))
        return results
