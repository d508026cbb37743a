"""Models that cannot read a query: fusion against BM25 with a declared and an undeclared English-only model.

Run on demand (it reads the development sets from ../shared/data, which the repository does not ship)::

    .venv/bin/python benchmarks/unread_queries.py                 # every set (make bench-unread)
    .venv/bin/python benchmarks/unread_queries.py --sets ja,zh    # some of them

Two models give the same vectors: the bundled all-MiniLM-L6-v2 (``LocalEmbeddings``, which declares that it
reads Latin script), and the same model behind a plain ``Embeddings`` class that declares nothing, as a
user's own sentence-transformers or Hugging Face wrapper does. Before this change a model that declared
nothing read every query; ``unread_queries="declared"`` is exactly that behaviour, so "before" and "after"
are measured in the same run on the same index: ``declared`` against ``auto`` (the probe).

Sets: JSQuAD v1.3 validation (ja) and CMRC 2018 trial (zh), CC BY-SA 4.0, every passage a document and a
question's relevant document the passage it was asked about (attribution in ../shared/data/cjk/README.md);
BEIR SciFact train (en, CC BY-NC 2.0); the bundled sample (``data/``, its 54 labelled queries).
Metric: nDCG@10. Paired tests (``langchain_fusion.evaluation.paired_test``: randomization p-value and a
bootstrap 95% interval of the mean per-query difference): fusion after against before, and fusion after
against BM25. Cost: the one probe (its texts embedded in one call, timed with the model itself, no cache),
and per query the time ``FusionIndex.unread`` takes against the time of the fused search it decides (medians
over the set's queries, the probe already run).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion.evaluation import EvalDataset, load_beir, load_labelled, paired_test
from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings
from langchain_fusion.models.scripts import letters_by_script, probe_scripts
from langchain_fusion.search.options import PoolOptions
from langchain_fusion.search.pool import SearchTrace, fused_search, query_scorers
from tests.helpers.benchmark_runs import chosen, run_header
from tests.helpers.question_sets import CJK_DATA, SETS

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
SET_NAMES = ("ja", "zh", "scifact", "sample")
COST_QUERIES = 200
"""Queries of each set timed for the per-query cost."""


class QueryMemo(CachedEmbeddings):
    """The bundled model with its document vectors cached on disk and each query embedded once in this run."""

    def __init__(self) -> None:
        super().__init__(LocalEmbeddings(), CACHE)
        self.queries: dict[str, list[float]] = {}

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        missing = [text for text in dict.fromkeys(texts) if text not in self.queries]
        if missing:
            self.queries.update(zip(missing, super().embed_queries(missing), strict=True))
        return [self.queries[text] for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_queries([text])[0]


class PlainEmbeddings(Embeddings):
    """The same model behind a class that declares nothing (no ``scripts``), as a user's own wrapper would be."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.model = "plain-all-MiniLM-L6-v2"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return list(self.inner.embed_queries(texts))  # type: ignore[attr-defined]


def question_set(name: str) -> EvalDataset:
    """A JSQuAD or CMRC set as an :class:`EvalDataset` (one relevant passage per question)."""
    file, read = SETS[name]
    passages, questions = read(CJK_DATA / file)
    corpus = [Document(id=i, page_content=text) for i, text in passages]
    queries = {f"q{i}": q for i, (q, _) in enumerate(questions)}
    qrels = {f"q{i}": {gold: 1} for i, (_, gold) in enumerate(questions)}
    return EvalDataset(name=name, queries=queries, qrels=qrels, corpus=corpus)


def sample_set() -> EvalDataset:
    """The bundled sample: the chunks an index of ``data/`` holds, its 54 labelled queries."""
    documents = list(FusionIndex.from_files([REPO / "data"], CachedEmbeddings(LocalEmbeddings(), CACHE)).documents)
    labelled = load_labelled(REPO / "data" / "queries.json", documents)
    return EvalDataset(name="sample", queries=labelled.queries, qrels=labelled.qrels, corpus=documents)


LOADERS: dict[str, tuple[str, Callable[[], EvalDataset]]] = {
    "ja": ("JSQuAD (ja)", lambda: question_set("jsquad")),
    "zh": ("CMRC 2018 (zh)", lambda: question_set("cmrc")),
    "scifact": ("SciFact train (en)", lambda: load_beir(SCIFACT, split="train")),
    "sample": ("bundled sample (en)", sample_set),
}


def ndcg10(ranked: Sequence[str], relevance: dict[str, int]) -> float:
    gains = sum(relevance.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:10]))
    ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(sorted(relevance.values(), reverse=True)[:10]))
    return gains / ideal if ideal else 0.0


def per_query(retriever: Any, dataset: EvalDataset, ids: list[str]) -> list[float]:
    """nDCG@10 of each query (one ``batch`` call)."""
    found = retriever.batch([dataset.queries[q] for q in ids])
    return [ndcg10([d.id or "" for d in docs], dataset.qrels[q]) for docs, q in zip(found, ids, strict=True)]


def tested(current: list[float], baseline: list[float]) -> str:
    """A paired test's figures in one cell: mean difference, 95% interval, p-value (or "identical")."""
    if current == baseline:
        return "identical"
    test = paired_test(current, baseline)
    return f"{test.delta:+.4f} [{test.low:+.4f}, {test.high:+.4f}], p={test.p_value:.3g}"


