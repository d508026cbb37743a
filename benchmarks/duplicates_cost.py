"""What collapsing copies (duplicates="exact", the default) costs a query, against duplicates="keep".

A random corpus (Zipf words, a deterministic hashing embedding: no model), 20,000 rows in process;
each setting answers the same queries, interleaved, and the table gives medians and their ratio.
Run: ``python benchmarks/duplicates_cost.py [ROWS]``.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import sys
import time

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import FusionIndex

QUERIES = ["w1 w2", "w3 w7", "w10 w20 w5", "w2", "w40 w41", "w7 w300", "w15 w16 w17", "w99"]


class _Hashing(Embeddings):
    """Bag of words of fixed random vectors (64 dimensions)."""

    def _vector(self, text: str) -> list[float]:
        total = np.zeros(64)
        for word in re.findall(r"\w+", text.lower()):
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            total += np.random.default_rng(seed).standard_normal(64)
        return (total / (np.linalg.norm(total) or 1.0)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def main(rows: int = 20_000) -> None:
    """Print the table."""
    rng = np.random.default_rng(1)
    vocabulary = [f"w{i}" for i in range(2000)]
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    docs = [
        Document(
            page_content=" ".join(rng.choice(vocabulary, size=int(rng.integers(3, 30)), p=weights)),
            metadata={"source": f"s{i % 50}.txt"},
        )
        for i in range(rows)
    ]
    index = FusionIndex.from_documents(docs, _Hashing())
    print(f"{rows:,} rows; medians over {8 * len(QUERIES)} queries per cell")
    print("| k | exact (default) | keep | ratio |")
    print("|---:|---:|---:|---:|")
    for k in (4, 10, 50):
        retrievers = {"exact": index.as_retriever(k=k), "keep": index.as_retriever(k=k, duplicates="keep")}
        times: dict[str, list[float]] = {name: [] for name in retrievers}
        for retriever in retrievers.values():
            retriever.invoke(QUERIES[0])
        for _ in range(8):
            for name, retriever in retrievers.items():
                for query in QUERIES:
                    start = time.perf_counter()
                    retriever.invoke(query)
                    times[name].append(time.perf_counter() - start)
        exact, keep = (statistics.median(times[name]) * 1000 for name in ("exact", "keep"))
        print(f"| {k} | {exact:.2f} ms | {keep:.2f} ms | {exact / keep:.2f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
