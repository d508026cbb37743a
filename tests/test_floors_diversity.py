"""Relevance floors, maximal marginal relevance and the per-source cap, on FusionRetriever and the index."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.runnables import ConfigurableField

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.diversity import capped, maximal_marginal_relevance, source_groups
from langchain_fusion.search.floors import FloorOptions
from tests.helpers.embeddings import HashingEmbeddings

WORDS = ["cat", "dog", "fire", "mat", "market", "stock", "quantum", "wave", "parrot", "speech", "energy", "bark"]
QUERIES = ["cat on the mat", "stock market", "quantum wave energy", "parrot speech", "dog bark fire"]


def corpus(n: int = 90, seed: int = 0) -> list[Document]:
    """Random short texts over a small vocabulary, from seven sources; a few without a source."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        metadata: dict[str, Any] = {"chunk_index": i}
        if i % 11:
            metadata["source"] = f"s{i % 7}.txt"
        words = rng.choice(WORDS, size=int(rng.integers(3, 10)))
        docs.append(Document(id=f"d{i}", page_content=" ".join(words), metadata=metadata))
    return docs


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    return FusionIndex.from_documents(corpus(), HashingEmbeddings())


def ids(documents: list[Document]) -> list[str]:
    return [d.id or "" for d in documents]


def clears(doc: Document, vector: float | None, bm25: float | None, alpha: float) -> bool:
    """The documented floor rule, written out for one document."""
    meta = doc.metadata
    checks = []
    if vector is not None and alpha > 0:
        checks.append(meta[keys.VECTOR_SCORE] >= vector)
    if bm25 is not None and alpha < 1:
        checks.append(meta[keys.BM25_SCORE] > 0 and meta[keys.BM25_SCORE] >= bm25)
    return any(checks) if checks else True


FLOORS = [(0.3, None), (None, 2.0), (0.3, 2.5), (0.5, 0.0), (None, 0.0)]


