"""LLM rerank: ordering, top_n, ties, failures, concurrency bound, async twin, listwise, wrappers."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import Field

from langchain_fusion import (
    FusionIndex,
    InvalidParameterError,
    LLMListwiseReranker,
    LLMReranker,
    RerankRetriever,
    build_rag_chain,
)
from langchain_fusion import metadata as keys
from langchain_fusion.errors import ProviderError
from langchain_fusion.retrievers.rerank_answers import RatingError, RelevanceRating, parse_ranking, parse_rating
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import HANG_GUARD, Gate, RatingModel, RunRecorder, keyword_rule


def candidates(*words: str, scores: list[float] | None = None) -> list[Document]:
    """One document per word (its text names it), with descending fusion scores by default."""
    scores = scores if scores is not None else [1.0 - i / 10 for i in range(len(words))]
    return [
        Document(id=f"id-{w}", page_content=f"passage about {w}", metadata={"source": f"{w}.txt", keys.FUSION_SCORE: s})
        for w, s in zip(words, scores, strict=True)
    ]


def words_of(docs: list[Document]) -> list[str]:
    return [d.page_content.removeprefix("passage about ") for d in docs]


class TestParseRating:
    @pytest.mark.parametrize(
        ("answer", "expected"),
        [
            (RelevanceRating(rating=7), 7),
            ({"rating": 3}, 3),
            ({"rating": "9"}, 9),
            (10, 10),
            (6.6, 7),
            (1.0, 1),
            (9.5, 10),
            ("10.0", 10),
            ("8", 8),
            ("Rating: 4/10", 4),
            ("  I'd say 7.5, it mentions the flood.", 8),
            (AIMessage(content="Relevance: 2"), 2),
            (AIMessage(content=[{"type": "text", "text": "score 6"}]), 6),
        ],
    )
    def test_accepted(self, answer: Any, expected: int) -> None:
        assert parse_rating(answer) == expected

    @pytest.mark.parametrize(
        "answer",
        [
            "", "no idea", "11", "0", RelevanceRating(rating=0), {"rating": "high"}, None, True, float("nan"),
            10.4, 0.6, "10.5", {"rating": 10.01}, float("inf"), -3,
        ],
    )  # fmt: skip
    def test_rejected(self, answer: Any) -> None:
        with pytest.raises(RatingError):
            parse_rating(answer)


class TestParseRanking:
    def test_valid_and_invalid_ids(self) -> None:
        ids, problems = parse_ranking({"ids": [3, 1, 3, 7, 0, "2", 1.0, "x"]}, 4)
        assert ids == [3, 1, 2]
        assert problems == [
            "3 is repeated",
            "7 is out of range 1-4",
            "0 is out of range 1-4",
            "1 is repeated",
            "'x' is not a document number",
        ]

    def test_text(self) -> None:
        assert parse_ranking("[2] > [4] > [1]", 4) == ([2, 4, 1], [])


class AuthenticationError(Exception):
    """Named like OpenAI's and Anthropic's error for a bad key."""


class HttpError(Exception):
    """An HTTP error with a status code, as provider SDKs raise them."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class TestLLMReranker:
    def test_orders_by_rating_and_keeps_top_n(self) -> None:
        model = RatingModel(rule=keyword_rule({"alpha": 2, "beta": 9, "gamma": 5, "delta": 7}))
        docs = candidates("alpha", "beta", "gamma", "delta")
        result = LLMReranker(llm=model, top_n=3).compress_documents(docs, "query")
        assert words_of(list(result)) == ["beta", "delta", "gamma"]
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [9, 7, 5]
        assert [d.metadata[keys.RERANK_SCORE] for d in result] == pytest.approx([8 / 9, 6 / 9, 4 / 9])
        assert result[0].id == "id-beta"
        assert result[0].metadata[keys.FUSION_SCORE] == docs[1].metadata[keys.FUSION_SCORE]

    def test_inputs_are_not_modified(self) -> None:
        docs = candidates("alpha", "beta")
        before = copy.deepcopy(docs)
        result = LLMReranker(llm=RatingModel(rule=lambda d: 5)).rerank(docs, "q")
        assert docs == before
        assert all(r is not d for r in result for d in docs)

    def test_ties_break_by_fusion_score(self) -> None:
        # Input order is not the fusion order here, to show the fusion score decides.
        docs = candidates("alpha", "beta", "gamma", "delta", scores=[0.2, 0.9, 0.5, 0.7])
        model = RatingModel(rule=keyword_rule({"alpha": 8, "beta": 6, "gamma": 8, "delta": 6}))
        result = LLMReranker(llm=model, top_n=None).rerank(docs, "q")
        assert words_of(result) == ["gamma", "alpha", "beta", "delta"]

    def test_ties_without_fusion_scores_keep_input_order(self) -> None:
        docs = [Document(page_content=f"passage about {w}") for w in ("alpha", "beta", "gamma")]
        result = LLMReranker(llm=RatingModel(rule=lambda d: 4), top_n=None).rerank(docs, "q")
        assert words_of(result) == ["alpha", "beta", "gamma"]

    def test_failed_candidates_keep_their_fusion_place(self, caplog: pytest.LogCaptureFixture) -> None:
        rule = keyword_rule(
            {"alpha": 3, "beta": RuntimeError("provider exploded"), "gamma": 9, "delta": "no idea", "eps": 42}
        )
        docs = candidates("alpha", "beta", "gamma", "delta", "eps", "zeta")
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
            result = LLMReranker(llm=RatingModel(rule=rule, structured=False), top_n=None).rerank(docs, "q")
        # beta (2nd), delta (4th) and eps (5th) failed and stay where fusion put them.
        assert words_of(result) == ["gamma", "beta", "zeta", "delta", "eps", "alpha"]
        ratings = {w: d.metadata[keys.RERANK_RATING] for w, d in zip(words_of(result), result, strict=True)}
        assert ratings == {"gamma": 9, "beta": None, "zeta": 5, "delta": None, "eps": None, "alpha": 3}
        assert result[1].metadata[keys.RERANK_SCORE] is None
        (message,) = [r.getMessage() for r in caplog.records]  # one line for the whole rerank
        assert message.startswith("rerank: no rating for 3 of 6 candidates, which keep their fusion positions: ")
        assert "candidate 2 (RuntimeError: provider exploded)" in message
        assert "candidate 4 (RatingError" in message and "candidate 5 (RatingError" in message and "42" in message

    def test_structured_output_failures_fall_back_too(self, caplog: pytest.LogCaptureFixture) -> None:
        rule = keyword_rule({"alpha": None, "beta": {"nonsense": 1}, "gamma": 6})
        docs = candidates("alpha", "beta", "gamma")
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
            result = LLMReranker(llm=RatingModel(rule=rule), top_n=2).rerank(docs, "q")
        assert words_of(result) == ["alpha", "beta"]
        assert len(caplog.records) == 1 and "no rating for 2 of 3 candidates" in caplog.records[0].getMessage()

    def test_the_same_error_for_every_candidate_is_one_line(self, caplog: pytest.LogCaptureFixture) -> None:
        docs = candidates(*(f"word{i}" for i in range(20)))
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
            result = LLMReranker(llm=RatingModel(rule=lambda d: ValueError("down")), top_n=None).rerank(docs, "q")
        assert words_of(result) == [f"word{i}" for i in range(20)]
        (message,) = [r.getMessage() for r in caplog.records]
        assert message.endswith(f"candidates {', '.join(str(i) for i in range(1, 21))} (ValueError: down)")

    @pytest.mark.parametrize("error", [AuthenticationError("Incorrect API key provided: sk-abc***"), HttpError(401)])
    def test_a_refused_key_fails_the_rerank_once(self, error: Exception, caplog: pytest.LogCaptureFixture) -> None:
        docs = candidates(*(f"word{i}" for i in range(20)))
        with caplog.at_level(logging.WARNING), pytest.raises(ProviderError, match=r"^rerank failed: ") as caught:
            LLMReranker(llm=RatingModel(rule=lambda d: error), top_n=None).rerank(docs, "q")
        assert "\n" not in str(caught.value)
        assert caplog.records == []  # no warning per candidate

    @pytest.mark.parametrize("error", [ValueError("down"), ConnectionError("connection refused")])
    def test_a_rerank_that_must_rate_fails_when_none_is_rated(self, error: Exception) -> None:
        docs = candidates("alpha", "beta", "gamma")
        reranker = LLMReranker(llm=RatingModel(rule=lambda d: error), top_n=2, require_a_rating=True)
        with pytest.raises(
            ProviderError, match=r"^rerank failed: no candidate could be rated: candidates 1, 2, 3 \("
        ) as e:
            reranker.rerank(docs, "q")
        assert "\n" not in str(e.value)
        partly = LLMReranker(llm=RatingModel(rule=keyword_rule({"beta": 7}, default=error)), require_a_rating=True)
        ratings = [d.metadata[keys.RERANK_RATING] for d in partly.rerank(docs, "q")]
        assert ratings == [None, 7, None]  # one rating is a rerank: the others keep their fusion places

    def test_all_failures_keep_the_fusion_order(self) -> None:
        docs = candidates("alpha", "beta", "gamma")
        result = LLMReranker(llm=RatingModel(rule=lambda d: ValueError("down")), top_n=2).rerank(docs, "q")
        assert words_of(result) == ["alpha", "beta"]

    def test_timeout(self, caplog: pytest.LogCaptureFixture) -> None:
        held = Gate()  # beta's calls get no answer until rerank has returned
        model = RatingModel(rule=keyword_rule({"alpha": 2, "beta": 9}, default=6), gates={"beta": held})
        reranker = LLMReranker(llm=model, top_n=None, timeout=0.3)
        try:
            with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
                result = reranker.rerank(candidates("alpha", "beta", "gamma"), "q")
            answered = held.passed
            called = held.wait_for_arrivals(1)  # its thread may reach the model only after rerank returned
        finally:
            held.open()
        assert called and answered == 0  # rerank returned while beta's model call had not answered
        assert words_of(result) == ["gamma", "beta", "alpha"]
        assert result[1].metadata[keys.RERANK_RATING] is None
        assert "TimeoutError: no answer within 0.3 s" in caplog.text

    async def test_timeout_async(self) -> None:
        held = Gate()
        model = RatingModel(rule=keyword_rule({"alpha": 2, "beta": 9}, default=6), gates={"beta": held})
        reranker = LLMReranker(llm=model, top_n=None, timeout=0.3)
        try:
            result = await reranker.arerank(candidates("alpha", "beta", "gamma"), "q")
            arrived, passed, cancelled = held.arrived, held.passed, held.cancelled
        finally:
            held.open()
        assert arrived >= 1 and passed == 0  # rerank returned while beta's model call had not answered
        assert cancelled == arrived  # each of beta's tries was cancelled, not left running
        assert words_of(result) == ["gamma", "beta", "alpha"]
        assert result[1].metadata[keys.RERANK_RATING] is None

    @pytest.mark.parametrize("bound", [2, 4])
    def test_concurrency_is_bounded_and_real(self, bound: int) -> None:
        # No call answers before `bound` calls are in flight together, so this needs real concurrency.
        model = RatingModel(rule=lambda d: 5, gates={"passage": Gate(crowd=bound)})
        docs = candidates(*[f"w{i}" for i in range(12)])
        LLMReranker(llm=model, max_concurrency=bound, top_n=None).rerank(docs, "q")
        assert model.max_active == bound
        assert len(model.calls) == 12

    @pytest.mark.parametrize("bound", [2, 4])
    async def test_concurrency_is_bounded_and_real_async(self, bound: int) -> None:
        model = RatingModel(rule=lambda d: 5, gates={"passage": Gate(crowd=bound)})
        docs = candidates(*[f"w{i}" for i in range(12)])
        await LLMReranker(llm=model, max_concurrency=bound, top_n=None).arerank(docs, "q")
        assert model.max_active == bound
        assert model.async_calls == 12
        assert model.sync_calls == 0  # real async: the model's async API, not a thread per call

    def test_timeouts_count_toward_the_bound(self) -> None:
        # Every call hangs until rerank has returned, so each call given up on still holds its slot.
        held = Gate()
        model = RatingModel(rule=lambda d: 5, gates={"passage": held})
        docs = candidates(*[f"w{i}" for i in range(6)])
        before = set(threading.enumerate())
        try:
            # every call hangs, so the timeout only sets how long each rating waits: 20 ms
            result = LLMReranker(llm=model, max_concurrency=2, top_n=None, timeout=0.02).rerank(docs, "q")
        finally:
            held.open()
        for thread in set(threading.enumerate()) - before:  # every call started has answered: the counts are final
            if thread.name == "langchain-fusion-call":
                thread.join(HANG_GUARD)
        assert len(model.calls) == 2  # only two calls ever reached the model; the others found no free slot
        assert all(d.metadata[keys.RERANK_RATING] is None for d in result)

    async def test_async_twin_gives_the_same_result(self) -> None:
        rule = keyword_rule({"alpha": 2, "beta": ValueError("x"), "gamma": 8, "delta": 8})
        docs = candidates("alpha", "beta", "gamma", "delta", scores=[0.9, 0.8, 0.3, 0.6])
        reranker = LLMReranker(llm=RatingModel(rule=rule), top_n=3)
        sync = reranker.compress_documents(docs, "q")
        assert await reranker.acompress_documents(docs, "q") == sync
        assert words_of(list(sync)) == ["delta", "beta", "gamma"]

    def test_identical_candidates_are_rated_once(self) -> None:
        model = RatingModel(rule=keyword_rule({"alpha": 3, "beta": 8}))
        docs = candidates("alpha", "beta", "alpha", "beta")
        docs[2].id, docs[3].id = "copy-a", "copy-b"
        result = LLMReranker(llm=model, top_n=None).rerank(docs, "q")
        assert sorted(model.calls) == ["passage about alpha", "passage about beta"]
        assert [d.id for d in result] == ["id-beta", "copy-b", "id-alpha", "copy-a"]
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [8, 8, 3, 3]

    def test_text_only_models(self) -> None:
        # GenericFakeChatModel has no structured output: its text is parsed.
        model = GenericFakeChatModel(messages=iter(["Relevance: 3", "9 - it answers the question"]))
        result = LLMReranker(llm=model, max_concurrency=1, top_n=None).rerank(candidates("alpha", "beta"), "q")
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [9, 3]

    def test_structured_false_parses_text(self) -> None:
        model = RatingModel(rule=keyword_rule({"alpha": "Rating: 2", "beta": "8/10"}))
        result = LLMReranker(llm=model, structured=False, top_n=None).rerank(candidates("alpha", "beta"), "q")
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [8, 2]

    def test_any_runnable(self) -> None:
        def answer(prompt: Any) -> Any:
            return {"rating": 9} if "beta" in prompt.to_string() else RelevanceRating(rating=4)

        result = LLMReranker(llm=RunnableLambda(answer), top_n=1).rerank(candidates("alpha", "beta"), "q")
        assert words_of(result) == ["beta"]

    def test_the_prompt_holds_query_and_document(self) -> None:
        seen: list[str] = []

        def answer(prompt: Any) -> int:
            seen.append(prompt.to_string())
            return 5

        LLMReranker(llm=RunnableLambda(answer)).rerank(candidates("alpha"), "what about alpha?")
        assert "Query: what about alpha?" in seen[0]
        assert "Document:\npassage about alpha" in seen[0]

    def test_blend_with_the_fusion_score(self) -> None:
        docs = candidates("alpha", "beta", "gamma", scores=[0.9, 0.5, 0.1])
        model = RatingModel(rule=keyword_rule({"alpha": 4, "beta": 6, "gamma": 10}))
        result = LLMReranker(llm=model, top_n=None, rating_weight=0.5).rerank(docs, "q")
        scores = {w: d.metadata[keys.RERANK_SCORE] for w, d in zip(words_of(result), result, strict=True)}
        assert scores == pytest.approx({"alpha": 0.5 * 3 / 9 + 0.5, "beta": 0.5 * 5 / 9 + 0.25, "gamma": 0.5})
        assert words_of(result) == ["alpha", "beta", "gamma"]
        pure = LLMReranker(llm=model, top_n=None, rating_weight=0.0).rerank(docs, "q")
        assert words_of(pure) == ["alpha", "beta", "gamma"]

    def test_top_n_none_and_empty(self) -> None:
        reranker = LLMReranker(llm=RatingModel(rule=lambda d: 5), top_n=None)
        assert len(reranker.rerank(candidates("a", "b", "c", "d", "e"), "q")) == 5
        assert reranker.rerank([], "q") == []
        assert reranker.rerank(candidates("a", "b", "c"), "q", top_n=1)[0].page_content == "passage about a"

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"top_n": 0}, "top_n must be a positive integer"),
            ({"max_concurrency": 0}, "max_concurrency"),
            ({"rating_weight": 1.5}, "rating_weight"),
            ({"timeout": 0}, "timeout"),
            ({"prompt": ChatPromptTemplate.from_template("{query} only")}, "must take exactly the variables"),
        ],
    )
    def test_invalid_fields(self, options: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            LLMReranker(llm=RatingModel(rule=lambda d: 5), **options)

    def test_as_an_lcel_step(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever(k=4)
        model = RatingModel(rule=keyword_rule({"purr": 10, "mat": 1}))
        chain = {"query": RunnablePassthrough(), "documents": retriever} | LLMReranker(llm=model, top_n=2)
        result = chain.invoke("cats")
        assert result[0].page_content == "Cats purr when they are content and relaxed."
        assert asyncio.run(chain.ainvoke("cats")) == result

    def test_lcel_step_rejects_other_input(self) -> None:
        from langchain_fusion import FusionError

        with pytest.raises(FusionError, match=re.escape('takes {"query": str')):
            LLMReranker(llm=RatingModel(rule=lambda d: 5)).invoke("just a string")  # type: ignore[arg-type]

    def test_with_the_compression_retriever(self, animal_index: FusionIndex) -> None:
        classic = pytest.importorskip("langchain_classic.retrievers")
        model = RatingModel(rule=keyword_rule({"purr": 10}))
        retriever = classic.ContextualCompressionRetriever(
            base_compressor=LLMReranker(llm=model, top_n=1), base_retriever=animal_index.as_retriever(k=4)
        )
        [best] = retriever.invoke("cats")
        assert best.metadata[keys.RERANK_RATING] == 10
        assert asyncio.run(retriever.ainvoke("cats")) == [best]


class TestLLMListwiseReranker:
    def test_orders_by_the_model_ranking(self) -> None:
        model = RatingModel(rule=lambda prompt: [3, 1])
        result = LLMListwiseReranker(llm=model, top_n=None).rerank(candidates("alpha", "beta", "gamma", "delta"), "q")
        assert words_of(result) == ["gamma", "alpha", "beta", "delta"]
        assert [d.metadata[keys.RERANK_RANK] for d in result] == [1, 2, None, None]
        assert len(model.calls) == 1
        assert "[1] passage about alpha" in model.calls[0] and "[4] passage about delta" in model.calls[0]

    def test_invalid_ids_are_dropped_with_a_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        model = RatingModel(rule=lambda prompt: {"ids": [2, 2, 9, -1, 1]})
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
            result = LLMListwiseReranker(llm=model, top_n=3).rerank(candidates("alpha", "beta", "gamma"), "q")
        assert words_of(result) == ["beta", "alpha", "gamma"]
        assert "2 is repeated; 9 is out of range 1-3; -1 is out of range 1-3" in caplog.text

    def test_failure_keeps_the_fusion_order(self, caplog: pytest.LogCaptureFixture) -> None:
        model = RatingModel(rule=lambda prompt: RuntimeError("boom"))
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.retrievers.rerank"):
            result = LLMListwiseReranker(llm=model, top_n=2).rerank(candidates("alpha", "beta", "gamma"), "q")
        assert words_of(result) == ["alpha", "beta"]
        assert "no ranking (RuntimeError: boom)" in caplog.text

    def test_a_rerank_that_must_rank_fails_without_a_ranking(self) -> None:
        model = RatingModel(rule=lambda prompt: ConnectionError("connection refused"))
        reranker = LLMListwiseReranker(llm=model, top_n=2, require_a_rating=True)
        with pytest.raises(ProviderError, match=r"^rerank failed: no ranking: ConnectionError: connection refused$"):
            reranker.rerank(candidates("alpha", "beta", "gamma"), "q")

    def test_a_refused_key_fails_the_rerank(self) -> None:
        model = RatingModel(rule=lambda prompt: HttpError(403))
        with pytest.raises(ProviderError, match=r"^rerank failed: HttpError: HTTP 403$"):
            LLMListwiseReranker(llm=model, top_n=2).rerank(candidates("alpha", "beta", "gamma"), "q")

    def test_text_answers(self) -> None:
        model = GenericFakeChatModel(messages=iter(["2, 3, 1"]))
        result = LLMListwiseReranker(llm=model).rerank(candidates("alpha", "beta", "gamma"), "q")
        assert words_of(result) == ["beta", "gamma", "alpha"]

    def test_identical_texts_are_listed_once(self) -> None:
        model = RatingModel(rule=lambda prompt: [2, 1])
        docs = candidates("alpha", "beta", "alpha")
        result = LLMListwiseReranker(llm=model, top_n=None).rerank(docs, "q")
        assert "[3]" not in model.calls[0]
        assert words_of(result) == ["beta", "alpha", "alpha"]

    async def test_async_twin(self) -> None:
        model = RatingModel(rule=lambda prompt: [3, 2, 1])
        reranker = LLMListwiseReranker(llm=model, top_n=2)
        docs = candidates("alpha", "beta", "gamma")
        assert await reranker.acompress_documents(docs, "q") == reranker.compress_documents(docs, "q")
        assert model.async_calls == 1

    def test_timeout(self) -> None:
        called, release, answered = threading.Event(), threading.Event(), threading.Event()

        def hang(prompt: str) -> Any:  # blocks until the test releases it (the bound only guards against a hang)
            called.set()
            release.wait(HANG_GUARD)
            answered.set()
            return [2, 1]

        try:
            result = LLMListwiseReranker(llm=RatingModel(rule=hang), timeout=0.2).rerank(
                candidates("alpha", "beta"), "q"
            )
            still_blocked = not answered.is_set()
        finally:
            release.set()
        assert called.is_set() and still_blocked  # rerank returned while the model had not answered
        assert words_of(result) == ["alpha", "beta"]  # given up on: the fusion order


class TestRerankRetriever:
    def test_per_call_top_n_and_forwarding(self, animal_index: FusionIndex) -> None:
        model = RatingModel(rule=keyword_rule({"purr": 10, "friends": 9}))
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=2), reranker=LLMReranker(llm=model, top_n=3))
        assert len(retriever.invoke("cats")) == 2  # only two candidates
        top = retriever.invoke("cat and dog", k=8, top_n=2)
        assert [d.metadata[keys.RERANK_RATING] for d in top] == [10, 9]
        with pytest.raises(ValueError, match="top_n"):
            retriever.invoke("cats", top_n=0)

    async def test_async_twin(self, animal_index: FusionIndex) -> None:
        model = RatingModel(rule=keyword_rule({"purr": 10, "friends": 9}))
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=6), reranker=LLMReranker(llm=model, top_n=2))
        assert await retriever.ainvoke("cat") == retriever.invoke("cat")
        assert model.async_calls == model.sync_calls

    def test_one_trace(self, animal_index: FusionIndex) -> None:
        runs = RunRecorder()
        model = RatingModel(rule=lambda d: 5, structured=False)  # a plain chat model run per candidate
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=3), reranker=LLMReranker(llm=model, top_n=2))
        retriever.invoke("cat", config={"callbacks": [runs]})
        roots = {runs.root_of(run) for run in runs.parents}
        assert len(roots) == 1
        assert sorted(runs.kinds.values()).count("retriever") == 2
        assert list(runs.kinds.values()).count("chat_model") == 3


class TestRerankRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[RerankRetriever]:
        return RerankRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        index = FusionIndex.from_documents(candidates(*[f"w{i}" for i in range(8)]), HashingEmbeddings())
        reranker = LLMReranker(llm=RatingModel(rule=keyword_rule({"w3": 9, "w5": 8})))
        return {"retriever": index.as_retriever(k=8), "reranker": reranker}

    @property
    def retriever_query_example(self) -> str:
        return "passage about w1"

    @property
    def num_results_arg_name(self) -> str:
        return "top_n"

    def test_top_n_of_the_reranker(self) -> None:
        params = self.retriever_constructor_params
        for top_n in (1, 3):
            reranker = params["reranker"].model_copy(update={"top_n": top_n})
            retriever = RerankRetriever(retriever=params["retriever"], reranker=reranker)
            assert len(retriever.invoke(self.retriever_query_example)) == top_n

    def test_top_n_of_the_wrapper_wins_over_the_reranker(self) -> None:
        params = self.retriever_constructor_params
        reranker = params["reranker"].model_copy(update={"top_n": 3})
        retriever = RerankRetriever(retriever=params["retriever"], reranker=reranker, top_n=2)
        assert len(retriever.invoke(self.retriever_query_example)) == 2
        assert len(retriever.invoke(self.retriever_query_example, top_n=1)) == 1
        with pytest.raises(InvalidParameterError, match="top_n must be a positive integer"):
            RerankRetriever(retriever=params["retriever"], reranker=reranker, top_n=0)


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
def test_real_model_reranks(animal_index: FusionIndex) -> None:
    from langchain_fusion.models.chat import default_chat_model

    reranker = LLMReranker(llm=default_chat_model(), top_n=2)
    docs = animal_index.as_retriever(k=6).invoke("Which animal purrs when it is happy?")
    result = reranker.rerank(docs, "Which animal purrs when it is happy?")
    assert result[0].page_content == "Cats purr when they are content and relaxed."
    assert isinstance(result[0].metadata[keys.RERANK_RATING], int)
    assert HashingEmbeddings  # the fixture's embeddings are offline; only the chat model is real


