"""The template of every retriever over an index: options checked, query embedded, search run; batches written once.

:class:`SearchRetriever` follows LangChain's conventions (``invoke``/``ainvoke``/``batch``,
callbacks and tracing through ``BaseRetriever``). Its option fields come from
:mod:`langchain_fusion.search.options`: the options ``invoke`` takes per call are the
retriever's fields that are search options, checked by the same functions as the fields.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from abc import abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from pydantic import ConfigDict

from langchain_fusion._checks import CheckedModel, OptionGroup
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.search.options import OPTION_CHECKS
from langchain_fusion.stores.base import FloatMatrix, ReleasableScorer, SideScorer, StoreView

logger = logging.getLogger(__name__)


def per_call_options(
    retriever: BaseRetriever,
    names: tuple[str, ...],
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """The retriever's option fields ``names``, with per-call ``overrides`` checked by their own checks."""
    unknown = set(overrides) - set(names)
    if unknown:
        raise InvalidParameterError(
            f"{type(retriever).__name__} got unexpected argument(s) {sorted(unknown)}; "
            f"per-call options are {list(names)}"
        )
    options = {name: getattr(retriever, name) for name in names}
    for name, value in overrides.items():
        options[name] = OPTION_CHECKS[name](value)
    return options


WRAPPED_ATTRIBUTES = ("retriever", "base_retriever")
"""Where a wrapper keeps the retriever it wraps: ours (windows, rerank, multi-query) and LangChain's compression."""


def wrapped_chain(retriever: Any, depth: int = 8) -> Iterator[Any]:
    """``retriever``, the retriever it wraps, the one that wraps, and so on (at most ``depth`` levels)."""
    for _ in range(depth):
        yield retriever
        inner = next((getattr(retriever, name) for name in WRAPPED_ATTRIBUTES if hasattr(retriever, name)), None)
        if not isinstance(inner, BaseRetriever):
            return
        retriever = inner


def innermost_search(retriever: BaseRetriever) -> SearchRetriever[Any] | None:
    """The search a wrapper (context windows, rerank, multi-query) passes its per-call options to, or None.

    A wrapper passes the options it does not take itself to the retriever it wraps, and so on
    down; the innermost :class:`SearchRetriever` says which it takes. None for a retriever from elsewhere.
    """
    return next((inner for inner in wrapped_chain(retriever) if isinstance(inner, SearchRetriever)), None)


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

    uses: _Uses = field(default_factory=lambda: _Uses(1))
    """How many inputs of the batch run this query (a text given twice runs twice)."""

    def release(self) -> None:
        """One run of the query is done: after the last, drop the score arrays its sides computed for it alone.

        A batch then holds the arrays of the queries running at that moment only.
        """
        if self.uses.done():
            for side in (self.vector, self.bm25):
                if isinstance(side, ReleasableScorer):
                    side.release()


class _Uses:
    """A count of runs left, shared by the threads that run them."""

    def __init__(self, count: int) -> None:
        self._left = count
        self._lock = threading.Lock()

    def done(self) -> bool:
        """Count one run done; True for the last."""
        with self._lock:
            self._left -= 1
            return self._left <= 0


def _keyed(
    retriever: object, texts: list[str], prepared: list[PreparedQuery], inputs: Sequence[Any]
) -> dict[tuple[int, str], PreparedQuery]:
    """The prepared queries by (retriever id, text), each knowing how many of ``inputs`` run it."""
    runs = Counter(text for text in inputs if isinstance(text, str))
    return {
        (id(retriever), text): replace(item, uses=_Uses(runs[text])) for text, item in zip(texts, prepared, strict=True)
    }


_BATCH: ContextVar[Mapping[tuple[int, str], PreparedQuery] | None] = ContextVar("langchain_fusion_batch", default=None)
"""The prepared queries of the batch being run, keyed by (retriever id, query)."""


OptionsT = TypeVar("OptionsT", bound=OptionGroup)
"""The options model of a retriever (its option fields are that model's; see :meth:`SearchRetriever.options_model`)."""


