"""Metadata filters: which rows a query may return, decided before ranking."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

from langchain_fusion.errors import InvalidParameterError

MetadataFilter = Union[Mapping[str, Any], Callable[[Mapping[str, Any]], bool]]
"""A mapping ``{key: value}`` (every key must equal its value; a list or tuple value means
"any of these"), or a callable that receives a document's metadata and returns a bool."""


def check_filter(spec: Any) -> MetadataFilter | None:
    """``spec`` if it is None, a callable, or a mapping of string keys to scalar values (or lists of them)."""
    if spec is None or callable(spec):
        return spec  # type: ignore[no-any-return]
    if not isinstance(spec, Mapping):
        raise InvalidParameterError(
            "filter must be a mapping of metadata key to value, or a callable taking metadata; "
            f"got {type(spec).__name__}"
        )
    for key, value in spec.items():
        if not isinstance(key, str):
            raise InvalidParameterError(f"filter keys must be metadata key strings; got {key!r}")
        choices = value if isinstance(value, (list, tuple, set, frozenset)) else (value,)
        for choice in choices:
            if choice is not None and not isinstance(choice, (str, int, float)):  # bool is an int
                raise InvalidParameterError(
                    f"filter value for {key!r} must be a string, number, boolean or None, or a list of them; "
                    f"got {choice!r:.80}"
                )
    return spec
