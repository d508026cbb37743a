"""What limits the default fusion on BEIR SciFact train: each candidate change, measured alone.

Prints one markdown table (nDCG@10, recall@10, MRR@10 over the train queries) of the default
(weighted min-max fusion, alpha 0.5, fetch_k 100, BM25 k1 0.9 b 0.4, the first 256 word
pieces embedded) against the changes the quality issue names: alpha and the fusion method,
the pool size, BM25 parameters, BM25 over title and body as separate fields, embedding long
abstracts as overlapping windows (mean, first + mean, or max pooled), a title embedding mixed
in, and vector pseudo-relevance feedback. Scores are computed once per side as dense arrays
(our BM25 via ``FusionIndex``, vectors by matrix products) and fused here exactly as
``search.pool.fused_search`` does, so each row costs a fraction of a second after the
embeddings (about 10 minutes on 2 cores, cached in ``--cache``).

    python benchmarks/quality_ablation.py [--data ../shared/data/scifact] [--split train]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import FusionIndex, LocalEmbeddings
from langchain_fusion.evaluation.datasets import beir_text
from langchain_fusion.evaluation.metrics import mrr, ndcg, recall
from langchain_fusion.search.pool import query_scorers
from langchain_fusion.stores.settings import BM25Params

REPO = Path(__file__).resolve().parent.parent
WINDOW = 254  # word pieces per window, plus [CLS] and [SEP]: the model's 256
STRIDE = 192  # windows overlap by 62 pieces


class _Unit(Embeddings):
    """Two-dimensional constant vectors: the BM25 matrices need an index, not its vectors."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-scores, min(k, scores.size - 1))[:k]
    return part[np.lexsort((part, -scores[part]))]


def _min_max(x: np.ndarray) -> np.ndarray:
    low, high = x.min(), x.max()
    return (x - low) / (high - low) if high > low else np.full_like(x, 1.0 if high > 0 else 0.0)


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / x.std() if x.std() > 0 else np.zeros_like(x)


def _rrf(x: np.ndarray) -> np.ndarray:
    rank = np.empty(x.size)
    rank[np.argsort(-x, kind="stable")] = np.arange(1, x.size + 1)
    return 1.0 / (60 + rank)


