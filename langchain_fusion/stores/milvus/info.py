"""The record kept beside a collection (e.g. which files an ``index`` run indexed), in a side collection."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.milvus.connection import Calls
from langchain_fusion.stores.milvus.expressions import literal
from langchain_fusion.stores.milvus.reads import pages
from langchain_fusion.stores.milvus.writes import BATCH

logger = logging.getLogger(__name__)

INFO_SUFFIX = "_fusion_info"
"""The side collection ``<collection>_fusion_info`` keeps :func:`write_info`'s record."""

INFO_PIECE_CHARS = 16000
"""Characters of the info record's JSON per row (a VARCHAR holds 65,535 bytes)."""


def info_collection(store: Calls) -> str:
    """The name of the side collection of ``store``'s collection."""
    return store.collection_name + INFO_SUFFIX


def read_info(store: Calls) -> dict[str, Any]:
    """The record last given to :func:`write_info` (``{}`` if none, or if it is unreadable)."""
    name = info_collection(store)
    if not store.call("has_collection", collection_name=name):
        return {}
    rows = [row for page in pages(store, "", ["piece"], collection=name) for row in page]
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


def write_info(store: Calls, client: Any, info: Mapping[str, Any]) -> None:
    """Keep ``info`` (a JSON-able mapping, e.g. which files were indexed) next to the collection.

    The record is split over rows of a side collection, ``<collection>_fusion_info``; a
    reader racing a writer may see a torn record, which :func:`read_info` treats as empty.
    """
    from pymilvus import DataType

    try:
        text = json.dumps(dict(info), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FusionError(f"the info record must be JSON-serialisable ({exc})") from None
    name = info_collection(store)
    if not store.call("has_collection", collection_name=name):
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
        schema.add_field("piece", DataType.VARCHAR, max_length=65535)
        schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs a vector field
        index = client.prepare_index_params()
        index.add_index(field_name="unused", index_type="FLAT", metric_type="IP")
        store.call(
            "create_collection", collection_name=name, schema=schema, index_params=index, consistency_level="Strong"
        )
    pieces = [text[i : i + INFO_PIECE_CHARS] for i in range(0, len(text), INFO_PIECE_CHARS)] or [""]
    rows = [{"id": str(n), "piece": piece, "unused": [1.0, 0.0]} for n, piece in enumerate(pieces)]
    for start in range(0, len(rows), BATCH):
        store.call("upsert", collection_name=name, data=rows[start : start + BATCH])
    store.call("delete", collection_name=name, filter=f"id not in [{','.join(literal(r['id']) for r in rows)}]")