class TestRetries:
    """Rerankers call the model the one way the library does: transient errors are retried."""

    @staticmethod
    def policy(**options: Any) -> Any:
        from langchain_fusion import RetryPolicy

        return RetryPolicy(sleep=lambda seconds: None, asleep=_no_wait, seed=1, **options)

    def test_a_rate_limit_is_retried(self) -> None:
        from tests.helpers.fake_chat_models import flaky

        model = RatingModel(rule=flaky(keyword_rule({"alpha": 2, "beta": 9}), failures=1))
        result = LLMReranker(llm=model, top_n=None, retry=self.policy()).rerank(candidates("alpha", "beta"), "q")
        assert words_of(result) == ["beta", "alpha"]
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [9, 2]

    async def test_a_rate_limit_is_retried_async(self) -> None:
        from tests.helpers.fake_chat_models import flaky

        model = RatingModel(rule=flaky(keyword_rule({"alpha": 2, "beta": 9}), failures=1))
        reranker = LLMReranker(llm=model, top_n=None, retry=self.policy())
        result = await reranker.arerank(candidates("alpha", "beta"), "q")
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [9, 2]

    def test_after_the_last_try_the_fusion_order_stays(self, caplog: pytest.LogCaptureFixture) -> None:
        from tests.helpers.fake_chat_models import flaky

        model = RatingModel(rule=flaky(keyword_rule({"alpha": 2, "beta": 9}), failures=5))
        reranker = LLMReranker(llm=model, top_n=None, retry=self.policy(max_attempts=3))
        with caplog.at_level(logging.WARNING):
            result = reranker.rerank(candidates("alpha", "beta"), "q")
        assert words_of(result) == ["alpha", "beta"]
        assert all(d.metadata[keys.RERANK_RATING] is None for d in result)
        assert "RateLimitError" in caplog.text

    def test_a_non_transient_error_is_not_retried(self) -> None:
        calls: list[str] = []

        def rule(prompt: str) -> Any:
            calls.append(prompt)
            return ValueError("bad request")

        LLMReranker(llm=RatingModel(rule=rule), top_n=None, retry=self.policy()).rerank(candidates("alpha"), "q")
        assert len(calls) == 1

    def test_default_retries_are_light(self) -> None:
        policy = LLMReranker(llm=RatingModel(rule=lambda d: 5)).retry
        assert policy.max_attempts == 2 and policy.max_delay <= 2


