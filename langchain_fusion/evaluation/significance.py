"""Is a change in a mean metric real? A paired test over per-query values, seeded and deterministic.

Two runs on the same queries give two values per query; their differences are what changed.
:func:`paired_test` reports the mean difference, a paired bootstrap confidence interval of it and
the two-sided p-value of a paired randomization test (each query's difference keeps its size and
gets a random sign: how often is the mean at least as far from 0 as the one observed?), the
test Smucker, Allan and Carterette (CIKM 2007) recommend for retrieval metrics. With at most
``resamples`` sign patterns (few queries) every pattern is counted, so the p-value is exact.
Numpy only; the same inputs and seed always give the same figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from langchain_fusion._checks import check_positive_int, is_real_number
from langchain_fusion.errors import InvalidParameterError

DEFAULT_RESAMPLES = 10_000
"""Random sign patterns (randomization test) and resamples (bootstrap) drawn per test."""

DEFAULT_SEED = 0
"""Seed of the random draws: a rerun on the same values gives the same p-value and interval."""

_CELLS_PER_DRAW = 1 << 20
"""Bounds the (resamples x queries) arrays held at once."""


@dataclass(frozen=True)
class PairedTest:
    """The outcome of :func:`paired_test`: mean difference, its confidence interval and p-value."""

    delta: float
    """Mean over queries of current - baseline."""
    low: float
    """Lower end of the bootstrap confidence interval of ``delta``."""
    high: float
    """Upper end of that interval."""
    p_value: float
    """Two-sided p-value of the paired randomization test (1.0 when nothing changed)."""
    confidence: float
    """The interval's confidence level (0.95 for a 95% interval)."""


def paired_test(
    current: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> PairedTest:
    """Compare two runs' per-query values (same queries, same order): delta, bootstrap interval, p-value.

    The p-value counts the sign patterns whose mean difference is at least as far from 0 as the
    observed one (``(count + 1) / (resamples + 1)`` when drawn at random, ``count / 2**n`` when all
    ``2**n`` patterns are enumerated), so identical runs give exactly 1.0.
    """
    diff = _differences(current, baseline)
    if not (is_real_number(confidence) and 0.0 < confidence < 1.0):
        raise InvalidParameterError(f"confidence must be a number between 0 and 1 (exclusive); got {confidence!r}")
    resamples = check_positive_int(resamples, "resamples", "random draws per test")
    observed = float(diff.mean())
    rng = np.random.default_rng(seed)
    threshold = abs(observed) - 1e-12 * max(1.0, float(np.abs(diff).max()))  # ties count, despite rounding
    if 2 ** min(diff.size, 63) <= resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=diff.size)))
        p_value = float(np.count_nonzero(np.abs(signs @ diff / diff.size) >= threshold)) / len(signs)
    else:
        at_least = 0
        for size in _draw_sizes(resamples, diff.size):
            flipped = (rng.integers(0, 2, (size, diff.size)) * 2 - 1) @ diff / diff.size
            at_least += int(np.count_nonzero(np.abs(flipped) >= threshold))
        p_value = (at_least + 1) / (resamples + 1)
    means = np.concatenate(
        [diff[rng.integers(0, diff.size, (size, diff.size))].mean(axis=1) for size in _draw_sizes(resamples, diff.size)]
    )
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return PairedTest(observed, float(low), float(high), min(p_value, 1.0), float(confidence))


def _differences(current: Sequence[float] | np.ndarray, baseline: Sequence[float] | np.ndarray) -> np.ndarray:
    a, b = np.asarray(current, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise InvalidParameterError(
            f"a paired test needs one value per query in each run, the same queries in the same order; got "
            f"{a.size} and {b.size} values"
        )
    if a.size == 0:
        raise InvalidParameterError("a paired test needs at least one query")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise InvalidParameterError("a paired test needs finite values (no NaN or infinity)")
    diff: np.ndarray = a - b
    return diff


def _draw_sizes(resamples: int, queries: int) -> list[int]:
    step = max(1, _CELLS_PER_DRAW // queries)
    return [min(step, resamples - lo) for lo in range(0, resamples, step)]
