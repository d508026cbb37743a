"""FusionIndex as a LangChain VectorStore: the standard suite, the indexing API, retriever options."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, aindex, index
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_fusion import FusionIndex, FusionRetriever, InvalidParameterError
from langchain_fusion import metadata as keys
from tests.helpers.embeddings import HashingEmbeddings


class TestStandardVectorStore(VectorStoreIntegrationTests):
    """LangChain's own vector-store tests, sync and async."""

    @pytest.fixture
    def vectorstore(self) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        yield FusionIndex(self.get_embeddings())


def _docs(*texts: str, source: str = "a.txt") -> list[Document]:
    return [Document(page_content=t, metadata={"source": source}) for t in texts]


class TestIndexingAPI:
    """langchain_core.indexing.index keeps a FusionIndex in sync with a document source."""

    @pytest.fixture
    def target(self) -> FusionIndex:
        return FusionIndex(HashingEmbeddings())

    @pytest.fixture
    def records(self) -> InMemoryRecordManager:
        manager = InMemoryRecordManager(namespace="fusion-test")
        manager.create_schema()
        return manager

    def test_a_rerun_adds_nothing(self, target: FusionIndex, records: InMemoryRecordManager) -> None:
        docs = _docs("cats purr", "dogs bark", "birds sing")
        first = index(docs, records, target, cleanup="incremental", source_id_key="source", key_encoder="sha256")
        assert first["num_added"] == 3 and len(target) == 3
        again = index(docs, records, target, cleanup="incremental", source_id_key="source", key_encoder="sha256")
        assert again == {"num_added": 0, "num_updated": 0, "num_skipped": 3, "num_deleted": 0}
        assert len(target) == 3

    def test_a_changed_document_replaces_its_old_chunks(
        self, target: FusionIndex, records: InMemoryRecordManager
    ) -> None:
        index(
            _docs("cats purr", "dogs bark"),
            records,
            target,
            cleanup="incremental",
            source_id_key="source",
            key_encoder="sha256",
        )
        result = index(
            _docs("cats purr", "wolves howl"),
            records,
            target,
            cleanup="incremental",
            source_id_key="source",
            key_encoder="sha256",
        )
        assert (result["num_added"], result["num_deleted"], result["num_skipped"]) == (1, 1, 1)
        texts = sorted(d.page_content for d in target.documents)
        assert texts == ["cats purr", "wolves howl"]
        assert [d.page_content for d in target.as_retriever(k=1, alpha=0.0).invoke("wolves")] == ["wolves howl"]
        assert target.as_retriever(alpha=0.0).invoke("bark") == []

    def test_full_cleanup_deletes_what_disappeared(self, target: FusionIndex, records: InMemoryRecordManager) -> None:
        index(
            _docs("cats purr") + _docs("dogs bark", source="b.txt"),
            records,
            target,
            cleanup="full",
            key_encoder="sha256",
        )
        result = index(_docs("cats purr"), records, target, cleanup="full", key_encoder="sha256")
        assert result["num_deleted"] == 1
        assert [d.page_content for d in target.documents] == ["cats purr"]

    async def test_async(self, target: FusionIndex, records: InMemoryRecordManager) -> None:
        docs = _docs("cats purr", "dogs bark")
        first = await aindex(docs, records, target, cleanup="incremental", source_id_key="source", key_encoder="sha256")
        assert first["num_added"] == 2
        again = await aindex(docs, records, target, cleanup="incremental", source_id_key="source", key_encoder="sha256")
        assert again["num_skipped"] == 2 and len(target) == 2


