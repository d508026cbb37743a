"""Many chat model calls at indexing time: bounded concurrency, retries, an on-disk cache, a report.

Contextual enrichment (one call per chunk) and page summaries (one or more calls per page) use
the same machinery:

- **Bounded concurrency**: calls run through ``Runnable.batch`` / ``abatch`` with
  ``max_concurrency``, never more at once.
- **Retries**: a call that fails with a rate-limit or transient error (:func:`is_transient`) is
  retried as a fresh call after an exponential backoff with full jitter (:class:`RetryPolicy`),
  honouring a ``Retry-After`` the provider sent. Other errors are not retried.
- **Cache**: each answer is stored under a key that hashes the task, the model id, the prompt
  version and every prompt input (:class:`ResultCache`: one JSON file per key, written
  atomically; no pickle), so a rerun pays only for prompts it has never sent.
- **Never fatal**: a call that finally fails is returned as a failure, to be reported
  (:class:`LLMReport`) and handled by the caller; nothing is raised.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from langchain_core.callbacks import Callbacks
from langchain_core.messages import BaseMessage
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr

from langchain_fusion._checks import CheckedModel
from langchain_fusion.errors import InvalidParameterError, describe_error

logger = logging.getLogger(__name__)

T = TypeVar("T")

if TYPE_CHECKING:
    Prompt = BasePromptTemplate[Any]
else:  # pydantic validates fields against the plain class (a parametrised one rejects subclasses)
    Prompt = BasePromptTemplate


CHARS_PER_TOKEN = 4
"""The token estimate of prompt budgets: about four characters per token for English text (no tokenizer,
so nothing to download)."""


def prompt_version_of(prompt: Prompt, default: Prompt, default_version: str) -> str:
    """The version of a prompt in cache keys: ``default_version`` for the default, else a hash of the prompt."""
    if prompt == default:
        return default_version
    return "custom-" + hashlib.sha256(repr(prompt).encode("utf-8")).hexdigest()[:16]


def check_prompt(prompt: Prompt, needed: set[str]) -> Prompt:
    """Return ``prompt`` if it takes exactly the variables ``needed``, else raise InvalidParameterError."""
    variables = set(prompt.input_variables)
    if variables != needed:
        raise InvalidParameterError(
            f"the prompt must take exactly the variables {sorted(needed)}; it takes {sorted(variables)}"
        )
    return prompt


def take_call_slot(slots: threading.Semaphore, timeout: float) -> None:
    """Take one of ``slots`` within ``timeout`` seconds, else raise ``TimeoutError`` (all held by unanswered calls)."""
    if not slots.acquire(timeout=timeout):
        raise TimeoutError(f"no answer within {timeout:g} s (every call slot is held by calls that have not answered)")


def call_with_timeout(fn: Callable[[], T], timeout: float, slots: threading.Semaphore) -> T:
    """Run ``fn`` in a daemon thread; give up waiting after ``timeout`` seconds (``TimeoutError``).

    A sync call cannot be cancelled, so a call given up on finishes in the background. Each call
    takes one of ``slots`` *before* its thread starts and gives it back when ``fn`` returns, so
    at most as many threads as there are slots are ever alive, abandoned calls included; a
    call that finds no free slot within ``timeout`` fails the same way, without starting a
    thread. ``fn`` runs in a copy of the caller's context (callbacks, tracing).
    """
    started = time.monotonic()
    take_call_slot(slots, timeout)
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            slots.release()
            done.set()

    try:
        threading.Thread(target=target, name="langchain-fusion-call", daemon=True).start()
    except BaseException:
        slots.release()
        raise
    if not done.wait(max(0.0, timeout - (time.monotonic() - started))):
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def await_with_timeout(call: Awaitable[T], timeout: float | None) -> T:
    """Await ``call``; after ``timeout`` seconds (None: no limit), cancel it and raise ``TimeoutError``.

    The async twin of :func:`call_with_timeout`, with the same error message.
    """
    if timeout is None:
        return await call
    try:
        return await asyncio.wait_for(call, timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None


TRANSIENT_ERROR_NAMES = (
    "RateLimit",
    "Timeout",
    "APIConnection",
    "ServiceUnavailable",
    "InternalServer",
    "Overloaded",
    "TooManyRequests",
    "ResourceExhausted",
)
"""An error whose class (or a base class) has one of these in its name is retried."""

TRANSIENT_STATUS_CODES = frozenset({408, 409, 429})
"""HTTP statuses retried besides every 5xx (timeout, conflict, too many requests)."""


def _status_of(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status", "http_status", "code"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return int(value)
    return None


def is_transient(exc: BaseException) -> bool:
    """True for rate-limit and transient errors, which are worth a retry.

    Detected generically, without importing any provider: a class name containing one of
    :data:`TRANSIENT_ERROR_NAMES` (OpenAI's ``RateLimitError``, ``APITimeoutError``,
    ``APIConnectionError``, ``InternalServerError``; Anthropic's ``OverloadedError``...), an HTTP
    status of 429, 408, 409 or 5xx on the error or its ``response``, or Python's own
    ``TimeoutError`` and ``ConnectionError``.
    """
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if any(part in cls.__name__ for cls in type(exc).__mro__ for part in TRANSIENT_ERROR_NAMES):
        return True
    status = _status_of(exc)
    return status is not None and (status in TRANSIENT_STATUS_CODES or 500 <= status <= 599)


CREDENTIAL_ERROR_NAMES = ("Authentication", "PermissionDenied", "Unauthorized", "Forbidden")
"""An error whose class (or a base class) has one of these in its name is a bad key or one without access."""


def is_credential_error(exc: BaseException) -> bool:
    """True when a provider refused the key itself (HTTP 401 or 403, OpenAI's ``AuthenticationError``...).

    Such an error is never transient and fails every other call alike, so a step that calls the
    model many times (a rerank rating each candidate) fails once instead of degrading call by call.
    Looks through the errors it was raised from (a :class:`~langchain_fusion.errors.ProviderError`
    wrapping the provider's).
    """
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain: ProviderError <- the provider's error <- its HTTP error
        if seen is None:
            return False
        if any(part in cls.__name__ for cls in type(seen).__mro__ for part in CREDENTIAL_ERROR_NAMES):
            return True
        if _status_of(seen) in (401, 403):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header on the error's response, if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
        seconds = float(value)
    except (AttributeError, TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


class RetryPolicy(CheckedModel):
    """Retries of rate-limited and transient calls: exponential backoff with full jitter.

    Before retry ``n`` (1 for the first retry), the wait is a uniform random number between 0
    and ``min(max_delay, initial_delay * multiplier ** (n - 1))`` ("full jitter", which spreads
    concurrent retries apart), or the provider's ``Retry-After`` if that is longer (still capped
    at ``max_delay``). Each retry is a fresh call. ``sleep`` and ``asleep`` are injectable so
    tests need not wait.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    max_attempts: int = Field(default=6, ge=1)
    """Calls made at most for one prompt, the first included (1: no retries)."""
    initial_delay: float = Field(default=1.0, ge=0)
    """Upper bound of the first wait, in seconds."""
    multiplier: float = Field(default=2.0, ge=1)
    """How much the upper bound grows per retry."""
    max_delay: float = Field(default=60.0, ge=0)
    """Upper bound of any wait, in seconds."""
    seed: int | None = None
    """Seed of the jitter's random numbers (None: unpredictable)."""
    sleep: Callable[[float], None] = time.sleep
    """How sync calls wait before a retry."""
    asleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """How async calls wait before a retry."""

    def bound(self, retry: int) -> float:
        """The largest wait before retry number ``retry`` (1-based)."""
        return float(min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1)))

    def delay(self, retry: int, rng: random.Random, error: BaseException | None = None) -> float:
        """The wait before retry number ``retry``: full jitter, or the error's Retry-After if longer."""
        wait = rng.uniform(0.0, self.bound(retry))
        after = None if error is None else _retry_after(error)
        if after is not None:
            wait = max(wait, min(after, self.max_delay))
        return wait


