"""Fusion is correct by construction: checked against a brute-force reference.

The reference below scores every document on both sides with plain NumPy and Python (its own
BM25, its own cosine), min-max normalises over the corpus and fuses. The retriever with
``fetch_k=None`` must return exactly the same documents with the same fused scores.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import Analyzer, BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from tests.helpers.embeddings import HashingEmbeddings

VOCABULARY = [f"w{i}" for i in range(60)]


def random_corpus(seed: int, size: int = 150) -> list[Document]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(size):
        words = rng.choice(VOCABULARY, size=int(rng.integers(3, 25)), p=zipf(len(VOCABULARY)))
        docs.append(Document(page_content=" ".join(words), metadata={"n": i}))
    return docs


def zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1)
    return weights / weights.sum()


def reference_fusion(
    docs: list[Document], embeddings: Embeddings, query: str, alpha: float, k: int, k1: float, b: float
) -> list[tuple[int, float]]:
    """Brute force: every document scored on both sides, min-max over the corpus, fused."""
    analyzer = Analyzer()
    tokens = [analyzer.tokenize(d.page_content) for d in docs]
    q_tokens = analyzer.tokenize(query)
    n, avgdl = len(docs), sum(map(len, tokens)) / len(docs)
    df = Counter(t for doc in tokens for t in set(doc))
    bm25 = []
    for doc in tokens:
        tf = Counter(doc)
        bm25.append(
            sum(
                math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + k1 * (1 - b + b * len(doc) / avgdl))
                for t in q_tokens
                if tf[t]
            )
        )
    doc_vectors = np.array(embeddings.embed_documents([d.page_content for d in docs]))
    doc_vectors /= np.linalg.norm(doc_vectors, axis=1, keepdims=True)
    q = np.array(embeddings.embed_query(query))
    cosine = doc_vectors @ (q / np.linalg.norm(q))

    def norm(x: list[float] | np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return (x - x.min()) / (x.max() - x.min())

    fused = alpha * norm(cosine) + (1 - alpha) * norm(bm25)
    order = sorted(range(n), key=lambda i: (-fused[i], i))[:k]
    return [(i, float(fused[i])) for i in order]


def queries(seed: int, count: int = 8) -> list[str]:
    rng = np.random.default_rng(seed + 1000)
    return [" ".join(rng.choice(VOCABULARY[:40], size=3, replace=False)) for _ in range(count)]


class TestAgainstBruteForce:
    @pytest.mark.parametrize("seed", [0, 1, 2])
    @pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5, 0.7, 0.9])
    def test_exact_fusion_matches_reference(self, seed: int, alpha: float) -> None:
        docs = random_corpus(seed)
        embeddings = HashingEmbeddings(size=32)
        index = FusionIndex.from_documents(docs, embeddings)
        retriever = FusionRetriever(index=index, k=10, alpha=alpha, fetch_k=None)
        for query in queries(seed):
            params = index.bm25_params
            expected = reference_fusion(docs, embeddings, query, alpha, k=10, k1=params.k1, b=params.b)
            got = retriever.invoke(query)
            assert [d.metadata["n"] for d in got] == [i for i, _ in expected], query
            assert [d.metadata["fusion_score"] for d in got] == pytest.approx([s for _, s in expected], abs=1e-5)

    def test_tutorial_bug_is_not_reproduced(self) -> None:
        """The tutorial adds vector scores in similarity order to BM25 scores in corpus order."""
        docs = random_corpus(7)
        embeddings = HashingEmbeddings(size=32)
        index = FusionIndex.from_documents(docs, embeddings)
        retriever = FusionRetriever(index=index, k=5, fetch_k=None)
        mismatches = 0
        for query in queries(7):
            params = index.bm25_params
            expected = [i for i, _ in reference_fusion(docs, embeddings, query, 0.5, 5, params.k1, params.b)]
            # The tutorial's mistake, reproduced: the vector scores come back sorted by
            # similarity, BM25 scores come in corpus order, and the two arrays are added.
            doc_vectors = np.array(embeddings.embed_documents([d.page_content for d in docs]))
            cosine = doc_vectors @ np.array(embeddings.embed_query(query))
            bm25 = np.array([index.store.snapshot.bm25_scores_all(query)[i] for i in range(len(docs))])  # type: ignore[attr-defined]
            vector_sorted = np.sort(cosine)[::-1]
            v = (vector_sorted - vector_sorted.min()) / (np.ptp(vector_sorted) + 1e-8)
            b = (bm25 - bm25.min()) / (np.ptp(bm25) + 1e-8)
            tutorial = list(np.argsort(0.5 * v + 0.5 * b)[::-1][:5])
            mismatches += tutorial != expected
            assert [d.metadata["n"] for d in retriever.invoke(query)] == expected
        assert mismatches >= 6  # the misaligned sum is almost always wrong


class TestAlphaLimits:
    @pytest.mark.parametrize("fetch_k", [None, 5, 50])
    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_limits_reproduce_single_side_rankings(self, fetch_k: int | None, method: str) -> None:
        docs = random_corpus(11)
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=32))
        for query in queries(11):
            vector = [d.id for d in VectorRetriever(index=index, k=8).invoke(query)]
            bm25 = [d.id for d in BM25Retriever(index=index, k=8).invoke(query)]
            fused = FusionRetriever(index=index, k=8, fetch_k=fetch_k, method=method)  # type: ignore[arg-type]
            assert [d.id for d in fused.invoke(query, alpha=1.0)] == vector
            assert [d.id for d in fused.invoke(query, alpha=0.0)] == bm25


class TestCandidatePool:
    def test_other_side_scores_are_real(self) -> None:
        docs = random_corpus(5)
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=32))
        query = queries(5)[0]
        snapshot = index.store.snapshot  # type: ignore[attr-defined]
        all_bm25 = snapshot.bm25_scores_all(query)
        q = index.embed_query(query)
        all_cosine = snapshot.vector_scores_all(q)
        for doc in FusionRetriever(index=index, k=10, fetch_k=3).invoke(query):
            row = int(index.view().keys_of([doc.id])[0])  # type: ignore[list-item]
            assert doc.metadata["bm25_score"] == pytest.approx(float(all_bm25[row]))
            assert doc.metadata["vector_score"] == pytest.approx(float(all_cosine[row]), abs=1e-6)

    def test_pool_is_union_of_both_sides(self) -> None:
        docs = random_corpus(6)
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=32))
        query = queries(6)[0]
        vector = {d.id for d in VectorRetriever(index=index, k=4).invoke(query)}
        bm25 = {d.id for d in BM25Retriever(index=index, k=4).invoke(query)}
        fused = FusionRetriever(index=index, k=4, fetch_k=4).invoke(query)
        assert len(fused) == 4
        assert {d.id for d in fused} <= vector | bm25
        assert {d.id for d in fused} & (bm25 - vector)  # the BM25-only candidates took part

    def test_normalisation_is_over_the_pool(self) -> None:
        docs = random_corpus(8)
        # Words such as "w13" stay whole: split at the letter/digit boundary, every document would match
        # "w", and the pool of the two sides' top 100 would hold candidates ranked below the 100 returned.
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=32), analyzer=Analyzer(identifiers=False))
        results = FusionRetriever(index=index, k=100, fetch_k=6).invoke(queries(8)[0])
        vector_norm = [d.metadata["vector_score_normalized"] for d in results]
        assert min(vector_norm) == 0.0 and max(vector_norm) == 1.0

    def test_known_answer(self) -> None:
        """Only the document that is good on both sides wins at alpha=0.5."""
        vectors = {
            "query": [1.0, 0.0, 0.0],
            "keyword keyword keyword match": [0.0, 1.0, 0.0],  # best BM25, orthogonal vector
            "semantic neighbour": [0.99, 0.14, 0.0],  # best vector, no keyword
            "keyword with meaning": [0.8, 0.6, 0.0],  # second on both sides
            "unrelated": [0.0, 0.0, 1.0],
        }

        class TableEmbeddings(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return [vectors[t] for t in texts]

            def embed_query(self, text: str) -> list[float]:
                return vectors["query"]

        docs = [Document(page_content=t) for t in list(vectors)[1:]]
        index = FusionIndex.from_documents(docs, TableEmbeddings())
        retriever = FusionRetriever(index=index, k=4, fetch_k=None)
        assert retriever.invoke("keyword")[0].page_content == "keyword with meaning"
        assert retriever.invoke("keyword", alpha=1.0)[0].page_content == "semantic neighbour"
        assert retriever.invoke("keyword", alpha=0.0)[0].page_content == "keyword keyword keyword match"


def is_approximate(index: FusionIndex) -> bool:
    """True when some segment of the index proposes vector candidates from a FAISS ANN index."""
    return bool(index.store.snapshot.approximate)  # type: ignore[attr-defined]


@pytest.fixture
def ann_on_small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build ANN indexes for segments of any size (normally only from ANN_MIN_ROWS rows on)."""
    import langchain_fusion.stores.local.mutations as mutations_module

    monkeypatch.setattr(mutations_module, "ANN_MIN_ROWS", 1)


