"""What a collection is: its schema, its indexes, and the record of how it was built (its description).

The collection's description is JSON: ``langchain_fusion`` (the store settings: embedding model,
dimension, analyzer, BM25 parameters, text fields), ``vector_index`` (the dense index asked for
and built), ``library`` (the version that made it) and ``format`` (:data:`FORMAT_VERSION`).
:class:`DenseIndex` maps the in-process store's FAISS names to Milvus index types.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from langchain_fusion._version import library_version
from langchain_fusion.errors import FusionError, IndexFormatError, InvalidParameterError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.settings import StoreSettings

FORMAT_VERSION = 1
"""The layout of a collection this library writes, recorded in its description (1: ``null_keys``, the index record)."""

LITE_INDEXES = ("FLAT", "IVF_FLAT", "AUTOINDEX")
"""The dense index types Milvus Lite builds; another one falls back to ``FLAT`` there."""

INDEX_POLL_SECONDS = 0.01
"""How often :func:`create_loaded_collection` asks whether a new collection's indexes are built."""

EF_CONSTRUCTION = 128
"""efConstruction of an HNSW index unless ``vector_search_params`` set it (the in-process store's default)."""
EF_SEARCH = 128
"""ef of an HNSW search unless ``vector_search_params`` set it (at least the candidate pool)."""

_HNSW = re.compile(r"HNSW(\d+)(,Flat)?", re.IGNORECASE)
_IVF = re.compile(r"IVF(\d+),Flat", re.IGNORECASE)
_NAMED = {"FLAT": "FLAT", "DISKANN": "DISKANN", "AUTOINDEX": "AUTOINDEX"}
_BUILD_PARAMETERS = {"efConstruction": "efConstruction"}
_SEARCH_PARAMETERS = {"efSearch": "ef", "nprobe": "nprobe", "search_list": "search_list"}


@dataclass(frozen=True)
class DenseIndex:
    """The Milvus index of the vector field, from the options the in-process store takes (FAISS names)."""

    index_type: str = "FLAT"
    """Milvus's index type: ``FLAT`` (exact), ``HNSW``, ``IVF_FLAT``, ``DISKANN`` or ``AUTOINDEX``."""
    build: Mapping[str, int] = field(default_factory=dict)
    """Build parameters (``M`` and ``efConstruction`` of HNSW, ``nlist`` of IVF_FLAT)."""
    search: Mapping[str, int] = field(default_factory=dict)
    """Search parameters (``ef`` of HNSW, ``nprobe`` of IVF_FLAT, ``search_list`` of DISKANN)."""

    @classmethod
    def parse(cls, vector_index: str | None, vector_search_params: str | None) -> DenseIndex:
        """The index of a FAISS-style name, e.g. ``"HNSW32"`` with ``"efSearch=128"`` (InvalidParameterError otherwise).

        Names: ``"Flat"`` (or None), ``"HNSW<M>"``, ``"IVF<nlist>,Flat"``, ``"DISKANN"``, ``"AUTOINDEX"``;
        parameters: ``efSearch``, ``efConstruction``, ``nprobe``, ``search_list``.
        """
        params = _index_parameters(vector_search_params)
        spec = (vector_index or "Flat").strip()
        if hnsw := _HNSW.fullmatch(spec):
            build = {"M": int(hnsw.group(1)), "efConstruction": params.get("efConstruction", EF_CONSTRUCTION)}
            return cls("HNSW", build, {"ef": EF_SEARCH, **_searching("HNSW", params)})
        if ivf := _IVF.fullmatch(spec):
            return cls("IVF_FLAT", {"nlist": int(ivf.group(1))}, _searching("IVF_FLAT", params))
        if spec.upper() in _NAMED:
            named = _NAMED[spec.upper()]
            return cls(named, {}, _searching(named, params))
        raise InvalidParameterError(
            f"a Milvus vector_index is 'Flat' (exact), 'HNSW<M>' (e.g. 'HNSW32'), 'IVF<nlist>,Flat', 'DISKANN' "
            f"or 'AUTOINDEX'; got {vector_index!r}"
        )

    @property
    def exact(self) -> bool:
        """Whether a search scans every vector (FLAT)."""
        return self.index_type == "FLAT"

    def describe(self) -> str:
        """One line for people, e.g. ``HNSW M=32 efConstruction=128, ef=128``."""
        build = " ".join(f"{k}={v}" for k, v in self.build.items())
        search = " ".join(f"{k}={v}" for k, v in self.search.items())
        return self.index_type + (f" {build}" if build else "") + (f", {search}" if search else "")

    def record(self) -> dict[str, Any]:
        """What the collection's description keeps."""
        return {"index_type": self.index_type, "build": dict(self.build), "search": dict(self.search)}

    @classmethod
    def recorded(cls, record: Any, vector_search_params: str | None) -> DenseIndex:
        """The index a description recorded (FLAT before one was), searched with ``vector_search_params`` if given.

        Otherwise with the search parameters recorded when the collection was made.
        """
        index_type = str(record.get("index_type", "FLAT"))
        defaults = {"ef": EF_SEARCH} if index_type == "HNSW" else {}
        recorded = dict(record.get("search") or {})
        given = _searching(index_type, _index_parameters(vector_search_params))
        return cls(index_type, dict(record.get("build") or {}), {**defaults, **recorded, **given})