class TestRelevanceFloors:
    @pytest.mark.parametrize(("vector", "bm25"), FLOORS)
    @pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    @pytest.mark.parametrize("fetch_k", [None, 500])
    def test_the_fused_ranking_without_the_candidates_below_the_floor(
        self, index: FusionIndex, vector: float | None, bm25: float | None, alpha: float, method: str, fetch_k: Any
    ) -> None:
        retriever = FusionRetriever(index=index, alpha=alpha, method=method, fetch_k=fetch_k)
        for query in QUERIES:
            everything = retriever.invoke(query, k=len(index))
            expected = [d for d in everything if clears(d, vector, bm25, alpha)][:6]
            got = retriever.invoke(query, k=6, min_vector_score=vector, min_bm25_score=bm25)
            assert ids(got) == ids(expected)
            # The floor changes nothing else: same scores, ranks and provenance.
            assert [d.metadata for d in got] == [d.metadata for d in expected]

    @pytest.mark.parametrize(("vector", "bm25"), FLOORS)
    def test_a_bounded_pool_keeps_the_passing_results_first(
        self, index: FusionIndex, vector: float | None, bm25: float | None
    ) -> None:
        for query in QUERIES:
            plain = index.as_retriever(k=6, fetch_k=8).invoke(query)
            floored = index.as_retriever(k=6, fetch_k=8, min_vector_score=vector, min_bm25_score=bm25).invoke(query)
            assert all(clears(d, vector, bm25, 0.5) for d in floored)
            passing = [d for d in plain if clears(d, vector, bm25, 0.5)]
            assert floored[: len(passing)] == passing
            scores = [d.metadata[keys.FUSION_SCORE] for d in floored]
            assert scores == sorted(scores, reverse=True)

    def test_nothing_relevant_returns_nothing(self, index: FusionIndex) -> None:
        retriever = index.as_retriever(k=5, min_vector_score=0.99, min_bm25_score=50.0)
        for query in [*QUERIES, "zebra giraffe"]:
            assert retriever.invoke(query) == []
        assert retriever.batch(QUERIES) == [[] for _ in QUERIES]
        assert index.as_retriever(min_bm25_score=0.0, alpha=0.5).invoke("zebra giraffe") == []  # no query term
        diverse = index.as_retriever(min_vector_score=1.0, lambda_mult=0.5, max_per_source=1, fetch_k=None)
        assert diverse.invoke("cat") == [] and diverse.invoke("cat", lambda_mult=None) == []

    def test_one_strong_side_is_enough(self, index: FusionIndex) -> None:
        query = "parrot speech"
        everything = index.as_retriever(k=len(index)).invoke(query)
        strong_bm25 = max(everything, key=lambda d: d.metadata[keys.BM25_SCORE])
        weak_vector = strong_bm25.metadata[keys.VECTOR_SCORE] + 0.01
        kept = index.as_retriever(k=len(index), min_vector_score=weak_vector, min_bm25_score=1.0).invoke(query)
        assert strong_bm25.id in ids(kept)  # below the vector floor, kept by the BM25 floor
        only_vector = index.as_retriever(k=len(index), min_vector_score=weak_vector).invoke(query)
        assert strong_bm25.id not in ids(only_vector)

    def test_zero_bm25_floor_means_contains_a_query_term(self, index: FusionIndex) -> None:
        for query in QUERIES:
            found = index.as_retriever(k=len(index), min_bm25_score=0.0, duplicates="keep").invoke(query)
            assert found and all(d.metadata[keys.BM25_SCORE] > 0 for d in found)
            assert len(found) == len(BM25Retriever(index=index, k=len(index)).invoke(query))

    def test_alpha_one_is_the_vector_side_with_its_floor(self, index: FusionIndex) -> None:
        for query in QUERIES:
            expected = [d for d in VectorRetriever(index=index, k=len(index)).invoke(query)]
            expected = [d for d in expected if d.metadata[keys.VECTOR_SCORE] >= 0.4][:5]
            got = index.as_retriever(alpha=1.0, k=5, min_vector_score=0.4, min_bm25_score=1e6).invoke(query)
            assert ids(got) == ids(expected)  # the BM25 floor does not apply: BM25 has no weight

    def test_alpha_zero_is_the_bm25_side_with_its_floor(self, index: FusionIndex) -> None:
        for query in QUERIES:
            expected = [d for d in BM25Retriever(index=index, k=len(index)).invoke(query)]
            expected = [d for d in expected if d.metadata[keys.BM25_SCORE] >= 2.0][:5]
            got = index.as_retriever(alpha=0.0, k=5, min_bm25_score=2.0, min_vector_score=1.0).invoke(query)
            assert ids(got) == ids(expected)  # the vector floor does not apply

    def test_a_floor_on_the_side_without_weight_only_is_no_floor(self, index: FusionIndex) -> None:
        plain = index.as_retriever(alpha=1.0, k=5).invoke("cat")
        assert index.as_retriever(alpha=1.0, k=5, min_bm25_score=1e6).invoke("cat") == plain

    def test_fields_per_call_and_configurable(self, index: FusionIndex) -> None:
        retriever = index.as_retriever(k=5, min_vector_score=0.99)
        assert retriever.min_vector_score == 0.99 and retriever.min_bm25_score is None
        assert retriever.invoke("cat") == []
        assert len(retriever.invoke("cat", min_vector_score=None)) == 5  # per call, and off again
        assert retriever.min_vector_score == 0.99  # overrides do not stick
        configurable = retriever.configurable_fields(min_vector_score=ConfigurableField(id="floor"))
        assert len(configurable.invoke("cat", config={"configurable": {"floor": -1.0}})) == 5

    def test_floors_rule_directly(self) -> None:
        vector, bm25 = np.array([0.9, 0.1, 0.1, 0.5]), np.array([0.0, 3.0, 0.0, 1.0])
        both = FloorOptions(min_vector_score=0.5, min_bm25_score=2.0)
        assert FloorOptions().passing(vector, bm25, 0.5) is None
        assert FloorOptions(min_vector_score=0.5).passing(vector, bm25, 0.5).tolist() == [True, False, False, True]
        assert both.passing(vector, bm25, 0.5).tolist() == [True, True, False, True]
        assert FloorOptions(min_bm25_score=0.0).passing(vector, bm25, 0.5).tolist() == [False, True, False, True]
        assert both.passing(vector, bm25, 1.0).tolist() == [True, False, False, True]
        assert both.passing(vector, bm25, 0.0).tolist() == [False, True, False, False]
        assert FloorOptions(min_bm25_score=2.0).passing(vector, bm25, 1.0) is None


