"""Bulk reads past Milvus's result window: a cursor on the primary key, and counts that check every read.

Milvus returns at most :data:`RESULT_WINDOW` rows per search or query (offset included), and an
unlimited query stops short of it. Bulk reads page with ``id > last`` instead of an offset, id
lists go :data:`PAGE` at a time, and a bulk read is checked against a count: a short read is an
error, never a silent loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.milvus.connection import Calls
from langchain_fusion.stores.milvus.expressions import literal

RESULT_WINDOW = 16384
"""The most rows Milvus returns for one search (top-k) or query (offset + limit)."""

PAGE = 4096
"""Rows per page of a cursor read, and ids per ``id in [...]`` expression: well inside the window."""


def chunks(items: list[str]) -> Iterator[list[str]]:
    """``items`` :data:`PAGE` at a time."""
    for start in range(0, len(items), PAGE):
        yield items[start : start + PAGE]


def count_rows(store: Calls, expression: str = "", collection: str | None = None) -> int:
    """Rows of the collection (those matching the Milvus ``expression`` when one is given)."""
    result = store.call(
        "query", collection_name=collection or store.collection_name, filter=expression, output_fields=["count(*)"]
    )
    return int(result[0]["count(*)"]) if result else 0


def pages(store: Calls, expression: str, fields: list[str], *, collection: str | None = None) -> Iterator[list[Any]]:
    """Every row matching ``expression`` (every row for ''), a page at a time in id order.

    A cursor on the primary key (``id > last``) instead of an offset, so no page reaches past
    Milvus's result window however many rows match. The query carries the options pymilvus's
    own ``query_iterator`` sends, under which the server returns the smallest ids first (that
    is what makes ``id > last`` resume exactly); pymilvus's iterator itself is not used because
    it writes the cursor id into the expression unescaped (an id with a quote breaks it).
    """
    name = collection or store.collection_name
    last: str | None = None
    while True:
        parts = [f"id > {literal(last)}"] if last is not None else []
        parts += [expression] if expression else []
        page = store.call(
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


def read_all(store: Calls, expression: str, fields: list[str]) -> list[Any]:
    """Every row matching ``expression`` ('' for all), checked against a count: a short read is an error."""
    expected = store.count(expression)
    rows = [row for page in pages(store, expression, fields) for row in page]
    if len(rows) != expected:
        matching = f" matching {expression}" if expression else ""
        raise FusionError(
            f"expected {expected:,} rows of {store.collection_name!r}{matching}, read {len(rows):,} "
            "(another client writing at the same time?): try again"
        )
    return rows
