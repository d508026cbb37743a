"""LangChain retrievers over a FusionIndex: vector-only, BM25-only and fused.

All three follow LangChain's conventions: ``invoke``/``ainvoke``/``batch``, ``k`` at
construction and per call (``invoke(query, k=3)``), callbacks and tracing through
``BaseRetriever``, and their fields work with ``configurable_fields``. They return copies of
the indexed documents with the score provenance of :mod:`langchain_fusion.metadata`.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import ConfigDict, ValidationInfo, field_validator

from langchain_fusion._checks import (
    CheckedModel,
    FusionMethod,
    check_alpha,
    check_fetch_k,
    check_k,
    check_lambda_mult,
    check_max_per_source,
    check_method,
    check_min_bm25_score,
    check_min_vector_score,
)
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.search.diversity import Diversity
from langchain_fusion.search.floors import Floors
from langchain_fusion.search.options import SEARCH_DEFAULTS
from langchain_fusion.search.pool import (
    QueryScorers,
    bm25_scorers,
    bm25_search,
    fused_search,
    hits_to_documents,
    queries_per_pass,
    vector_scorers,
    vector_search,
)
from langchain_fusion.stores.base import FloatMatrix, SideScorer, StoreView, Where
from langchain_fusion.stores.filters import MetadataFilter, check_filter

logger = logging.getLogger(__name__)


OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    "k": check_k,
    "alpha": check_alpha,
    "fetch_k": check_fetch_k,
    "method": check_method,
    "filter": check_filter,
    "min_vector_score": check_min_vector_score,
    "min_bm25_score": check_min_bm25_score,
    "lambda_mult": check_lambda_mult,
    "max_per_source": check_max_per_source,
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


@dataclass(frozen=True)
class PreparedQuery:
    """One query of a batch, embedded (and, over an index, scored) together with the others."""

    query_vector: FloatMatrix | None
    """The query's normalised embedding (1 x dimension), or None when the search does not need it."""
    view: StoreView | None = None
    """The view the query was scored on (every query of a batch sees the same one)."""
    vector: SideScorer | None = None
    """The query's vector side on ``view``, scored with the whole batch."""
    bm25: SideScorer | None = None
    """The query's BM25 side on ``view``, scored with the whole batch."""


_BATCH: ContextVar[Mapping[tuple[int, str], PreparedQuery] | None] = ContextVar("langchain_fusion_batch", default=None)
"""The prepared queries of the batch being run, keyed by (retriever id, query)."""


