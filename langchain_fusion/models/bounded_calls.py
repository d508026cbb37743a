"""One model call as every model call here is made: bounded in time and in threads, retried per one policy.

:func:`invoke_bounded` and its async twin :func:`ainvoke_bounded` take the same :class:`CallBounds`
(per-try timeout, retries, the step's name, the call slots) and share the retry decision of
:func:`~langchain_fusion.models.retries.call_model`. A sync call cannot be cancelled, so a timed
one runs in a daemon thread that holds one of a bounded set of slots (:func:`call_with_timeout`);
an async one is cancelled (:func:`await_with_timeout`).

Import-light (no LangChain at import time): the command line reads :data:`DEFAULT_LLM_CONCURRENCY`
from here before anything heavy loads.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_fusion.models.retries import RetryPolicy, acall_model, call_model

if TYPE_CHECKING:
    from langchain_core.runnables import Runnable, RunnableConfig

T = TypeVar("T")

DEFAULT_LLM_CONCURRENCY = 8
"""Chat model calls in flight at once by default: contextual enrichment, page summaries, rerank and
the guarded answer model (with a timeout, also the most threads a hung provider can hold)."""


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


@dataclass(frozen=True)
class CallBounds:
    """How each model call of one step is bounded: the same for :func:`invoke_bounded` and its async twin."""

    retry: RetryPolicy
    """When and how transient errors are retried (each retry a fresh call)."""
    task: str
    """What the calls are for, in logs (``rerank``, ``contextual enrichment``...)."""
    slots: threading.Semaphore
    """The call slots of timed sync calls, shared by the step's calls (abandoned ones hold theirs until they return)."""
    timeout: float | None = None
    """Seconds to wait for one try before it counts as a (transient) timeout; None: no limit of ours."""
    rng: random.Random | None = None
    """The jitter's random numbers, shared by the step's calls; None: one seeded with ``retry.seed`` per call."""

    def jitter(self) -> random.Random:
        """The random numbers of one call's backoff: :attr:`rng`, or a fresh one seeded with ``retry.seed``."""
        return random.Random(self.retry.seed) if self.rng is None else self.rng


def invoke_bounded(
    runnable: Runnable[Any, T],
    input: Any,
    config: RunnableConfig | None,
    bounds: CallBounds,
    *,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[T | None, Exception | None, int]:
    """``runnable.invoke(input, config, **kwargs)`` as every model call here is made: bounded and retried.

    Each try is given up on after ``bounds.timeout`` seconds (:func:`call_with_timeout`, holding one
    of ``bounds.slots``; None: no limit of ours), and transient errors are retried per
    ``bounds.retry``. The result is that of :func:`~langchain_fusion.models.retries.call_model`:
    ``(answer, None, attempts)`` or ``(None, error, attempts)``.
    """
    extra = dict(kwargs or {})
    timeout = bounds.timeout

    def attempt() -> T:
        if timeout is None:
            return runnable.invoke(input, config, **extra)
        return call_with_timeout(lambda: runnable.invoke(input, config, **extra), timeout, bounds.slots)

    return call_model(attempt, bounds.retry, bounds.jitter(), bounds.task)


async def ainvoke_bounded(
    runnable: Runnable[Any, T],
    input: Any,
    config: RunnableConfig | None,
    bounds: CallBounds,
    *,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[T | None, Exception | None, int]:
    """Async twin of :func:`invoke_bounded`: a try still running after ``bounds.timeout`` is cancelled (no slot)."""
    extra = dict(kwargs or {})
    return await acall_model(
        lambda: await_with_timeout(runnable.ainvoke(input, config, **extra), bounds.timeout),
        bounds.retry,
        bounds.jitter(),
        bounds.task,
    )
