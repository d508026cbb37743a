"""Top-k selection over score arrays: a partition, then a sort of the selected few only."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

SAMPLED_THRESHOLD_MIN_ROWS = 1 << 16
"""From this many scores, :func:`top_rows` first narrows them with a threshold taken from a sample."""

_SAMPLE_SIZE = 4096
"""Scores in the strided sample whose high end gives that threshold."""


def top_rows(
    scores: NDArray[np.floating],
    k: int,
    valid: NDArray[np.bool_] | None = None,
    *,
    above: float | None = None,
) -> NDArray[np.int64]:
    """Positions of the ``k`` highest scores, best first, ties by position.

    Only ``valid`` positions (all if None) whose score is greater than ``above`` (if given,
    compared in the scores' precision) are ranked; fewer than ``k`` come back when fewer qualify.
    """
    candidates = np.flatnonzero(valid) if valid is not None else None
    values = scores[candidates] if candidates is not None else scores
    if k <= 0 or values.size == 0:
        return np.zeros(0, dtype=np.int64)
    picked = at_least_kth(values, k, above)
    picked = picked[np.lexsort((picked, -values[picked]))][:k]
    rows = candidates[picked] if candidates is not None else picked
    return rows.astype(np.int64)


def at_least_kth(values: NDArray[np.floating], k: int, above: float | None) -> NDArray[np.int64]:
    """Positions of the values greater than ``above`` that are at least the ``k``-th highest of those.

    More than ``k`` come back when values tie at the ``k``-th. A partition of every value costs
    about a millisecond per million; on large arrays a threshold from a strided sample's high end
    first keeps the few values at or above it. When at least ``k`` are, the ``k``-th highest is
    among them, so the result is exact; otherwise (an unlucky sample, or values that barely
    differ) every value is ranked as before.
    """
    with np.errstate(over="ignore"):  # a bound beyond the scores' range becomes infinite, as it should
        bound = None if above is None else values.dtype.type(above)  # compared in the scores' own precision
    if bound is not None and bound == np.inf:
        return np.zeros(0, dtype=np.int64)
    lowest = None if bound is None else np.nextafter(bound, values.dtype.type(np.inf))
    threshold = lowest
    if values.size >= SAMPLED_THRESHOLD_MIN_ROWS and int(k) * 64 <= values.size:
        step = values.size // _SAMPLE_SIZE
        sample = values[::step]
        if lowest is not None:
            # Only values above `above` count. Dropping the rest first also spares the partition NumPy's slow
            # case: a sample mostly of one value (BM25's zeros) takes it ten times longer.
            sample = sample[sample >= lowest]
        # Each sampled value stands for about `step` values: aim for about 4k values above it.
        rank = min(sample.size, 4 * math.ceil(k / step) + 8)
        if rank:
            threshold = np.partition(sample, sample.size - rank)[sample.size - rank]
    if threshold is not None:
        picked = np.flatnonzero(values >= threshold)
        if picked.size >= k or threshold == lowest:  # enough, or every value above `above`
            return _kth_and_better(values, picked, k)
    if bound is not None:
        return _kth_and_better(values, np.flatnonzero(values > bound), k)
    if values.size <= k:
        return np.arange(values.size)
    kth = np.partition(values, values.size - k)[values.size - k]
    return np.flatnonzero(values >= kth)


def _kth_and_better(values: NDArray[np.floating], picked: NDArray[np.int64], k: int) -> NDArray[np.int64]:
    """The positions among ``picked`` whose value is at least the ``k``-th highest of theirs."""
    if picked.size <= k:
        return picked
    narrowed = values[picked]
    kth = np.partition(narrowed, narrowed.size - k)[narrowed.size - k]
    better: NDArray[np.int64] = picked[narrowed >= kth]
    return better