class SearchRetriever(CheckedModel, BaseRetriever):
    """The template of every retriever here: validate options, embed (async when async), search.

    Subclasses say whether a query needs its embedding (:meth:`_needs_vector`), how to embed
    (:meth:`_embedder`), whether there is anything to search (:meth:`_is_empty`) and how to
    rank (:meth:`_search`, plain NumPy/engine work, run off the event loop when async).

    ``batch``/``abatch`` are real batches: the queries are embedded in one call (where the
    model allows) and, over an index, scored in one pass (:meth:`_prepare_many`), then each
    query runs through ``invoke`` as usual (its own callbacks and trace) with its prepared
    embedding and scores. The results equal those of ``invoke`` for each query.
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

    @classmethod
    def per_call_option_names(cls) -> tuple[str, ...]:
        """The options ``invoke`` takes per call (``invoke(query, k=3)``); any other keyword is refused."""
        return cls._per_call_options

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
    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: dict[str, Any],
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        """Rank for one query with resolved options (``prepared``: its batch's view and scores, if any)."""

    def _checked_query(self, query: Any) -> str:
        if not isinstance(query, str):
            raise InvalidParameterError(f"the query must be a string; got {type(query).__name__}")
        return query

    def _prepared(self, query: str) -> PreparedQuery | None:
        batch = _BATCH.get()
        return None if batch is None else batch.get((id(self), query))

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not self._checked_query(query).strip():
            return []
        prepared = self._prepared(query)  # scored on the batch's view: that view decides, not the index now
        if prepared is not None:
            return self._search(query, prepared.query_vector, options, prepared)
        if self._is_empty():
            return []
        query_vector = self._embedder().embed_query(query) if self._needs_vector(options) else None
        return self._search(query, query_vector, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not self._checked_query(query).strip():
            return []
        prepared = self._prepared(query)
        if prepared is not None:
            return await run_in_executor(None, self._search, query, prepared.query_vector, options, prepared)
        if self._is_empty():
            return []
        query_vector = await self._embedder().aembed_query(query) if self._needs_vector(options) else None
        # Scoring is NumPy/FAISS work: keep it off the event loop.
        return await run_in_executor(None, self._search, query, query_vector, options)

    # --- batches -------------------------------------------------------------------------------

    def _batch_texts(self, inputs: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
        """The distinct searchable queries of a batch and its options, or None when nothing can be prepared."""
        try:
            options = self._options(kwargs)
        except FusionError:
            return None  # each invoke reports the bad option itself
        texts = list(dict.fromkeys(q for q in inputs if isinstance(q, str) and q.strip()))
        if not texts or self._is_empty():
            return None
        return texts, options

    def _batch_step(self) -> int:
        """Queries prepared at once (bounded by the memory their scores take)."""
        return 1 << 30

    def _prepare_many(self, texts: list[str], options: dict[str, Any], config: RunnableConfig) -> list[PreparedQuery]:
        """Embed the batch's queries in one call (where the model allows), then :meth:`_score_many`."""
        vectors = (
            self._embedder().embed_queries(texts, max_concurrency=config.get("max_concurrency"))
            if self._needs_vector(options)
            else None
        )
        return self._score_many(texts, vectors, options)

    async def _aprepare_many(
        self, texts: list[str], options: dict[str, Any], config: RunnableConfig
    ) -> list[PreparedQuery]:
        """Async twin of :meth:`_prepare_many`: the embedding awaits the model, scoring runs off the loop."""
        vectors = (
            await self._embedder().aembed_queries(texts, max_concurrency=config.get("max_concurrency"))
            if self._needs_vector(options)
            else None
        )
        return await run_in_executor(None, self._score_many, texts, vectors, options)

    def _score_many(
        self, texts: list[str], vectors: FloatMatrix | None, options: dict[str, Any]
    ) -> list[PreparedQuery]:
        """Prepared queries for embedded ``texts``: here their embeddings; retrievers over an index score them too."""
        return [PreparedQuery(None if vectors is None else vectors[i : i + 1]) for i in range(len(texts))]

    def _prepare(
        self, texts: list[str], options: dict[str, Any], config: RunnableConfig
    ) -> dict[tuple[int, str], PreparedQuery]:
        try:
            prepared = self._prepare_many(texts, options, config)
        except FusionError as exc:  # each invoke then embeds on its own and reports its own failure
            logger.debug("batch preparation failed, queries run one by one: %s", exc)
            return {}
        return {(id(self), text): item for text, item in zip(texts, prepared, strict=True)}

    async def _aprepare(
        self, texts: list[str], options: dict[str, Any], config: RunnableConfig
    ) -> dict[tuple[int, str], PreparedQuery]:
        try:
            prepared = await self._aprepare_many(texts, options, config)
        except FusionError as exc:
            logger.debug("batch preparation failed, queries run one by one: %s", exc)
            return {}
        return {(id(self), text): item for text, item in zip(texts, prepared, strict=True)}

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Answer many queries: embedded in one call, scored in one pass, each then run as ``invoke`` would."""
        configs = get_config_list(config, len(inputs))
        results: list[Any] = []
        step = self._batch_step()
        for start in range(0, len(inputs), step):
            chunk, chunk_configs = inputs[start : start + step], configs[start : start + step]
            found = self._batch_texts(chunk, kwargs) if len(chunk) > 1 else None
            prepared = self._prepare(*found, chunk_configs[0]) if found else {}
            token = _BATCH.set(prepared or None)
            try:
                results.extend(super().batch(chunk, chunk_configs, return_exceptions=return_exceptions, **kwargs))
            finally:
                _BATCH.reset(token)
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
        results: list[Any] = []
        step = self._batch_step()
        for start in range(0, len(inputs), step):
            chunk, chunk_configs = inputs[start : start + step], configs[start : start + step]
            found = self._batch_texts(chunk, kwargs) if len(chunk) > 1 else None
            prepared = await self._aprepare(*found, chunk_configs[0]) if found else {}
            token = _BATCH.set(prepared or None)
            try:
                results.extend(
                    await super().abatch(chunk, chunk_configs, return_exceptions=return_exceptions, **kwargs)
                )
            finally:
                _BATCH.reset(token)
        return results


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

    def _batch_step(self) -> int:
        return queries_per_pass(len(self.index))

    def _score_many(
        self, texts: list[str], vectors: FloatMatrix | None, options: dict[str, Any]
    ) -> list[PreparedQuery]:
        view = self.index.view()
        bm25 = bm25_scorers(view, texts)
        if vectors is None:
            return [PreparedQuery(None, view, bm25=side) for side in bm25]
        if options.get("fetch_k", 0) is None:
            # The whole corpus is normalised with the scan's float32 scores, whose last bits depend on the
            # kernel: each query keeps its own scan, so a batch returns exactly what invoke returns.
            vector = [view.vector(vectors[i : i + 1]) for i in range(len(texts))]
        else:
            vector = vector_scorers(view, vectors)
        return [PreparedQuery(vectors[i : i + 1], view, vector=vector[i], bm25=bm25[i]) for i in range(len(texts))]


class VectorRetriever(_IndexRetriever):
    """Dense retrieval only: cosine similarity over the index's vector side.

    Returned documents carry ``vector_score`` and ``vector_rank``.
    """

    def _score_many(
        self, texts: list[str], vectors: FloatMatrix | None, options: dict[str, Any]
    ) -> list[PreparedQuery]:
        assert vectors is not None
        view = self.index.view()
        vector = vector_scorers(view, vectors)
        return [PreparedQuery(vectors[i : i + 1], view, vector=vector[i]) for i in range(len(texts))]

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: dict[str, Any],
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        assert query_vector is not None
        view = prepared.view if prepared is not None and prepared.view is not None else self.index.view()
        scorer = prepared.vector if prepared is not None else None
        hits = vector_search(view, query_vector, options["k"], self._where(options), scorer=scorer)
        return hits_to_documents(view, hits)


class BM25Retriever(_IndexRetriever):
    """Keyword retrieval only: BM25 over the index's analyzer; never embeds the query.

    Only documents that contain at least one query term are returned. Returned documents
    carry ``bm25_score`` and ``bm25_rank``.
    """

    def _needs_vector(self, options: dict[str, Any]) -> bool:
        return False

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: dict[str, Any],
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        view = prepared.view if prepared is not None and prepared.view is not None else self.index.view()
        scorer = prepared.bm25 if prepared is not None else None
        return hits_to_documents(view, bm25_search(view, query, options["k"], self._where(options), scorer=scorer))


class FusionRetriever(_IndexRetriever):
    """Hybrid retrieval: vector and BM25 scores normalised and fused per document.

    For every candidate found by either side, the other side's real score is looked up by
    row. ``alpha`` is the weight of the vector side (1 = pure vector, 0 = pure BM25).
    Relevance floors (``min_vector_score``, ``min_bm25_score``) leave out candidates no side
    finds relevant, so a query may get fewer than ``k`` results, or none; ``lambda_mult``
    (maximal marginal relevance) and ``max_per_source`` spread the results. Every option can
    be set here, per call (``invoke(q, k=3, alpha=0.7)``) or through ``configurable_fields``.
    Returned documents carry the full score provenance.
    """

    alpha: float = SEARCH_DEFAULTS.alpha
    """Weight of the vector side; ``1 - alpha`` is the weight of BM25."""
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k
    """Candidates taken from each side before fusion; None scores the whole corpus (exact)."""
    method: FusionMethod = SEARCH_DEFAULTS.method
    """``weighted`` (min-max, the default), ``zscore`` or ``rrf``."""
    min_vector_score: float | None = SEARCH_DEFAULTS.min_vector_score
    """Relevance floor on the raw cosine similarity, in [-1, 1]; None: no floor. A candidate is kept when it
    clears at least one floor of a side with weight (see :mod:`~langchain_fusion.search.floors`)."""
    min_bm25_score: float | None = SEARCH_DEFAULTS.min_bm25_score
    """Relevance floor on the raw BM25 score, >= 0 (a candidate must also contain a query term); None: no floor."""
    lambda_mult: float | None = SEARCH_DEFAULTS.lambda_mult
    """Maximal marginal relevance among the best ``fetch_k`` fused candidates: the weight of relevance against
    diversity, in [0, 1] (1: the fused order); None: no MMR (see :mod:`~langchain_fusion.search.diversity`)."""
    max_per_source: int | None = SEARCH_DEFAULTS.max_per_source
    """The most results from one ``source``, the next candidates filling ``k``; None: no cap."""

    _per_call_options = (
        "k",
        "alpha",
        "fetch_k",
        "method",
        "filter",
        "min_vector_score",
        "min_bm25_score",
        "lambda_mult",
        "max_per_source",
    )

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: dict[str, Any],
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        assert query_vector is not None
        view, scorers = self.index.view(), None
        if prepared is not None and prepared.view is not None and prepared.vector and prepared.bm25:
            view, scorers = prepared.view, QueryScorers(vector=prepared.vector, bm25=prepared.bm25)
        hits = fused_search(
            view,
            query,
            query_vector,
            k=options["k"],
            alpha=options["alpha"],
            fetch_k=options["fetch_k"],
            method=options["method"],
            where=self._where(options),
            scorers=scorers,
            floors=Floors(vector=options["min_vector_score"], bm25=options["min_bm25_score"]),
            diversity=Diversity(lambda_mult=options["lambda_mult"], max_per_source=options["max_per_source"]),
        )
        return hits_to_documents(view, hits, options["method"])
