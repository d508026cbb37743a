"""Hostile chat models: hung calls, flaky and failing providers, answers out of bounds.

A hung model must not make threads pile up; a provider failure is one ``ProviderError`` line;
a transient failure is retried; nothing a model says grows the index without bound. (Ratings out
of range and too-long contexts are also covered in test_rerank.py and test_enrichment.py.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import PrivateAttr

from langchain_fusion import (
    ContextualEnricher,
    FusionError,
    FusionIndex,
    InvalidParameterError,
    LLMListwiseReranker,
    LLMReranker,
    RetryPolicy,
    build_rag_chain,
)
from langchain_fusion import metadata as keys
from langchain_fusion.errors import ProviderError
from langchain_fusion.models.guarded_model import GuardedModel
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import HANG_GUARD, Gate, RateLimitError

CALL_THREADS = ("langchain-fusion-call", "langchain-fusion-stream")


_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def earlier_call_threads() -> None:
    """Remember the call threads other tests left behind (some abandon a hung call on purpose)."""
    _EARLIER.clear()
    _EARLIER.update(t for t in threading.enumerate() if t.name in CALL_THREADS)


def call_threads() -> int:
    """Live threads started for timed model calls since this test began."""
    return sum(1 for t in threading.enumerate() if t.name in CALL_THREADS and t not in _EARLIER)


def join_call_threads() -> None:
    """Wait for the timed-call threads started since this test began to end (each at most HANG_GUARD, a hang guard)."""
    for thread in threading.enumerate():
        if thread.name in CALL_THREADS and thread not in _EARLIER:
            thread.join(HANG_GUARD)


async def _no_wait(seconds: float) -> None:
    return None


def quick_retry(attempts: int = 2) -> RetryPolicy:
    """Retries without waiting, so hung-model tests stay fast."""
    return RetryPolicy(max_attempts=attempts, initial_delay=0.0, sleep=lambda seconds: None, asleep=_no_wait)


class HangingModel(BaseChatModel):
    """Answers only once ``release`` is set (or after 30 s); counts the calls that reached it."""

    _release: threading.Event = PrivateAttr(default_factory=threading.Event)
    _started: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "hanging-fake"

    @property
    def started(self) -> int:
        return self._started

    def release(self) -> None:
        self._release.set()

    def _wait(self) -> None:
        with self._lock:
            self._started += 1
        self._release.wait(30)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._wait()
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="7"))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self._wait()
        yield ChatGenerationChunk(message=AIMessageChunk(content="late"))


class ScriptedModel(BaseChatModel):
    """Each call takes the next step of ``script``: an exception is raised, a string is the answer.

    Streams yield the answer word by word; a step ``("words", error)`` yields the words, then raises.
    """

    script: list[Any]
    _calls: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    @property
    def calls(self) -> int:
        return self._calls

    def _step(self) -> Any:
        step = self.script[min(self._calls, len(self.script) - 1)]
        self._calls += 1
        if isinstance(step, BaseException):
            raise step
        return step

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        step = self._step()
        text = step if isinstance(step, str) else step[0]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        step = self._step()
        text, error = (step, None) if isinstance(step, str) else step
        for word in text.split():
            yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))
        if error is not None:
            raise error

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop):
            yield chunk


def candidates(n: int) -> list[Document]:
    return [
        Document(page_content=f"passage {i}", id=str(i), metadata={keys.FUSION_SCORE: 1.0 - i / 100}) for i in range(n)
    ]


@pytest.fixture
def hanging() -> Iterator[HangingModel]:
    model = HangingModel()
    yield model
    model.release()
    join_call_threads()


class TestHungModelsHoldBoundedThreads:
    """The fault-injection finding: ten reranks against a hung model left 181 live threads."""

    def test_pointwise_rerank(self, hanging: HangingModel) -> None:
        # Every call fails (the model never answers), so the timeout only sets how long each rating waits: 5 ms.
        reranker = LLMReranker(llm=hanging, top_n=None, timeout=0.005, max_concurrency=4, retry=quick_retry())
        docs = candidates(21)
        most = 0
        for _ in range(10):
            result = reranker.rerank(docs, "q")
            most = max(most, call_threads())
            assert [d.id for d in result] == [d.id for d in docs]  # every rating failed: fusion order kept
            assert all(d.metadata[keys.RERANK_RATING] is None for d in result)
        assert most <= 4
        assert hanging.started <= 4  # the other calls never got a slot, so never started a thread

    def test_listwise_rerank(self, hanging: HangingModel) -> None:
        reranker = LLMListwiseReranker(llm=hanging, top_n=3, timeout=0.02, max_concurrency=2, retry=quick_retry())
        for _ in range(10):
            assert [d.id for d in reranker.rerank(candidates(5), "q")] == ["0", "1", "2"]
        assert call_threads() <= 2 and hanging.started <= 2

    def test_slots_are_given_back_once_the_model_answers(self, hanging: HangingModel) -> None:
        reranker = LLMReranker(llm=hanging, top_n=None, timeout=0.02, max_concurrency=2, retry=quick_retry(1))
        reranker.rerank(candidates(3), "q")
        hanging.release()
        join_call_threads()
        assert call_threads() == 0
        # The slots are what is tested: the answering model gets time to answer beside a busy CPU (20 ms did not,
        # once). Slots still held would fail the ratings all the same, after waiting this long for one.
        reranker.timeout = 10.0
        result = reranker.rerank(candidates(3), "q")
        assert [d.metadata[keys.RERANK_RATING] for d in result] == [7, 7, 7]

    def test_enrichment(self, hanging: HangingModel, tmp_path: Any) -> None:
        enricher = ContextualEnricher(llm=hanging, timeout=0.02, max_concurrency=3, retry=quick_retry())
        chunks = [Document(page_content=f"chunk {i}", metadata={keys.SOURCE: "a.txt"}) for i in range(12)]
        enriched, report = enricher.enrich(chunks)
        assert len(enriched) == 12 and len(report.failed) == 12  # every chunk kept, none enriched
        assert call_threads() <= 3 and hanging.started <= 3

    def test_rag_answer(self, hanging: HangingModel) -> None:
        index = FusionIndex.from_texts(["alpha beta", "gamma"], HashingEmbeddings())
        chain = build_rag_chain(index.as_retriever(k=1), hanging, timeout=0.05, retry=quick_retry(3))
        with pytest.raises(ProviderError, match=r"^the chat model failed after 3 tries: TimeoutError: no answer"):
            chain.invoke("alpha")
        with pytest.raises(ProviderError, match="TimeoutError"):
            list(chain.stream("alpha"))
        assert call_threads() <= 8


class TestRagChainProviderFailures:
    @pytest.fixture
    def index(self) -> FusionIndex:
        return FusionIndex.from_texts(["alpha beta", "gamma delta"], HashingEmbeddings())

    def test_a_transient_failure_is_retried(self, index: FusionIndex) -> None:
        model = ScriptedModel(script=[RateLimitError("slow down"), "the answer [1]"])
        chain = build_rag_chain(index.as_retriever(k=1), model, retry=quick_retry(3))
        assert chain.invoke("alpha")["answer"] == "the answer [1]"
        assert model.calls == 2

    def test_a_stream_is_retried_before_its_first_chunk(self, index: FusionIndex) -> None:
        model = ScriptedModel(script=[RateLimitError("slow down"), "streamed answer"])
        chain = build_rag_chain(index.as_retriever(k=1), model, retry=quick_retry(3))
        words = [c["answer"] for c in chain.stream("alpha") if "answer" in c]
        assert "".join(words).split() == ["streamed", "answer"]

    def test_a_stream_failing_midway_is_not_retried(self, index: FusionIndex) -> None:
        model = ScriptedModel(script=[("half an", ConnectionError("reset")), "never asked"])
        chain = build_rag_chain(index.as_retriever(k=1), model, retry=quick_retry(3))
        with pytest.raises(ProviderError, match=r"^the chat model failed: ConnectionError: reset$"):
            list(chain.stream("alpha"))
        assert model.calls == 1  # the words already shown cannot be taken back

    async def test_async_stream_midway_failure(self, index: FusionIndex) -> None:
        model = ScriptedModel(script=[("half an", ConnectionError("reset"))])
        chain = build_rag_chain(index.as_retriever(k=1), model, retry=quick_retry(3))
        with pytest.raises(ProviderError, match="ConnectionError: reset"):
            async for _ in chain.astream("alpha"):
                pass

    @pytest.mark.parametrize("call", ["invoke", "ainvoke"])
    async def test_a_permanent_failure_is_one_line_and_not_retried(self, index: FusionIndex, call: str) -> None:
        error = PermissionError("Incorrect API key provided: sk-...\nsee https://example.invalid")
        model = ScriptedModel(script=[error])
        chain = build_rag_chain(index.as_retriever(k=1), model, retry=quick_retry(3))
        with pytest.raises(ProviderError) as caught:
            if call == "invoke":
                chain.invoke("alpha")
            else:
                await chain.ainvoke("alpha")
        expected = (
            "the chat model failed: PermissionError: Incorrect API key provided: sk-... see https://example.invalid"
        )
        assert str(caught.value) == expected
        assert isinstance(caught.value, FusionError) and caught.value.__cause__ is error
        assert model.calls == 1

    def test_a_key_echoed_by_the_provider_is_redacted(
        self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        key = "sk-proj-0123456789abcdefSECRET"
        monkeypatch.setenv("OPENAI_API_KEY", key)
        monkeypatch.setenv("MILVUS_TOKEN", "root:Milvus-secret-token")
        monkeypatch.setenv("LANGCHAIN_FUSION_RETRIES", "12345678")  # not a secret's name: left alone
        echoed = PermissionError(f"Incorrect API key provided: {key} (token root:Milvus-secret-token) 12345678")
        chain = build_rag_chain(index.as_retriever(k=1), ScriptedModel(script=[echoed]), retry=quick_retry(1))
        with pytest.raises(ProviderError) as caught:
            chain.invoke("alpha")
        assert str(caught.value) == (
            "the chat model failed: PermissionError: Incorrect API key provided: *** (token ***) 12345678"
        )
        docs = [Document(page_content=f"passage {i}", metadata={keys.FUSION_SCORE: 1 / (i + 1)}) for i in range(3)]
        reranker = LLMReranker(llm=ScriptedModel(script=[ValueError(f"bad request for key {key}")] * 3), top_n=None)
        with caplog.at_level(logging.WARNING):
            reranker.rerank(docs, "alpha")
        assert "bad request for key ***" in caplog.text and key not in caplog.text

    async def test_async_timeout_cancels(self, index: FusionIndex) -> None:
        held = Gate()  # opened only once the chain has given up

        class HeldAsync(ScriptedModel):
            async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
                await held.await_open()
                raise AssertionError("not cancelled")

        chain = build_rag_chain(index.as_retriever(k=1), HeldAsync(script=["x"]), timeout=0.05, retry=quick_retry(2))
        try:
            with pytest.raises(ProviderError, match="after 2 tries: TimeoutError"):
                await chain.ainvoke("alpha")
            arrived, passed, cancelled = held.arrived, held.passed, held.cancelled
        finally:
            held.open()
        assert arrived >= 1 and passed == 0  # the chain gave up while the model had not answered
        assert cancelled == arrived  # and cancelled each try (the model saw asyncio.CancelledError)

    @pytest.mark.parametrize(
        "options", [{"timeout": 0}, {"timeout": -1.0}, {"timeout": True}, {"timeout": "5"}, {"max_concurrency": 0}]
    )
    def test_bad_options_are_refused(self, options: dict[str, Any]) -> None:
        with pytest.raises(InvalidParameterError, match=next(iter(options))):
            GuardedModel(ScriptedModel(script=["x"]), **options)


class TestConstructorsAreStrict:
    """One validation path: constructor options are as strict as per-call ones, and FusionErrors."""

    @pytest.mark.parametrize(
        ("make", "field"),
        [
            (lambda: LLMReranker(llm=ScriptedModel(script=["5"]), max_concurrency=True), "max_concurrency"),
            (lambda: LLMReranker(llm=ScriptedModel(script=["5"]), timeout="1"), "timeout"),
            (lambda: LLMReranker(llm=ScriptedModel(script=["5"]), rating_weight=True), "rating_weight"),
            (lambda: RetryPolicy(max_attempts="3"), "max_attempts"),
            (lambda: RetryPolicy(max_attempts=2.0), "max_attempts"),
            (lambda: ContextualEnricher(llm=ScriptedModel(script=["x"]), max_concurrency=False), "max_concurrency"),
            (lambda: ContextualEnricher(llm=ScriptedModel(script=["x"]), max_answer_chars="10"), "max_answer_chars"),
        ],
    )
    def test_wrong_types_are_one_line_fusion_errors(self, make: Any, field: str) -> None:
        with pytest.raises(InvalidParameterError, match=field) as caught:
            make()
        assert "\n" not in str(caught.value)

    def test_an_int_is_still_a_float(self) -> None:
        assert LLMReranker(llm=ScriptedModel(script=["5"]), timeout=2).timeout == 2.0
