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
    k_summaries: int = 3
    """Hierarchical retrieval: summaries (pages or sections) selected."""
    summary_weight: float = 0.5
    """Hierarchical retrieval: weight of the summary's score in a chunk's score."""


SEARCH_DEFAULTS = SearchDefaults()
"""The one set of defaults."""
