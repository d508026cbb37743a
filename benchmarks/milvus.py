"""Milvus benchmark: the same fused results as in process, and what the engine costs.

    python benchmarks/milvus.py                          # SciFact equivalence + 10k/100k latency
    python benchmarks/milvus.py --skip-latency           # equivalence only (a few minutes)
    python benchmarks/milvus.py --skip-equivalence --sizes 10000
    python benchmarks/milvus.py --skip-equivalence --skip-latency  # ingestion CPU only

Three tables, printed as markdown (progress on stderr):

1. **Equivalence on SciFact** (``../shared/data/scifact``, read in place; CC BY-NC, never
   copied). The corpus is indexed twice with the same vectors (the bundled all-MiniLM-L6-v2
   behind an on-disk cache): the in-process store and a Milvus Lite collection. Every
   labelled query (train split) runs on both with the default retriever (k=10, weighted,
   alpha 0.5, fetch_k 100; zscore and rrf too when fresh) in four states: fresh; with a
   metadata filter (``bucket == 1``, half the corpus); after deleting a tenth of the corpus
   from both; after reopening both (the folder saved and loaded, the collection reopened by a
   new client, with and without the filter). Per state: the
   share of queries whose top 10 is identical (same ids, same order) and the same set, and
   nDCG@10 on each store.
2. **Latency** at each ``--sizes`` on the synthetic corpus of ``latency.py`` (vectors are a
   lookup, so build excludes embedding): build (``from_documents``) and default-query p50 on
   the in-process store and on Milvus Lite, in the same process, one after the other. Milvus
   Lite runs the Milvus 2.5 engine in process with a local file; a server's insert path
   (network, WAL, segment flushes) and its query latency (network round trips) differ.
3. **Ingestion CPU** (``--ingest-rows``, default 20,000 synthetic chunks, metadata as the
   splitter writes it): CPU per upserted row of this process (``time.process_time`` around
   ``store.upsert``, vectors given: tokenising, building and serialising rows) and of the Milvus Lite
   server (a separate process, read with psutil). Twice in the same run: the row path this store
   used up to 0.3 (a dict per row, tokens joined per token, ``MilvusClient.upsert``), reproduced
   here as the baseline, and the store's column upsert.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from latency import load_corpus, make_corpus  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"
DEFAULT_CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
K = 10
DELETE_SHARE = 10  # one document in DELETE_SHARE is deleted in the "after deletes" state
LATENCY_QUERIES = 100


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bucket(doc_id: str) -> int:
    """A deterministic 0/1 label per document, for the filtered state."""
    return zlib.crc32(doc_id.encode()) % 2


def query_embeddings(cache: Path) -> Any:
    """The bundled model behind the document cache, with query vectors memoised (each query runs many times)."""
    from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings

    class Memoised(CachedEmbeddings):
        def __init__(self) -> None:
            super().__init__(LocalEmbeddings(), cache)
            self._queries: dict[str, list[float]] = {}

        def embed_query(self, text: str) -> list[float]:
            if text not in self._queries:
                self._queries[text] = super().embed_query(text)
            return self._queries[text]

    return Memoised()


class CallCounter:
    """Stands for a store's pymilvus client and counts its calls by method (each call is a round trip)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if not callable(method):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            is_count = name == "query" and "count(*)" in (kwargs.get("output_fields") or [])
            self.calls["count" if is_count else name] += 1
            return method(*args, **kwargs)

        return counted

    def summary(self, queries: int) -> str:
        """Calls per query, e.g. ``3 (search 3)``."""
        total = sum(self.calls.values()) / queries
        parts = ", ".join(f"{name} {count / queries:g}" for name, count in sorted(self.calls.items()))
        return f"{total:g} ({parts})"


