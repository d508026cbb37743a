"""Retrieval quality on BEIR SciFact: langchain-fusion against the tutorial and LangChain baselines.

Prints one markdown table (nDCG@10, recall@10, MRR@10, recall@100 and p50 latency per query)
with, over the same corpus and the same queries: BM25 on ``str.split`` tokens (rank_bm25, as
the tutorial and LangChain's BM25Retriever tokenize), our BM25, vector only, the tutorial's
``fusion_retrieval`` as written, LangChain's EnsembleRetriever, our FusionRetriever with its
defaults, and our fusion methods at alpha 0.5 and at their best alpha from a sweep. Progress
goes to stderr, so ``> results.md`` captures only the report.

    python benchmarks/quality.py                              # SciFact train, a few minutes on 2 cores
    python benchmarks/quality.py --queries 50 --plot ""       # quick check on the first 50 queries
    python benchmarks/quality.py --json out.json --plot docs/scifact-alpha.png

Data: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), read in place
from ``../shared/data/scifact`` by default; SciFact is CC BY-NC, so it is never copied into the
repository. Embeddings: the bundled all-MiniLM-L6-v2 (``LocalEmbeddings``) behind an on-disk
``CachedEmbeddings``, shared by every system so all of them use identical document vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"
DEFAULT_CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
DEFAULT_PLOT = REPO / "docs" / "scifact-alpha.png"
DEFAULT_METRICS = "ndcg@10,recall@10,mrr@10,recall@100"
TUTORIAL_ALPHA = 0.5
ENSEMBLE_WEIGHTS = (0.5, 0.5)

_METRIC_LABELS = {"ndcg": "nDCG", "mrr": "MRR", "map": "MAP", "recall": "recall", "precision": "P", "hit_rate": "hit"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _latency_module() -> Any:
    """benchmarks/latency.py, which holds the verbatim copy of the tutorial's fusion_retrieval."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import latency

    return latency


# --- the baselines as LangChain retrievers -----------------------------------------------------

RESTORED_IDS = {"count": 0}
"""How many returned documents had no ``id`` and were mapped back through ``source``."""


def with_ids(docs: Sequence[Document]) -> list[Document]:
    """The documents, each with its corpus id (``load_beir`` sets ``metadata["source"]`` to it)."""
    out = []
    for doc in docs:
        if doc.id is None:
            RESTORED_IDS["count"] += 1
            doc = doc.model_copy(update={"id": str(doc.metadata["source"])})
        out.append(doc)
    return out


class SplitBM25Retriever(BaseRetriever):
    """rank_bm25 ``BM25Okapi`` over ``str.split`` tokens, top k by score (as LangChain's BM25Retriever)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bm25: Any
    docs: list[Document]
    k: int = 10

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        scores = self.bm25.get_scores(query.split())
        top = np.argsort(scores)[::-1][: k or self.k]  # what BM25Okapi.get_top_n does
        return with_ids([self.docs[i] for i in top])


class TutorialFusionRetriever(BaseRetriever):
    """The tutorial's ``fusion_retrieval(vectorstore, bm25, query, k, alpha)``, called as written."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: Any
    bm25: Any
    fusion_retrieval: Any
    k: int = 10
    alpha: float = TUTORIAL_ALPHA

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return with_ids(self.fusion_retrieval(self.vectorstore, self.bm25, query, k=k or self.k, alpha=self.alpha))


def check_ids(name: str, retriever: BaseRetriever, queries: Sequence[str], k: int) -> dict[str, Any]:
    """Do a baseline's returned documents keep their corpus ids (``id == metadata['source']``)?"""
    docs = [d for q in queries for d in retriever.invoke(q, k=k)]
    missing = sum(d.id is None for d in docs)
    wrong = sum(d.id is not None and d.id != str(d.metadata.get("source")) for d in docs)
    log(f"  ids through {name}: {len(docs)} documents, {missing} without id, {wrong} with a different id")
    return {"retriever": name, "documents": len(docs), "missing": missing, "mismatched": wrong}


# --- report helpers -----------------------------------------------------------------------------