def _index_parameters(vector_search_params: str | None) -> dict[str, int]:
    """``"efSearch=128,nprobe=16"`` as a mapping; InvalidParameterError for another name or a non-integer."""
    params: dict[str, int] = {}
    for part in (vector_search_params or "").split(","):
        name, _, value = (piece.strip() for piece in part.partition("="))
        if not part.strip():
            continue
        if name not in {*_BUILD_PARAMETERS, *_SEARCH_PARAMETERS} or not value.isdigit():
            raise InvalidParameterError(
                "Milvus vector_search_params are NAME=INTEGER pairs among efSearch, efConstruction, nprobe "
                f"and search_list, e.g. 'efSearch=128'; got {vector_search_params!r}"
            )
        params[name] = int(value)
    return params


def _searching(index_type: str, params: Mapping[str, int]) -> dict[str, int]:
    """The Milvus search parameters among ``params`` that ``index_type`` takes."""
    takes = {"HNSW": "ef", "IVF_FLAT": "nprobe", "DISKANN": "search_list"}.get(index_type)
    return {_SEARCH_PARAMETERS[k]: v for k, v in params.items() if _SEARCH_PARAMETERS.get(k) == takes}


@dataclass(frozen=True)
class CollectionRecord:
    """The version record in a collection's description: which library built it, in which format, and how.

    Written when the collection is created, read and checked each time it is opened. A
    collection made before the record named its library and format (langchain-fusion < 0.3) is
    opened as it is, read as format 0 (``library`` None).
    """

    settings: StoreSettings
    """The store settings: embedding model and dimension, analyzer, BM25 parameters, text fields."""
    dense: Mapping[str, Any] = field(default_factory=dict)
    """The dense index (:meth:`DenseIndex.record` and ``requested``, the name it was asked for); ``{}``: FLAT."""
    library: str | None = None
    """The langchain-fusion version that created the collection (None: before 0.3)."""
    format: int = FORMAT_VERSION
    """The collection's layout (:data:`FORMAT_VERSION` when this library made it)."""
    tenant: str | None = None
    """The tenant whose rows the collection holds, in a tenant-keyed store (None: one corpus)."""

    @property
    def requested(self) -> str:
        """The dense index as asked for when the collection was made (FAISS-style name, ``Flat`` before one was)."""
        return str(self.dense.get("requested", "Flat"))

    def text(self) -> str:
        """The description to create the collection with (JSON)."""
        return json.dumps(
            {
                "langchain_fusion": self.settings.model_dump(mode="json"),
                "vector_index": dict(self.dense),
                "library": self.library,
                "format": self.format,
                **({"tenant": self.tenant} if self.tenant is not None else {}),
            }
        )

    @classmethod
    def read(cls, described: Mapping[str, Any], collection_name: str) -> CollectionRecord:
        """The record of a ``describe_collection`` answer; a FusionError saying what to do when it cannot be used."""
        try:
            recorded = json.loads(described.get("description") or "")
            settings = recorded["langchain_fusion"]
        except (ValueError, KeyError, TypeError):
            raise FusionError(
                f"collection {collection_name!r} was not made by langchain-fusion (no settings in its "
                "description); choose another collection_name"
            ) from None
        library = recorded.get("library")
        made = f"langchain-fusion {library}" if library else "an older langchain-fusion"
        layout = recorded.get("format", 0)
        if not isinstance(layout, int) or isinstance(layout, bool) or layout > FORMAT_VERSION:
            raise IndexFormatError(
                f"collection {collection_name!r} was made by {made} in collection format {layout!r}; this "
                f"langchain-fusion ({library_version()}) reads formats up to {FORMAT_VERSION}: upgrade it "
                "(pip install -U langchain-fusion) to open the collection"
            )
        try:
            if isinstance(settings, dict) and isinstance(settings.get("analyzer"), dict):
                settings = {**settings, "analyzer": Analyzer.from_saved(settings["analyzer"])}  # saved before an option
            stored = StoreSettings.model_validate(settings)
        except (ValidationError, TypeError) as exc:
            first = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
            where = ".".join(str(part) for part in first["loc"])
            raise IndexFormatError(
                f"collection {collection_name!r} was made by {made} with settings this langchain-fusion "
                f"({library_version()}) cannot read ({where}: {first['msg']}): upgrade langchain-fusion, "
                "or index into a new collection"
            ) from None
        dense = recorded.get("vector_index")
        tenant = recorded.get("tenant")
        return cls(
            stored,
            dense if isinstance(dense, dict) else {},
            str(library) if library else None,
            layout,
            tenant if isinstance(tenant, str) else None,
        )

    def check(
        self,
        collection_name: str,
        *,
        analyzer: Analyzer | None,
        bm25_params: BaseModel | None,
        vector_index: str | None,
    ) -> None:
        """A one-line FusionError when an option given to open the collection differs from what it was built with.

        The line names the collection, what it was built with and what was asked for, and what to do.
        """
        asked: list[tuple[str, str, str]] = []
        if vector_index is not None and vector_index != self.requested:
            asked.append(("vector_index", repr(self.requested), repr(vector_index)))
        models: tuple[tuple[str, BaseModel | None], ...] = (("analyzer", analyzer), ("bm25_params", bm25_params))
        for name, model in models:
            built = getattr(self.settings, name)
            if model is not None and model != built:
                asked.append((name, *_differences(built, model)))
        if asked:
            name, built, given = asked[0]
            raise FusionError(
                f"collection {collection_name!r} was built with {name} {built}; this store asks for {given}: "
                f"open it without {name} to keep its own, or index into a new collection to use the other"
            )

    def describe(self) -> dict[str, Any]:
        """What a health check shows: library, format, dense index (the settings are shown on their own)."""
        return {"library": self.library or "before 0.3", "format": self.format, "vector_index": dict(self.dense)}


