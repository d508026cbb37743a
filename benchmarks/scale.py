"""Speed and memory at scale, each as a ratio against its reference measured in the same run.

One markdown report per corpus size (10k and 100k by default; 1M on demand) with a table whose
rows are the targets of the scale work: whole-corpus fusion against LangChain's
EnsembleRetriever and against a bare numpy matrix-vector product, the default query against
that product (after idle and back to back), ``batch(64)`` against 64 ``invoke`` calls, the
index's memory against the corpus and the matrix, the BM25 build's peak, the bytes on disk
against one copy of each part, ``load`` against reading and checksumming the files, and the
approximate (HNSW) index's agreement with the exact fused top-10 by ``efSearch``.

    python benchmarks/scale.py                                  # 10k and 100k, all three shapes (~30 min on 2 cores)
    python benchmarks/scale.py --sizes 10000,100000,1000000     # also 1M (~90 min, 12 GB of RAM)
    python benchmarks/scale.py --sizes 100000 --corpus zipf --skip-ensemble --json out.json

Three corpus shapes (``--corpus``), all with dict-lookup embeddings so no row pays for a model:
``topics``, ``latency.py``'s (bag-of-words chunks with a stopword head, vectors that follow their
topics, queries drawn from chunks), ``zipf`` (:func:`make_zipf_corpus`: common terms that are
not stopwords, vectors that crowd together) and ``words`` (:func:`make_words_corpus`: the same law
over English words, 60-120 a chunk, so that a query's six terms are often all of middling
frequency). An approximate index's sweep reports, for its default setting, each side alone and
fused with their p50 and p90. Every
(size, part) runs in a fresh subprocess so memory is measured from a clean process. Progress
goes to stderr; ``> results.md`` captures only the report.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from latency import (  # benchmarks/ is not a package: latency.py is found by the path above
    ALPHA,
    CHUNK_DOCS,
    FETCH_K,
    METHOD,
    STOPWORDS,
    BuildMemory,
    Corpus,
    _load,
    _ms,
    _normalise,
    _size,
    _status_mb,
    load_corpus,
    log,
    machine_header,
    make_corpus,
    make_vocabulary,
)

K = 10
WARMUP = 10
BATCH = 64
BATCH_ROUNDS = 5  # rounds of 64 `invoke` calls and one `batch`, taken in turn (see `alternating`)
IDLE_PAUSE_S = 0.25  # between "after idle" queries: long enough for caches and CPU clocks to cool
IDLE_QUERIES = 30
HNSW_FACTORY = "HNSW32"
ENSEMBLE_BUDGET_S = 60.0
WORKERS = ("index", "load", "bm25", "ann", "ensemble")

# The "zipf" corpus shape (issue 30): no stopword head, vectors that crowd together.
ZIPF_VOCABULARY = 50_000
ZIPF_CORPUS_EXPONENT = 1.07
ZIPF_MIN_WORDS, ZIPF_MAX_WORDS = 60, 200
ZIPF_QUERY_WORDS = 6
# The "words" corpus shape (issue 46): the zipf law over shorter chunks whose frequent terms are English words.
WORDS_MIN_WORDS, WORDS_MAX_WORDS = 60, 120
WORDS_VOCABULARY_FILE = Path(__file__).resolve().parents[1] / "langchain_fusion/models/all-MiniLM-L6-v2-vocab.txt"
CORPORA = ("topics", "zipf", "words")


# --- the zipf corpus --------------------------------------------------------------------------


def zipf_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """``size`` pseudo-words that the default analyzer keeps as one token each (no stopword among them)."""
    from langchain_fusion.stores.analyzer import Analyzer

    analyzer = Analyzer()
    words = make_vocabulary(rng, 2 * size + len(STOPWORDS))[len(STOPWORDS) :]
    kept: dict[str, str] = {}  # token -> word: two words that stem alike would be one term
    for word in words:
        tokens = analyzer.tokenize(word)
        if len(tokens) == 1 and tokens[0] not in kept:
            kept[tokens[0]] = word
            if len(kept) == size:
                break
    return list(kept.values())


def english_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """``size`` distinct terms, English words first in the order of their frequency, then pseudo-words.

    The words are the whole words of the bundled model's WordPiece vocabulary (BERT's, in about the
    order of their frequency in its training text), kept where the default analyzer makes one
    token of them that is not a stopword and no earlier word's (``running`` after ``run``); the
    rest of ``size`` are :func:`zipf_vocabulary`'s pseudo-words.
    """
    from langchain_fusion.stores.analyzer import Analyzer

    analyzer = Analyzer()
    kept: dict[str, str] = {}
    for line in WORDS_VOCABULARY_FILE.read_text(encoding="utf-8").splitlines():
        if len(line) >= 3 and line.isascii() and line.isalpha() and line.islower():
            tokens = analyzer.tokenize(line)
            if len(tokens) == 1 and tokens[0] not in kept:
                kept[tokens[0]] = line
                if len(kept) == size:
                    return list(kept.values())
    for word in zipf_vocabulary(rng, size):
        tokens = analyzer.tokenize(word)
        if len(tokens) == 1 and tokens[0] not in kept:
            kept[tokens[0]] = word
            if len(kept) == size:
                break
    return list(kept.values())


def make_zipf_corpus(folder: Path, n: int, dim: int, seed: int, n_queries: int) -> None:
    """Write the "zipf" corpus in :func:`latency.make_corpus`'s files: :func:`write_zipf_corpus` over pseudo-words."""
    rng, qrng = np.random.default_rng([seed, n, dim, 30]), np.random.default_rng([seed, n, dim, 31])
    vocab = zipf_vocabulary(rng, ZIPF_VOCABULARY)
    write_zipf_corpus(folder, n, dim, (rng, qrng), vocab, (ZIPF_MIN_WORDS, ZIPF_MAX_WORDS), n_queries)


