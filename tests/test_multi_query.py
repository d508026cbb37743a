"""Multi-query fusion: rewrites parsed, each searched, weighted RRF, failures and hangs never fail the query."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import Field

from langchain_fusion import (
    ContextWindowRetriever,
    FusionIndex,
    FusionRetriever,
    InvalidParameterError,
    MultiQueryFusionRetriever,
    RetryPolicy,
)
from langchain_fusion import metadata as keys
from langchain_fusion._checks import MAX_REWRITES, check_rewrites
from langchain_fusion.retrievers.multi_query import parse_rewrites
from langchain_fusion.search.fusion import weighted_rrf
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import RatingModel, RunRecorder

NO_RETRY = RetryPolicy(max_attempts=1)


def writer(answer: Any, **options: Any) -> RatingModel:
    """A chat model answering every prompt with ``answer`` (text, or an exception to raise)."""
    return RatingModel(rule=lambda prompt: answer, structured=False, **options)


class TestParseRewrites:
    @pytest.mark.parametrize(
        ("answer", "expected"),
        [
            ("feline purring\nwhy cats purr", ["feline purring", "why cats purr"]),
            ("1. feline purring\n2) why cats purr\n(3) cat sounds", ["feline purring", "why cats purr", "cat sounds"]),
            ("- feline purring\n* why cats purr\n\u2022 cat sounds", ["feline purring", "why cats purr", "cat sounds"]),
            ("Query 1: feline purring\nQ2: why cats purr", ["feline purring", "why cats purr"]),
            ("\n\n  feline purring  \n\n\nwhy   cats purr\n", ["feline purring", "why cats purr"]),
            ('"feline purring"\n\u201cwhy cats purr\u201d', ["feline purring", "why cats purr"]),
            ("Here are 3 rewrites:\nfeline purring\nwhy cats purr", ["feline purring", "why cats purr"]),
            ("feline purring\nFeline purring!\nfeline  purring", ["feline purring"]),
            ("Do cats purr?\ndo cats purr\nfeline purring", ["feline purring"]),  # the question itself
            ("a\nb\nc\nd\ne", ["a", "b", "c"]),  # at most n
            (AIMessage(content="1. a\n2. b"), ["a", "b"]),
            (["a", "b\nc"], ["a", "b", "c"]),
            ("2021 cat census\n10 facts about cats", ["2021 cat census", "10 facts about cats"]),  # numbers kept
        ],
    )
    def test_parsed(self, answer: Any, expected: list[str]) -> None:
        assert parse_rewrites(answer, "Do cats purr?", 3) == expected

    def test_nothing_usable(self) -> None:
        assert parse_rewrites("Do cats purr?\n\n1.\n-", "Do cats purr?", 3) == []
        with pytest.raises(ValueError, match="empty"):
            parse_rewrites("   ", "q", 3)


class TestValidation:
    @pytest.mark.parametrize("n", [0, -1, MAX_REWRITES + 1, True, False, 1.0, "3", None])
    def test_n_is_strict(self, n: Any, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="n must be"):
            check_rewrites(n)
        with pytest.raises(InvalidParameterError, match="n"):
            MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("a"), n=n)
        retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("a"))
        with pytest.raises(InvalidParameterError, match="n must be"):
            retriever.invoke("cat", n=n)

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"k": 0}, "k"),
            ({"k": True}, "k"),
            ({"k_per_query": 0}, "k_per_query"),
            ({"rewrite_weight": 0.0}, "rewrite_weight"),
            ({"rewrite_weight": 1.5}, "rewrite_weight"),
            ({"rewrite_weight": True}, "rewrite_weight"),
            ({"timeout": 0}, "timeout"),
            ({"max_concurrency": 0}, "max_concurrency"),
        ],
    )
    def test_invalid_fields(self, options: dict[str, Any], message: str, animal_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("a"), **options)

    def test_prompt_variables(self, animal_index: FusionIndex) -> None:
        from langchain_core.prompts import ChatPromptTemplate

        with pytest.raises(InvalidParameterError, match="question"):
            MultiQueryFusionRetriever(
                retriever=animal_index.as_retriever(), llm=writer("a"), prompt=ChatPromptTemplate.from_template("{q}")
            )


def reference(index: FusionIndex, queries: list[str], depth: int, k: int, weight: float) -> list[tuple[str, float]]:
    """Weighted RRF computed by hand from each query's own search: (id, score), best first."""
    scores: dict[str, float] = {}
    first_seen: list[str] = []
    original_rank: dict[str, int] = {}
    for i, query in enumerate(queries):
        for rank, doc in enumerate(index.as_retriever(k=depth).invoke(query), 1):
            assert doc.id is not None
            if doc.id not in scores:
                scores[doc.id] = 0.0
                first_seen.append(doc.id)
            scores[doc.id] += (1.0 if i == 0 else weight) / (60 + rank)
            if i == 0:
                original_rank[doc.id] = rank
    order = sorted(first_seen, key=lambda d: (-scores[d], original_rank.get(d, 10**9), first_seen.index(d)))
    return [(d, scores[d]) for d in order[:k]]