class TestMaximalMarginalRelevance:
    def test_lambda_one_is_the_fused_order(self, index: FusionIndex) -> None:
        for method in ("weighted", "zscore", "rrf"):
            for query in QUERIES:
                plain = index.as_retriever(k=8, method=method).invoke(query)
                assert index.as_retriever(k=8, method=method, lambda_mult=1.0).invoke(query) == plain

    @pytest.mark.parametrize("lambda_mult", [0.0, 0.3, 0.5, 0.8])
    @pytest.mark.parametrize("method", ["weighted", "rrf"])
    def test_equals_a_reference_mmr_over_the_best_fetch_k(
        self, index: FusionIndex, lambda_mult: float, method: str
    ) -> None:
        embeddings = HashingEmbeddings()
        for query in QUERIES:
            candidates = index.as_retriever(k=20, fetch_k=20, method=method).invoke(query)
            fused = np.array([d.metadata[keys.FUSION_SCORE] for d in candidates])
            relevance = (fused - fused.min()) / (fused.max() - fused.min())
            vectors = np.array(embeddings.embed_documents([d.page_content for d in candidates]))
            picked = [0]
            while len(picked) < 5:
                best, best_score = -1, -np.inf
                for i in range(len(candidates)):
                    if i in picked:
                        continue
                    similarity = max(float(vectors[i] @ vectors[j]) for j in picked)
                    score = lambda_mult * relevance[i] - (1 - lambda_mult) * similarity
                    if score > best_score + 1e-9:
                        best, best_score = i, score
                picked.append(best)
            got = index.as_retriever(k=5, fetch_k=20, method=method, lambda_mult=lambda_mult).invoke(query)
            assert ids(got) == [candidates[i].id for i in picked]
            by_id = {d.id: d.metadata for d in candidates}
            assert all(d.metadata == by_id[d.id] for d in got)  # the fused provenance, unchanged

    def test_near_copies_give_way(self, embeddings: HashingEmbeddings) -> None:
        docs = [Document(id=f"copy{i}", page_content="solar panel output today") for i in range(5)]
        docs += [Document(id="battery", page_content="solar battery storage"), Document(id="x", page_content="wind")]
        index = FusionIndex.from_documents(docs, embeddings)
        plain = ids(index.as_retriever(k=2, duplicates="keep").invoke("solar panel output"))
        diverse = ids(index.as_retriever(search_type="mmr", k=2, duplicates="keep").invoke("solar panel output"))
        assert plain[0].startswith("copy") and plain[1].startswith("copy")
        assert diverse[0].startswith("copy") and diverse[1] == "battery"

    def test_picks_only_among_the_best_fetch_k(self, index: FusionIndex) -> None:
        for query in QUERIES:
            best = set(ids(index.as_retriever(k=6, fetch_k=6).invoke(query)))
            assert set(ids(index.as_retriever(k=6, fetch_k=6, lambda_mult=0.0).invoke(query))) == best

    def test_search_type_mmr(self, index: FusionIndex) -> None:
        retriever = index.as_retriever(search_type="mmr", search_kwargs={"k": 5, "fetch_k": 50, "lambda_mult": 0.25})
        assert isinstance(retriever, FusionRetriever)
        assert (retriever.k, retriever.fetch_k, retriever.lambda_mult) == (5, 50, 0.25)
        assert index.as_retriever(search_type="mmr").lambda_mult == 0.5
        expected = index.as_retriever(k=5, fetch_k=50, lambda_mult=0.25).invoke("cat")
        assert retriever.invoke("cat") == expected

    def test_whole_corpus_and_floor(self, index: FusionIndex) -> None:
        for query in QUERIES:
            found = index.as_retriever(k=5, fetch_k=None, lambda_mult=0.5, min_bm25_score=1.0).invoke(query)
            assert 0 < len(found) <= 5 and all(d.metadata[keys.BM25_SCORE] >= 1.0 for d in found)
            assert len(set(ids(found))) == len(found)

    def test_the_vector_store_method_is_the_vector_side_of_it(self, index: FusionIndex) -> None:
        for query in QUERIES:
            for lambda_mult in (0.0, 0.5, 1.0):
                expected = index.as_retriever(
                    search_type="mmr", alpha=1.0, k=4, fetch_k=15, lambda_mult=lambda_mult
                ).invoke(query)
                got = index.max_marginal_relevance_search(query, k=4, fetch_k=15, lambda_mult=lambda_mult)
                assert ids(got) == ids(expected)
                assert all(keys.FUSION_SCORE not in d.metadata for d in got)

    def test_the_vector_store_method_filters(self, index: FusionIndex) -> None:
        found = index.max_marginal_relevance_search("cat", k=4, fetch_k=10, filter={"source": "s2.txt"})
        assert found and all(d.metadata["source"] == "s2.txt" for d in found)

    def test_direct(self) -> None:
        vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
        relevance = np.array([0.9, 0.8, 0.1])
        assert maximal_marginal_relevance(relevance, vectors, 2, 1.0).tolist() == [0, 1]
        assert maximal_marginal_relevance(relevance, vectors, 2, 0.5).tolist() == [0, 2]
        assert maximal_marginal_relevance(relevance, vectors, 5, 0.5).tolist() == [0, 2, 1]
        assert maximal_marginal_relevance(relevance[:0], vectors[:0], 3, 0.5).tolist() == []
        groups = np.array([0, 1, 0])
        assert maximal_marginal_relevance(relevance, vectors, 3, 1.0, groups, 1).tolist() == [0, 1]