def make_words_corpus(folder: Path, n: int, dim: int, seed: int, n_queries: int) -> None:
    """Write the "words" corpus: :func:`write_zipf_corpus` over English words (then pseudo-words), 60-120 a chunk.

    The same Zipf law as "zipf", but its frequent terms are ordinary English words (stemmed and
    checked for stopwords by the default analyzer like any English text) and chunks are shorter,
    so a term repeats less within a row and a query's six terms are often all of middling
    frequency: the BM25 side's hard case (issue 46).
    """
    rng, qrng = np.random.default_rng([seed, n, dim, 46]), np.random.default_rng([seed, n, dim, 47])
    vocab = english_vocabulary(rng, ZIPF_VOCABULARY)
    write_zipf_corpus(folder, n, dim, (rng, qrng), vocab, (WORDS_MIN_WORDS, WORDS_MAX_WORDS), n_queries)


def write_zipf_corpus(
    folder: Path,
    n: int,
    dim: int,
    rngs: tuple[np.random.Generator, np.random.Generator],
    terms: Sequence[str],
    lengths_range: tuple[int, int],
    n_queries: int,
) -> None:
    """Write ``n`` chunks of one Zipf law over ``terms`` in :func:`latency.make_corpus`'s files.

    Every token is drawn from one Zipf law over ``terms`` (``rngs``: the corpus's and the queries'
    generators), a chunk's length uniform in ``lengths_range``, so the most frequent terms are
    ordinary words (no stopword list removes them) whose postings span most rows. Each term has a
    fixed random unit vector; a chunk's vector is the normalised sum of its tokens' vectors, so
    every vector leans towards the frequent terms' directions and unrelated chunks have clearly
    positive cosines, as sentence embeddings do. A query is :data:`ZIPF_QUERY_WORDS` tokens of one
    chunk, embedded the same way.
    """
    from scipy import sparse

    rng, qrng = rngs
    vocab = np.array(terms, dtype=object)
    zipf = 1.0 / np.arange(1, vocab.size + 1) ** ZIPF_CORPUS_EXPONENT
    zipf /= zipf.sum()
    term_vectors = _normalise(rng.standard_normal((vocab.size, dim), dtype=np.float32))
    lengths = rng.integers(lengths_range[0], lengths_range[1] + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    sources = qrng.choice(n, size=n_queries, replace=False)
    queries: list[str] = [""] * n_queries
    query_vectors = np.zeros((n_queries, dim), dtype=np.float32)
    seen: set[str] = {""}
    vectors = np.lib.format.open_memmap(folder / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, dim))
    with open(folder / "texts.txt", "w", encoding="utf-8") as out:
        for start in range(0, n, CHUNK_DOCS):
            stop = min(n, start + CHUNK_DOCS)
            local = offsets[start : stop + 1] - offsets[start]
            tokens = rng.choice(vocab.size, size=int(local[-1]), p=zipf)
            counts = sparse.csr_matrix(
                (np.ones(tokens.size, np.float32), tokens, local), shape=(stop - start, vocab.size)
            )
            vectors[start:stop] = _normalise(np.asarray(counts @ term_vectors))
            words = vocab[tokens].tolist()
            out.writelines(" ".join(words[local[i] : local[i + 1]]) + "\n" for i in range(stop - start))
            for j in np.flatnonzero((sources >= start) & (sources < stop)).tolist():
                doc = tokens[local[sources[j] - start] : local[sources[j] - start + 1]]
                while queries[j] in seen:  # identical texts must not need two different vectors
                    picked = doc[np.sort(qrng.choice(doc.size, size=ZIPF_QUERY_WORDS, replace=False))]
                    queries[j] = " ".join(vocab[picked].tolist())
                seen.add(queries[j])
                query_vectors[j] = term_vectors[picked].sum(axis=0)
    vectors.flush()
    np.save(folder / "query_vectors.npy", _normalise(query_vectors))
    np.save(folder / "empty_vector.npy", _normalise(qrng.standard_normal((1, dim), dtype=np.float32))[0])
    (folder / "queries.json").write_text(json.dumps({"queries": queries, "sources": sources.tolist()}))
    del vectors


