"""The exact vector top-k: a batch's one-pass contenders and a single query's scan give the float64 top k."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion.search import pool as pool_module
from langchain_fusion.stores.local import scorers as scorers_module
from langchain_fusion.stores.local import vector_top
from langchain_fusion.stores.local.vector_top import batch_contenders, contenders, exact_top, float32_at_most
from langchain_fusion.stores.local.vectors import exact_products, product_error
from tests.helpers.embeddings import HashingEmbeddings


def crowded(rng: np.random.Generator, n: int, dimension: int = 24, copies: int = 3) -> np.ndarray:
    """Unit vectors that crowd around one direction, each distinct one stored ``copies`` times (ties everywhere)."""
    distinct = rng.standard_normal((n // copies + 1, dimension)).astype(np.float32) * 0.05 + 1.0
    vectors = np.repeat(distinct, copies, axis=0)[:n]
    rng.shuffle(vectors)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def reference_top(vectors: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray | None) -> list[int]:
    """The float64 top ``k`` by brute force, ties by row."""
    exact = exact_products(vectors, query)
    rows = np.arange(len(vectors)) if allowed is None else np.flatnonzero(allowed)
    order = np.lexsort((rows, -exact[rows]))
    return [int(row) for row in rows[order][:k]]


def error_of(vectors: np.ndarray, query: np.ndarray) -> float:
    return float(product_error(np.float32((vectors * vectors).sum(axis=1).max()), query, vectors.shape[1]))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 64-256 rows: many blocks, floors raised and contenders dropped mid-pass; rescoring in chunks."""
    monkeypatch.setattr(vector_top, "_BLOCK_ROWS", (64, 256))
    monkeypatch.setattr(vector_top, "_SAMPLE_COLUMNS", 16)
    monkeypatch.setattr(vector_top, "EXACT_CHUNK_ROWS", 7)


