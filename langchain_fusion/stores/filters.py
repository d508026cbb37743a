"""Metadata filters: which rows a query may return, decided before ranking."""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, Union

from langchain_fusion.errors import InvalidParameterError

MetadataFilter = Union[Mapping[str, Any], Callable[[Mapping[str, Any]], bool]]
"""A mapping ``{key: value}`` (every key must equal its value; a list or tuple value means
"any of these"), or a callable that receives a document's metadata and returns a bool."""


def merge_filters(base: MetadataFilter | None, extra: MetadataFilter | None) -> MetadataFilter | None:
    """Both filters at once: a document must pass ``base`` and ``extra`` (a request can narrow a server's, never widen).

    Two mappings make one mapping (a key in both keeps the values both allow; none left: nothing
    matches); a callable on either side makes a callable that asks both.
    """
    if base is None or extra is None:
        return extra if base is None else base
    if isinstance(base, Mapping) and isinstance(extra, Mapping):
        merged = dict(base)
        for key, value in extra.items():
            if key in merged:
                allowed = _choices(merged[key])
                value = [c for c in _choices(value) if any(c == a and type(c) is type(a) for a in allowed)]
            merged[key] = value
        return merged
    first, second = _as_callable(base), _as_callable(extra)
    return lambda metadata: first(metadata) and second(metadata)


def _choices(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]


def _as_callable(spec: MetadataFilter) -> Callable[[Mapping[str, Any]], bool]:
    if callable(spec):
        return spec
    wanted = {key: _choices(value) for key, value in spec.items()}
    return lambda metadata: all(metadata.get(key) in choices for key, choices in wanted.items())


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
            raise InvalidParameterError(f"filter keys must be metadata key strings; got {reprlib.repr(key)}")
        choices = value if isinstance(value, (list, tuple, set, frozenset)) else (value,)
        for choice in choices:
            if choice is not None and not isinstance(choice, (str, int, float)):  # bool is an int
                raise InvalidParameterError(
                    f"filter value for {key!r} must be a string, number, boolean or None, or a list of them; "
                    f"got {reprlib.repr(choice)}"  # reprlib: a value nested thousands deep has a short repr too
                )
            if isinstance(choice, float) and not math.isfinite(choice):
                raise InvalidParameterError(
                    f"filter value for {key!r} must be a finite number; got {choice!r}, which no metadata value equals"
                )
    return spec
