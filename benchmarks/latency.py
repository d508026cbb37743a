"""Query latency, build time and memory of langchain-fusion against two common hybrid baselines.

Prints one markdown table (paste it into a README) with, per corpus size and system: query
latency p50/p95 in ms EXCLUDING the query embedding, the ratio of each p50 to ours (exact),
index build time, build memory, and for the approximate (HNSW) index its recall@k against the
exact fused top-k. Progress goes to stderr, so ``> results.md`` captures only the report.

    python benchmarks/latency.py                                # 10k and 100k chunks
    python benchmarks/latency.py --sizes 10000,100000,1000000   # also 1M (slow: many minutes)
    python benchmarks/latency.py --sizes 10000 --queries 50 --skip-baselines --json out.json
    python benchmarks/latency.py --threads 1 --breakdown      # 1 BLAS/OpenMP thread; time per piece

Systems (rows):
  ours exact        FusionIndex (FAISS "Flat") + search.fused_search(alpha=0.5, fetch_k=100,
                    method="weighted"), query vector precomputed with index.embed_query.
  ours exact (invoke, incl. embedding)
                    FusionRetriever.invoke end to end on the same index (the embedding is a
                    dict lookup here, so this is the LangChain/Document overhead).
  ours HNSW         the same with vector_index="HNSW32", vector_search_params="efSearch=64".
  ours BM25 build only
                    langchain_fusion.bm25.BM25Index().add(texts): build time and memory only.
  tutorial          fusion_retrieval() from NirDiamant/RAG_Techniques, reproduced verbatim
                    below (langchain_community FAISS + rank_bm25 BM25Okapi).
  EnsembleRetriever langchain_classic EnsembleRetriever([BM25Retriever, FAISS retriever]),
                    weights [0.5, 0.5].

Method:
  * The corpus is synthetic and deterministic (``--seed``): a Zipfian ~20k-word vocabulary whose
    head is English stopwords, topic words mixed in, 60-180 words (~800 characters) per chunk.
    Each chunk's vector is the normalised sum of its topics' random vectors plus noise, so text
    and vectors are correlated. Each query is 4-8 words of one source chunk, with that chunk's
    vector plus noise as its embedding. Every system answers the same queries over the same
    corpus (written once to a temporary folder and loaded by every worker).
  * Embeddings are looked up by text in a dict (``LookupEmbeddings``), which returns NumPy
    arrays, so neither the build nor the queries pay for an embedding model; the tutorial and
    EnsembleRetriever embed inside their query call, which costs one dict lookup here.
  * Each (size, system) is built and queried in a fresh subprocess (this script re-invoked
    with a hidden ``--_worker`` flag), one at a time. Memory is the peak RSS growth during
    the build: the kernel's peak counter (VmHWM) is reset just before the build by writing 5 to
    /proc/self/clear_refs, and the delta is VmHWM after minus VmRSS before. (``ru_maxrss`` is
    not usable for this: a child started by subprocess inherits its parent's peak RSS.)
    "kept" is the RSS still held after the build and a gc.collect().
  * Latency: time.perf_counter around one query call; 10 separate warm-up queries first (2 for
    the baselines, whose timings also size their query budget); p50 is the median. The
    baselines answer the first N of the same timed queries, with N cut to fit
    ``--baseline-budget`` seconds (at least 10); the count is printed per row. The load average
    is printed too: on a small shared machine, other processes inflate every row.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

ALPHA = 0.5
FETCH_K = 100
METHOD = "weighted"
HNSW_FACTORY = "HNSW32"
HNSW_PARAMS = "efSearch=64"
WARMUP_QUERIES = 10
BASELINE_WARMUP = 2
MIN_BASELINE_QUERIES = 10
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# --- synthetic corpus --------------------------------------------------------------------------

VOCABULARY_SIZE = 20_000
ZIPF_EXPONENT = 1.0
TOPIC_WORDS = 40
TOPIC_SHARE = 0.25  # share of a chunk's tokens drawn from its topics
MIN_WORDS, MAX_WORDS = 60, 180
DOC_NOISE = 1.0  # norm of the noise added to a chunk's topic vector
QUERY_NOISE = 1.0  # norm of the noise added to the source chunk's vector for a query
CHUNK_DOCS = 50_000  # chunks generated per batch (bounds the generator's memory)

# The head of the Zipfian vocabulary: English function words, as in real text.
_STOPWORD_TEXT = (
    "the of and to a in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were had she all we one their been has there can more if will "
    "would what when so no its into than them only other some could these may then do any "
    "about also"
)
STOPWORDS = _STOPWORD_TEXT.split()

SYSTEMS: dict[str, str] = {
    "bm25": "ours BM25 build only",
    "exact": "ours exact",
    "invoke": "ours exact (invoke, incl. embedding)",
    "hnsw": "ours HNSW",
    "tutorial": "tutorial",
    "ensemble": "EnsembleRetriever",
}
OURS_WORKERS = ("bm25", "exact", "hnsw")
BASELINE_WORKERS = ("tutorial", "ensemble")


def make_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """Stopwords, then pronounceable pseudo-words (2-4 syllables), all distinct."""
    consonants = np.array(list("bcdfghjklmnprstvwz"))
    vowels = np.array(list("aeiou"))
    words = dict.fromkeys(STOPWORDS)
    while len(words) < size:
        batch = 4 * (size - len(words))
        syllables = rng.integers(2, 5, batch)
        onset = consonants[rng.integers(0, consonants.size, (batch, 4))]
        nucleus = vowels[rng.integers(0, vowels.size, (batch, 4))]
        coda = np.where(rng.random((batch, 4)) < 0.3, consonants[rng.integers(0, consonants.size, (batch, 4))], "")
        parts = np.char.add(np.char.add(onset, nucleus), coda)
        for row, count in zip(parts.tolist(), syllables.tolist(), strict=True):
            words.setdefault("".join(row[:count]))
            if len(words) >= size:
                break
    return list(words)


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32)


def make_corpus(folder: Path, n: int, dim: int, seed: int, n_queries: int) -> None:
    """Write a deterministic corpus of ``n`` chunks and ``n_queries`` queries into ``folder``.

    Files: texts.txt (one chunk per line), vectors.npy, queries.json (texts and source
    rows), query_vectors.npy, empty_vector.npy (the embedding of "", which the tutorial asks for).
    """
    rng = np.random.default_rng([seed, n, dim])
    qrng = np.random.default_rng([seed, n, dim, 1])
    vocab = np.array(make_vocabulary(rng, VOCABULARY_SIZE), dtype=object)
    zipf = 1.0 / np.arange(1, vocab.size + 1) ** ZIPF_EXPONENT
    zipf /= zipf.sum()
    n_topics = max(50, n // 200)
    # Topic words are content words: never the stopword head nor the commonest 100 words.
    topic_words = rng.integers(len(STOPWORDS) + 100, vocab.size, (n_topics, TOPIC_WORDS))
    topic_vectors = _normalise(rng.standard_normal((n_topics, dim), dtype=np.float32))
    first, second = rng.integers(0, n_topics, n), rng.integers(0, n_topics, n)
    second_weight = rng.uniform(0.0, 0.5, n).astype(np.float32)
    lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])

    sources = qrng.choice(n, size=n_queries, replace=False)
    queries: list[str] = [""] * n_queries
    seen: set[str] = {""}
    vectors = np.lib.format.open_memmap(folder / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, dim))
    with open(folder / "texts.txt", "w", encoding="utf-8") as out:
        for start in range(0, n, CHUNK_DOCS):
            stop = min(n, start + CHUNK_DOCS)
            rows = np.arange(start, stop)
            noise = rng.standard_normal((rows.size, dim), dtype=np.float32) * np.float32(DOC_NOISE / math.sqrt(dim))
            mixed = topic_vectors[first[rows]] + second_weight[rows, None] * topic_vectors[second[rows]]
            vectors[start:stop] = _normalise(mixed + noise)

            doc_of = np.repeat(rows, lengths[rows])
            total = doc_of.size
            background = rng.choice(vocab.size, size=total, p=zipf)
            topic = np.where(rng.random(total) < 0.75, first[doc_of], second[doc_of])
            topical = topic_words[topic, rng.integers(0, TOPIC_WORDS, total)]
            tokens = np.where(rng.random(total) < TOPIC_SHARE, topical, background)
            words = vocab[tokens].tolist()
            local = offsets[start : stop + 1] - offsets[start]
            out.writelines(" ".join(words[local[i] : local[i + 1]]) + "\n" for i in range(rows.size))

            for j in np.flatnonzero((sources >= start) & (sources < stop)).tolist():
                doc_words = words[local[sources[j] - start] : local[sources[j] - start + 1]]
                picks = qrng.choice(len(doc_words), size=int(qrng.integers(4, 9)), replace=False)
                query = " ".join(doc_words[p] for p in np.sort(picks))
                while query in seen:  # identical texts must not need two different vectors
                    query += " " + doc_words[int(qrng.integers(0, len(doc_words)))]
                seen.add(query)
                queries[j] = query
    vectors.flush()
    query_noise = qrng.standard_normal((n_queries, dim), dtype=np.float32) * np.float32(QUERY_NOISE / math.sqrt(dim))
    np.save(folder / "query_vectors.npy", _normalise(np.asarray(vectors[sources]) + query_noise))
    np.save(folder / "empty_vector.npy", _normalise(qrng.standard_normal((1, dim), dtype=np.float32))[0])
    (folder / "queries.json").write_text(json.dumps({"queries": queries, "sources": sources.tolist()}))
    del vectors


# --- what every worker loads ------------------------------------------------------------------


class LookupEmbeddings(Embeddings):
    """Deterministic "embeddings": a dict lookup of precomputed vectors by text (~free).

    Returns NumPy arrays rather than lists of Python floats, so the systems' build memory and
    time are not inflated by the embedding model's output format.
    """

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, extra: dict[str, np.ndarray]) -> None:
        self._row = {text: row for row, text in enumerate(texts)}
        if len(self._row) != len(texts):
            print(f"warning: {len(texts) - len(self._row)} duplicate chunk texts", file=sys.stderr)
        self._vectors = vectors
        self._extra = extra

    def embed_documents(self, texts: list[str]) -> Any:
        return self._vectors[[self._row[t] for t in texts]]

    def embed_query(self, text: str) -> Any:
        vector = self._extra.get(text)
        return vector if vector is not None else self._vectors[self._row[text]]


@dataclass
class Corpus:
    texts: list[str]
    vectors: np.ndarray
    queries: list[str]
    sources: list[int]
    query_vectors: np.ndarray
    embeddings: LookupEmbeddings

    def documents(self) -> list[Document]:
        """The chunks as LangChain documents (no ids, as a text splitter would produce them)."""
        return [
            Document(page_content=text, metadata={"source": f"synthetic-{row // 40:05d}.pdf", "chunk": row})
            for row, text in enumerate(self.texts)
        ]


def load_corpus(folder: Path) -> Corpus:
    with open(folder / "texts.txt", encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f]
    vectors = np.load(folder / "vectors.npy")
    spec = json.loads((folder / "queries.json").read_text())
    query_vectors = np.load(folder / "query_vectors.npy")
    extra = dict(zip(spec["queries"], query_vectors, strict=True))
    extra[""] = np.load(folder / "empty_vector.npy")
    embeddings = LookupEmbeddings(texts, vectors, extra)
    return Corpus(texts, vectors, spec["queries"], spec["sources"], query_vectors, embeddings)


# --- the tutorial, verbatim --------------------------------------------------------------------
# Source: https://github.com/NirDiamant/RAG_Techniques/blob/main/all_rag_techniques/fusion_retrieval.ipynb
# (cell "Define a function that retrieves both semantically and by keyword..."; checked at
# commit 04b64140bcff75a63cd93da0be41bce442f9ee65). Its BM25 index is
# ``BM25Okapi([doc.page_content.split() for doc in documents])`` (create_bm25_index) and its
# vector store ``FAISS.from_documents(cleaned_texts, embeddings)`` (langchain_community).
# Note what it does: it embeds "" and fetches every chunk, scores every chunk on both sides,
# and adds the vector scores (ordered by distance) to the BM25 scores (ordered by row), so the
# fused arrays are misaligned. Reproduced as is, including that bug: we only time it.


def fusion_retrieval(vectorstore: Any, bm25: Any, query: str, k: int = 5, alpha: float = 0.5) -> list[Document]:
    epsilon = 1e-8

    # Step 1: Get all documents from the vectorstore
    all_docs = vectorstore.similarity_search("", k=vectorstore.index.ntotal)

    # Step 2: Perform BM25 search
    bm25_scores = bm25.get_scores(query.split())

    # Step 3: Perform vector search
    vector_results = vectorstore.similarity_search_with_score(query, k=len(all_docs))

    # Step 4: Normalize scores
    vector_scores = np.array([score for _, score in vector_results])
    vector_scores = 1 - (vector_scores - np.min(vector_scores)) / (
        np.max(vector_scores) - np.min(vector_scores) + epsilon
    )

    bm25_scores = (bm25_scores - np.min(bm25_scores)) / (np.max(bm25_scores) - np.min(bm25_scores) + epsilon)

    # Step 5: Combine scores
    combined_scores = alpha * vector_scores + (1 - alpha) * bm25_scores

    # Step 6: Rank documents
    sorted_indices = np.argsort(combined_scores)[::-1]

    # Step 7: Return top k documents
    return [all_docs[i] for i in sorted_indices[:k]]


# --- memory ------------------------------------------------------------------------------------


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class BuildMemory:
    """Peak RSS growth of one build: reset the kernel's peak counter, build, read it back."""

    def __enter__(self) -> BuildMemory:
        gc.collect()
        self.before = _status_mb("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.method = "VmHWM reset"
        except OSError:
            self.method = "VmHWM delta (peak reset unavailable: a lower bound)"
        self.hwm_before = _status_mb("VmHWM")
        if self.before is None or self.hwm_before is None:
            self.method = "ru_maxrss delta (a lower bound)"
            self.before = self.hwm_before = self._maxrss()
        return self

    @staticmethod
    def _maxrss() -> float:
        import resource

        scale = 1024 * 1024 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale

    def __exit__(self, *exc: object) -> None:
        if self.method.startswith("ru_maxrss"):
            self.peak = self._maxrss() - self.before
            self.kept = float("nan")
            return
        base = self.before if self.method == "VmHWM reset" else self.hwm_before
        self.peak = max(0.0, (_status_mb("VmHWM") or 0.0) - base)
        gc.collect()
        self.kept = (_status_mb("VmRSS") or 0.0) - self.before


# --- timing ------------------------------------------------------------------------------------

QueryFn = Callable[[str, np.ndarray], Any]


@dataclass
class Timing:
    latencies_ms: list[float]
    results: list[Any]
    budget_limited: bool


def time_queries(
    fn: QueryFn,
    warmup: Sequence[tuple[str, np.ndarray]],
    timed: Sequence[tuple[str, np.ndarray]],
    budget_s: float | None,
) -> Timing:
    """Run ``warmup`` untimed, then time each call of ``timed`` (cut to ``budget_s`` if given)."""
    warm = []
    for text, vector in warmup:
        t0 = time.perf_counter()
        fn(text, vector)
        warm.append(time.perf_counter() - t0)
    n = len(timed)
    if budget_s is not None and warm:
        n = min(n, max(MIN_BASELINE_QUERIES, int(budget_s / max(float(np.median(warm)), 1e-9))))
    gc.collect()
    latencies, results = [], []
    for text, vector in timed[:n]:
        t0 = time.perf_counter()
        out = fn(text, vector)
        latencies.append((time.perf_counter() - t0) * 1000)
        results.append(out)
    return Timing(latencies, results, n < len(timed))


def _doc_rows(docs: Sequence[Document], k: int) -> list[int]:
    return [int(d.metadata["chunk"]) for d in docs[:k]]


# --- the worker: build and query one system in this (fresh) process ---------------------------


def run_worker(args: argparse.Namespace) -> None:
    system = args._worker
    corpus = load_corpus(Path(args._data))
    k = args.k
    pairs = list(zip(corpus.queries, corpus.query_vectors, strict=True))
    warmup, timed = pairs[:WARMUP_QUERIES], pairs[WARMUP_QUERIES:]
    result: dict[str, Any] = {"system": system, "n": len(corpus.texts)}

    if system == "bm25":
        from langchain_fusion.stores.analyzer import Analyzer
        from langchain_fusion.stores.local.bm25 import BM25Corpus
        from langchain_fusion.stores.settings import BM25Params

        texts = corpus.texts
        with BuildMemory() as mem:
            t0 = time.perf_counter()
            bm25 = BM25Corpus(texts, Analyzer(), BM25Params())
            build_s = time.perf_counter() - t0
        result.update(build_s=build_s, peak_mb=mem.peak, kept_mb=mem.kept, mem_method=mem.method)
        result["vocabulary"] = len(bm25.vocabulary)

    elif system in ("exact", "hnsw"):
        from langchain_fusion.index.fusion_index import FusionIndex
        from langchain_fusion.search.options import PoolOptions
        from langchain_fusion.search.pool import fused_search, query_scorers

        docs = corpus.documents()
        options: dict[str, Any] = {}
        if system == "hnsw":
            options = {"vector_index": HNSW_FACTORY, "vector_search_params": HNSW_PARAMS}
        with BuildMemory() as mem:
            t0 = time.perf_counter()
            index = FusionIndex.from_documents(docs, corpus.embeddings, **options)
            build_s = time.perf_counter() - t0
        result.update(build_s=build_s, peak_mb=mem.peak, kept_mb=mem.kept, mem_method=mem.method)

        # The query vector is computed outside the timer, by the index's own embed_query.
        warm_v = [(q, index.embed_query(q)) for q, _ in warmup]
        timed_v = [(q, index.embed_query(q)) for q, _ in timed]

        searched = PoolOptions(k=k, alpha=ALPHA, fetch_k=FETCH_K, method=METHOD, duplicates="keep")

        def ours(query: str, query_vector: np.ndarray) -> Any:
            view = index.view()
            return fused_search(view, query_scorers(view, query, query_vector), searched)

        timing = time_queries(ours, warm_v, timed_v, None)
        result["latencies_ms"] = timing.latencies_ms
        # Keys of the in-process store are row numbers (nothing is deleted here).
        result["rows"] = [[h.key for h in hits] for hits in timing.results]

        if system == "exact":
            retriever = index.as_retriever(k=k, alpha=ALPHA, fetch_k=FETCH_K, method=METHOD)
            inv = time_queries(lambda q, _v: retriever.invoke(q), warmup, timed, None)
            inv_rows = [_doc_rows(docs_out, k) for docs_out in inv.results]
            result["invoke"] = {
                "latencies_ms": inv.latencies_ms,
                "rows": inv_rows,
                "matches_fused_search": inv_rows == result["rows"],
            }
            try:
                result["breakdown"] = breakdown(index, timed_v)
            except Exception as exc:  # it mirrors library internals, which may change
                result["breakdown"] = {f"unavailable: {type(exc).__name__}: {exc}": float("nan")}

    elif system == "tutorial":
        from langchain_community.vectorstores import FAISS
        from rank_bm25 import BM25Okapi

        docs = corpus.documents()
        with BuildMemory() as mem:
            t0 = time.perf_counter()
            vectorstore = FAISS.from_documents(docs, corpus.embeddings)
            bm25 = BM25Okapi([doc.page_content.split() for doc in docs])
            build_s = time.perf_counter() - t0
        result.update(build_s=build_s, peak_mb=mem.peak, kept_mb=mem.kept, mem_method=mem.method)
        timing = time_queries(
            lambda q, _v: fusion_retrieval(vectorstore, bm25, q, k=k, alpha=ALPHA),
            warmup[:BASELINE_WARMUP],
            timed,
            args.baseline_budget,
        )
        result["latencies_ms"] = timing.latencies_ms
        result["rows"] = [_doc_rows(out, k) for out in timing.results]
        result["budget_limited"] = timing.budget_limited

    elif system == "ensemble":
        from langchain_classic.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever
        from langchain_community.vectorstores import FAISS

        docs = corpus.documents()
        with BuildMemory() as mem:
            t0 = time.perf_counter()
            bm25_retriever = BM25Retriever.from_documents(docs, k=k)
            faiss_retriever = FAISS.from_documents(docs, corpus.embeddings).as_retriever(search_kwargs={"k": k})
            ensemble = EnsembleRetriever(retrievers=[bm25_retriever, faiss_retriever], weights=[0.5, 0.5])
            build_s = time.perf_counter() - t0
        result.update(build_s=build_s, peak_mb=mem.peak, kept_mb=mem.kept, mem_method=mem.method)
        timing = time_queries(lambda q, _v: ensemble.invoke(q), warmup[:BASELINE_WARMUP], timed, args.baseline_budget)
        result["latencies_ms"] = timing.latencies_ms
        # EnsembleRetriever returns every distinct document of both lists (up to 2k): keep k.
        result["rows"] = [_doc_rows(out, k) for out in timing.results]
        result["returned"] = float(np.mean([len(out) for out in timing.results]))
        result["budget_limited"] = timing.budget_limited
    else:
        raise SystemExit(f"unknown worker {system!r}")

    Path(args._out).write_text(json.dumps(result))


def breakdown(index: Any, timed: Sequence[tuple[str, np.ndarray]]) -> dict[str, float]:
    """Median ms of the pieces of one fused query (the same calls fused_search makes)."""
    from langchain_fusion.search.fusion import fuse
    from langchain_fusion.search.options import PoolOptions
    from langchain_fusion.search.pool import fused_search, query_scorers
    from langchain_fusion.stores.local.tokens import query_term_counts
    from langchain_fusion.stores.ranking import top_rows

    snapshot = index.store.snapshot  # the in-process store's current state
    searched = PoolOptions(k=5, alpha=ALPHA, fetch_k=FETCH_K, method=METHOD, duplicates="keep")

    pieces: dict[str, list[float]] = {
        name: []
        for name in (
            "bm25 tokenize (query_token_ids)",
            "bm25 scores (incl. tokenize)",
            "vector scores_all",
            "top_rows vector",
            "top_rows bm25",
            "pool + fuse + sort",
            "fused_search total",
        )
    }
    for query, qv in timed:
        t = [time.perf_counter()]
        query_term_counts(snapshot.settings.analyzer, snapshot.vocabulary, query)
        t.append(time.perf_counter())
        bm25_all = snapshot.bm25_scores_all(query)
        t.append(time.perf_counter())
        vector_all = snapshot.vector_scores_all(qv)
        t.append(time.perf_counter())
        v_rows = top_rows(vector_all, FETCH_K)
        t.append(time.perf_counter())
        b_rows = top_rows(bm25_all, FETCH_K, bm25_all > 0)
        t.append(time.perf_counter())
        pool = np.unique(np.concatenate([v_rows, b_rows]))
        vector_pool, bm25_pool = vector_all[pool].astype(np.float64), bm25_all[pool].astype(np.float64)
        fused = fuse(vector_pool, bm25_pool, ALPHA, METHOD)
        np.lexsort((pool, -vector_pool, -fused.fused))
        t.append(time.perf_counter())
        view = index.view()
        fused_search(view, query_scorers(view, query, qv), searched)
        t.append(time.perf_counter())
        for name, start, stop in zip(pieces, t[:-1], t[1:], strict=True):
            pieces[name].append((stop - start) * 1000)
    return {name: float(np.median(values)) for name, values in pieces.items()}


# --- the parent: generate, run the workers, report ---------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_header(args: argparse.Namespace, argv: Sequence[str], script: str = "benchmarks/latency.py") -> list[str]:
    """The report's header lines: the command (``script`` and ``argv``), machine, versions, settings and load."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = ""
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB RAM"
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("numpy", "faiss-cpu", "bm25s", "rank-bm25", "langchain-core", "langchain-community")
    )
    return [
        f"- command: `{' '.join(['python ' + script, *argv])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {_cpu_model()}, {os.cpu_count()} CPUs ({usable} usable){memory}, "
        f"{platform.system()} {platform.release()}",
        f"- python {platform.python_version()}; {versions}",
        f"- dim {args.dim}, k {args.k}, alpha {ALPHA}, fetch_k {FETCH_K}, method {METHOD}, seed {args.seed}",
        f"- BLAS/OpenMP threads: {args.threads or 'library defaults'}"
        + "".join(f", {v}={os.environ[v]}" for v in THREAD_VARIABLES if v in os.environ and not args.threads),
        f"- load average at start: {_load()}",
    ]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ""
    if value < 10:
        return f"{value:.2f}"
    if value < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _size(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def _hit_rate(rows: list[list[int]], sources: list[int], k: int) -> float:
    return float(np.mean([src in r[:k] for r, src in zip(rows, sources, strict=False)])) if rows else float("nan")


def run_size(args: argparse.Namespace, n: int, workdir: Path) -> dict[str, Any]:
    folder = workdir / f"corpus-{n}"
    folder.mkdir()
    t0 = time.perf_counter()
    make_corpus(folder, n, args.dim, args.seed, WARMUP_QUERIES + args.queries)
    log(f"[{_size(n)}] corpus generated in {time.perf_counter() - t0:.1f}s")
    sources = json.loads((folder / "queries.json").read_text())["sources"][WARMUP_QUERIES:]

    workers = OURS_WORKERS + (() if args.skip_baselines else BASELINE_WORKERS)
    raw: dict[str, dict[str, Any]] = {}
    for name in workers:
        out = folder / f"{name}.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--_worker",
            name,
            "--_data",
            str(folder),
            "--_out",
            str(out),
            "--k",
            str(args.k),
            "--baseline-budget",
            str(args.baseline_budget),
        ]
        t0 = time.perf_counter()
        log(f"[{_size(n)}] {SYSTEMS[name]} ...")
        env = dict(os.environ)
        if args.threads:
            env.update({var: str(args.threads) for var in THREAD_VARIABLES})
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            raw[name] = {"error": tail[0]}
            log(f"[{_size(n)}] {SYSTEMS[name]} FAILED: {proc.stderr.strip()[-2000:]}")
            continue
        raw[name] = json.loads(out.read_text())
        log(f"[{_size(n)}] {SYSTEMS[name]} done in {time.perf_counter() - t0:.1f}s")
    shutil.rmtree(folder)
    return {"n": n, "sources": sources, "raw": raw}


def summarise(size: dict[str, Any], k: int) -> list[dict[str, Any]]:
    raw, sources = size["raw"], size["sources"]
    exact = raw.get("exact", {})
    if "invoke" in exact:
        raw = {**raw, "invoke": {**exact["invoke"], "same_build": True}}
    exact_rows = exact.get("rows", [])
    rows = []
    for name in SYSTEMS:
        if name not in raw:
            continue
        r = raw[name]
        row: dict[str, Any] = {"n": size["n"], "key": name, "system": SYSTEMS[name]}
        if "error" in r:
            row["error"] = r["error"]
            rows.append(row)
            continue
        lat = r.get("latencies_ms")
        if lat:
            row.update(queries=len(lat), p50_ms=float(np.median(lat)), p95_ms=float(np.percentile(lat, 95)))
            row["source_hit_rate"] = _hit_rate(r["rows"], sources, k)
        if not r.get("same_build"):
            for key in ("build_s", "peak_mb", "kept_mb", "mem_method"):
                row[key] = r.get(key)
        if name == "hnsw" and exact_rows:
            pairs = list(zip(r["rows"], exact_rows, strict=False))
            row["recall"] = float(np.mean([len(set(a[:k]) & set(b[:k])) / max(1, len(b[:k])) for a, b in pairs]))
        for key in ("budget_limited", "returned", "matches_fused_search"):
            if key in r:
                row[key] = r[key]
        rows.append(row)
    base = next((x.get("p50_ms") for x in rows if x["key"] == "exact"), None)
    for row in rows:
        if base and row.get("p50_ms"):
            row["vs_ours"] = row["p50_ms"] / base
    return rows


def render(rows: list[dict[str, Any]], k: int) -> list[str]:
    lines = [
        f"| corpus | system | queries | p50 ms | p95 ms | p50 / ours exact | build s | build peak MB "
        f"| kept MB | recall@{k} vs exact |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {_size(row['n'])} | {row['system']} | error: {row['error'][:80]} |" + " |" * 7)
            continue
        queries = str(row.get("queries", "")) + ("*" if row.get("budget_limited") else "")
        ratio = f"{row['vs_ours']:.{2 if row.get('vs_ours', 1) < 1 else 1}f}x" if "vs_ours" in row else ""
        build = f"{row['build_s']:.1f}" if row.get("build_s") is not None else "same"
        peak = f"{row['peak_mb']:.0f}" if row.get("peak_mb") is not None else "same"
        kept = f"{row['kept_mb']:.0f}" if row.get("kept_mb") is not None else "same"
        recall = f"{row['recall']:.3f}" if "recall" in row else ""
        lines.append(
            f"| {_size(row['n'])} | {row['system']} | {queries} | {_ms(row.get('p50_ms'))} "
            f"| {_ms(row.get('p95_ms'))} | {ratio} | {build} | {peak} | {kept} | {recall} |"
        )
    return lines


def notes(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    hits = "; ".join(
        f"{_size(r['n'])} {r['system']} {r['source_hit_rate']:.2f}" for r in rows if "source_hit_rate" in r
    )
    methods = sorted({r["mem_method"] for r in rows if r.get("mem_method")})
    mismatch = [r for r in rows if r.get("matches_fused_search") is False]
    out = [
        "Notes:",
        "- Latency excludes the query embedding: ours gets a vector precomputed by `index.embed_query`; "
        "the tutorial and EnsembleRetriever embed inside the call, which here is a dict lookup "
        "(~microseconds), as is the `invoke` row's embedding.",
        f"- `*` = query count cut to fit the {args.baseline_budget:.0f} s per-row budget "
        f"(`--baseline-budget`); ours always answers all {args.queries}. The baselines answer the first "
        "N of the same queries; the ratio is p50 over p50.",
        "- Build: from LangChain documents with precomputed vectors (no embedding model). "
        "Build peak MB = peak RSS growth during the build in a fresh process "
        f"({', '.join(methods) or 'n/a'}); kept MB = RSS still held afterwards.",
        '- The tutorial is NirDiamant/RAG_Techniques `fusion_retrieval` verbatim: every query embeds "", '
        "fetches and scores every chunk on both sides (rank_bm25 in Python, FAISS k=ntotal). "
        "EnsembleRetriever returns up to 2k documents; the first k are compared.",
        f"- Source chunk in top-{args.k} (sanity check; each query was drawn from one chunk): {hits}.",
    ]
    if mismatch:
        out.append("- WARNING: FusionRetriever.invoke returned different rows than fused_search.")
    return out


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes (chunks)")
    parser.add_argument("--queries", type=int, default=200, help="timed queries for ours (default 200)")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension (default 384, like MiniLM)")
    parser.add_argument("--k", type=int, default=5, help="documents per query (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="corpus and query seed (default 0)")
    parser.add_argument("--skip-baselines", action="store_true", help="only measure langchain-fusion")
    parser.add_argument(
        "--baseline-budget",
        type=float,
        default=30.0,
        help="seconds of timed queries per baseline row; fewer queries are used when slow (default 30)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="set OMP/OpenBLAS/MKL thread counts in the workers (default: leave the libraries' defaults)",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement to this JSON file")
    parser.add_argument("--breakdown", action="store_true", help="also print where ours spends a query")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_data", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.queries < 1 or args.k < 1 or args.dim < 1:
        parser.error("--queries, --k and --dim must be positive")
    try:
        args.size_list = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers; got {args.sizes!r}")
    if not args.size_list or min(args.size_list) < 1000:
        parser.error("--sizes must list corpus sizes of at least 1000 chunks")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args._worker:
        run_worker(args)
        return
    started = time.perf_counter()
    header = machine_header(args, argv)
    workdir = Path(tempfile.mkdtemp(prefix="langchain-fusion-bench-"))
    sizes = []
    try:
        for n in args.size_list:
            sizes.append(run_size(args, n, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [row for size in sizes for row in summarise(size, args.k)]
    elapsed = time.perf_counter() - started

    print("## Query latency, build time and memory\n")
    print("\n".join(header))
    print(f"- load average at end: {_load()} (the machine is shared: other load inflates every row)")
    print(f"- total benchmark runtime: {elapsed / 60:.1f} min\n")
    print("\n".join(render(rows, args.k)))
    print()
    print("\n".join(notes(rows, args)))
    if args.breakdown:
        for size in sizes:
            pieces = size["raw"].get("exact", {}).get("breakdown")
            if pieces:
                print(f"\nWhere ours exact spends a query at {_size(size['n'])} (median ms per piece):\n")
                print("| piece | ms |\n|---|---:|")
                print("\n".join(f"| {name} | {_ms(ms)} |" for name, ms in pieces.items()))
    if args.json:
        payload = {
            "header": header,
            "runtime_s": elapsed,
            "rows": rows,
            "raw": [{"n": s["n"], "sources": s["sources"], **s["raw"]} for s in sizes],
        }
        args.json.write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