class TestMaxPerSource:
    @pytest.mark.parametrize("cap", [1, 2])
    @pytest.mark.parametrize("fetch_k", [None, 500])
    def test_the_fused_ranking_capped_per_source(self, index: FusionIndex, cap: int, fetch_k: Any) -> None:
        for query in QUERIES:
            everything = index.as_retriever(k=len(index), fetch_k=fetch_k).invoke(query)
            counts: dict[str, int] = {}
            expected = []
            for doc in everything:
                source = doc.metadata.get("source")
                if source is not None:
                    if counts.get(source, 0) == cap:
                        continue
                    counts[source] = counts.get(source, 0) + 1
                expected.append(doc)
            got = index.as_retriever(k=10, fetch_k=fetch_k, max_per_source=cap).invoke(query)
            assert got == expected[:10]

    def test_one_per_source_gives_distinct_sources(self, index: FusionIndex) -> None:
        for query in QUERIES:
            found = index.as_retriever(k=5, max_per_source=1, filter={"source": [f"s{i}.txt" for i in range(7)]})
            sources = [d.metadata["source"] for d in found.invoke(query)]
            assert len(sources) == 5 and len(set(sources)) == 5

    def test_fewer_sources_than_k_give_fewer_results(self, index: FusionIndex) -> None:
        only = {"source": ["s1.txt", "s2.txt"]}
        found = index.as_retriever(k=5, max_per_source=1, filter=only, fetch_k=None).invoke("cat")
        assert sorted(d.metadata["source"] for d in found) == ["s1.txt", "s2.txt"]

    def test_documents_without_a_source_are_not_capped(self, embeddings: HashingEmbeddings) -> None:
        docs = [Document(id=f"n{i}", page_content=f"cat number {i}") for i in range(4)]
        docs.append(Document(id="s", page_content="cat", metadata={"source": "a"}))
        docs.append(Document(id="t", page_content="cat mat", metadata={"source": "a"}))
        found = FusionIndex.from_documents(docs, embeddings).as_retriever(k=6, max_per_source=1).invoke("cat")
        assert len(found) == 5 and sum(d.metadata.get("source") == "a" for d in found) == 1

    def test_with_mmr(self, index: FusionIndex) -> None:
        for query in QUERIES:
            found = index.as_retriever(k=4, fetch_k=40, lambda_mult=0.5, max_per_source=1).invoke(query)
            sources = [d.metadata.get("source") for d in found]
            named = [s for s in sources if s is not None]
            assert len(found) == 4 and len(named) == len(set(named))

    def test_deep_fill(self, embeddings: HashingEmbeddings) -> None:
        """The cap reads the fused ranking deeper until k results fit (here the 40th candidate is needed)."""
        docs = [Document(id=f"a{i}", page_content="cat cat mat", metadata={"source": "a"}) for i in range(39)]
        docs.append(Document(id="b", page_content="dog", metadata={"source": "b"}))
        found = FusionIndex.from_documents(docs, embeddings).as_retriever(k=2, max_per_source=1, fetch_k=None)
        assert [d.metadata["source"] for d in found.invoke("cat mat")] == ["a", "b"]

    def test_helpers(self) -> None:
        docs = [
            Document(page_content="x", metadata=m) for m in ({"source": "a"}, {}, {"source": "a"}, {"source": ["l"]})
        ]
        groups = source_groups(docs)
        assert groups.tolist() == [0, -1, 0, 1]
        assert capped(groups, 3, 1).tolist() == [0, 1, 3]
        assert capped(groups, 2, 2).tolist() == [0, 1]


