"""Relevance floors: a fused search returns only the candidates that clear a floor on a raw score.

Fusion normalises each side over the candidate pool, so a fused score says how a candidate
compares with the other candidates, never whether any of them is relevant: the best of ten
unrelated passages still scores 1.0. A floor is set on a side's raw score, which does not
depend on the pool (cosine similarity on the vector side, BM25 on the keyword side).

The rule, applied to every candidate of the pool:

- A candidate is kept when it clears **at least one** floor that applies: ``vector_score >=
  min_vector_score``, or ``bm25_score >= min_bm25_score`` with at least one query term
  matched (a BM25 score of 0 never clears a floor, so ``min_bm25_score=0`` means "contains a
  query term"). So a query that is strong on one side keeps its results, and a query with no
  good answer on any side returns nothing.
- A floor applies only to a side that takes part in the ranking: with ``alpha=1`` (vector
  only) a BM25 floor is ignored, with ``alpha=0`` a vector floor is. When no floor applies,
  nothing is removed.
- The floor removes candidates; it changes nothing else. Normalisation still runs over the
  whole pool, so a kept candidate has the fused score and rank it has without the floor, and
  the results are the fused ranking with the candidates below the floor left out, filled up
  to ``k`` from the next candidates of the pool (fewer than ``k``, or none, when fewer pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from langchain_fusion._checks import is_real_number
from langchain_fusion.errors import InvalidParameterError

VECTOR_FLOOR = "min_vector_score"
"""The search option of the floor on the raw cosine similarity."""
BM25_FLOOR = "min_bm25_score"
"""The search option of the floor on the raw BM25 score."""


def check_min_vector_score(value: Any) -> float | None:
    """A floor on the raw cosine similarity: a number in [-1, 1], or None for no floor."""
    if value is None:
        return None
    if not is_real_number(value) or not -1.0 <= float(value) <= 1.0:
        raise InvalidParameterError(
            f"min_vector_score must be a cosine similarity between -1 and 1, or None for no floor; got {value!r}"
        )
    return float(value)


def check_min_bm25_score(value: Any) -> float | None:
    """A floor on the raw BM25 score: a number >= 0, or None for no floor."""
    if value is None:
        return None
    if not is_real_number(value) or float(value) < 0.0:
        raise InvalidParameterError(
            f"min_bm25_score must be a BM25 score of 0 or more, or None for no floor; got {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class Floors:
    """The floors of one search (None: no floor on that side); see the module docstring."""

    vector: float | None = None
    """Least raw cosine similarity a candidate needs to clear the vector floor."""
    bm25: float | None = None
    """Least raw BM25 score (and at least one query term matched) to clear the BM25 floor."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "vector", check_min_vector_score(self.vector))
        object.__setattr__(self, "bm25", check_min_bm25_score(self.bm25))

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Floors:
        """The floors set in a search's resolved options (absent: no floor)."""
        return cls(vector=options.get(VECTOR_FLOOR), bm25=options.get(BM25_FLOOR))

    def options(self) -> dict[str, float | None]:
        """The floors as search options (``FusionRetriever(**floors.options())``)."""
        return {VECTOR_FLOOR: self.vector, BM25_FLOOR: self.bm25}

    @property
    def active(self) -> bool:
        """True when a floor is set on either side."""
        return self.vector is not None or self.bm25 is not None

    def passing(
        self, vector_scores: NDArray[np.floating], bm25_scores: NDArray[np.floating], alpha: float
    ) -> NDArray[np.bool_] | None:
        """Which candidates clear a floor that applies at ``alpha``; None when no floor applies."""
        cleared: list[NDArray[np.bool_]] = []
        if self.vector is not None and alpha > 0:
            cleared.append(np.asarray(vector_scores) >= self.vector)
        if self.bm25 is not None and alpha < 1:
            bm25 = np.asarray(bm25_scores)
            cleared.append((bm25 > 0) & (bm25 >= self.bm25))
        if not cleared:
            return None
        passing: NDArray[np.bool_] = np.logical_or.reduce(cleared)
        return passing