def call_model(
    call: Callable[[], T], policy: RetryPolicy, rng: random.Random, task: str
) -> tuple[T | None, Exception | None, int]:
    """The one way this library calls a model: ``call()`` with ``policy``'s retries of transient errors.

    Returns ``(answer, None, attempts)``, or ``(None, last error, attempts)`` once the error is
    not transient or the attempts are used up. Timeouts are applied inside ``call`` (see
    :func:`call_with_timeout`) and count as transient.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return call(), None, attempt
        except Exception as exc:
            if attempt >= policy.max_attempts or not is_transient(exc):
                return None, exc, attempt
            wait = policy.delay(attempt, rng, exc)
            logger.debug("%s: %s; retry %d in %.2f s", task, describe_error(exc), attempt, wait)
            policy.sleep(wait)


async def acall_model(
    call: Callable[[], Awaitable[T]], policy: RetryPolicy, rng: random.Random, task: str
) -> tuple[T | None, Exception | None, int]:
    """Async twin of :func:`call_model`: ``call`` makes a fresh awaitable for each attempt."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call(), None, attempt
        except Exception as exc:
            if attempt >= policy.max_attempts or not is_transient(exc):
                return None, exc, attempt
            wait = policy.delay(attempt, rng, exc)
            logger.debug("%s: %s; retry %d in %.2f s", task, describe_error(exc), attempt, wait)
            await policy.asleep(wait)


