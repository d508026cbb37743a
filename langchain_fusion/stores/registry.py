"""Index locations and the engines behind them: one string names where an index lives.

A *location* is what the command line, the server and MCP take for an index: a folder made by
``save`` (the in-process store), or a string whose prefix names another engine, e.g.
``milvus://HOST:PORT/COLLECTION``. Each engine is a :class:`StoreEngine` that opens, creates,
describes and persists the stores at its locations, and keeps the record of which files an
incremental ``index`` run has indexed. Everything above this module asks :func:`engine_for`;
nothing above it knows which engines exist.

Adding an engine is its engine file and one entry in :data:`ENGINES` (or a call to
:func:`register_engine` from an application or a test). Entries name their class by import path,
so an engine's dependencies (e.g. pymilvus) are imported only when one of its locations is used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FusionStore

LLM_CACHE_SUFFIX = ".llm-cache"
"""What the default chat model cache folder of an index location is named with (``NAME.llm-cache``)."""


@dataclass(frozen=True)
class NewStoreOptions:
    """How a new store is made (an existing one keeps its own): vector index, search parameters, analyzer."""

    vector_index: str | None = None
    """The dense index, e.g. a FAISS factory string such as ``"HNSW32"`` (None: the engine's default, exact)."""
    vector_search_params: str | None = None
    """Search parameters of an approximate index, e.g. ``"efSearch=128"`` (None: the engine's defaults)."""
    analyzer: Analyzer | None = None
    """The BM25 analyzer, e.g. ``Analyzer(language="german")`` (None: the default); an existing store must have
    been built with it."""
    tenant_key: str | None = None
    """Make the store tenant-keyed by this metadata key (see :mod:`~langchain_fusion.stores.tenants`); an
    existing store must have been made with it."""

    @property
    def given(self) -> list[str]:
        """The vector index options that are set, as the Python API and the command line name them."""
        names = [name for name in ("vector_index", "vector_search_params") if getattr(self, name) is not None]
        return [f"{name} (--{name.replace('_', '-')})" for name in names]


def check_tenant_key_kept(location: str, store: FusionStore, options: NewStoreOptions) -> None:
    """A FusionError when ``options`` ask for another tenant key than the existing ``store`` at ``location`` has."""
    kept = store.settings.tenant_key
    if options.tenant_key is not None and options.tenant_key != kept:
        keyed = f"is keyed by {kept!r}" if kept is not None else "is not tenant-keyed"
        raise FusionError(
            f"{location} {keyed}, not by {options.tenant_key!r}: a store keeps the tenant key it was made with; "
            "open it without tenant_key or choose a new location"
        )


@dataclass
class OpenedStore:
    """A store opened at a location, with what the location keeps beside its rows."""

    store: FusionStore
    """The rows."""
    info: dict[str, Any] = field(default_factory=dict)
    """The record saved with the store (e.g. the files an ``index`` run indexed); empty for a new store."""
    created: bool = False
    """True when nothing was at the location yet (the store is new and empty)."""


class StoreEngine(ABC):
    """One kind of place an index can live: opens, creates, describes and persists the stores at its locations."""

    name: ClassVar[str]
    """Short name, shown in descriptions (``folder``, ``milvus``...)."""

    @abstractmethod
    def open(self, location: str) -> OpenedStore:
        """The store at ``location``; a FusionError that says how to build one when there is none."""

    def check_target(self, location: str, options: NewStoreOptions) -> None:
        """A FusionError when an ``index`` run could not write to ``location`` with ``options`` (checked first)."""
        return None

    @abstractmethod
    def open_or_create(self, location: str, options: NewStoreOptions) -> OpenedStore:
        """The store at ``location``, or a new empty one made with ``options`` (for an ``index`` run).

        Checks first that the location can be written and that the options apply to this engine,
        so a mistake fails before any paid work.
        """

    @abstractmethod
    def save(self, location: str, store: FusionStore, info: Mapping[str, Any]) -> str:
        """Make ``store`` and ``info`` durable at ``location``; returns where, for people."""

    def with_options(self, location: str, options: Mapping[str, str]) -> str:
        """``location`` with these options of its engine set (e.g. ``{"timeout": "10"}`` on a Milvus location).

        The default: an engine whose locations take no options refuses them in one line.
        """
        raise InvalidParameterError(
            f"{location}: {self.name} locations take no options ({', '.join(options)}); they apply to store "
            "locations such as milvus://HOST:PORT/COLLECTION"
        )

    def entry_writer(self, location: str, store: FusionStore) -> Callable[[tuple[str, ...], Any], None] | None:
        """Writes one entry of the saved record at once (``(path, value)``, None deletes), or None.

        An engine whose store writes each change as it comes returns one, so an ``index`` run keeps
        each file's entry as soon as its chunks are written (a killed run loses nothing it finished).
        The default (None) keeps the record in memory until :meth:`save`, as a folder does.
        """
        return None

    @abstractmethod
    def describe(self, location: str, store: FusionStore) -> dict[str, Any]:
        """What a health check shows about the store at ``location`` (JSON values)."""

    def updating(self, location: str, on_wait: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """Held for a whole update of ``location`` (load, change, save), so two updates never lose each other's work.

        The default holds nothing (an engine whose store writes each change as it comes); a folder is
        locked, and a second updater waits (``on_wait`` says so) and then loads what the first saved.
        """
        return contextlib.nullcontext()

    def folder(self, location: str) -> Path | None:
        """The folder on this machine that holds the index, for engines that keep one (None otherwise).

        A folder can also keep page summaries beside the chunks (a hierarchical index).
        """
        return None

    def default_llm_cache(self, location: str) -> Path:
        """Where an ``index`` run caches chat model answers when no cache folder is given."""
        return Path(f"{Path(location).name or 'index'}{LLM_CACHE_SUFFIX}")


@dataclass(frozen=True)
class EngineEntry:
    """One line of the registry: which locations an engine claims, and where its class is."""

    name: str
    """The engine's short name."""
    prefixes: tuple[str, ...]
    """Location prefixes this engine claims (e.g. ``("milvus://",)``)."""
    engine: str | StoreEngine
    """The engine: ``"module:Class"`` (imported on first use) or an instance."""
    location_help: str
    """How its locations are written, for help texts."""

    def load(self) -> StoreEngine:
        """The engine instance (importing its module the first time)."""
        if isinstance(self.engine, StoreEngine):
            return self.engine
        module, _, name = self.engine.partition(":")
        engine = getattr(importlib.import_module(module), name)()
        object.__setattr__(self, "engine", engine)
        return engine  # type: ignore[no-any-return]


FOLDER = EngineEntry(
    "folder",
    (),
    "langchain_fusion.stores.local.engine:FolderEngine",
    "an index folder made by 'langchain-fusion index'",
)
"""The default engine: any location no other engine claims is a folder."""

ENGINES: list[EngineEntry] = [
    EngineEntry(
        "milvus",
        ("milvus://", "milvus+https://", "milvus+lite:"),
        "langchain_fusion.stores.milvus.engine:MilvusEngine",
        "a Milvus collection: milvus://HOST:PORT/COLLECTION, milvus+https://HOST/COLLECTION or "
        "milvus+lite:FILE.db/COLLECTION (token from MILVUS_TOKEN)",
    ),
]
"""The engines other than folders, in the order their prefixes are tried."""


def register_engine(entry: EngineEntry) -> None:
    """Add an engine (an application's or a test's); its prefixes must not overlap another engine's."""
    for other in ENGINES:
        if any(p.startswith(q) or q.startswith(p) for p in entry.prefixes for q in other.prefixes):
            raise InvalidParameterError(f"engine {entry.name!r}: its prefixes overlap those of {other.name!r}")
    if not entry.prefixes:
        raise InvalidParameterError(f"engine {entry.name!r} must claim at least one location prefix")
    ENGINES.append(entry)


def unregister_engine(name: str) -> None:
    """Remove an engine added by :func:`register_engine`."""
    ENGINES[:] = [entry for entry in ENGINES if entry.name != name]


def entry_for(location: str | os.PathLike[str]) -> EngineEntry:
    """The registry line whose prefix ``location`` starts with (folders for any other location)."""
    if isinstance(location, str):
        for entry in ENGINES:
            if location.startswith(entry.prefixes):
                return entry
    return FOLDER


def engine_for(location: str | os.PathLike[str]) -> StoreEngine:
    """The engine of ``location``."""
    return entry_for(location).load()


def is_store_location(location: object) -> bool:
    """Whether ``location`` names a store of an engine other than folders (e.g. a Milvus collection)."""
    return isinstance(location, str) and entry_for(location) is not FOLDER


def location_help() -> str:
    """How index locations are written, for help texts: every engine's form."""
    forms = [FOLDER.location_help, *(entry.location_help for entry in ENGINES)]
    return ", or ".join(forms)