CORPUS_MAKERS = {"topics": make_corpus, "zipf": make_zipf_corpus, "words": make_words_corpus}


# --- measuring helpers ------------------------------------------------------------------------


def p50(fn: Callable[[Any], Any], inputs: Sequence[Any], pause: float = 0.0) -> float:
    """Median ms of ``fn(x)`` over ``inputs`` (each call timed alone, ``pause`` s apart)."""
    return percentiles(fn, inputs, pause)[0]


def percentiles(fn: Callable[[Any], Any], inputs: Sequence[Any], pause: float = 0.0) -> tuple[float, float]:
    """Median and 90th percentile ms of ``fn(x)`` over ``inputs`` (each call timed alone, ``pause`` s apart)."""
    times = []
    for x in inputs:
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), float(np.percentile(times, 90))


def alternating(first: Callable[[], Any], second: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median seconds of ``first`` and of ``second``, called in turn ``repeats`` times each.

    Taking turns exposes both to the same spells of a shared machine's load, so their ratio
    drifts less than that of two medians measured one after the other.
    """
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, found in zip((first, second), times, strict=True):
            gc.collect()
            t0 = time.perf_counter()
            fn()
            found.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` (for whole loads)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def trim_heap() -> None:
    """Give freed heap pages back to the system (glibc), so RSS shows what is held, not fragmentation."""
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def rss_mb() -> float:
    """Resident memory of this process in MB."""
    return _status_mb("VmRSS") or float("nan")


def folder_parts(folder: Path) -> dict[str, int]:
    """Bytes on disk per part of a saved index (top-level file or folder)."""
    parts: dict[str, int] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            part = path.relative_to(folder).parts[0]
            parts[part] = parts.get(part, 0) + path.stat().st_size
    return parts


def read_and_checksum(folder: Path) -> None:
    """Read every file of ``folder`` and hash it with SHA-256: the floor of a verified load."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                hashlib.file_digest(f, "sha256")


def ids_of(docs: Sequence[Any]) -> list[str]:
    """The ids of returned documents, in order."""
    return [d.id for d in docs]


# --- workers (each in a fresh process) --------------------------------------------------------


def _index(corpus: Corpus, **options: Any) -> tuple[Any, BuildMemory, float, float]:
    """Build an index of the corpus: it, its memory, seconds, and the MB kept from before the input Documents were made.

    ``mem.kept`` counts from before the build; the input Documents, made before it and freed after it,
    may or may not give their memory back to the system, so the last figure counts from before them.
    """
    from langchain_fusion import FusionIndex

    gc.collect()
    trim_heap()
    start = rss_mb()
    docs = [
        # ids as a splitter-based ingest would give them; metadata as real chunks carry it
        _document(text, row)
        for row, text in enumerate(corpus.texts)
    ]
    with BuildMemory() as mem:
        t0 = time.perf_counter()
        index = FusionIndex.from_documents(docs, corpus.embeddings, **options)
        build_s = time.perf_counter() - t0
        del docs
        gc.collect()
        trim_heap()
    mem.kept = rss_mb() - mem.before  # after the trim: what the index holds, not freed fragments
    return index, mem, build_s, rss_mb() - start


def _document(text: str, row: int) -> Any:
    from langchain_core.documents import Document

    return Document(page_content=text, id=f"c{row}", metadata={"source": f"synthetic-{row // 40:05d}.pdf", "row": row})


def worker_index(corpus: Corpus, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Build the exact index; time the default query, whole-corpus fusion, batch; save it."""
    n, dim = corpus.vectors.shape
    from langchain_fusion.stores.local.footprint import footprint

    index, mem, build_s, kept_from_start = _index(corpus)
    out.update(build_s=build_s, peak_mb=mem.peak, kept_mb=mem.kept, matrix_mb=n * dim * 4 / 2**20)
    out["kept_from_start_mb"] = kept_from_start
    out["corpus_mb"] = (corpus.vectors.nbytes + sum(len(t.encode()) for t in corpus.texts)) / 2**20

    queries = corpus.queries
    vectors = {q: np.asarray(corpus.embeddings.embed_query(q), dtype=np.float32) for q in queries}
    warm, timed = queries[:WARMUP], queries[WARMUP:]
    matrix = np.ascontiguousarray(corpus.vectors)

    def product(q: str) -> Any:
        return matrix @ vectors[q]

    retriever = index.as_retriever(k=K, alpha=ALPHA, fetch_k=FETCH_K, method=METHOD)
    whole = index.as_retriever(k=K, alpha=ALPHA, fetch_k=None, method=METHOD)
    for fn in (product, retriever.invoke, whole.invoke):
        p50(fn, warm)
    out["product_ms"] = p50(product, timed)
    out["default_ms"] = p50(retriever.invoke, timed)
    out["whole_ms"] = p50(whole.invoke, timed)
    out["product_idle_ms"] = p50(product, timed[:IDLE_QUERIES], pause=IDLE_PAUSE_S)
    out["default_idle_ms"] = p50(retriever.invoke, timed[:IDLE_QUERIES], pause=IDLE_PAUSE_S)
    out["exact_top"] = {q: ids_of(retriever.invoke(q)) for q in timed}
    out.update(bm25_top_times(index.view(), warm, timed))
    gc.collect()
    trim_heap()
    out["kept_after_queries_mb"] = rss_mb() - mem.before
    out["footprint"] = footprint(index.store._snapshot)

    batch = timed[:BATCH]
    sequential = [ids_of(retriever.invoke(q)) for q in batch]
    batched = [ids_of(docs) for docs in retriever.batch(batch)]
    out["batch_equal"] = batched == sequential
    out["sequential_s"], out["batch_s"] = alternating(
        lambda: [retriever.invoke(q) for q in batch], lambda: retriever.batch(batch), BATCH_ROUNDS
    )
    out["batch_size"] = len(batch)

    folder = Path(args._data) / "saved"
    t0 = time.perf_counter()
    index.save(folder)
    out["save_s"] = time.perf_counter() - t0
    out["disk"] = folder_parts(folder)


def bm25_top_times(view: Any, warm: Sequence[str], timed: Sequence[str]) -> dict[str, Any]:
    """The BM25 side's top-``FETCH_K`` as a fused query asks for it, against scoring every row first.

    Both are the same exact ranking (checked here); the first prunes where it pays (MaxScore), the second is
    what a BM25 top-k cost before pruning: every posting of every query term weighed.
    """

    def pruned(q: str) -> Any:
        return view.bm25(q).top(FETCH_K)

    def every_row(q: str) -> Any:
        scorer = view.bm25(q)
        scorer.all_scores()
        return scorer.top(FETCH_K)

    same = all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        for a, b in ((pruned(q), every_row(q)) for q in timed[:50])
    )
    for fn in (pruned, every_row):
        p50(fn, warm)
    return {"bm25_pruned_ms": p50(pruned, timed), "bm25_every_row_ms": p50(every_row, timed), "bm25_same": same}


def worker_load(corpus: Corpus, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Read+checksum the saved folder (the floor), then load it; memory of the loaded index."""
    from langchain_fusion import FusionIndex

    folder = Path(args._data) / "saved"
    read_and_checksum(folder)  # warm the page cache for both measurements alike
    out["checksum_s"] = best_of(lambda: read_and_checksum(folder), 3)
    embeddings = corpus.embeddings
    del corpus
    FusionIndex.load(folder, embeddings, check_dimension=False)  # imports the modules a load needs, untimed
    gc.collect()
    trim_heap()
    with BuildMemory() as mem:
        t0 = time.perf_counter()
        index = FusionIndex.load(folder, embeddings, check_dimension=False)
        out["load_s"] = time.perf_counter() - t0
        gc.collect()
        trim_heap()
    out["load_peak_mb"], out["load_kept_mb"] = mem.peak, rss_mb() - mem.before
    out["rows"] = len(index)


def worker_bm25(corpus: Corpus, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """The BM25 side alone: build time and peak memory."""
    from langchain_fusion.stores.analyzer import Analyzer
    from langchain_fusion.stores.local.bm25 import BM25Corpus
    from langchain_fusion.stores.settings import BM25Params

    with BuildMemory() as mem:
        t0 = time.perf_counter()
        bm25 = BM25Corpus(corpus.texts, Analyzer(), BM25Params())
        out["bm25_build_s"] = time.perf_counter() - t0
        gc.collect()
        trim_heap()
    out["bm25_peak_mb"], out["bm25_kept_mb"] = mem.peak, rss_mb() - mem.before
    out["vocabulary"] = len(bm25.vocabulary)


def worker_ann(corpus: Corpus, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """One approximate index (``--_factory``): build time, then agreement with the exact top-10 and p50 per setting.

    A graph is swept over ``--ef`` (efSearch), an IVF index over ``--nprobe``, an index of
    compressed codes over ``--k-factor`` (candidates rescored exactly per wanted row), each on the
    index as built, without rebuilding.
    """
    import faiss

    factory, _, params = args._factory.partition("@")
    exact = json.loads((Path(args._data) / "exact_top.json").read_text())
    index, mem, build_s, _ = _index(corpus, vector_index=factory, vector_search_params=params or None)
    out.update(build_s=build_s, kept_mb=mem.kept)
    retriever = index.as_retriever(k=K, alpha=ALPHA, fetch_k=FETCH_K, method=METHOD)
    queries = list(exact)
    anns = [s.ann for s in index.store._snapshot.segments if s.ann is not None]
    graphs = [a._index for a in anns if isinstance(a._index, faiss.IndexHNSW)]
    if graphs:
        out["ef_construction"] = int(graphs[0].hnsw.efConstruction)
    settings: list[tuple[str, Callable[[], None]]] = [(_ann_default_label(anns), lambda: None)]
    if graphs:
        settings += [(f"efSearch {ef}", _setter(anns, f"efSearch={ef}")) for ef in args.ef]
    elif anns and _is_ivf(anns[0]._index):
        settings += [(f"nprobe {p}", _setter(anns, f"nprobe={p}")) for p in args.nprobe]
    if anns and anns[0].k_factor > 1:
        base = settings[-1][1]
        settings += [(f"{settings[-1][0]}, k_factor {kf}", _k_factor_setter(anns, kf, base)) for kf in args.k_factor]
    sweep: dict[str, Any] = {}
    for label, apply in settings:
        apply()
        p50(retriever.invoke, queries[:WARMUP])
        got = {q: ids_of(retriever.invoke(q)) for q in queries}
        agree = [len(set(got[q]) & set(exact[q])) / max(len(exact[q]), 1) for q in queries]
        fused = percentiles(retriever.invoke, queries)
        sweep[label] = {"agreement": float(np.mean(agree)), "p50_ms": fused[0], "p90_ms": fused[1]}
    settings[0][1]()
    out["sides"] = side_times(index, queries)
    out["sweep"] = sweep


def side_times(index: Any, queries: Sequence[str]) -> dict[str, tuple[float, float]]:
    """p50 and p90 ms of ``invoke`` for each side alone (alpha 1: vectors, 0: BM25) and fused, taken in turn.

    The three retrievers answer each query one after another, so they share the same spells of
    a shared machine's load.
    """
    alphas = {"vector side alone (alpha=1)": 1.0, "BM25 side alone (alpha=0)": 0.0, f"fused (alpha={ALPHA})": ALPHA}
    retrievers = {name: index.as_retriever(k=K, alpha=a, fetch_k=FETCH_K, method=METHOD) for name, a in alphas.items()}
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    for retriever in retrievers.values():
        p50(retriever.invoke, queries[:WARMUP])
    for query in queries:
        for name, retriever in retrievers.items():
            t0 = time.perf_counter()
            retriever.invoke(query)
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: (statistics.median(t), float(np.percentile(t, 90))) for name, t in times.items()}


def _is_ivf(index: Any) -> bool:
    import faiss

    try:
        faiss.extract_index_ivf(index)
    except RuntimeError:
        return False
    return True


def _ann_default_label(anns: Sequence[Any]) -> str:
    """``default (...)``: the search settings the library chose for the first ANN index."""
    import faiss

    if not anns:
        return "default (no ANN index: segments too small)"
    index, parts = anns[0]._index, []
    if isinstance(index, faiss.IndexHNSW):
        parts.append(f"efSearch {index.hnsw.efSearch}")
    elif _is_ivf(index):
        parts.append(f"nprobe {faiss.extract_index_ivf(index).nprobe}")
    parts.append(f"k_factor {anns[0].k_factor}")
    return f"default ({', '.join(parts)})"


def _setter(anns: Sequence[Any], parameters: str) -> Callable[[], None]:
    """Set FAISS search parameters on built indexes (the benchmark sweeps them without rebuilding)."""
    import faiss

    def apply() -> None:
        for ann in anns:
            faiss.ParameterSpace().set_index_parameters(ann._index, parameters)

    return apply


def _k_factor_setter(anns: Sequence[Any], k_factor: int, base: Callable[[], None]) -> Callable[[], None]:
    def apply() -> None:
        base()
        for ann in anns:
            ann.k_factor = k_factor

    return apply


def worker_ensemble(corpus: Corpus, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """LangChain's EnsembleRetriever (BM25Retriever + FAISS, 0.5/0.5): the whole-corpus reference."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS

    docs = [_document(text, row) for row, text in enumerate(corpus.texts)]
    bm25 = BM25Retriever.from_documents(docs, k=K)
    faiss_retriever = FAISS.from_documents(docs, corpus.embeddings).as_retriever(search_kwargs={"k": K})
    ensemble = EnsembleRetriever(retrievers=[bm25, faiss_retriever], weights=[0.5, 0.5])
    queries = corpus.queries[WARMUP:]
    t0 = time.perf_counter()
    ensemble.invoke(queries[0])
    one = time.perf_counter() - t0
    count = max(10, min(len(queries), int(ENSEMBLE_BUDGET_S / max(one, 1e-6))))
    out["ensemble_ms"] = p50(ensemble.invoke, queries[1 : count + 1])
    out["ensemble_queries"] = count


def run_worker(args: argparse.Namespace) -> None:
    """Entry point of a worker subprocess: load the corpus, run one part, write its JSON."""
    corpus = load_corpus(Path(args._data))
    out: dict[str, Any] = {}
    {
        "index": worker_index,
        "load": worker_load,
        "bm25": worker_bm25,
        "ann": worker_ann,
        "ensemble": worker_ensemble,
    }[args._worker](corpus, args, out)
    Path(args._out).write_text(json.dumps(out))


# --- the parent -------------------------------------------------------------------------------


def run_size(args: argparse.Namespace, n: int, shape: str, workdir: Path) -> dict[str, Any]:
    """Generate one corpus of the ``shape`` (see :data:`CORPUS_MAKERS`), run every part on it; results merged."""
    folder = workdir / f"corpus-{shape}-{n}"
    folder.mkdir()
    t0 = time.perf_counter()
    CORPUS_MAKERS[shape](folder, n, args.dim, args.seed, WARMUP + args.queries)
    log(f"[{_size(n)} {shape}] corpus generated in {time.perf_counter() - t0:.1f}s")
    merged: dict[str, Any] = {"n": n, "corpus": shape}
    skipped = {"ensemble"} if args.skip_ensemble or n > args.ensemble_max else set()
    if args.skip_ann:
        skipped.add("ann")
    skipped |= args.skip
    parts = [w for w in WORKERS if w not in skipped]
    jobs = [(p, None) for p in parts if p != "ann"]
    jobs[jobs.index(("index", None)) + 1 : jobs.index(("index", None)) + 1] = [
        ("ann", factory) for factory in (args.ann_factories if "ann" in parts else [])
    ]
    for part, factory in jobs:
        name = part if factory is None else f"{part} {factory}"
        out = folder / f"{part}.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--_worker", part, "--_data", str(folder)]
        command += ["--_out", str(out), "--ef", ",".join(map(str, args.ef)), "--_factory", factory or ""]
        command += ["--nprobe", ",".join(map(str, args.nprobe)), "--k-factor", ",".join(map(str, args.k_factor))]
        log(f"[{_size(n)} {shape}] {name} ...")
        t0 = time.perf_counter()
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            log(f"[{_size(n)} {shape}] {name} FAILED: {proc.stderr.strip()[-2000:]}")
            merged.setdefault("errors", {})[name] = (proc.stderr.strip().splitlines() or ["?"])[-1]
            continue
        result = json.loads(out.read_text())
        if part == "index":
            (folder / "exact_top.json").write_text(json.dumps(result.pop("exact_top")))
        if factory is None:
            merged.update(result)
        else:
            merged.setdefault("ann", {})[factory] = result
            for label, row in result["sweep"].items():
                found = f"agreement {row['agreement']:.3f}, p50 {row['p50_ms']:.2f} ms"
                log(f"[{_size(n)} {shape}] {factory} {label}: {found}")
        log(f"[{_size(n)} {shape}] {name} done in {time.perf_counter() - t0:.1f}s")
    shutil.rmtree(folder)
    return merged


def _ratio(value: float | None, reference: float | None) -> str:
    if value is None or reference is None or not reference:
        return ""
    return f"{value / reference:.2f}x"


def _gb(mb: float | None) -> str:
    return "" if mb is None else f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def report(r: dict[str, Any]) -> list[str]:
    """The markdown table of one size: measurement, reference, ratio, target."""
    n = r["n"]
    rows: list[tuple[str, str, str, str, str]] = []

    def add(what: str, value: str, reference: str, ratio: str, target: str) -> None:
        rows.append((what, value, reference, ratio, target))

    if "whole_ms" in r:
        if "ensemble_ms" in r:
            add(
                "`fetch_k=None` p50 vs EnsembleRetriever p50",
                f"{_ms(r['whole_ms'])} ms",
                f"{_ms(r['ensemble_ms'])} ms ({r['ensemble_queries']} queries)",
                f"{r['ensemble_ms'] / r['whole_ms']:.0f}x faster",
                ">= 30x faster at 100k",
            )
        add(
            "`fetch_k=None` p50 vs numpy product p50",
            f"{_ms(r['whole_ms'])} ms",
            f"{_ms(r['product_ms'])} ms",
            _ratio(r["whole_ms"], r["product_ms"]),
            "<= 1.6x at 1M",
        )
        add(
            "default query p50 (back to back) vs numpy product",
            f"{_ms(r['default_ms'])} ms",
            f"{_ms(r['product_ms'])} ms",
            _ratio(r["default_ms"], r["product_ms"]),
            "<= 1.3x at 1M",
        )
        add(
            "default query p50 after idle vs numpy product after idle",
            f"{_ms(r['default_idle_ms'])} ms",
            f"{_ms(r['product_idle_ms'])} ms",
            _ratio(r["default_idle_ms"], r["product_idle_ms"]),
            "no fixed overhead that dominates",
        )
        add(
            f"`batch({r['batch_size']})` vs {r['batch_size']} `invoke` calls (throughput)",
            f"{r['batch_s'] * 1000:.0f} ms",
            f"{r['sequential_s'] * 1000:.0f} ms",
            f"{r['sequential_s'] / r['batch_s']:.2f}x" + ("" if r["batch_equal"] else " (RESULTS DIFFER)"),
            ">= 3x at 100k, same results",
        )
        for label, key in (
            ("index memory kept beyond the corpus", "kept_mb"),
            ("... counted from before the input `Document`s were made", "kept_from_start_mb"),
            ("index memory kept after the timed queries", "kept_after_queries_mb"),
        ):
            if key in r:
                add(
                    label,
                    _gb(r[key]),
                    f"corpus {_gb(r['corpus_mb'])}",
                    _ratio(r[key], r["corpus_mb"]),
                    "<= 3.0 GB at 1M",
                )
        if "footprint" in r:
            largest = sorted(r["footprint"].items(), key=lambda kv: -kv[1])
            detail = ", ".join(f"{name} {_gb(size / 2**20)}" for name, size in largest if size >= 2**20)
            add("what the index holds (`footprint`)", _gb(sum(r["footprint"].values()) / 2**20), detail, "", "")
        add(
            "build peak beyond what the index keeps",
            _gb(r["peak_mb"] - r["kept_mb"]),
            f"one matrix {_gb(r['matrix_mb'])}",
            _ratio(r["peak_mb"] - r["kept_mb"], r["matrix_mb"]),
            "<= 1 matrix",
        )
        disk = r["disk"]
        total = sum(disk.values()) / 2**20
        detail = ", ".join(f"{k} {_gb(v / 2**20)}" for k, v in sorted(disk.items(), key=lambda kv: -kv[1])[:4])
        add(
            "on disk (largest parts)",
            f"{_gb(total)}: {detail}",
            f"vectors once {_gb(r['matrix_mb'])}",
            _ratio(disk.get("vectors.npy", 0) / 2**20, r["matrix_mb"]),
            "one copy of each part",
        )
        if "bm25_pruned_ms" in r:
            add(
                f"BM25 top-{FETCH_K} p50 (pruned) vs scoring every row",
                f"{_ms(r['bm25_pruned_ms'])} ms",
                f"{_ms(r['bm25_every_row_ms'])} ms",
                _ratio(r["bm25_pruned_ms"], r["bm25_every_row_ms"]) + ("" if r["bm25_same"] else " (RESULTS DIFFER)"),
                "same results",
            )
        add("build time (exact)", f"{r['build_s']:.1f} s", "", "", "")
        add("save", f"{r['save_s']:.1f} s", "", "", "")
    if "load_s" in r:
        add(
            "`load` vs reading and checksumming its files",
            f"{r['load_s']:.2f} s",
            f"{r['checksum_s']:.2f} s",
            _ratio(r["load_s"], r["checksum_s"]),
            "<= 2x",
        )
        add("`load` peak / kept memory", f"{_gb(r['load_peak_mb'])} / {_gb(r['load_kept_mb'])}", "", "", "")
    if "bm25_peak_mb" in r:
        add(
            "BM25 build peak memory",
            _gb(r["bm25_peak_mb"]),
            f"kept {_gb(r['bm25_kept_mb'])}",
            f"{r['bm25_build_s']:.1f} s build",
            "<= 150 MB at 100k",
        )
    for factory, ann in r.get("ann", {}).items():
        for label, row in ann["sweep"].items():
            p90 = f" / p90 {_ms(row['p90_ms'])}" if "p90_ms" in row else ""
            add(
                f"`{factory}` {label}: fused top-{K} agreement with exact",
                f"{row['agreement']:.3f}",
                f"p50 {_ms(row['p50_ms'])}{p90} ms",
                _ratio(row["p50_ms"], r.get("default_ms")) + " of exact",
                ">= 0.95 within 10 ms at 1M",
            )
        for side, (median, p90) in ann.get("sides", {}).items():
            add(f"`{factory}` default: {side}, in turn", f"p50 {_ms(median)} ms", f"p90 {_ms(p90)} ms", "", "")
        built = f" (efConstruction {ann['ef_construction']})" if "ef_construction" in ann else ""
        kept = f"kept {_gb(ann['kept_mb'])}"
        add(f"`{factory}` build time{built}", f"{ann['build_s']:.1f} s", f"exact {r.get('build_s', 0):.1f} s", kept, "")
    lines = [
        f"### {_size(n)} chunks, {r.get('corpus', 'topics')} corpus",
        "",
        "| measurement | value | reference (same run) | ratio | target |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    for part, error in r.get("errors", {}).items():
        lines.append(f"\n{part} failed: {error}")
    return [*lines, ""]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line (``--_*`` options are for the worker subprocesses)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes (chunks)")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per measurement (default 200)")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension (default 384, like MiniLM)")
    parser.add_argument("--seed", type=int, default=0, help="corpus and query seed")
    parser.add_argument(
        "--corpus",
        default=",".join(CORPORA),
        help="comma-separated corpus shapes: topics (latency.py's: stopword head, topic vectors), "
        "zipf (frequent terms that are not stopwords, crowded vectors), words (zipf's law over English words, "
        "60-120 a chunk); default all three",
    )
    parser.add_argument(
        "--ann-factories",
        default=HNSW_FACTORY,
        help="approximate indexes to build and sweep, ';'-separated FAISS factory strings, each optionally "
        f"FACTORY@SEARCH_PARAMS (e.g. '{HNSW_FACTORY};IVF1024,PQ96x4fs@nprobe=128'); default {HNSW_FACTORY}",
    )
    parser.add_argument("--ef", default="64,128,256,512", help="HNSW efSearch values to sweep")
    parser.add_argument("--nprobe", default="", help="IVF nprobe values to sweep (none by default)")
    parser.add_argument(
        "--k-factor", default="", help="k_factor values to sweep on indexes of compressed codes (none by default)"
    )
    parser.add_argument("--skip-ensemble", action="store_true", help="skip the EnsembleRetriever reference")
    parser.add_argument("--skip-ann", action="store_true", help="skip the ANN builds and sweeps (HNSW: 20 min at 1M)")
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip besides those: load, bm25 (the index part is needed)"
    )
    parser.add_argument("--ensemble-max", type=int, default=100_000, help="largest size with EnsembleRetriever")
    parser.add_argument("--json", type=Path, help="also write every measurement to this JSON file")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_data", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    parser.add_argument("--_factory", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ef = [int(x) for x in str(args.ef).split(",") if x]
    args.nprobe = [int(x) for x in str(args.nprobe).split(",") if x]
    args.k_factor = [int(x) for x in str(args.k_factor).split(",") if x]
    args.ann_factories = [f.strip() for f in str(args.ann_factories).split(";") if f.strip()]
    args.skip = {p.strip() for p in str(args.skip).split(",") if p.strip()}
    if args.skip - {"load", "bm25", "ensemble", "ann"}:
        parser.error(f"--skip takes load, bm25, ensemble, ann; got {args.skip!r}")
    args.corpora = [c.strip() for c in str(args.corpus).split(",") if c.strip()]
    unknown = sorted(set(args.corpora) - set(CORPORA))
    if unknown or not args.corpora:
        parser.error(f"--corpus takes {', '.join(CORPORA)} (comma-separated); got {args.corpus!r}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run every size and print the report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args._worker:
        run_worker(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    t0 = time.perf_counter()
    args.k, args.threads = K, None
    header = machine_header(args, argv, "benchmarks/scale.py")  # before the runs: it records the load average at start
    with tempfile.TemporaryDirectory(prefix="lf-scale-") as tmp:
        results = [run_size(args, n, shape, Path(tmp)) for shape in args.corpora for n in sizes]
    lines = ["## Speed and memory at scale", "", *header, ""]
    for result in results:
        lines += report(result)
    lines += [
        "Notes:",
        "- numpy product: `vectors @ query` over the same float32 matrix, the floor of any exact vector search.",
        f"- default query: `FusionRetriever.invoke` (k={K}, alpha={ALPHA}, fetch_k={FETCH_K}), LangChain plumbing and "
        "Document building included, the embedding a dict lookup; after idle: "
        f"{IDLE_PAUSE_S} s pause before each of {IDLE_QUERIES} queries.",
        f"- `batch({BATCH})`: {BATCH} `invoke` calls and one `batch` of the same queries, taken in turn "
        f"{BATCH_ROUNDS} times; medians of each.",
        "- memory: RSS growth of a fresh process across the build (peak: the kernel's VmHWM reset before it), "
        "after `gc.collect()` and `malloc_trim(0)` (freed heap given back); the corpus is the benchmark's own "
        "texts and vectors, held outside the index. The input `Document`s are made before the build and freed "
        "after it: where their memory goes back to the system the first row counts it off the index (an index "
        "that leaves no small objects behind), so the second row counts from before they were made.",
        "- `load`: `FusionIndex.load` with its checksum verification; reference: reading every file and hashing "
        "it with SHA-256 (page cache warm for both).",
        "- ANN agreement: |approximate top-10 ∩ exact top-10| / 10 averaged over the queries; exact = the Flat index's "
        "default query in the same run; both rescore their pool exactly.",
        f"- load average at end: {_load()}; total {time.perf_counter() - t0:.0f} s",
    ]
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
