"""Top-k selection over score arrays: a partition, then a sort of the selected few only."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def top_rows(scores: NDArray[np.floating], k: int, valid: NDArray[np.bool_] | None = None) -> NDArray[np.int64]:
    """Positions of the ``k`` highest scores (among ``valid`` ones), best first, ties by position."""
    candidates = np.flatnonzero(valid) if valid is not None else None
    values = scores[candidates] if candidates is not None else scores
    if k <= 0 or values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if k < values.size:
        kth = np.partition(values, values.size - k)[values.size - k]
        picked = np.flatnonzero(values >= kth)  # may hold more than k when scores tie at kth
    else:
        picked = np.arange(values.size)
    picked = picked[np.lexsort((picked, -values[picked]))][:k]
    rows = candidates[picked] if candidates is not None else picked
    return rows.astype(np.int64)
