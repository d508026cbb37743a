"""How well can a result's scores say P(relevant)? The measurement protocol of issue 28, on SciFact train.

For every SciFact train query, and for off-topic questions from other domains
(``offtopic_questions.txt``, written for this benchmark), the default fused top-10 and, per
result, the signals a calibration model could read at query time: raw cosine, raw BM25, fused
score, fused rank, each side's rank, the top scores of each side's pool, and the IDF-weighted
share of the query's terms the result contains, BM25 over its query bound (the sum of the query
terms' IDF), BM25 per query token, the number of query terms, and gaps to each side's 10th
candidate. The library's own model (``index.calibrate`` on half of the queries, seeded split) and
logistic models over other feature sets, fitted on the same half, are measured on the other half:

- ECE (10 equal-width bins) and Brier score over the held-out top-10 results;
- answered: held-out SciFact queries with a result at or above ``--floor`` (0.3);
- abstained: off-topic questions with no result at or above the floor;
- near-miss AUROC: the relevant documents of half the held-out queries are removed from the
  index; how well the top result's relevance separates the queries still answerable from
  those that are not (the issue's target: >= 0.75; top raw cosine alone about 0.62-0.66).

    python benchmarks/calibration.py                  # ~3 min on 2 cores with cached vectors
    python benchmarks/calibration.py --floor 0.25 --seed 1

Data: ``../shared/data/scifact`` (CC BY-NC, read in place, never copied). Embeddings: the
bundled model behind the on-disk ``CachedEmbeddings`` (the quality benchmark's cache).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"
DEFAULT_CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
OFF_TOPIC = Path(__file__).resolve().parent / "offtopic_questions.txt"
POOL = 100

FEATURE_SETS: dict[str, list[str]] = {
    "raw scores (cosine, BM25)": ["cosine", "bm25"],
    "cosine, log BM25": ["cosine", "log_bm25"],
    "+ log fused rank": ["cosine", "log_bm25", "log_rank"],
    "+ term coverage": ["cosine", "log_bm25", "log_rank", "coverage"],
    "+ BM25 / its query bound": ["cosine", "log_bm25", "log_rank", "bm25_ratio"],
    "+ BM25 per query token": ["cosine", "log_bm25", "log_rank", "per_term"],
    "+ log query terms": ["cosine", "log_bm25", "log_rank", "n_terms"],
    "+ bound, vector pool top gap": ["cosine", "log_bm25", "log_rank", "bm25_ratio", "top_gap"],
    "+ bound, gaps to 10th (both sides)": ["cosine", "log_bm25", "log_rank", "bm25_ratio", "cos_gap10", "bm25_gap10"],
    "+ side ranks": ["cosine", "log_bm25", "log_rank", "coverage", "log_vector_rank", "log_bm25_rank"],
    "query-relative (gap to top, share of top BM25)": ["cosine", "log_bm25", "log_rank", "cosine_gap", "bm25_share"],
}
"""Each row of the table: a logistic model over these features."""


@dataclass
class Row:
    """One result of one query, with its label and signals."""

    query: str
    kind: str
    relevant: int
    features: dict[str, float]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def collect(index: object, queries: Sequence[tuple[str, str, str]], qrels: dict[str, dict[str, int]]) -> list[Row]:
    """The top-10 of each ``(id, text, kind)`` query with the signals of each result."""
    from langchain_fusion.stores.analyzer import Analyzer

    analyzer = Analyzer()
    view = index.view()  # type: ignore[attr-defined]
    texts = {doc.id: doc.page_content for doc in index.documents}  # type: ignore[attr-defined]
    tokens = {key: set(analyzer.tokenize(text)) for key, text in texts.items()}
    frequency = Counter(token for found in tokens.values() for token in found)
    n = len(tokens)

    def idf(token: str) -> float:
        df = frequency.get(token, 0)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    retriever = index.as_retriever(k=10)  # type: ignore[attr-defined]
    rows = []
    for qid, text, kind in queries:
        vector_scores = view.vector(index.embed_query(text)).top(POOL, None)[1]  # type: ignore[attr-defined]
        bm25_scores = view.bm25(text).top(POOL, None)[1]
        query_tokens = analyzer.tokenize(text)
        terms = set(query_tokens)
        weight = sum(idf(t) for t in terms) or 1.0
        bound = sum(idf(t) for t in query_tokens) or 1.0  # lucene BM25 without (k1 + 1) is below sum(idf)
        top_bm25 = float(bm25_scores[0]) if len(bm25_scores) else 0.0
        tenth_cosine = float(vector_scores[min(9, len(vector_scores) - 1)])
        tenth_bm25 = float(bm25_scores[min(9, len(bm25_scores) - 1)]) if len(bm25_scores) else 0.0
        for rank, doc in enumerate(retriever.invoke(text), start=1):
            meta = doc.metadata
            cosine = float(meta.get("vector_score") or 0.0)
            bm25 = float(meta.get("bm25_score") or 0.0)
            features = {
                "cosine": cosine,
                "bm25": bm25,
                "log_bm25": math.log1p(bm25),
                "log_rank": math.log(rank),
                "coverage": sum(idf(t) for t in terms & tokens.get(doc.id, set())) / weight,
                "bm25_ratio": bm25 / bound,
                "per_term": bm25 / max(len(query_tokens), 1),
                "n_terms": math.log(1 + len(terms)),
                "top_gap": float(vector_scores[0]) - tenth_cosine,
                "cos_gap10": cosine - tenth_cosine,
                "bm25_gap10": math.log1p(bm25) - math.log1p(tenth_bm25),
                "log_vector_rank": math.log(meta.get("vector_rank") or POOL + 1),
                "log_bm25_rank": math.log(meta.get("bm25_rank") or POOL + 1),
                "cosine_gap": cosine - float(vector_scores[0]),
                "bm25_share": bm25 / top_bm25 if top_bm25 > 0 else 0.0,
                "relevance": float(meta.get("relevance", float("nan"))),
            }
            relevant = int(qrels.get(qid, {}).get(str(doc.id), 0) > 0)
            rows.append(Row(qid, kind, relevant, features))
    return rows


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Probability that a positive outscores a negative (ties count half)."""
    s, y = np.asarray(scores), np.asarray(labels)
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def top_by_query(rows: Sequence[Row], p: np.ndarray) -> dict[str, float]:
    """Each query's highest relevance among its results."""
    top: dict[str, float] = {}
    for row, value in zip(rows, p, strict=True):
        top[row.query] = max(top.get(row.query, 0.0), float(value))
    return top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--floor", type=float, default=0.3)
    args = parser.parse_args()

    from langchain_fusion import FusionIndex, LocalEmbeddings
    from langchain_fusion.evaluation.datasets import EvalDataset, load_beir
    from langchain_fusion.models.embeddings import CachedEmbeddings
    from langchain_fusion.search.relevance import expected_calibration_error, fit_logistic, logistic_probability

    dataset = load_beir(args.data, "train")
    embeddings = CachedEmbeddings(LocalEmbeddings(), args.cache)
    rng = np.random.default_rng(args.seed)
    ids = sorted(dataset.queries)
    rng.shuffle(ids)
    fit_ids, held_ids = set(ids[: len(ids) // 2]), ids[len(ids) // 2 :]
    removed_for = set(rng.choice(held_ids, len(held_ids) // 2, replace=False))
    removed = {doc for q in removed_for for doc, grade in dataset.qrels[q].items() if grade > 0}
    off_topic = [line.strip() for line in OFF_TOPIC.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = [(q, text, "scifact") for q, text in dataset.queries.items()]
    queries += [(f"off-{i}", text, "off") for i, text in enumerate(off_topic)]

    log(f"indexing {len(dataset.corpus)} abstracts")
    full = FusionIndex.from_documents(dataset.corpus, embeddings)
    fit_set = EvalDataset(
        name="scifact-train-fit",
        queries={q: dataset.queries[q] for q in sorted(fit_ids)},
        qrels={q: dataset.qrels[q] for q in sorted(fit_ids)},
    )
    shipped = full.calibrate(fit_set)  # what a user runs: the library's own model, on the fitted half
    rows = collect(full, queries, dataset.qrels)
    kept = [doc for doc in dataset.corpus if doc.id not in removed]
    log(f"indexing {len(kept)} abstracts (the relevant ones of {len(removed_for)} held-out queries removed)")
    held = set(held_ids)
    reduced = FusionIndex.from_documents(kept, embeddings)
    reduced.saved_info = dict(full.saved_info)  # the same relevance model
    near = collect(reduced, [q for q in queries if q[0] in held], dataset.qrels)
    answerable = {q: int(any(g > 0 and d not in removed for d, g in dataset.qrels[q].items())) for q in held}

    print(
        f"SciFact train: {len(fit_ids)} queries fitted, {len(held_ids)} held out (seed {args.seed}); "
        f"{len(off_topic)} off-topic questions; floor {args.floor}; default fused top-10\n"
    )
    print("| features | ECE | Brier | answered | abstained (off-topic) | near-miss AUROC |")
    print("|---|---|---|---|---|---|")
    sets = {
        f"**shipped: `index.calibrate`** (held-out ECE in its fit: {shipped.quality.expected_calibration_error:.4f})": [
            "relevance"
        ],
        **FEATURE_SETS,
    }
    for name, features in sets.items():

        def matrix(subset: Sequence[Row], features: list[str] = features) -> np.ndarray:
            return np.array([[row.features[f] for f in features] for row in subset])

        train = [r for r in rows if r.query in fit_ids]
        test = [r for r in rows if r.kind == "scifact" and r.query not in fit_ids]
        off = [r for r in rows if r.kind == "off"]
        if features == ["relevance"]:
            model: Callable[[np.ndarray], np.ndarray] = lambda z: z[:, 0]  # noqa: E731  # already P(relevant)
        else:
            fitted = fit_logistic(matrix(train), np.array([r.relevant for r in train], dtype=float))
            model = lambda z, fit=fitted: logistic_probability(z, *fit)  # noqa: E731
        p_test, y_test = model(matrix(test)), np.array([r.relevant for r in test], dtype=float)
        answered = np.mean([v >= args.floor for v in top_by_query(test, p_test).values()])
        abstained = np.mean([v < args.floor for v in top_by_query(off, model(matrix(off))).values()])
        near_top = top_by_query(near, model(matrix(near)))
        separation = auroc(list(near_top.values()), [answerable[q] for q in near_top])
        print(
            f"| {name} | {expected_calibration_error(p_test, y_test):.4f} | {np.mean((p_test - y_test) ** 2):.4f} | "
            f"{answered:.3f} | {abstained:.3f} | {separation:.3f} |"
        )
    near_cos = top_by_query(near, np.array([r.features["cosine"] for r in near]))
    near_bm25 = top_by_query(near, np.array([r.features["bm25"] for r in near]))
    labels = [answerable[q] for q in near_cos]
    print(
        f"\nNear misses: {sum(labels)} held-out queries still answerable, {len(labels) - sum(labels)} not. "
        f"Single raw signals: top cosine AUROC {auroc(list(near_cos.values()), labels):.3f}, "
        f"top BM25 {auroc(list(near_bm25.values()), labels):.3f}."
    )


if __name__ == "__main__":
    main()
