"""A chat model step that cannot hang or fail obscurely: per-try timeout, retries, one error type.

:class:`GuardedModel` wraps any Runnable (usually a chat model) for a step whose caller waits for
the answer, as the RAG chain's does. Calls go through the library's one retry loop
(:func:`~langchain_fusion.models.bounded_calls.invoke_bounded`); sync timeouts hold a bounded set of
threads (:func:`~langchain_fusion.models.bounded_calls.call_with_timeout`), so a hung provider never
makes threads pile up.
"""

from __future__ import annotations

import contextvars
import queue
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from langchain_fusion.errors import FusionError, InvalidParameterError, ProviderError, describe_error
from langchain_fusion.models.bounded_calls import (
    DEFAULT_LLM_CONCURRENCY,
    CallBounds,
    ainvoke_bounded,
    await_with_timeout,
    invoke_bounded,
    take_call_slot,
)
from langchain_fusion.models.retries import RetryPolicy, is_transient

ANSWER_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.5, max_delay=8.0)
"""The default retries of an answer: two more tries within a few seconds (someone is waiting)."""

_END = object()


class GuardedModel(Runnable[Any, Any]):
    """A model step with a per-try ``timeout``, retries of transient errors and :class:`ProviderError` failures.

    ``invoke``/``ainvoke`` retry per ``retry``. ``stream``/``astream`` retry only until the
    first chunk arrives (what was already shown cannot be taken back), and ``timeout`` bounds
    the wait for each chunk. A call that fails for good raises
    :class:`~langchain_fusion.errors.ProviderError` with the provider's error on one line (the
    original is its ``__cause__``). Callbacks and tracing see the wrapped model's own runs.
    """

    def __init__(
        self,
        model: Runnable[Any, Any],
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int = DEFAULT_LLM_CONCURRENCY,
        step: str = "the chat model",
    ) -> None:
        """Wrap ``model``; ``max_concurrency`` bounds the threads of timed sync calls, abandoned ones included."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise InvalidParameterError(f"timeout must be a positive number of seconds, or None; got {timeout!r}")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise InvalidParameterError(f"max_concurrency must be a positive whole number; got {max_concurrency!r}")
        self.model = model
        """The wrapped model (or any Runnable)."""
        self.timeout = None if timeout is None else float(timeout)
        """Seconds to wait for an answer (for streams: for each chunk) per try; None: no limit of ours."""
        self.retry = ANSWER_RETRY if retry is None else retry
        """Retries of rate limits, timeouts and other transient errors."""
        self.step = step
        """What the error messages call this step."""
        self.name = f"guarded_{model.get_name()}"
        self._slots = threading.Semaphore(max_concurrency)
        self._rng = random.Random(self.retry.seed)

    @property
    def InputType(self) -> Any:
        """The wrapped model's input type."""
        return self.model.InputType

    @property
    def OutputType(self) -> Any:
        """The wrapped model's output type."""
        return self.model.OutputType

    def _failure(self, error: Exception, attempts: int) -> Exception:
        if isinstance(error, FusionError):
            return error
        tries = f" after {attempts} tries" if attempts > 1 else ""
        return ProviderError(f"{self.step} failed{tries}: {describe_error(error)}")

    # --- one answer -----------------------------------------------------------------------------

    def _bounds(self) -> CallBounds:
        """How each call is bounded: per-try timeout, retries, the step named in logs, the call slots."""
        return CallBounds(retry=self.retry, task=self.step, slots=self._slots, timeout=self.timeout, rng=self._rng)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """The model's answer, retried per ``retry``; each try given up on after ``timeout``."""
        answer, error, attempts = invoke_bounded(self.model, input, config, self._bounds(), kwargs=kwargs)
        if error is not None:
            raise self._failure(error, attempts) from error
        return answer

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async twin of :meth:`invoke` (a timed-out call is cancelled)."""
        answer, error, attempts = await ainvoke_bounded(self.model, input, config, self._bounds(), kwargs=kwargs)
        if error is not None:
            raise self._failure(error, attempts) from error
        return answer

    # --- streams --------------------------------------------------------------------------------

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        """The model's chunks; retried until the first one arrives, each chunk awaited at most ``timeout``."""
        attempt = 0
        while True:
            attempt += 1
            chunks = self._chunks(input, config, kwargs)
            try:
                first = next(chunks)
            except StopIteration:
                return
            except Exception as exc:
                if attempt >= self.retry.max_attempts or not is_transient(exc):
                    raise self._failure(exc, attempt) from exc
                self.retry.sleep(self.retry.delay(attempt, self._rng, exc))
                continue
            break
        yield first
        try:
            yield from chunks
        except Exception as exc:
            raise self._failure(exc, attempt) from exc

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        """Async twin of :meth:`stream`."""
        attempt = 0
        while True:
            attempt += 1
            chunks = self.model.astream(input, config, **kwargs).__aiter__()
            try:
                first = await await_with_timeout(chunks.__anext__(), self.timeout)
            except StopAsyncIteration:
                return
            except Exception as exc:
                if attempt >= self.retry.max_attempts or not is_transient(exc):
                    raise self._failure(exc, attempt) from exc
                await self.retry.asleep(self.retry.delay(attempt, self._rng, exc))
                continue
            break
        yield first
        while True:
            try:
                chunk = await await_with_timeout(chunks.__anext__(), self.timeout)
            except StopAsyncIteration:
                return
            except Exception as exc:
                raise self._failure(exc, attempt) from exc
            yield chunk

    def _chunks(self, input: Any, config: RunnableConfig | None, kwargs: dict[str, Any]) -> Iterator[Any]:
        """The model's stream; with a ``timeout``, read in a slot-bound thread and awaited chunk by chunk."""
        timeout = self.timeout
        if timeout is None:
            yield from self.model.stream(input, config, **kwargs)
            return
        started = time.monotonic()
        take_call_slot(self._slots, timeout)
        box: queue.Queue[Any] = queue.Queue()
        stop = threading.Event()
        context = contextvars.copy_context()

        def produce() -> None:
            try:
                for chunk in context.run(self.model.stream, input, config, **kwargs):
                    if stop.is_set():
                        break
                    box.put(chunk)
                box.put(_END)
            except BaseException as exc:  # handed to the reader
                box.put(exc)
            finally:
                self._slots.release()

        try:
            threading.Thread(target=produce, name="langchain-fusion-stream", daemon=True).start()
        except BaseException:
            self._slots.release()
            raise
        try:
            wait = max(0.0, timeout - (time.monotonic() - started))
            while True:
                try:
                    item = box.get(timeout=wait)
                except queue.Empty:
                    raise TimeoutError(f"no answer within {timeout:g} s") from None
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                wait = timeout
        finally:
            stop.set()  # the reader left (done, failed, timed out or closed): the producer stops at its next chunk
