"""Ranking metrics at a cutoff k, per query and averaged, following trec_eval's definitions.

A document is relevant when its grade is > 0. nDCG uses the grade as gain (as trec_eval and
BEIR do) and the ideal ordering of all judged documents; MAP divides by the number of
relevant documents (trec_eval's ``map_cut``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from langchain_fusion.errors import InvalidParameterError

Metric = Callable[[Sequence[str], Mapping[str, int], int], float]
"""A metric: (ranked document ids, {document id: grade}, k) -> score in [0, 1]."""


def _relevant(qrels: Mapping[str, int]) -> set[str]:
    return {doc for doc, grade in qrels.items() if grade > 0}


def hit_rate(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1.0 if any of the top ``k`` is relevant, else 0.0."""
    relevant = _relevant(qrels)
    return float(any(doc in relevant for doc in ranked[:k]))


def recall(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``."""
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def precision(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the top ``k`` positions holding a relevant document (missing results count as misses)."""
    relevant = _relevant(qrels)
    return sum(doc in relevant for doc in ranked[:k]) / k


def mrr(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document in the top ``k`` (0.0 if none)."""
    relevant = _relevant(qrels)
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def ndcg(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Normalised discounted cumulative gain at ``k`` with graded gains."""
    dcg = sum(max(qrels.get(doc, 0), 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1))
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def average_precision(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Average of precision@i over the relevant ranks i <= ``k``, divided by all relevant documents."""
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            found += 1
            total += found / rank
    return total / len(relevant)


METRICS: dict[str, Metric] = {
    "hit_rate": hit_rate,
    "recall": recall,
    "precision": precision,
    "mrr": mrr,
    "ndcg": ndcg,
    "map": average_precision,
}
"""Metric functions by name; ``name@k`` (e.g. ``ndcg@10``) selects one at a cutoff."""


def parse_metric(spec: str) -> tuple[str, int]:
    """Split ``"ndcg@10"`` into ``("ndcg", 10)``; raise InvalidParameterError naming the valid choices."""
    name, _, cutoff = spec.partition("@")
    if name not in METRICS or not cutoff.isdigit() or int(cutoff) < 1:
        raise InvalidParameterError(
            f"unknown metric {spec!r}: use NAME@K with NAME one of {', '.join(METRICS)} (e.g. ndcg@10)"
        )
    return name, int(cutoff)


def evaluate_run(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], metrics: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Score a run ({query id: ranked document ids}) per query: {query id: {metric: value}}.

    Every judged query is scored; a judged query missing from the run scores 0.
    """
    parsed = [(spec, *parse_metric(spec)) for spec in metrics]
    return {
        query_id: {spec: METRICS[name](run.get(query_id, ()), judged, k) for spec, name, k in parsed}
        for query_id, judged in qrels.items()
    }


def mean_scores(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Average per-query scores over queries (an empty input gives an empty result)."""
    if not per_query:
        return {}
    names = next(iter(per_query.values())).keys()
    return {name: sum(scores[name] for scores in per_query.values()) / len(per_query) for name in names}
