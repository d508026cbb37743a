"""LLM rerank: a chat model rates (or ranks) the retrieved candidates; the best ``top_n`` are kept.

:class:`LLMReranker` asks the model to rate each candidate from 1 to 10 for the query, one call
per distinct candidate, run concurrently with a bound (``batch`` / ``abatch`` with
``max_concurrency``). It uses structured output when the model supports it and otherwise
parses the first number of the model's text. A call that raises, times out or returns no
usable rating never fails the query: that candidate keeps its place in the fusion order and
a warning is logged. :class:`LLMListwiseReranker` asks for one ranking of all candidates in a
single call instead.

Both are ``BaseDocumentCompressor``s (for LangChain's ``ContextualCompressionRetriever``) and
``Runnable``s from ``{"query": ..., "documents": [...]}`` to documents (for LCEL);
:class:`RerankRetriever` wraps a retriever with one, or with any other ``BaseDocumentCompressor``.
Results are copies carrying the keys of :data:`~langchain_fusion.metadata.RERANK_KEYS`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, TypedDict

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForChainRun,
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnableSerializable
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel
from langchain_fusion.errors import FusionError, InvalidParameterError, ProviderError, describe_error
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY, CallBounds, ainvoke_bounded, invoke_bounded
from langchain_fusion.models.prompts import Prompt, answer_text, check_prompt
from langchain_fusion.models.retries import RetryPolicy, is_credential_error

logger = logging.getLogger(__name__)

DEFAULT_RATING_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You judge how relevant a document is to a search query."),
        (
            "human",
            "Rate the relevance of the following document to the query on a scale from 1 to 10. "
            "Consider the specific context and intent of the query, not just keyword matches: "
            "1 means unrelated, 10 means the document answers the query directly.\n\n"
            "Query: {query}\n\nDocument:\n{document}\n\n"
            "Relevance rating (a whole number from 1 to 10):",
        ),
    ]
)
"""The pointwise prompt (after the well-known rerank tutorial); variables ``query``, ``document``."""

DEFAULT_RANKING_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You rank documents by how relevant they are to a search query."),
        (
            "human",
            "Rank the numbered documents below by their relevance to the query, most relevant first. "
            "Consider the specific context and intent of the query, not just keyword matches. Use each "
            "document number at most once; leave out documents that are unrelated.\n\n"
            "Query: {query}\n\n{documents}\n\nDocument numbers, most relevant first:",
        ),
    ]
)
"""The listwise prompt; variables ``query`` and ``documents`` (numbered ``[1] ...`` passages)."""


class RelevanceRating(BaseModel):
    """How relevant a document is to a search query."""

    rating: int = Field(description="Relevance from 1 (unrelated) to 10 (answers the query directly).")
    reason: str | None = Field(default=None, description="One short sentence explaining the rating.")


class Ranking(BaseModel):
    """Document numbers ordered by relevance to the query, most relevant first."""

    ids: list[int] = Field(description="Document numbers, most relevant first; each at most once.")


class RerankInput(TypedDict):
    """The input of a reranker used as an LCEL step."""

    query: str
    """The query the documents were retrieved for."""
    documents: Sequence[Document]
    """The candidates, best first by fusion score."""


class RatingError(ValueError):
    """A model's answer held no usable rating or ranking (logged; never raised to callers)."""


def _check_top_n(top_n: Any) -> int | None:
    if top_n is None:
        return None
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise InvalidParameterError(
            f"top_n must be a positive integer (documents to keep) or None for all; got {top_n!r}"
        )
    return top_n


def _text_of(output: Any) -> str:
    """The text of a model answer (see :func:`~langchain_fusion.models.prompts.answer_text`), or a RatingError."""
    try:
        return answer_text(output)
    except ValueError:
        raise RatingError(f"expected a rating, got {type(output).__name__}: {output!r:.80}") from None


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")


def parse_rating(output: Any) -> int:
    """A 1-10 rating from a model's answer: a RelevanceRating, a dict, a number or text.

    Text gives its first number (rounded to the nearest whole number). Raises
    :class:`RatingError` when there is none or it is outside 1-10.
    """
    if isinstance(output, RelevanceRating):
        value: Any = output.rating
    elif isinstance(output, dict) and "rating" in output:
        value = output["rating"]
    elif isinstance(output, (int, float)) and not isinstance(output, bool):
        value = output
    else:
        text = _text_of(output)
        match = _NUMBER.search(text)
        if match is None:
            raise RatingError(f"no number in the answer {text.strip()[:80]!r}")
        value = float(match.group(1))
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RatingError(f"the rating {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RatingError(f"the rating {value!r} is not a number")
    if not 1 <= value <= 10:  # before rounding: 10.4 and 0.6 are out of range, not 10 and 1
        raise RatingError(f"the rating {value!r} is outside 1-10")
    return math.floor(value + 0.5)


def parse_ranking(output: Any, count: int) -> tuple[list[int], list[str]]:
    """The valid 1-based ids of a listwise answer, and what was wrong with the others.

    Accepts a :class:`Ranking`, a dict with ``ids``, a list of ids, or text (its numbers in
    order). Ids that are not whole numbers, out of ``1..count`` or repeated are dropped.
    """
    if isinstance(output, Ranking):
        raw: list[Any] = list(output.ids)
    elif isinstance(output, dict) and "ids" in output:
        raw = list(output["ids"])
    elif isinstance(output, (list, tuple)):
        raw = list(output)
    else:
        raw = [float(m) for m in _NUMBER.findall(_text_of(output))]
    valid: list[int] = []
    problems: list[str] = []
    for item in raw:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item.strip())
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int):
            problems.append(f"{item!r} is not a document number")
        elif not 1 <= item <= count:
            problems.append(f"{item} is out of range 1-{count}")
        elif item in valid:
            problems.append(f"{item} is repeated")
        else:
            valid.append(item)
    return valid, problems


