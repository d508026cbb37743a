"""Many tenants in one index: a tenant's query against the same query on an index of its documents alone.

The ``zipf`` corpus of ``scale.py`` (common terms that are not stopwords, vectors that crowd
together) is split among ``--tenants`` tenants of Zipf-spread sizes (the largest holds a few
tenth of the rows, most hold a few hundred). Two subprocesses, each measured from a clean
process:

- ``shared``: one tenant-keyed index of every row; the p50 of the default fused query of the
  largest and of the median tenant, alternating with the same queries on an index of that
  tenant's documents alone built in the same process (the reference); and the memory the index
  keeps.
- ``plain``: the same rows in one index that is not tenant-keyed, for its memory.

Reported: the two p50s of each tenant and their ratio (the target: at most 1.5x), and the memory
of the tenant-keyed index beyond the plain one.

    python benchmarks/tenants.py                              # 100k rows, 1,000 tenants
    python benchmarks/tenants.py --size 1000000              # the issue's shape (12+ GB of RAM)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency import load_corpus, log  # benchmarks/ is not a package: found by the path above
from scale import make_zipf_corpus, rss_mb, trim_heap

DIM = 384
QUERIES = 60
ROUNDS = 5


def tenant_sizes(n: int, tenants: int, seed: int) -> np.ndarray:
    """A tenant number per row: tenant t holds rows in proportion to 1/t**0.9 (shuffled into the corpus)."""
    weights = 1.0 / np.arange(1, tenants + 1) ** 0.9
    counts = np.maximum(1, np.floor(weights / weights.sum() * n)).astype(np.int64)
    counts[0] += n - counts.sum()
    owner = np.repeat(np.arange(tenants), counts)
    np.random.default_rng(seed).shuffle(owner)
    return owner


def documents(corpus: Any, owner: np.ndarray, rows: np.ndarray | None = None) -> list[Any]:
    from langchain_core.documents import Document

    chosen = range(len(corpus.texts)) if rows is None else rows.tolist()
    return [
        Document(
            page_content=corpus.texts[row],
            id=f"c{row}",
            metadata={"source": f"synthetic-{row // 40:05d}.pdf", "tenant": f"t{owner[row]}"},
        )
        for row in chosen
    ]


def p50_alternating(first: Any, second: Any, queries: list[tuple[str, Any]]) -> tuple[float, float, float]:
    """Median ms of each side over ``ROUNDS`` rounds of every query (one query of each in turn); p90 of the first."""
    a, b = [], []
    for _ in range(ROUNDS):
        for query in queries:
            t0 = time.perf_counter()
            first(query)
            t1 = time.perf_counter()
            second(query)
            t2 = time.perf_counter()
            a.append((t1 - t0) * 1000)
            b.append((t2 - t1) * 1000)
    return statistics.median(a), statistics.median(b), float(np.percentile(a, 90))


def worker(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_fusion import FusionIndex
    from langchain_fusion.search.options import SearchOptions
    from langchain_fusion.search.pool import fused_search, query_scorers

    corpus = load_corpus(Path(args.corpus))
    owner = tenant_sizes(len(corpus.texts), args.tenants, seed=7)
    gc.collect()
    trim_heap()
    before = rss_mb()
    keyed = args.part == "shared"
    t0 = time.perf_counter()
    index = FusionIndex.from_documents(
        documents(corpus, owner), corpus.embeddings, **({"tenant_key": "tenant"} if keyed else {})
    )
    build_s = time.perf_counter() - t0
    gc.collect()
    trim_heap()
    out: dict[str, Any] = {"part": args.part, "build_s": build_s, "kept_mb": rss_mb() - before}
    if not keyed:
        return out
    sizes = np.bincount(owner, minlength=args.tenants)
    ordered = np.argsort(-sizes, kind="stable")
    picks = {"largest": int(ordered[0]), "median": int(ordered[args.tenants // 2])}
    options = SearchOptions()
    rng = np.random.default_rng(3)
    for label, tenant in picks.items():
        rows = np.flatnonzero(owner == tenant)
        own = FusionIndex.from_documents(documents(corpus, owner, rows), corpus.embeddings)
        # Six words of one of the tenant's chunks; its vector stands in for the query's (no model is run).
        sources = rng.choice(rows, size=min(QUERIES, rows.size), replace=False)
        texts = [" ".join(corpus.texts[int(r)].split()[:6]) for r in sources]
        vectors = {text: corpus.vectors[int(r) : int(r) + 1] for text, r in zip(texts, sources, strict=True)}
        name = f"t{tenant}"
        tenant_options = options.model_copy(update={"tenant": name})

        def shared_query(
            text: str, tenant_options: Any = tenant_options, name: str = name, vectors: Any = vectors
        ) -> Any:
            view = index.search_view(name)
            return fused_search(view, query_scorers(view, text, vectors[text]), tenant_options)

        def own_query(text: str, own: Any = own, vectors: Any = vectors) -> Any:
            view = own.view()
            return fused_search(view, query_scorers(view, text, vectors[text]), options)

        for text in texts:  # the same results: the tenant's search is its own index's
            got = [index.search_view(name).ids([h.key])[0] for h in shared_query(text)]
            expected = [own.view().ids([h.key])[0] for h in own_query(text)]
            assert got == expected, (label, text)
        shared_ms, own_ms, shared_p90 = p50_alternating(shared_query, own_query, texts)
        out[label] = {"tenant": name, "rows": int(rows.size), "shared_ms": shared_ms, "own_ms": own_ms,
                      "shared_p90_ms": shared_p90}  # fmt: skip
        del own
        gc.collect()
    out["tenants"] = int(np.count_nonzero(sizes))
    return out


def run_part(args: argparse.Namespace, corpus: Path, part: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", part, "--corpus", str(corpus), "--tenants", str(args.tenants)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the {part} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="rows in all (default: 100,000)")
    parser.add_argument("--tenants", type=int, default=1000, help="tenants (default: 1,000)")
    parser.add_argument("--worker", choices=["shared", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.part = args.worker
        print(json.dumps(worker(args)))
        return
    with tempfile.TemporaryDirectory() as workdir:
        corpus = Path(workdir) / "corpus"
        corpus.mkdir()
        log(f"making the zipf corpus of {args.size:,} rows")
        make_zipf_corpus(corpus, args.size, DIM, seed=11, n_queries=QUERIES)
        log("the tenant-keyed index")
        shared = run_part(args, corpus, "shared")
        log("the plain index")
        plain = run_part(args, corpus, "plain")
    print(f"# Tenants: {args.size:,} rows, {shared['tenants']:,} tenants of Zipf-spread sizes\n")
    print("| tenant | rows | p50 on the shared index (ms) | p50 on its own index (ms) | ratio | p90 shared (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label in ("largest", "median"):
        row = shared[label]
        ratio = row["shared_ms"] / row["own_ms"]
        print(
            f"| {label} ({row['tenant']}) | {row['rows']:,} | {row['shared_ms']:.3f} | {row['own_ms']:.3f} | "
            f"{ratio:.2f}x | {row['shared_p90_ms']:.3f} |"
        )
    extra = shared["kept_mb"] - plain["kept_mb"]
    print(
        f"\nMemory kept: tenant-keyed {shared['kept_mb']:,.0f} MB, plain {plain['kept_mb']:,.0f} MB: "
        f"{extra:+,.0f} MB for the tenants ({extra / max(shared['tenants'], 1) * 1024:,.0f} kB a tenant). "
        f"Build: {shared['build_s']:,.0f} s tenant-keyed, {plain['build_s']:,.0f} s plain."
    )


if __name__ == "__main__":
    main()