class TestFusion:
    def test_matches_weighted_rrf_by_hand(self, animal_index: FusionIndex) -> None:
        llm = writer("1. parrots imitate speech\n2. dogs bark at the postman")
        retriever = MultiQueryFusionRetriever.from_llm(animal_index.as_retriever(), llm, n=2, k=5, k_per_query=6)
        docs = retriever.invoke("cat on the mat")
        queries = ["cat on the mat", "parrots imitate speech", "dogs bark at the postman"]
        expected = reference(animal_index, queries, depth=6, k=5, weight=0.5)
        assert [(d.id, d.metadata[keys.MULTI_QUERY_SCORE]) for d in docs] == [
            (i, pytest.approx(s)) for i, s in expected
        ]
        for doc in docs:
            assert doc.metadata[keys.MULTI_QUERY_REWRITES] == queries[1:]
            ranks = doc.metadata[keys.MULTI_QUERY_RANKS]
            assert len(ranks) == 3 and any(r is not None for r in ranks)
            assert keys.FUSION_SCORE in doc.metadata  # the wrapped retriever's provenance stays
        assert "2 different search queries" in llm.calls[0]  # n reached the prompt

    def test_given_rewrites_are_searched_without_the_model(self, animal_index: FusionIndex) -> None:
        llm = writer("1. parrots imitate speech\n2. dogs bark at the postman")
        retriever = MultiQueryFusionRetriever.from_llm(animal_index.as_retriever(), llm, n=2, k=5, k_per_query=6)
        asked = retriever.invoke("cat on the mat")
        again = retriever.invoke("cat on the mat", rewrites=asked[0].metadata[keys.MULTI_QUERY_REWRITES])
        assert len(llm.calls) == 1 and again == asked
        with pytest.raises(InvalidParameterError, match="rewrites must be a list of at most 10 non-empty queries"):
            retriever.invoke("cat", rewrites=["ok", " "])

    def test_a_deeper_search_for_windows_reuses_the_rewrites(self) -> None:
        from tests.test_context_window import _zebra_index

        index = _zebra_index()
        llm = writer("zebra grass")
        inner = MultiQueryFusionRetriever.from_llm(FusionRetriever(index=index, alpha=0.0), llm, n=1, k=3)
        passages = ContextWindowRetriever(retriever=inner, n=1).invoke("zebra")
        assert len(passages) == 3 and len(llm.calls) == 1  # searched deeper, one rewrite call

    def test_the_original_query_weighs_most(self) -> None:
        a, b = Document(id="a", page_content="a"), Document(id="b", page_content="b")

        class Lists(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
            ) -> list[Document]:
                return [a] if query == "original" else [b]

        retriever = MultiQueryFusionRetriever(retriever=Lists(), llm=writer("rewrite"), n=1, k=2)
        docs = retriever.invoke("original")
        assert [d.id for d in docs] == ["a", "b"]  # both rank 1 in one list: weight 1 beats 0.5
        same = MultiQueryFusionRetriever(retriever=Lists(), llm=writer("rewrite"), n=1, k=2, rewrite_weight=1.0)
        assert [d.id for d in same.invoke("original")] == ["a", "b"]  # a tie goes to the original's list

    def test_results_are_copies(self, animal_index: FusionIndex) -> None:
        documents = [Document(id="x", page_content="cat", metadata={"source": "s"})]

        class Same(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
            ) -> list[Document]:
                return documents

        docs = MultiQueryFusionRetriever(retriever=Same(), llm=writer("kitten")).invoke("cat")
        assert docs[0].metadata[keys.MULTI_QUERY_RANKS] == [1, 1]
        assert documents[0].metadata == {"source": "s"}

    def test_k_per_call_and_forwarded_options(self, animal_index: FusionIndex) -> None:
        retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("dogs\nparrots"))
        assert len(retriever.invoke("cat", k=2)) == 2
        assert len(retriever.invoke("cat", k=7)) == 7
        bm25_only = retriever.invoke("cat", alpha=0.0, k=3)
        assert all(d.metadata[keys.FUSION_METHOD] == "weighted" for d in bm25_only)
        assert retriever.invoke("cat", alpha=0.0, k=3) == bm25_only
        with pytest.raises(InvalidParameterError, match="alpha"):
            retriever.invoke("cat", alpha=2.0)

    def test_n_per_call(self, animal_index: FusionIndex) -> None:
        llm = writer("a\nb\nc\nd")
        retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=llm, n=3)
        docs = retriever.invoke("cat", n=1)
        assert docs[0].metadata[keys.MULTI_QUERY_REWRITES] == ["a"]
        assert "1 different search queries" in llm.calls[-1]

    async def test_async_twin_and_batch(self, animal_index: FusionIndex) -> None:
        retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("dogs\nparrots"))
        assert await retriever.ainvoke("cat") == retriever.invoke("cat")
        assert retriever.batch(["cat", "stock market"]) == [retriever.invoke("cat"), retriever.invoke("stock market")]
        assert await retriever.abatch(["cat"]) == [retriever.invoke("cat")]

    def test_blank_query_asks_no_model(self, animal_index: FusionIndex) -> None:
        llm = writer("dogs")
        assert MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=llm).invoke("  ") == []
        assert llm.calls == []


