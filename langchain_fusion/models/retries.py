"""The one retry decision of every model call: which errors are transient, how long to wait, when to give up.

A call that fails with a rate-limit or transient error (:func:`is_transient`) is retried as a fresh
call after an exponential backoff with full jitter (:class:`RetryPolicy`), honouring a
``Retry-After`` the provider sent. Other errors are not retried. :func:`call_model` and its async
twin :func:`acall_model` apply that decision; every model call of the library goes through them
(see :mod:`langchain_fusion.models.bounded_calls`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import ConfigDict, Field

from langchain_fusion._checks import CheckedModel
from langchain_fusion.errors import describe_error

logger = logging.getLogger(__name__)

T = TypeVar("T")

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
