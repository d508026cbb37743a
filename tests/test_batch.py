"""batch/abatch are real batches (one embedding call, one scoring pass) and equal invoke query by query."""

from __future__ import annotations

import contextvars
import math
import threading
from typing import Any

import numpy as np
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion.errors import ProviderError
from langchain_fusion.retrievers import fusion as fusion_module
from langchain_fusion.stores.local import mutations as mutations_module
from langchain_fusion.stores.local import pruning as pruning_module
from langchain_fusion.stores.local import snapshot as snapshot_module
from langchain_fusion.stores.local import view as view_module
from tests.helpers.embeddings import HashingEmbeddings

WORDS = ["cat", "dog", "fire", "mat", "market", "stock", "quantum", "wave", "parrot", "speech"]
WORDS += ["sunlight", "energy", "bark", "friend", "purr"]


def corpus(n: int = 120, seed: int = 0) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [
        Document(
            page_content=" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))),
            metadata={"source": f"s{i % 7}", "chunk_index": i},
            id=f"d{i}",
        )
        for i in range(n)
    ]


QUERIES = ["cat on the mat", "stock market", "quantum wave energy", "parrot speech", "cat on the mat", "zebra", "  "]


class QueryBatchingEmbeddings(HashingEmbeddings):
    """Counts calls; embeds queries in batches like the bundled model."""

    def __init__(self) -> None:
        super().__init__()
        self.query_calls = 0
        self.batch_calls = 0

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return super().embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.batch_calls += 1
        return [self._embed(text) for text in texts]


class CountingEmbeddings(HashingEmbeddings):
    """Counts calls; no batch method for queries (like most providers)."""

    def __init__(self) -> None:
        super().__init__()
        self.query_calls = 0
        self.document_calls = 0

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return super().embed_query(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return super().embed_documents(texts)


class Result:
    """A result list compared as batch == invoke promises: same documents, same order, same metadata,
    scores equal to float32 rounding (a matrix product for many queries sums in another order than a
    scan for one)."""

    def __init__(self, documents: list[Document]) -> None:
        self.rows = [(d.id, d.page_content, sorted(d.metadata.items())) for d in documents]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result) or len(self.rows) != len(other.rows):
            return False
        for (id_a, text_a, meta_a), (id_b, text_b, meta_b) in zip(self.rows, other.rows, strict=True):
            if (id_a, text_a) != (id_b, text_b) or [k for k, _ in meta_a] != [k for k, _ in meta_b]:
                return False
            for (_, a), (_, b) in zip(meta_a, meta_b, strict=True):
                if isinstance(a, float) and isinstance(b, float):
                    if not math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6):
                        return False
                elif a != b:
                    return False
        return True

    def __repr__(self) -> str:
        return repr(self.rows)


def summary(documents: list[Document]) -> Result:
    return Result(documents)


