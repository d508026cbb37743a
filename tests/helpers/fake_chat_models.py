"""Offline chat models for the rerank, chain, enrichment, summary and CLI tests.

``RatingModel`` answers the rerank prompt by a rule applied to the document being rated (an int,
text, an exception, or anything else), optionally through ``with_structured_output``, with an
optional delay or a :class:`Gate` holding it, and records every call and the most calls ever in
flight at once. ``flaky`` wraps a
rule so that each prompt first fails with a (transient) error a given number of times.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, Field, PrivateAttr

HANG_GUARD = 60.0
"""Seconds a call held by a :class:`Gate` waits at most, so that a broken timeout or bound fails its test
instead of hanging it. Never reached when the behaviour under test works."""


class Gate:
    """Holds the model calls that reach it until the test opens it: a deterministic "slow" or "hung" model.

    A test proves a timeout by asserting, once the call under test has returned, that a held call
    had arrived and had not been let through (``passed == 0``), and opens the gate only then (in a
    ``finally``). With ``crowd=n`` the gate opens by itself once ``n`` calls have reached it: as
    none passes before, the first ``n`` calls are then all in flight together, which proves real
    concurrency without timing. A held call waits at most ``guard`` seconds (after which the gate stays open), so a
    broken timeout or bound fails the test instead of hanging it.

    ``arrived`` counts the calls that reached the gate, ``passed`` those let through (they go on to
    answer), ``cancelled`` the async calls cancelled while held (``asyncio.CancelledError``).
    """

    def __init__(self, crowd: int | None = None, guard: float = HANG_GUARD) -> None:
        self._crowd, self._guard = crowd, guard
        self._condition = threading.Condition()
        self._open = False
        self.arrived = self.passed = self.cancelled = 0

    def open(self) -> None:
        """Let every held call, and every later one, through."""
        with self._condition:
            self._open = True
            self._condition.notify_all()

    def wait_for_arrivals(self, count: int) -> bool:
        """Wait (at most the guard) until ``count`` calls have reached the gate; False if they never did.

        For a call given up on in its own thread, which may reach the model only after the caller returned.
        """
        with self._condition:
            return self._condition.wait_for(lambda: self.arrived >= count, self._guard)

    def _arrive(self) -> None:
        with self._condition:
            self.arrived += 1
            if self._crowd is not None and self.arrived >= self._crowd:
                self._open = True
            self._condition.notify_all()

    def _pass(self) -> None:
        with self._condition:
            self._open = True  # let through, if only by the guard: hold no one any more
            self._condition.notify_all()
            self.passed += 1

    def wait(self) -> None:
        """Hold a sync call (its thread) until the gate opens."""
        self._arrive()
        with self._condition:
            self._condition.wait_for(lambda: self._open, self._guard)
        self._pass()

    async def await_open(self) -> None:
        """Hold an async call until the gate opens; a cancellation while held is counted, then re-raised."""
        self._arrive()
        deadline = time.monotonic() + self._guard  # the guard only; the gate itself is polled
        try:
            while not self._open and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            with self._condition:
                self.cancelled += 1
            raise
        self._pass()


def document_of(prompt: str) -> str:
    """The document part of the default rating prompt (the whole prompt for other prompts)."""
    if "Document:\n" not in prompt:
        return prompt
    return prompt.split("Document:\n", 1)[1].rsplit("\n\nRelevance rating", 1)[0]


class RatingModel(BaseChatModel):
    """Rates by ``rule(document_text)``; structured output unless ``structured`` is False.

    The rule returns what the model "says": an int (a rating), a str (text), an Exception (raised),
    or anything else (returned as the structured output as is). ``delay`` sleeps per call, so
    concurrent calls overlap; ``slow`` maps a document keyword to a longer sleep; ``gates`` maps a
    document keyword to a :class:`Gate` that holds the call (after any sleep) until it opens.
    """

    rule: Callable[[str], Any]
    structured: bool = True
    delay: float = 0.0
    slow: dict[str, float] = Field(default_factory=dict)
    gates: dict[str, Gate] = Field(default_factory=dict)

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _active: int = PrivateAttr(default=0)
    _max_active: int = PrivateAttr(default=0)
    _calls: list[str] = PrivateAttr(default_factory=list)
    _sync_calls: int = PrivateAttr(default=0)
    _async_calls: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "rating-fake"

    @property
    def max_active(self) -> int:
        return self._max_active

    @property
    def calls(self) -> list[str]:
        return list(self._calls)

    @property
    def sync_calls(self) -> int:
        return self._sync_calls

    @property
    def async_calls(self) -> int:
        return self._async_calls

    def _enter(self, text: str, is_async: bool) -> float:
        with self._lock:
            self._active += 1
            self._max_active = max(self._max_active, self._active)
            self._calls.append(document_of(text))
            if is_async:
                self._async_calls += 1
            else:
                self._sync_calls += 1
        document = document_of(text)
        return max([self.delay] + [t for word, t in self.slow.items() if word in document])

    def _gates(self, text: str) -> list[Gate]:
        document = document_of(text)
        return [gate for word, gate in self.gates.items() if word in document]

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1

    def _answer(self, text: str) -> Any:
        answer = self.rule(document_of(text))
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _rate(self, text: str) -> Any:
        pause = self._enter(text, is_async=False)
        try:
            time.sleep(pause)
            for gate in self._gates(text):
                gate.wait()
            return self._answer(text)
        finally:
            self._leave()

    async def _arate(self, text: str) -> Any:
        pause = self._enter(text, is_async=True)
        try:
            await asyncio.sleep(pause)
            for gate in self._gates(text):
                await gate.await_open()
            return self._answer(text)
        finally:
            self._leave()

    @staticmethod
    def _text(messages: Sequence[BaseMessage]) -> str:
        return "\n".join(str(m.content) for m in messages)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = self._rate(self._text(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=str(answer)))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = await self._arate(self._text(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=str(answer)))])

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Runnable[Any, Any]:  # type: ignore[override]
        if not self.structured:
            raise NotImplementedError("this fake model has no structured output")

        def build(answer: Any) -> Any:
            if isinstance(answer, int) and isinstance(schema, type) and issubclass(schema, BaseModel):
                return schema(rating=answer)
            if isinstance(answer, list) and isinstance(schema, type) and issubclass(schema, BaseModel):
                return schema(ids=answer)
            return answer

        def call(prompt: PromptValue) -> Any:
            return build(self._rate(prompt.to_string()))

        async def acall(prompt: PromptValue) -> Any:
            return build(await self._arate(prompt.to_string()))

        return RunnableLambda(call, afunc=acall, name="structured_fake")


def keyword_rule(ratings: dict[str, Any], default: Any = 5) -> Callable[[str], Any]:
    """A rule giving ``ratings[word]`` for the first word found in the document, else ``default``."""

    def rule(document: str) -> Any:
        for word, answer in ratings.items():
            if word in document:
                return answer
        return default

    return rule


# --- transient failures, for the retry tests of enrichment and summaries --------------------


class RateLimitError(Exception):
    """Named like the providers' rate-limit errors (OpenAI's, Anthropic's ``RateLimitError``)."""


