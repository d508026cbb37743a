"""Diversity: maximal marginal relevance over a fused ranking, and a cap on results per source.

Both choose ``k`` results from candidates given best first (the fused ranking), so they run
after fusion and after any relevance floor.

- **Maximal marginal relevance** (Carbonell and Goldstein, 1998) picks, one at a time, the
  candidate with the best ``lambda_mult * relevance - (1 - lambda_mult) * similarity``, where
  ``relevance`` is the candidate's fused score min-max scaled to [0, 1] over the candidates
  (so ``lambda_mult`` means the same for every fusion method) and ``similarity`` its largest
  cosine similarity to a candidate already picked, from the stored vectors. The first pick is
  the best fused candidate; ``lambda_mult=1`` returns the fused order; ties go to the better
  fused rank.
- **A cap per source** (``max_per_source``) skips a candidate once ``max_per_source`` results
  come from its source (the ``source`` metadata key) and takes the next one instead. With MMR
  the capped candidates are left out of the choice (they do not count as picked). Documents
  without a source are not capped.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion.search.fusion import min_max


@dataclass(frozen=True)
class Diversity:
    """How one search spreads its results; both None: the plain fused top ``k``."""

    lambda_mult: float | None = None
    """Maximal marginal relevance with this weight of relevance (0: most diverse, 1: fused order); None: no MMR."""
    max_per_source: int | None = None
    """The most results from one source; None: no cap."""

    @property
    def active(self) -> bool:
        """True when it changes what a plain fused search returns."""
        return self.lambda_mult is not None or self.max_per_source is not None


def source_groups(documents: Sequence[Document]) -> NDArray[np.int64]:
    """A group number per document, equal for equal ``source`` metadata; -1 for documents without one."""
    seen: dict[Hashable, int] = {}
    groups = np.full(len(documents), -1, dtype=np.int64)
    for position, doc in enumerate(documents):
        source: Any = doc.metadata.get(keys.SOURCE)
        if source is None:
            continue
        key = source if isinstance(source, Hashable) else repr(source)
        groups[position] = seen.setdefault(key, len(seen))
    return groups


def capped(groups: NDArray[np.int64], k: int, max_per_group: int) -> NDArray[np.int64]:
    """Positions of the first ``k`` items (in order) with at most ``max_per_group`` per group (-1: no group)."""
    counts: dict[int, int] = {}
    chosen: list[int] = []
    for position, group in enumerate(groups.tolist()):
        if len(chosen) == k:
            break
        if group >= 0:
            if counts.get(group, 0) >= max_per_group:
                continue
            counts[group] = counts.get(group, 0) + 1
        chosen.append(position)
    return np.asarray(chosen, dtype=np.int64)


def maximal_marginal_relevance(
    relevance: NDArray[np.floating],
    vectors: NDArray[np.floating],
    k: int,
    lambda_mult: float,
    groups: NDArray[np.int64] | None = None,
    max_per_group: int | None = None,
) -> NDArray[np.int64]:
    """Positions of up to ``k`` candidates picked by MMR, in pick order (see the module docstring).

    ``relevance`` is aligned with the rows of ``vectors`` (unit vectors) and is scaled to
    [0, 1] here; ``groups`` (-1: no group) with ``max_per_group`` caps the picks per group.
    """
    size = int(np.asarray(relevance).size)
    scaled = min_max(np.asarray(relevance, dtype=np.float64))
    closest = np.zeros(size, dtype=np.float64)  # largest similarity to a pick; no penalty before the first
    available = np.ones(size, dtype=bool)
    counts: dict[int, int] = {}
    picked: list[int] = []
    while len(picked) < k and available.any():
        score = lambda_mult * scaled - (1.0 - lambda_mult) * closest if picked else scaled.copy()
        score[~available] = -np.inf
        choice = int(np.argmax(score))  # the first maximum: ties go to the better fused rank
        picked.append(choice)
        available[choice] = False
        if groups is not None and max_per_group is not None and groups[choice] >= 0:
            group = int(groups[choice])
            counts[group] = counts.get(group, 0) + 1
            if counts[group] >= max_per_group:
                available &= groups != group
        similarity = np.asarray(vectors @ vectors[choice], dtype=np.float64)
        closest = similarity if len(picked) == 1 else np.maximum(closest, similarity)
    return np.asarray(picked, dtype=np.int64)