def equivalence(data: Path, split: str, cache: Path, max_queries: int | None, workdir: Path) -> list[str]:
    from langchain_fusion import FusionIndex
    from langchain_fusion.evaluation.datasets import load_beir
    from langchain_fusion.evaluation.metrics import ndcg
    from langchain_fusion.stores.milvus import MilvusStore

    dataset = load_beir(data, split)
    queries = list(dataset.queries.items())[:max_queries]
    docs = [d.model_copy(update={"metadata": {**d.metadata, "bucket": bucket(d.id or "")}}) for d in dataset.corpus]
    embeddings = query_embeddings(cache)
    log(f"embedding {len(docs)} documents (cache: {embeddings.folder})")
    embeddings.embed_documents([d.page_content for d in docs])  # fills the cache once for both stores
    uri = str(workdir / "scifact.db")
    t0 = time.perf_counter()
    local = FusionIndex.from_documents(docs, embeddings)
    log(f"in-process index: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    remote = FusionIndex.from_documents(docs, embeddings, store=MilvusStore(uri, "scifact"))
    log(f"Milvus Lite collection: {time.perf_counter() - t0:.1f} s")

    rows = []

    def compare(
        state: str, local_index: Any, remote_index: Any, search_filter: Any = None, method: str = "weighted"
    ) -> None:
        options: dict[str, Any] = {"k": K, "filter": search_filter, "method": method}
        same_order = same_set = 0
        scores: dict[str, list[float]] = {"local": [], "milvus": []}
        for n, (query_id, text) in enumerate(queries, 1):
            a = [d.id or "" for d in local_index.as_retriever(**options).invoke(text)]
            b = [d.id or "" for d in remote_index.as_retriever(**options).invoke(text)]
            same_order += a == b
            same_set += set(a) == set(b)
            scores["local"].append(ndcg(a, dataset.qrels[query_id], K))
            scores["milvus"].append(ndcg(b, dataset.qrels[query_id], K))
            if n % 200 == 0:
                log(f"  {state}: {n}/{len(queries)} queries")
        n = len(queries)
        local_ndcg, milvus_ndcg = float(np.mean(scores["local"])), float(np.mean(scores["milvus"]))
        rows.append(
            f"| {state} | {method} | {len(local_index)} | {n} | {same_order / n:.1%} | {same_set / n:.1%} | "
            f"{local_ndcg:.4f} | {milvus_ndcg:.4f} | {abs(local_ndcg - milvus_ndcg):.4f} |"
        )
        log(rows[-1])

    for method in ("weighted", "zscore", "rrf"):
        compare("fresh", local, remote, method=method)
    compare("filter bucket == 1", local, remote, {"bucket": 1})
    victims = [d.id or "" for d in docs if zlib.adler32((d.id or "").encode()) % DELETE_SHARE == 0]
    local.delete(victims)
    remote.delete(victims)
    compare(f"after deleting {len(victims)}", local, remote)
    folder = local.save(workdir / "scifact-index")
    reopened_local = FusionIndex.load(folder, embeddings)
    reopened_remote = FusionIndex(embeddings, store=MilvusStore(uri, "scifact"))
    compare("after reopening", reopened_local, reopened_remote)
    compare("reopened, filter bucket == 1", reopened_local, reopened_remote, {"bucket": 1})
    return [
        f"### Same results on Milvus: SciFact {split} ({len(queries)} queries), k={K}, default fusion",
        "",
        "| state | method | documents | queries | identical top-10 | same top-10 set | nDCG@10 in process | "
        "nDCG@10 Milvus | difference |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def latency(sizes: Sequence[int], dim: int, workdir: Path) -> list[str]:
    from langchain_core.documents import Document

    from langchain_fusion import FusionIndex
    from langchain_fusion.stores.milvus import MilvusStore

    rows = []
    for n in sizes:
        folder = workdir / f"corpus-{n}"
        folder.mkdir()
        log(f"generating {n} synthetic chunks")
        make_corpus(folder, n, dim, seed=0, n_queries=LATENCY_QUERIES + 10)
        corpus = load_corpus(folder)
        docs = [
            Document(id=f"c{row}", page_content=text, metadata={"source": f"s{row // 40}"})
            for row, text in enumerate(corpus.texts)
        ]
        for name, store in (("in process", None), ("Milvus Lite", MilvusStore(str(folder / "m.db"), f"bench{n}"))):
            log(f"{n}: building on {name}")
            t0 = time.perf_counter()
            index = FusionIndex.from_documents(docs, corpus.embeddings, **({"store": store} if store else {}))
            build = time.perf_counter() - t0
            retriever = index.as_retriever(k=5)
            for query in corpus.queries[:10]:
                retriever.invoke(query)
            counter = CallCounter(store.client) if store is not None else None
            if store is not None:
                store.client = counter
            times = []
            for query in corpus.queries[10 : 10 + LATENCY_QUERIES]:
                t0 = time.perf_counter()
                retriever.invoke(query)
                times.append(time.perf_counter() - t0)
            p50 = statistics.median(times) * 1000
            p95 = float(np.percentile(times, 95)) * 1000
            calls = "" if counter is None else f"{counter.summary(LATENCY_QUERIES)}"
            rows.append((n, name, build, p50, p95, calls))
            log(f"  build {build:.1f} s, query p50 {p50:.2f} ms {calls}")
            del index, retriever
    lines = [
        f"### Build and query latency: in process vs Milvus Lite (synthetic, {dim} dimensions, k=5, fetch_k 100)",
        "",
        "| chunks | store | build (s) | build ratio | query p50 (ms) | query p95 (ms) | p50 ratio | calls per query |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base: dict[int, tuple[float, float]] = {}
    for n, name, build, p50, p95, calls in rows:
        base.setdefault(n, (build, p50))
        lines.append(
            f"| {n:,} | {name} | {build:.1f} | {build / base[n][0]:.1f}x | {p50:.2f} | {p95:.2f} | "
            f"{p50 / base[n][1]:.1f}x | {calls or '-'} |"
        )
    return lines


def row_path_upsert(store: Any, documents: Sequence[Any], vectors: Any, texts: Sequence[str]) -> None:
    """The baseline: the row dicts and ``MilvusClient.upsert`` the store used before its column upsert."""
    import json

    from langchain_fusion.stores.local.tokens import tokenize

    analyzer = store.settings.analyzer
    rows = []
    for doc, vector, text in zip(documents, vectors, texts, strict=True):
        metadata = json.loads(json.dumps(doc.metadata))
        rows.append(
            {
                "id": doc.id,
                "text": doc.page_content,
                "bm25_text": " ".join(tokenize(analyzer, text)),
                "vector": np.asarray(vector, dtype=np.float32).tolist(),
                "metadata": metadata,
                **({"null_keys": {k: True for k, v in metadata.items() if v is None}} if store.null_keys else {}),
            }
        )
    for start in range(0, len(rows), 1000):
        store.call("upsert", collection_name=store.collection_name, data=rows[start : start + 1000])


def ingestion(n: int, dim: int, workdir: Path) -> list[str]:
    import psutil
    from langchain_core.documents import Document

    from langchain_fusion.stores.milvus import MilvusStore

    folder = workdir / f"ingest-{n}"
    folder.mkdir()
    log(f"ingestion: generating {n} synthetic chunks")
    make_corpus(folder, n, dim, seed=1, n_queries=2)
    corpus = load_corpus(folder)
    docs = [
        Document(
            id=f"c{row}",
            page_content=text,
            metadata={"source": f"s{row // 40}", "page": None, "chunk_index": row % 40, "start_index": 900 * row},
        )
        for row, text in enumerate(corpus.texts)
    ]
    vectors = np.asarray(corpus.vectors, dtype=np.float32)
    texts = [d.page_content for d in docs]
    lines = [
        f"### Ingestion CPU per upserted row: Milvus Lite, {n:,} chunks, {dim} dimensions (vectors given)",
        "",
        "| path | client CPU per row (us) | client ratio | Lite server CPU per row (us) | wall (s) | rows |",
        "|---|---|---|---|---|---|",
    ]
    base = None
    for name, upsert in (
        ("row dicts + MilvusClient.upsert (before)", lambda s: row_path_upsert(s, docs, vectors, texts)),
        ("columns (MilvusStore.upsert now)", lambda s: s.upsert(docs, vectors, texts)),
    ):
        store = MilvusStore(str(folder / f"{len(lines)}.db"), "ingest")
        store.upsert(docs[:1], vectors[:1], texts[:1])  # creates the collection (not measured)
        server = psutil.Process().children(recursive=True)

        def server_cpu(processes: list[Any] = server) -> float:
            return sum(sum(p.cpu_times()[:2]) for p in processes)

        cpu, served, wall = time.process_time(), server_cpu(), time.perf_counter()
        upsert(store)
        cpu, served, wall = time.process_time() - cpu, server_cpu() - served, time.perf_counter() - wall
        rows = store.count()
        store.close()
        base = base or cpu
        lines.append(
            f"| {name} | {cpu / n * 1e6:.0f} | {cpu / base:.2f}x | {served / n * 1e6:.0f} | {wall:.1f} | {rows:,} |"
        )
        log(lines[-1])
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR folder (default: ../shared SciFact)")
    parser.add_argument("--split", default="train", help="qrels split (default: %(default)s)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder")
    parser.add_argument("--queries", type=int, default=None, help="use only the first N labelled queries")
    parser.add_argument("--sizes", default="10000,100000", help="latency corpus sizes (default: %(default)s)")
    parser.add_argument("--dim", type=int, default=384, help="latency vector dimension (default: %(default)s)")
    parser.add_argument("--skip-equivalence", action="store_true", help="no equivalence table")
    parser.add_argument("--skip-latency", action="store_true", help="no latency table")
    parser.add_argument(
        "--ingest-rows", type=int, default=20000, help="ingestion CPU rows, 0 to skip (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError:
        sys.exit('needs the milvus extra: pip install -e ".[milvus]"')
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="milvus-bench-") as tmp:
        if not args.skip_equivalence:
            lines += equivalence(args.data, args.split, args.cache, args.queries, Path(tmp))
            lines.append("")
        if not args.skip_latency:
            sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
            lines += latency(sizes, args.dim, Path(tmp))
            lines.append("")
        if args.ingest_rows:
            lines += ingestion(args.ingest_rows, args.dim, Path(tmp))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
