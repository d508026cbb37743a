"""What keeping documents compressed in memory costs a query: the same index, its documents in frames or plain.

An in-process index keeps its texts and metadata in zstd frames and its ids packed
(``stores/local/frames.py``, ``stores/local/ids.py``); before issue 46 they were plain bytes and a
tuple of strings, as a loaded folder's mapped files still are. This builds one index over
``scale.py``'s zipf corpus with an ``IVF1024,PQ192x4fs`` approximate index, makes a second
snapshot of the same rows whose documents are plain (everything else shared), and times the
default fused query (k=10, alpha=0.5, fetch_k=100) on each, the approximate index used and not
(the exact path), alternating the two layouts query by query so both share the machine's spells.
Each query's time is the least of ``--rounds``; the table gives p50 / p90 over the queries and
the documents' bytes each way.

    python benchmarks/compact_documents.py --size 100000
    python benchmarks/compact_documents.py --size 1000000 --queries 200   # ~25 min, ~9 GB
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency import load_corpus, log  # benchmarks/ is not a package
from scale import _document, make_zipf_corpus

FACTORY, SEARCH_PARAMS = "IVF1024,PQ192x4fs", "nprobe=128"


def plain(snapshot: Any, ann: bool) -> Any:
    """``snapshot`` with each segment's documents in the plain layout (ids a tuple of strings)."""
    from langchain_fusion.stores.local.documents import DocumentBlock
    from langchain_fusion.stores.local.packed import RawRows

    segments = []
    for segment in snapshot.segments:
        block = segment.documents
        raw = DocumentBlock(
            tuple(block.ids),  # type: ignore[arg-type]  # main's layout: reads index it like PackedIds
            RawRows.of(list(block.texts)),
            RawRows.of(list(block.metadata_rows)),
        )
        segments.append(replace(segment, documents=raw, ann=segment.ann if ann else None))
    return replace(snapshot, segments=tuple(segments))


def exact(snapshot: Any) -> Any:
    """``snapshot`` without its approximate indexes (every vector scanned)."""
    return replace(snapshot, segments=tuple(replace(s, ann=None) for s in snapshot.segments))


def document_bytes(snapshot: Any) -> int:
    """Bytes of the documents' texts, metadata and ids (a tuple of strings: its slots and the strings)."""
    total = 0
    for segment in snapshot.segments:
        block = segment.documents
        ids = block.ids
        total += block.nbytes + (
            ids.nbytes if hasattr(ids, "nbytes") else sys.getsizeof(ids) + sum(map(sys.getsizeof, ids))
        )
    return total


def main() -> None:
    """Build, then time each layout on each path; print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="chunks of the zipf corpus")
    parser.add_argument("--queries", type=int, default=200, help="timed queries")
    parser.add_argument("--rounds", type=int, default=3, help="times each query is run per layout (the least kept)")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension")
    args = parser.parse_args()

    from langchain_fusion import FusionIndex

    with tempfile.TemporaryDirectory() as tmp:
        log(f"zipf corpus of {args.size} chunks")
        make_zipf_corpus(Path(tmp), args.size, args.dim, 0, args.queries + 10)
        corpus = load_corpus(Path(tmp))
    docs = [_document(text, row) for row, text in enumerate(corpus.texts)]
    log(f"building {FACTORY}")
    index = FusionIndex.from_documents(
        docs, corpus.embeddings, vector_index=FACTORY, vector_search_params=SEARCH_PARAMS
    )
    del docs
    store = index.store
    built = store._snapshot
    layouts = {
        ("IVF-PQ", "compressed"): built,
        ("IVF-PQ", "plain"): plain(built, ann=True),
        ("exact", "compressed"): exact(built),
        ("exact", "plain"): plain(built, ann=False),
    }
    sizes = {layout: document_bytes(layouts[("exact", layout)]) for layout in ("compressed", "plain")}
    retriever = index.as_retriever(k=10, alpha=0.5, fetch_k=100)
    queries = corpus.queries[: args.queries + 10]
    for snapshot in layouts.values():  # warm each: common terms' weights, bitmaps, the frames' code paths
        store._snapshot = snapshot
        for query in queries[:10]:
            retriever.invoke(query)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in layouts}
    same = True
    for query in queries[10:]:
        for path in ("IVF-PQ", "exact"):
            results = []
            for layout in ("compressed", "plain"):
                store._snapshot = layouts[(path, layout)]
                best = float("inf")
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    found = retriever.invoke(query)
                    best = min(best, (time.perf_counter() - t0) * 1000)
                times[(path, layout)].append(best)
                results.append([(d.id, d.page_content, d.metadata) for d in found])
            same &= results[0] == results[1]
    store._snapshot = built

    def cell(key: tuple[str, str]) -> str:
        return f"{np.percentile(times[key], 50):.2f} / {np.percentile(times[key], 90):.2f}"

    print(f"## Compressed documents against plain ones, zipf {args.size:,} chunks\n")
    print(f"{len(queries) - 10} queries, the least of {args.rounds} runs each; same Documents both ways: {same}\n")
    print("| query (k=10, alpha=0.5, fetch_k=100) | compressed p50 / p90 ms | plain p50 / p90 ms | p50 ratio |")
    print("|---|---:|---:|---:|")
    for path in ("IVF-PQ", "exact"):
        ratio = np.percentile(times[(path, "compressed")], 50) / np.percentile(times[(path, "plain")], 50)
        label = f"{FACTORY} {SEARCH_PARAMS}" if path == "IVF-PQ" else "exact (every vector)"
        print(f"| {label} | {cell((path, 'compressed'))} | {cell((path, 'plain'))} | {ratio:.3f}x |")
    mb = {layout: size / 2**20 for layout, size in sizes.items()}
    print(f"\ndocuments (texts, metadata, ids): {mb['compressed']:.0f} MB compressed, {mb['plain']:.0f} MB plain")


if __name__ == "__main__":
    main()
