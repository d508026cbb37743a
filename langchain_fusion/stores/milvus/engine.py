"""The Milvus engine: a Milvus collection named by one string (see :mod:`~langchain_fusion.stores.registry`).

The command line and the server take an index *location*: a folder made by ``save`` (the
in-process store), or a Milvus collection named like a URL whose last path segment is the
collection:

- ``milvus://HOST[:PORT]/COLLECTION``: a Milvus standalone server or cluster over plain
  HTTP/gRPC (port 19530 by default), e.g. ``milvus://localhost:19530/docs``;
- ``milvus+https://HOST[:PORT]/COLLECTION``: the same over TLS (port 443 by default), e.g. a
  managed Milvus (Zilliz Cloud) endpoint;
- ``milvus+lite:PATH/COLLECTION``: a Milvus Lite file in this process (``PATH`` ends in
  ``.db``), e.g. ``milvus+lite:./docs.db/docs``.

A server's database is chosen with ``?db=NAME``, the consistency level of queries with
``?consistency=LEVEL`` (``strong`` by default; ``bounded``, ``session`` or ``eventually``;
on any Milvus location), and how long each call may take with ``?timeout=SECONDS`` (60 by
default; connecting waits 5 s at most whatever it says; on any Milvus location; options join with ``&``).
Credentials never go in the location (it is printed and logged): the ``MILVUS_TOKEN``
environment variable (``user:password`` or an API key) is passed to the server when set.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.base import FusionStore
from langchain_fusion.stores.registry import LLM_CACHE_SUFFIX, NewStoreOptions, OpenedStore, StoreEngine

if TYPE_CHECKING:
    from langchain_fusion.stores.milvus.store import MilvusStore

MILVUS_TOKEN_ENV = "MILVUS_TOKEN"
"""The environment variable holding a Milvus server's token (``user:password`` or an API key)."""

SCHEMES = ("milvus://", "milvus+https://", "milvus+lite:")
"""The prefixes that make a location a Milvus collection rather than a folder."""

_DEFAULT_PORTS = {"milvus": 19530, "milvus+https": 443}
_COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
_EXAMPLES = "milvus://localhost:19530/docs, milvus+https://HOST/docs or milvus+lite:./docs.db/docs"


@dataclass(frozen=True)
class MilvusLocation:
    """A Milvus collection named by a location string."""

    uri: str
    """What pymilvus connects to: ``http(s)://host:port`` or a Milvus Lite file path."""
    collection_name: str
    """The collection holding the index."""
    db_name: str | None = None
    """The server's database (``None``: the server's default)."""
    spec: str = ""
    """The location as written (without credentials, safe to print)."""
    consistency: str = "Strong"
    """The consistency level of queries (``?consistency=``; ``connection.CONSISTENCY_LEVELS`` lists them)."""
    timeout: float | None = None
    """Seconds each call may take (``?timeout=``; None: the store's default)."""

    def open(self, **options: Any) -> MilvusStore:
        """A :class:`~langchain_fusion.stores.milvus.MilvusStore` on this collection (token from the environment)."""
        from langchain_fusion.stores.milvus.store import MilvusStore

        connection: dict[str, Any] = {}
        if self.db_name:
            connection["db_name"] = self.db_name
        token = os.environ.get(MILVUS_TOKEN_ENV)
        if token and not self.is_lite:
            connection["token"] = token
        if self.timeout is not None:
            options = {"timeout": self.timeout, **options}
        return MilvusStore(self.uri, self.collection_name, consistency=self.consistency, **options, **connection)

    @property
    def is_lite(self) -> bool:
        """Whether this is a Milvus Lite file (one process at a time) rather than a server."""
        return not self.uri.startswith(("http://", "https://"))

    def __str__(self) -> str:
        return self.spec


def is_store_location(location: object) -> bool:
    """Whether ``location`` names a Milvus collection (rather than a folder)."""
    return isinstance(location, str) and location.startswith(SCHEMES)


