"""Metadata filters: which rows a query may return, decided before ranking."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

from langchain_core.documents import Document

MetadataFilter = Union[Mapping[str, Any], Callable[[Mapping[str, Any]], bool]]
"""A mapping ``{key: value}`` (every key must equal its value; a list or tuple value means
"any of these"), or a callable that receives a document's metadata and returns a bool."""


def as_predicate(spec: MetadataFilter) -> Callable[[Document], bool]:
    """Turn a filter spec into a predicate on documents; raises TypeError on anything else."""
    if isinstance(spec, Mapping):
        conditions = [
            (key, frozenset(value) if isinstance(value, (list, tuple, set, frozenset)) else None, value)
            for key, value in spec.items()
        ]

        def matches(doc: Document) -> bool:
            meta = doc.metadata
            for key, choices, value in conditions:
                if key not in meta:
                    return False
                actual = meta[key]
                if choices is not None:
                    try:
                        if actual not in choices:
                            return False
                    except TypeError:  # unhashable metadata value
                        return False
                elif actual != value:
                    return False
            return True

        return matches
    if callable(spec):
        return lambda doc: bool(spec(doc.metadata))
    raise TypeError(
        f"filter must be a mapping of metadata key to value, or a callable taking metadata; got {type(spec).__name__}"
    )
