"""The pure fusion functions, checked on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_fusion.search import fusion as fusion_module
from langchain_fusion.search.fusion import RRF_RANK_CONSTANT, fuse, fuse_top, min_max, rank_of, ranks, z_score


class TestMinMax:
    def test_scales_to_unit_interval(self) -> None:
        assert min_max(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]

    def test_negative_scores(self) -> None:
        assert min_max(np.array([-1.0, 1.0, 0.0])).tolist() == [0.0, 1.0, 0.5]

    def test_all_equal_positive_is_one(self) -> None:
        assert min_max(np.array([0.7, 0.7])).tolist() == [1.0, 1.0]

    def test_all_equal_zero_is_zero(self) -> None:
        assert min_max(np.array([0.0, 0.0, 0.0])).tolist() == [0.0, 0.0, 0.0]

    def test_empty(self) -> None:
        assert min_max(np.array([])).size == 0

    def test_a_single_score_as_a_zero_dimensional_array(self) -> None:
        assert min_max(np.float64(0.5)).shape == () and float(min_max(np.float64(0.5))) == 1.0
        assert z_score(np.float32(3.0)).shape == () and float(z_score(np.float32(3.0))) == 0.0


class TestZScore:
    def test_standardises(self) -> None:
        result = z_score(np.array([1.0, 2.0, 3.0]))
        std = np.sqrt(2 / 3)
        assert result == pytest.approx([-1 / std, 0.0, 1 / std])

    def test_constant_is_zero(self) -> None:
        assert z_score(np.array([5.0, 5.0])).tolist() == [0.0, 0.0]


class TestRanks:
    def test_descending_one_based_ties_share_a_rank(self) -> None:
        assert ranks(np.array([0.2, 0.9, 0.2, 0.5])).tolist() == [3, 1, 3, 2]  # ties share the better rank

    def test_invalid_entries_get_zero(self) -> None:
        valid = np.array([True, False, True])
        assert ranks(np.array([0.1, 0.9, 0.5]), valid).tolist() == [2, 0, 1]


class TestFuse:
    def test_weighted_hand_computed(self) -> None:
        # vector min-max: [0, 1, 0.5]; bm25 min-max: [1, 0, 0.25]
        result = fuse(np.array([0.2, 0.6, 0.4]), np.array([8.0, 0.0, 2.0]), alpha=0.3)
        assert result.fused == pytest.approx([0.7, 0.3, 0.325])
        assert result.vector_rank.tolist() == [3, 1, 2]
        assert result.bm25_rank.tolist() == [1, 0, 2]  # the 0.0 BM25 score matched nothing

    def test_zscore_hand_computed(self) -> None:
        result = fuse(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]), alpha=0.75, method="zscore")
        z = np.array([-1.0, 0.0, 1.0]) / np.sqrt(2 / 3)
        assert result.fused == pytest.approx(0.75 * z + 0.25 * -z)

    def test_rrf_hand_computed(self) -> None:
        result = fuse(np.array([0.9, 0.1, 0.5]), np.array([0.0, 3.0, 1.0]), alpha=0.5, method="rrf")
        c = RRF_RANK_CONSTANT
        expected = [0.5 / (c + 1), 0.5 / (c + 3) + 0.5 / (c + 1), 0.5 / (c + 2) + 0.5 / (c + 2)]
        assert result.fused == pytest.approx(expected)
        assert result.bm25_normalized[0] == 0.0  # no BM25 credit without a matching term

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_alpha_limits_follow_one_side(self, method: str) -> None:
        rng = np.random.default_rng(3)
        vector, bm25 = rng.random(20), rng.random(20) + 0.01
        assert np.argsort(-fuse(vector, bm25, 1.0, method).fused).tolist() == np.argsort(-vector).tolist()  # type: ignore[arg-type]
        assert np.argsort(-fuse(vector, bm25, 0.0, method).fused).tolist() == np.argsort(-bm25).tolist()  # type: ignore[arg-type]

    def test_degenerate_inputs_give_finite_scores(self) -> None:
        for vector, bm25 in [([], []), ([0.5], [0.0]), ([0.3, 0.3], [1.0, 1.0]), ([0.0, 0.0], [0.0, 0.0])]:
            for method in ("weighted", "zscore", "rrf"):
                result = fuse(np.array(vector), np.array(bm25), 0.5, method)  # type: ignore[arg-type]
                assert np.all(np.isfinite(result.fused))

    def test_misaligned_arrays_are_rejected(self) -> None:
        with pytest.raises(ValueError, match="aligned"):
            fuse(np.array([1.0, 2.0]), np.array([1.0]), 0.5)

    @pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.5", None, True])
    def test_invalid_alpha(self, alpha: object) -> None:
        with pytest.raises(ValueError, match="alpha must be a number between 0 and 1"):
            fuse(np.array([1.0]), np.array([1.0]), alpha)  # type: ignore[arg-type]

    def test_invalid_method(self) -> None:
        with pytest.raises(ValueError, match="method must be one of weighted, zscore, rrf"):
            fuse(np.array([1.0]), np.array([1.0]), 0.5, "sum")  # type: ignore[arg-type]


class TestRankOf:
    @pytest.mark.parametrize("seed", range(5))
    @pytest.mark.parametrize("at_once", [fusion_module._RANK_AT_ONCE, 0], ids=["", "one-by-one"])
    def test_equals_ranks_with_ties_and_validity(
        self, seed: int, at_once: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(fusion_module, "_RANK_AT_ONCE", at_once)
        rng = np.random.default_rng(seed)
        scores = rng.integers(0, 6, 200).astype(np.float64)  # many ties
        valid = scores > 1
        positions = rng.choice(200, 30, replace=False).astype(np.int64)
        assert rank_of(scores, positions).tolist() == ranks(scores)[positions].tolist()
        assert rank_of(scores, positions, valid).tolist() == ranks(scores, valid)[positions].tolist()

    @pytest.mark.parametrize("seed", range(5))
    def test_the_best_few_of_many_float32_scores(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        scores = rng.standard_normal(5000).astype(np.float32)
        scores[rng.choice(5000, 500)] = scores[0]  # a tie shared by many rows, on both sides of position 0
        valid = rng.random(5000) > 0.3
        positions = np.concatenate([np.argsort(-scores)[:8], [0, 4999]]).astype(np.int64)
        assert rank_of(scores, positions).tolist() == ranks(scores)[positions].tolist()
        assert rank_of(scores, positions, valid).tolist() == ranks(scores, valid)[positions].tolist()

    def test_no_positions(self) -> None:
        assert rank_of(np.array([0.3, 0.1]), np.array([])).tolist() == []

    def test_not_a_number_is_above_nothing(self) -> None:
        scores = np.array([0.5, np.nan, 0.9, 0.5, np.nan])
        positions = np.array([0, 1, 2, 3], dtype=np.int64)
        by_pass = [1 + int(np.count_nonzero(scores > scores[p])) for p in positions]  # ties share a rank
        assert rank_of(scores, positions).tolist() == by_pass == [2, 1, 1, 2]
        assert rank_of(scores, np.array([1, 4], dtype=np.int64)).tolist() == [1, 1]


class TestFuseTop:
    """The partial selection returns exactly the first k of a full sort of :func:`fuse`."""

    @staticmethod
    def full_order(vector: np.ndarray, bm25: np.ndarray, alpha: float, method: str) -> np.ndarray:
        fused = fuse(vector, bm25, alpha, method)  # type: ignore[arg-type]
        heavier = vector if alpha >= 0.5 else bm25
        return np.lexsort((np.arange(vector.size), -heavier, -fused.fused))

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    @pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.8, 1.0])
    @pytest.mark.parametrize("k", [1, 5, 40, 500])
    def test_matches_a_full_sort(self, method: str, alpha: float, k: int) -> None:
        rng = np.random.default_rng(7)
        # Rounded scores: ties on the fused score and on each side, as in real pools.
        vector = np.round(rng.random(300), 2)
        bm25 = np.where(rng.random(300) < 0.4, 0.0, np.round(rng.random(300) * 5, 1))
        expected = self.full_order(vector, bm25, alpha, method)[:k]
        full = fuse(vector, bm25, alpha, method)  # type: ignore[arg-type]
        top = fuse_top(vector, bm25, alpha, method, k)  # type: ignore[arg-type]
        assert top.positions.tolist() == expected.tolist()
        assert top.fused.tolist() == full.fused[expected].tolist()
        assert top.vector_rank.tolist() == full.vector_rank[expected].tolist()
        assert top.bm25_rank.tolist() == full.bm25_rank[expected].tolist()
        assert top.vector_normalized.tolist() == full.vector_normalized[expected].tolist()
        assert top.bm25_normalized.tolist() == full.bm25_normalized[expected].tolist()

    def test_tie_break_keys_decide_exact_ties(self) -> None:
        vector, bm25 = np.full(6, 0.5), np.full(6, 1.0)
        top = fuse_top(vector, bm25, 0.5, "weighted", 3, tie_break=np.array([9, 3, 7, 1, 8, 2]))
        assert top.positions.tolist() == [3, 5, 1]

    def test_empty_pool_and_zero_k(self) -> None:
        assert fuse_top(np.array([]), np.array([]), 0.5, "weighted", 3).positions.size == 0
        assert fuse_top(np.array([0.1, 0.2]), np.array([1.0, 0.0]), 0.5, "rrf", 0).positions.size == 0


class TestBlockedFusion:
    """A pool is fused block by block and normalised on demand, with the bits of whole-array arithmetic."""

    @staticmethod
    def scores(n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(n)
        vector = rng.standard_normal(n).astype(dtype)
        bm25 = np.where(rng.random(n) < 0.6, 0.0, rng.random(n) * 9).astype(dtype)
        return vector, bm25

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_a_pool_of_several_blocks_equals_the_whole_array_formula(self, dtype: type) -> None:
        vector, bm25 = self.scores(2 * fusion_module.FUSE_BLOCK_ROWS + 3, dtype)
        pool = fusion_module.fuse_pool(vector, bm25, 0.3, "weighted")
        expected = 0.3 * min_max(vector.astype(np.float64)) + 0.7 * min_max(bm25.astype(np.float64))
        assert pool.fused.view(np.int64).tolist() == expected.view(np.int64).tolist()
        assert pool.vector is vector and pool.bm25 is bm25  # raw scores kept as given, not widened

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    @pytest.mark.parametrize("evidence", [True, False])
    def test_block_size_changes_no_bit(self, method: str, evidence: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        vector, bm25 = self.scores(1000, np.float32)
        whole = fusion_module.fuse_pool(vector, bm25, 0.6, method, vector_evidence=evidence)  # type: ignore[arg-type]
        monkeypatch.setattr(fusion_module, "FUSE_BLOCK_ROWS", 7)
        blocked = fusion_module.fuse_pool(vector, bm25, 0.6, method, vector_evidence=evidence)  # type: ignore[arg-type]
        for name in ("fused", "vector_normalized", "bm25_normalized"):
            assert getattr(blocked, name).tobytes() == getattr(whole, name).tobytes(), name
        positions = blocked.order(25)
        top = blocked.at(positions)
        assert top.vector_normalized.tobytes() == whole.vector_normalized[positions].tobytes()
        assert top.bm25_normalized.tobytes() == whole.bm25_normalized[positions].tobytes()