class HTTPStatusError(Exception):
    """An error carrying an HTTP status, like an SDK's ``APIStatusError``."""

    def __init__(self, status_code: int, message: str = "") -> None:
        super().__init__(message or f"HTTP {status_code}")
        self.status_code = status_code


def flaky(
    rule: Callable[[str], Any], failures: int, error: Callable[[], BaseException] = lambda: RateLimitError("429")
) -> Callable[[str], Any]:
    """A rule that raises ``error()`` the first ``failures`` times it sees each prompt, then follows ``rule``."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def flaky_rule(prompt: str) -> Any:
        with lock:
            count = seen[prompt] = seen.get(prompt, 0) + 1
        if count <= failures:
            return error()
        return rule(prompt)

    return flaky_rule


class RunRecorder(BaseCallbackHandler):
    """Records the kind and parent of every retriever, chat model and chain run, to check the run tree."""

    def __init__(self) -> None:
        self.parents: dict[UUID, UUID | None] = {}
        self.kinds: dict[UUID, str] = {}

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: Any = None, **_: Any
    ) -> None:
        self.parents[run_id], self.kinds[run_id] = parent_run_id, "retriever"

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: Any = None, **_: Any
    ) -> None:
        self.parents[run_id], self.kinds[run_id] = parent_run_id, "chat_model"

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: Any = None, **_: Any
    ) -> None:
        self.parents[run_id], self.kinds[run_id] = parent_run_id, "chain"

    def root_of(self, run_id: UUID) -> UUID:
        """The outermost run above ``run_id``."""
        while (parent := self.parents.get(run_id)) is not None:
            run_id = parent
        return run_id  # fmt: skip
