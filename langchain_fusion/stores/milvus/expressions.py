"""Milvus boolean expressions: literals, id lists, and mapping filters with Python's ``==`` meaning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.stores.base import Where
from langchain_fusion.stores.filters import check_filter


def literal(value: Any) -> str:
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


def id_filter(ids: Sequence[str]) -> str:
    """``id in [...]`` for these ids (escaped)."""
    return "id in [" + ",".join(literal(i) for i in ids) + "]"


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
        parts.append(id_filter(sorted(where.ids)) if where.ids else 'id == ""')
    return " and ".join(f"({p})" for p in parts)


_EXACT_FLOAT = 2**53
"""Integers up to this magnitude are written as floats (Milvus compares JSON ints and floats by value)."""


def _equals_any(key: str, values: Sequence[Any], nulls: bool) -> str:
    """Metadata ``key`` equals one of ``values``, each type in its own ``in [...]`` (Milvus refuses mixed lists)."""
    field = f"metadata[{literal(key)}]"
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
        f"{field} in [{','.join(literal(v) for v in group)}]"
        for group in (strings, sorted(numbers), sorted(big), sorted(booleans))
        if group
    ]
    if any(v is None for v in values):
        if not nulls:
            raise InvalidParameterError(
                f"this collection was made before langchain-fusion could filter on None ({key!r}: None); "
                "re-index it into a new collection, or filter on a value"
            )
        clauses.append(f"null_keys[{literal(key)}] == true")
    # "Any of none" matches no row: an id no row has says so in the engine's own terms.
    return " or ".join(clauses) or 'id == ""'
