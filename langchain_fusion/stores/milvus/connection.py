"""One connection to Milvus: connecting within a deadline, a timeout on every call, reconnecting.

A server that does not answer within ``connect_timeout`` seconds is a FusionError naming the URI;
a Milvus Lite file is retried while its server process starts. Each later call may take
``timeout`` seconds; one that takes longer is a FusionError naming the timeout and how to raise it.

A dropped channel (the server restarted, or went away and came back; pymilvus then fails with
"Fail connecting to server", status 2, once its own recovery gives up) is reconnected, and the
call repeated once when repeating it is harmless (:data:`REPEATABLE`: reads, searches, upserts and
deletes by id or expression give the same result twice). A restarted server may take a while to
come up (seconds on a loaded machine): the reconnect tries again, backing off, until the call's
own ``timeout`` has run out; then the call fails in one line, and the next call tries to reconnect
first. Calls run in several threads at once (a query searches both sides together): a call that
fails on a client another thread has just replaced is a dropped call too, repeated on the new one.
Another call (creating or dropping a collection) is not repeated: the error says so, and
that it may or may not have happened. :data:`CONSISTENCY_LEVELS` are the levels a query may ask for.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
import threading
import types
import warnings
from collections.abc import Collection, Mapping, Sequence
from time import monotonic, sleep
from typing import Any, Protocol

from langchain_fusion._compat import pymilvus_column_upsert
from langchain_fusion.errors import FusionError, InvalidParameterError, MissingDependencyError

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a server's connection (and a health check's answer) before failing in one line."""

_LITE_START_SECONDS = 20.0
"""How long a Milvus Lite file is retried while its server process starts."""
_CONNECT_FAILED = 2
"""pymilvus's status code for a connection that could not be made (or remade, after a dropped channel)."""
_LITE_NOT_STARTED = "Open local milvus failed"
"""What pymilvus says when a Milvus Lite server process did not start (e.g. the previous one still holds the file)."""
_FIRST_PAUSE = 0.1
"""Seconds between the first two attempts to reconnect; each next pause is twice as long (up to the longest)."""
_LONGEST_PAUSE = 2.0
"""The longest pause between two attempts to reconnect."""
LITE_GRPC_OPTIONS: dict[str, Any] = {"grpc.keepalive_time_ms": 2**31 - 1, "grpc.keepalive_permit_without_calls": False}
"""gRPC channel options of a Milvus Lite connection: no keepalive pings (a local socket needs none).

pymilvus pings every 10 s, also with no call in flight; Milvus Lite's gRPC server allows one ping per 5
minutes without data, and after two more it answers GOAWAY "too_many_pings", which gRPC logs as an
error line on a successful run. Options given in the connection's ``grpc_options`` take precedence.
"""
_SHORTEST_WAIT = 0.05
"""The least time given to one connection attempt or to the repeated call, however little of the timeout is left."""

UPSERT_COLUMNS = "upsert_columns"
"""A column-based upsert: ``call(UPSERT_COLUMNS, collection_name=..., entities=[{name, type, values}], schema=...)``.

``MilvusClient.upsert`` takes rows only; its connection's ``upsert`` takes columns (what pymilvus's
``Collection.upsert`` sends), skipping a per-character check of every string in the row path.
"""

REPEATABLE = frozenset(
    {"has_collection", "describe_collection", "query", "search", "get", "upsert", UPSERT_COLUMNS, "delete"}
)
"""Calls that give the same result when made twice: repeated once after a reconnect."""

