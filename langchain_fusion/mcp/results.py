"""What the search tool returns: :class:`SearchResults` for programs, :func:`format_results` for a model."""

# No ``from __future__ import annotations``: the search tool's output schema is read from these models at
# run time (see tool.py).

import json
from typing import Any

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict

from langchain_fusion import metadata as keys


class SearchHit(BaseModel):
    """One retrieved chunk (or context window passage) with where it comes from and its scores."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    rank: int
    """1-based position in the results."""
    id: str | None
    """The chunk's stable id (``Document.id``)."""
    text: str
    """The chunk's text."""
    source: str | None
    """The file path or id the chunk comes from."""
    page: int | None
    """1-based PDF page; None for text and markdown."""
    fusion_score: float | None
    """The fused score the results are ordered by (its scale depends on the fusion method)."""
    vector_score: float | None
    """Raw vector similarity (cosine; higher is better)."""
    bm25_score: float | None
    """Raw BM25 score (0 when no query term occurs in the chunk)."""
    metadata: dict[str, Any]
    """All the chunk's metadata: chunk position, normalised scores and ranks of each side, and
    context window, hierarchical or rerank details when the retriever adds them."""


class SearchResults(BaseModel):
    """What the search tool returns: the query and its results, best first."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    query: str
    """The query searched for."""
    results: list[SearchHit]
    """The retrieved chunks, best first."""


def search_hit(rank: int, doc: Document) -> SearchHit:
    """The ``rank``-th result: ``doc``'s text, where it comes from, its scores and its metadata as JSON values."""
    meta = json.loads(json.dumps(doc.metadata, default=str))  # JSON values only, whatever the metadata held

    def number(key: str) -> float | None:
        value = meta.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    page = meta.get(keys.PAGE)
    source = meta.get(keys.SOURCE)
    return SearchHit(
        rank=rank,
        id=doc.id,
        text=doc.page_content,
        source=None if source is None else str(source),
        page=page if isinstance(page, int) and not isinstance(page, bool) else None,
        fusion_score=number(keys.FUSION_SCORE),
        vector_score=number(keys.VECTOR_SCORE),
        bm25_score=number(keys.BM25_SCORE),
        metadata=meta,
    )


def format_results(results: SearchResults) -> str:
    """The results as text for a language model: a numbered header line per chunk, then its text."""
    if not results.results:
        return f"No results for {results.query!r}."
    blocks = [f"{len(results.results)} result(s) for {results.query!r}, best first:"]
    for hit in results.results:
        where = hit.source or "unknown source"
        if hit.page is not None:
            where += f", page {hit.page}"
        copies = [c for c in hit.metadata.get(keys.ALSO_IN) or [] if isinstance(c, dict)]
        if copies:  # the same text under other files (returned once)
            where += "; also in " + ", ".join(str(c.get(keys.SOURCE) or c.get("id")) for c in copies)
        scores = [
            f"{label} {value:.3f}"
            for label, value in (("fused", hit.fusion_score), ("vector", hit.vector_score), ("bm25", hit.bm25_score))
            if value is not None
        ]
        details = "; ".join(part for part in (f"id {hit.id}" if hit.id else "", ", ".join(scores)) if part)
        blocks.append(f"[{hit.rank}] {where}" + (f" ({details})" if details else "") + f"\n{hit.text}")
    return "\n\n".join(blocks)
