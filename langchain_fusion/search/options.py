"""The defaults of the search options, in one place (every retriever, the CLI and the server read them)."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_fusion._checks import FusionMethod


@dataclass(frozen=True)
class SearchDefaults:
    """Default values of the fused-search options."""

    k: int = 4
    """Documents returned."""
    alpha: float = 0.5
    """Weight of the vector side (``1 - alpha`` for BM25)."""
    fetch_k: int | None = 100
    """Candidates per side before fusion (None: the whole corpus)."""
    method: FusionMethod = "weighted"
    """Fusion method: weighted (min-max), zscore or rrf."""
    min_vector_score: float | None = None
    """Relevance floor on the raw cosine similarity (None: no floor); see :mod:`~langchain_fusion.search.floors`."""
    min_bm25_score: float | None = None
    """Relevance floor on the raw BM25 score (None: no floor)."""
    lambda_mult: float | None = None
    """Maximal marginal relevance weight of relevance (None: no MMR); see :mod:`~langchain_fusion.search.diversity`."""
    mmr_lambda_mult: float = 0.5
    """``lambda_mult`` of ``search_type="mmr"`` when none is given (LangChain's default)."""
    max_per_source: int | None = None
    """The most results from one source (None: no cap)."""
    k_summaries: int = 3
    """Hierarchical retrieval: summaries (pages or sections) selected."""
    summary_weight: float = 0.5
    """Hierarchical retrieval: weight of the summary's score in a chunk's score."""


SEARCH_DEFAULTS = SearchDefaults()
"""The one set of defaults."""
