"""The store seam on Milvus: the same fused search over a distributed engine (``milvus`` extra).

One collection per index: a VARCHAR primary key (our document id), the text, our analyzer's
tokens joined by spaces (analysed by Milvus's ``whitespace`` tokenizer, so both stores see the
same terms) feeding a BM25 function into a sparse field with our ``k1`` and ``b``, the unit
vector (inner product), and the metadata as JSON. The store's settings (embedding model,
dimension, analyzer, BM25 parameters, text fields) are the collection's description.

Differences from the in-process store, all deliberate:

- **Score scale.** Milvus computes Okapi BM25 with the ``(k1 + 1)`` factor; scores are divided
  by it here, so BM25 scores are on the in-process (``lucene``) scale. Only the ``lucene``
  variant exists on Milvus.
- **Consistency.** Queries use ``Strong`` consistency by default (a writer reads its own
  writes); ``consistency=`` picks a weaker level (:data:`CONSISTENCY_LEVELS`) for searches and
  reads by id. Bulk reads checked against a count, and the checks of deletes, stay ``Strong``.
  A query is two rounds of calls, so a concurrent writer on another client may land between
  them (there is no snapshot across calls, unlike the in-process store): a candidate deleted in
  between scores 0 on the side being completed. Upserts of more than one batch are not atomic
  across batches.
- **Filters.** Mapping filters become Milvus expressions on the JSON metadata and apply to both
  searches and the completion calls; Python callables cannot run on a server and are refused.
- **Whole corpus.** ``fetch_k=None`` is refused: it would ship every row; use a bounded ``fetch_k``.
- **Result window.** Milvus returns at most 16,384 rows per search or query (offset included).
  Bulk reads (every document, :meth:`MilvusView.select`, the file record) page with a cursor on
  the primary key instead of an offset, id lists go in chunks of 4,096, and each bulk read or
  delete checks its count: a short read is an error, never a silent loss. A candidate pool
  (``fetch_k``, or ``k`` if larger) above the window is refused on a collection larger than it,
  not cut: Milvus's search iterators page by score ranges, which is not an exact top-k.

Fusion stays in the library: each candidate's missing side is completed with an id-restricted
search (BM25) or the stored vector (dot product), never given 0 or a rank as engines' hybrid
rankers do.
"""

from __future__ import annotations

import json
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document
from pydantic import ValidationError

from langchain_fusion import metadata as keys_
from langchain_fusion.errors import FusionError, InvalidParameterError, MissingDependencyError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, Keys, Scores, SideScorer, StoreView, Where
from langchain_fusion.stores.filters import check_filter
from langchain_fusion.stores.local.tokens import tokenize
from langchain_fusion.stores.settings import BM25Params, StoreSettings

logger = logging.getLogger(__name__)

RESULT_WINDOW = 16384
"""The most rows Milvus returns for one search (top-k) or query (offset + limit)."""

PAGE = 4096
"""Rows per page of a cursor read, and ids per ``id in [...]`` expression: well inside the window."""

BATCH = 1000
"""Rows per upsert call."""

INFO_SUFFIX = "_fusion_info"
"""The side collection ``<collection>_fusion_info`` keeps :meth:`MilvusStore.write_info`'s record."""

INFO_PIECE_CHARS = 16000
"""Characters of the info record's JSON per row (a VARCHAR holds 65,535 bytes)."""

_OUTPUT = ["id", "text", "metadata"]


