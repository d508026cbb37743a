"""The search tool's arguments, checked as sent by the library's own checks (one-line tool errors)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.retrievers import BaseRetriever

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.pipeline import ServeLimits
from langchain_fusion.retrievers.base import innermost_search
from langchain_fusion.search.options import OPTION_CHECKS, SELECTION_OPTIONS, SERVER_ONLY_OPTIONS, SearchOptions

_DEFAULTS = ServeLimits()
DEFAULT_MAX_K: int = _DEFAULTS.max_k
"""Largest ``k`` a search may ask for by default."""
DEFAULT_MAX_QUERY_CHARS: int = _DEFAULTS.max_query_chars
"""Longest query accepted by default, in characters."""
SEARCH_ARGUMENTS: tuple[str, ...] = (
    "query",
    *(name for name in SearchOptions.model_fields if name not in SERVER_ONLY_OPTIONS),
)
"""The arguments the search tool of a fused index takes (a hierarchical index's takes its own options)."""

SearchLimits = ServeLimits
"""The bounds every search is checked against (an alias of :class:`~langchain_fusion.pipeline.spec.ServeLimits`)."""


def check_search_arguments(
    arguments: Mapping[str, Any],
    limits: ServeLimits = _DEFAULTS,
    accepted: Sequence[str] = SEARCH_ARGUMENTS,
) -> dict[str, Any]:
    """The search tool's arguments as sent, checked; an InvalidParameterError names the first bad one.

    Every option goes through its own check (:data:`~langchain_fusion.search.options.OPTION_CHECKS`);
    ``null`` means the server's default. A ``filter`` sent as a JSON object in a string (some
    clients do) is read as that object. ``accepted``: the arguments this server's tool takes.
    """
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        raise InvalidParameterError(f"unknown argument(s) {unknown}; the search tool takes {', '.join(accepted)}")
    query = arguments.get("query")
    if query is None:
        raise InvalidParameterError("query is required: the words or question to search for")
    if not isinstance(query, str):
        raise InvalidParameterError(f"query must be a string; got {type(query).__name__}")
    if not query.strip():
        raise InvalidParameterError("query is empty: give the words or question to search for")
    if len(query) > limits.max_query_chars:
        raise InvalidParameterError(f"query is {len(query)} characters long; the limit is {limits.max_query_chars}")
    checked: dict[str, Any] = {"query": query}
    for name in accepted:
        value = arguments.get(name)
        if name == "query" or value is None:
            continue
        if name == "filter" and isinstance(value, str):
            with contextlib.suppress(ValueError):
                parsed = json.loads(value)
                value = parsed if isinstance(parsed, dict) else value
        checked[name] = OPTION_CHECKS[name](value)
        if name in ("k", "k_summaries") and checked[name] > limits.max_k:
            raise InvalidParameterError(
                f"{name} must be at most {limits.max_k} (the server's max_k); got {checked[name]}"
            )
    return checked


def per_call_selection(retriever: BaseRetriever) -> tuple[str, ...]:
    """The relevance floor and diversity options ``retriever`` takes per call (through wrappers it passes them to)."""
    inner = innermost_search(retriever)
    takes = inner.per_call_option_names() if inner is not None else ()
    return tuple(name for name in SELECTION_OPTIONS if name in takes)