def _differences(built: BaseModel, given: BaseModel) -> tuple[str, str]:
    """The fields where two settings differ, as ``name=value`` lists (the whole repr when only the class differs)."""
    a, b = built.model_dump(mode="json"), given.model_dump(mode="json")
    names = [name for name in dict.fromkeys([*a, *b]) if a.get(name) != b.get(name)]
    if not names:
        return repr(built), repr(given)
    return (
        ", ".join(f"{name}={a.get(name)!r}" for name in names),
        ", ".join(f"{name}={b.get(name)!r}" for name in names),
    )


def collection_layout(client: Any, record: CollectionRecord) -> tuple[Any, Any]:
    """The schema and index parameters of a new collection (``record``'s settings with their dimension)."""
    from pymilvus import DataType, Function, FunctionType

    settings = record.settings
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False, description=record.text())
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
    schema.add_field("text", DataType.VARCHAR, max_length=65535)
    schema.add_field(
        "bm25_text",
        DataType.VARCHAR,
        max_length=65535,
        enable_analyzer=True,
        analyzer_params={"tokenizer": "whitespace"},
    )
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=settings.dimension)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("null_keys", DataType.JSON)  # {key: true} for each metadata key whose value is null
    schema.add_function(
        Function(
            name="bm25",
            function_type=FunctionType.BM25,
            input_field_names=["bm25_text"],
            output_field_names=["sparse"],
        )
    )
    index = client.prepare_index_params()
    dense = record.dense
    index.add_index(
        field_name="vector", index_type=dense["index_type"], metric_type="IP", params=dict(dense.get("build") or {})
    )
    params = settings.bm25_params
    index.add_index(
        field_name="sparse",
        index_type="SPARSE_INVERTED_INDEX",
        metric_type="BM25",
        params={"bm25_k1": params.k1, "bm25_b": params.b},
    )
    return schema, index


def create_loaded_collection(call: Callable[..., Any], name: str, schema: Any, index: Any, timeout: float) -> None:
    """Create collection ``name`` with its indexes and load it, through ``call`` (a store's ``call``).

    pymilvus's ``create_collection(index_params=...)`` waits for each index in half-second sleeps,
    a second per collection though an empty collection's indexes are built at once; a tenant's
    first write would pay it. Here the indexes are asked for without waiting and polled every
    :data:`INDEX_POLL_SECONDS`. A collection whose indexes or load fail is dropped again, so no
    collection without its indexes is left behind.
    """
    call("create_collection", collection_name=name, schema=schema, consistency_level="Strong")
    try:
        call("create_index", collection_name=name, index_params=index, sync=False)
        deadline = time.monotonic() + timeout
        for param in index:
            index_name = param.index_name or param.field_name
            while (state := call("describe_index", collection_name=name, index_name=index_name)) and (
                state.get("state") != "Finished"
            ):
                if state.get("state") == "Failed" or time.monotonic() > deadline:
                    raise FusionError(
                        f"Milvus did not build the {index_name!r} index of the new collection {name!r} "
                        f"({state.get('index_state_fail_reason') or f'not within {timeout:g} s'}); nothing was written"
                    )
                time.sleep(INDEX_POLL_SECONDS)
        call("load_collection", collection_name=name)
    except BaseException:
        with contextlib.suppress(Exception):
            call("drop_collection", collection_name=name)
        raise