def _literal(value: Any) -> str:
    """A Milvus expression literal for a string, number or boolean."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        if "\n" in value or "\r" in value:
            raise InvalidParameterError(f"Milvus filters cannot hold line breaks; got {value!r}")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise InvalidParameterError(
        f"a Milvus filter value must be a string, number or boolean; got {type(value).__name__} {value!r}"
    )


def _id_filter(ids: Sequence[str]) -> str:
    return "id in [" + ",".join(_literal(i) for i in ids) + "]"


def filter_expression(where: Where | None, nulls: bool = True) -> str:
    """The Milvus boolean expression of ``where`` ('' when nothing is restricted).

    A metadata value matches as Python's ``==`` matches in process: ``1``, ``1.0`` and ``True``
    are equal, ``"1"`` is not ``1``, ``None`` matches a key that is present with a null value
    (through the collection's ``null_keys`` field; ``nulls`` False: a collection made before it,
    where such a filter is refused), and lists or objects in the metadata match no filter value.
    """
    if where is None or where.is_empty:
        return ""
    parts = []
    if where.metadata is not None:
        spec = check_filter(where.metadata)
        if not isinstance(spec, Mapping):
            raise InvalidParameterError(
                "a Python callable cannot run on a Milvus server: use a mapping filter such as {'source': 'a.pdf'}"
            )
        for key, value in spec.items():
            values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
            parts.append(_equals_any(key, values, nulls))
    if where.ids is not None:
        parts.append(_id_filter(sorted(where.ids)) if where.ids else 'id == ""')
    return " and ".join(f"({p})" for p in parts)


_EXACT_FLOAT = 2**53
"""Integers up to this magnitude are written as floats (Milvus compares JSON ints and floats by value)."""


def _equals_any(key: str, values: Sequence[Any], nulls: bool) -> str:
    """Metadata ``key`` equals one of ``values``, each type in its own ``in [...]`` (Milvus refuses mixed lists)."""
    field = f"metadata[{_literal(key)}]"
    strings = sorted({v for v in values if isinstance(v, str)})
    numbers: set[float] = set()
    big: set[int] = set()
    booleans: set[bool] = set()
    for v in values:
        if v is None or isinstance(v, str):
            continue
        if v in (0, 1):  # True == 1 == 1.0 and False == 0 == 0.0, as in Python
            booleans.add(bool(v))
        if isinstance(v, float) or abs(v) <= _EXACT_FLOAT:
            numbers.add(float(v))
        else:
            big.add(int(v))
    clauses = [
        f"{field} in [{','.join(_literal(v) for v in group)}]"
        for group in (strings, sorted(numbers), sorted(big), sorted(booleans))
        if group
    ]
    if any(v is None for v in values):
        if not nulls:
            raise InvalidParameterError(
                f"this collection was made before langchain-fusion could filter on None ({key!r}: None); "
                "re-index it into a new collection, or filter on a value"
            )
        clauses.append(f"null_keys[{_literal(key)}] == true")
    # "Any of none" matches no row: an id no row has says so in the engine's own terms.
    return " or ".join(clauses) or 'id == ""'


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


CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a server's connection (and a health check's answer) before failing in one line."""

_LITE_START_SECONDS = 20.0
"""How long a Milvus Lite file is retried while its server process starts."""
_CONNECT_FAILED = 2
"""pymilvus's status code for a connection that could not be made."""


