"""Updates benchmark: what add/delete cost next to a build, and query latency before and after.

    python benchmarks/updates.py                         # 10k and 100k chunks (a few minutes)
    python benchmarks/updates.py --sizes 10000 --queries 50
    python benchmarks/updates.py --baseline 05925b2      # the implementation to compare against

Each (implementation, size) runs in a fresh subprocess over the same synthetic corpus as
``latency.py`` (vectors are a dict lookup, so "build" excludes embedding). ``current`` is this
checkout; ``baseline`` is the package exported from a git revision (default: the last commit
before the living index), imported ahead of the installed one. The implementations run in
alternation (``--rounds``, default 2) and each metric keeps its lowest value over the rounds,
so both face the same machine load. Printed, as a markdown table:

- build: ``FusionIndex.from_documents`` of n chunks (median of 1; embedding is a lookup);
- add 100 / delete 100: median of 5 rounds of ``add_documents`` of 100 new chunks and
  ``delete`` of 100 ids, and each as a share of the build;
- query p50: ``FusionRetriever.invoke`` (fetch_k 100 and None), median over the queries, on the
  freshly built index and again after the update rounds;
- BM25 build peak: peak RSS growth of building the BM25 side alone over the n texts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from latency import BuildMemory, load_corpus, make_corpus  # noqa: E402

DEFAULT_BASELINE = "05925b2"
ROUNDS = 5
BATCH = 100


def worker(data: Path, queries: int, out: Path) -> None:
    """Measure one implementation (whatever ``langchain_fusion`` imports) on one corpus."""
    from langchain_core.documents import Document

    import langchain_fusion
    from langchain_fusion import FusionIndex

    corpus = load_corpus(data)
    docs = [Document(id=f"c{row}", page_content=text) for row, text in enumerate(corpus.texts)]
    spare_texts = [f"{text} spare{row}" for row, text in enumerate(corpus.texts[: ROUNDS * BATCH])]
    corpus.embeddings._row.update({t: r for r, t in enumerate(spare_texts)})  # reuse vectors for new texts
    result: dict[str, Any] = {"version": getattr(langchain_fusion, "__file__", "?")}

    with BuildMemory() as memory:
        bm25_texts = corpus.texts
        if hasattr(langchain_fusion, "stores"):
            from langchain_fusion.stores.local.store import LocalStore

            store = LocalStore()
            store.upsert(docs, np.ones((len(docs), 1), np.float32), bm25_texts)  # 1-d vectors: BM25 dominates
        else:
            from langchain_fusion.bm25 import BM25Index  # type: ignore[import-not-found]

            BM25Index().add(bm25_texts)
    result["bm25_build_s"] = None
    result["bm25_peak_mb"] = memory.peak
    del memory

    start = time.perf_counter()
    index = FusionIndex.from_documents(docs, corpus.embeddings)
    result["build_s"] = time.perf_counter() - start
    retriever = index.as_retriever(k=5)
    timed = corpus.queries[:queries]

    def p50(fetch_k: int | None) -> float:
        for query in timed[:5]:
            retriever.invoke(query, fetch_k=fetch_k)
        times = []
        for query in timed:
            t0 = time.perf_counter()
            retriever.invoke(query, fetch_k=fetch_k)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    result["query_ms_before"] = p50(100)
    result["query_all_ms_before"] = p50(None)
    adds, deletes = [], []
    for round_ in range(ROUNDS):
        new = [Document(id=f"n{round_}-{i}", page_content=spare_texts[round_ * BATCH + i]) for i in range(BATCH)]
        t0 = time.perf_counter()
        index.add_documents(new)
        adds.append(time.perf_counter() - t0)
        victims = [f"c{round_ * BATCH + i}" for i in range(BATCH)]
        t0 = time.perf_counter()
        index.delete(victims)
        deletes.append(time.perf_counter() - t0)
    result["add_s"] = statistics.median(adds)
    result["delete_s"] = statistics.median(deletes)
    result["query_ms_after"] = p50(100)
    result["query_all_ms_after"] = p50(None)
    out.write_text(json.dumps(result))


def export_baseline(revision: str, folder: Path) -> Path:
    """The package as of ``revision``, extracted under ``folder`` (git archive; nothing is built)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "langchain_fusion"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def run(implementation: str, path: Path | None, data: Path, queries: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{implementation}.json"
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = f"{path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    subprocess.run(
        [sys.executable, __file__, "--_worker", str(data), "--queries", str(queries), "--_out", str(out)],
        check=True,
        env=env,
        cwd=workdir,
    )
    return dict(json.loads(out.read_text()))


def best(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric, the lowest of the rounds (the least disturbed by other work on the machine)."""
    return {
        key: min(r[key] for r in results) if isinstance(results[0][key], float) else results[0][key]
        for key in results[0]
    }


def table(rows: list[tuple[int, str, dict[str, Any]]]) -> str:
    lines = [
        "| chunks | implementation | build s | add 100 ms (share of build) | delete 100 ms (share of build) "
        "| query p50 ms before / after | fetch_k=None p50 ms before / after | BM25 build peak MB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, name, r in rows:
        lines.append(
            f"| {n:,} | {name} | {r['build_s']:.2f} | {r['add_s'] * 1000:.1f} ({r['add_s'] / r['build_s']:.2%}) "
            f"| {r['delete_s'] * 1000:.1f} ({r['delete_s'] / r['build_s']:.2%}) "
            f"| {r['query_ms_before']:.2f} / {r['query_ms_after']:.2f} "
            f"| {r['query_all_ms_before']:.1f} / {r['query_all_ms_after']:.1f} | {r['bm25_peak_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes (chunks)")
    parser.add_argument("--queries", type=int, default=100, help="timed queries per measurement (default 100)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision to compare against ('' for none)")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension (default 384)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per implementation (default 2)")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        worker(Path(args._worker), args.queries, Path(args._out))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="lf-updates-") as tmp:
        workdir = Path(tmp)
        baseline = export_baseline(args.baseline, workdir / "baseline") if args.baseline else None
        for n in (int(s) for s in args.sizes.split(",")):
            data = workdir / f"corpus-{n}"
            data.mkdir()
            make_corpus(data, n, args.dim, 0, max(args.queries, 10))
            implementations = [("current", None)] + ([(f"baseline {args.baseline}", baseline)] if baseline else [])
            measured: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in implementations}
            for _ in range(args.rounds):  # A B A B: both see the same machine load
                for name, path in implementations:
                    measured[name].append(run(name.split()[0], path, data, args.queries, workdir))
            rows.extend((n, name, best(results)) for name, results in measured.items())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"updates benchmark; {os.cpu_count()} cores, load average {load:.1f}; dim {args.dim}\n")
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
