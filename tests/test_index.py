"""FusionIndex: one row space for documents, vectors and BM25, kept under add and delete."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex, FusionRetriever
from tests.conftest import ANIMALS, HashingEmbeddings


def assert_rows_aligned(index: FusionIndex) -> None:
    """Row i of every side is document i: its stored vector is the embedding of its text."""
    embeddings = index.embeddings
    rows = np.arange(len(index), dtype=np.int64)
    stored = index.vectors.vectors(rows)  # type: ignore[union-attr]
    expected = np.array(embeddings.embed_documents([d.page_content for d in index.documents]), dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(stored, expected, atol=1e-6)
    for row, doc in enumerate(index.documents):
        assert index.row_of(doc.id) == row  # type: ignore[arg-type]
        own_terms = " ".join(doc.page_content.split()[:3])
        assert index.bm25.scores(own_terms)[row] > 0
    assert len(index.bm25) == len(index.vectors) == len(index)  # type: ignore[arg-type]


class TestFusionIndex:
    def test_from_documents(self, animal_index: FusionIndex) -> None:
        assert len(animal_index) == len(ANIMALS)
        assert animal_index.dimension == 64
        assert all(doc.id for doc in animal_index.documents)
        assert_rows_aligned(animal_index)

    def test_ids_are_kept_or_derived_deterministically(self, embeddings: HashingEmbeddings) -> None:
        docs = [Document(page_content="a", id="given"), Document(page_content="b")]
        first = FusionIndex.from_documents(docs, embeddings)
        second = FusionIndex.from_documents(docs, embeddings)
        assert first.documents[0].id == "given"
        assert first.documents[1].id == second.documents[1].id
        assert docs[1].id is None  # the input was not touched

    def test_add_documents_keeps_alignment(self, animal_docs: list[Document], embeddings: HashingEmbeddings) -> None:
        index = FusionIndex.from_documents(animal_docs[:3], embeddings)
        ids = index.add_documents(animal_docs[3:])
        assert len(ids) == len(animal_docs) - 3
        assert_rows_aligned(index)
        fresh = FusionIndex.from_documents(animal_docs, embeddings)
        for query in ("cat", "dog friends", "energy sunlight"):
            assert FusionRetriever(index=index, k=5).invoke(query) == FusionRetriever(index=fresh, k=5).invoke(query)

    def test_delete_keeps_alignment(self, animal_index: FusionIndex, animal_docs: list[Document], embeddings) -> None:  # type: ignore[no-untyped-def]
        victims = [animal_index.documents[i].id for i in (0, 3, 7)]
        assert animal_index.delete(victims) == 3  # type: ignore[arg-type]
        assert len(animal_index) == len(animal_docs) - 3
        assert all(animal_index.row_of(v) is None for v in victims)  # type: ignore[arg-type]
        assert_rows_aligned(animal_index)
        survivors = [d for i, d in enumerate(animal_docs) if i not in (0, 3, 7)]
        fresh = FusionIndex.from_documents(survivors, embeddings)
        for query in ("cat", "dog", "quantum"):
            assert FusionRetriever(index=animal_index, k=5).invoke(query) == FusionRetriever(index=fresh, k=5).invoke(
                query
            )

    def test_delete_unknown_id_removes_nothing(self, animal_index: FusionIndex) -> None:
        known = animal_index.documents[0].id
        with pytest.raises(KeyError, match="no document with id 'nope'"):
            animal_index.delete([known, "nope"])  # type: ignore[list-item]
        assert len(animal_index) == len(ANIMALS)

    def test_delete_everything_then_add(self, animal_index: FusionIndex, animal_docs: list[Document]) -> None:
        animal_index.delete([d.id for d in animal_index.documents])  # type: ignore[misc]
        assert len(animal_index) == 0
        assert animal_index.as_retriever().invoke("cat") == []
        animal_index.add_documents(animal_docs[:2])
        assert_rows_aligned(animal_index)

    def test_duplicate_ids_are_rejected_and_nothing_is_added(self, animal_index: FusionIndex) -> None:
        existing = animal_index.documents[0]
        with pytest.raises(FusionError, match="duplicate document id"):
            animal_index.add_documents([Document(page_content="new"), Document(page_content="x", id=existing.id)])
        with pytest.raises(FusionError, match="duplicate document id"):
            animal_index.add_documents([Document(page_content="same"), Document(page_content="same")])
        assert len(animal_index) == len(ANIMALS)
        assert_rows_aligned(animal_index)

    def test_embedding_failure_adds_nothing(self, animal_index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken(texts: list[str]) -> list[list[float]]:
            raise RuntimeError("provider down")

        monkeypatch.setattr(animal_index.embeddings, "embed_documents", broken)
        with pytest.raises(RuntimeError, match="provider down"):
            animal_index.add_documents([Document(page_content="will not be added")])
        assert len(animal_index) == len(ANIMALS)

    def test_wrong_embedding_dimension_is_explained(self, animal_index: FusionIndex, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        monkeypatch.setattr(animal_index.embeddings, "embed_documents", lambda texts: [[1.0, 0.0]] * len(texts))
        with pytest.raises(FusionError, match="expected embeddings of dimension 64"):
            animal_index.add_documents([Document(page_content="new")])

    def test_embeddings_are_batched(self, animal_docs: list[Document]) -> None:
        calls: list[int] = []

        class Counting(HashingEmbeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                calls.append(len(texts))
                return super().embed_documents(texts)

        progress: list[int] = []
        FusionIndex.from_documents(animal_docs, Counting(), embedding_batch_size=3, progress=progress.append)
        assert calls == [3, 3, 2] and progress == [3, 3, 2]

    def test_get_by_ids_returns_copies(self, animal_index: FusionIndex) -> None:
        first = animal_index.documents[0]
        (copy_,) = animal_index.get_by_ids([first.id, "unknown"])  # type: ignore[list-item]
        copy_.metadata["source"] = "changed"
        assert animal_index.documents[0].metadata["source"] == first.metadata["source"] != "changed"

    def test_invalid_vector_index_factory(self, embeddings: HashingEmbeddings) -> None:
        with pytest.raises(FusionError, match="FAISS could not build an index from factory string 'Bogus'"):
            FusionIndex(embeddings, vector_index="Bogus")

    def test_ivf_needs_enough_training_vectors(self, animal_docs: list[Document], embeddings) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(FusionError, match="must be trained on at least 64 vectors"):
            FusionIndex.from_documents(animal_docs, embeddings, vector_index="IVF64,Flat")


class TestFlatScan:
    """The exact scan (FAISS kernel, split over threads for large matrices) equals NumPy."""

    @pytest.mark.parametrize("rows", [1, 7, 32_767, 32_768, 50_001])
    def test_scores_all_match_numpy(self, rows: int) -> None:
        from langchain_fusion.vector import VectorIndex, normalize_rows

        rng = np.random.default_rng(rows)
        vectors = normalize_rows(rng.standard_normal((rows, 24)), 24)
        index = VectorIndex(24)
        index.add(vectors)
        query = normalize_rows(rng.standard_normal((1, 24)), 24)
        np.testing.assert_allclose(index.scores_all(query), vectors @ query[0], atol=1e-5)
