"""The retrievers as LangChain components: options, degenerate inputs, provenance, async."""

from __future__ import annotations

import copy

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import ConfigurableField, RunnableLambda

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError, InvalidParameterError
from tests.helpers.embeddings import HashingEmbeddings

RETRIEVERS = [VectorRetriever, BM25Retriever, FusionRetriever]


class TestFusionRetrieverOptions:
    def test_defaults(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever()
        assert (retriever.k, retriever.alpha, retriever.fetch_k, retriever.method) == (4, 0.5, 100, "weighted")
        assert len(retriever.invoke("cat")) == 4

    def test_per_call_overrides(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever(k=4)
        assert len(retriever.invoke("cat", k=2)) == 2
        assert retriever.invoke("cat", method="rrf")[0].metadata[keys.FUSION_METHOD] == "rrf"
        pure_bm25 = retriever.invoke("cat", alpha=0.0, k=8)
        assert all(d.metadata[keys.BM25_SCORE] > 0 for d in pure_bm25)
        assert retriever.k == 4 and retriever.alpha == 0.5  # overrides do not stick

    def test_configurable_fields(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever(k=4).configurable_fields(
            k=ConfigurableField(id="k"), alpha=ConfigurableField(id="alpha"), method=ConfigurableField(id="method")
        )
        docs = retriever.invoke("cat", config={"configurable": {"k": 2, "alpha": 0.0, "method": "zscore"}})
        assert len(docs) == 2
        assert docs[0].metadata[keys.FUSION_METHOD] == "zscore"
        assert [d.id for d in docs] == [d.id for d in BM25Retriever(index=animal_index, k=2).invoke("cat")]

    @pytest.mark.parametrize(
        "kwargs,message",
        [
            ({"k": 0}, "k must be a positive whole number"),
            ({"k": "3"}, "k must be a positive whole number"),
            ({"alpha": 1.2}, "alpha must be a number between 0 and 1"),
            ({"fetch_k": 0}, "fetch_k must be a positive whole number"),
            ({"method": "sum"}, "method must be one of"),
        ],
    )
    def test_invalid_per_call_values(self, animal_index: FusionIndex, kwargs: dict, message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            animal_index.as_retriever().invoke("cat", **kwargs)

    def test_unknown_per_call_option(self, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="unexpected argument") as raised:
            animal_index.as_retriever().invoke("cat", top_k=3)
        assert isinstance(raised.value, FusionError) and isinstance(raised.value, ValueError)

    @pytest.mark.parametrize(
        "kwargs", [{"k": 0}, {"alpha": -0.5}, {"fetch_k": 0}, {"method": "max"}, {"alpha": True}, {"k": "3"}]
    )
    def test_invalid_construction(self, animal_index: FusionIndex, kwargs: dict) -> None:
        with pytest.raises(ValueError):
            FusionRetriever(index=animal_index, **kwargs)


class TestProvenance:
    def test_fused_results_carry_every_score_key(self, animal_index: FusionIndex) -> None:
        for doc in animal_index.as_retriever(k=8).invoke("cat friends"):
            assert set(keys.SCORE_KEYS) <= set(doc.metadata)
            assert doc.metadata["source"].startswith("doc")  # original metadata kept

    def test_results_are_sorted_by_fused_score(self, animal_index: FusionIndex) -> None:
        scores = [d.metadata[keys.FUSION_SCORE] for d in animal_index.as_retriever(k=8).invoke("cat dog")]
        assert scores == sorted(scores, reverse=True)

    def test_single_side_keys(self, animal_index: FusionIndex) -> None:
        vector = VectorRetriever(index=animal_index).invoke("cat")[0].metadata
        bm25 = BM25Retriever(index=animal_index).invoke("cat")[0].metadata
        assert {keys.VECTOR_SCORE, keys.VECTOR_RANK} <= set(vector) and keys.BM25_SCORE not in vector
        assert {keys.BM25_SCORE, keys.BM25_RANK} <= set(bm25) and keys.VECTOR_SCORE not in bm25
        assert vector[keys.VECTOR_RANK] == 1 and bm25[keys.BM25_RANK] == 1

    def test_unmatched_bm25_has_no_rank(self, animal_index: FusionIndex) -> None:
        docs = animal_index.as_retriever(k=8).invoke("cat")
        unmatched = [d for d in docs if d.metadata[keys.BM25_SCORE] == 0.0]
        assert unmatched and all(d.metadata[keys.BM25_RANK] is None for d in unmatched)

    def test_inputs_and_index_are_never_mutated(
        self, animal_docs: list[Document], embeddings: HashingEmbeddings
    ) -> None:
        before = copy.deepcopy(animal_docs)
        index = FusionIndex.from_documents(animal_docs, embeddings)
        assert animal_docs == before  # ids were assigned on copies
        results = index.as_retriever(k=3).invoke("cat")
        results[0].metadata["source"] = "changed"
        assert all("fusion_score" not in d.metadata for d in index.documents)
        assert index.get_by_ids([results[0].id])[0].metadata["source"] != "changed"  # type: ignore[list-item]


class TestDegenerateInputs:
    @pytest.mark.parametrize("cls", RETRIEVERS)
    def test_empty_corpus(self, cls: type, embeddings: HashingEmbeddings) -> None:
        index = FusionIndex(embeddings)
        assert cls(index=index).invoke("cat") == []

    @pytest.mark.parametrize("cls", RETRIEVERS)
    @pytest.mark.parametrize("query", ["", "   ", "\n"])
    def test_empty_query(self, cls: type, animal_index: FusionIndex, query: str) -> None:
        assert cls(index=animal_index).invoke(query) == []

    def test_query_with_no_known_terms(self, animal_index: FusionIndex) -> None:
        assert BM25Retriever(index=animal_index).invoke("xylophone zebra") == []
        fused = FusionRetriever(index=animal_index, k=3).invoke("xylophone zebra")
        assert len(fused) == 3
        assert all(d.metadata[keys.BM25_SCORE] == 0.0 and d.metadata[keys.BM25_SCORE_NORMALIZED] == 0.0 for d in fused)
        vector = VectorRetriever(index=animal_index, k=3).invoke("xylophone zebra")
        assert [d.id for d in fused] == [d.id for d in vector]

    def test_all_equal_scores(self, embeddings: HashingEmbeddings) -> None:
        docs = [Document(page_content="same text", metadata={"i": i}) for i in range(4)]
        index = FusionIndex.from_documents(docs, embeddings)
        results = FusionRetriever(index=index, k=4, duplicates="keep").invoke("same")
        assert [d.metadata["i"] for d in results] == [0, 1, 2, 3]  # ties broken by row order
        assert all(d.metadata[keys.FUSION_SCORE] == pytest.approx(1.0) for d in results)

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_single_document(self, embeddings: HashingEmbeddings, method: str) -> None:
        index = FusionIndex.from_documents([Document(page_content="only cat here")], embeddings)
        (doc,) = FusionRetriever(index=index, k=5, method=method).invoke("cat")  # type: ignore[arg-type]
        assert doc.page_content == "only cat here"
        assert all(v == v for v in doc.metadata.values() if isinstance(v, float))  # no NaN

    @pytest.mark.parametrize("cls", [VectorRetriever, FusionRetriever])
    def test_k_larger_than_corpus(self, cls: type, animal_index: FusionIndex) -> None:
        assert len(cls(index=animal_index, k=50).invoke("cat")) == len(animal_index)

    def test_k_larger_than_corpus_exact(self, animal_index: FusionIndex) -> None:
        assert len(FusionRetriever(index=animal_index, k=50, fetch_k=None).invoke("cat")) == len(animal_index)


class TestFilter:
    def test_mapping_filter_restricts_before_ranking(self, animal_index: FusionIndex) -> None:
        docs = FusionRetriever(index=animal_index, k=4, fetch_k=1, filter={"group": "odd"}).invoke("cat")
        assert len(docs) == 4  # a post-filter of a 1-candidate pool would starve
        assert {d.metadata["group"] for d in docs} == {"odd"}

    def test_list_value_means_any_of(self, animal_index: FusionIndex) -> None:
        docs = animal_index.as_retriever(k=8).invoke("cat", filter={"source": ["doc1.txt", "doc4.txt"]})
        assert sorted(d.metadata["source"] for d in docs) == ["doc1.txt", "doc4.txt"]

    def test_callable_filter_on_every_retriever(self, animal_index: FusionIndex) -> None:
        def only_doc0(meta: dict) -> bool:
            return meta["source"] == "doc0.txt"

        for cls in RETRIEVERS:
            docs = cls(index=animal_index, k=4).invoke("cat", filter=only_doc0)
            assert [d.metadata["source"] for d in docs] == ["doc0.txt"]

    def test_filter_matching_nothing(self, animal_index: FusionIndex) -> None:
        assert animal_index.as_retriever().invoke("cat", filter={"group": "none"}) == []
        assert animal_index.as_retriever().invoke("cat", filter={"missing_key": 1}) == []

    def test_invalid_filter(self, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="filter must be a mapping"):
            animal_index.as_retriever().invoke("cat", filter=42)


class TestAsyncAndBatch:
    @pytest.mark.parametrize("cls", RETRIEVERS)
    async def test_ainvoke_matches_invoke(self, cls: type, animal_index: FusionIndex) -> None:
        retriever = cls(index=animal_index, k=3)
        assert await retriever.ainvoke("cat friends", k=2) == retriever.invoke("cat friends", k=2)

    async def test_ainvoke_uses_async_embeddings(self, animal_docs: list[Document]) -> None:
        class AsyncOnly(HashingEmbeddings):
            def embed_query(self, text: str) -> list[float]:
                raise AssertionError("the async path must not call the sync embed_query")

            async def aembed_query(self, text: str) -> list[float]:
                return self._embed(text)

        index = FusionIndex.from_documents(animal_docs, AsyncOnly())
        assert len(await index.as_retriever(k=2).ainvoke("cat")) == 2

    def test_batch(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever(k=2)
        assert retriever.batch(["cat", "dog"]) == [retriever.invoke("cat"), retriever.invoke("dog")]

    async def test_abatch(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever(k=2)
        assert await retriever.abatch(["cat", "dog"]) == [retriever.invoke("cat"), retriever.invoke("dog")]


class TestInChains:
    def test_lcel_chain_and_callbacks(self, animal_index: FusionIndex) -> None:
        from langchain_core.callbacks import BaseCallbackHandler

        events: list[str] = []

        class Recorder(BaseCallbackHandler):
            def on_retriever_start(self, serialized, query, **kwargs):  # type: ignore[no-untyped-def]
                events.append(f"start:{query}")

            def on_retriever_end(self, documents, **kwargs):  # type: ignore[no-untyped-def]
                events.append(f"end:{len(documents)}")

        chain = animal_index.as_retriever(k=2) | RunnableLambda(lambda docs: [d.page_content for d in docs])
        result = chain.invoke("cat", config={"callbacks": [Recorder()]})
        assert len(result) == 2
        assert events == ["start:cat", "end:2"]


class TestLangChainHabits:
    """What LangChain users do with retrievers works, or says clearly why not."""

    def test_a_retriever_pickles_and_deep_copies(self) -> None:
        import pickle

        index = FusionIndex.from_documents(
            [Document(id=f"d{i}", page_content=f"w{i} w{i + 1} shared", metadata={"n": i}) for i in range(30)],
            HashingEmbeddings(),
        )
        retriever = index.as_retriever(k=4, alpha=0.3)
        expected = [(d.id, d.metadata[keys.FUSION_SCORE]) for d in retriever.invoke("w3 w4 shared")]
        for again in (pickle.loads(pickle.dumps(retriever)), copy.deepcopy(retriever)):
            assert [(d.id, d.metadata[keys.FUSION_SCORE]) for d in again.invoke("w3 w4 shared")] == expected
            again.index.add_documents([Document(id="new", page_content="w3 w4 shared w3")])  # each copy is its own
            assert again.invoke("w3 w4 shared")[0].id == "new"
        assert [d.id for d in retriever.invoke("w3 w4 shared")] == [i for i, _ in expected]

    def test_a_tenant_keyed_retriever_pickles_and_deep_copies(self) -> None:
        import pickle

        docs = [
            Document(id=f"{t}{i}", page_content=f"w{i} w{i + 1} shared", metadata={"tenant": t})
            for t in ("acme", "globex")
            for i in range(20)
        ]
        index = FusionIndex.from_documents(docs, HashingEmbeddings(), tenant_key="tenant")
        retriever = index.as_retriever(k=4, tenant="acme")
        expected = [(d.id, d.metadata[keys.FUSION_SCORE]) for d in retriever.invoke("w3 w4 shared")]
        assert expected and all(i.startswith("acme") for i, _ in expected)
        for again in (pickle.loads(pickle.dumps(retriever)), copy.deepcopy(retriever)):
            assert [(d.id, d.metadata[keys.FUSION_SCORE]) for d in again.invoke("w3 w4 shared")] == expected
            again.index.add_documents([Document(id="new", page_content="w3 w4 shared w3", metadata={"tenant": "acme"})])
            assert again.invoke("w3 w4 shared")[0].id == "new"  # a new tenant row in the copy alone
            assert "new" not in {d.id for d in again.invoke("w3 w4 shared", tenant="globex")}
        assert [d.id for d in retriever.invoke("w3 w4 shared")] == [i for i, _ in expected]

    def test_search_kwargs_and_keywords_that_disagree_are_refused(self) -> None:
        index = FusionIndex.from_documents([Document(page_content="w1 w2")], HashingEmbeddings())
        with pytest.raises(InvalidParameterError, match=r"k is given twice.*k=3 and search_kwargs=\{'k': 2\}"):
            index.as_retriever(k=3, search_kwargs={"k": 2})
        assert index.as_retriever(k=3, search_kwargs={"k": 3, "alpha": 0.2}).k == 3  # the same value twice is fine
        assert index.as_retriever(search_kwargs={"k": 2}, alpha=0.4).alpha == 0.4