class MilvusStore(FusionStore):
    """Rows in a Milvus collection (Milvus Lite file, standalone server or cluster).

    ``uri`` is a local file (``"./index.db"``, Milvus Lite in process) or a server address
    (``"http://localhost:19530"``); ``connection`` options (``token``, ``db_name``, ...) go to
    pymilvus's ``MilvusClient``. A server that does not answer within ``connect_timeout`` seconds
    is a one-line FusionError naming the URI; each later call may take ``timeout`` seconds.
    An existing collection is reopened with its settings (no re-embedding); ``analyzer``,
    ``bm25_params`` and ``vector_index`` apply to a new one (``vector_index`` and
    ``vector_search_params`` take the in-process store's FAISS names, mapped by
    :class:`DenseIndex`; Milvus Lite builds only :data:`LITE_INDEXES` and falls back to ``FLAT``
    for others, saying so in one warning). ``consistency`` is the Milvus consistency level of
    queries (see :data:`CONSISTENCY_LEVELS`). :meth:`close` releases the connection.
    """

    def __init__(
        self,
        uri: str,
        collection_name: str,
        *,
        analyzer: Analyzer | None = None,
        bm25_params: BM25Params | None = None,
        vector_index: str | None = None,
        vector_search_params: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = CONNECT_TIMEOUT,
        consistency: str = "Strong",
        **connection: Any,
    ) -> None:
        """Connect, and read the collection's settings if it exists."""
        try:
            from pymilvus import MilvusClient
        except ImportError:
            raise MissingDependencyError('MilvusStore needs pymilvus: pip install "langchain-fusion[milvus]"') from None
        if bm25_params is not None and bm25_params.method != "lucene":
            raise InvalidParameterError(
                f"Milvus computes the lucene BM25 variant only; got method={bm25_params.method!r}"
            )
        self.collection_name = collection_name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.uri = uri
        self._closed = False
        self.consistency = consistency_level(consistency)
        self.dense = DenseIndex.parse(vector_index, vector_search_params)
        self._requested = vector_index or "Flat"
        self.is_lite = not uri.startswith(("http://", "https://", "tcp://", "grpc://"))
        deadline = time.monotonic() + (_LITE_START_SECONDS if self.is_lite else 0.0)
        while True:
            try:
                self.client = MilvusClient(uri=uri, timeout=connect_timeout, **connection)
                exists = self.client.has_collection(collection_name, timeout=connect_timeout)
                break
            except Exception as exc:
                # Milvus Lite starts a server process and opens its socket a moment later; on a
                # busy machine the first connection can come too early, so a lite file is retried.
                if getattr(exc, "code", None) == _CONNECT_FAILED and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise FusionError(f"cannot reach Milvus at {uri!r}: {_reason(exc)}") from None
        self._settings = StoreSettings(analyzer=analyzer or Analyzer(), bm25_params=bm25_params or BM25Params())
        self._created = exists
        self.null_keys = True
        """Whether the collection has the ``null_keys`` field that filters on None read (format 1 on)."""
        if not exists and self.is_lite and self.dense.index_type not in LITE_INDEXES:
            logger.warning(
                "Milvus Lite builds only %s indexes: vector_index %r falls back to exact FLAT (a server builds %s)",
                ", ".join(LITE_INDEXES),
                vector_index,
                self.dense.index_type,
            )
            self.dense = DenseIndex()
        if exists:
            stored, record, layout = self._read_settings()
            self.null_keys = layout >= 1
            self._requested = str(record.get("requested", "Flat"))
            if vector_index is not None and vector_index != self._requested:
                raise FusionError(
                    f"collection {collection_name!r} was built with vector_index {self._requested!r}, "
                    f"not {vector_index!r}"
                )
            self.dense = DenseIndex.recorded(record, vector_search_params)
            for name, given in (("analyzer", analyzer), ("bm25_params", bm25_params)):
                if given is not None and given != getattr(stored, name):
                    raise FusionError(
                        f"collection {collection_name!r} was built with {name} {getattr(stored, name)!r}, not {given!r}"
                    )
            self._settings = stored

    # --- settings --------------------------------------------------------------------------------

    def _read_settings(self) -> tuple[StoreSettings, Mapping[str, Any], int]:
        """The settings the collection's description records, its dense index record (``{}`` before one), its format."""
        described = self._call("describe_collection", collection_name=self.collection_name)
        try:
            description = json.loads(described.get("description") or "")
            record = description["langchain_fusion"]
            if isinstance(record, dict) and isinstance(record.get("analyzer"), dict):
                record = {**record, "analyzer": Analyzer.from_saved(record["analyzer"])}  # saved before an option
            dense = description.get("vector_index")
            layout = description.get("format", 0)
            return StoreSettings.model_validate(record), dense if isinstance(dense, dict) else {}, int(layout)
        except (ValueError, KeyError, TypeError, ValidationError):
            raise FusionError(
                f"collection {self.collection_name!r} was not made by langchain-fusion (no settings in its "
                "description); choose another collection_name"
            ) from None

    @property
    def settings(self) -> StoreSettings:
        """How the rows were (or will be) indexed."""
        return self._settings

    @property
    def vector_index(self) -> str:
        """The dense index as built (or to be built), e.g. ``FLAT`` or ``HNSW M=32 efConstruction=128, ef=128``."""
        return self.dense.describe()

    def configure(self, settings: StoreSettings) -> None:
        """Record the settings; refused once the collection exists with other ones."""
        if self._created and settings.model_copy(update={"dimension": self._settings.dimension}) != self._settings:
            raise FusionError(f"collection {self.collection_name!r} holds rows indexed with other settings")
        if settings.bm25_params.method != "lucene":
            raise InvalidParameterError("Milvus computes the lucene BM25 variant only")
        self._settings = settings.model_copy(update={"dimension": self._settings.dimension})

    def _create(self, dimension: int) -> None:
        from pymilvus import DataType, Function, FunctionType

        settings = self._settings.model_copy(update={"dimension": dimension})
        description = json.dumps(
            {
                "langchain_fusion": settings.model_dump(mode="json"),
                "vector_index": {**self.dense.record(), "requested": self._requested},
                "library": _library_version(),
                "format": FORMAT_VERSION,
            }
        )
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False, description=description)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field("text", DataType.VARCHAR, max_length=65535)
        schema.add_field(
            "bm25_text",
            DataType.VARCHAR,
            max_length=65535,
            enable_analyzer=True,
            analyzer_params={"tokenizer": "whitespace"},
        )
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
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
        index = self.client.prepare_index_params()
        index.add_index(
            field_name="vector", index_type=self.dense.index_type, metric_type="IP", params=dict(self.dense.build)
        )
        params = settings.bm25_params
        index.add_index(
            field_name="sparse",
            index_type="SPARSE_INVERTED_INDEX",
            metric_type="BM25",
            params={"bm25_k1": params.k1, "bm25_b": params.b},
        )
        self._call(
            "create_collection",
            collection_name=self.collection_name,
            schema=schema,
            index_params=index,
            consistency_level="Strong",
        )
        self._settings, self._created = settings, True

    @property
    def exists(self) -> bool:
        """Whether the collection exists (it is created by the first upsert)."""
        return bool(self._created)

    def drop(self) -> None:
        """Delete the collection and its info record from the server (irreversible)."""
        for name in (self.collection_name, self.collection_name + INFO_SUFFIX):
            if self._call("has_collection", collection_name=name):
                self._call("drop_collection", collection_name=name)
        self._created = False
        self._settings = StoreSettings(analyzer=self._settings.analyzer, bm25_params=self._settings.bm25_params)

    # --- the info record -------------------------------------------------------------------------

    def read_info(self) -> dict[str, Any]:
        """The record last given to :meth:`write_info` (``{}`` if none, or if it is unreadable)."""
        name = self.collection_name + INFO_SUFFIX
        if not self._call("has_collection", collection_name=name):
            return {}
        rows = [row for page in self._pages("", ["piece"], collection=name) for row in page]
        try:
            pieces = sorted((int(row["id"]), row["piece"]) for row in rows)
            if [n for n, _ in pieces] != list(range(len(pieces))):
                raise ValueError("missing pieces")
            record = json.loads("".join(piece for _, piece in pieces)) if pieces else {}
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("the info record of %r is unreadable (%s); starting from an empty one", name, exc)
            return {}
        return record

    def write_info(self, info: Mapping[str, Any]) -> None:
        """Keep ``info`` (a JSON-able mapping, e.g. which files were indexed) next to the collection.

        The record is split over rows of a side collection, ``<collection>_fusion_info``; a
        reader racing a writer may see a torn record, which :meth:`read_info` treats as empty.
        """
        from pymilvus import DataType

        try:
            text = json.dumps(dict(info), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise FusionError(f"the info record must be JSON-serialisable ({exc})") from None
        name = self.collection_name + INFO_SUFFIX
        if not self._call("has_collection", collection_name=name):
            schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
            schema.add_field("piece", DataType.VARCHAR, max_length=65535)
            schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs a vector field
            index = self.client.prepare_index_params()
            index.add_index(field_name="unused", index_type="FLAT", metric_type="IP")
            self._call(
                "create_collection", collection_name=name, schema=schema, index_params=index, consistency_level="Strong"
            )
        pieces = [text[i : i + INFO_PIECE_CHARS] for i in range(0, len(text), INFO_PIECE_CHARS)] or [""]
        rows = [{"id": str(n), "piece": piece, "unused": [1.0, 0.0]} for n, piece in enumerate(pieces)]
        for start in range(0, len(rows), BATCH):
            self._call("upsert", collection_name=name, data=rows[start : start + BATCH])
        self._call("delete", collection_name=name, filter=f"id not in [{','.join(_literal(r['id']) for r in rows)}]")

    # --- the seam ------------------------------------------------------------------------------------

    def view(self) -> MilvusView:
        """A view: searches and reads by id at the store's consistency level (no snapshot across calls)."""
        return MilvusView(self)

    def upsert(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> None:
        """Upsert rows (never insert: Milvus keeps duplicate keys on insert)."""
        if not documents:
            return
        ids = [doc.id for doc in documents]
        if any(not isinstance(i, str) or not i or "\n" in i or "\r" in i for i in ids) or len(set(ids)) != len(ids):
            raise FusionError("every row needs a distinct, non-empty string id without line breaks")
        if self.is_lite and any("'" in (i or "") for i in ids):
            # Milvus Lite's local engine builds SQL from upserted ids and fails on a quote.
            raise FusionError(
                "Milvus Lite cannot upsert ids containing an apostrophe (') (a Milvus server can); "
                "give those documents other ids"
            )
        dimension = int(vectors.shape[1])
        if self._settings.dimension is not None and self._settings.dimension != dimension:
            raise FusionError(f"expected vectors of dimension {self._settings.dimension}; got {dimension}")
        analyzer = self._settings.analyzer
        rows = []
        for doc, vector, text in zip(documents, vectors, bm25_texts, strict=True):
            try:
                metadata = json.loads(json.dumps(doc.metadata))
            except (TypeError, ValueError) as exc:
                raise FusionError(f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc})") from None
            rows.append(
                {
                    "id": doc.id,
                    "text": doc.page_content,
                    "bm25_text": " ".join(tokenize(analyzer, text)),
                    "vector": np.asarray(vector, dtype=np.float32).tolist(),
                    "metadata": metadata,
                    **({"null_keys": {k: True for k, v in metadata.items() if v is None}} if self.null_keys else {}),
                }
            )
        if not self._created:
            self._create(dimension)
        for start in range(0, len(rows), BATCH):
            self._call("upsert", collection_name=self.collection_name, data=rows[start : start + BATCH])

    def delete(self, ids: Sequence[str]) -> int:
        """Delete rows by id; returns how many existed."""
        if not self._created or not ids:
            return 0
        usable = list(dict.fromkeys(i for i in ids if "\n" not in i and "\r" not in i))
        present = 0
        for start in range(0, len(usable), PAGE):
            found = self._existing(usable[start : start + PAGE])
            if found:
                answer = self._call("delete", collection_name=self.collection_name, filter=_id_filter(found))
                reported = int(answer.get("delete_count", 0)) if isinstance(answer, Mapping) else len(answer)
                if reported != len(found):
                    # Milvus Lite reports the rows it deleted, a server the ids it was given: either way a
                    # shortfall is checked against what is left (a concurrent delete explains it harmlessly).
                    left = self._existing(found)
                    if left:
                        raise FusionError(
                            f"Milvus deleted {reported:,} of {len(found):,} rows of {self.collection_name!r}; "
                            f"{len(left):,} are still there (e.g. {left[0]!r}): try again"
                        )
            present += len(found)
        return present

    def clear(self) -> int:
        """Delete every row with one delete by expression (the collection, its settings and record stay)."""
        if not self._created:
            return 0
        before = self.count()
        if before:
            self._call("delete", collection_name=self.collection_name, filter='id != ""')
        left = self.count()
        if left:
            raise FusionError(
                f"deleting every row of {self.collection_name!r} left {left:,} of {before:,} rows "
                "(another client writing at the same time?): try again"
            )
        return before

    def _existing(self, ids: Sequence[str]) -> list[str]:
        """Which of at most :data:`PAGE` distinct ``ids`` are rows of the collection."""
        found = self._call(
            "query", collection_name=self.collection_name, filter=_id_filter(ids), output_fields=["id"], limit=len(ids)
        )
        return [str(row["id"]) for row in found]

    # --- plumbing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection; later calls fail in one line (closing twice is harmless)."""
        if not self._closed:
            self._closed = True
            self.client.close()

    def check_reachable(self) -> None:
        """A FusionError naming the URI unless the server answers within :attr:`connect_timeout` seconds."""
        try:
            self._call("has_collection", collection_name=self.collection_name, timeout=self.connect_timeout)
        except FusionError as exc:
            raise FusionError(f"Milvus at {self.uri!r} does not answer: {exc}") from None

    def _call(self, method: str, **kwargs: Any) -> Any:
        if self._closed:
            raise FusionError(f"the Milvus store of {self.collection_name!r} is closed")
        kwargs.setdefault("timeout", self.timeout)
        try:
            return getattr(self.client, method)(**kwargs)
        except (FusionError, InvalidParameterError):
            raise
        except Exception as exc:
            raise FusionError(f"Milvus {method} on {self.collection_name!r} failed: {_reason(exc)}") from None

    def count(self, expression: str = "") -> int:
        """Rows in the collection (those matching the Milvus ``expression`` when one is given)."""
        if not self._created:
            return 0
        result = self._call(
            "query", collection_name=self.collection_name, filter=expression, output_fields=["count(*)"]
        )
        return int(result[0]["count(*)"]) if result else 0

    def _pages(self, expression: str, fields: list[str], *, collection: str | None = None) -> Iterator[list[Any]]:
        """Every row matching ``expression`` (every row for ''), a page at a time in id order.

        A cursor on the primary key (``id > last``) instead of an offset, so no page reaches past
        Milvus's result window however many rows match. The query carries the options pymilvus's
        own ``query_iterator`` sends, under which the server returns the smallest ids first (that
        is what makes ``id > last`` resume exactly); pymilvus's iterator itself is not used because
        it writes the cursor id into the expression unescaped (an id with a quote breaks it).
        """
        name = collection or self.collection_name
        last: str | None = None
        while True:
            parts = [f"id > {_literal(last)}"] if last is not None else []
            parts += [expression] if expression else []
            page = self._call(
                "query",
                collection_name=name,
                filter=" and ".join(f"({p})" for p in parts) or 'id != ""',
                output_fields=list(dict.fromkeys(["id", *fields])),
                limit=PAGE,
                iterator="True",
                reduce_stop_for_best="True",
            )
            if not page:  # a short page is not the end: the server may stop a page early to keep id order
                return
            yield list(page)
            last = max(str(row["id"]) for row in page)

    def read_all(self, expression: str, fields: list[str]) -> list[Any]:
        """Every row matching ``expression`` ('' for all), checked against a count: a short read is an error."""
        if not self._created:
            return []
        expected = self.count(expression)
        rows = [row for page in self._pages(expression, fields) for row in page]
        if len(rows) != expected:
            matching = f" matching {expression}" if expression else ""
            raise FusionError(
                f"expected {expected:,} rows of {self.collection_name!r}{matching}, read {len(rows):,} "
                "(another client writing at the same time?): try again"
            )
        return rows


def _library_version() -> str:
    from langchain_fusion import __version__

    return __version__


def _reason(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:300]


class MilvusView(StoreView):
    """Reads through one store; keys are handles assigned to ids on first sight in this view."""

    def __init__(self, store: MilvusStore) -> None:
        """A view of ``store``."""
        self.store = store
        self._ids: list[str] = []
        self._keys: dict[str, int] = {}
        self._rows: dict[str, Mapping[str, Any]] = {}
        self._documents: dict[str, Document] = {}
        self._vectors: dict[str, Any] = {}
        self._length: int | None = None

    @property
    def settings(self) -> StoreSettings:
        """How the rows were indexed."""
        return self.store.settings

    def mask_capable(self) -> bool:
        """Callables cannot be sent to a server."""
        return False

    def known_empty(self) -> bool:
        """True only before the collection exists: an existing one is searched without counting it first."""
        return not self.store._created

    def sides_in_parallel(self, where: Where | None) -> bool:
        """Both searches are in flight at once: a query waits for the slower, not for the sum."""
        return True

    def complete_both(
        self, vector: SideScorer, vector_keys: Keys, bm25: SideScorer, bm25_keys: Keys
    ) -> tuple[Scores, Scores]:
        """Both sides' missing scores from one id-restricted BM25 search that also returns the stored vectors.

        The rows missing a vector score were found by BM25, so they match a query term and that
        search returns them with their vectors; one it does not return (deleted by another
        client since) has its vector asked for on its own, and scores 0 if it is gone.
        """
        if not (isinstance(vector, MilvusVectorScorer) and isinstance(bm25, MilvusBM25Scorer)) or bm25._empty():
            return vector.scores(vector_keys), bm25.scores(bm25_keys)
        ids = list(dict.fromkeys([*self.ids(vector_keys), *self.ids(bm25_keys)]))
        found: dict[str, float] = {}
        for start in range(0, len(ids), PAGE):
            chunk = ids[start : start + PAGE]
            for hit in bm25._search(len(chunk), _id_filter(chunk), ["id", "vector"]):
                entity = hit.get("entity", hit)
                found[str(hit["id"])] = float(hit["distance"]) / bm25.factor
                self._vectors[str(hit["id"])] = entity["vector"]
        bm25_scores = np.fromiter((found.get(i, 0.0) for i in self.ids(bm25_keys)), dtype=np.float64)
        return vector.scores(vector_keys), bm25_scores

    def __len__(self) -> int:
        if self._length is None:
            self._length = self.store.count()
        return self._length

    def key(self, doc_id: str) -> int:
        """The key of ``doc_id`` in this view (assigned on first sight)."""
        found = self._keys.get(doc_id)
        if found is None:
            found = self._keys[doc_id] = len(self._ids)
            self._ids.append(doc_id)
        return found

    def ids(self, keys: Keys) -> list[str]:
        """The ids of ``keys``."""
        return [self._ids[int(k)] for k in keys]

    def remember(self, hits: Sequence[Mapping[str, Any]]) -> None:
        """Keep the rows that searches return, so results need no second round trip (documents made when asked)."""
        for hit in hits:
            entity = hit.get("entity", hit)
            if "text" in entity:
                self._rows.setdefault(str(hit.get("id", entity.get("id"))), entity)

    def _document(self, doc_id: str) -> Document:
        found = self._documents.get(doc_id)
        if found is None:
            entity = self._rows[doc_id]
            found = self._documents[doc_id] = Document(
                id=doc_id, page_content=entity["text"], metadata=dict(entity.get("metadata") or {})
            )
        return found

    def _query(self, expression: str, fields: list[str], **paging: int) -> list[dict[str, Any]]:
        if not self.store._created:
            return []
        return list(
            self.store._call(
                "query",
                collection_name=self.store.collection_name,
                filter=expression,
                output_fields=fields,
                consistency_level=self.store.consistency,
                **paging,
            )
        )

    def _by_ids(self, ids: Sequence[str], fields: list[str]) -> list[dict[str, Any]]:
        """The rows of these ids that exist, :data:`PAGE` ids per query."""
        distinct = list(dict.fromkeys(ids))
        rows: list[dict[str, Any]] = []
        for start in range(0, len(distinct), PAGE):
            chunk = distinct[start : start + PAGE]
            rows.extend(self._query(_id_filter(chunk), fields, limit=len(chunk)))
        return rows

    def vector(self, query_vector: FloatMatrix) -> MilvusVectorScorer:
        """The vector side for one query."""
        return MilvusVectorScorer(self, query_vector)

    def bm25(self, query: str) -> MilvusBM25Scorer:
        """The BM25 side for one query."""
        return MilvusBM25Scorer(self, query)

    def documents(self, keys: Keys) -> list[Document]:
        """The documents of ``keys`` (fetched once per view)."""
        ids = self.ids(keys)
        wanted = list(dict.fromkeys(i for i in ids if i not in self._rows))
        if wanted:
            self.remember(self._by_ids(wanted, _OUTPUT))
            gone = [i for i in wanted if i not in self._rows]
            if gone:
                raise FusionError(
                    f"expected {len(wanted):,} documents from {self.store.collection_name!r}, read "
                    f"{len(wanted) - len(gone):,} ({gone[0]!r} is gone: deleted by another client?): try again"
                )
        return [self._document(i) for i in ids]

    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored vectors of ``keys`` (those a search of this view returned are not asked for again)."""
        ids = self.ids(keys)
        wanted = [i for i in ids if i not in self._vectors]
        found = {row["id"]: row["vector"] for row in self._by_ids(wanted, ["id", "vector"])} if wanted else {}
        found.update((i, self._vectors[i]) for i in ids if i in self._vectors)
        dimension = self.settings.dimension or 0
        out = np.zeros((len(ids), dimension), dtype=np.float32)
        for position, doc_id in enumerate(ids):
            # A row another client deleted since this view saw it has no vector: it scores 0.
            if doc_id in found:
                out[position] = found[doc_id]
        return out

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """Keys of the ids that exist (-1 for the others)."""
        rows = self._by_ids([i for i in ids if "\n" not in i and "\r" not in i], _OUTPUT)
        self.remember(rows)
        present = {row["id"] for row in rows}
        return np.fromiter((self.key(i) if i in present else -1 for i in ids), dtype=np.int64, count=len(ids))

    def select(self, where: Where) -> Keys:
        """Keys of every row allowed by ``where``."""
        rows = self.store.read_all(filter_expression(where, self.store.null_keys), ["id"])
        return np.asarray(sorted(self.key(row["id"]) for row in rows), dtype=np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """Chunks of ``source`` at these positions."""
        if not chunk_indexes:
            return {}
        expression = (
            f"metadata[{_literal(keys_.SOURCE)}] == {_literal(source)} and "
            f"metadata[{_literal(keys_.CHUNK_INDEX)}] in [{','.join(str(int(i)) for i in chunk_indexes)}]"
        )
        rows = self._query(expression, _OUTPUT)
        self.remember(rows)
        out: dict[int, Document] = {}
        for row in rows:
            doc = self._document(row["id"])
            out.setdefault(int(doc.metadata[keys_.CHUNK_INDEX]), doc)
        return out

    def iter_documents(self) -> Iterator[Document]:
        """Every document, in id order."""
        rows = self.store.read_all("", _OUTPUT)
        self.remember(rows)
        return iter([self._document(row["id"]) for row in rows])


class _MilvusScorer(ABC):
    """Top-k on one field of the collection; subclasses say which field, metric and query data."""

    field = ""
    metric = ""

    def __init__(self, view: MilvusView) -> None:
        self.view = view

    @abstractmethod
    def _data(self) -> Any:
        """The search data for this scorer's query (a vector, or the query's tokens)."""

    def _scale(self, scores: list[float]) -> list[float]:
        return scores

    def _params(self, limit: int) -> dict[str, Any]:
        """The index's search parameters for a search of ``limit`` rows."""
        return {}

    def _fields(self) -> list[str]:
        """The fields a top-k search returns."""
        return _OUTPUT

    def _scores(self, hits: list[dict[str, Any]]) -> list[float]:
        """The scores of the hits of a top-k search."""
        return self._scale([float(h["distance"]) for h in hits])

    def _search(self, limit: int, expression: str, fields: list[str]) -> list[dict[str, Any]]:
        store = self.view.store
        if not store._created or limit <= 0:
            return []
        result = store._call(
            "search",
            collection_name=store.collection_name,
            data=[self._data()],
            anns_field=self.field,
            limit=limit,
            filter=expression,
            search_params={"metric_type": self.metric, "params": self._params(limit)},
            consistency_level=store.consistency,
            output_fields=fields,
        )
        return list(result[0]) if result else []

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` best rows allowed by ``where`` (``k=None`` is refused on Milvus)."""
        if k is None:
            raise InvalidParameterError(
                "fetch_k=None scores the whole corpus, which on Milvus would ship every row: use a bounded fetch_k"
            )
        if self._empty():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if k > RESULT_WINDOW:
            rows = len(self.view)
            if rows > RESULT_WINDOW:
                raise InvalidParameterError(
                    f"Milvus returns at most {RESULT_WINDOW:,} rows per search and this collection holds {rows:,}: "
                    f"a pool of {k:,} candidates per side (the larger of fetch_k and k) would be cut; "
                    f"use fetch_k and k of at most {RESULT_WINDOW:,}"
                )
            k = RESULT_WINDOW  # the whole collection fits in one search: nothing is cut
        hits = self._search(k, filter_expression(where, self.view.store.null_keys), self._fields())
        self.view.remember(hits)
        pairs = sorted(
            ((self.view.key(str(h["id"])), s) for h, s in zip(hits, self._scores(hits), strict=True)),
            key=lambda p: (-p[1], p[0]),
        )
        return np.asarray([p[0] for p in pairs], dtype=np.int64), np.asarray([p[1] for p in pairs], dtype=np.float64)

    def _empty(self) -> bool:
        return False


class MilvusVectorScorer(_MilvusScorer):
    """Cosine similarity on the dense field; completion by the stored vectors."""

    field, metric = "vector", "IP"

    def __init__(self, view: MilvusView, query_vector: FloatMatrix) -> None:
        super().__init__(view)
        self.query_vector = np.asarray(query_vector[0], dtype=np.float32)

    def _data(self) -> Any:
        return self.query_vector.tolist()

    def _params(self, limit: int) -> dict[str, Any]:
        search = dict(self.view.store.dense.search)
        if "ef" in search:
            search["ef"] = max(search["ef"], limit)  # Milvus refuses an HNSW search narrower than its top-k
        return search

    def _fields(self) -> list[str]:
        # An approximate index only proposes candidates: their scores come from the stored vectors, as in process.
        return _OUTPUT if self.view.store.dense.exact else [*_OUTPUT, "vector"]

    def _scores(self, hits: list[dict[str, Any]]) -> list[float]:
        if self.view.store.dense.exact:
            return super()._scores(hits)
        for hit in hits:
            self.view._vectors[str(hit["id"])] = hit.get("entity", hit)["vector"]
        keys = np.fromiter((self.view.key(str(h["id"])) for h in hits), dtype=np.int64, count=len(hits))
        return [float(score) for score in self.scores(keys)]

    def scores(self, keys: Keys) -> Scores:
        """Exact similarities of ``keys`` (dot products of the stored vectors)."""
        if keys.size == 0:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self.view.vectors(keys) @ self.query_vector, dtype=np.float64)


class MilvusBM25Scorer(_MilvusScorer):
    """Milvus's BM25 over our analyzer's tokens, divided by ``k1 + 1`` (the in-process scale)."""

    field, metric = "sparse", "BM25"

    def __init__(self, view: MilvusView, query: str) -> None:
        super().__init__(view)
        self.tokens = " ".join(tokenize(view.settings.analyzer, query))
        self.factor = 1.0 + view.settings.bm25_params.k1

    def _data(self) -> Any:
        return self.tokens

    def _empty(self) -> bool:
        return not self.tokens

    def _scale(self, scores: list[float]) -> list[float]:
        return [s / self.factor for s in scores]

    def scores(self, keys: Keys) -> Scores:
        """BM25 of ``keys`` with the collection's statistics (0 for rows without a query term)."""
        out = np.zeros(keys.size, dtype=np.float64)
        if keys.size == 0 or self._empty():
            return out
        ids = self.view.ids(keys)
        position = {doc_id: i for i, doc_id in enumerate(ids)}
        for start in range(0, len(ids), PAGE):
            chunk = ids[start : start + PAGE]
            hits = self._search(len(chunk), _id_filter(chunk), ["id"])
            for hit in hits:
                out[position[str(hit["id"])]] = float(hit["distance"]) / self.factor
        return out