def mean_us(action: Callable[[], Any], repeats: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        action()
    return (time.perf_counter() - started) / repeats * 1e6


def measure(key: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """The quality row, the cost row, the evidence row and the notes of one set."""
    label, load = LOADERS[key]
    dataset = load()
    ids = list(dataset.queries)
    cached = QueryMemo()
    declared = FusionIndex.from_documents(dataset.corpus, cached)
    plain = FusionIndex.from_documents(dataset.corpus, PlainEmbeddings(cached))
    print(f"{label}: indexed", file=sys.stderr, flush=True)
    bm25 = per_query(BM25Retriever(index=declared, k=10), dataset, ids)
    vector = per_query(VectorRetriever(index=declared, k=10), dataset, ids)
    fused_declared = per_query(FusionRetriever(index=declared, k=10), dataset, ids)
    before = per_query(FusionRetriever(index=plain, k=10, unread_queries="declared"), dataset, ids)
    after = per_query(FusionRetriever(index=plain, k=10), dataset, ids)
    texts = [dataset.queries[q] for q in ids]
    dropped = sum(plain.unread(text) is not None for text in texts)
    mean = statistics.fmean
    quality = (
        f"| {label} | {len(ids):,} | {mean(bm25):.4f} | {mean(vector):.4f} | {mean(fused_declared):.4f} | "
        f"{mean(before):.4f} | {mean(after):.4f} | {mean(after) - mean(bm25):+.4f} | {dropped:,} | "
        f"{tested(after, before)} | {tested(after, bm25)} |"
    )
    timed = texts[:COST_QUERIES]
    fused = FusionRetriever(index=plain, k=10)
    fused.invoke(timed[0])  # the probe, if this set needs one, runs here: not timed per query
    check = [mean_us(lambda t=t: plain.unread(t), 20) for t in timed]  # type: ignore[misc]
    search = [mean_us(lambda t=t: fused.invoke(t)) for t in timed]  # type: ignore[misc]
    unread_us, search_us = statistics.median(check), statistics.median(search)
    cost = f"| {label} | {len(timed)} | {unread_us:.1f} | {search_us / 1000:.2f} | {unread_us / search_us:.3%} |"
    spread, agreement, low = evidence(plain, texts)
    signal = f"| {label} | {spread:.2f} | {agreement:.2f} | {low:.1%} | {mean(vector):.4f} |"
    scripts = {s for t in texts for s in letters_by_script(t)}
    notes = [f"- {label}: scripts of the queries' letters {sorted(scripts)}; queries the undeclared model cannot "
             f"read: {dropped:,} of {len(ids):,}."]  # fmt: skip
    return [quality], [cost], [signal], notes


def evidence(index: FusionIndex, texts: list[str]) -> tuple[float, float, float]:
    """Per-query evidence the probe does not use, over each query's fused pool (defaults, ``unread_queries="fuse"``).

    Medians over the queries of: the vector side's spread (how far its best candidate stands above the pool's
    median cosine, in the pool's standard deviations) and the agreement of the two sides' top 10s (shared
    share); and the share of queries whose top 10s share at most one document.
    """
    view = index.view()
    options = PoolOptions.model_construct(k=10, unread_queries="fuse")
    vectors = index.embed_queries(texts)
    spreads, agreements = [], []
    for i, text in enumerate(texts):
        trace = SearchTrace()
        fused_search(view, query_scorers(view, text, vectors[i : i + 1]), options, trace)
        assert trace.fused is not None
        vector, bm25 = np.asarray(trace.fused.vector, float), np.asarray(trace.fused.bm25, float)
        spreads.append(float((vector.max() - np.median(vector)) / (vector.std() or 1.0)))
        order = np.argsort(-bm25)[:10]
        top_v, top_b = set(np.argsort(-vector)[:10]), set(order[bm25[order] > 0])
        agreements.append(len(top_v & top_b) / 10)
    low = sum(a <= 0.1 for a in agreements) / len(agreements)
    return statistics.median(spreads), statistics.median(agreements), low


def probe_cost() -> str:
    """The probe's one-off cost for a Japanese query (English, Chinese and Japanese texts, one call), uncached."""
    model = LocalEmbeddings()
    model.embed_documents(["load the model first"])
    one = mean_us(lambda: model.embed_documents(["東京は日本の首都です。"]), 3)
    started = time.perf_counter()
    found = probe_scripts(model, ["Han", "Hiragana"])
    seconds = time.perf_counter() - started
    shown = ", ".join(f"{s} {v:.2f}" for s, v in found.separations.items())
    return (
        f"- The probe a Japanese query needs (72 texts: English, Chinese, Japanese, one `embed_documents` call of "
        f"the bundled model): {seconds:.2f} s, once per index in a process ({one / 1000:.0f} ms for one "
        f"short text). Separations: {shown}; not read: {sorted(found.unread or ())}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SET_NAMES), help="comma-separated sets (default: %(default)s)")
    args = parser.parse_args()
    names = chosen(parser, args.sets, SET_NAMES)
    print(run_header("benchmarks/unread_queries.py"))
    started = time.perf_counter()
    quality = [
        "| set | queries | BM25 | vector | fusion, declared model | fusion, undeclared, before | "
        "fusion, undeclared, after | after - BM25 | queries not read | after vs before (paired) | "
        "after vs BM25 (paired) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    cost = [
        "| set | queries timed | `unread` per query (us, median) "
        "| fused invoke, query vector known (ms, median) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    signals = [
        "| set | vector spread (median) | top-10 agreement (median) | queries with agreement <= 0.1 | vector nDCG@10 |",
        "|---|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    for name in names:
        rows, costs, signal, more = measure(name)
        quality += rows
        cost += costs
        signals += signal
        notes += more
    print("nDCG@10:\n\n" + "\n".join(quality) + "\n")
    print("Per-query cost (undeclared model, after its probe):\n\n" + "\n".join(cost) + "\n")
    print("Per-query evidence, not used (undeclared model, each query's fused pool):\n\n" + "\n".join(signals) + "\n")
    print("\n".join([*notes, probe_cost()]))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
