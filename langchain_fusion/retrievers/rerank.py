"""LLM rerank: a chat model rates (or ranks) the retrieved candidates; the best ``top_n`` are kept.

:class:`LLMReranker` asks the model to rate each candidate from 1 to 10 for the query, one call
per distinct candidate, run concurrently with a bound (``batch`` / ``abatch`` with
``max_concurrency``). It uses structured output when the model supports it and otherwise
parses the first number of the model's text (:mod:`~langchain_fusion.retrievers.rerank_answers`).
A call that raises, times out or returns no usable rating never fails the query: that candidate
keeps its place in the fusion order and a warning is logged. :class:`LLMListwiseReranker` asks
for one ranking of all candidates in a single call instead.

Both are rerankers (:class:`~langchain_fusion.retrievers.rerank_base.BaseReranker`): document
compressors (for LangChain's ``ContextualCompressionRetriever``) and LCEL steps from
``{"query": ..., "documents": [...]}`` to documents;
:class:`~langchain_fusion.retrievers.rerank_retriever.RerankRetriever` wraps a retriever with one,
or with any other ``BaseDocumentCompressor``. Results are copies carrying the keys of
:data:`~langchain_fusion.metadata.RERANK_KEYS`.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from pydantic import BaseModel, Field, PrivateAttr, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion.errors import ProviderError, describe_error
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY, CallBounds, ainvoke_bounded, invoke_bounded
from langchain_fusion.models.prompts import Prompt, check_prompt
from langchain_fusion.models.retries import RetryPolicy, is_credential_error
from langchain_fusion.retrievers.rerank_answers import (
    DEFAULT_RANKING_PROMPT,
    DEFAULT_RATING_PROMPT,
    Ranking,
    RatingError,
    RelevanceRating,
    parse_ranking,
    parse_rating,
)
from langchain_fusion.retrievers.rerank_base import BaseReranker, descending, fusion_scores, reranked_copy

logger = logging.getLogger(__name__)


def _report_failures(answers: Sequence[Any], require_a_rating: bool = False) -> None:
    """Raise a :class:`ProviderError` when the model refused the key; else one warning for the unrated candidates.

    A bad key fails every rating alike, so it fails the rerank once (the CLI's one error line, the
    server's 502) instead of leaving every candidate unrated. So does any failure of every rating
    when ``require_a_rating``. Other failures leave those candidates in their fusion positions,
    reported in one line that groups the candidates by error.
    """
    failed = [(position, answer) for position, answer in enumerate(answers, 1) if isinstance(answer, BaseException)]
    for _, answer in failed:
        _fail_if_key_refused(answer)
    if not failed:
        return
    by_error: dict[str, list[int]] = {}
    for position, answer in failed:
        by_error.setdefault(describe_error(answer), []).append(position)
    reasons = "; ".join(f"{_positions(positions)} ({error})" for error, positions in by_error.items())
    if require_a_rating and len(failed) == len(answers):
        raise ProviderError(f"rerank failed: no candidate could be rated: {reasons}")
    logger.warning(
        "rerank: no rating for %d of %d candidates, which keep their fusion positions: %s",
        len(failed),
        len(answers),
        reasons,
    )


def _fail_if_key_refused(error: BaseException) -> None:
    """A :class:`ProviderError` when the provider refused the key: every other call of the rerank would fail alike."""
    if is_credential_error(error):
        raise ProviderError(f"rerank failed: {describe_error(error)}") from error


def _positions(positions: list[int]) -> str:
    return ("candidate " if len(positions) == 1 else "candidates ") + ", ".join(map(str, positions))


def _normalized_fusion(scores: list[float | None]) -> list[float]:
    """Min-max normalised fusion scores; by position (first = 1) if any is missing."""
    count = len(scores)
    known = [s for s in scores if s is not None]
    if len(known) < count:
        return [1.0 if count == 1 else (count - 1 - i) / (count - 1) for i in range(count)]
    low, high = min(known), max(known)
    return [1.0 if high == low else (s - low) / (high - low) for s in known]


RERANK_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.25, max_delay=2.0)
"""The rerankers' default retries: one more try after at most a quarter second (a query is waiting)."""


class BaseLLMReranker(BaseReranker):
    """What the LLM rerankers share: the model, its timeout, retries and concurrency bound."""

    llm: Runnable[Any, Any]
    """A chat model, or any Runnable from a prompt to an answer (a rating object, dict or text)."""
    structured: bool = True
    """Use the model's structured output when it supports it; False always parses text answers."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds to wait for one model answer (per try) before it counts as a transient failure (None: no limit)."""
    max_concurrency: int = Field(default=DEFAULT_LLM_CONCURRENCY, ge=1)
    """Most model calls in flight at once; with a ``timeout``, across all queries of this reranker and
    counting calls given up on that have not returned yet (so a hung model holds at most this many threads)."""
    retry: RetryPolicy = Field(default_factory=lambda: RERANK_RETRY)
    """Retries of rate limits, timeouts and other transient errors; lighter than indexing's, since a
    query waits. After the last try the candidate keeps its fusion order."""
    require_a_rating: bool = False
    """When no candidate could be rated at all (every call failed: no network, timeouts, no usable answer),
    raise a :class:`~langchain_fusion.errors.ProviderError` instead of keeping the fusion order: the rerank
    asked for did not happen. A pipeline's ``llm`` rerank step sets it, so the command line exits with an
    error and the server answers 502; a refused key always fails the rerank."""

    _slots: threading.Semaphore = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Make the call slots shared by every query of this reranker."""
        super().model_post_init(context)
        self._slots = threading.Semaphore(self.max_concurrency)

    # --- the model ----------------------------------------------------------------------------

    def _bounds(self) -> CallBounds:
        """How each model call is bounded: per-try ``timeout``, ``retry``, this reranker's call slots."""
        return CallBounds(retry=self.retry, task="rerank", slots=self._slots, timeout=self.timeout)

    def _answering(self, schema: type[BaseModel], prompt: Prompt) -> Runnable[dict[str, Any], Any]:
        """``prompt | model``, with the model's structured output for ``schema`` when it has one."""
        model = self.llm
        if self.structured:
            with_structured_output = getattr(model, "with_structured_output", None)
            if with_structured_output is not None:
                try:
                    model = with_structured_output(schema)
                except NotImplementedError:
                    model = self.llm  # a model without structured output: parse its text
        return prompt | model

    def _ask(
        self,
        chain: Runnable[dict[str, Any], Any],
        inputs: dict[str, Any],
        config: RunnableConfig,
    ) -> Any:
        """One model call (:func:`invoke_bounded`): retried per ``retry``, each try given up on after ``timeout``."""
        answer, error, _ = invoke_bounded(chain, inputs, config, self._bounds())
        if error is not None:
            raise error
        return answer

    async def _aask(self, chain: Runnable[dict[str, Any], Any], inputs: dict[str, Any], config: RunnableConfig) -> Any:
        answer, error, _ = await ainvoke_bounded(chain, inputs, config, self._bounds())
        if error is not None:
            raise error
        return answer


class LLMReranker(BaseLLMReranker):
    """Pointwise LLM rerank: each distinct candidate rated 1-10 by a chat model; best ``top_n`` kept.

    Candidates are rated concurrently, at most ``max_concurrency`` at a time. Identical
    candidate texts are rated once. Results are ordered by ``rerank_score``
    (``rating_weight * (rating - 1) / 9 + (1 - rating_weight) * normalised fusion score``),
    ties broken by fusion score, then by input order. A candidate whose rating failed (error,
    timeout, no number in 1-10) keeps its input position, with ``rerank_rating`` None and a
    logged warning; when none could be rated, ``require_a_rating`` makes that an error.
    """

    rating_weight: float = Field(default=1.0, ge=0.0, le=1.0)
    """Weight of the LLM rating in ``rerank_score``; ``1 - rating_weight`` goes to the fusion score."""
    prompt: Prompt = DEFAULT_RATING_PROMPT
    """The rating prompt; it must take ``query`` and ``document``."""

    @field_validator("prompt")
    @classmethod
    def _valid_prompt(cls, prompt: Prompt) -> Prompt:
        return check_prompt(prompt, {"query", "document"})

    def _rater(self) -> RunnableLambda[dict[str, Any], int]:
        chain = self._answering(RelevanceRating, self.prompt)

        def rate(inputs: dict[str, Any], config: RunnableConfig) -> int:
            return parse_rating(self._ask(chain, inputs, config))

        async def arate(inputs: dict[str, Any], config: RunnableConfig) -> int:
            return parse_rating(await self._aask(chain, inputs, config))

        return RunnableLambda(rate, afunc=arate, name="rate_candidate")

    def _requests(self, documents: list[Document], query: str) -> tuple[list[dict[str, Any]], list[int]]:
        """One model input per distinct text, and which input each document uses."""
        slot_of: dict[str, int] = {}
        inputs: list[dict[str, Any]] = []
        which = []
        for doc in documents:
            if doc.page_content not in slot_of:
                slot_of[doc.page_content] = len(inputs)
                inputs.append({"query": query, "document": doc.page_content})
            which.append(slot_of[doc.page_content])
        return inputs, which

    def _config(self, callbacks: Callbacks) -> RunnableConfig:
        return {"callbacks": callbacks, "max_concurrency": self.max_concurrency}

    def _rerank(self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks) -> list[Document]:
        inputs, which = self._requests(documents, query)
        answers = self._rater().batch(inputs, self._config(callbacks), return_exceptions=True)
        return self._order(documents, [answers[i] for i in which], top_n)

    async def _arerank(
        self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks
    ) -> list[Document]:
        inputs, which = self._requests(documents, query)
        answers = await self._rater().abatch(inputs, self._config(callbacks), return_exceptions=True)
        return self._order(documents, [answers[i] for i in which], top_n)

    def _order(self, documents: list[Document], answers: list[int | Exception], top_n: int | None) -> list[Document]:
        fusion = fusion_scores(documents)
        normalized = _normalized_fusion(fusion)
        _report_failures(answers, self.require_a_rating)
        scores: list[float | None] = []
        for position, answer in enumerate(answers):
            if isinstance(answer, BaseException):
                scores.append(None)
            else:
                w = self.rating_weight
                scores.append(w * (answer - 1) / 9 + (1 - w) * normalized[position])
        rated = sorted(
            (p for p, s in enumerate(scores) if s is not None),
            key=lambda p: (descending(scores[p]), descending(fusion[p]), p),
        )
        order: list[int] = []
        queue = iter(rated)
        for position, score in enumerate(scores):
            order.append(position if score is None else next(queue))  # failed candidates keep their slot
        kept = order if top_n is None else order[:top_n]
        return [
            reranked_copy(
                documents[p],
                {
                    keys.RERANK_RATING: None if isinstance(answers[p], BaseException) else answers[p],
                    keys.RERANK_SCORE: scores[p],
                },
            )
            for p in kept
        ]


class LLMListwiseReranker(BaseLLMReranker):
    """Listwise LLM rerank: one model call orders all candidates; the best ``top_n`` are kept.

    Cheaper than :class:`LLMReranker` (one call instead of one per candidate) but limited by
    the model's context window. The returned ids are checked: ids that are not whole numbers,
    out of range or repeated are dropped with a warning; candidates the model left out follow
    the ranked ones in fusion order (``rerank_rank`` None). If the call fails altogether, the
    fusion order is kept and a warning is logged (``require_a_rating``: an error instead).
    """

    prompt: Prompt = DEFAULT_RANKING_PROMPT
    """The ranking prompt; it must take ``query`` and ``documents``."""

    @field_validator("prompt")
    @classmethod
    def _valid_prompt(cls, prompt: Prompt) -> Prompt:
        return check_prompt(prompt, {"query", "documents"})

    def _request(self, documents: list[Document], query: str) -> tuple[dict[str, Any], list[str]]:
        texts = list(dict.fromkeys(doc.page_content for doc in documents))  # identical texts listed once
        listing = "\n\n".join(f"[{i}] {text}" for i, text in enumerate(texts, 1))
        return {"query": query, "documents": listing}, texts

    def _rerank(self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks) -> list[Document]:
        inputs, texts = self._request(documents, query)
        chain = self._answering(Ranking, self.prompt)
        try:
            answer: Any = self._ask(chain, inputs, {"callbacks": callbacks})
        except Exception as exc:
            answer = exc
        return self._order(documents, texts, answer, top_n)

    async def _arerank(
        self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks
    ) -> list[Document]:
        inputs, texts = self._request(documents, query)
        chain = self._answering(Ranking, self.prompt)
        try:
            answer: Any = await self._aask(chain, inputs, {"callbacks": callbacks})
        except Exception as exc:
            answer = exc
        return self._order(documents, texts, answer, top_n)

    def _order(self, documents: list[Document], texts: list[str], answer: Any, top_n: int | None) -> list[Document]:
        ids: list[int] = []
        if isinstance(answer, BaseException):
            _fail_if_key_refused(answer)
            if self.require_a_rating:
                raise ProviderError(f"rerank failed: no ranking: {describe_error(answer)}") from answer
            logger.warning("rerank: no ranking (%s); keeping the fusion order", describe_error(answer))
        else:
            try:
                ids, problems = parse_ranking(answer, len(texts))
            except RatingError as exc:
                problems = [str(exc)]
            if problems:
                logger.warning("rerank: ignored part of the ranking: %s", "; ".join(problems))
        rank_of = {texts[i - 1]: rank for rank, i in enumerate(ids, 1)}
        order = sorted(
            range(len(documents)),
            key=lambda p: (rank_of.get(documents[p].page_content, math.inf), p),
        )
        kept = order if top_n is None else order[:top_n]
        return [reranked_copy(documents[p], {keys.RERANK_RANK: rank_of.get(documents[p].page_content)}) for p in kept]