class TestBatchContenders:
    @pytest.mark.parametrize("seed", range(6))
    @pytest.mark.parametrize("threads", [False, True], ids=["blas-threads", "scan-threads"])
    @pytest.mark.usefixtures("small_blocks")
    def test_every_top_k_up_to_the_depth_is_the_float64_one(
        self, seed: int, threads: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # the blocks shared among the scan threads (BLAS on one thread) or not
        monkeypatch.setattr(vector_top, "one_blas_thread_on_small_machine", lambda: threads)
        rng = np.random.default_rng(seed)
        vectors = crowded(rng, 3000)
        queries = np.ascontiguousarray(vectors[rng.choice(3000, 9)] + rng.normal(0, 0.01, (9, 24)), dtype=np.float32)
        allowed = rng.random(3000) > 0.3 if seed % 2 else None
        cut = int(rng.integers(1, 2999))
        parts = [(0, vectors[:cut]), (cut, vectors[cut:])]  # two segments
        depth = int(rng.integers(5, 60))
        errors = np.array([error_of(vectors, q) for q in queries])
        found = batch_contenders(parts, queries, depth, errors, allowed)
        assert len(found) == len(queries)
        for query, near, error in zip(queries, found, errors, strict=True):
            assert near.depth == depth and np.all(np.diff(near.rows) > 0)
            if allowed is not None:
                assert allowed[near.rows].all()
            assert near.rows.size < 3000 // 2  # the pass kept few rows, not every one
            for k in (1, depth // 2 + 1, depth):
                rows, scores = exact_top(near.rows, near.values, k, float(error), lambda r: vectors[r], query)
                assert rows.tolist() == reference_top(vectors, query, k, allowed)
                assert np.array_equal(scores, exact_products(vectors[rows], query))

    @pytest.mark.usefixtures("small_blocks")
    def test_a_zero_query_and_rows_that_all_tie(self) -> None:
        rng = np.random.default_rng(4)
        vectors = np.repeat(crowded(rng, 1, copies=1), 700, axis=0)  # one vector 700 times: every product ties
        vectors[::5] = 0.0  # and zero rows
        queries = np.ascontiguousarray(np.vstack([np.zeros(24), vectors[1]]), dtype=np.float32)
        allowed = rng.random(700) > 0.2
        errors = np.array([error_of(vectors, q) for q in queries])
        found = batch_contenders([(0, vectors[:300]), (300, vectors[300:])], queries, 40, errors, allowed)
        for query, near, error in zip(queries, found, errors, strict=True):
            for k in (1, 13, 40):
                rows, _ = exact_top(near.rows, near.values, k, float(error), lambda r: vectors[r], query)
                assert rows.tolist() == reference_top(vectors, query, k, allowed)
        assert found[0].rows.size == 40  # the zero query skipped the pass: its first allowed rows

    def test_fewer_allowed_rows_than_the_depth(self) -> None:
        rng = np.random.default_rng(1)
        vectors = crowded(rng, 500)
        allowed = np.zeros(500, dtype=bool)
        allowed[[3, 77, 400]] = True
        queries = vectors[:2].copy()
        found = batch_contenders([(0, vectors)], queries, 10, np.full(2, 1e-6), allowed)
        assert [near.rows.tolist() for near in found] == [[3, 77, 400], [3, 77, 400]]


class TestContenders:
    def test_rows_outside_are_below_k_rows_whatever_the_rounding(self) -> None:
        rng = np.random.default_rng(2)
        vectors = crowded(rng, 2000, copies=1)
        query = vectors[5] + np.float32(0.001)
        exact = exact_products(vectors, query)
        error = error_of(vectors, query)
        for _ in range(20):  # any kernel's float32 products: within the bound of the exact ones
            values = (exact + rng.uniform(-error / 2, error / 2, exact.size)).astype(np.float32)
            kept = contenders(values, 10, error)
            assert set(reference_top(vectors, query, 10, None)) <= set(kept.tolist())

    def test_rows_the_float32_products_cannot_tell_apart(self) -> None:
        rng = np.random.default_rng(3)
        base = rng.standard_normal(24)
        vectors = (base + rng.normal(0, 1e-7, (400, 24))).astype(np.float32)  # products differ below float32's step
        query = (base / np.linalg.norm(base)).astype(np.float32)
        exact = exact_products(vectors, query)
        error = error_of(vectors, query)
        best = reference_top(vectors, query, 10, None)
        # The worst a kernel may do: the true best rounded down by the bound, every other row rounded up.
        values = exact + error / 2
        values[best] = exact[best] - error / 2
        kept = contenders(values.astype(np.float32), 10, error)
        assert set(best) <= set(kept.tolist())
        rows, _ = exact_top(None, values.astype(np.float32), 10, error, lambda r: vectors[r], query)
        assert rows.tolist() == best

    def test_a_bound_that_is_not_finite_keeps_every_row(self) -> None:
        values = np.arange(50, dtype=np.float32)
        assert contenders(values, 3, float("inf")).size == 50
        assert contenders(values, 0, 1e-6).size == 0

    def test_float32_at_most(self) -> None:
        assert float(float32_at_most(0.1)) <= 0.1 and float(np.nextafter(float32_at_most(0.1), np.float32(1))) > 0.1
        assert float32_at_most(0.5) == np.float32(0.5)


def ties_corpus(n: int) -> list[Document]:
    """Texts drawn from few words: many rows share a text, hence a vector (ties at every pool's edge)."""
    rng = np.random.default_rng(7)
    words = ["cat", "dog", "mat", "market", "stock", "wave", "parrot", "speech", "energy"]
    return [
        Document(
            page_content=" ".join(rng.choice(words, size=int(rng.integers(2, 6)))),
            metadata={"source": f"s{i % 5}"},
            id=f"d{i}",
        )
        for i in range(n)
    ]


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The scorers released so far (each call of ``release``, in order)."""
    calls: list[object] = []
    release = scorers_module._LocalScorer.release

    def counting(self: scorers_module._LocalScorer) -> None:
        calls.append(self)
        release(self)

    monkeypatch.setattr(scorers_module._LocalScorer, "release", counting)
    return calls


QUERIES = ["cat mat", "stock market wave", "parrot speech", "energy", "dog dog cat", "wave parrot mat market"]


class TestBatchEqualsInvoke:
    @pytest.mark.usefixtures("small_blocks")
    @pytest.mark.parametrize("options", [{}, {"fetch_k": 7}, {"alpha": 0.9, "k": 12}, {"filter": {"source": "s2"}}])
    def test_fused(self, options: dict[str, object]) -> None:
        index = FusionIndex.from_documents(ties_corpus(900), HashingEmbeddings())
        index.add_documents([Document(page_content="cat mat", id="late")])  # a second segment
        retriever = FusionRetriever(index=index, **options)  # type: ignore[arg-type]
        expected = [retriever.invoke(q) for q in QUERIES]
        got = retriever.batch(QUERIES)
        assert [[(d.id, d.metadata) for d in docs] for docs in got] == [
            [(d.id, d.metadata) for d in docs] for docs in expected
        ]

    @pytest.mark.usefixtures("small_blocks")
    def test_vector_side(self) -> None:
        index = FusionIndex.from_documents(ties_corpus(700), HashingEmbeddings())
        retriever = VectorRetriever(index=index, k=9)
        expected = [[(d.id, d.metadata) for d in retriever.invoke(q)] for q in QUERIES]
        assert [[(d.id, d.metadata) for d in docs] for docs in retriever.batch(QUERIES)] == expected

    def test_a_zero_query_vector(self) -> None:
        class Zero(HashingEmbeddings):
            def embed_query(self, text: str) -> list[float]:
                return [0.0] * len(super().embed_query(text)) if text == "nothing" else super().embed_query(text)

        index = FusionIndex.from_documents(ties_corpus(300), Zero())
        for retriever in (VectorRetriever(index=index, k=5), FusionRetriever(index=index, alpha=1.0, k=5)):
            alone = retriever.invoke("nothing")
            assert [d.id for d in alone] == [f"d{i}" for i in range(5)]  # every score 0: ties by row
            assert [d.id for d in retriever.batch(["nothing", "cat mat"])[0]] == [d.id for d in alone]

    def test_a_query_given_twice_keeps_its_arrays_until_its_last_run(
        self, released: list[object], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        index = FusionIndex.from_documents(ties_corpus(200), HashingEmbeddings())
        computed: list[object] = []
        compute = scorers_module.LocalBM25Scorer._compute

        def counting_compute(self: scorers_module.LocalBM25Scorer) -> np.ndarray:
            computed.append(self)
            return compute(self)

        monkeypatch.setattr(scorers_module.LocalBM25Scorer, "_compute", counting_compute)
        FusionRetriever(index=index, fetch_k=None).batch(["cat mat", "cat mat", "dog"])
        assert len(released) == 4  # two distinct queries, both sides, each after its last run
        assert len(computed) == 2  # the repeated query's BM25 scores were computed once

    def test_a_deep_batch_takes_fewer_queries_at_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pool_module, "BATCH_SCORES_BUDGET", 1 << 20)  # as a million rows would press it
        index = FusionIndex.from_documents(ties_corpus(3000), HashingEmbeddings())
        retriever = FusionRetriever(index=index)
        default = retriever._batch_step(retriever._batch_options({}))
        assert default * 3 * 4 * 202 <= pool_module.BATCH_SCORES_BUDGET  # depth 2 x (100 + 1)
        deep = retriever._batch_step(retriever._batch_options({"fetch_k": 3000}))  # every row may be a contender
        assert deep < default
        assert deep * 3 * 3000 <= pool_module.BATCH_SCORES_BUDGET

    def test_a_batch_releases_each_querys_arrays(self, released: list[object]) -> None:
        index = FusionIndex.from_documents(ties_corpus(200), HashingEmbeddings())
        FusionRetriever(index=index, fetch_k=None).batch(QUERIES)
        assert len(released) == 2 * len(QUERIES)  # both sides of every query
        assert all(scorer._all is None for scorer in released)  # type: ignore[attr-defined]
