"""Tenants for tests: a randomized corpus of many tenants, the search settings compared, result equality."""

from __future__ import annotations

from typing import Any

import numpy as np
from langchain_core.documents import Document

from langchain_fusion import FusionIndex
from langchain_fusion import metadata as keys
from tests.helpers.embeddings import HashingEmbeddings

KEY = "tenant"
SHARED = [f"w{i}" for i in range(40)]
"""Words every tenant uses (Zipf-weighted): their statistics differ from tenant to tenant."""
SCORE_KEYS = (
    keys.FUSION_SCORE,
    keys.VECTOR_SCORE,
    keys.VECTOR_SCORE_NORMALIZED,
    keys.BM25_SCORE,
    keys.BM25_SCORE_NORMALIZED,
)
RANK_KEYS = (keys.VECTOR_RANK, keys.BM25_RANK)


def tenant_documents(rng: np.random.Generator, tenant: str, size: int) -> list[Document]:
    """``size`` chunks of a few sources (names shared across tenants), words of the shared and the tenant's own."""
    own = [f"{tenant}x{i}" for i in range(int(rng.integers(3, 15)))]
    vocabulary = SHARED + own
    weights = 1.0 / np.arange(1, len(vocabulary) + 1) ** float(rng.uniform(0.6, 1.4))
    weights /= weights.sum()
    docs = []
    for i in range(size):
        source = f"report-{i % 3}.txt"  # every tenant has these names
        text = " ".join(rng.choice(vocabulary, size=int(rng.integers(3, 25)), p=weights))
        if i and rng.random() < 0.1:
            text = docs[int(rng.integers(0, i))].page_content  # a copy of an earlier chunk: duplicates
        meta = {KEY: tenant, keys.SOURCE: source, keys.CHUNK_INDEX: i // 3, keys.START_INDEX: (i // 3) * 1000}
        docs.append(Document(id=f"c{i}", page_content=text, metadata={**meta, "bucket": i % 2}))
    return docs


def corpus(seed: int, tenants: int) -> dict[str, list[Document]]:
    """Tenants of Zipf-spread sizes (1 to ~60 chunks); ids repeat across tenants (they are scoped by tenant)."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum(1, (60 / np.arange(1, tenants + 1) ** 0.8).astype(int))
    rng.shuffle(sizes)
    return {f"t{t}": tenant_documents(rng, f"t{t}", int(size)) for t, size in enumerate(sizes)}


def build(by_tenant: dict[str, list[Document]]) -> tuple[FusionIndex, dict[str, FusionIndex]]:
    """The tenant-keyed index of every tenant, and one index per tenant."""
    everything = [doc for docs in by_tenant.values() for doc in docs]
    shared = FusionIndex.from_documents(everything, HashingEmbeddings(), tenant_key=KEY)
    own = {tenant: FusionIndex.from_documents(docs, HashingEmbeddings()) for tenant, docs in by_tenant.items()}
    return shared, own


def queries(rng: np.random.Generator, tenant: str) -> list[str]:
    """Two queries of a tenant: shared words, its own, and a word no tenant has."""
    words = [*SHARED[:10], f"{tenant}x0", f"{tenant}x1", "nothing"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 4)))) for _ in range(2)]


def assert_same(got: list[Document], expected: list[Document], where: str) -> None:
    """The same ids in the same order, the same scores (to 1e-6), ranks, copies, relevance and windows."""
    assert [d.id for d in got] == [d.id for d in expected], where
    for a, b in zip(got, expected, strict=True):
        for name in SCORE_KEYS:
            x, y = a.metadata.get(name), b.metadata.get(name)
            assert (x is None) == (y is None), (where, name)
            if x is not None:
                assert abs(x - y) <= 1e-6, (where, name, x, y)
        for name in (*RANK_KEYS, keys.ALSO_IN, keys.RELEVANCE, keys.WINDOW_SPAN, keys.HIERARCHICAL_SCORE):
            x, y = a.metadata.get(name), b.metadata.get(name)
            if isinstance(x, float) and isinstance(y, float):
                assert abs(x - y) <= 1e-6, (where, name)
            else:
                assert x == y, (where, name)
        assert a.page_content == b.page_content, where


SETTINGS: list[dict[str, Any]] = [  # every kind of search option, each in one setting at least
    {},
    {"method": "zscore", "alpha": 0.3},
    {"method": "rrf", "alpha": 0.7},
    {"alpha": 0.0},
    {"alpha": 1.0},
    {"fetch_k": None},
    {"fetch_k": 3, "k": 5},
    {"min_bm25_score": 1.0},
    {"min_vector_score": 0.3},
    {"lambda_mult": 0.5},
    {"max_per_source": 1},
    {"duplicates": "keep"},
    {"duplicates": "near", "near_duplicate_similarity": 0.9},
    {"filter": {keys.SOURCE: "report-1.txt"}},
    {"filter": {"bucket": 0}, "method": "rrf", "fetch_k": None},
]
