"""The store contract: one reusable pytest suite that every :class:`~langchain_fusion.stores.base.FusionStore` passes.

Subclass :class:`StoreContract` in a test module and implement :meth:`~StoreContract.make_store`
(a new, empty store with the given analyzer and BM25 parameters); pytest collects the subclass's
tests (name it ``Test...``). The suite builds a :class:`~langchain_fusion.FusionIndex` over the
store and checks, against a brute-force reference (:class:`~langchain_fusion.testing.reference.Reference`):
fused results (every method, several alphas, ``fetch_k`` bounded and None), relevance floors,
diversity, duplicates, filters, upserts, deletes, score provenance, ``explain``, and that any
sequence of adds and deletes gives the same results as a fresh build over the same documents.
langchain-fusion's own stores (in process and Milvus) pass it in its test suite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FusionStore, Where
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.settings import BM25Params
from langchain_fusion.testing.embeddings import HashingEmbeddings
from langchain_fusion.testing.reference import WORDS, Language, Reference, assert_same, corpus, results

ALPHAS = [0.0, 0.3, 0.5, 0.8, 1.0]
"""The weights of the vector side the fused results are compared at."""


class StoreContract(ABC):
    """Every store passes these. Subclasses implement :meth:`make_store` (and may set the class attributes below)."""

    params = BM25Params(k1=0.9, b=0.4)
    """The BM25 parameters of the stores the suite makes."""
    whole_corpus: int | None = None
    """The fetch_k that scores every row (None in process; a store that refuses None sets a number > corpus)."""

    language: Language = WORDS
    """What the documents and queries are written in (:data:`CJK` runs the suite on Chinese, Japanese and Korean)."""

    @abstractmethod
    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        """A new, empty store of the engine under test, analysing with ``analyzer`` and scoring with ``bm25_params``."""

    def corpus(self, seed: int, size: int, prefix: str = "d") -> list[Document]:
        """:func:`corpus` in the suite's :attr:`language`."""
        return corpus(seed, size, prefix, self.language)

    def new_index(self, docs: list[Document] | None = None) -> FusionIndex:
        """A FusionIndex (fake embeddings) over a new store of :meth:`make_store`, holding ``docs``."""
        index = FusionIndex(HashingEmbeddings(), store=self.make_store(Analyzer(), self.params))
        if docs:
            index.add_documents(docs)
        return index

    # --- fused results equal the brute-force reference ------------------------------------------

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_fused_results_equal_the_reference(self, method: str) -> None:
        """Each fusion method, at every alpha, over the whole corpus and over a bounded pool holding every row."""
        docs = self.corpus(1, 90)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)
        for query in self.language.queries:
            for alpha in ALPHAS:
                expected = reference.search(query, k=8, alpha=alpha, method=method)
                assert_same(results(index, query, k=8, alpha=alpha, method=method, fetch_k=self.whole_corpus), expected)
                # fetch_k >= corpus size: the bounded pool holds every candidate too.
                assert_same(results(index, query, k=8, alpha=alpha, method=method, fetch_k=200), expected)

    def test_floors_and_diversity_equal_the_reference(self) -> None:
        """Relevance floors, maximal marginal relevance and the per-source cap, over the whole corpus."""
        docs = self.corpus(13, 60)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)
        row = {d.id: i for i, d in enumerate(docs)}
        for query in self.language.queries[:4]:
            cosine, bm25 = reference.cosine(query), reference.bm25(query)
            # Floors halfway between two observed scores, so float rounding cannot move a document across one.
            vector_floor = float(np.mean(np.sort(cosine)[29:31]))
            matched = np.sort(bm25[bm25 > 0])
            bm25_floor = float(np.mean(matched[len(matched) // 2 - 1 : len(matched) // 2 + 1]))
            for alpha in (0.0, 0.5, 1.0):
                ranked = reference.search(query, k=len(docs), alpha=alpha, method="weighted")

                passes = ((alpha > 0) & (cosine >= vector_floor)) | ((alpha < 1) & (bm25 > 0) & (bm25 >= bm25_floor))
                got = results(
                    index,
                    query,
                    k=6,
                    alpha=alpha,
                    fetch_k=self.whole_corpus,
                    min_vector_score=vector_floor,
                    min_bm25_score=bm25_floor,
                )
                assert_same(got, [(i, s) for i, s in ranked if passes[row[i]]][:6])
                counts: Counter[str] = Counter()
                capped = []
                for doc_id, score in ranked:
                    source = docs[row[doc_id]].metadata["source"]
                    if counts[source] < 2:
                        counts[source] += 1
                        capped.append((doc_id, score))
                assert_same(
                    results(index, query, k=7, alpha=alpha, fetch_k=self.whole_corpus, max_per_source=2), capped[:7]
                )
            ranked = reference.search(query, k=len(docs), alpha=0.5, method="weighted")
            lambda_one = results(index, query, k=6, fetch_k=self.whole_corpus, lambda_mult=1.0)
            assert_same(lambda_one, ranked[:6])
            fused = np.array([s for _, s in ranked])
            relevance = (fused - fused.min()) / (fused.max() - fused.min())
            vectors = reference.vectors[[row[i] for i, _ in ranked]]
            picked = [0]
            while len(picked) < 5:
                closest = np.max(vectors @ vectors[picked].T, axis=1)
                score = 0.5 * relevance - 0.5 * closest
                score[picked] = -np.inf
                picked.append(int(np.argmax(score)))
            diverse = results(index, query, k=5, fetch_k=self.whole_corpus, lambda_mult=0.5)
            assert [i for i, _ in diverse] == [ranked[p][0] for p in picked]
            vector_side = index.as_retriever(search_type="mmr", alpha=1.0, k=4, fetch_k=10).invoke(query)
            assert [d.id for d in index.max_marginal_relevance_search(query, k=4, fetch_k=10)] == [
                d.id for d in vector_side
            ]

    def test_bounded_pool_scores_every_candidate_on_both_sides(self) -> None:
        """A candidate found by one side carries its real score on the other side too, not 0."""
        docs = self.corpus(2, 120)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)
        for query in self.language.queries[:4]:
            cosine, bm25 = reference.cosine(query), reference.bm25(query)
            by_id = {d.id: i for i, d in enumerate(docs)}
            for doc in index.as_retriever(k=10, fetch_k=5).invoke(query):
                row = by_id[doc.id]
                assert doc.metadata[keys.VECTOR_SCORE] == pytest.approx(cosine[row], abs=1e-5)
                assert doc.metadata[keys.BM25_SCORE] == pytest.approx(bm25[row], abs=1e-4)

    def test_ties_at_the_edge_of_a_sides_pool_do_not_move_the_scores(self) -> None:
        """Rows tied at a side's fetch_k-th score all enter the pool, so no engine's tie order changes a score.

        Many short chunks share their BM25 score; the store's index and an in-process one built in
        the reverse order (another tie order) give every returned document the same fused score.
        """
        words = self.language.vocabulary
        sep = self.language.separator
        docs = [
            Document(id=f"tie{i}", page_content=sep.join([words[i % 3], words[3 + i % 7], f"only{i}"]))
            for i in range(40)
        ]
        index = self.new_index(docs)
        other = FusionIndex(HashingEmbeddings(), store=LocalStore(Analyzer(), self.params))
        other.add_documents(list(reversed(docs)))
        for query in (words[0], sep.join([words[1], words[4]]), sep.join([words[2], words[5], words[8]])):
            for fetch_k in (2, 5, 9):
                got = dict(results(index, query, k=30, fetch_k=fetch_k))
                expected = dict(results(other, query, k=30, fetch_k=fetch_k))
                assert set(got) == set(expected), (query, fetch_k)
                for doc_id, score in got.items():
                    assert abs(score - expected[doc_id]) <= 1e-6, (query, fetch_k, doc_id)

    def test_provenance_on_every_result(self) -> None:
        """Every result carries every score key, the fusion method and a fused score in [0, 1]."""
        index = self.new_index(self.corpus(3, 40))
        for doc in index.as_retriever(k=5).invoke("w1 w2"):
            for key in keys.SCORE_KEYS:
                assert key in doc.metadata
            assert doc.metadata[keys.FUSION_METHOD] == "weighted"
            assert 0.0 <= doc.metadata[keys.FUSION_SCORE] <= 1.0

    def test_results_are_copies(self) -> None:
        """Changing a returned document changes nothing the next search returns."""
        index = self.new_index(self.corpus(4, 30))
        first = index.as_retriever(k=3).invoke("w1")
        first[0].metadata["changed"] = True
        first[0].page_content = "changed"
        again = index.as_retriever(k=3).invoke("w1")
        assert "changed" not in again[0].metadata and again[0].page_content != "changed"

    def test_documents_said_to_be_new_are_new_objects(self) -> None:
        """A view with ``documents_are_new`` gets its results' scores written into them in place."""
        view = self.new_index(self.corpus(4, 30)).view()
        if not view.documents_are_new:
            pytest.skip("this store's views share their documents: results are copies of them")
        keys_ = view.select(Where())[:5]
        first, again = view.documents(keys_), view.documents(keys_)
        assert len(first) == 5 and first == again
        assert not any(a is b or a.metadata is b.metadata for a, b in zip(first, again, strict=True))

    def test_copies_of_one_text_are_returned_once(self) -> None:
        """The same text under several sources: one result with its own scores, the other copies in also_in."""
        docs = self.corpus(5, 30)
        shared = docs[0].page_content
        copies = [
            Document(id=f"copy{i}", page_content=shared, metadata={"source": f"copy{i}.txt", "bucket": 0})
            for i in range(3)
        ]
        index = self.new_index(docs + copies)
        group = {docs[0].id, *(c.id for c in copies)}
        for duplicates in ("exact", "near"):
            every = index.as_retriever(k=len(docs) + 3, duplicates="keep").invoke(shared)
            assert {d.id for d in every[:4]} == group
            found = index.as_retriever(k=6, duplicates=duplicates, near_duplicate_similarity=0.9999).invoke(shared)
            assert found[0].id in group and len(found) == 6
            assert found[0].metadata[keys.FUSION_SCORE] == pytest.approx(every[0].metadata[keys.FUSION_SCORE])
            assert {c["id"] for c in found[0].metadata[keys.ALSO_IN]} == group - {found[0].id}
            assert [d.id for d in found[1:]] == [d.id for d in every if d.id not in group][:5]

    def test_explain_agrees_with_the_search(self) -> None:
        """index.explain says "returned at rank r" exactly when the search returns the document there."""
        docs = self.corpus(6, 40)
        index = self.new_index(docs)
        query = self.language.queries[0]
        seen = set()
        for options in (
            {"k": 4, "fetch_k": 4},
            {"k": 4, "max_per_source": 1, "fetch_k": 10},
            {"k": 4, "filter": {"bucket": 1}, "min_bm25_score": 1.0},
            {"k": 3, "lambda_mult": 0.3, "fetch_k": 40},
        ):
            returned = [d.id for d in index.as_retriever(**options).invoke(query)]
            for doc_id in [d.id or "" for d in docs]:
                explanation = index.explain(query, doc_id, **options)
                seen.add(explanation.verdict)
                assert (explanation.verdict == "returned") == (doc_id in returned), (options, explanation)
                if doc_id in returned:
                    assert explanation.rank == returned.index(doc_id) + 1
                if explanation.verdict == "outside_pool":
                    assert explanation.vector_rank is not None and explanation.vector_rank > 4
        assert {"returned", "outside_pool", "filtered", "capped", "not_picked_by_mmr"} <= seen, seen

    # --- filters -------------------------------------------------------------------------------

    @pytest.mark.parametrize("spec", [{"bucket": 1}, {"bucket": [0, 2]}, {"source": "s3.txt", "bucket": 0}])
    def test_filters_apply_before_ranking(self, spec: dict[str, Any]) -> None:
        """A metadata filter selects the rows first: the best allowed rows, not the allowed among the best."""
        docs = self.corpus(5, 90)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)

        def matches(doc: Document) -> bool:
            return all(
                doc.metadata.get(key) in (value if isinstance(value, list) else [value]) for key, value in spec.items()
            )

        allowed = np.array([matches(d) for d in docs])
        for query in self.language.queries[:4]:
            for alpha in (0.0, 0.5, 1.0):
                expected = reference.search(query, k=6, alpha=alpha, method="weighted", allowed=allowed)
                got = results(index, query, k=6, alpha=alpha, fetch_k=self.whole_corpus, filter=spec)
                assert_same(got, expected)
                assert all(matches(d) for d in index.as_retriever(k=6, alpha=alpha, filter=spec).invoke(query))

    def test_filter_values_match_as_python_equality_does(self) -> None:
        """``1 == 1.0 == True``, ``"1" != 1``, None matches a null (not a missing key), lists mix types."""
        stored: list[Any] = [1, True, 1.0, "1", None, 0, False, 0.0, 2.5, "2.5", "x", [1], {"a": 1}, 2**60, -3]
        docs = [Document(id=f"v{i}", page_content="w1 w2", metadata={"k": value}) for i, value in enumerate(stored)]
        docs.append(Document(id="missing", page_content="w1 w2", metadata={"other": 1}))
        index = self.new_index(docs)
        specs: list[Any] = [1, True, 1.0, "1", None, 0, False, 2.5, "2.5", -3, 2**60, 2**60 + 1]
        specs += [[1, "1"], [None, "x"], [2.5, 2, "x"], [False, 2.5], [], [[1]]]
        for value in specs:
            choices = value if isinstance(value, list) else [value]
            expected = sorted(
                d.id or "" for d in docs if "k" in d.metadata and any(d.metadata["k"] == c for c in choices)
            )
            if any(isinstance(c, list) for c in choices):
                with pytest.raises(InvalidParameterError):
                    index.as_retriever(filter={"k": value}).invoke("w1")
                continue
            view = index.view()
            assert sorted(d.id or "" for d in view.documents(view.select(Where(metadata={"k": value})))) == expected
            found = index.as_retriever(k=len(docs), filter={"k": value}, duplicates="keep").invoke("w1")
            assert sorted(d.id or "" for d in found) == expected, value

    def test_a_filter_that_matches_nothing(self) -> None:
        """No row matches: no results, no error."""
        index = self.new_index(self.corpus(6, 20))
        assert index.as_retriever(filter={"bucket": 99}).invoke("w1") == []

    # --- updates and deletes -------------------------------------------------------------------

    def test_any_sequence_of_adds_and_deletes_equals_a_fresh_build(self) -> None:
        """Random adds and deletes, then every search equals that of an index built fresh from the live documents."""
        rng = np.random.default_rng(7)
        index = self.new_index(self.corpus(7, 60))
        live = {d.id or "": d for d in self.corpus(7, 60)}
        for step in range(6):
            added = self.corpus(100 + step, int(rng.integers(1, 25)), prefix=f"a{step}-")
            index.add_documents(added)
            live.update({d.id or "": d for d in added})
            victims = list(rng.choice(sorted(live), size=int(rng.integers(1, 15)), replace=False))
            assert index.remove(victims) == len(victims)
            for victim in victims:
                del live[victim]
        fresh = self.new_index(list(index.documents))
        assert sorted(d.id or "" for d in index.documents) == sorted(live)
        for query in self.language.queries:
            for alpha in (0.0, 0.5, 1.0):
                for fetch_k in (100, self.whole_corpus):
                    assert_same(
                        results(index, query, k=10, alpha=alpha, fetch_k=fetch_k),
                        results(fresh, query, k=10, alpha=alpha, fetch_k=fetch_k),
                    )

    def test_upsert_replaces_a_document(self) -> None:
        """An upsert replaces the text, metadata and both sides' rows of an id, as a fresh build would hold them."""
        docs = self.corpus(8, 30)
        index = self.new_index(docs)
        changed = Document(id=docs[4].id, page_content="zebra zebra w1", metadata={"bucket": 9})
        index.upsert_documents([changed])
        assert len(index) == 30
        assert index.get_by_ids([docs[4].id or ""])[0].page_content == "zebra zebra w1"
        top = index.as_retriever(k=1, alpha=0.0).invoke("zebra")
        assert [d.id for d in top] == [docs[4].id]
        assert index.as_retriever(k=30, filter={"bucket": 9}).invoke("w1")[0].id == docs[4].id
        expected = [*[d for d in docs if d.id != changed.id], changed]
        fresh = self.new_index(expected)
        for query in self.language.queries[:3]:
            assert_same(
                results(index, query, k=10, fetch_k=self.whole_corpus),
                results(fresh, query, k=10, fetch_k=self.whole_corpus),
            )

    def test_deleted_documents_are_gone_everywhere(self) -> None:
        """Deleted ids are found by no lookup and no search, on either side, with any pool."""
        docs = self.corpus(9, 40)
        index = self.new_index(docs)
        victims = [d.id or "" for d in docs[::4]]
        index.delete(victims)
        assert len(index) == 30
        assert index.get_by_ids(victims) == []
        for query in self.language.queries:
            for alpha in (0.0, 0.5, 1.0):
                for fetch_k in (5, self.whole_corpus):
                    found = index.as_retriever(k=40, alpha=alpha, fetch_k=fetch_k).invoke(query)
                    assert not {d.id for d in found} & set(victims)

    def test_ids_are_the_documents_ids(self) -> None:
        """``view.ids`` (what evaluation sweeps read) names the same documents as ``view.documents``."""
        docs = self.corpus(14, 30)
        index = self.new_index(docs)
        deleted = {d.id or "" for d in docs[::3]}
        index.delete(sorted(deleted))
        view = index.store.view()
        wanted = [d.id or "" for d in docs[::-2]]  # live and deleted, out of row order
        keys = view.keys_of(wanted)
        keys = keys[keys >= 0]
        assert view.ids(keys) == [d.id for d in view.documents(keys)] == [i for i in wanted if i not in deleted]
        assert view.ids(keys[:0]) == []

    def test_ids_longer_than_512_characters_are_refused_alike(self) -> None:
        """Milvus's key holds 512 characters: every store refuses a longer id the same way, before any write."""
        index = self.new_index(self.corpus(15, 3))
        longest, wide = "i" * 512, "東" * 512
        index.add_documents([Document(id=longest, page_content="w1 w2"), Document(id=wide, page_content="w3")])
        assert [d.id for d in index.get_by_ids([longest, wide])] == [longest, wide]
        for too_long in ("i" * 513, "é" * 600):
            with pytest.raises(
                InvalidParameterError,
                match=r"document 1 of this batch: its id has \d+ characters; "
                r"ids are at most 512",
            ):
                index.add_documents([Document(id="fine", page_content="w4"), Document(id=too_long, page_content="w5")])
            with pytest.raises(InvalidParameterError, match=r"ids are at most 512"):
                index.add_texts(["w6"], ids=[too_long])
        assert len(index) == 5 and not index.get_by_ids(["fine"])  # all or nothing

    def test_delete_everything_then_add(self) -> None:
        """A store emptied by deletes searches as an empty one, and takes new documents."""
        docs = self.corpus(10, 12)
        index = self.new_index(docs)
        index.delete([d.id or "" for d in docs])
        assert len(index) == 0 and index.as_retriever().invoke("w1") == []
        index.add_documents(self.corpus(11, 5))
        assert len(index) == 5 and index.as_retriever(k=2).invoke("w1")

    def test_delete_of_unknown_ids_removes_nothing(self) -> None:
        """Unknown ids are ignored (LangChain's contract) and counted as not deleted."""
        docs = self.corpus(12, 10)
        index = self.new_index(docs)
        assert index.store.delete(["nope", "also-nope"]) == 0
        assert len(index) == 10

    def test_empty_store(self) -> None:
        """A new store holds nothing and finds nothing."""
        index = self.new_index()
        assert len(index) == 0
        assert index.as_retriever().invoke("w1") == []
