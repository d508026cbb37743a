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
from langchain_fusion.stores.local.tokens import tokenize
from langchain_fusion.stores.milvus import reads
from langchain_fusion.stores.milvus.connection import Calls
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


def rows(
    documents: Sequence[Document],
    vectors: FloatMatrix,
    bm25_texts: Sequence[str],
    analyzer: Analyzer,
    null_keys: bool,
) -> list[dict[str, Any]]:
    """The collection's rows for these documents (BM25 text as our analyzer's tokens joined by spaces)."""
    out = []
    for doc, vector, text in zip(documents, vectors, bm25_texts, strict=True):
        try:
            metadata = json.loads(json.dumps(doc.metadata))
        except (TypeError, ValueError) as exc:
            raise FusionError(f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc})") from None
        out.append(
            {
                "id": doc.id,
                "text": doc.page_content,
                "bm25_text": " ".join(tokenize(analyzer, text)),
                "vector": np.asarray(vector, dtype=np.float32).tolist(),
                "metadata": metadata,
                **({"null_keys": {k: True for k, v in metadata.items() if v is None}} if null_keys else {}),
            }
        )
    return out


def upsert(store: Calls, data: list[dict[str, Any]]) -> None:
    """Upsert ``data`` :data:`BATCH` rows per call (never insert: Milvus keeps duplicate keys on insert)."""
    for start in range(0, len(data), BATCH):
        store.call("upsert", collection_name=store.collection_name, data=data[start : start + BATCH])


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