def prune_and_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every BM25 top-k of a query alone prune (small corpora otherwise score every row); count the prunings."""
    monkeypatch.setattr(snapshot_module, "PRUNED_TOP_MIN_POSTINGS", 0)
    monkeypatch.setattr(pruning_module, "SEED_MAX_SHARE", 100.0)
    pruned: list[int] = []
    original = snapshot_module.pruned_top

    def counting_top(*args: Any) -> Any:
        pruned.append(1)
        return original(*args)

    monkeypatch.setattr(snapshot_module, "pruned_top", counting_top)
    return pruned


@pytest.fixture
def index() -> FusionIndex:
    index = FusionIndex.from_documents(corpus(), QueryBatchingEmbeddings())
    index.delete([f"d{i}" for i in range(0, 120, 9)])  # tombstones in the key space
    return index


OPTIONS = [
    {},
    {"k": 7},
    {"alpha": 0.3, "method": "zscore"},
    {"alpha": 0.8, "method": "rrf", "fetch_k": 5},
    {"fetch_k": None, "k": 10},
    {"alpha": 0.0},
    {"alpha": 1.0},
    {"filter": {"source": ["s1", "s3"]}, "k": 6},
    {"min_vector_score": 0.3, "min_bm25_score": 1.5},
    {"alpha": 1.0, "min_vector_score": 0.4, "k": 8},
    {"lambda_mult": 0.5, "fetch_k": 30, "k": 6},
    {"max_per_source": 1, "k": 6},
    {"fetch_k": None, "min_bm25_score": 1.0, "lambda_mult": 0.3, "max_per_source": 2, "k": 8},
]


class TestEqualsInvoke:
    @pytest.mark.parametrize("options", OPTIONS)
    def test_fusion(self, index: FusionIndex, options: dict[str, Any]) -> None:
        retriever = FusionRetriever(index=index)
        expected = [summary(retriever.invoke(q, **options)) for q in QUERIES]
        assert [summary(r) for r in retriever.batch(QUERIES, **options)] == expected

    @pytest.mark.parametrize("options", OPTIONS)
    async def test_fusion_async(self, index: FusionIndex, options: dict[str, Any]) -> None:
        retriever = FusionRetriever(index=index)
        expected = [summary(retriever.invoke(q, **options)) for q in QUERIES]
        assert [summary(r) for r in await retriever.abatch(QUERIES, **options)] == expected

    @pytest.mark.parametrize("cls", [VectorRetriever, BM25Retriever])
    @pytest.mark.parametrize("options", [{}, {"k": 9}, {"filter": {"source": "s2"}}])
    async def test_single_sides(self, index: FusionIndex, cls: type, options: dict[str, Any]) -> None:
        retriever = cls(index=index)
        expected = [summary(retriever.invoke(q, **options)) for q in QUERIES]
        assert [summary(r) for r in retriever.batch(QUERIES, **options)] == expected
        assert [summary(r) for r in await retriever.abatch(QUERIES, **options)] == expected

    def test_approximate_index(self) -> None:
        index = FusionIndex.from_documents(corpus(5000, seed=3), HashingEmbeddings(), vector_index="HNSW16")
        retriever = FusionRetriever(index=index, k=5)
        expected = [summary(retriever.invoke(q)) for q in QUERIES]
        assert [summary(r) for r in retriever.batch(QUERIES)] == expected

    @pytest.mark.parametrize("batch_prunes", [False, True], ids=["every-row", "pruned"])
    @pytest.mark.parametrize("options", [{}, {"k": 9, "fetch_k": 12}, {"filter": {"source": ["s1", "s4"]}}])
    def test_bm25_every_row_in_a_batch_equals_pruning_alone(
        self, index: FusionIndex, batch_prunes: bool, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Alone, each query's BM25 top-k prunes; a batch on a small index scores every row with shared weights.
        more = corpus(40, seed=5)  # a second segment
        index.add_documents([Document(page_content=d.page_content, id=f"e{i}") for i, d in enumerate(more)])
        pruned = prune_and_count(monkeypatch)
        if batch_prunes:
            monkeypatch.setattr(snapshot_module, "BATCH_EVERY_ROW_MAX_ROWS", 0)
            monkeypatch.setattr(snapshot_module, "BATCH_EVERY_ROW_POSTINGS_SHARE", 10**9)
        retriever = FusionRetriever(index=index, alpha=0.4)
        bm25_only = BM25Retriever(index=index)
        expected = [summary(retriever.invoke(q, **options)) for q in QUERIES]
        bm25_options = {name: value for name, value in options.items() if name != "fetch_k"}
        expected_bm25 = [summary(bm25_only.invoke(q, **bm25_options)) for q in QUERIES]
        assert pruned  # the queries alone did prune
        pruned.clear()
        assert [summary(r) for r in retriever.batch(QUERIES, **options)] == expected
        assert [summary(r) for r in bm25_only.batch(QUERIES, **bm25_options)] == expected_bm25
        assert bool(pruned) == batch_prunes

    def test_one_distinct_query_prunes_as_alone(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        pruned = prune_and_count(monkeypatch)
        retriever = BM25Retriever(index=index)
        expected = summary(retriever.invoke("cat on the mat"))
        pruned.clear()
        assert [summary(r) for r in retriever.batch(["cat on the mat"] * 3)] == [expected] * 3
        assert pruned  # nothing to share: no query scores every row

    def test_sliced_batches(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(fusion_module, "BATCH_QUERIES", 2)  # two queries per slice
        retriever = FusionRetriever(index=index, k=3)
        expected = [summary(retriever.invoke(q)) for q in QUERIES]
        assert [summary(r) for r in retriever.batch(QUERIES)] == expected


class TestOnePass:
    def test_one_embedding_call_and_one_scan(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        embeddings = index.embeddings
        assert isinstance(embeddings, QueryBatchingEmbeddings)
        scans: list[int] = []
        batched = snapshot_module.Snapshot.vector_contenders_many

        def spy(self: Any, queries: np.ndarray, depth: int, where: Any) -> Any:
            scans.append(queries.shape[0])
            return batched(self, queries, depth, where)

        monkeypatch.setattr(snapshot_module.Snapshot, "vector_contenders_many", spy)
        monkeypatch.setattr(snapshot_module.Snapshot, "vector_scores_all", lambda *a: pytest.fail("scanned per query"))
        FusionRetriever(index=index).batch(QUERIES)
        assert embeddings.batch_calls == 1 and embeddings.query_calls == 0
        assert scans == [5]  # the five distinct searchable queries, in one product

    def test_models_without_batches_get_one_query_call_each(self) -> None:
        embeddings = CountingEmbeddings()
        index = FusionIndex.from_documents(corpus(), embeddings)
        calls = embeddings.document_calls
        FusionRetriever(index=index).batch(QUERIES, config={"max_concurrency": 2})
        assert embeddings.query_calls == 5  # never through embed_documents (query instructions differ)
        assert embeddings.document_calls == calls


class Runs(BaseCallbackHandler):
    def __init__(self) -> None:
        self.started: list[str] = []
        self.threads: list[int] = []
        self.ended = 0
        self.errors = 0

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.started.append(query)
        self.threads.append(threading.get_ident())

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ended += 1

    def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors += 1


class TestRunsAndErrors:
    def test_each_query_is_its_own_run(self, index: FusionIndex) -> None:
        runs = Runs()
        FusionRetriever(index=index).batch(QUERIES, config={"callbacks": [runs]})
        assert sorted(runs.started) == sorted(QUERIES) and runs.ended == len(QUERIES)

    def test_a_bad_input_fails_alone(self, index: FusionIndex) -> None:
        runs = Runs()
        out = FusionRetriever(index=index).batch(
            ["cat", 5, "market"], config={"callbacks": [runs]}, return_exceptions=True
        )
        assert isinstance(out[1], ValueError) and "must be a string" in str(out[1])
        assert out[0] and out[2] and runs.errors == 1

    def test_a_bad_input_is_raised_without_return_exceptions(self, index: FusionIndex) -> None:
        with pytest.raises(ValueError, match="must be a string"):
            FusionRetriever(index=index).batch(["cat", 5, "market"])

    def test_scored_queries_run_in_the_calling_thread(self, index: FusionIndex) -> None:
        runs = Runs()
        FusionRetriever(index=index).batch(QUERIES, config={"callbacks": [runs]})
        assert runs.threads == [threading.get_ident()] * len(QUERIES)

    def test_a_graph_searched_index_keeps_the_pool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each query's graph search releases the GIL: LangChain's pool overlaps them."""
        monkeypatch.setattr(mutations_module, "ANN_MIN_ROWS", 1)
        index = FusionIndex.from_documents(corpus(), HashingEmbeddings(), vector_index="HNSW16")
        monkeypatch.setattr(view_module, "PARALLEL_SIDES_MIN_ROWS", 1)
        monkeypatch.setattr(view_module, "_MANY_CORES", True)
        runs = Runs()
        FusionRetriever(index=index).batch(QUERIES, config={"callbacks": [runs]})
        assert len(runs.threads) == len(QUERIES) and threading.get_ident() not in runs.threads

    def test_each_query_runs_in_its_own_copy_of_the_context(self, index: FusionIndex) -> None:
        seen: list[int] = []
        counter: contextvars.ContextVar[int] = contextvars.ContextVar("counter", default=0)

        class Counting(BaseCallbackHandler):
            def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
                seen.append(counter.get())
                counter.set(counter.get() + 1)

        FusionRetriever(index=index).batch(QUERIES, config={"callbacks": [Counting()]})
        assert seen == [0] * len(QUERIES) and counter.get() == 0  # as in a pool's threads: nothing carries over

    def test_bad_options_fail_every_input(self, index: FusionIndex) -> None:
        out = FusionRetriever(index=index).batch(["cat", "dog"], return_exceptions=True, alpha=True)
        assert all(isinstance(e, ValueError) and "alpha" in str(e) for e in out)

    async def test_provider_failure_is_reported_per_query(self) -> None:
        class Failing(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return [[1.0, 0.0] for _ in texts]

            def embed_query(self, text: str) -> list[float]:
                raise ConnectionError("no network")

        index = FusionIndex.from_documents(corpus(10), Failing())
        retriever = FusionRetriever(index=index)
        for out in (
            retriever.batch(["a", "b"], return_exceptions=True),
            await retriever.abatch(["a", "b"], return_exceptions=True),
        ):
            assert [type(e) for e in out] == [ProviderError, ProviderError]
            assert "no network" in str(out[0])
        with pytest.raises(ProviderError):
            retriever.batch(["a", "b"])

    def test_writes_during_a_batch_are_not_mixed_in(self, index: FusionIndex) -> None:
        retriever = FusionRetriever(index=index, k=3)
        before = [summary(retriever.invoke(q)) for q in QUERIES]
        real = fusion_module._IndexRetriever._score_many

        def score_then_write(self: Any, *args: Any) -> Any:
            prepared = real(self, *args)
            index.delete([d.id for d in index.documents])  # after scoring, before ranking
            return prepared

        fusion_module._IndexRetriever._score_many = score_then_write  # type: ignore[method-assign]
        try:
            assert [summary(r) for r in retriever.batch(QUERIES)] == before
        finally:
            fusion_module._IndexRetriever._score_many = real  # type: ignore[method-assign]