def invoke_bounded(
    runnable: Runnable[Any, T],
    input: Any,
    config: RunnableConfig | None,
    *,
    timeout: float | None,
    slots: threading.Semaphore,
    retry: RetryPolicy,
    task: str,
    rng: random.Random | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[T | None, Exception | None, int]:
    """``runnable.invoke(input, config, **kwargs)`` as every model call here is made: bounded and retried.

    Each try is given up on after ``timeout`` seconds (:func:`call_with_timeout`, holding one of
    ``slots``; None: no limit of ours), and transient errors are retried per ``retry`` with the
    jitter of ``rng`` (default: a fresh one seeded with ``retry.seed``). The result is that of
    :func:`call_model`: ``(answer, None, attempts)`` or ``(None, error, attempts)``.
    """
    extra = dict(kwargs or {})

    def attempt() -> T:
        if timeout is None:
            return runnable.invoke(input, config, **extra)
        return call_with_timeout(lambda: runnable.invoke(input, config, **extra), timeout, slots)

    return call_model(attempt, retry, random.Random(retry.seed) if rng is None else rng, task)


async def ainvoke_bounded(
    runnable: Runnable[Any, T],
    input: Any,
    config: RunnableConfig | None,
    *,
    timeout: float | None,
    retry: RetryPolicy,
    task: str,
    rng: random.Random | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[T | None, Exception | None, int]:
    """Async twin of :func:`invoke_bounded`: a try still running after ``timeout`` is cancelled (no slots needed)."""
    extra = dict(kwargs or {})
    return await acall_model(
        lambda: await_with_timeout(runnable.ainvoke(input, config, **extra), timeout),
        retry,
        random.Random(retry.seed) if rng is None else rng,
        task,
    )


# --- the on-disk cache ------------------------------------------------------------------------


class ResultCache:
    """Answers stored on disk, one small JSON file per key: ``folder/<key[:2]>/<key>.json``.

    Each file is written to a temporary name and renamed into place, so a crash or a
    concurrent run never leaves a half-written entry; an unreadable entry counts as a miss.
    Nothing is pickled. Safe to share between threads and between processes.
    """

    def __init__(self, folder: str | Path) -> None:
        """Use (and create on first write) the cache folder ``folder``."""
        self.folder = Path(folder).expanduser()

    def _path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise ValueError(f"cache keys are sha256 hex digests; got {key!r}")
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached answer for ``key``, or None."""
        path = self._path(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.debug("ignoring unreadable cache entry %s (%s)", path, exc)
            return None
        text = record.get("text") if isinstance(record, dict) and record.get("key") == key else None
        return text if isinstance(text, str) else None

    def put(self, key: str, text: str, about: dict[str, Any] | None = None) -> None:
        """Store ``text`` under ``key`` atomically; ``about`` is kept alongside for people reading the cache."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "text": text, "about": about or {}}
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle, ensure_ascii=False)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob("??/*.json")) if self.folder.is_dir() else 0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(task: str, model_id: str, prompt_version: str, inputs: dict[str, str]) -> str:
    """The cache key of one prompt: sha256 of the task, model, prompt version and each input's hash.

    For contextual enrichment the inputs are the document part and the chunk, so the key is
    (model, prompt version, document hash, chunk hash).
    """
    payload = [task, model_id, prompt_version, sorted((name, _digest(value)) for name, value in inputs.items())]
    return _digest(json.dumps(payload, ensure_ascii=False))


def chat_model_id(llm: Any) -> str:
    """A name for a chat model, used in cache keys: its type and model name (e.g. ``openai-chat:gpt-4o-mini``)."""
    name = None
    for attribute in ("model_name", "model", "model_id", "deployment_name"):
        try:
            value = getattr(llm, attribute, None)
        except Exception:  # a RunnableBinding can delegate attribute access and fail
            value = None
        if isinstance(value, str) and value:
            name = value
            break
    try:
        kind = getattr(llm, "_llm_type", None)
    except Exception:
        kind = None
    kind = kind if isinstance(kind, str) and kind else type(llm).__name__
    return f"{kind}:{name}" if name else kind


def answer_text(output: Any) -> str:
    """The text of a model's answer (a string, a message, or a message's content blocks), stripped.

    Raises ValueError for an empty answer or one with no text.
    """
    content = output.content if isinstance(output, BaseMessage) else output
    if isinstance(content, list):  # content blocks: keep the text ones (not reasoning, tool calls...)
        content = "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type", "text") == "text")
        )
    if not isinstance(content, str):
        raise ValueError(f"expected text from the model, got {type(output).__name__}")
    text = content.strip()
    if not text:
        raise ValueError("the model gave an empty answer")
    return text


