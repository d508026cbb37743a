"""Writes: rows built from documents, upserted in batches; deletes by id and of every row, each checked."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix
from langchain_fusion.stores.local.tokens import joined_tokens
from langchain_fusion.stores.milvus import reads
from langchain_fusion.stores.milvus.connection import UPSERT_COLUMNS, Calls, rows_of
from langchain_fusion.stores.milvus.expressions import id_filter

BATCH = 1000
"""Rows per upsert call."""


def check_ids(documents: Sequence[Document], is_lite: bool) -> None:
    """A FusionError unless every document has a distinct, usable id."""
    ids = [doc.id for doc in documents]
    if any(not isinstance(i, str) or not i or "\n" in i or "\r" in i for i in ids) or len(set(ids)) != len(ids):
        raise FusionError("every row needs a distinct, non-empty string id without line breaks")
    if is_lite and any("'" in (i or "") for i in ids):
        # Milvus Lite's local engine builds SQL from upserted ids and fails on a quote.
        raise FusionError(
            "Milvus Lite cannot upsert ids containing an apostrophe (') (a Milvus server can); "
            "give those documents other ids"
        )


def columns(
    documents: Sequence[Document],
    vectors: FloatMatrix,
    bm25_texts: Sequence[str],
    analyzer: Analyzer,
    null_keys: bool,
) -> dict[str, list[Any]]:
    """The collection's fields for these documents, one list per field (row i is document i).

    The BM25 text is our analyzer's tokens joined by spaces; metadata are JSON texts. Built a
    column at a time: each distinct word analysed and joined once, one ``tolist()`` for the matrix.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if not len(documents) == len(matrix) == len(bm25_texts):
        raise FusionError(
            f"got {len(documents)} documents, {len(matrix)} vectors and {len(bm25_texts)} BM25 texts: "
            "pass one of each per row"
        )
    out: dict[str, list[Any]] = {
        "id": [doc.id for doc in documents],
        "text": [doc.page_content for doc in documents],
        "bm25_text": joined_tokens(analyzer, bm25_texts),
        "vector": matrix.tolist(),
        "metadata": _json_metadata(documents),
    }
    if null_keys:
        # json.dumps names the keys as the metadata's JSON does (a non-string key becomes a string).
        out["null_keys"] = [json.dumps({k: True for k, v in doc.metadata.items() if v is None}) for doc in documents]
    return out


def rows(
    documents: Sequence[Document],
    vectors: FloatMatrix,
    bm25_texts: Sequence[str],
    analyzer: Analyzer,
    null_keys: bool,
) -> list[dict[str, Any]]:
    """The collection's rows for these documents, as dicts (e.g. for a bulk writer): :func:`columns` by row."""
    return rows_of(columns(documents, vectors, bm25_texts, analyzer, null_keys), ("metadata", "null_keys"))


def _json_metadata(documents: Sequence[Document]) -> list[str | dict[str, Any]]:
    """Each document's metadata as a JSON text (pymilvus sends it as is), or a FusionError naming one that is not JSON.

    Metadata with NaN or an infinity stays a dict of what JSON reads back: pymilvus writes those as null.
    """
    out: list[str | dict[str, Any]] = []
    for doc in documents:
        try:
            out.append(json.dumps(doc.metadata, allow_nan=False))
        except ValueError:
            out.append(json.loads(json.dumps(doc.metadata)))
        except TypeError as exc:
            raise FusionError(f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc})") from None
    return out


def upsert(store: Calls, data: Mapping[str, list[Any]]) -> None:
    """Upsert :func:`columns` :data:`BATCH` rows per call (never insert: Milvus keeps duplicate keys on insert).

    Sent as columns: pymilvus's row path checks every character of every string (half the client's CPU).
    """
    fields = store.call("describe_collection", collection_name=store.collection_name)
    inputs = [f for f in fields["fields"] if not f.get("is_function_output") and f["name"] in data]
    total = len(data["id"])
    for start in range(0, total, BATCH):
        entities = [
            {"name": f["name"], "type": f["type"], "values": data[f["name"]][start : start + BATCH]} for f in inputs
        ]
        answer = store.call(UPSERT_COLUMNS, collection_name=store.collection_name, entities=entities, schema=fields)
        sent = min(BATCH, total - start)
        if int(answer.upsert_count) != sent:
            raise FusionError(
                f"Milvus upserted {answer.upsert_count:,} of {sent:,} rows into {store.collection_name!r}: try again"
            )


def existing(store: Calls, ids: Sequence[str]) -> list[str]:
    """Which of at most :data:`~reads.PAGE` distinct ``ids`` are rows of the collection."""
    found = store.call(
        "query", collection_name=store.collection_name, filter=id_filter(ids), output_fields=["id"], limit=len(ids)
    )
    return [str(row["id"]) for row in found]


def delete(store: Calls, ids: Sequence[str]) -> int:
    """Delete rows by id, :data:`~reads.PAGE` at a time; returns how many existed."""
    usable = list(dict.fromkeys(i for i in ids if "\n" not in i and "\r" not in i))
    present = 0
    for chunk in reads.chunks(usable):
        found = existing(store, chunk)
        if found:
            answer = store.call("delete", collection_name=store.collection_name, filter=id_filter(found))
            reported = int(answer.get("delete_count", 0)) if isinstance(answer, Mapping) else len(answer)
            if reported != len(found):
                # Milvus Lite reports the rows it deleted, a server the ids it was given: either way a
                # shortfall is checked against what is left (a concurrent delete explains it harmlessly).
                left = existing(store, found)
                if left:
                    raise FusionError(
                        f"Milvus deleted {reported:,} of {len(found):,} rows of {store.collection_name!r}; "
                        f"{len(left):,} are still there (e.g. {left[0]!r}): try again"
                    )
        present += len(found)
    return present


def clear(store: Calls) -> int:
    """Delete every row with one delete by expression; returns how many there were."""
    before = store.count()
    if before:
        store.call("delete", collection_name=store.collection_name, filter='id != ""')
    left = store.count()
    if left:
        raise FusionError(
            f"deleting every row of {store.collection_name!r} left {left:,} of {before:,} rows "
            "(another client writing at the same time?): try again"
        )
    return before
