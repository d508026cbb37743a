"""Relevance floors: a fused search returns only the candidates that clear a floor on a raw score.

Fusion normalises each side over the candidate pool, so a fused score says how a candidate
compares with the other candidates, never whether any of them is relevant: the best of ten
unrelated passages still scores 1.0. A floor is set on a side's raw score, which does not
depend on the pool (cosine similarity on the vector side, BM25 on the keyword side).

The floors are the options of :class:`FloorOptions`. The rule, applied to every candidate of the pool:

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

from typing import Annotated, Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BeforeValidator, Field

from langchain_fusion._checks import OptionGroup, is_real_number
from langchain_fusion.errors import InvalidParameterError


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


def floor_name(vector: float | None, bm25: float | None) -> str:
    """The label of a floor setting: ``no floor``, ``vector>=0.4``, ``bm25>=3`` or ``vector>=0.4|bm25>=3``."""
    parts = [f"{side}>={value:g}" for side, value in (("vector", vector), ("bm25", bm25)) if value is not None]
    return "|".join(parts) or "no floor"


class FloorOptions(OptionGroup):
    """The relevance floors of a fused search (None: no floor on that side); see the module docstring."""

    min_vector_score: Annotated[
        Annotated[float, Field(ge=-1.0, le=1.0)] | None, BeforeValidator(check_min_vector_score)
    ] = None
    """Relevance floor on the raw vector (cosine) similarity, -1 to 1: a result is returned only if it clears
    this floor or the BM25 floor, so a search with no good answer returns fewer results, or none. None: no floor."""
    min_bm25_score: Annotated[Annotated[float, Field(ge=0.0)] | None, BeforeValidator(check_min_bm25_score)] = None
    """Relevance floor on the raw keyword (BM25) score, 0 or more (0: the result contains a query word); a result
    must clear this floor or the vector floor. None: no floor."""

    @property
    def has_floor(self) -> bool:
        """True when a floor is set on either side."""
        return self.min_vector_score is not None or self.min_bm25_score is not None

    def passing(
        self, vector_scores: NDArray[np.floating], bm25_scores: NDArray[np.floating], alpha: float
    ) -> NDArray[np.bool_] | None:
        """Which candidates clear a floor that applies at ``alpha``; None when no floor applies."""
        cleared: list[NDArray[np.bool_]] = []
        if self.min_vector_score is not None and alpha > 0:
            cleared.append(np.asarray(vector_scores) >= self.min_vector_score)
        if self.min_bm25_score is not None and alpha < 1:
            bm25 = np.asarray(bm25_scores)
            cleared.append((bm25 > 0) & (bm25 >= self.min_bm25_score))
        if not cleared:
            return None
        passing: NDArray[np.bool_] = np.logical_or.reduce(cleared)
        return passing

    @property
    def label(self) -> str:
        """The setting in a few characters, as a report's row names it (see :func:`floor_name`)."""
        return floor_name(self.min_vector_score, self.min_bm25_score)

    @classmethod
    def grid(cls, vector_floors: list[float], bm25_floors: list[float]) -> list[FloorOptions]:
        """The floor settings to compare: none, each vector floor alone, each BM25 floor alone and every pair.

        Each value is checked (an InvalidParameterError before any work); settings are distinct, in that order.
        """
        settings: list[FloorOptions] = []
        for vector in [None, *vector_floors]:
            for bm25 in [None, *bm25_floors]:
                setting = cls(min_vector_score=vector, min_bm25_score=bm25)
                if setting not in settings:
                    settings.append(setting)
        return settings
