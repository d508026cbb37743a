"""Option values shared by the tests of every surface (constructor, per call, CLI, server, MCP)."""

from __future__ import annotations

from typing import Any

BAD_SELECTION_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"min_vector_score": 2.0}, "min_vector_score must be a cosine similarity between -1 and 1"),
    ({"min_vector_score": True}, "min_vector_score must be"),
    ({"min_bm25_score": -0.5}, "min_bm25_score must be a BM25 score of 0 or more"),
    ({"lambda_mult": float("nan")}, "lambda_mult must be a number between 0"),
    ({"max_per_source": 0}, "max_per_source must be a positive whole number"),
    ({"max_per_source": False}, "max_per_source must be"),
]
"""Floor and diversity options with bad values, and the start of the message that refuses each
(the same on every surface: constructor, per call, server and MCP)."""