RANKINGS = {"q": ["a1", "a2", "a3", "b1", "a4", "c1", "b2"], "again": ["a3", "a4", "a1", "a2"]}
"""Each query's ranking; a document's source is its first letter."""


class Ranked(BaseRetriever):
    """Returns each query's ranking ``k`` deep, capped per source as our retrievers do; records the options."""

    max_per_source: int | None = None
    options: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.options.append(kwargs)
        cap = kwargs.get("max_per_source", self.max_per_source)
        counts: Counter[str] = Counter()
        found = []
        for name in RANKINGS.get(query, []):
            if cap is None or counts[name[0]] < cap:
                counts[name[0]] += 1
                found.append(Document(id=name, page_content=name, metadata={keys.SOURCE: name[0]}))
        return found[: kwargs.get("k", 4)]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return self._get_relevant_documents(query, run_manager=run_manager.get_sync(), **kwargs)


class TestMaxPerSource:
    """The cap holds for the fused list, not only for each query's search.

    Capped at 2, the query's search gives a1 a2 b1 c1 b2 and the rewrite's a3 a4; with equal
    weights a3 and a4 tie a1 and a2, so the fused top four would all come from source a.
    """

    def multi(self, **options: Any) -> MultiQueryFusionRetriever:
        return MultiQueryFusionRetriever(retriever=Ranked(**options), llm=writer("again"), n=1, k=4, rewrite_weight=1.0)

    def test_uncapped_the_top_is_one_source(self) -> None:
        assert [d.id for d in self.multi().invoke("q")] == ["a1", "a3", "a2", "a4"]

    def test_a_cap_per_call_caps_the_fused_list(self) -> None:
        retriever = self.multi()
        docs = retriever.invoke("q", max_per_source=2)
        assert [d.id for d in docs] == ["a1", "a3", "b1", "c1"]  # a2 and a4 skipped, k filled from further down
        assert [o["max_per_source"] for o in retriever.retriever.options] == [2, 2]  # and each search is capped

    def test_the_wrapped_retrievers_cap_caps_the_fused_list(self) -> None:
        assert [d.id for d in self.multi(max_per_source=2).invoke("q")] == ["a1", "a3", "b1", "c1"]
        assert [d.id for d in self.multi(max_per_source=1).invoke("q", max_per_source=2)] == ["a1", "a3", "b1", "c1"]
        capped_at_one = self.multi(max_per_source=1).invoke("q")
        assert [d.id for d in capped_at_one] == ["a1", "b1", "c1"]  # three sources: fewer than k
        assert capped_at_one[0].metadata[keys.MULTI_QUERY_RANKS] == [1, None]

    async def test_async_twin(self) -> None:
        retriever = self.multi(max_per_source=2)
        assert await retriever.ainvoke("q") == retriever.invoke("q")
        assert [d.id for d in await self.multi().ainvoke("q", max_per_source=2)] == ["a1", "a3", "b1", "c1"]

    def test_over_an_index(self, animal_docs: list[Document], embeddings: HashingEmbeddings) -> None:
        docs = [d.model_copy(update={"metadata": {keys.SOURCE: f"doc{i % 2}.txt"}}) for i, d in enumerate(animal_docs)]
        index = FusionIndex.from_documents(docs, embeddings)
        llm = writer("cats purring\ndogs and cats as friends")
        found = MultiQueryFusionRetriever.from_llm(index.as_retriever(max_per_source=2), llm, n=2, k=4).invoke("cat")
        assert Counter(d.metadata[keys.SOURCE] for d in found) == {"doc0.txt": 2, "doc1.txt": 2}

    def test_lambda_mult_reaches_each_search(self) -> None:
        retriever = self.multi()
        retriever.invoke("q", lambda_mult=0.5)
        assert [o["lambda_mult"] for o in retriever.retriever.options] == [0.5, 0.5]