class TestAsRetriever:
    @pytest.fixture
    def fusion(self, animal_index: FusionIndex) -> FusionIndex:
        return animal_index

    def test_search_kwargs_are_honoured(self, fusion: FusionIndex) -> None:
        retriever = fusion.as_retriever(search_kwargs={"k": 2, "alpha": 0.3})
        assert isinstance(retriever, FusionRetriever)
        assert (retriever.k, retriever.alpha) == (2, 0.3)
        assert len(retriever.invoke("cat")) == 2

    def test_similarity_is_the_vector_side(self, fusion: FusionIndex) -> None:
        retriever = fusion.as_retriever(search_type="similarity", search_kwargs={"k": 3})
        assert retriever.alpha == 1.0
        expected = [d.id for d in fusion.similarity_search("cat", k=3)]
        assert [d.id for d in retriever.invoke("cat")] == expected

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"search_kwargs": {"top_k": 2}}, r"unknown retriever option\(s\) \['top_k'\]; the options are \['alpha'"),
            ({"kk": 2}, r"unknown retriever option"),
            ({"search_type": "diverse"}, r"search_type must be one of \['fusion', 'similarity', 'mmr'\]"),
            ({"search_type": "mmr", "lambda_mult": None}, r"search_type='mmr' needs a lambda_mult"),
            ({"search_type": "similarity", "alpha": 0.5}, r"alpha=1"),
        ],
    )
    def test_unknown_options_are_errors(self, fusion: FusionIndex, options: dict, message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            fusion.as_retriever(**options)


class TestVectorSearches:
    def test_similarity_scores_and_relevance(self, animal_index: FusionIndex, embeddings: HashingEmbeddings) -> None:
        pairs = animal_index.similarity_search_with_score("cat", k=8)
        scores = [s for _, s in pairs]
        assert scores == sorted(scores, reverse=True)
        q = np.array(embeddings.embed_query("cat"))
        for doc, score in pairs:
            v = np.array(embeddings.embed_query(doc.page_content))
            assert score == pytest.approx(float(v @ q / np.linalg.norm(v) / np.linalg.norm(q)), abs=1e-5)
            assert keys.FUSION_SCORE not in doc.metadata
        relevance = animal_index.similarity_search_with_relevance_scores("cat", k=8)
        assert all(0.0 <= s <= 1.0 for _, s in relevance)
        assert [d.id for d, _ in relevance] == [d.id for d, _ in pairs]

    def test_filter(self, animal_index: FusionIndex) -> None:
        found = animal_index.similarity_search("cat", k=8, filter={"group": "odd"})
        assert found and all(d.metadata["group"] == "odd" for d in found)

    def test_mmr_prefers_diverse_results(self, embeddings: HashingEmbeddings) -> None:
        docs = [Document(page_content="solar panel output", id=f"dup{i}") for i in range(4)]
        docs.append(Document(page_content="solar battery storage", id="other"))
        fusion = FusionIndex.from_documents(docs, embeddings)
        plain = [d.id for d in fusion.similarity_search("solar panel", k=2)]
        diverse = [d.id for d in fusion.max_marginal_relevance_search("solar panel", k=2, fetch_k=5, lambda_mult=0.3)]
        assert plain[1].startswith("dup")
        assert diverse[0].startswith("dup") and diverse[1] == "other"

    def test_mmr_bad_lambda(self, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="lambda_mult"):
            animal_index.max_marginal_relevance_search("cat", lambda_mult=2)

    def test_add_texts_and_from_texts(self, embeddings: HashingEmbeddings) -> None:
        fusion = FusionIndex.from_texts(["a cat", "a dog"], embeddings, metadatas=[{"n": 1}, {"n": 2}], ids=["c", "d"])
        assert [d.id for d in fusion.get_by_ids(["d", "c"])] == ["d", "c"]
        assert fusion.add_texts(["a bird"], ids=["b"]) == ["b"]
        with pytest.raises(InvalidParameterError, match="metadatas"):
            fusion.add_texts(["x", "y"], metadatas=[{}])
        assert len(fusion) == 3

    def test_delete_none_deletes_everything(self, animal_index: FusionIndex) -> None:
        assert animal_index.delete() is True
        assert len(animal_index) == 0
