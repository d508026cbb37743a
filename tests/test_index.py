"""FusionIndex: one row space for documents, vectors and BM25, kept under add and delete."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex, FusionRetriever
from langchain_fusion.errors import ProviderError
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings


def assert_rows_aligned(index: FusionIndex) -> None:
    """Every live document has one row, and that row's vector and BM25 terms are its own.

    Rows are read through one view (one snapshot): ``keys_of`` maps each id to its row, the
    row's document is that document, its stored vector is the embedding of its text, and its
    BM25 row matches its own words.
    """
    view = index.view()
    snapshot = view.snapshot  # type: ignore[attr-defined]
    snapshot.check_aligned()
    docs = list(view.iter_documents())
    assert docs == list(index.documents)
    keys = view.keys_of([d.id for d in docs])  # type: ignore[misc]
    assert (keys >= 0).all()
    assert (np.diff(keys) > 0).all()  # distinct rows, in row order
    assert view.documents(keys) == docs
    stored = snapshot.vectors_of(keys)
    expected = np.array(index.embeddings.embed_documents([d.page_content for d in docs]), dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(stored, expected, atol=1e-6)
    for key, doc in zip(keys, docs, strict=True):
        own_terms = " ".join(doc.page_content.split()[:3])
        assert view.bm25(own_terms).scores(np.array([key]))[0] > 0
    assert sum(segment.size for segment in snapshot.segments) == snapshot.lengths.size == snapshot.size
    assert len(view) == snapshot.live_count == len(docs) == len(index)


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

    @pytest.mark.parametrize("compact", [True, False], ids=["compacted", "tombstones"])
    def test_delete_keeps_alignment(  # type: ignore[no-untyped-def]
        self, animal_index: FusionIndex, animal_docs: list[Document], embeddings, compact: bool, monkeypatch
    ) -> None:
        import langchain_fusion.stores.local.mutations as mutations_module

        if not compact:  # deleted rows stay as tombstones: live rows keep their (now gapped) row numbers
            monkeypatch.setattr(mutations_module, "COMPACT_DEAD_RATIO", 2.0)
        victims = [animal_index.documents[i].id for i in (0, 3, 7)]
        assert animal_index.remove(victims) == 3  # type: ignore[arg-type]
        assert len(animal_index) == len(animal_docs) - 3
        assert (animal_index.view().keys_of(victims) == -1).all()  # type: ignore[arg-type]
        assert not any(v in animal_index for v in victims)
        assert animal_index.store.snapshot.dead_count == (0 if compact else 3)  # type: ignore[attr-defined]
        assert_rows_aligned(animal_index)
        survivors = [d for i, d in enumerate(animal_docs) if i not in (0, 3, 7)]
        fresh = FusionIndex.from_documents(survivors, embeddings)
        for query in ("cat", "dog", "quantum"):
            assert FusionRetriever(index=animal_index, k=5).invoke(query) == FusionRetriever(index=fresh, k=5).invoke(
                query
            )

    def test_remove_unknown_id_removes_nothing(self, animal_index: FusionIndex) -> None:
        known = animal_index.documents[0].id
        with pytest.raises(KeyError, match="no document with id 'nope'"):
            animal_index.remove([known, "nope"])  # type: ignore[list-item]
        assert len(animal_index) == len(ANIMALS)

    def test_delete_ignores_unknown_ids_as_langchain_expects(self, animal_index: FusionIndex) -> None:
        known = animal_index.documents[0].id
        assert animal_index.delete([known, "nope"]) is True  # type: ignore[list-item]
        assert len(animal_index) == len(ANIMALS) - 1 and known not in animal_index
        assert animal_index.delete(["nope"]) is True
        with pytest.raises(FusionError, match="list of ids"):
            animal_index.delete("nope")  # type: ignore[arg-type]

    def test_delete_everything_then_add(self, animal_index: FusionIndex, animal_docs: list[Document]) -> None:
        animal_index.delete([d.id for d in animal_index.documents])  # type: ignore[misc]
        assert len(animal_index) == 0
        assert animal_index.as_retriever().invoke("cat") == []
        animal_index.add_documents(animal_docs[:2])
        assert_rows_aligned(animal_index)

    def test_ids_repeated_in_a_batch_are_rejected_and_nothing_is_added(self, animal_index: FusionIndex) -> None:
        with pytest.raises(FusionError, match="duplicate document id"):
            animal_index.add_documents([Document(page_content="x", id="a"), Document(page_content="y", id="a")])
        with pytest.raises(FusionError, match="duplicate document id"):
            animal_index.add_documents([Document(page_content="same"), Document(page_content="same")])
        with pytest.raises(FusionError, match="one id per document"):
            animal_index.add_documents([Document(page_content="x")], ids=["a", "b"])
        assert len(animal_index) == len(ANIMALS)
        assert_rows_aligned(animal_index)

    def test_adding_an_indexed_id_replaces_the_document(self, animal_index: FusionIndex) -> None:
        existing = animal_index.documents[0]
        animal_index.add_documents([Document(page_content="zebra stripes", id=existing.id)])
        assert len(animal_index) == len(ANIMALS)
        assert animal_index.get_by_ids([existing.id or ""])[0].page_content == "zebra stripes"
        assert [d.id for d in animal_index.as_retriever(k=1, alpha=0.0).invoke("zebra")] == [existing.id]
        assert_rows_aligned(animal_index)

    def test_embedding_failure_adds_nothing(self, animal_index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken(texts: list[str]) -> list[list[float]]:
            raise RuntimeError("provider down")

        monkeypatch.setattr(animal_index.embeddings, "embed_documents", broken)
        with pytest.raises(ProviderError, match="RuntimeError: provider down"):
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

    def test_small_corpora_are_scanned_exactly_with_any_factory(
        self, animal_docs: list[Document], embeddings: HashingEmbeddings
    ) -> None:
        # An IVF index cannot be trained on 8 vectors; segments this small never get one.
        index = FusionIndex.from_documents(animal_docs, embeddings, vector_index="IVF64,Flat")
        assert index.store.vector_index == "IVF64,Flat"  # type: ignore[attr-defined]
        assert all(s.ann is None for s in index.store.snapshot.segments)  # type: ignore[attr-defined]
        exact = FusionIndex.from_documents(animal_docs, embeddings)
        for query in ("cat", "dog friends", "energy sunlight"):
            assert index.as_retriever(k=5).invoke(query) == exact.as_retriever(k=5).invoke(query)

    def test_segments_too_small_to_train_ivf_are_scanned_exactly(
        self, animal_docs: list[Document], embeddings: HashingEmbeddings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """IVF64 needs 64 training rows: smaller segments get no approximate index, and results stay exact."""
        import langchain_fusion.stores.local.mutations as mutations_module

        monkeypatch.setattr(mutations_module, "ANN_MIN_ROWS", 1)
        index = FusionIndex.from_documents(animal_docs[:4], embeddings, vector_index="IVF64,Flat")
        index.add_documents(animal_docs[4:])
        assert all(s.ann is None for s in index.store.snapshot.segments)  # type: ignore[attr-defined]
        exact = FusionIndex.from_documents(animal_docs, embeddings)
        for query in ("cat", "dog friends"):
            assert index.as_retriever(k=5).invoke(query) == exact.as_retriever(k=5).invoke(query)
        assert_rows_aligned(index)
        big = [Document(page_content=f"w{i % 97} w{i % 13} row {i}", id=f"r{i}") for i in range(70)]
        trained = FusionIndex.from_documents(big, embeddings, vector_index="IVF64,Flat")
        assert all(s.ann is not None for s in trained.store.snapshot.segments)  # type: ignore[attr-defined]


class TestFlatScan:
    """The exact scan (FAISS kernel, split over threads for large matrices) equals NumPy."""

    @pytest.mark.parametrize("rows", [1, 7, 32_767, 32_768, 50_001])
    def test_scores_all_match_numpy(self, rows: int) -> None:
        from langchain_fusion.stores.local.vectors import inner_products, normalize_rows

        rng = np.random.default_rng(rows)
        vectors = normalize_rows(rng.standard_normal((rows, 24)), 24)
        query = normalize_rows(rng.standard_normal((1, 24)), 24)
        np.testing.assert_allclose(inner_products(vectors, query[0]), vectors @ query[0], atol=1e-5)

    @pytest.mark.parametrize("workers", [2, 3])
    def test_many_small_blocks_give_the_bits_of_one_scan(self, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_fusion.stores.local import vectors as vectors_module

        rng = np.random.default_rng(workers)
        matrix = vectors_module.normalize_rows(rng.standard_normal((5_003, 24)), 24)
        query = vectors_module.normalize_rows(rng.standard_normal((1, 24)), 24)[0]
        one_scan = vectors_module.inner_products(matrix, query)  # below the parallel size: one kernel call
        monkeypatch.setattr(vectors_module, "_PARALLEL_MIN_ROWS", 1)
        monkeypatch.setattr(vectors_module, "_SCAN_WORKERS", workers)
        monkeypatch.setattr(vectors_module, "_SCAN_BLOCK_BYTES", 24 * 4 * 100)  # 51 blocks of 100 rows
        assert vectors_module.inner_products(matrix, query).tobytes() == one_scan.tobytes()

    def test_a_busy_scan_pool_does_not_hold_up_the_caller(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the pool's threads busy elsewhere, the caller scans every block itself and returns."""
        from langchain_fusion.stores.local import vectors as vectors_module

        rng = np.random.default_rng(5)
        matrix = vectors_module.normalize_rows(rng.standard_normal((2_000, 24)), 24)
        query = matrix[3]
        monkeypatch.setattr(vectors_module, "_PARALLEL_MIN_ROWS", 1)
        monkeypatch.setattr(vectors_module, "_SCAN_WORKERS", 2)
        monkeypatch.setattr(vectors_module, "_SCAN_BLOCK_BYTES", 24 * 4 * 100)
        pool = vectors_module._scan_pool.get()
        release = threading.Event()
        busy = [pool.submit(release.wait, 30) for _ in range(pool._max_workers)]
        try:
            result: list[np.ndarray] = []
            caller = threading.Thread(target=lambda: result.append(vectors_module.inner_products(matrix, query)))
            caller.start()
            caller.join(10)
            assert not caller.is_alive(), "the scan waited for the busy pool"
        finally:
            release.set()
            for future in busy:
                future.result()
        np.testing.assert_allclose(result[0], matrix @ query, atol=1e-5)

    def test_store_scans_every_segment(self, embeddings: HashingEmbeddings, monkeypatch: pytest.MonkeyPatch) -> None:
        """The store's whole-corpus scan over several segments equals NumPy over all rows."""
        import langchain_fusion.stores.local.mutations as mutations_module

        monkeypatch.setattr(mutations_module, "MERGE_FACTOR", 0)  # every batch stays a segment of its own
        docs = [Document(page_content=f"text number {i} about cats " * (1 + i % 3), id=str(i)) for i in range(50)]
        index = FusionIndex(embeddings)
        for start, stop in ((0, 40), (40, 48), (48, 50)):
            index.add_documents(docs[start:stop])
        snapshot = index.store.snapshot  # type: ignore[attr-defined]
        assert [segment.size for segment in snapshot.segments] == [40, 8, 2]
        vectors = snapshot.vectors_of(np.arange(50))
        query = index.embed_query("cats")
        np.testing.assert_allclose(snapshot.vector_scores_all(query), vectors @ query[0], atol=1e-5)


