"""One connection to Milvus: connecting within a deadline, and every call's failure as one line.

A server that does not answer within ``connect_timeout`` seconds is a FusionError naming the URI;
a Milvus Lite file is retried while its server process starts. Each later call may take
``timeout`` seconds. :data:`CONSISTENCY_LEVELS` are the levels a query may ask for.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from langchain_fusion.errors import FusionError, InvalidParameterError, MissingDependencyError

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a server's connection (and a health check's answer) before failing in one line."""

_LITE_START_SECONDS = 20.0
"""How long a Milvus Lite file is retried while its server process starts."""
_CONNECT_FAILED = 2
"""pymilvus's status code for a connection that could not be made."""

CONSISTENCY_LEVELS = ("Strong", "Bounded", "Session", "Eventually")
"""Milvus's consistency levels for queries, strongest first.

``Strong`` (the default): a query sees every write acknowledged before it began, from any
client. ``Session``: this client's own writes, and others' as they arrive. ``Bounded``: the
collection as of a moment ago (Milvus's staleness bound, a few seconds by default), skipping the
wait for the newest writes. ``Eventually``: whatever the serving nodes hold now.
"""


def consistency_level(level: str) -> str:
    """``level`` as Milvus names it (any capitalisation); InvalidParameterError for another word."""
    for known in CONSISTENCY_LEVELS:
        if isinstance(level, str) and level.lower() == known.lower():
            return known
    raise InvalidParameterError(
        f"the Milvus consistency level must be one of {', '.join(CONSISTENCY_LEVELS)}; got {level!r}"
    )


def require_pymilvus() -> None:
    """A MissingDependencyError saying how to install pymilvus when it is missing."""
    try:
        import pymilvus  # noqa: F401
    except ImportError:
        raise MissingDependencyError('MilvusStore needs pymilvus: pip install "langchain-fusion[milvus]"') from None


def is_lite_uri(uri: str) -> bool:
    """Whether ``uri`` is a Milvus Lite file rather than a server address."""
    return not uri.startswith(("http://", "https://", "tcp://", "grpc://"))


def reason(exc: BaseException) -> str:
    """An exception as one short line: its type and message."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:300]


class MilvusConnection:
    """A pymilvus ``MilvusClient`` on ``uri``, whose calls fail as one-line FusionErrors."""

    def __init__(self, uri: str, *, timeout: float, connect_timeout: float, options: dict[str, Any]) -> None:
        """Remember where to connect (see :meth:`connect`)."""
        self.uri = uri
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.options = options
        self.is_lite = is_lite_uri(uri)
        self.closed = False
        self.client: Any = None

    def connect(self, collection_name: str) -> bool:
        """Connect (within :attr:`connect_timeout`); returns whether ``collection_name`` exists."""
        from pymilvus import MilvusClient

        deadline = time.monotonic() + (_LITE_START_SECONDS if self.is_lite else 0.0)
        while True:
            try:
                self.client = MilvusClient(uri=self.uri, timeout=self.connect_timeout, **self.options)
                return bool(self.client.has_collection(collection_name, timeout=self.connect_timeout))
            except Exception as exc:
                # Milvus Lite starts a server process and opens its socket a moment later; on a
                # busy machine the first connection can come too early, so a lite file is retried.
                if getattr(exc, "code", None) == _CONNECT_FAILED and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise FusionError(f"cannot reach Milvus at {self.uri!r}: {reason(exc)}") from None

    def call(self, method: str, subject: str, **kwargs: Any) -> Any:
        """``client.method(**kwargs)`` within :attr:`timeout`; a failure is a FusionError naming ``subject``."""
        if self.closed:
            raise FusionError(f"the Milvus store of {subject!r} is closed")
        kwargs.setdefault("timeout", self.timeout)
        try:
            return getattr(self.client, method)(**kwargs)
        except (FusionError, InvalidParameterError):
            raise
        except Exception as exc:
            raise FusionError(f"Milvus {method} on {subject!r} failed: {reason(exc)}") from None

    def close(self) -> None:
        """Release the client; later calls fail in one line (closing twice is harmless)."""
        if not self.closed:
            self.closed = True
            self.client.close()


class Calls(Protocol):
    """What reads and writes need from a store: its collection's name, and calls to its client."""

    collection_name: str
    """The collection the calls are about (named in errors)."""

    def call(self, method: str, **kwargs: Any) -> Any:
        """``client.method(**kwargs)``, failing as one line (see :meth:`MilvusConnection.call`)."""

    def count(self, expression: str = "") -> int:
        """Rows of the collection matching ``expression`` (all for '')."""
