"""Ranking metrics: hand-computed cases and an independent implementation (pytrec_eval)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from langchain_fusion.evaluation.metrics import (
    average_precision,
    evaluate_run,
    hit_rate,
    mean_scores,
    mrr,
    ndcg,
    parse_metric,
    precision,
    recall,
)

RANKED = ["d1", "d2", "d3", "d4", "d5"]
QRELS = {"d2": 1, "d4": 2, "d9": 1}  # d9 is relevant but never retrieved


class TestHandComputed:
    def test_hit_rate(self) -> None:
        assert hit_rate(RANKED, QRELS, 1) == 0.0
        assert hit_rate(RANKED, QRELS, 2) == 1.0

    def test_recall(self) -> None:
        assert recall(RANKED, QRELS, 3) == pytest.approx(1 / 3)
        assert recall(RANKED, QRELS, 5) == pytest.approx(2 / 3)

    def test_precision_counts_missing_results_as_misses(self) -> None:
        assert precision(RANKED, QRELS, 4) == pytest.approx(2 / 4)
        assert precision(["d2"], QRELS, 4) == pytest.approx(1 / 4)

    def test_mrr(self) -> None:
        assert mrr(RANKED, QRELS, 5) == pytest.approx(1 / 2)
        assert mrr(RANKED, QRELS, 1) == 0.0

    def test_ndcg_graded(self) -> None:
        dcg = 1 / math.log2(3) + 2 / math.log2(5)
        idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
        assert ndcg(RANKED, QRELS, 5) == pytest.approx(dcg / idcg)

    def test_ndcg_perfect_and_empty(self) -> None:
        assert ndcg(["d4", "d2", "d9"], QRELS, 3) == pytest.approx(1.0)
        assert ndcg([], QRELS, 10) == 0.0
        assert ndcg(RANKED, {}, 10) == 0.0

    def test_average_precision_divides_by_all_relevant(self) -> None:
        assert average_precision(RANKED, QRELS, 5) == pytest.approx((1 / 2 + 2 / 4) / 3)

    def test_zero_grades_are_not_relevant(self) -> None:
        assert hit_rate(["d1"], {"d1": 0}, 1) == 0.0

    def test_parse_metric(self) -> None:
        assert parse_metric("ndcg@10") == ("ndcg", 10)
        for bad in ("ndcg", "ndcg@0", "foo@3", "recall@x"):
            with pytest.raises(ValueError, match="use NAME@K"):
                parse_metric(bad)

    def test_evaluate_run_scores_missing_queries_as_zero(self) -> None:
        per_query = evaluate_run({"q1": ["a"]}, {"q1": {"a": 1}, "q2": {"b": 1}}, ["hit_rate@1"])
        assert per_query == {"q1": {"hit_rate@1": 1.0}, "q2": {"hit_rate@1": 0.0}}
        assert mean_scores(per_query) == {"hit_rate@1": 0.5}


class TestAgainstPytrecEval:
    """A random run scored by trec_eval's implementation must give the same numbers."""

    def test_random_run(self) -> None:
        pytrec_eval = pytest.importorskip("pytrec_eval")
        rng = np.random.default_rng(0)
        docs = [f"d{i}" for i in range(40)]
        qrels = {
            f"q{q}": {
                str(d): int(rng.integers(1, 4)) for d in rng.choice(docs, size=int(rng.integers(1, 6)), replace=False)
            }
            for q in range(30)
        }
        run = {q: list(rng.permutation(docs)[:20]) for q in qrels}
        # trec_eval ranks by score, so give strictly decreasing scores in our order.
        scored = {q: {d: float(100 - i) for i, d in enumerate(ranked)} for q, ranked in run.items()}
        trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10", "map_cut.10", "recall.10", "P.5"}).evaluate(
            scored
        )
        ours = evaluate_run(run, qrels, ["ndcg@5", "ndcg@10", "map@10", "recall@10", "precision@5"])
        for q in qrels:
            assert ours[q]["ndcg@5"] == pytest.approx(trec[q]["ndcg_cut_5"], abs=1e-6)
            assert ours[q]["ndcg@10"] == pytest.approx(trec[q]["ndcg_cut_10"], abs=1e-6)
            assert ours[q]["map@10"] == pytest.approx(trec[q]["map_cut_10"], abs=1e-6)
            assert ours[q]["recall@10"] == pytest.approx(trec[q]["recall_10"], abs=1e-6)
            assert ours[q]["precision@5"] == pytest.approx(trec[q]["P_5"], abs=1e-6)
