"""Many chat model calls at indexing time: :class:`LLMBatchSettings` and the :class:`CallRunner` it makes.

Contextual enrichment (one call per chunk) and page summaries (one or more calls per page) use
the same machinery, each part in its own module:

- **Bounded concurrency**: calls run through ``Runnable.batch`` / ``abatch`` with
  ``max_concurrency``, never more at once; each call is bounded in time
  (:mod:`~langchain_fusion.models.bounded_calls`).
- **Retries**: a call that fails with a rate-limit or transient error is retried as a fresh call
  after an exponential backoff with full jitter, honouring a ``Retry-After`` the provider sent
  (:mod:`~langchain_fusion.models.retries`). Other errors are not retried.
- **Cache**: each answer is stored under a key that hashes the task, the model id, the prompt
  version and every prompt input (:mod:`~langchain_fusion.models.answer_cache`: one JSON file per
  key, written atomically; no pickle), so a rerun pays only for prompts it has never sent.
- **Never fatal**: a call that finally fails is returned as a failure, to be reported
  (:mod:`~langchain_fusion.models.call_reports`) and handled by the caller; nothing is raised.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from langchain_core.callbacks import Callbacks
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr

from langchain_fusion._checks import CheckedModel
from langchain_fusion.models.answer_cache import ResultCache, cache_key, chat_model_id
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY, CallBounds, ainvoke_bounded, invoke_bounded
from langchain_fusion.models.call_reports import CallOutcome
from langchain_fusion.models.prompts import Prompt, answer_text
from langchain_fusion.models.retries import RetryPolicy

logger = logging.getLogger(__name__)

DEFAULT_MAX_ANSWER_CHARS = 8000
"""Longest context or summary answer kept (a context is 1-3 sentences, a summary a paragraph or two)."""


class AnswerTooLongError(ValueError):
    """A model's answer is longer than ``max_answer_chars`` (not retried: the model misbehaves)."""


def _as_path(value: Any) -> Any:
    """A folder given as a string (or any path-like) as a Path; anything else as it is, for the field's check."""
    return Path(value) if isinstance(value, (str, os.PathLike)) else value


class LLMBatchSettings(CheckedModel):
    """The chat model and call settings shared by the indexing-time LLM steps.

    See :mod:`langchain_fusion.models.llm_calls` for how calls are bounded, retried and cached.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: Runnable[Any, Any]
    """A chat model, or any Runnable from a prompt to a message or text."""
    max_concurrency: int = Field(default=DEFAULT_LLM_CONCURRENCY, ge=1)
    """Most model calls in flight at once."""
    cache_dir: Annotated[Path | None, BeforeValidator(_as_path)] = None
    """Folder of the on-disk answer cache (a path or a string) (shared safely by both steps and by reruns); None keeps
    answers in memory, for this object's lifetime only."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """When and how failed calls are retried."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds to wait for one call before it counts as a (retried) timeout; None: no limit of ours."""
    model_id: str | None = None
    """The model's name in cache keys; default :func:`~langchain_fusion.models.answer_cache.chat_model_id` of
    ``llm``. Set it when two different models would get the same default name."""
    max_answer_chars: int = Field(default=DEFAULT_MAX_ANSWER_CHARS, ge=1, strict=True)
    """Longest answer kept, in characters; a longer one (a misbehaving model) fails that item (it is
    reported, not stored, cached or indexed)."""

    _memory: dict[str, str] = PrivateAttr(default_factory=dict)  # the cache when there is no cache_dir

    def resolved_model_id(self) -> str:
        """``model_id``, or the id derived from ``llm``."""
        return self.model_id or chat_model_id(self.llm)

    def runner(self, prompt: Prompt, task: str, prompt_version: str) -> CallRunner:
        """A runner of ``prompt`` for ``task`` with these settings (bound, retries, cache)."""
        cache = ResultCache(self.cache_dir) if self.cache_dir is not None else None
        return CallRunner(self, prompt, task, prompt_version, cache, self._memory)


@dataclass
class _Batch:
    """One run of :class:`CallRunner`: the requests' cache keys, what is known without a call, what to send."""

    keys: list[str]
    """The cache key of each request, in order."""
    outcomes: list[CallOutcome | None]
    """Each request's cached outcome, or None when it needs a call (its own, or an identical prompt's)."""
    on_done: Callable[[int], None] | None
    """Called with each request's position once its outcome is known."""
    inputs: dict[str, dict[str, str]] = field(default_factory=dict)
    """The inputs of the prompts to send, by key, in first-seen order: one call per distinct uncached key."""
    positions: dict[str, list[int]] = field(default_factory=dict)
    """The positions of the requests with each key."""