class TestApproximateIndex:
    def test_small_segments_are_scanned_exactly(self) -> None:
        docs = random_corpus(9)
        approx = FusionIndex.from_documents(docs, HashingEmbeddings(size=32), vector_index="HNSW16")
        assert not is_approximate(approx)

    @pytest.mark.usefixtures("ann_on_small_segments")
    @pytest.mark.parametrize("factory,params", [("HNSW16", "efSearch=256"), ("IVF4,Flat", "nprobe=4")])
    def test_matches_exact_on_a_small_corpus(self, factory: str, params: str) -> None:
        docs = random_corpus(9)
        embeddings = HashingEmbeddings(size=32)
        exact = FusionIndex.from_documents(docs, embeddings)
        approx = FusionIndex.from_documents(docs, embeddings, vector_index=factory, vector_search_params=params)
        assert is_approximate(approx)
        assert not is_approximate(exact)
        for query in queries(9):
            for fetch_k in (20, None):
                want = [d.id for d in FusionRetriever(index=exact, k=5, fetch_k=fetch_k).invoke(query)]
                got = [d.id for d in FusionRetriever(index=approx, k=5, fetch_k=fetch_k).invoke(query)]
                assert got == want

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_the_graph_only_proposes_the_pool_is_scored_exactly(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Scores and order come from the stored vectors, never from the graph's own (approximate) distances."""
        from langchain_fusion.stores.local.vectors import AnnIndex

        docs = random_corpus(13)
        embeddings = HashingEmbeddings(size=32)
        exact = FusionIndex.from_documents(docs, embeddings)
        approx = FusionIndex.from_documents(
            docs, embeddings, vector_index="HNSW16", vector_search_params="efSearch=256"
        )
        real_search = AnnIndex.search

        def scrambled(self: AnnIndex, query: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple:
            rows, scores = real_search(self, query, k, allowed)
            return rows[::-1].copy(), np.full_like(scores, -7.0)  # worst first, and wrong scores

        monkeypatch.setattr(AnnIndex, "search", scrambled)
        assert is_approximate(approx)
        for query in queries(13):
            want = FusionRetriever(index=exact, k=5).invoke(query)
            got = FusionRetriever(index=approx, k=5).invoke(query)
            assert [d.id for d in got] == [d.id for d in want]
            for doc in got:
                vector = np.asarray(embeddings.embed_documents([doc.page_content])[0])
                expected = float(vector @ np.asarray(embeddings.embed_query(query)))
                assert doc.metadata["vector_score"] == pytest.approx(expected, abs=1e-5)

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_add_and_delete_keep_rows_aligned(self) -> None:
        docs = random_corpus(10)
        embeddings = HashingEmbeddings(size=32)
        approx = FusionIndex.from_documents(
            docs[:100], embeddings, vector_index="HNSW16", vector_search_params="efSearch=256"
        )
        approx.add_documents(docs[100:])
        removed = [d.id for d in approx.documents[::7]]
        approx.delete(removed)  # type: ignore[arg-type]
        assert is_approximate(approx)
        fresh = FusionIndex.from_documents([d for d in approx.documents], embeddings)
        for query in queries(10):
            want = [
                (d.id, round(d.metadata["fusion_score"], 5)) for d in FusionRetriever(index=fresh, k=6).invoke(query)
            ]
            got = [
                (d.id, round(d.metadata["fusion_score"], 5)) for d in FusionRetriever(index=approx, k=6).invoke(query)
            ]
            assert got == want


class TestCompressedIndex:
    """An index of compressed codes (4-bit PQ fast scan) proposes k_factor x the pool; the stored vectors rank it."""

    @pytest.mark.usefixtures("ann_on_small_segments")
    @pytest.mark.parametrize("factory,params", [("PQ8x4fs", None), ("IVF4,PQ8x4fs", "nprobe=4")])
    def test_matches_exact_where_the_candidates_cover_the_corpus(
        self, factory: str, params: str | None, tmp_path: Path
    ) -> None:
        from langchain_fusion.stores.local.vectors import K_FACTOR_COMPRESSED

        docs = random_corpus(16)  # 150 rows: the default k_factor's 10 x fetch_k 20 candidates cover them all
        embeddings = HashingEmbeddings(size=32)
        exact = FusionIndex.from_documents(docs, embeddings)
        approx = FusionIndex.from_documents(docs, embeddings, vector_index=factory, vector_search_params=params)
        assert is_approximate(approx)
        assert approx.store.snapshot.segments[0].ann.k_factor == K_FACTOR_COMPRESSED  # type: ignore[attr-defined]
        loaded = FusionIndex.load(approx.save(tmp_path / "idx"), embeddings)
        assert is_approximate(loaded)
        for query in queries(16):
            for where in (None, {"n": list(range(0, 150, 3))}):  # PQ8x4fs refuses FAISS's filter: scanned exactly
                want = FusionRetriever(index=exact, k=5, fetch_k=20, filter=where).invoke(query)
                for index in (approx, loaded):
                    got = FusionRetriever(index=index, k=5, fetch_k=20, filter=where).invoke(query)
                    assert [d.id for d in got] == [d.id for d in want]
                    # The same pool rescored from the same vectors: the same bits.
                    assert [d.metadata["fusion_score"] for d in got] == [d.metadata["fusion_score"] for d in want]

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_bounded_float32_products_leave_the_top_k_and_its_bits(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Candidates ruled out by float32 products and their error bounds change nothing, ties included."""
        import langchain_fusion.stores.local.scorers as scorers_module

        docs = random_corpus(21, 1500)
        docs += [Document(page_content=d.page_content, metadata={"n": -1}) for d in docs[:300]]  # exact ties
        embeddings = HashingEmbeddings(size=32)
        index = FusionIndex.from_documents(
            docs, embeddings, vector_index="IVF8,PQ8x4fs", vector_search_params="nprobe=8"
        )
        store = index.store
        narrowed = 0
        for query in queries(21, 30):
            vector = index.embed_query(query)
            candidates = store.view().vector(vector)._ann_candidates(50, None)  # type: ignore[attr-defined]
            narrowed += store.snapshot.products_at(candidates, vector[0]).contenders(50).size < candidates.size  # type: ignore[attr-defined]
            monkeypatch.setattr(scorers_module, "CONTENDERS_MIN_RATIO", 10**9)
            every = store.view().vector(vector).top(50)
            monkeypatch.setattr(scorers_module, "CONTENDERS_MIN_RATIO", 2)
            some = store.view().vector(vector).top(50)
            assert every[0].tolist() == some[0].tolist()
            assert every[1].tobytes() == some[1].tobytes()
        assert narrowed == 30

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_k_factor_defaults_and_override(self, tmp_path: Path) -> None:
        docs = random_corpus(17)
        embeddings = HashingEmbeddings(size=32)

        def k_factor_of(index: FusionIndex) -> int:
            return int(index.store.snapshot.segments[0].ann.k_factor)  # type: ignore[attr-defined]

        assert k_factor_of(FusionIndex.from_documents(docs, embeddings, vector_index="HNSW16")) == 1
        assert k_factor_of(FusionIndex.from_documents(docs, embeddings, vector_index="IVF4,Flat")) == 1
        chosen = FusionIndex.from_documents(
            docs, embeddings, vector_index="IVF4,PQ8x4fs", vector_search_params="nprobe=2, k_factor=3"
        )
        assert k_factor_of(chosen) == 3
        assert k_factor_of(FusionIndex.load(chosen.save(tmp_path / "idx"), embeddings)) == 3

    def test_sub_quantizers_are_checked_against_the_embedding_dimension(self) -> None:
        from langchain_fusion import LocalStore
        from langchain_fusion.errors import FusionError

        LocalStore(vector_index="IVF1024,PQ96x4fs")  # 384-d embeddings: fine (the dimension is not known yet)
        with pytest.raises(FusionError, match=r"'PQ96x4fs'.*multiple of the number of subquantizers"):
            FusionIndex.from_documents(random_corpus(18, 5000), HashingEmbeddings(size=32), vector_index="PQ96x4fs")

    @pytest.mark.parametrize("value", ["0", "-1", "ten", "", "1.5", "1001"])
    def test_bad_k_factor_is_refused_up_front(self, value: str) -> None:
        from langchain_fusion import LocalStore
        from langchain_fusion.errors import FusionError

        with pytest.raises(FusionError, match="invalid FAISS search parameters") as caught:
            LocalStore(vector_index="PQ8x4fs", vector_search_params=f"k_factor={value}")
        assert f"k_factor must be a whole number from 1 to 1000; got {value!r}" in str(caught.value)


class TestApproximateIndexKeepsOneCopy:
    """A graph index over full vectors holds them: the segment reads them there, and a save writes them once."""

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_the_segment_reads_the_graphs_vectors(self) -> None:
        docs = random_corpus(11)
        approx = FusionIndex.from_documents(docs, HashingEmbeddings(size=32), vector_index="HNSW16")
        segment = approx.store.snapshot.segments[0]  # type: ignore[attr-defined]
        shared = segment.ann.shared_vectors
        assert shared is not None and not segment.vectors.flags.owndata
        assert segment.vectors.__array_interface__["data"][0] == shared.__array_interface__["data"][0]
        assert not segment.vectors.flags.writeable
        exact = FusionIndex.from_documents(docs, HashingEmbeddings(size=32))
        np.testing.assert_array_equal(segment.vectors, exact.store.snapshot.segments[0].vectors)  # type: ignore[attr-defined]

    @pytest.mark.usefixtures("ann_on_small_segments")
    @pytest.mark.parametrize("factory", ["HNSW16", "IVF4,Flat"])
    def test_saved_graph_holds_no_second_copy(self, factory: str, tmp_path: Path) -> None:
        docs = random_corpus(12)
        embeddings = HashingEmbeddings(size=32)
        approx = FusionIndex.from_documents(docs, embeddings, vector_index=factory, vector_search_params=None)
        folder = approx.save(tmp_path / "idx")
        vectors_bytes = (folder / "vectors.npy").stat().st_size
        if factory.startswith("HNSW"):
            import faiss

            with_vectors = faiss.serialize_index(approx.store.snapshot.segments[0].ann._index).size  # type: ignore[attr-defined]
            payload = vectors_bytes - 128  # the .npy header is at most 128 bytes
            assert (folder / "vectors.ann").stat().st_size <= with_vectors - payload  # the graph, not the vectors
        loaded = FusionIndex.load(folder, embeddings)
        segment = loaded.store.snapshot.segments[0]  # type: ignore[attr-defined]
        assert segment.ann is not None
        if factory.startswith("HNSW"):
            assert (
                segment.vectors.__array_interface__["data"][0]
                == segment.ann.shared_vectors.__array_interface__["data"][0]
            )
        for query in queries(12):
            want = [(d.id, d.metadata["fusion_score"]) for d in FusionRetriever(index=approx, k=5).invoke(query)]
            assert [
                (d.id, d.metadata["fusion_score"]) for d in FusionRetriever(index=loaded, k=5).invoke(query)
            ] == want


class TestHnswSearchDefaults:
    """An HNSW graph searches with an efSearch chosen by its size unless the user sets one."""

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_default_by_size_and_user_override(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        from langchain_fusion.stores.local import vectors as vectors_module

        docs = random_corpus(14)
        embeddings = HashingEmbeddings(size=32)

        def ef_of(index: FusionIndex) -> int:
            segment = index.store.snapshot.segments[0]  # type: ignore[attr-defined]
            return int(segment.ann._index.hnsw.efSearch)

        small = FusionIndex.from_documents(docs, embeddings, vector_index="HNSW16")
        assert ef_of(small) == vectors_module.EF_SEARCH_SMALL
        assert ef_of(FusionIndex.load(small.save(tmp_path / "small"), embeddings)) == vectors_module.EF_SEARCH_SMALL
        chosen = FusionIndex.from_documents(docs, embeddings, vector_index="HNSW16", vector_search_params="efSearch=40")
        assert ef_of(chosen) == 40
        assert ef_of(FusionIndex.load(chosen.save(tmp_path / "chosen"), embeddings)) == 40
        monkeypatch.setattr(vectors_module, "EF_SEARCH_LARGE_ROWS", 10)
        large = FusionIndex.from_documents(docs, embeddings, vector_index="HNSW16")
        assert ef_of(large) == vectors_module.EF_SEARCH_LARGE

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_graph_build_breadth_default_and_override(self, tmp_path: Path) -> None:
        """efConstruction: ours unless search_params set it; the setting is saved and reloaded with the index."""
        from langchain_fusion.stores.local import vectors as vectors_module

        docs = random_corpus(15)
        embeddings = HashingEmbeddings(size=32)

        def graph_of(index: FusionIndex) -> object:
            return index.store.snapshot.segments[0].ann._index.hnsw  # type: ignore[attr-defined]

        default = FusionIndex.from_documents(docs, embeddings, vector_index="HNSW16")
        assert graph_of(default).efConstruction == vectors_module.EF_CONSTRUCTION != 40  # type: ignore[attr-defined]
        chosen = FusionIndex.from_documents(
            docs, embeddings, vector_index="HNSW16", vector_search_params="efConstruction=24, efSearch=48"
        )
        assert graph_of(chosen).efConstruction == 24  # type: ignore[attr-defined]
        assert graph_of(chosen).efSearch == 48  # type: ignore[attr-defined]
        # A graph built narrower than ours (as earlier versions saved them, at 40) searches wider by default.
        narrow = FusionIndex.from_documents(
            docs, embeddings, vector_index="HNSW16", vector_search_params="efConstruction=40"
        )
        assert graph_of(narrow).efSearch == vectors_module.EF_SEARCH_NARROW_SMALL  # type: ignore[attr-defined]
        reloaded = FusionIndex.load(narrow.save(tmp_path / "narrow"), embeddings)
        assert graph_of(reloaded).efSearch == vectors_module.EF_SEARCH_NARROW_SMALL  # type: ignore[attr-defined]
        loaded = FusionIndex.load(chosen.save(tmp_path / "chosen"), embeddings)
        assert graph_of(loaded).efSearch == 48  # type: ignore[attr-defined]
        loaded.add_documents(random_corpus(16))  # graphs built after a load use the saved setting
        graphs = [s.ann._index.hnsw for s in loaded.store.snapshot.segments if s.ann is not None]  # type: ignore[attr-defined]
        assert graphs and {g.efConstruction for g in graphs} == {24}
        exact = FusionIndex.from_documents(docs, embeddings)
        for query in queries(15):
            want = [d.id for d in FusionRetriever(index=exact, k=5).invoke(query)]
            assert [d.id for d in FusionRetriever(index=chosen, k=5).invoke(query)] == want

    @pytest.mark.parametrize(
        "factory,params,reason",
        [
            ("Flat", "efConstruction=64", "efConstruction applies only to an index that is an HNSW graph"),
            ("IVF4,Flat", "nprobe=2,efConstruction=64", "applies only to an index that is an HNSW graph"),
            ("HNSW16", "efConstruction=0", "efConstruction must be a whole number from 1 to 100000; got '0'"),
            ("HNSW16", "efConstruction=-3", "got '-3'"),
            ("HNSW16", "efConstruction=ten", "got 'ten'"),
            ("HNSW16", "efConstruction=", "got ''"),
            ("HNSW16", "efConstruction=99999999999999999999", "got '99999999999999999999'"),
            ("HNSW16", "efConstruction=1.5", "got '1.5'"),
        ],
    )
    def test_bad_graph_build_breadth_is_refused_up_front(self, factory: str, params: str, reason: str) -> None:
        from langchain_fusion import LocalStore
        from langchain_fusion.errors import FusionError

        with pytest.raises(FusionError, match="invalid FAISS search parameters") as caught:
            LocalStore(vector_index=factory, vector_search_params=params)
        assert reason in str(caught.value)


class TestSidesInParallel:
    """A large ANN-searched index searches its two sides in two threads: same results as one after the other."""

    @pytest.mark.parametrize("vector_index", ["Flat", "HNSW16"])
    def test_parallel_sides_equal_sequential(self, monkeypatch: pytest.MonkeyPatch, vector_index: str) -> None:
        import contextvars
        import threading

        from langchain_fusion.search import pool as pool_module
        from langchain_fusion.stores.local import mutations as mutations_module
        from langchain_fusion.stores.local import view as view_module

        monkeypatch.setattr(mutations_module, "ANN_MIN_ROWS", 1)
        docs = random_corpus(17)
        index = FusionIndex.from_documents(docs, HashingEmbeddings(size=32), vector_index=vector_index)
        tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)
        filter_threads: set[str] = set()

        def even_rows(metadata: dict) -> bool:  # type: ignore[type-arg]
            filter_threads.add(threading.current_thread().name)
            return bool(metadata["n"] % 2 == 0)

        settings = [
            {"k": 5},
            {"k": 7, "alpha": 0.3, "fetch_k": 30},
            {"k": 5, "fetch_k": None},
            {"k": 4, "alpha": 1.0},
            {"k": 4, "alpha": 0.0},
            {"k": 5, "filter": {"n": list(range(0, 150, 3))}},
            {"k": 5, "filter": even_rows},
        ]

        def run() -> list[list[tuple[str | None, float]]]:
            results = []
            for options in settings:
                retriever = FusionRetriever(index=index, **options)
                for query in queries(17):
                    results.append([(d.id, d.metadata["fusion_score"]) for d in retriever.invoke(query)])
            return results

        monkeypatch.setattr(view_module, "PARALLEL_SIDES_MIN_ROWS", 10**9)
        sequential = run()
        vector_calls: list[tuple[str, str | None]] = []
        real_side_tops = pool_module._side_tops

        def recording(view, scorers, pool_size, where, alpha):  # type: ignore[no-untyped-def]
            real_top = scorers.vector.top

            def top(*args):  # type: ignore[no-untyped-def]
                vector_calls.append((threading.current_thread().name, tenant.get()))
                return real_top(*args)

            scorers.vector.top = top
            return real_side_tops(view, scorers, pool_size, where, alpha)

        monkeypatch.setattr(pool_module, "_side_tops", recording)
        monkeypatch.setattr(view_module, "PARALLEL_SIDES_MIN_ROWS", 1)
        monkeypatch.setattr(view_module, "_MANY_CORES", True)
        filter_threads.clear()
        tenant.set("acme")
        assert run() == sequential
        side_calls = [(name, seen) for name, seen in vector_calls if name.startswith("langchain-fusion-side")]
        # An exact scan already uses every core: only a graph search gets its own thread.
        assert bool(side_calls) == (vector_index != "Flat")
        assert all(seen == "acme" for _, seen in side_calls)  # the caller's context came along
        # A callable filter (user code) only ever runs in the caller's thread.
        assert filter_threads == {threading.current_thread().name}

    @pytest.mark.parametrize("where", [None, {"n": list(range(0, 150, 3))}, "callable"])
    def test_a_whole_corpus_query_scores_bm25_beside_the_scan(
        self, monkeypatch: pytest.MonkeyPatch, where: Any
    ) -> None:
        """fetch_k=None on a large exact index: BM25 over every row in a worker thread while this one scans."""
        import threading

        from langchain_fusion.stores.local import scorers as scorers_module
        from langchain_fusion.stores.local import view as view_module

        index = FusionIndex.from_documents(random_corpus(17), HashingEmbeddings(size=32))
        options: dict[str, Any] = {"k": 5, "fetch_k": None}
        if where is not None:
            options["filter"] = (lambda metadata: metadata["n"] % 2 == 0) if where == "callable" else where
        retriever = FusionRetriever(index=index, **options)
        monkeypatch.setattr(view_module, "PARALLEL_SIDES_MIN_ROWS", 10**9)
        sequential = [retriever.invoke(q) for q in queries(17)]
        threads: list[str] = []
        real = scorers_module.LocalBM25Scorer.all_scores

        def recording(scorer: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(scorer)

        monkeypatch.setattr(scorers_module.LocalBM25Scorer, "all_scores", recording)
        monkeypatch.setattr(view_module, "PARALLEL_SIDES_MIN_ROWS", 1)
        monkeypatch.setattr(view_module, "_MANY_CORES", True)
        parallel = [retriever.invoke(q) for q in queries(17)]
        assert [[(d.id, d.metadata) for d in r] for r in parallel] == [
            [(d.id, d.metadata) for d in r] for r in sequential
        ]
        beside = {name.startswith("langchain-fusion-side") for name in threads}
        assert beside == ({False} if where == "callable" else {True})  # a callable filter stays in this thread


def test_worker_pools_start_afresh_in_a_forked_child() -> None:
    """A child forked after a pool's first use gets working threads (an inherited pool would hang)."""
    import os

    from langchain_fusion.threads import LazyPool

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    pool = LazyPool(2, "test-fork")
    assert pool.get().submit(lambda: 1).result() == 1
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            ok = pool.get().submit(lambda: 2).result(timeout=30) == 2
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