class Experiment:
    """SciFact queries, qrels, and the score matrices of each side."""

    def __init__(self, data: Path, split: str, cache: Path) -> None:
        records = [json.loads(line) for line in (data / "corpus.jsonl").open(encoding="utf-8")]
        self.ids = [str(r["_id"]) for r in records]
        self.titles = [r.get("title") or "" for r in records]
        self.bodies = [r.get("text") or "" for r in records]
        self.texts = [beir_text(t, b) for t, b in zip(self.titles, self.bodies, strict=True)]
        queries = {str(q["_id"]): q["text"] for q in map(json.loads, (data / "queries.jsonl").open(encoding="utf-8"))}
        self.qrels: dict[str, dict[str, int]] = {}
        with (data / "qrels" / f"{split}.tsv").open(encoding="utf-8") as f:
            rows = csv.reader(f, delimiter="\t")
            next(rows)
            for qid, doc_id, score in rows:
                if int(score) > 0:
                    self.qrels.setdefault(qid, {})[doc_id] = int(score)
        self.qids = sorted(self.qrels)
        self.queries = [queries[q] for q in self.qids]
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)
        self.local = LocalEmbeddings()
        self.query_vectors = np.asarray(self.local.embed_queries(self.queries), dtype=np.float32)

    def bm25(self, texts: list[str], params: BM25Params | None = None) -> np.ndarray:
        """Queries x documents BM25 scores from our own index."""
        docs = [Document(page_content=t, id=i) for t, i in zip(texts, self.ids, strict=True)]
        index = FusionIndex.from_documents(docs, _Unit(), bm25_params=params)
        view = index.view()
        keys = view.keys_of(self.ids)
        probe = np.array([[1.0, 0.0]], dtype=np.float32)
        out = np.zeros((len(self.qids), len(self.ids)), dtype=np.float32)
        for row, query in enumerate(self.queries):
            out[row] = query_scorers(view, query, probe).bm25.all_scores()[keys]  # type: ignore[attr-defined]
        return out

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Unit vectors of overlapping windows of every text, and the text each belongs to (cached)."""
        path = self.cache / f"scifact-windows-{WINDOW}-{STRIDE}.npz"
        if path.exists():
            saved = np.load(path)
            return saved["vectors"], saved["owner"]
        from langchain_fusion.models.wordpieces import bundled_tokenizer

        tokenizer = bundled_tokenizer()
        pieces = [e.ids for e in tokenizer.encode_batch(self.texts, add_special_tokens=False)]
        texts, owner = [], []
        for i, ids in enumerate(pieces):
            starts = list(range(0, max(len(ids) - WINDOW, 0) + 1, STRIDE))
            if starts[-1] + WINDOW < len(ids):
                starts.append(len(ids) - WINDOW)
            for start in starts:
                texts.append(tokenizer.decode(ids[start : start + WINDOW]))
                owner.append(i)
        print(f"embedding {len(texts)} windows of {len(self.texts)} texts...", file=sys.stderr, flush=True)
        vectors = np.asarray(self.local.embed_documents(texts), dtype=np.float32)
        np.savez(path, vectors=vectors, owner=np.asarray(owner))
        return vectors, np.asarray(owner)

    def embed(self, name: str, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (cached)."""
        path = self.cache / f"scifact-{name}.npy"
        if not path.exists():
            print(f"embedding {len(texts)} {name}...", file=sys.stderr, flush=True)
            np.save(path, np.asarray(self.local.embed_documents(texts), dtype=np.float32))
        return np.asarray(np.load(path), dtype=np.float32)

    def run_ranked(
        self,
        vector: np.ndarray,
        bm25: np.ndarray,
        alpha: float = 0.5,
        fetch_k: int | None = 100,
        normalise: Callable[[np.ndarray], np.ndarray] = _min_max,
        k: int = 10,
    ) -> list[np.ndarray]:
        """Each query's top ``k`` rows, fused as ``search.pool.fused_search`` does."""
        ranked = []
        for row in range(len(self.qids)):
            v, b = vector[row].astype(np.float64), bm25[row].astype(np.float64)
            if alpha >= 1 or alpha <= 0:
                ranked.append(_top(v if alpha >= 1 else b, k))
                continue
            pool = np.union1d(_top(v, fetch_k), _top(b, fetch_k)) if fetch_k else np.arange(v.size)
            fused = alpha * normalise(v[pool]) + (1 - alpha) * normalise(b[pool])
            ranked.append(pool[np.lexsort((pool, -(v if alpha >= 0.5 else b)[pool], -fused))[:k]])
        return ranked

    def run(self, vector: np.ndarray, bm25: np.ndarray, k: int = 10, **options: Any) -> np.ndarray:
        """Each query's (nDCG, recall, MRR) at ``k`` of :meth:`run_ranked`, one row per query."""
        results = []
        for qid, top in zip(self.qids, self.run_ranked(vector, bm25, k=k, **options), strict=True):
            ranked = [self.ids[i] for i in top]
            qrels = self.qrels[qid]
            results.append((ndcg(ranked, qrels, k), recall(ranked, qrels, k), mrr(ranked, qrels, k)))
        return np.asarray(results)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "scifact")
    parser.add_argument("--split", default="train")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "langchain-fusion" / "ablation")
    args = parser.parse_args()
    ex = Experiment(args.data, args.split, args.cache)
    q = ex.query_vectors
    first = ex.embed("texts", ex.texts)
    bm25 = ex.bm25(ex.texts)
    vector = q @ first.T
    rows: list[tuple[str, np.ndarray]] = []

    def add(name: str, per_query: np.ndarray) -> None:
        rows.append((name, per_query))
        print(f"{name}: {per_query[:, 0].mean():.4f}", file=sys.stderr, flush=True)

    add("vector only", ex.run(vector, bm25, alpha=1.0))
    add("BM25 only", ex.run(vector, bm25, alpha=0.0))
    add("**default**: weighted min-max, alpha 0.5, fetch_k 100", ex.run(vector, bm25))
    for alpha in (0.4, 0.45, 0.55, 0.6):
        add(f"alpha {alpha}", ex.run(vector, bm25, alpha=alpha))
    add("z-score fusion, alpha 0.5", ex.run(vector, bm25, normalise=_z))
    add("RRF, alpha 0.5", ex.run(vector, bm25, normalise=_rrf))
    for fetch_k in (20, 50, 200, None):
        add(f"fetch_k {fetch_k or 'all (whole corpus)'}", ex.run(vector, bm25, fetch_k=fetch_k))
    for k1, b in ((1.2, 0.75), (1.2, 0.4), (0.9, 0.6)):
        add(f"BM25 k1 {k1} b {b}", ex.run(vector, ex.bm25(ex.texts, BM25Params(k1=k1, b=b))))
    body, title = ex.bm25(ex.bodies), ex.bm25(ex.titles)
    for weight in (0.5, 1.0):
        fields = body + weight * title
        add(f"BM25 fields: body + {weight} x title", ex.run(vector, fields))
    windows, owner = ex.windows()
    counts = np.bincount(owner, minlength=len(ex.ids)).astype(np.float32)
    mean = np.zeros_like(first)
    np.add.at(mean, owner, windows)
    first_plus_mean = mean + first
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    first_plus_mean /= np.linalg.norm(first_plus_mean, axis=1, keepdims=True)
    longer = int((counts > 1).sum())
    add(f"windows ({longer} of {len(ex.ids)} texts longer): mean pooled", ex.run(q @ mean.T, bm25))
    add("windows: first + mean pooled", ex.run(q @ first_plus_mean.T, bm25))
    window_scores = q @ windows.T
    best = np.full_like(vector, -np.inf)
    np.maximum.at(best.T, owner, window_scores.T)
    add("windows: max over windows (one vector per window)", ex.run(best, bm25))
    titles = ex.embed("titles", ex.titles)
    add("vector: 0.8 x text + 0.2 x title", ex.run(0.8 * vector + 0.2 * (q @ titles.T), bm25))
    fused_top = [np.argsort(-vector[row])[:3] for row in range(len(ex.qids))]
    feedback = q + 0.5 * np.stack([first[top].mean(axis=0) for top in fused_top])
    feedback /= np.linalg.norm(feedback, axis=1, keepdims=True)
    add("vector pseudo-relevance feedback (top 3 by vector, beta 0.5)", ex.run(feedback @ first.T, bm25))
    fused_ranking = ex.run_ranked(vector, bm25)
    feedback = q + 0.3 * np.stack([first[top[:3]].mean(axis=0) for top in fused_ranking])
    feedback /= np.linalg.norm(feedback, axis=1, keepdims=True)
    add("vector pseudo-relevance feedback (top 3 fused, beta 0.3)", ex.run(feedback @ first.T, bm25))
    add("z-score fusion + 0.2 x title vector", ex.run(0.8 * vector + 0.2 * (q @ titles.T), bm25, normalise=_z))
    print(f"SciFact {args.split}, {len(ex.qids)} queries, {len(ex.ids)} abstracts, bundled all-MiniLM-L6-v2\n")
    baseline = next(per_query for name, per_query in rows if name.startswith("**default**"))[:, 0]
    print(
        "Paired against the default, query by query: the change in mean nDCG@10, a 95% bootstrap interval"
        " of that change (2,000 resamples of the queries), and the queries whose nDCG@10 rose / fell.\n"
    )
    print("| change | nDCG@10 | recall@10 | MRR@10 | vs default | 95% interval | better / worse |")
    print("|---|---:|---:|---:|---:|---|---:|")
    rng = np.random.default_rng(0)
    for name, per_query in rows:
        n, r, m = per_query.mean(axis=0)
        diff = per_query[:, 0] - baseline
        boots = diff[rng.integers(0, diff.size, (2000, diff.size))].mean(axis=1)
        low, high = np.percentile(boots, [2.5, 97.5])
        paired = f"{diff.mean():+.4f} | {low:+.4f} .. {high:+.4f} | {(diff > 0).sum()} / {(diff < 0).sum()}"
        print(f"| {name} | {n:.4f} | {r:.4f} | {m:.4f} | {paired} |")


if __name__ == "__main__":
    main()
