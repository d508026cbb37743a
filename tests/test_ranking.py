"""top_rows: the sampled threshold never changes which rows come back, or their order."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_fusion.stores.ranking import SAMPLED_THRESHOLD_MIN_ROWS, top_rows

N = SAMPLED_THRESHOLD_MIN_ROWS * 3 + 17  # large enough for the sampled path


def reference(scores: np.ndarray, k: int, valid: np.ndarray | None = None, above: float | None = None) -> np.ndarray:
    """Sort every qualifying position by (score descending, position)."""
    ok = np.ones(scores.size, dtype=bool) if valid is None else valid.copy()
    if above is not None:
        ok &= scores > above
    rows = np.flatnonzero(ok)
    return rows[np.lexsort((rows, -scores[rows]))][: max(k, 0)]


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    uniform = rng.random(N).astype(np.float32)
    sparse = np.zeros(N, dtype=np.float32)
    sparse[rng.choice(N, 40, replace=False)] = rng.random(40).astype(np.float32) + 0.5
    half = np.where(rng.random(N) < 0.5, rng.random(N), 0.0).astype(np.float32)
    strided = (rng.random(N) * 0.1).astype(np.float32)
    strided[:: N // 4096] += 10  # exactly the sampled rows stand out: the threshold is too high
    return {
        "uniform": uniform,
        "strided": strided,
        "ascending": np.sort(uniform),  # the strided sample sees a skewed picture
        "descending": np.sort(uniform)[::-1].copy(),
        "ties": rng.integers(0, 5, N).astype(np.float32),  # most rows tie at the k-th score
        "constant": np.ones(N, dtype=np.float32),
        "sparse positives": sparse,  # fewer positive rows than k
        "half positive": half,
        "negative": -rng.random(N).astype(np.float32),
        "float64": rng.standard_normal(N),
        "spike": np.concatenate([np.full(N - 3, 0.1, dtype=np.float32), np.float32([9.0, 0.2, 9.0])]),
        # BM25's shape: most rows match no query term, the rest often tie
        "mostly zero": np.where(rng.random(N) < 0.13, rng.integers(1, 50, N) / 7, 0.0).astype(np.float32),
    }


ARRAYS = _arrays()


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("k", [1, 10, 100, 1000, N // 64, N // 60, N + 5])
def test_top_rows_equals_a_full_sort(name: str, k: int) -> None:
    scores = ARRAYS[name]
    got = top_rows(scores, k)
    np.testing.assert_array_equal(got, reference(scores, k))
    assert got.dtype == np.int64


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("k", [1, 100, 5000])
def test_top_rows_above_keeps_only_greater_scores(name: str, k: int) -> None:
    scores = ARRAYS[name]
    for above in (0.0, 0.5, 1.0):
        got = top_rows(scores, k, above=above)
        np.testing.assert_array_equal(got, reference(scores, k, above=above))


@pytest.mark.parametrize("name", ["uniform", "ties", "sparse positives", "half positive"])
def test_top_rows_valid_and_above_together(name: str) -> None:
    scores = ARRAYS[name]
    valid = np.random.default_rng(3).random(N) < 0.3
    for k in (1, 100, 20_000):
        np.testing.assert_array_equal(top_rows(scores, k, valid), reference(scores, k, valid))
        np.testing.assert_array_equal(top_rows(scores, k, valid, above=0.0), reference(scores, k, valid, above=0.0))


def test_top_rows_small_and_empty_inputs() -> None:
    scores = np.float32([0.5, 0.0, 0.5, 0.9])
    np.testing.assert_array_equal(top_rows(scores, 2), [3, 0])
    np.testing.assert_array_equal(top_rows(scores, 10, above=0.0), [3, 0, 2])
    assert top_rows(scores, 0).size == 0
    assert top_rows(np.zeros(0, dtype=np.float32), 5).size == 0
    assert top_rows(scores, 3, np.zeros(4, dtype=bool)).size == 0
    assert top_rows(np.zeros(N, dtype=np.float32), 10, above=0.0).size == 0


def test_above_is_compared_in_the_scores_precision() -> None:
    scores = np.full(N, 0.1, dtype=np.float32)  # float32(0.1) is a little above the float64 0.1
    scores[::7] = 0.05
    for above in (0.1, np.float64(0.1)):
        got = top_rows(scores, 50_000, above=above)
        kept = reference(scores, 50_000, above=float(np.float32(above)))
        np.testing.assert_array_equal(got, kept)
        assert got.size == 0  # nothing is above 0.1 once both are float32
    assert top_rows(scores, 10, above=np.inf).size == 0
    assert top_rows(scores, 10, above=1e39).size == 0  # beyond float32: infinite
