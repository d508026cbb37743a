"""HNSW agreement with exact search on real embeddings, next to the synthetic corpora of the same size.

For each corpus: an exact (Flat) and an ``HNSW32`` index over the same rows, then per query the
fused top-10 (alpha 0.5, fetch_k 100, weighted) of both, and the graph's own vector recall@10.
Printed per efSearch: fused top-10 agreement, vector recall@10, p50 of the fused search (query
vector given), and how crowded the vectors are (mean cosine of random pairs of rows).

    python benchmarks/ann_agreement.py                 # SciFact (bundled model) + topics + zipf
    python benchmarks/ann_agreement.py --ef 16,32,64,128

Real embeddings: BEIR SciFact (``../shared/data/scifact``: 5,183 abstracts, the 809 train
queries; CC BY-NC, read in place) embedded by the bundled ``all-MiniLM-L6-v2``, document vectors
read from the embedding cache (``--cache``; missing ones are embedded and added). The synthetic
corpora are ``scale.py``'s two shapes at the same row count, so the rows compare like for like.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency import load_corpus, log  # benchmarks/ is not a package: found by the path above
from scale import CORPUS_MAKERS, FETCH_K, HNSW_FACTORY, K, _document

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"
DEFAULT_CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
ALPHA = 0.5


def scifact(data: Path, cache: Path) -> tuple[list[Any], Any, list[str], np.ndarray]:
    """SciFact's abstracts, the cached bundled embeddings, the train queries and their vectors."""
    from langchain_fusion import LocalEmbeddings
    from langchain_fusion.evaluation.datasets import load_beir
    from langchain_fusion.models.embeddings import CachedEmbeddings

    dataset = load_beir(data, "train")
    embeddings = CachedEmbeddings(LocalEmbeddings(), cache)
    queries = [dataset.queries[q] for q in sorted(dataset.queries)]
    vectors = np.asarray(embeddings.embed_queries(queries), dtype=np.float32)
    return dataset.corpus, embeddings, queries, vectors


def synthetic(shape: str, n: int, n_queries: int, folder: Path) -> tuple[list[Any], Any, list[str], np.ndarray]:
    """``scale.py``'s corpus of this shape with ``n`` rows: documents, lookup embeddings, queries, vectors."""
    CORPUS_MAKERS[shape](folder, n, 384, 0, n_queries)
    corpus = load_corpus(folder)
    documents = [_document(text, row) for row, text in enumerate(corpus.texts)]
    return documents, corpus.embeddings, corpus.queries, corpus.query_vectors


def crowding(vectors: np.ndarray, rng: np.random.Generator) -> float:
    """Mean cosine of 2,000 random pairs of distinct rows."""
    a, b = rng.integers(0, len(vectors), (2, 2000))
    keep = a != b
    return float(np.mean(np.sum(vectors[a[keep]] * vectors[b[keep]], axis=1)))


def measure(name: str, corpus: tuple[list[Any], Any, list[str], np.ndarray], efs: Sequence[int]) -> list[str]:
    """Table rows for one corpus: agreement, recall@10 and p50 per efSearch."""
    import faiss

    from langchain_fusion import FusionIndex
    from langchain_fusion.search.options import PoolOptions
    from langchain_fusion.search.pool import fused_search, query_scorers

    documents, embeddings, queries, query_vectors = corpus
    exact = FusionIndex.from_documents(documents, embeddings)
    approximate = FusionIndex.from_documents(documents, embeddings, vector_index=HNSW_FACTORY)
    exact_view, ann_view = exact.view(), approximate.view()
    segment = ann_view.snapshot.segments[0]
    graph = segment.ann._index  # the benchmark sets efSearch on the built graph directly
    vectors = np.asarray(segment.vectors)
    searches = [(q, query_vectors[i : i + 1]) for i, q in enumerate(queries)]

    def fused(view: Any, query: str, vector: np.ndarray) -> list[int]:
        options = PoolOptions(k=K, alpha=ALPHA, fetch_k=FETCH_K, duplicates="keep")
        hits = fused_search(view, query_scorers(view, query, vector), options)
        return [h.key for h in hits]

    reference = [set(fused(exact_view, q, v)) for q, v in searches]
    true_top = [set(np.argsort(-(vectors @ v[0]))[:K].tolist()) for _, v in searches]
    rows = []
    for ef in [None, *efs]:
        if ef is not None:
            faiss.ParameterSpace().set_index_parameters(graph, f"efSearch={ef}")
        label = f"default ({graph.hnsw.efSearch})" if ef is None else str(ef)
        times, agree, recall = [], [], []
        for (query, vector), expected, top in zip(searches, reference, true_top, strict=True):
            t0 = time.perf_counter()
            got = fused(ann_view, query, vector)
            times.append((time.perf_counter() - t0) * 1000)
            agree.append(len(expected & set(got)) / max(len(expected), 1))
            _, found = graph.search(vector, K)
            recall.append(len(top & set(found[0].tolist())) / K)
        rows.append(
            f"| {name} | {len(documents):,} | {crowding(vectors, np.random.default_rng(0)):.2f} | {label} | "
            f"{np.mean(agree):.3f} | {np.mean(recall):.3f} | {statistics.median(times):.2f} |"
        )
        log(rows[-1])
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Measure each corpus and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR SciFact folder")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder")
    parser.add_argument("--ef", default="16,32,64,128", help="efSearch values to sweep besides the default")
    parser.add_argument("--corpus", default="scifact,topics,zipf", help="corpora: scifact, topics, zipf")
    args = parser.parse_args(argv)
    efs = [int(x) for x in args.ef.split(",") if x]
    names = [c.strip() for c in args.corpus.split(",") if c.strip()]
    lines = [
        "| corpus | rows | mean cosine of random pairs | efSearch | fused top-10 agreement | graph recall@10 "
        "| fused search p50 ms |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    real = scifact(args.data, args.cache) if "scifact" in names else None
    rows = len(real[0]) if real is not None else 5183
    if real is not None:
        lines += measure("SciFact, all-MiniLM-L6-v2", real, efs)
    for shape in (s for s in names if s != "scifact"):
        with tempfile.TemporaryDirectory(prefix="lf-ann-") as tmp:
            lines += measure(f"synthetic {shape}", synthetic(shape, rows, 809, Path(tmp)), efs)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