def _finite_number(value: Any) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fusion_scores(documents: Sequence[Document]) -> list[float | None]:
    """Each document's finite fused score (None where it has none)."""
    return [_finite_number(doc.metadata.get(keys.FUSION_SCORE)) for doc in documents]


def descending(value: float | None) -> float:
    """A sort key putting higher values first and None last."""
    return math.inf if value is None else -value


def _report_failures(answers: Sequence[Any]) -> None:
    """Raise a :class:`ProviderError` when the model refused the key; else one warning for the unrated candidates.

    A bad key fails every rating alike, so it fails the rerank once (the CLI's one error line, the
    server's 502) instead of leaving every candidate unrated. Other failures leave those candidates
    in their fusion positions, reported in one line that groups the candidates by error.
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


class BaseReranker(CheckedModel, BaseDocumentCompressor, RunnableSerializable[RerankInput, list[Document]]):
    """What this library's rerankers share: ``top_n`` (also per call), the LCEL and compressor interfaces.

    A subclass implements :meth:`_rerank` and :meth:`_arerank` over a non-empty candidate list and
    returns copies carrying its :data:`~langchain_fusion.metadata.RERANK_KEYS`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    top_n: int | None = 4
    """How many documents to keep (None: all, reordered); override per call in :class:`RerankRetriever`."""

    @field_validator("top_n")
    @classmethod
    def _valid_top_n(cls, value: Any) -> int | None:
        return _check_top_n(value)

    # --- the public API -----------------------------------------------------------------------

    def rerank(
        self, documents: Sequence[Document], query: str, *, top_n: Any = ..., callbacks: Callbacks = None
    ) -> list[Document]:
        """Rerank ``documents`` for ``query``; ``top_n`` overrides the field for this call."""
        limit = self.top_n if top_n is ... else _check_top_n(top_n)
        if not documents:
            return []
        return self._rerank(list(documents), query, limit, callbacks)

    async def arerank(
        self, documents: Sequence[Document], query: str, *, top_n: Any = ..., callbacks: Callbacks = None
    ) -> list[Document]:
        """Async twin of :meth:`rerank`."""
        limit = self.top_n if top_n is ... else _check_top_n(top_n)
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

    @staticmethod
    def _copy(doc: Document, updates: dict[str, Any]) -> Document:
        copied = doc.model_copy(deep=True)
        copied.metadata.update(updates)
        return copied

    @abstractmethod
    def _rerank(self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks) -> list[Document]:
        """Rerank a non-empty candidate list."""

    @abstractmethod
    async def _arerank(
        self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks
    ) -> list[Document]:
        """Async twin of :meth:`_rerank`."""


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


def _unpack(input: Any) -> tuple[str, Sequence[Document]]:
    if not isinstance(input, dict) or not isinstance(input.get("query"), str) or "documents" not in input:
        raise FusionError(
            f'a reranker step takes {{"query": str, "documents": [Document, ...]}}; got {type(input).__name__}'
        )
    return input["query"], input["documents"]


class LLMReranker(BaseLLMReranker):
    """Pointwise LLM rerank: each distinct candidate rated 1-10 by a chat model; best ``top_n`` kept.

    Candidates are rated concurrently, at most ``max_concurrency`` at a time. Identical
    candidate texts are rated once. Results are ordered by ``rerank_score``
    (``rating_weight * (rating - 1) / 9 + (1 - rating_weight) * normalised fusion score``),
    ties broken by fusion score, then by input order. A candidate whose rating failed (error,
    timeout, no number in 1-10) keeps its input position, with ``rerank_rating`` None and a
    logged warning.
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
        _report_failures(answers)
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
            self._copy(
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
    fusion order is kept and a warning is logged.
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
        return [self._copy(documents[p], {keys.RERANK_RANK: rank_of.get(documents[p].page_content)}) for p in kept]


def with_top_n(compressor: BaseDocumentCompressor, top_n: int | None) -> BaseDocumentCompressor:
    """``compressor`` set to keep ``top_n`` documents, where it has a ``top_n`` field (a copy; else itself).

    Ours and most of LangChain's rerankers (``CrossEncoderReranker``, ``CohereRerank``...) have one.
    """
    if "top_n" in type(compressor).model_fields and getattr(compressor, "top_n", None) != top_n:
        return compressor.model_copy(update={"top_n": top_n})
    return compressor


class RerankRetriever(CheckedModel, BaseRetriever):
    """Wraps a retriever with a rerank step: retrieve candidates, rerank them, keep ``top_n``.

    The rerank step is any LangChain ``BaseDocumentCompressor``: ours (:class:`LLMReranker`,
    :class:`LLMListwiseReranker`, :class:`~langchain_fusion.retrievers.cross_encoder.CrossEncoderReranker`),
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
    """The rerank step: any ``BaseDocumentCompressor`` (e.g. :class:`LLMReranker` or ``CrossEncoderReranker``)."""
    top_n: int | None = None
    """How many reranked documents to keep; None: what the rerank step keeps (its own ``top_n``)."""

    @field_validator("top_n", mode="before")
    @classmethod
    def _valid_top_n(cls, value: Any) -> int | None:
        return _check_top_n(value)

    def _split(self, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        rest = dict(kwargs)
        default = ... if self.top_n is None else self.top_n
        top_n = _check_top_n(rest.pop("top_n")) if "top_n" in rest else default
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
            score = _finite_number(doc.metadata.get(keys.RELEVANCE_SCORE))
            results.append(BaseReranker._copy(doc, {keys.RERANK_RANK: rank, keys.RERANK_SCORE: score}))
        return results