class CallRunner:
    """Runs one list of prompts through ``prompt | llm`` with the settings' bound, retries and cache."""

    def __init__(
        self,
        settings: LLMBatchSettings,
        prompt: Prompt,
        task: str,
        prompt_version: str,
        cache: ResultCache | None,
        memory: dict[str, str],
    ) -> None:
        self.settings = settings
        self.chain: Runnable[dict[str, Any], Any] = prompt | settings.llm
        self.task, self.prompt_version = task, prompt_version
        self.model_id = settings.resolved_model_id()
        self.cache, self.memory = cache, memory
        self.bounds = CallBounds(
            retry=settings.retry,
            task=task,
            slots=threading.Semaphore(settings.max_concurrency),
            timeout=settings.timeout,
            rng=random.Random(settings.retry.seed),
        )
        self.lock = threading.Lock()

    def key(self, inputs: dict[str, str]) -> str:
        """The cache key of one request."""
        return cache_key(self.task, self.model_id, self.prompt_version, inputs)

    def _lookup(self, key: str) -> str | None:
        if self.cache is not None:
            return self.cache.get(key)
        return self.memory.get(key)

    def _store(self, key: str, text: str) -> None:
        if self.cache is not None:
            about = {"task": self.task, "model": self.model_id, "prompt_version": self.prompt_version}
            try:
                self.cache.put(key, text, about)
            except OSError as exc:  # a full or read-only disk costs a rerun, not this run
                logger.warning("could not write the LLM cache entry in %s: %s", self.cache.folder, exc)
        else:
            self.memory[key] = text

    def _prepare(self, requests: Sequence[dict[str, str]], on_done: Callable[[int], None] | None) -> _Batch:
        """Look every request up in the cache (reporting the hits to ``on_done``) and list the prompts to send."""
        keys = [self.key(r) for r in requests]
        batch = _Batch(keys, [None] * len(requests), on_done)
        for position, key in enumerate(keys):
            cached = self._lookup(key)
            if cached is not None and len(cached) <= self.settings.max_answer_chars:
                batch.outcomes[position] = CallOutcome(text=cached, cached=True)
            elif key not in batch.inputs:
                batch.inputs[key] = requests[position]
            batch.positions.setdefault(key, []).append(position)
        if on_done is not None:
            for position, outcome in enumerate(batch.outcomes):
                if outcome is not None:
                    on_done(position)
        return batch

    def _config(self, callbacks: Callbacks) -> RunnableConfig:
        return {"callbacks": callbacks, "max_concurrency": self.settings.max_concurrency, "run_name": self.task}

    @staticmethod
    def _finish(batch: _Batch, answers: list[CallOutcome]) -> list[CallOutcome]:
        results = dict(zip(batch.inputs, answers, strict=True))
        final: list[CallOutcome] = []
        counted: set[str] = set()
        for key, outcome in zip(batch.keys, batch.outcomes, strict=True):
            if outcome is not None:
                final.append(outcome)
            elif key in counted:  # a repeated prompt: answered by the first one's call
                first = results[key]
                final.append(CallOutcome(text=first.text, error=first.error, cached=first.ok))
            else:
                counted.add(key)
                final.append(results[key])
        return final

    def run(
        self,
        requests: Sequence[dict[str, str]],
        *,
        on_done: Callable[[int], None] | None = None,
        callbacks: Callbacks = None,
    ) -> list[CallOutcome]:
        """One outcome per request, in order; ``on_done(position)`` fires as each is known."""
        batch = self._prepare(requests, on_done)

        def work(key: str, config: RunnableConfig) -> CallOutcome:
            return self._done(batch, key, self._attempts(batch.inputs[key], config))

        answers = RunnableLambda(work, name=self.task).batch(list(batch.inputs), self._config(callbacks))
        return self._finish(batch, answers)

    async def arun(
        self,
        requests: Sequence[dict[str, str]],
        *,
        on_done: Callable[[int], None] | None = None,
        callbacks: Callbacks = None,
    ) -> list[CallOutcome]:
        """Async twin of :meth:`run` (awaits the model's async API)."""
        batch = self._prepare(requests, on_done)

        async def work(key: str, config: RunnableConfig) -> CallOutcome:
            return self._done(batch, key, await self._aattempts(batch.inputs[key], config))

        answers = await RunnableLambda(work, name=self.task).abatch(list(batch.inputs), self._config(callbacks))
        return self._finish(batch, answers)

    def _done(self, batch: _Batch, key: str, outcome: CallOutcome) -> CallOutcome:
        """Store a call's answer and report its requests to ``on_done``; returns ``outcome``."""
        if outcome.text is not None:
            self._store(key, outcome.text)
        if batch.on_done is not None:
            with self.lock:  # progress bars are not thread-safe
                for position in batch.positions[key]:
                    batch.on_done(position)
        return outcome

    def _attempts(self, inputs: dict[str, str], config: RunnableConfig) -> CallOutcome:
        answer, error, attempts = invoke_bounded(self.chain, inputs, config, self.bounds)
        return self._outcome(answer, error, attempts)

    def _outcome(self, answer: Any, error: Exception | None, attempts: int) -> CallOutcome:
        if error is not None:
            return CallOutcome(error=error, attempts=attempts)
        try:
            text = answer_text(answer)
        except Exception as exc:
            return CallOutcome(error=exc, attempts=attempts)
        limit = self.settings.max_answer_chars
        if len(text) > limit:
            too_long = AnswerTooLongError(
                f"the answer has {len(text):,} characters, more than max_answer_chars={limit:,}"
            )
            return CallOutcome(error=too_long, attempts=attempts)
        return CallOutcome(text=text, attempts=attempts)

    async def _aattempts(self, inputs: dict[str, str], config: RunnableConfig) -> CallOutcome:
        answer, error, attempts = await ainvoke_bounded(self.chain, inputs, config, self.bounds)
        return self._outcome(answer, error, attempts)
