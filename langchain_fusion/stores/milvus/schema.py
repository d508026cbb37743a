"""What a collection is: its schema, its indexes, and the record of how it was built (its description).

The collection's description is JSON: ``langchain_fusion`` (the store settings: embedding model,
dimension, analyzer, BM25 parameters, text fields), ``vector_index`` (the dense index asked for
and built), ``library`` (the version that made it) and ``format`` (:data:`FORMAT_VERSION`).
:class:`DenseIndex` maps the in-process store's FAISS names to Milvus index types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.settings import StoreSettings

FORMAT_VERSION = 1
"""The layout of a collection this library writes, recorded in its description (1: ``null_keys``, the index record)."""

LITE_INDEXES = ("FLAT", "IVF_FLAT", "AUTOINDEX")
"""The dense index types Milvus Lite builds; another one falls back to ``FLAT`` there."""

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


def library_version() -> str:
    """The version of langchain-fusion running now."""
    from langchain_fusion import __version__

    return __version__


def description(settings: StoreSettings, dense: DenseIndex, requested: str) -> str:
    """The description a new collection records: settings, dense index, library version and format."""
    return json.dumps(
        {
            "langchain_fusion": settings.model_dump(mode="json"),
            "vector_index": {**dense.record(), "requested": requested},
            "library": library_version(),
            "format": FORMAT_VERSION,
        }
    )


def read_description(
    described: Mapping[str, Any], collection_name: str
) -> tuple[StoreSettings, Mapping[str, Any], int]:
    """The settings a ``describe_collection`` answer records, its dense index record (``{}`` before one), its format."""
    try:
        recorded = json.loads(described.get("description") or "")
        record = recorded["langchain_fusion"]
        if isinstance(record, dict) and isinstance(record.get("analyzer"), dict):
            record = {**record, "analyzer": Analyzer.from_saved(record["analyzer"])}  # saved before an option
        dense = recorded.get("vector_index")
        layout = recorded.get("format", 0)
        return StoreSettings.model_validate(record), dense if isinstance(dense, dict) else {}, int(layout)
    except (ValueError, KeyError, TypeError, ValidationError):
        raise FusionError(
            f"collection {collection_name!r} was not made by langchain-fusion (no settings in its "
            "description); choose another collection_name"
        ) from None


def collection_layout(client: Any, settings: StoreSettings, dense: DenseIndex, requested: str) -> tuple[Any, Any]:
    """The schema and index parameters of a new collection for ``settings`` (its dimension set)."""
    from pymilvus import DataType, Function, FunctionType

    schema = client.create_schema(
        auto_id=False, enable_dynamic_field=False, description=description(settings, dense, requested)
    )
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
    index.add_index(field_name="vector", index_type=dense.index_type, metric_type="IP", params=dict(dense.build))
    params = settings.bm25_params
    index.add_index(
        field_name="sparse",
        index_type="SPARSE_INVERTED_INDEX",
        metric_type="BM25",
        params={"bm25_k1": params.k1, "bm25_b": params.b},
    )
    return schema, index