async def _no_wait(seconds: float) -> None:
    return None


# --- any BaseDocumentCompressor as the rerank step -------------------------------------------


class KeepMatching(BaseDocumentCompressor):
    """A trivial compressor: keeps the candidates containing the query's first word, last first, scored."""

    top_n: int | None = None
    seen_callbacks: list[Any] = Field(default_factory=list)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        self.seen_callbacks.append(callbacks)
        word = query.split()[0].lower()
        kept = [d for d in reversed(documents) if word in d.page_content.lower()]
        for rank, doc in enumerate(kept):  # in place, as some of LangChain's compressors do
            doc.metadata[keys.RELEVANCE_SCORE] = 1.0 / (rank + 1)
        return kept if self.top_n is None else kept[: self.top_n]


class Reverse(BaseDocumentCompressor):
    """No top_n, no score: reverses the candidates."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return list(reversed(documents))


class TestAnyCompressor:
    def test_order_rank_and_score_are_recorded(self, animal_index: FusionIndex) -> None:
        fusion = animal_index.as_retriever(k=8)
        retriever = RerankRetriever(retriever=fusion, reranker=KeepMatching())
        docs = retriever.invoke("cat")
        expected = [d for d in reversed(fusion.invoke("cat")) if "cat" in d.page_content.lower()]
        assert [d.id for d in docs] == [d.id for d in expected] and len(docs) >= 2
        assert [d.metadata[keys.RERANK_RANK] for d in docs] == list(range(1, len(docs) + 1))
        assert [d.metadata[keys.RERANK_SCORE] for d in docs] == [1.0 / r for r in range(1, len(docs) + 1)]
        for doc, original in zip(docs, expected, strict=True):
            for key in keys.SCORE_KEYS:
                assert doc.metadata[key] == original.metadata[key]  # the fusion provenance stays

    def test_per_call_top_n_through_the_field(self, animal_index: FusionIndex) -> None:
        compressor = KeepMatching(top_n=None)
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=8), reranker=compressor)
        assert len(retriever.invoke("cat", top_n=1)) == 1
        assert compressor.top_n is None  # a copy was set, not the caller's compressor
        assert len(retriever.invoke("cat")) > 1

    def test_per_call_top_n_without_a_field(self, animal_index: FusionIndex) -> None:
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=5), reranker=Reverse())
        assert len(retriever.invoke("cat")) == 5
        docs = retriever.invoke("cat", top_n=2)
        assert [d.metadata[keys.RERANK_RANK] for d in docs] == [1, 2]
        assert all(d.metadata[keys.RERANK_SCORE] is None for d in docs)
        with pytest.raises(InvalidParameterError, match="top_n"):
            retriever.invoke("cat", top_n=False)

    async def test_async_twin_and_callbacks(self, animal_index: FusionIndex) -> None:
        compressor = KeepMatching()
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=8), reranker=compressor)
        assert await retriever.ainvoke("cat") == retriever.invoke("cat")
        assert all(c is not None for c in compressor.seen_callbacks)  # the compressor runs as a child

    def test_no_candidates(self, animal_index: FusionIndex) -> None:
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=3), reranker=Reverse())
        assert retriever.invoke("") == []

    def test_langchains_cross_encoder_reranker(self, animal_index: FusionIndex) -> None:
        from langchain_classic.retrievers.document_compressors import CrossEncoderReranker as LangChainReranker
        from langchain_classic.retrievers.document_compressors.cross_encoder import BaseCrossEncoder

        class WordOverlap(BaseCrossEncoder):
            def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
                return [float(len(set(q.lower().split()) & set(t.lower().split()))) for q, t in text_pairs]

        retriever = RerankRetriever(
            retriever=animal_index.as_retriever(k=8), reranker=LangChainReranker(model=WordOverlap(), top_n=3)
        )
        docs = retriever.invoke("the cat and the dog")
        assert len(docs) == 3
        assert docs[0].page_content == "A cat and a dog can become good friends."
        assert len(retriever.invoke("the cat and the dog", top_n=1)) == 1

    def test_in_the_rag_chain(self, animal_index: FusionIndex) -> None:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        chain = build_rag_chain(
            animal_index.as_retriever(k=8), FakeListChatModel(responses=["ok"]), reranker=KeepMatching(top_n=2)
        )
        sources = chain.invoke("cat")["sources"]
        assert len(sources) == 2 and all(keys.RERANK_RANK in d.metadata for d in sources)

    def test_not_a_compressor(self, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="RerankRetriever: reranker"):
            RerankRetriever(retriever=animal_index.as_retriever(), reranker=lambda docs, query: docs)  # type: ignore[arg-type]