class TestBoundedProducts:
    """Float32 products with error bounds narrow rescoring candidates without losing any of the exact top k."""

    @staticmethod
    def exact(matrix: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        return np.add.reduce(matrix[rows].astype(np.float64) * query.astype(np.float64), axis=1)

    @pytest.mark.parametrize("dimension", [3, 64, 384, 1000])
    @pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e3, 1e15])
    def test_each_product_is_within_its_bound(self, dimension: int, scale: float) -> None:
        from langchain_fusion.stores.local.vectors import products_at

        rng = np.random.default_rng(dimension)
        matrix = (rng.standard_normal((500, dimension)) * scale * rng.uniform(0.01, 100, (500, 1))).astype(np.float32)
        query = rng.standard_normal(dimension).astype(np.float32)
        rows = rng.choice(500, 200, replace=False)
        found = products_at(matrix, rows, query)
        assert np.all(np.abs(found.products - self.exact(matrix, rows, query)) <= found.error)
        gathered = products_at(np.asfortranarray(matrix), rows, query)  # not C-contiguous: read by NumPy
        assert np.all(np.abs(gathered.products - self.exact(matrix, rows, query)) <= gathered.error)

    @pytest.mark.parametrize("seed", range(20))
    def test_contenders_hold_the_exact_top_k_among_near_ties(self, seed: int) -> None:
        """Rows a few float32 ulps apart: float32 sums order them wrongly, the bounds keep every true top-k row."""
        from langchain_fusion.stores.local.vectors import products_at

        rng = np.random.default_rng(seed)
        base = rng.standard_normal(384)
        matrix = (base + 1e-7 * rng.standard_normal((400, 384))).astype(np.float32)
        query = rng.standard_normal(384).astype(np.float32)
        rows = np.arange(400)
        exact = self.exact(matrix, rows, query)
        found = products_at(matrix, rows, query)
        assert np.argsort(-found.products, kind="stable")[:10].tolist() != np.lexsort((rows, -exact))[:10].tolist()
        for k in (1, 10, 100, 399):
            truth = set(np.lexsort((rows, -exact))[:k].tolist())
            assert truth <= set(found.contenders(k).tolist())

    def test_narrows_well_separated_candidates_and_keeps_all_when_unsure(self) -> None:
        from langchain_fusion.stores.local.vectors import ProductsAt, normalize_rows, products_at

        rng = np.random.default_rng(3)
        matrix = normalize_rows(rng.standard_normal((1000, 64)), 64)
        found = products_at(matrix, np.arange(1000), matrix[0])
        assert found.contenders(10).size < 20
        assert found.contenders(1000).size == found.contenders(0).size == 1000  # nothing to rule out
        unsure = ProductsAt(np.array([1.0, np.nan, 0.5]), np.zeros(3))
        assert unsure.contenders(1).tolist() == [0, 1, 2]
        with pytest.raises(IndexError):
            products_at(matrix, np.array([0, 1000]), matrix[0])  # FAISS would read past the matrix


class TestExactVectorScores:
    def test_a_rows_score_does_not_depend_on_the_rows_scored_with_it(self) -> None:
        """BLAS sums 1-3 rows in another order than more: the float64 scores are summed row by row instead."""
        rng = np.random.default_rng(0)
        docs = [Document(page_content=" ".join(rng.choice(ANIMALS, 6)), id=str(i)) for i in range(300)]
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=384))
        scorer = index.store.view().vector(index.embed_query("cat dog owl"))  # type: ignore[attr-defined]
        together = scorer.scores(np.arange(300))
        for size in (1, 2, 3, 5):
            for start in range(0, 300 - size, 37):
                alone = scorer.scores(np.arange(start, start + size))
                assert alone.tobytes() == together[start : start + size].tobytes()