def parse_location(location: str) -> MilvusLocation:
    """The Milvus collection named by ``location``; InvalidParameterError says what is malformed."""
    if not is_store_location(location):
        raise InvalidParameterError(f"{location!r} is not a Milvus location; write {_EXAMPLES}")
    if location.startswith("milvus+lite:"):
        head, _, name = location[len("milvus+lite:") :].rpartition("/")
        name, _, options = name.partition("?")
        if not head.endswith(".db"):
            raise InvalidParameterError(
                f"{location!r}: a Milvus Lite location is milvus+lite:PATH.db/COLLECTION, "
                "e.g. milvus+lite:./docs.db/docs"
            )
        query = _options(location, options, ("consistency", "timeout"))
        return MilvusLocation(
            os.path.expanduser(head), _collection(name, location), spec=location, **_request_options(location, query)
        )
    parts = urlsplit(location)
    try:
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise InvalidParameterError(f"{location!r}: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise InvalidParameterError(f"{location!r} names no server; write {_EXAMPLES}")
    if parts.username or parts.password:
        raise InvalidParameterError(
            f"{location!r}: put credentials in the {MILVUS_TOKEN_ENV} environment variable, not in the location"
        )
    query = _options(location, parts.query, ("db", "consistency", "timeout"))
    name = parts.path.strip("/")
    scheme = "https" if parts.scheme == "milvus+https" else "http"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return MilvusLocation(
        f"{scheme}://{host}:{port}",
        _collection(name, location),
        query.get("db") or None,
        location,
        **_request_options(location, query),
    )


def _options(location: str, text: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The ``?name=value`` options of a location, each allowed and given once."""
    query = parse_qs(text, keep_blank_values=True)
    if set(query) - set(allowed) or any(len(values) > 1 for values in query.values()):
        forms = {
            "db": "db=NAME (the server's database)",
            "consistency": "consistency=LEVEL",
            "timeout": "timeout=SECONDS",
        }
        raise InvalidParameterError(
            f"{location!r}: the location options are ?{', '.join(forms[name] for name in allowed)}, each once "
            "(joined with &)"
        )
    return {name: values[0] for name, values in query.items()}


def _request_options(location: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The store options among a location's ``?name=value`` options: consistency level, timeout."""
    from langchain_fusion.stores.milvus.connection import consistency_level

    found: dict[str, Any] = {}
    try:
        if "consistency" in query:
            found["consistency"] = consistency_level(query["consistency"])
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{location!r}: {exc}") from None
    if "timeout" in query:
        try:
            seconds = float(query["timeout"])
        except ValueError:
            seconds = math.nan
        if not 0 < seconds < math.inf:
            raise InvalidParameterError(
                f"{location!r}: timeout is a positive number of seconds, e.g. ?timeout=10; got {query['timeout']!r}"
            )
        found["timeout"] = seconds
    return found


def with_options(location: str, options: Mapping[str, str]) -> str:
    """``location`` with these ``?name=value`` options set (replacing any it had of the same names), checked."""
    head, _, tail = location.rpartition("/")
    name, _, text = tail.partition("?")
    query = {key: values[0] for key, values in parse_qs(text, keep_blank_values=True).items()}
    changed = f"{head}/{name}?{urlencode({**query, **options})}"
    parse_location(changed)
    return changed


def _collection(name: str, location: str) -> str:
    if not _COLLECTION_NAME.fullmatch(name):
        raise InvalidParameterError(
            f"{location!r}: the collection name {name!r} must start with a letter or '_' and hold only letters, "
            f"digits and '_' (at most 200); write {_EXAMPLES}"
        )
    return name


class MilvusEngine(StoreEngine):
    """Milvus collections named by a location (see the module docstring)."""

    name = "milvus"

    def _store(self, location: str) -> MilvusStore:
        return parse_location(location).open()

    def open(self, location: str) -> OpenedStore:
        """The collection, which must exist; its record is read from its side collection."""
        parsed = parse_location(location)
        store = parsed.open()
        if not store.exists:
            raise FusionError(
                f"{location}: there is no collection {parsed.collection_name!r} at {parsed.uri}; "
                f"build it with: langchain-fusion index PATH... --out {location}"
            )
        return OpenedStore(store, store.read_info())

    def check_target(self, location: str, options: NewStoreOptions) -> None:
        """A well-formed location, and a dense index Milvus can build."""
        from langchain_fusion.stores.milvus.schema import DenseIndex

        parse_location(location)
        DenseIndex.parse(options.vector_index, options.vector_search_params)

    def open_or_create(self, location: str, options: NewStoreOptions) -> OpenedStore:
        """The collection (created by the first upsert when it does not exist; an existing one keeps its settings)."""
        self.check_target(location, options)
        store = parse_location(location).open(
            analyzer=options.analyzer,
            vector_index=options.vector_index,
            vector_search_params=options.vector_search_params,
            tenant_key=options.tenant_key,
        )
        return OpenedStore(store, store.read_info() if store.exists else {}, created=not store.exists)

    def save(self, location: str, store: FusionStore, info: Mapping[str, Any]) -> str:
        """The rows are already in the collection: write the record."""
        write_info = getattr(store, "write_info", None)
        if write_info is None:
            raise FusionError(f"a Milvus location holds a MilvusStore, not a {type(store).__name__}")
        write_info(info)
        return str(location)

    def with_options(self, location: str, options: Mapping[str, str]) -> str:
        """``location`` with ``?name=value`` options set, e.g. ``{"timeout": "10"}`` (see :func:`with_options`)."""
        return with_options(location, options)

    def entry_writer(self, location: str, store: FusionStore) -> Callable[[tuple[str, ...], Any], None] | None:
        """The store's :meth:`~langchain_fusion.stores.milvus.store.MilvusStore.write_info_entry`."""
        return getattr(store, "write_info_entry", None)

    def describe(self, location: str, store: FusionStore) -> dict[str, Any]:
        """The location, the collection's settings and its version record (library, format, dense index)."""
        record = getattr(store, "record", None)
        return {
            "store": self.name,
            "location": str(location),
            "settings": store.settings.model_dump(mode="json"),
            **({"collection": record.describe()} if record is not None else {}),
        }

    def default_llm_cache(self, location: str) -> Path:
        """``COLLECTION.llm-cache`` in the working folder."""
        return Path(f"{parse_location(location).collection_name}{LLM_CACHE_SUFFIX}")