def original_only(index: FusionIndex, query: str, k: int = 4) -> list[str | None]:
    return [d.id for d in index.as_retriever(k=20).invoke(query)[:k]]


class TestFailures:
    def test_a_failing_model_leaves_the_original_search(
        self, animal_index: FusionIndex, caplog: pytest.LogCaptureFixture
    ) -> None:
        llm = writer(RuntimeError("model exploded"))
        retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=llm, retry=NO_RETRY)
        with caplog.at_level(logging.WARNING):
            docs = retriever.invoke("cat")
        assert [d.id for d in docs] == original_only(animal_index, "cat")
        assert all(d.metadata[keys.MULTI_QUERY_REWRITES] == [] for d in docs)
        assert all(d.metadata[keys.MULTI_QUERY_RANKS] == [i] for i, d in enumerate(docs, 1))
        assert "no rewrites (RuntimeError: model exploded)" in caplog.text

    async def test_a_failing_model_async(self, animal_index: FusionIndex) -> None:
        retriever = MultiQueryFusionRetriever(
            retriever=animal_index.as_retriever(), llm=writer(RuntimeError("down")), retry=NO_RETRY
        )
        assert [d.id for d in await retriever.ainvoke("cat")] == original_only(animal_index, "cat")

    def test_a_rate_limit_is_retried(self, animal_index: FusionIndex) -> None:
        from tests.helpers.fake_chat_models import flaky

        llm = RatingModel(rule=flaky(lambda prompt: "dogs", failures=1), structured=False)
        retry = RetryPolicy(max_attempts=2, initial_delay=0.0)
        docs = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=llm, retry=retry).invoke("cat")
        assert docs[0].metadata[keys.MULTI_QUERY_REWRITES] == ["dogs"]
        assert len(llm.calls) == 2

    def test_a_hanging_model_times_out(self, animal_index: FusionIndex, caplog: pytest.LogCaptureFixture) -> None:
        llm = writer("dogs", delay=30.0)  # abandoned in a daemon thread after the timeout
        retriever = MultiQueryFusionRetriever(
            retriever=animal_index.as_retriever(), llm=llm, timeout=0.2, retry=NO_RETRY
        )
        with caplog.at_level(logging.WARNING):
            docs = retriever.invoke("cat")
        assert [d.id for d in docs] == original_only(animal_index, "cat")
        assert "no answer within 0.2 s" in caplog.text

    async def test_a_hanging_model_times_out_async(self, animal_index: FusionIndex) -> None:
        llm = writer("dogs", delay=30.0)  # the async call is cancelled
        retriever = MultiQueryFusionRetriever(
            retriever=animal_index.as_retriever(), llm=llm, timeout=0.2, retry=NO_RETRY
        )
        docs = await retriever.ainvoke("cat")
        assert [d.id for d in docs] == original_only(animal_index, "cat")
        assert all(d.metadata[keys.MULTI_QUERY_REWRITES] == [] for d in docs)

    def test_a_failed_rewrite_search_is_left_out(
        self, animal_index: FusionIndex, caplog: pytest.LogCaptureFixture
    ) -> None:
        inner = animal_index.as_retriever()

        class Fragile(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
            ) -> list[Document]:
                if query == "broken":
                    raise ConnectionError("search backend down")
                return inner.invoke(query, **kwargs)

        retriever = MultiQueryFusionRetriever(retriever=Fragile(), llm=writer("broken\ndogs"))
        with caplog.at_level(logging.WARNING):
            docs = retriever.invoke("cat")
        assert docs[0].metadata[keys.MULTI_QUERY_REWRITES] == ["dogs"]
        assert all(len(d.metadata[keys.MULTI_QUERY_RANKS]) == 2 for d in docs)
        assert "the search for rewrite 'broken' failed (ConnectionError: search backend down)" in caplog.text

    def test_the_original_search_failing_fails_the_query(self) -> None:
        class Down(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
            ) -> list[Document]:
                raise ConnectionError("search backend down")

        with pytest.raises(ConnectionError):
            MultiQueryFusionRetriever(retriever=Down(), llm=writer("dogs")).invoke("cat")

    def test_searches_are_bounded(self) -> None:
        lock = threading.Lock()
        active = {"now": 0, "max": 0}

        class Slow(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
            ) -> list[Document]:
                with lock:
                    active["now"] += 1
                    active["max"] = max(active["max"], active["now"])
                time.sleep(0.05)
                with lock:
                    active["now"] -= 1
                return [Document(id=query, page_content=query)]

        llm = writer("\n".join(f"rewrite {i}" for i in range(6)))
        docs = MultiQueryFusionRetriever(retriever=Slow(), llm=llm, n=6, k=10, max_concurrency=2).invoke("q")
        assert len(docs) == 7
        assert active["max"] <= 2