logger = logging.getLogger(__name__)

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
        if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise InvalidParameterError(f"the Milvus timeout must be a positive number of seconds; got {timeout!r}")
        self.uri = uri
        self.timeout = float(timeout)
        self.connect_timeout = connect_timeout
        self.options = options
        self.is_lite = is_lite_uri(uri)
        self.closed = False
        self.client: Any = None
        self._reconnecting = threading.Lock()

    def _new_client(self, timeout: float) -> Any:
        """A new ``MilvusClient`` on :attr:`uri`, waiting up to ``timeout`` seconds for its channel."""
        from pymilvus import MilvusClient

        options = self.options
        if self.is_lite:
            _import_milvus_lite_quietly()
            options = {**options, "grpc_options": {**LITE_GRPC_OPTIONS, **options.get("grpc_options", {})}}
        return MilvusClient(uri=self.uri, timeout=timeout, **options)

    def connect(self, collection_name: str) -> bool:
        """Connect (within :attr:`connect_timeout`); returns whether ``collection_name`` exists."""
        deadline = monotonic() + (_LITE_START_SECONDS if self.is_lite else 0.0)
        while True:
            try:
                self.client = self._new_client(self.connect_timeout)
                return bool(self.client.has_collection(collection_name, timeout=self.connect_timeout))
            except Exception as exc:
                # Milvus Lite starts a server process and opens its socket a moment later; on a
                # busy machine the first connection can come too early, so a lite file is retried.
                if getattr(exc, "code", None) == _CONNECT_FAILED and monotonic() < deadline:
                    sleep(0.5)
                    continue
                raise FusionError(f"cannot reach Milvus at {self.uri!r}: {reason(exc)}") from None

    def call(self, method: str, subject: str, **kwargs: Any) -> Any:
        """``client.method(**kwargs)`` within :attr:`timeout`; a failure is a FusionError naming ``subject``.

        A dropped channel is reconnected (trying again until the call's timeout runs out), and the call
        repeated once if it is :data:`REPEATABLE`.
        """
        if self.closed:
            raise FusionError(f"the Milvus store of {subject!r} is closed")
        timeout = kwargs.setdefault("timeout", self.timeout)
        deadline = monotonic() + timeout
        client = self.client
        if client is None:  # an earlier reconnect ran out of time: connect first
            self._reconnect(None, None, deadline, timeout)
        else:
            try:
                return bound(client, method)(**kwargs)
            except (FusionError, InvalidParameterError):
                raise
            except Exception as exc:
                # Another thread may have seen the drop and replaced (closed) this client while the call ran on it:
                # it then fails in any way ("should create connection first"), and is a dropped call all the same.
                if not dropped(exc) and self.client is client:
                    raise self._failure(method, subject, timeout, exc) from None
                self._reconnect(client, exc, deadline, timeout)
                if method not in REPEATABLE:
                    raise FusionError(
                        f"the connection to Milvus at {self.uri!r} dropped during {method} on {subject!r}; it is "
                        f"reconnected, but {method} is not repeated on its own (it may or may not have happened): "
                        "check, and run again"
                    ) from None
        kwargs["timeout"] = max(deadline - monotonic(), _SHORTEST_WAIT)  # what is left of the call's timeout
        try:
            return bound(self.client, method)(**kwargs)
        except Exception as exc:
            raise self._failure(method, subject, timeout, exc) from None

    def _failure(self, method: str, subject: str, timeout: float, exc: BaseException) -> FusionError:
        if timed_out(exc):
            return FusionError(
                f"Milvus {method} on {subject!r} took longer than the {timeout:g} s timeout: allow more with "
                "?timeout=SECONDS in the location (--store-timeout SECONDS on the command line, "
                "MilvusStore(timeout=...) in Python)"
            )
        return FusionError(f"Milvus {method} on {subject!r} failed: {reason(exc)}")

    def _reconnect(self, broken: Any, exc: BaseException | None, deadline: float, timeout: float) -> None:
        """A new client in place of ``broken`` (None: none left), trying again with pauses until ``deadline``.

        Whichever thread sees the drop first reconnects; the others find the new client. When ``deadline``
        passes first, :attr:`client` is left None (the next call tries again) and the call fails in one line.
        """
        with self._reconnecting:
            if self.closed:
                raise FusionError(f"the Milvus store at {self.uri!r} is closed")
            if self.client is not broken and self.client is not None:
                return  # another thread reconnected meanwhile
            if broken is not None:
                why = "" if exc is None else f" ({reason(exc)})"
                logger.warning("the connection to Milvus at %r dropped%s; reconnecting", self.uri, why)
                with contextlib.suppress(Exception):  # the old channel is gone either way
                    broken.close()
                self.client = None
            pause, attempts = _FIRST_PAUSE, 0
            while True:
                attempts += 1
                left = deadline - monotonic()
                try:
                    self.client = self._new_client(min(self.connect_timeout, max(left, _SHORTEST_WAIT)))
                except Exception as again:
                    left = deadline - monotonic()
                    if not self._may_come_back(again) or left <= 0:
                        raise FusionError(
                            f"lost Milvus at {self.uri!r} and cannot reach it again within the {timeout:g} s "
                            f"timeout ({attempts} attempts): {reason(again)}; the next call tries again"
                        ) from None
                    sleep(min(pause, left))
                    pause = min(2 * pause, _LONGEST_PAUSE)
                    continue
                logger.info("reconnected to Milvus at %r (attempt %d)", self.uri, attempts)
                return

    def _may_come_back(self, exc: BaseException) -> bool:
        """Whether a failed connection attempt is worth repeating: the server is (re)starting, not refusing us."""
        return dropped(exc) or (self.is_lite and _LITE_NOT_STARTED in str(exc))

    def close(self) -> None:
        """Release the client; later calls fail in one line (closing twice is harmless)."""
        if not self.closed:
            self.closed = True
            if self.client is not None:
                self.client.close()


