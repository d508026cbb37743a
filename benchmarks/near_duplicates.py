"""Cosine similarities of edited copies vs. different passages on the bundled model: where duplicates="near" cuts.

Takes the long paragraphs of the sample handbook, makes edited copies of each (one word changed,
three words changed, the last tenth cut) and prints the similarity of each kind of copy to its
original next to the similarity of different paragraphs of the same handbook. Run:
``python benchmarks/near_duplicates.py`` (offline: the bundled model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from langchain_fusion.models.embeddings import default_embeddings
from langchain_fusion.search.duplicates import DEFAULT_NEAR_DUPLICATE_SIMILARITY

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "maintenance-handbook.md"


def main() -> None:
    """Print the table."""
    paragraphs = [p.strip() for p in SAMPLE.read_text(encoding="utf-8").split("\n\n") if len(p.strip()) > 300]
    rng = np.random.default_rng(0)
    copies: dict[str, list[str]] = {"one word changed": [], "three words changed": [], "last tenth cut": []}
    for text in paragraphs:
        words = text.split()
        for name, count in (("one word changed", 1), ("three words changed", 3)):
            edited = list(words)
            for i in rng.choice(len(words), count, replace=False):
                edited[i] = "valve"
            copies[name].append(" ".join(edited))
        copies["last tenth cut"].append(" ".join(words[: len(words) - len(words) // 10]))
    model = default_embeddings()

    def unit(texts: list[str]) -> np.ndarray:
        vectors = np.asarray(model.embed_documents(texts), dtype=np.float64)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    originals = unit(paragraphs)
    threshold = DEFAULT_NEAR_DUPLICATE_SIMILARITY
    print(f"{len(paragraphs)} paragraphs of {SAMPLE.name}; threshold {threshold}")
    print(f"| {'pair':<32} | {'min':>5} | {'median':>6} | {'max':>5} | {'>= threshold':>12} |")
    print(f"|{'-' * 34}|{'-' * 7}|{'-' * 8}|{'-' * 7}|{'-' * 14}|")
    rows = {name: np.sum(originals * unit(texts), axis=1) for name, texts in copies.items()}
    similarity = originals @ originals.T
    rows["different paragraphs"] = similarity[~np.eye(len(paragraphs), dtype=bool)]
    for name, values in rows.items():
        share = float(np.mean(values >= threshold))
        print(f"| {name:<32} | {values.min():5.3f} | {np.median(values):6.3f} | {values.max():5.3f} | {share:12.0%} |")


if __name__ == "__main__":
    main()