def test_the_model_and_the_searches_are_child_runs(animal_index: FusionIndex) -> None:
    runs = RunRecorder()
    retriever = MultiQueryFusionRetriever(retriever=animal_index.as_retriever(), llm=writer("dogs\nparrots"), n=2)
    retriever.invoke("cat", config={"callbacks": [runs]})
    roots = [run for run, parent in runs.parents.items() if parent is None]
    assert len(roots) == 1 and runs.kinds[roots[0]] == "retriever"
    root = roots[0]
    children = [run for run, parent in runs.parents.items() if parent == root]
    assert sorted(runs.kinds[c] for c in children) == ["chain", "retriever", "retriever", "retriever"]
    rewrite = next(c for c in children if runs.kinds[c] == "chain")
    assert "chat_model" in [runs.kinds[r] for r, p in runs.parents.items() if p == rewrite]


def test_weighted_rrf() -> None:
    ranks = np.array([[1, 0, 2], [0, 1, 1]])
    fused = weighted_rrf(ranks, np.array([1.0, 0.5]))
    assert fused.tolist() == pytest.approx([1 / 61, 0.5 / 61, 1 / 62 + 0.5 / 61])
    with pytest.raises(ValueError, match="one weight per list"):
        weighted_rrf(ranks, np.array([1.0]))


class TestMultiQueryStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[MultiQueryFusionRetriever]:
        return MultiQueryFusionRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        index = FusionIndex.from_documents([Document(page_content=t) for t in ANIMALS], HashingEmbeddings())
        return {"retriever": index.as_retriever(), "llm": writer("dogs and cats\nparrots")}

    @property
    def retriever_query_example(self) -> str:
        return "cat"