def metric_label(spec: str) -> str:
    name, _, cutoff = spec.partition("@")
    return f"{_METRIC_LABELS.get(name, name)}@{cutoff}"


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def render(rows: list[dict[str, Any]], metrics: Sequence[str]) -> list[str]:
    header = ["system", "queries", *(metric_label(m) for m in metrics), "p50 ms"]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(metrics) + 1)]
    for row in rows:
        cells = [row["name"], str(row["queries"]), *(f"{row['means'][m]:.4f}" for m in metrics), _ms(row["p50_ms"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def shown_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def result_named(results: Sequence[Any], name: str) -> Any:
    return next(r for r in results if r.name == name)


def row_of(result: Any, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or result.name,
        "queries": len(result.per_query),
        "means": result.means,
        "p50_ms": result.latency(0.5),
        "p95_ms": result.latency(0.95),
        "per_query": result.per_query,
    }


# --- the run ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR folder (default: %(default)s)")
    parser.add_argument("--split", default="train", help="qrels split (default: %(default)s)")
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder (default: %(default)s)"
    )
    parser.add_argument(
        "--metrics",
        default=DEFAULT_METRICS,
        help="NAME@K list; the first picks the best alpha and is plotted (default: %(default)s)",
    )
    parser.add_argument("--alphas", default="0:1:0.1", help="alpha sweep grid, START:STOP:STEP or a list")
    parser.add_argument("--methods", default="weighted,zscore,rrf", help="fusion methods to sweep")
    parser.add_argument(
        "--tutorial-queries",
        type=int,
        default=0,
        help="answer only the first N queries of the split in the tutorial row, which scores every document "
        "per query; 0 = all (default: %(default)s)",
    )
    parser.add_argument("--plot", default=str(DEFAULT_PLOT), help="alpha-sweep PNG, '' for none (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write every result (with per-query scores) here")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch and FAISS threads (query embedding and vector search); 0 = the libraries' defaults. "
        "Default 1: on a small busy machine, torch's thread pool can stall ~40x per query (default: %(default)s)",
    )
    parser.add_argument(
        "--queries", type=int, default=0, help="use only the first N queries of the split (quick checks); 0 = all"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    args.metric_list = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if args.tutorial_queries < 0 or args.queries < 0 or args.threads < 0:
        parser.error("--tutorial-queries, --queries and --threads must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.perf_counter()
    load_start = _load()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever as CommunityBM25Retriever
    from langchain_community.vectorstores import FAISS
    from rank_bm25 import BM25Okapi

    from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, LocalEmbeddings, VectorRetriever
    from langchain_fusion.evaluation import (
        EvalDataset,
        Report,
        alpha_grid,
        evaluate_retrievers,
        load_beir,
        parse_metric,
        sweep_alpha,
    )
    from langchain_fusion.models.embeddings import CachedEmbeddings
    from langchain_fusion.search.fusion import check_method

    metrics = args.metric_list
    for metric in metrics:
        parse_metric(metric)
    depth = max(parse_metric(m)[1] for m in metrics)
    main_metric = metrics[0]
    alphas = alpha_grid(args.alphas)
    methods = [check_method(m.strip()) for m in args.methods.split(",") if m.strip()]
    progress = not args.quiet
    fusion_retrieval = _latency_module().fusion_retrieval
    if args.threads:
        import faiss
        import torch

        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)

    # Data and the shared embeddings.
    dataset = load_beir(args.data, args.split)
    if args.queries:
        kept = list(dataset.queries)[: args.queries]
        dataset = EvalDataset(
            name=dataset.name,
            queries={q: dataset.queries[q] for q in kept},
            qrels={q: dataset.qrels[q] for q in kept},
            corpus=dataset.corpus,
        )
    docs = dataset.corpus
    judged = sum(len(j) for j in dataset.qrels.values())
    duplicate_texts = len(docs) - len({d.page_content for d in docs})
    log(f"{dataset.name}: {len(docs)} documents, {len(dataset.queries)} queries, {judged} judgements")
    embeddings = CachedEmbeddings(LocalEmbeddings(), args.cache)

    # Our index (library defaults) and the baselines' stores, all from the same documents.
    t0 = time.perf_counter()
    index = FusionIndex.from_documents(docs, embeddings)
    index_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectorstore = FAISS.from_documents(docs, embeddings)
    split_bm25 = BM25Okapi([doc.page_content.split() for doc in docs])
    community_bm25 = CommunityBM25Retriever.from_documents(docs, k=depth)
    baselines_build_s = time.perf_counter() - t0
    log(
        f"built ours in {index_build_s:.1f}s, the baselines in {baselines_build_s:.1f}s; embedding cache: "
        f"{embeddings.hits} hits, {embeddings.misses} misses ({embeddings.folder})"
    )
    t0 = time.perf_counter()
    embeddings.embed_query("warm up")  # load the model outside every timer
    log(f"embedding model loaded in {time.perf_counter() - t0:.1f}s")

    faiss_retriever = vectorstore.as_retriever(search_kwargs={"k": depth})
    ensemble = EnsembleRetriever(retrievers=[community_bm25, faiss_retriever], weights=list(ENSEMBLE_WEIGHTS))
    tutorial = TutorialFusionRetriever(
        vectorstore=vectorstore, bm25=split_bm25, fusion_retrieval=fusion_retrieval, k=depth
    )
    split_retriever = SplitBM25Retriever(bm25=split_bm25, docs=docs, k=depth)

    probe = list(dataset.queries.values())[:5]
    id_checks = [
        check_ids("FAISS.from_documents retriever", faiss_retriever, probe, depth),
        check_ids("community BM25Retriever", community_bm25, probe, depth),
        check_ids("EnsembleRetriever", ensemble, probe, depth),
        check_ids("tutorial fusion_retrieval", tutorial, probe[:2], depth),
    ]
    if any(c["missing"] or c["mismatched"] for c in id_checks[:3]):
        raise SystemExit("a LangChain baseline lost or changed Document.id: map ids back by metadata['source']")

    defaults = FusionRetriever(index=index)
    default_options = {"alpha": defaults.alpha, "method": defaults.method, "fetch_k": defaults.fetch_k}

    # The alpha sweep (same fetch_k as the retriever's default) and the best alpha per method.
    log(f"alpha sweep: {len(methods)} methods x {len(alphas)} alphas x {len(dataset.queries)} queries ...")
    t0 = time.perf_counter()
    sweep = sweep_alpha(index, dataset, alphas, methods, metrics, fetch_k=defaults.fetch_k, progress=progress)
    log(f"alpha sweep done in {time.perf_counter() - t0:.0f}s")
    swept = {r.name: r.means for r in sweep.results}
    best: dict[str, float] = {}
    for method in methods:
        # max() keeps the first (smallest) alpha on ties.
        best[method] = max(alphas, key=lambda a, m=method: swept[f"{m}@{a:g}"][main_metric])
    plot_path = None
    if args.plot:
        from langchain_fusion.evaluation import plot_alpha_sweep

        title = f"{main_metric} vs alpha on SciFact ({args.split}, {len(dataset.queries)} queries, MiniLM-L6)"
        plot_path = plot_alpha_sweep(sweep, main_metric, args.plot, title=title)
        log(f"plot saved to {plot_path}")

    # Every row through evaluate_retrievers (k = deepest cutoff, latency per invoke).
    if args.tutorial_queries and args.tutorial_queries < len(dataset.queries):
        subset_ids = list(dataset.queries)[: args.tutorial_queries]
        tutorial_data = EvalDataset(
            name=f"{dataset.name} (first {len(subset_ids)})",
            queries={q: dataset.queries[q] for q in subset_ids},
            qrels={q: dataset.qrels[q] for q in subset_ids},
        )
        tutorial_name = f"tutorial fusion (as written), first {len(subset_ids)} queries"
    else:
        subset_ids, tutorial_data = list(dataset.queries), dataset
        tutorial_name = "tutorial fusion (as written)"

    ours_best = {
        f"ours: {m} (best alpha={best[m]:g})": FusionRetriever(index=index, alpha=best[m], method=m) for m in methods
    }
    plan: list[tuple[str, BaseRetriever, EvalDataset]] = [
        ("BM25, tutorial tokens (str.split)", split_retriever, dataset),
        ("BM25 (ours)", BM25Retriever(index=index), dataset),
        ("vector only", VectorRetriever(index=index), dataset),
        (tutorial_name, tutorial, tutorial_data),
        ("EnsembleRetriever (BM25Retriever + FAISS, 0.5/0.5)", ensemble, dataset),
        ("ours: FusionRetriever defaults", defaults, dataset),
        ("ours: weighted, alpha=0.5", FusionRetriever(index=index, alpha=0.5, method="weighted"), dataset),
        *((name, retriever, dataset) for name, retriever in ours_best.items()),
    ]
    results = []
    for name, retriever, data in plan:
        t0 = time.perf_counter()
        retriever.invoke(next(iter(data.queries.values())), k=depth)  # warm-up, untimed
        report = evaluate_retrievers({name: retriever}, data, metrics, progress=progress, batch_size=1)
        results.append(report.results[0])
        log(f"{name}: {report.results[0].means[main_metric]:.4f} {main_metric} in {time.perf_counter() - t0:.0f}s")
    rows = [row_of(r) for r in results]
    full = Report(dataset.name, metrics, [r for r in results if len(r.per_query) == len(dataset.queries)])

    # Consistency checks between the two evaluation paths, and per-query comparisons.
    checks = []
    for name, options in [
        ("ours: weighted, alpha=0.5", {"alpha": 0.5, "method": "weighted"}),
        *((n, {"alpha": best[m], "method": m}) for m, n in zip(methods, ours_best, strict=True)),
    ]:
        key = f"{options['method']}@{options['alpha']:g}"
        if key in swept:
            got = full.result(name).means[main_metric]
            checks.append((name, key, got, swept[key][main_metric]))
    mismatched = [c for c in checks if abs(c[2] - c[3]) > 1e-9]
    compare_to = ["vector only", "BM25 (ours)", "EnsembleRetriever (BM25Retriever + FAISS, 0.5/0.5)"]
    comparisons = [full.compare("ours: FusionRetriever defaults", b, main_metric) for b in compare_to]
    subset_scores = {
        r.name: float(np.mean([r.per_query[q][main_metric] for q in subset_ids]))
        for r in results
        if r.name != tutorial_name
    }
    elapsed = time.perf_counter() - started

    # The report.
    params = index.bm25_params
    analyzer = index.analyzer
    versions = ", ".join(
        f"{p} {_version(p)}"
        for p in (
            "langchain-fusion",
            "faiss-cpu",
            "bm25s",
            "rank-bm25",
            "langchain-core",
            "langchain-community",
            "langchain-classic",
            "sentence-transformers",
        )
    )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    header = [
        f"- command: `{shlex.join(['python', 'benchmarks/quality.py', *argv])}`",
        f"- date: {date}",
        f"- data: BEIR SciFact read in place from `{args.data}` (not in this repository: CC BY-NC); "
        f"split `{args.split}`: {len(dataset.queries)} queries with {judged} relevance judgements; "
        f"corpus {len(docs)} documents, one per record (title + blank line + abstract, ids preserved)",
        f"- embeddings: all-MiniLM-L6-v2 (`LocalEmbeddings`, 384 dimensions) behind `CachedEmbeddings` "
        f"(corpus vectors: {embeddings.hits} read from the cache, {embeddings.misses} computed, for two builds of "
        f"{len(docs)}: ours and the LangChain FAISS store); queries are embedded on every call. Every system "
        f"uses these same document vectors. torch/FAISS threads: {args.threads or 'library defaults'}.",
        f"- machine: {_latency_module()._cpu_model()}, {os.cpu_count()} CPUs ({usable} usable), "
        f"python {platform.python_version()}; {versions}",
        f"- load average at start {load_start}, at end {_load()}; total runtime {elapsed / 60:.1f} min",
    ]
    opts = ", ".join(f"{k}={v!r}" for k, v in default_options.items())
    sweep_lines = [
        f"  - {m}: " + ", ".join(f"{a:g}: {swept[f'{m}@{a:g}'][main_metric]:.4f}" for a in alphas) for m in methods
    ]
    tutorial_p50 = result_named(results, tutorial_name).latency(0.5) or 0.0
    if len(subset_ids) < len(dataset.queries):
        coverage = (
            f'except the tutorial row: `fusion_retrieval` embeds "", fetches all documents and scores every one '
            f"on both sides for each query ({tutorial_p50 / 1000:.1f} s per query here), so it answers only the "
            f"first {len(subset_ids)} queries of the split (`--tutorial-queries`, 0 = all). On those queries, "
            f"{main_metric} of the other rows: " + ", ".join(f"{n} {v:.4f}" for n, v in subset_scores.items()) + "."
        )
    else:
        coverage = "including the tutorial row."
    notes = [
        "Notes:",
        f"- Every row answers the same {len(dataset.queries)} queries over the same {len(docs)} documents "
        f"with k={depth} (the deepest cutoff), {coverage}",
        "- The tutorial is NirDiamant/RAG_Techniques `fusion_retrieval` "
        "(https://github.com/NirDiamant/RAG_Techniques/blob/main/all_rag_techniques/fusion_retrieval.ipynb), "
        "imported from `benchmarks/latency.py` where it is copied verbatim, over `FAISS.from_documents` and "
        "`BM25Okapi` on `str.split` tokens, alpha=0.5. It adds vector scores ordered by distance to BM25 "
        "scores ordered by row, so its fused scores belong to unrelated documents: near-zero quality is the "
        "expected, faithful result.",
        "- `BM25, tutorial tokens (str.split)`: rank_bm25 `BM25Okapi` (k1=1.5, b=0.75, epsilon=0.25) on "
        "case-sensitive whitespace tokens with punctuation attached, which is also what LangChain's "
        "`BM25Retriever` (inside the EnsembleRetriever row) does by default. "
        f"`EnsembleRetriever`: langchain_classic, weights {list(ENSEMBLE_WEIGHTS)}, "
        f"weighted RRF (c=60) over `BM25Retriever.from_documents(docs, k={depth})` and "
        f"`FAISS.as_retriever(search_kwargs={{'k': {depth}}})`; it returns up to {2 * depth} documents, "
        f"de-duplicated by text ({duplicate_texts} duplicate texts in this corpus), and the metrics read "
        "the first ones.",
        f"- `ours: FusionRetriever defaults` is `FusionRetriever(index=index)` with the defaults at run time: "
        f"{opts}; BM25 params {params.model_dump()} (bm25s); analyzer {analyzer!r}; FAISS "
        f"`{index.store.vector_index}` (exact). This row is what users get without tuning."
        + (
            " Its options equal `ours: weighted, alpha=0.5`, so the two rows must be identical (they are "
            "separate runs, so only the latency differs)."
            if default_options["alpha"] == 0.5 and default_options["method"] == "weighted"
            else " They differ from `ours: weighted, alpha=0.5`."
        ),
        f"- `best alpha` rows: the alpha with the highest {main_metric} in a sweep over {args.alphas} "
        f"(fetch_k={defaults.fetch_k}) on this same split and these same queries, then evaluated again as a "
        "`FusionRetriever`. Tuned on the evaluated queries themselves, they are an optimistic upper bound, not "
        f"an expected result. Sweep ({main_metric}; alpha=1 is vector only and alpha=0 BM25 only):",
        *sweep_lines,
        f"- Plot of the sweep: `{shown_path(plot_path)}`." if plot_path else "- No plot (`--plot ''`).",
        "- Per query, `ours: FusionRetriever defaults` vs "
        + "; vs ".join(
            f"{c['baseline']}: {c['wins']} better, {c['losses']} worse, {c['ties']} tied" for c in comparisons
        )
        + f" ({main_metric}).",
        "- p50 ms: median wall time of one `invoke` (LangChain plumbing included). It includes embedding the "
        "query with MiniLM on the CPU for ours (fusion and vector only), the EnsembleRetriever and the "
        'tutorial (which embeds twice: the query and ""); the BM25 rows embed nothing. The machine is '
        "shared with other work (see the load average), so latencies are noisy; see `latency.py` for "
        "controlled latency numbers without the embedding. "
        + (
            f"torch and FAISS ran with {args.threads} thread(s) (`--threads`): with torch's default thread pool "
            "on a small busy machine, one query embedding can stall for hundreds of ms."
            if args.threads
            else "torch and FAISS ran with their default thread counts (`--threads 0`)."
        ),
        "- Ids: documents keep their corpus id through `FAISS.from_documents`, the community `BM25Retriever`, "
        "the EnsembleRetriever and the tutorial (checked on 5 queries: "
        + "; ".join(f"{c['retriever']} {c['missing']} missing, {c['mismatched']} wrong" for c in id_checks)
        + f"); {RESTORED_IDS['count']} returned documents had to be mapped back by `source`.",
        "- SciFact's BEIR test qrels are not used (held out here), so these numbers are on the train split "
        "and are not directly comparable with published BEIR SciFact (test) results.",
    ]
    if mismatched:
        notes.append(
            "- WARNING: FusionRetriever and the sweep disagree: "
            + "; ".join(f"{n} {g:.6f} vs sweep {k} {s:.6f}" for n, k, g, s in mismatched)
        )
    else:
        notes.append(
            f"- Check: every `ours` row's {main_metric} equals the sweep's value at the same method and alpha "
            f"({len(checks)} rows compared)."
        )

    print(f"## Retrieval quality on SciFact ({args.split})\n")
    print("\n".join(header))
    print()
    print("\n".join(render(rows, metrics)))
    print()
    print("\n".join(notes))
    if args.json:
        payload = {
            "header": header,
            "runtime_s": elapsed,
            "metrics": metrics,
            "defaults": {**default_options, "bm25": params.model_dump(), "analyzer": analyzer.model_dump()},
            "best_alpha": best,
            "rows": rows,
            "sweep": sweep.rows(),
            "comparisons": comparisons,
            "id_checks": id_checks,
            "tutorial_query_ids": subset_ids,
            "notes": notes,
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))
    log(f"done in {elapsed / 60:.1f} min")


if __name__ == "__main__":
    main()