class SearchRetriever(CheckedModel, BaseRetriever, Generic[OptionsT]):
    """The template of every retriever here: validate options, embed (async when async), search.

    A subclass is also its options model (``class FusionRetriever(SearchOptions,
    SearchRetriever[SearchOptions])``), so its fields are its options; per call, the options
    travel as an instance of that model (:meth:`options_model`), each value checked once.
    Subclasses say whether a query needs its embedding (:meth:`_needs_vector`), how to embed
    (:meth:`_embedder`), whether there is anything to search (:meth:`_is_empty`) and how to
    rank (:meth:`_search`, plain NumPy/engine work, run off the event loop when async).

    ``batch``/``abatch`` are real batches: the queries are embedded in one call (where the
    model allows) and, over an index, scored in one pass (:meth:`_prepare_many`), then each
    query runs through ``invoke`` as usual (its own callbacks and trace) with its prepared
    embedding and scores. The results equal those of ``invoke`` for each query.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @classmethod
    @abstractmethod
    def options_model(cls) -> type[OptionsT]:
        """The model of this retriever's options (one of its bases)."""

    @classmethod
    def per_call_option_names(cls) -> tuple[str, ...]:
        """The options ``invoke`` takes per call (``invoke(query, k=3)``): the fields of :meth:`options_model`."""
        return tuple(cls.options_model().model_fields)

    def _options(self, overrides: dict[str, Any]) -> OptionsT:
        """The retriever's options with per-call ``overrides`` (each override checked by its own check).

        Without overrides they are the retriever itself, which is an instance of its options model.
        """
        model = self.options_model()
        if not overrides and isinstance(self, model):
            return self
        return model.model_construct(**per_call_options(self, self.per_call_option_names(), overrides))

    def _needs_vector(self, options: OptionsT) -> bool:
        return True

    @abstractmethod
    def _embedder(self) -> FusionIndex:
        """The index whose model embeds the query."""

    @abstractmethod
    def _is_empty(self, options: OptionsT) -> bool:
        """True when there is nothing to search (with these options: a tenant's documents, say)."""

    @abstractmethod
    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: OptionsT,
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
            try:
                return self._search(query, prepared.query_vector, options, prepared)
            finally:
                prepared.release()
        if self._is_empty(options):
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
            try:
                return await run_in_executor(None, self._search, query, prepared.query_vector, options, prepared)
            finally:
                prepared.release()
        if self._is_empty(options):
            return []
        query_vector = await self._embedder().aembed_query(query) if self._needs_vector(options) else None
        # Scoring is NumPy/FAISS work: keep it off the event loop.
        return await run_in_executor(None, self._search, query, query_vector, options)

    # --- batches -------------------------------------------------------------------------------

    def _batch_options(self, kwargs: dict[str, Any]) -> OptionsT | None:
        """The options of a batch called with ``kwargs``; None when they are bad (each invoke then reports them)."""
        try:
            return self._options(kwargs)
        except FusionError:
            return None

    def _batch_texts(self, inputs: Sequence[Any], options: OptionsT) -> tuple[list[str], OptionsT] | None:
        """The distinct searchable queries of a batch and its options, or None when nothing can be prepared."""
        texts = list(dict.fromkeys(q for q in inputs if isinstance(q, str) and q.strip()))
        if not texts or self._is_empty(options):
            return None
        return texts, options

    def _steps(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None, kwargs: dict[str, Any]
    ) -> Iterator[tuple[list[Any], list[RunnableConfig], tuple[list[str], OptionsT] | None]]:
        """A batch in the steps it is prepared in: each step's inputs, their configs, and what to prepare.

        What to prepare is :meth:`_batch_texts`'s answer (None: the step's invokes run on their own).
        """
        configs = get_config_list(config, len(inputs))
        options = self._batch_options(kwargs)
        step = self._batch_step(options)
        for start in range(0, len(inputs), step):
            chunk = inputs[start : start + step]
            found = self._batch_texts(chunk, options) if len(chunk) > 1 and options is not None else None
            yield chunk, configs[start : start + step], found

    def _batch_step(self, options: OptionsT | None) -> int:
        """Queries prepared at once for a batch with ``options`` (bounded by the memory their scores take)."""
        return 1 << 30

    def _prepare_many(self, texts: list[str], options: OptionsT, config: RunnableConfig) -> list[PreparedQuery]:
        """Embed the batch's queries in one call (where the model allows), then :meth:`_score_many`."""
        vectors = (
            self._embedder().embed_queries(texts, max_concurrency=config.get("max_concurrency"))
            if self._needs_vector(options)
            else None
        )
        return self._score_many(texts, vectors, options)

    async def _aprepare_many(self, texts: list[str], options: OptionsT, config: RunnableConfig) -> list[PreparedQuery]:
        """Async twin of :meth:`_prepare_many`: the embedding awaits the model, scoring runs off the loop."""
        vectors = (
            await self._embedder().aembed_queries(texts, max_concurrency=config.get("max_concurrency"))
            if self._needs_vector(options)
            else None
        )
        return await run_in_executor(None, self._score_many, texts, vectors, options)

    def _score_many(self, texts: list[str], vectors: FloatMatrix | None, options: OptionsT) -> list[PreparedQuery]:
        """Prepared queries for embedded ``texts``: here their embeddings; retrievers over an index score them too."""
        return [PreparedQuery(None if vectors is None else vectors[i : i + 1]) for i in range(len(texts))]

    def _prepared_runs_inline(self, prepared: Mapping[tuple[int, str], PreparedQuery]) -> bool:
        """Whether the invokes of a batch of ``prepared`` queries run one after another in the calling thread.

        True where what a prepared query has left is in-process work (ranking, fusion, documents)
        that holds the GIL: a thread pool then only adds hand-offs (a batch runs faster in turn:
        ``docs/benchmarks.md``). False, the default, keeps
        LangChain's pool, which overlaps waits that release the GIL: a store across the network, a
        graph search of each query.
        """
        return False

    def _invoke_each(
        self, inputs: Sequence[Any], configs: Sequence[RunnableConfig], return_exceptions: bool, kwargs: dict[str, Any]
    ) -> list[Any]:
        """Each input's ``invoke`` in turn, each in a copy of this context (as a pool's thread would run it).

        An error is returned in its input's place with ``return_exceptions``, else raised at once
        (the inputs after it do not start).
        """
        results: list[Any] = []
        for item, config in zip(inputs, configs, strict=True):
            try:
                results.append(contextvars.copy_context().run(self.invoke, item, config, **kwargs))
            except Exception as exc:
                if not return_exceptions:
                    raise
                results.append(exc)
        return results

    def _prepare(
        self, inputs: Sequence[Any], texts: list[str], options: OptionsT, config: RunnableConfig
    ) -> dict[tuple[int, str], PreparedQuery]:
        try:
            prepared = self._prepare_many(texts, options, config)
        except FusionError as exc:  # each invoke then embeds on its own and reports its own failure
            logger.debug("batch preparation failed, queries run one by one: %s", exc)
            return {}
        return _keyed(self, texts, prepared, inputs)

    async def _aprepare(
        self, inputs: Sequence[Any], texts: list[str], options: OptionsT, config: RunnableConfig
    ) -> dict[tuple[int, str], PreparedQuery]:
        try:
            prepared = await self._aprepare_many(texts, options, config)
        except FusionError as exc:
            logger.debug("batch preparation failed, queries run one by one: %s", exc)
            return {}
        return _keyed(self, texts, prepared, inputs)

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Answer many queries: embedded in one call, scored in one pass, each then run as ``invoke`` would.

        Each query is still its own run (callbacks, tracing, errors); over an in-process index the
        scored queries run in turn in this thread (see :meth:`_prepared_runs_inline`).
        """
        results: list[Any] = []
        for chunk, chunk_configs, found in self._steps(inputs, config, kwargs):
            prepared = self._prepare(chunk, *found, chunk_configs[0]) if found else {}
            token = _BATCH.set(prepared or None)
            try:
                if prepared and self._prepared_runs_inline(prepared):
                    results.extend(self._invoke_each(chunk, chunk_configs, return_exceptions, kwargs))
                else:
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
        results: list[Any] = []
        for chunk, chunk_configs, found in self._steps(inputs, config, kwargs):
            prepared = await self._aprepare(chunk, *found, chunk_configs[0]) if found else {}
            token = _BATCH.set(prepared or None)
            try:
                results.extend(
                    await super().abatch(chunk, chunk_configs, return_exceptions=return_exceptions, **kwargs)
                )
            finally:
                _BATCH.reset(token)
        return results