def _import_milvus_lite_quietly() -> None:
    """Import Milvus Lite (pymilvus does for a lite file) without its ``pkg_resources is deprecated`` warning.

    milvus-lite 2.5.1 reads its version with ``pkg_resources`` on import, and setuptools warns on every run
    (the milvus extra keeps setuptools below 81, where ``pkg_resources`` still exists). The warning is the
    vendor's, not the user's to act on.
    """
    if "milvus_lite" in sys.modules:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        with contextlib.suppress(ImportError):  # pymilvus says how to install it
            importlib.import_module("milvus_lite.server_manager")


def bound(client: Any, method: str) -> Any:
    """``client.method``; for :data:`UPSERT_COLUMNS`, the client's connection's column upsert in its database."""
    if method != UPSERT_COLUMNS:
        return getattr(client, method)
    found = pymilvus_column_upsert(client)
    if found is None:
        return _upsert_as_rows(client)
    handler, context = found

    def upsert_columns(collection_name: str, entities: list[dict[str, Any]], **kwargs: Any) -> Any:
        return handler.upsert(collection_name, entities, context=context, **kwargs)

    return upsert_columns


def rows_of(columns: Mapping[str, Sequence[Any]], json_fields: Collection[str]) -> list[dict[str, Any]]:
    """Row dicts of a column upsert's ``columns``: the column path takes JSON fields as text, the row path as values."""
    decoded = {
        name: [json.loads(v) if isinstance(v, str) else v for v in values] if name in json_fields else values
        for name, values in columns.items()
    }
    return [dict(zip(decoded, values, strict=True)) for values in zip(*decoded.values(), strict=True)]


def _upsert_as_rows(client: Any) -> Any:
    """The column upsert of :func:`bound` through the client's public row upsert (slower, the same rows)."""

    def upsert_columns(collection_name: str, entities: list[dict[str, Any]], **kwargs: Any) -> Any:
        from pymilvus import DataType

        json_fields = {e["name"] for e in entities if e["type"] == DataType.JSON}
        rows = rows_of({e["name"]: e["values"] for e in entities}, json_fields)
        kwargs.pop("schema", None)
        answer = client.upsert(collection_name=collection_name, data=rows, **kwargs)
        return types.SimpleNamespace(upsert_count=int(answer["upsert_count"]))

    return upsert_columns


def _status(exc: BaseException) -> Any:
    """The status of a pymilvus error (a number) or a gRPC one (a ``grpc.StatusCode``'s name), or None."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            code = code()
        except Exception:
            return None
    return getattr(code, "name", code)


def dropped(exc: BaseException) -> bool:
    """Whether ``exc`` says the channel to the server is gone (restarted, unreachable), not that a call was wrong."""
    return _status(exc) in (_CONNECT_FAILED, "UNAVAILABLE")


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` says a call ran out of its timeout."""
    return _status(exc) == "DEADLINE_EXCEEDED" or "Retry timeout" in str(exc)


class Calls(Protocol):
    """What reads and writes need from a store: its collection's name, and calls to its client."""

    collection_name: str
    """The collection the calls are about (named in errors)."""

    def call(self, method: str, **kwargs: Any) -> Any:
        """``client.method(**kwargs)``, failing as one line (see :meth:`MilvusConnection.call`)."""

    def count(self, expression: str = "") -> int:
        """Rows of the collection matching ``expression`` (all for '')."""