# --- one batch of calls -------------------------------------------------------------------------


@dataclass
class CallOutcome:
    """What became of one prompt."""

    text: str | None = None
    """The answer, or None if the call finally failed."""
    error: BaseException | None = None
    """The last error, when the call failed."""
    cached: bool = False
    """True when no call was made: the answer came from the cache or from an identical prompt of the same run."""
    attempts: int = 0
    """Calls made for this prompt, retries included (0 when cached)."""

    @property
    def ok(self) -> bool:
        """True when there is an answer."""
        return self.text is not None


@dataclass
class LLMFailure:
    """An item whose chat model call finally failed."""

    item: str
    """The item's id (a chunk id, a summary id)."""
    label: str
    """Where the item is, for people: ``data/report.pdf p. 3, chunk 7``."""
    error: str
    """The last error, as ``Type: message``."""
    attempts: int
    """Calls made before giving up."""


@dataclass
class LLMReport:
    """What a batch of indexing-time chat model calls did: calls made, cached and failed."""

    task: str
    """What the calls were for (``contextual enrichment``, ``summaries``)."""
    model: str
    """The chat model's id (see :func:`chat_model_id`)."""
    unit: str = "items"
    """What ``items`` counts (``chunks``, ``pages and sections``)."""
    items: int = 0
    """Items processed."""
    requests: int = 0
    """Prompts needed (one per item, more for map-reduce summaries)."""
    cached: int = 0
    """Prompts answered without a call: from the cache, or by an identical prompt of the same run."""
    calls: int = 0
    """Model calls made, retries included."""
    retries: int = 0
    """Of those calls, how many were retries."""
    failed: list[LLMFailure] = field(default_factory=list)
    """Items whose calls finally failed (they were indexed without the model's text)."""

    def add(self, outcome: CallOutcome) -> None:
        """Count one prompt's outcome."""
        self.requests += 1
        self.cached += outcome.cached
        self.calls += outcome.attempts
        self.retries += max(0, outcome.attempts - 1)

    def merged(self, other: LLMReport) -> LLMReport:
        """The sum of this report and ``other`` (the same task, another batch of items)."""
        return LLMReport(
            task=self.task,
            model=self.model,
            unit=self.unit,
            items=self.items + other.items,
            requests=self.requests + other.requests,
            cached=self.cached + other.cached,
            calls=self.calls + other.calls,
            retries=self.retries + other.retries,
            failed=[*self.failed, *other.failed],
        )

    def summary(self) -> str:
        """One line: task (model): items, model calls (retries), cached, failed."""
        return (
            f"{self.task} ({self.model}): {self.items} {self.unit}, {self.calls} model calls "
            f"({self.retries} retries), {self.cached} cached, {len(self.failed)} failed"
        )

    def warn_failures(self, log: logging.Logger, consequence: str) -> None:
        """If any item failed, warn on ``log``: ``<task> failed for F of N <unit>; <consequence> (<first error>)``."""
        if self.failed:
            log.warning(
                "%s failed for %d of %d %s; %s (%s)",
                self.task,
                len(self.failed),
                self.items,
                self.unit,
                consequence,
                self.failed[0].error,
            )

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "task": self.task,
            "model": self.model,
            "items": self.items,
            "requests": self.requests,
            "cached": self.cached,
            "calls": self.calls,
            "retries": self.retries,
            "failed": [asdict(failure) for failure in self.failed],
        }


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
    max_concurrency: int = Field(default=8, ge=1)
    """Most model calls in flight at once."""
    cache_dir: Annotated[Path | None, BeforeValidator(_as_path)] = None
    """Folder of the on-disk answer cache (a path or a string) (shared safely by both steps and by reruns); None keeps
    answers in memory, for this object's lifetime only."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """When and how failed calls are retried."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds to wait for one call before it counts as a (retried) timeout; None: no limit of ours."""
    model_id: str | None = None
    """The model's name in cache keys; default :func:`chat_model_id` of ``llm``. Set it when two
    different models would get the same default name."""
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
        self.rng = random.Random(settings.retry.seed)
        self.slots = threading.Semaphore(settings.max_concurrency)
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
        timeout, retry = self.settings.timeout, self.settings.retry
        answer, error, attempts = invoke_bounded(
            self.chain, inputs, config, timeout=timeout, slots=self.slots, retry=retry, rng=self.rng, task=self.task
        )
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
        timeout, retry = self.settings.timeout, self.settings.retry
        answer, error, attempts = await ainvoke_bounded(
            self.chain, inputs, config, timeout=timeout, retry=retry, rng=self.rng, task=self.task
        )
        return self._outcome(answer, error, attempts)