BAD = [
    ({"min_vector_score": 1.5}, "min_vector_score must be a cosine similarity between -1 and 1"),
    ({"min_vector_score": True}, "min_vector_score must be"),
    ({"min_vector_score": float("nan")}, "min_vector_score must be"),
    ({"min_vector_score": "0.3"}, "min_vector_score must be"),
    ({"min_bm25_score": -1}, "min_bm25_score must be a BM25 score of 0 or more"),
    ({"min_bm25_score": False}, "min_bm25_score must be"),
    ({"min_bm25_score": float("inf")}, "min_bm25_score must be"),
    ({"lambda_mult": 1.1}, "lambda_mult must be a number between 0"),
    ({"lambda_mult": True}, "lambda_mult must be"),
    ({"max_per_source": 0}, "max_per_source must be a positive whole number"),
    ({"max_per_source": True}, "max_per_source must be"),
    ({"max_per_source": 1.0}, "max_per_source must be"),
]


class TestInvalidValues:
    @pytest.mark.parametrize(("kwargs", "message"), BAD)
    def test_construction_per_call_and_as_retriever(self, index: FusionIndex, kwargs: dict, message: str) -> None:
        attempts = [
            lambda: FusionRetriever(index=index, **kwargs),
            lambda: index.as_retriever(**kwargs),
            lambda: index.as_retriever(search_kwargs=kwargs),
            lambda: index.as_retriever().invoke("cat", **kwargs),
            lambda: index.as_retriever().batch(["cat", "dog"], **kwargs),
        ]
        for attempt in attempts:
            with pytest.raises(InvalidParameterError, match=message) as raised:
                attempt()
            assert "\n" not in str(raised.value)

    @pytest.mark.parametrize("lambda_mult", [None, 2, True, "0.5"])
    def test_vector_store_mmr(self, index: FusionIndex, lambda_mult: Any) -> None:
        with pytest.raises(InvalidParameterError, match="lambda_mult must be a number between 0") as raised:
            index.max_marginal_relevance_search("cat", lambda_mult=lambda_mult)
        assert "\n" not in str(raised.value)

    def test_only_the_fused_retriever_has_them(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="unexpected argument"):
            VectorRetriever(index=index).invoke("cat", min_vector_score=0.3)
