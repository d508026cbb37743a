"""The store contract on Milvus (milvus-lite in process; a real server when MILVUS_URI is set)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_fusion import (
    Analyzer,
    BM25Params,
    EmbeddingsMismatchError,
    FusionError,
    FusionIndex,
    InvalidParameterError,
)
from langchain_fusion import metadata as keys
from langchain_fusion.stores.base import FusionStore
from langchain_fusion.testing import CJK, Reference, StoreContract, corpus, results
from tests.helpers.embeddings import FAKE_ID, HashingEmbeddings
from tests.helpers.milvus import skip_without_milvus

skip_without_milvus()

pytestmark = pytest.mark.milvus


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return os.environ.get("MILVUS_URI") or str(tmp_path_factory.mktemp("milvus") / "contract.db")


class TestMilvusStoreContract(StoreContract):
    whole_corpus = 1000  # fetch_k=None is refused on Milvus; a pool larger than the corpus is the same

    @pytest.fixture(autouse=True)
    def _uri(self, milvus_uri: str) -> None:
        self.uri = milvus_uri

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        from langchain_fusion.stores.milvus import MilvusStore

        return MilvusStore(self.uri, f"c{uuid.uuid4().hex[:12]}", analyzer=analyzer, bm25_params=bm25_params)

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_fused_results_equal_the_reference(self, method: str) -> None:
        """RRF ranks exact ties of a raw score by key, which Milvus assigns on first sight: compare its top sets."""
        if method != "rrf":
            super().test_fused_results_equal_the_reference(method)
            return
        docs = self.corpus(1, 90)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)
        agree = total = 0
        for query in self.language.queries:
            for alpha in (0.3, 0.5, 0.8):
                expected = {i for i, _ in reference.search(query, k=8, alpha=alpha, method="rrf")}
                got = {i for i, _ in results(index, query, k=8, alpha=alpha, method="rrf", fetch_k=self.whole_corpus)}
                agree += len(expected & got)
                total += len(expected)
        assert agree >= 0.9 * total


class TestMilvusStoreContractCJK(TestMilvusStoreContract):
    """The whole contract on Chinese, Japanese and Korean text: Milvus indexes our analyzer's tokens."""

    language = CJK


class TestMilvusSpecifics:
    def test_reopening_needs_no_reembedding(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"r{uuid.uuid4().hex[:12]}"
        first = FusionIndex.from_documents(corpus(1, 30), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        again = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        assert len(again) == 30
        assert [d.id for d in again.as_retriever(k=5).invoke("w1 w2")] == [
            d.id for d in first.as_retriever(k=5).invoke("w1 w2")
        ]

    def test_a_pymilvus_without_the_column_upsert_gets_the_same_rows_by_the_row_path(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore, connection

        monkeypatch.setattr(connection, "pymilvus_column_upsert", lambda client: None)
        docs = [
            Document(id=f"d{i}", page_content=f"w{i} shared", metadata={"source": f"s{i}", "n": i, "none": None})
            for i in range(5)
        ]
        name = f"p{uuid.uuid4().hex[:12]}"
        index = FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        assert sorted((d.id, d.metadata["n"], d.metadata["none"]) for d in index.documents) == [
            (f"d{i}", i, None) for i in range(5)
        ]
        assert index.as_retriever(k=1).invoke("w3")[0].id == "d3"

    def test_a_collection_made_before_the_new_analyzer_options_keeps_its_analysis(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"o{uuid.uuid4().hex[:12]}"
        texts = ["getLogger 東京は日本の首都", "get logger"]
        docs = [Document(id=f"d{i}", page_content=t) for i, t in enumerate(texts)]
        built = FusionIndex.from_documents(
            docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, name, analyzer=Analyzer(**Analyzer.LEGACY))
        )
        real_call = MilvusStore.call

        def described_as_before(self: MilvusStore, method: str, **kwargs: Any) -> Any:
            answer = real_call(self, method, **kwargs)
            if method == "describe_collection":
                record = json.loads(answer["description"])
                for option in Analyzer.LEGACY:
                    del record["langchain_fusion"]["analyzer"][option]
                answer = {**answer, "description": json.dumps(record)}
            return answer

        monkeypatch.setattr(MilvusStore, "call", described_as_before)
        reopened = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        assert reopened.analyzer.is_legacy and reopened.analyzer == built.analyzer
        assert [d.id for d in reopened.as_retriever(alpha=0.0, k=2).invoke("logger")] == ["d1"]

    def test_a_collection_made_before_languages_keeps_the_configured_language(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"o{uuid.uuid4().hex[:12]}"
        docs = [Document(id="d0", page_content="Москва running"), Document(id="d1", page_content="Москвы river")]
        analyzer = Analyzer(languages="configured")
        FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, name, analyzer=analyzer))
        real_call = MilvusStore.call

        def described_as_before(self: MilvusStore, method: str, **kwargs: Any) -> Any:
            answer = real_call(self, method, **kwargs)
            if method == "describe_collection":
                record = json.loads(answer["description"])
                del record["langchain_fusion"]["analyzer"]["languages"]  # what 0.4 recorded
                answer = {**answer, "description": json.dumps(record)}
            return answer

        monkeypatch.setattr(MilvusStore, "call", described_as_before)
        reopened = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        assert reopened.analyzer == analyzer
        assert [d.id for d in reopened.as_retriever(alpha=0.0, k=1).invoke("Москвы")] == ["d1"]

    def test_detected_languages_rank_as_in_process(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        texts = [
            "Местные каменщики построили старый каменный мост в 1820 году.",
            "Paikalliset kivimiehet rakensivat vanhan kivisillan vuonna 1820.",
            "Ντόπιοι χτίστες έχτισαν την παλιά πέτρινη γέφυρα το 1820.",
            "Local masons built the old stone bridge in 1820.",
        ]
        docs = [Document(id=f"d{i}", page_content=t) for i, t in enumerate(texts)]
        remote = FusionIndex.from_documents(
            docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, f"l{uuid.uuid4().hex[:12]}")
        )
        local = FusionIndex.from_documents(docs, HashingEmbeddings())
        for query in ("старого моста", "vanhan sillan", "της παλιάς γέφυρας", "old bridges"):
            found = [d.id for d in remote.as_retriever(alpha=0.0, k=2).invoke(query)]
            assert found == [d.id for d in local.as_retriever(alpha=0.0, k=2).invoke(query)]
            assert (
                found[0] == f"d{('старого моста', 'vanhan sillan', 'της παλιάς γέφυρας', 'old bridges').index(query)}"
            )

    def test_callable_filters_and_whole_corpus_are_refused(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex.from_documents(
            corpus(2, 10), HashingEmbeddings(), store=MilvusStore(milvus_uri, f"f{uuid.uuid4().hex[:12]}")
        )
        with pytest.raises(InvalidParameterError, match="callable cannot run on a Milvus server"):
            index.as_retriever(filter=lambda m: True).invoke("w1")
        with pytest.raises(InvalidParameterError, match="fetch_k=None"):
            index.as_retriever(fetch_k=None).invoke("w1")

    def test_other_bm25_variants_are_refused(self, milvus_uri: str, tmp_path: Path) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        with pytest.raises(InvalidParameterError, match="lucene"):
            MilvusStore(milvus_uri, "x", bm25_params=BM25Params(method="bm25+"))


class TestMilvusErrors:
    """Server-side failures and mismatches are one-line FusionErrors, never pymilvus tracebacks."""

    def _name(self) -> str:
        return f"e{uuid.uuid4().hex[:12]}"

    def test_an_unreachable_server_is_named(self) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        with pytest.raises(FusionError, match=r"cannot reach Milvus at 'http://127\.0\.0\.1:9'") as caught:
            MilvusStore("http://127.0.0.1:9", "docs", timeout=2)
        assert "\n" not in str(caught.value)

    def test_a_lite_file_is_retried_while_its_server_starts(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first connection to a new Milvus Lite file can come before its socket exists."""
        import pymilvus
        from pymilvus.exceptions import MilvusException

        from langchain_fusion.stores.milvus import MilvusStore

        real = pymilvus.MilvusClient
        attempts: list[int] = []

        def slow_start(*args: object, **kwargs: object) -> object:
            attempts.append(1)
            if len(attempts) < 3:
                raise MilvusException(code=2, message="Fail connecting to server on unix:/tmp/x.sock")
            return real(*args, **kwargs)

        monkeypatch.setattr(pymilvus, "MilvusClient", slow_start)
        store = MilvusStore(milvus_uri, self._name())
        assert len(attempts) == 3 and store.is_lite

    def test_a_lite_file_that_cannot_be_opened_is_not_retried(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import pymilvus
        from pymilvus.exceptions import ConnectionConfigException

        from langchain_fusion.stores.milvus import MilvusStore

        attempts: list[int] = []

        def locked(*args: object, **kwargs: object) -> object:
            attempts.append(1)
            raise ConnectionConfigException(message="Open local milvus failed")

        monkeypatch.setattr(pymilvus, "MilvusClient", locked)
        with pytest.raises(FusionError, match="Open local milvus failed"):
            MilvusStore("./busy.db", self._name())
        assert len(attempts) == 1

    def test_a_collection_made_by_someone_else_is_refused(self, milvus_uri: str) -> None:
        from pymilvus import MilvusClient

        from langchain_fusion.stores.milvus import MilvusStore

        name = self._name()
        client = MilvusClient(uri=milvus_uri)
        client.create_collection(name, dimension=8)
        with pytest.raises(FusionError, match="was not made by langchain-fusion"):
            MilvusStore(milvus_uri, name)

    def test_another_model_or_dimension_is_refused(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = self._name()
        FusionIndex.from_documents(corpus(1, 8), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        with pytest.raises(EmbeddingsMismatchError, match="hashing-v2"):
            FusionIndex(HashingEmbeddings(model="hashing-v2"), store=MilvusStore(milvus_uri, name))
        with pytest.raises(EmbeddingsMismatchError, match="64-dimensional vectors"):
            FusionIndex.from_store(MilvusStore(milvus_uri, name), HashingEmbeddings(size=32))
        unchecked = FusionIndex(HashingEmbeddings(size=32), store=MilvusStore(milvus_uri, name))
        with pytest.raises(FusionError, match=r"dimension 64; got an array of shape \(1, 32\)"):
            unchecked.add_texts(["more text"])

    def test_other_settings_on_an_existing_collection_are_refused(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = self._name()
        FusionIndex.from_documents(corpus(1, 4), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        with pytest.raises(FusionError, match=r"was built with bm25_params k1=0.9; this store asks for k1=1.5: open"):
            MilvusStore(milvus_uri, name, bm25_params=BM25Params(k1=1.5))

    def test_ids_and_filter_values_with_quotes_and_backslashes(self, milvus_uri: str) -> None:
        from langchain_core.documents import Document

        from langchain_fusion.stores.milvus import MilvusStore

        odd = ['say "hi"', "back\\slash", "tab\there", "ünï"]
        docs = [Document(id=i, page_content=f"quoted text {n}", metadata={"tag": i}) for n, i in enumerate(odd)]
        index = FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, self._name()))
        for value in odd:
            found = index.as_retriever(k=4, filter={"tag": value}).invoke("quoted text")
            assert [d.id for d in found] == [value]
        assert sorted(d.id or "" for d in index.get_by_ids(odd)) == sorted(odd)
        assert index.remove(odd[:2]) == 2 and len(index) == 2
        with pytest.raises(FusionError, match="without line breaks"):
            index.add_documents([Document(id="two\nlines", page_content="x")])
        if index.store.is_lite:  # type: ignore[attr-defined]
            with pytest.raises(FusionError, match=r"Milvus Lite cannot upsert ids containing an apostrophe"):
                index.add_documents([Document(id="it's", page_content="x")])
        else:
            index.add_documents([Document(id="it's", page_content="x")])
            assert [d.id for d in index.get_by_ids(["it's"])] == ["it's"]

    def test_a_candidate_deleted_between_calls_scores_zero(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex.from_documents(
            corpus(1, 20), HashingEmbeddings(), store=MilvusStore(milvus_uri, f"d{uuid.uuid4().hex[:12]}")
        )
        view = index.view()
        scorer = view.vector(index.embed_query("w1 w2"))
        keys, scores = scorer.top(5)
        index.remove(view.ids(keys[:1]))  # another client's delete, between this query's calls
        completed = scorer.scores(keys)
        assert completed[0] == 0.0
        assert completed[1:] == pytest.approx(scores[1:], abs=1e-5)

    def test_bulk_reads_page_by_id_whatever_the_ids(self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """Listing, select, id lists and delete-all in pages of 3: the id cursor escapes quotes and backslashes."""
        from langchain_core.documents import Document

        from langchain_fusion.stores import milvus
        from langchain_fusion.stores.base import Where

        monkeypatch.setattr(milvus.reads, "PAGE", 3)
        odd = ['say "hi"', 'say "hi" again', "back\\slash", "back\\slash\\", "tab\there", "ünï", "a", "a b", "Z"]
        docs = [Document(id=i, page_content=f"text {n}", metadata={"even": n % 2 == 0}) for n, i in enumerate(odd)]
        index = FusionIndex.from_documents(
            docs, HashingEmbeddings(), store=milvus.MilvusStore(milvus_uri, self._name())
        )
        assert sorted(d.id or "" for d in index.documents) == sorted(odd)
        view = index.view()
        assert sorted(view.ids(view.select(Where(metadata={"even": True})))) == sorted(odd[::2])
        assert [d.id for d in index.get_by_ids(odd)] == odd
        assert index.store.delete([*odd[:4], *odd[:4], "unknown"]) == 4
        assert index.store.clear() == len(odd) - 4 and len(index) == 0

    def test_a_delete_that_leaves_rows_behind_is_an_error(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        store = MilvusStore(milvus_uri, self._name())
        FusionIndex.from_documents(corpus(1, 6), HashingEmbeddings(), store=store)
        ids = [d.id or "" for d in FusionIndex(HashingEmbeddings(), store=store).documents]
        real_call = MilvusStore.call

        def deletes_nothing(self: MilvusStore, method: str, **kwargs: Any) -> Any:
            return {"delete_count": 0} if method == "delete" else real_call(self, method, **kwargs)

        monkeypatch.setattr(MilvusStore, "call", deletes_nothing)
        with pytest.raises(FusionError, match=r"Milvus deleted 0 of 6 rows .* 6 are still there"):
            store.delete(ids)
        with pytest.raises(FusionError, match=r"deleting every row .* left 6 of 6 rows"):
            store.clear()


class _Recorder:
    """Stands for a store's pymilvus client and records each call: method, thread, and its filter."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[tuple[str, int, str]] = []
        self.arguments: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, threading.get_ident(), str(kwargs.get("filter", ""))))
            self.arguments.append(kwargs)
            return method(*args, **kwargs)

        return recorded


class TestMilvusRoundTrips:
    """A fused query is two searches in flight at once, then one completion: no count, nothing on the event loop."""

    @pytest.fixture
    def index(self, milvus_uri: str) -> FusionIndex:
        from langchain_fusion.stores.milvus import MilvusStore

        store = MilvusStore(milvus_uri, f"t{uuid.uuid4().hex[:12]}")
        return FusionIndex.from_documents(corpus(3, 200), HashingEmbeddings(), store=store)

    def test_a_fused_query_is_three_calls_in_two_rounds(self, index: FusionIndex) -> None:
        expected = [d.id for d in index.as_retriever(k=5, fetch_k=20).invoke("w1 w2 w30")]
        recorder = index.store.client = _Recorder(index.store.client)  # type: ignore[attr-defined]
        assert [d.id for d in index.as_retriever(k=5, fetch_k=20).invoke("w1 w2 w30")] == expected
        methods = [name for name, _, _ in recorder.calls]
        assert methods == ["search", "search", "search"], recorder.calls
        first, second, completion = recorder.calls
        assert first[1] != second[1]  # the two sides were searched from two threads, side by side
        assert first[2] == second[2] == "" and completion[2].startswith("id in [")

    def test_mapping_chunks_to_files_reads_ids_and_metadata_only(self, index: FusionIndex) -> None:
        from langchain_fusion.stores.base import IdsBySource

        expected: dict[str, set[str]] = {}
        for doc in index.view().iter_documents():
            expected.setdefault(str(doc.metadata.get(keys.SOURCE, "")), set()).add(doc.id or "")
        recorder = index.store.client = _Recorder(index.store.client)  # type: ignore[attr-defined]
        view = index.view()
        assert isinstance(view, IdsBySource) and view.ids_by_source() == expected
        reads = [a for name, a in zip(recorder.calls, recorder.arguments, strict=True) if name[0] == "query"]
        assert reads and all(set(a["output_fields"]) <= {"id", "metadata", "count(*)"} for a in reads), reads

    def test_neighbours_are_bounded_queries_and_complete_when_positions_repeat(self, index: FusionIndex) -> None:
        extra = [
            Document(id=f"dup{i}", page_content=f"dup {i}", metadata={keys.SOURCE: "dup", keys.CHUNK_INDEX: i // 2})
            for i in range(6)
        ]
        extra.append(Document(id="solo", page_content="solo", metadata={keys.SOURCE: "solo", keys.CHUNK_INDEX: 0}))
        index.add_documents(extra)
        recorder = index.store.client = _Recorder(index.store.client)  # type: ignore[attr-defined]
        found = index.view().neighbours("dup", [0, 1, 2, 7])
        assert sorted(found) == [0, 1, 2]
        assert all(doc.id in {f"dup{2 * i}", f"dup{2 * i + 1}"} for i, doc in found.items())
        assert all(a.get("limit") for a in recorder.arguments), recorder.arguments
        single = index.view().neighbours("dup", [1])
        assert list(single) == [1] and single[1].id in {"dup2", "dup3"}
        recorder.calls.clear()
        assert [d.id for d in index.view().neighbours("solo", [0, 1]).values()] == ["solo"]
        assert [name for name, _, _ in recorder.calls] == ["query"]  # positions unique: one bounded query

    def test_the_async_path_makes_no_call_on_the_event_loop(self, index: FusionIndex) -> None:
        recorder = index.store.client = _Recorder(index.store.client)  # type: ignore[attr-defined]
        retriever = index.as_retriever(k=5, fetch_k=20)

        async def run() -> tuple[int, list[Document]]:
            return threading.get_ident(), await retriever.ainvoke("w1 w2 w30")

        loop_thread, found = asyncio.run(run())
        assert len(found) == 5 and recorder.calls
        assert all(thread != loop_thread for _, thread, _ in recorder.calls), recorder.calls
        again = asyncio.run(retriever.abatch(["w1", "w2 w3"]))
        assert [len(x) for x in again] == [5, 5]
        assert all(thread != loop_thread for _, thread, _ in recorder.calls[-6:])


class TestMilvusConsistency:
    def test_queries_use_the_store_level_and_write_checks_stay_strong(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"k{uuid.uuid4().hex[:12]}"
        FusionIndex.from_documents(corpus(4, 30), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        store = MilvusStore(milvus_uri, name, consistency="bounded")
        assert store.consistency == "Bounded"
        index = FusionIndex(HashingEmbeddings(), store=store)
        levels: list[tuple[str, Any]] = []
        client = store.client

        class Levels:
            def __getattr__(self, method: str) -> Any:
                def call(*args: Any, **kwargs: Any) -> Any:
                    levels.append((method, kwargs.get("consistency_level")))
                    return getattr(client, method)(*args, **kwargs)

                return call

        store.client = Levels()  # type: ignore[assignment]
        assert len(index.as_retriever(k=3, fetch_k=10).invoke("w1 w2 w3")) == 3
        assert index.get_by_ids(["d4-0"])[0].id == "d4-0"
        assert levels and all(level == "Bounded" for _, level in levels), levels
        levels.clear()
        assert store.delete(["d4-1", "d4-2"]) == 2 and len(index) == 28
        assert levels and all(level is None for _, level in levels), levels  # the collection's own: Strong

    def test_an_unknown_level_is_refused(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        with pytest.raises(InvalidParameterError, match="one of Strong, Bounded, Session, Eventually; got 'fresh'"):
            MilvusStore(milvus_uri, "x", consistency="fresh")


class TestMilvusDenseIndex:
    """vector_index and vector_search_params as the in-process store takes them, mapped to Milvus's indexes."""

    def _index(self, uri: str, name: str, docs: list[Document], **options: Any) -> FusionIndex:
        from langchain_fusion.stores.milvus import MilvusStore

        return FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(uri, name, **options))

    def _description(self, uri: str, name: str) -> dict[str, Any]:
        from pymilvus import MilvusClient

        return dict(json.loads(MilvusClient(uri=uri).describe_collection(name)["description"]))

    @pytest.mark.parametrize(
        ("vector_index", "params", "index_type", "build", "search"),
        [
            (None, None, "FLAT", {}, {}),
            ("HNSW32", "efSearch=200,efConstruction=64", "HNSW", {"M": 32, "efConstruction": 64}, {"ef": 200}),
            ("HNSW16,Flat", None, "HNSW", {"M": 16, "efConstruction": 128}, {"ef": 128}),
            ("IVF1024,Flat", "nprobe=16", "IVF_FLAT", {"nlist": 1024}, {"nprobe": 16}),
            ("diskann", "search_list=100", "DISKANN", {}, {"search_list": 100}),
            ("AUTOINDEX", None, "AUTOINDEX", {}, {}),
        ],
    )
    def test_faiss_names_map_to_milvus_indexes(
        self, vector_index: str | None, params: str | None, index_type: str, build: dict[str, int], search: Any
    ) -> None:
        from langchain_fusion.stores.milvus import DenseIndex

        dense = DenseIndex.parse(vector_index, params)
        assert (dense.index_type, dict(dense.build), dict(dense.search)) == (index_type, build, search)

    @pytest.mark.parametrize(
        ("vector_index", "params", "message"),
        [
            ("PQ16", None, "a Milvus vector_index is"),
            ("HNSW32", "efSearch=lots", "NAME=INTEGER"),
            (None, "x=1", "NAME"),
        ],
    )
    def test_other_indexes_and_parameters_are_refused(self, vector_index: Any, params: Any, message: str) -> None:
        from langchain_fusion.stores.milvus import DenseIndex

        with pytest.raises(InvalidParameterError, match=message):
            DenseIndex.parse(vector_index, params)

    def test_ivf_on_lite_gives_exact_scores_and_is_recorded(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        docs = corpus(5, 300)
        exact = self._index(milvus_uri, f"x{uuid.uuid4().hex[:12]}", docs)
        name = f"i{uuid.uuid4().hex[:12]}"
        ivf = self._index(milvus_uri, name, docs, vector_index="IVF8,Flat", vector_search_params="nprobe=8")
        if not ivf.store.is_lite:  # type: ignore[attr-defined]
            pytest.skip("checks Milvus Lite's own indexes")
        assert ivf.store.vector_index == "IVF_FLAT nlist=8, nprobe=8"  # type: ignore[attr-defined]
        local = FusionIndex.from_documents(docs, HashingEmbeddings())
        for query in ("w1 w2", "w7", "w3 w30 w31"):
            for alpha in (0.5, 1.0):
                a = exact.as_retriever(k=8, alpha=alpha, fetch_k=40).invoke(query)
                b = ivf.as_retriever(k=8, alpha=alpha, fetch_k=40).invoke(query)
                assert [d.id for d in a] == [d.id for d in b]  # nprobe = nlist searches every list
                assert [d.metadata["vector_score"] for d in a] == pytest.approx(
                    [d.metadata["vector_score"] for d in b], abs=1e-6
                )
                # Candidates rescored from the stored vectors as in process: the in-process scores' bits.
                by_id = {d.id: d.metadata["vector_score"] for d in local.as_retriever(k=300, alpha=1.0).invoke(query)}
                assert [d.metadata["vector_score"] for d in b] == [by_id[d.id] for d in b]
        description = self._description(milvus_uri, name)
        assert description["vector_index"] == {
            "index_type": "IVF_FLAT",
            "build": {"nlist": 8},
            "search": {"nprobe": 8},
            "requested": "IVF8,Flat",
        }
        assert description["format"] == 1 and description["library"]
        assert MilvusStore(milvus_uri, name).vector_index == "IVF_FLAT nlist=8, nprobe=8"
        reopened = MilvusStore(milvus_uri, name, vector_search_params="nprobe=2")
        assert reopened.vector_index == "IVF_FLAT nlist=8, nprobe=2"

    def test_lite_falls_back_to_flat_in_one_warning_and_keeps_what_was_asked(
        self, milvus_uri: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"h{uuid.uuid4().hex[:12]}"
        with caplog.at_level("WARNING", logger="langchain_fusion.stores.milvus"):
            index = self._index(milvus_uri, name, corpus(6, 20), vector_index="HNSW32")
        if not index.store.is_lite:  # type: ignore[attr-defined]
            pytest.skip("checks Milvus Lite's fallback")
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "falls back to exact FLAT" in warnings[0] and "'HNSW32'" in warnings[0]
        assert index.store.vector_index == "FLAT"  # type: ignore[attr-defined]
        assert self._description(milvus_uri, name)["vector_index"]["requested"] == "HNSW32"
        assert MilvusStore(milvus_uri, name, vector_index="HNSW32").vector_index == "FLAT"
        with pytest.raises(FusionError, match="was built with vector_index 'HNSW32'; this store asks for 'IVF8,Flat'"):
            MilvusStore(milvus_uri, name, vector_index="IVF8,Flat")


class TestMilvusOperations:
    def test_the_connection_waits_seconds_not_a_minute(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A server that accepts the connection and never answers is one line naming the URI after connect_timeout."""
        import pymilvus

        from langchain_fusion.stores.milvus import CONNECT_TIMEOUT, MilvusStore

        timeouts: list[object] = []
        real = pymilvus.MilvusClient

        def recorded(*args: Any, **kwargs: Any) -> Any:
            timeouts.append(kwargs.get("timeout"))
            return real(*args, **{**kwargs, "timeout": 1})  # the default is recorded, not waited for

        monkeypatch.setattr(pymilvus, "MilvusClient", recorded)
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(4)
            uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
            with pytest.raises(FusionError, match=f"cannot reach Milvus at '{uri}'") as caught:
                MilvusStore(uri, "docs", connect_timeout=1)
            with pytest.raises(FusionError, match=f"cannot reach Milvus at '{uri}'"):
                MilvusStore(uri, "docs")
        assert "\n" not in str(caught.value)
        assert timeouts == [1, CONNECT_TIMEOUT] and CONNECT_TIMEOUT <= 5

    def test_close_releases_the_store(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"c{uuid.uuid4().hex[:12]}"
        store = MilvusStore(milvus_uri, name)
        with FusionIndex.from_documents(corpus(7, 10), HashingEmbeddings(), store=store) as index:
            assert len(index.as_retriever(k=2).invoke("w1")) == 2
            index.store.check_reachable()
        with pytest.raises(FusionError, match=f"the Milvus store of '{name}' is closed"):
            index.as_retriever(k=2).invoke("w1")
        with pytest.raises(FusionError, match=r"does not answer: the Milvus store .* is closed"):
            index.store.check_reachable()
        index.close()  # twice is harmless
        assert len(FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))) == 10


class TestCollectionCreation:
    """New collections are created, indexed and loaded without pymilvus's half-second polls, or not at all."""

    def test_a_new_collection_is_indexed_and_loaded_at_once(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        store = MilvusStore(milvus_uri, f"c{uuid.uuid4().hex[:12]}")
        calls: list[str] = []
        real = store.client

        class Recorded:
            def __getattr__(self, method: str) -> Any:
                calls.append(method)
                return getattr(real, method)

        store.client = Recorded()
        FusionIndex.from_documents(corpus(3, 5), HashingEmbeddings(), store=store)
        assert calls.index("create_collection") < calls.index("create_index") < calls.index("load_collection")
        assert store.call("describe_index", collection_name=store.collection_name, index_name="vector")["state"] == (
            "Finished"
        )

    @pytest.mark.parametrize("failing", ["create_index", "load_collection", "failed index"])
    def test_a_collection_whose_indexes_or_load_fail_is_dropped(self, failing: str) -> None:
        from langchain_fusion.stores.milvus.schema import create_loaded_collection

        calls: list[str] = []

        def call(method: str, **kwargs: Any) -> Any:
            calls.append(method)
            if method == failing:
                raise FusionError(f"{method} failed")
            if method == "describe_index":
                return {
                    "state": "Failed" if failing == "failed index" else "Finished",
                    "index_state_fail_reason": "no disk",
                }
            return None

        index = [type("Param", (), {"index_name": "", "field_name": "vector"})()]
        with pytest.raises(FusionError, match=r"failed|no disk"):
            create_loaded_collection(call, "docs", object(), index, timeout=5)
        assert calls[0] == "create_collection" and calls[-1] == "drop_collection"


class TestMilvusReconnects:
    """A dropped channel is reconnected (waiting for a slow restart); a call is repeated only when that is harmless."""

    @pytest.fixture
    def lite(self, tmp_path: Path) -> str:
        if os.environ.get("MILVUS_URI"):
            pytest.skip("restarts a Milvus Lite server")
        return str(tmp_path / "restart.db")

    def test_a_restarted_server_is_reconnected_and_the_query_answered(
        self, lite: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        from milvus_lite.server_manager import server_manager_instance

        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings(), store=MilvusStore(lite, "docs"))
        expected = [d.id for d in index.as_retriever(k=3).invoke("w1 w2")]
        server_manager_instance.release_server(lite)  # the server process stops; a new one starts on reconnect
        with caplog.at_level("WARNING", logger="langchain_fusion.stores.milvus"):
            assert [d.id for d in index.as_retriever(k=3).invoke("w1 w2")] == expected
        assert any("dropped" in r.getMessage() and "reconnecting" in r.getMessage() for r in caplog.records)
        index.add_texts(["w1 w2 w3 again"], ids=["new"])  # writes go on over the new connection
        assert len(index) == 21

    def test_a_restarted_server_slow_to_come_up_is_waited_for(
        self, lite: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        # As on a loaded machine: the new server process opens its socket seconds after it is started.
        from milvus_lite import server as lite_server
        from milvus_lite.server_manager import server_manager_instance

        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings(), store=MilvusStore(lite, "docs"))
        expected = [d.id for d in index.as_retriever(k=3).invoke("w1 w2")]
        server_manager_instance.release_server(lite)
        real = lite_server.Server.args
        slow = ["sh", "-c", 'sleep 2; exec "$0" "$@"']
        monkeypatch.setattr(lite_server.Server, "args", property(lambda server: [*slow, *map(str, real.fget(server))]))
        with caplog.at_level("INFO", logger="langchain_fusion.stores.milvus"):
            assert [d.id for d in index.as_retriever(k=3).invoke("w1 w2")] == expected
        assert any("reconnected" in r.getMessage() for r in caplog.records)

    def test_a_side_searched_meanwhile_on_the_old_client_is_repeated(
        self, lite: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # What failed `make test` under load: the two sides search at once; one sees the drop and reconnects,
        # closing the old client, while the other's call on it ends "should create connection first".
        from pymilvus.exceptions import MilvusException

        from langchain_fusion.stores.milvus import MilvusStore
        from langchain_fusion.stores.milvus.connection import MilvusConnection

        store = MilvusStore(lite, "docs")
        index = FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings(), store=store)
        expected = [d.id for d in index.as_retriever(k=3).invoke("w1 w2")]
        real_new, old = MilvusConnection._new_client, store.client
        both_searching, reconnecting = threading.Barrier(2, timeout=120), threading.Event()
        arrived: list[str] = []
        order = threading.Lock()

        def reconnect(connection: MilvusConnection, timeout: float) -> Any:
            reconnecting.set()
            return real_new(connection, timeout)

        class OldClient:
            def __getattr__(self, method: str) -> Any:
                if method != "search":
                    return getattr(old, method)

                def search(**kwargs: Any) -> Any:
                    both_searching.wait()  # each side holds this client now
                    with order:
                        first = not arrived
                        arrived.append("search")
                    if first:
                        raise MilvusException(code=2, message="Fail connecting to server on unix:/gone.sock")
                    assert reconnecting.wait(120)
                    raise MilvusException(message="should create connection first")  # closed by the reconnect

                return search

            def close(self) -> None:
                pass

        monkeypatch.setattr(MilvusConnection, "_new_client", reconnect)
        store.client = OldClient()
        assert [d.id for d in index.as_retriever(k=3).invoke("w1 w2")] == expected
        assert arrived == ["search", "search"] and not isinstance(store.client, OldClient)

    def test_reconnects_back_off_until_the_calls_timeout(self, lite: str, monkeypatch: pytest.MonkeyPatch) -> None:
        from pymilvus.exceptions import MilvusException

        from langchain_fusion.stores.milvus import MilvusStore
        from langchain_fusion.stores.milvus.connection import MilvusConnection

        store = MilvusStore(lite, "docs")
        index = FusionIndex.from_documents(corpus(9, 12), HashingEmbeddings(), store=store)
        expected = [d.id for d in index.as_retriever(k=3).invoke("w1 w2")]
        real_new, real_client, attempts, pauses = MilvusConnection._new_client, store.client, [], []
        refusals = iter(range(3))  # the server refuses three connections, then answers

        def comes_up_late(connection: MilvusConnection, timeout: float) -> Any:
            attempts.append(timeout)
            if next(refusals, None) is not None:
                raise MilvusException(code=2, message="Fail connecting to server on unix:/gone.sock")
            return real_new(connection, timeout)

        monkeypatch.setattr(MilvusConnection, "_new_client", comes_up_late)
        monkeypatch.setattr("langchain_fusion.stores.milvus.connection.sleep", pauses.append)
        store.client = _DropsSearches(real_client)
        assert [d.id for d in index.as_retriever(k=3).invoke("w1 w2")] == expected
        assert len(attempts) == 4 and len(pauses) == 3
        assert pauses == sorted(pauses) and pauses[0] < pauses[-1]  # backing off
        assert all(0 < t <= store.connect_timeout for t in attempts)

    def test_a_server_that_stays_away_fails_the_call_and_the_next_call_reconnects(
        self, lite: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from pymilvus.exceptions import MilvusException

        from langchain_fusion.stores.milvus import MilvusStore
        from langchain_fusion.stores.milvus.connection import MilvusConnection

        store = MilvusStore(lite, "docs", timeout=30)
        index = FusionIndex.from_documents(corpus(9, 12), HashingEmbeddings(), store=store)
        expected = [d.id for d in index.as_retriever(k=3).invoke("w1 w2")]
        real_new, real_client = MilvusConnection._new_client, store.client
        clock = [0.0]  # a clock that moves only when the reconnect pauses: no wall-clock time in the test
        monkeypatch.setattr("langchain_fusion.stores.milvus.connection.monotonic", lambda: clock[0])
        monkeypatch.setattr(
            "langchain_fusion.stores.milvus.connection.sleep", lambda s: clock.__setitem__(0, clock[0] + s)
        )

        def away(connection: MilvusConnection, timeout: float) -> Any:
            raise MilvusException(code=2, message="Fail connecting to server on unix:/gone.sock")

        monkeypatch.setattr(MilvusConnection, "_new_client", away)
        store.client = _DropsSearches(real_client)
        with pytest.raises(FusionError, match=r"cannot reach it again within the 30 s timeout") as failed:
            index.as_retriever(k=3).invoke("w1 w2")
        assert "\n" not in str(failed.value) and clock[0] >= 30
        monkeypatch.setattr(MilvusConnection, "_new_client", real_new)  # the server is back
        assert [d.id for d in index.as_retriever(k=3).invoke("w1 w2")] == expected

    def test_a_call_that_is_not_repeatable_is_not_repeated_and_says_so(self, lite: str) -> None:
        from pymilvus.exceptions import MilvusException

        from langchain_fusion.stores.milvus import MilvusStore

        store = MilvusStore(lite, "docs")
        FusionIndex.from_documents(corpus(9, 5), HashingEmbeddings(), store=store)
        real = store.client
        made: list[str] = []

        class Drops:
            def __getattr__(self, method: str) -> Any:
                if method == "drop_collection":

                    def dropped(**kwargs: Any) -> Any:
                        made.append(method)
                        raise MilvusException(code=2, message="Fail connecting to server on unix:/gone.sock")

                    return dropped
                return getattr(real, method)

        store.client = Drops()
        with pytest.raises(FusionError, match=r"dropped during drop_collection on 'docs'; .* not repeated"):
            store.drop()
        assert made == ["drop_collection"] and not isinstance(store.client, Drops)  # reconnected, tried once
        assert len(FusionIndex(HashingEmbeddings(), store=MilvusStore(lite, "docs"))) == 5

    def test_a_call_longer_than_the_timeout_names_it(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"t{uuid.uuid4().hex[:12]}"
        FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        # Which call runs out first is a race (opening describes the collection; a quick answer may beat the
        # deadline): either way the error names the timeout.
        with pytest.raises(FusionError, match=r"took longer than the 1e-06 s timeout: allow more with \?timeout="):
            hurried = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name, timeout=1e-6))
            hurried.as_retriever(k=3).invoke("w1 w2")
        with pytest.raises(InvalidParameterError, match="timeout must be a positive number of seconds"):
            MilvusStore(milvus_uri, name, timeout=0)


QUIET_RUN = """
import sys
sys.path.insert(0, {repo!r})
from langchain_fusion import FusionIndex
from langchain_fusion.stores.milvus import MilvusStore
from tests.helpers.embeddings import HashingEmbeddings
from langchain_fusion.testing import corpus
index = FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings(), store=MilvusStore({uri!r}, "docs"))
print([d.id for d in index.as_retriever(k=3).invoke("w1 w2")])
"""


class TestMilvusLiteIsQuiet:
    """A successful Milvus Lite run prints nothing on stderr, so that errors look like errors."""

    @pytest.fixture
    def lite(self, tmp_path: Path) -> str:
        if os.environ.get("MILVUS_URI"):
            pytest.skip("about Milvus Lite")
        return str(tmp_path / "quiet.db")

    def test_no_warning_lines_on_a_successful_run(self, lite: str, tmp_path: Path) -> None:
        import subprocess
        import sys

        from tests.helpers.paths import REPO

        script = tmp_path / "run.py"
        script.write_text(QUIET_RUN.format(repo=str(REPO), uri=lite), encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=240)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("[") and done.stderr == ""

    def test_an_idle_lite_connection_sends_no_keepalive_pings(self, lite: str, monkeypatch: pytest.MonkeyPatch) -> None:
        # Milvus Lite's gRPC server allows a ping every 5 minutes without data; pymilvus pings every 10 s,
        # so an idle run was answered with GOAWAY too_many_pings (an error line on stderr).
        import grpc

        from langchain_fusion.stores.milvus import MilvusStore

        channels: list[dict[str, Any]] = []
        real = grpc.insecure_channel

        def recorded(target: str, options: Any = None, *args: Any, **kwargs: Any) -> Any:
            channels.append(dict(options or []))
            return real(target, options, *args, **kwargs)

        monkeypatch.setattr(grpc, "insecure_channel", recorded)
        MilvusStore(lite, "docs").close()
        assert channels
        for options in channels:
            assert options["grpc.keepalive_permit_without_calls"] is False
            assert options["grpc.keepalive_time_ms"] >= 5 * 60 * 1000


class TestMilvusPickle:
    def test_a_milvus_store_cannot_be_pickled_and_says_what_to_do(self, milvus_uri: str) -> None:
        import copy
        import pickle

        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, f"p{uuid.uuid4().hex[:12]}"))
        for attempt in (pickle.dumps, copy.deepcopy):
            with pytest.raises(FusionError, match=r"holds a connection.*open it again .* MilvusStore\("):
                attempt(index.as_retriever())


class TestMilvusFilters:
    def test_a_collection_made_before_null_keys_refuses_none_in_one_line(
        self, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"n{uuid.uuid4().hex[:12]}"
        docs = [Document(id="a", page_content="w1", metadata={"k": None}), Document(id="b", page_content="w1")]
        FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        real_call = MilvusStore.call

        def described_as_before(self: MilvusStore, method: str, **kwargs: Any) -> Any:
            answer = real_call(self, method, **kwargs)
            if method == "describe_collection":
                record = json.loads(answer["description"])
                answer = {**answer, "description": json.dumps({"langchain_fusion": record["langchain_fusion"]})}
            return answer

        monkeypatch.setattr(MilvusStore, "call", described_as_before)
        old = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        with pytest.raises(InvalidParameterError, match="made before langchain-fusion could filter on None"):
            old.as_retriever(filter={"k": None}).invoke("w1")
        assert [d.id for d in old.as_retriever(filter={"k": [1, "1"]}).invoke("w1")] == []


def _described_as(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Every store opened from now on reads its collection's description as ``change(description)`` makes it."""
    from langchain_fusion.stores.milvus import MilvusStore

    real_call = MilvusStore.call

    def described(self: MilvusStore, method: str, **kwargs: Any) -> Any:
        answer = real_call(self, method, **kwargs)
        if method == "describe_collection":
            record = json.loads(answer["description"])
            answer = {**answer, "description": json.dumps(change(record))}
        return answer

    monkeypatch.setattr(MilvusStore, "call", described)


class TestMilvusVersionRecord:
    """The collection records library, format, analyzer, model and dimension; opening checks them in one line."""

    @pytest.fixture
    def name(self, milvus_uri: str) -> str:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"v{uuid.uuid4().hex[:12]}"
        FusionIndex.from_documents(corpus(8, 6), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        return name

    def test_created_with_the_record(self, milvus_uri: str, name: str) -> None:
        from langchain_fusion import __version__
        from langchain_fusion.stores.locations import MilvusEngine
        from langchain_fusion.stores.milvus import FORMAT_VERSION, MilvusStore

        store = MilvusStore(milvus_uri, name)
        assert store.record is not None
        assert (store.record.library, store.record.format) == (__version__, FORMAT_VERSION)
        settings = store.record.settings
        assert (settings.embeddings_id, settings.dimension) == (FAKE_ID, 64)
        assert settings.analyzer == Analyzer() and store.record.requested == "Flat"
        described = MilvusEngine().describe("milvus+lite:x.db/" + name, store)
        assert described["collection"] == {
            "library": __version__,
            "format": FORMAT_VERSION,
            "vector_index": {"index_type": "FLAT", "build": {}, "search": {}, "requested": "Flat"},
        }

    def test_another_analyzer_is_refused_saying_what_differs_and_what_to_do(self, milvus_uri: str, name: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        with pytest.raises(FusionError) as caught:
            MilvusStore(milvus_uri, name, analyzer=Analyzer(language="german"))
        message = str(caught.value)
        assert "\n" not in message
        assert f"collection {name!r} was built with analyzer stopwords='english', stemmer='english';" in message
        assert "this store asks for stopwords='german', stemmer='german'" in message
        assert "open it without analyzer to keep its own, or index into a new collection" in message

    def test_a_newer_format_asks_for_an_upgrade(
        self, milvus_uri: str, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.errors import IndexFormatError
        from langchain_fusion.stores.milvus import MilvusStore

        _described_as(monkeypatch, lambda record: {**record, "format": 9, "library": "9.0.0"})
        with pytest.raises(IndexFormatError, match=r"made by langchain-fusion 9.0.0 in collection format 9; .*upgrade"):
            MilvusStore(milvus_uri, name)

    def test_settings_from_a_newer_library_ask_for_an_upgrade(
        self, milvus_uri: str, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.errors import IndexFormatError
        from langchain_fusion.stores.milvus import MilvusStore

        def newer(record: dict[str, Any]) -> dict[str, Any]:
            record["langchain_fusion"]["analyzer"]["segmenter"] = "jieba"
            return {**record, "library": "9.0.0"}

        _described_as(monkeypatch, newer)
        with pytest.raises(
            IndexFormatError, match=r"made by langchain-fusion 9.0.0 with settings .* \(analyzer.segmenter"
        ):
            MilvusStore(milvus_uri, name)

    def test_a_collection_without_the_record_opens_as_format_0(
        self, milvus_uri: str, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        _described_as(monkeypatch, lambda record: {"langchain_fusion": record["langchain_fusion"]})
        store = MilvusStore(milvus_uri, name)
        assert store.record is not None and store.record.describe()["library"] == "before 0.3"
        assert store.record.format == 0 and not store.null_keys
        assert len(FusionIndex(HashingEmbeddings(), store=store).as_retriever(k=2).invoke("w1")) == 2


def test_rows_built_by_column_equal_the_per_row_definition() -> None:
    """The column builder gives each row what it always meant: tokens joined once, metadata as JSON reads it back."""
    import math

    import numpy as np

    from langchain_fusion.stores.analyzer import Analyzer
    from langchain_fusion.stores.milvus import writes

    analyzer = Analyzer()
    texts = ["Hello, world!  -- ... parseHTTPResponse_v2", "", "--- ...", "東京都 the THE the", "서울 무사히 e\u0301"]
    documents = [
        Document(id=f"d{i}", page_content=t, metadata={"source": "s", "page": None, 3: i, "x": (1, 2)})
        for i, t in enumerate(texts)
    ]
    documents.append(Document(id="nan", page_content="nan", metadata={"score": math.nan, "none": None}))
    vectors = np.random.default_rng(0).standard_normal((len(documents), 4)).astype(np.float32)
    bm25_texts = [d.page_content for d in documents]
    rows = writes.rows(documents, vectors, bm25_texts, analyzer, null_keys=True)
    for row, doc, vector in zip(rows, documents, vectors, strict=True):
        assert row["id"] == doc.id and row["text"] == doc.page_content
        assert row["bm25_text"] == " ".join(analyzer.tokenize(doc.page_content))
        assert row["vector"] == vector.tolist()
        assert json.dumps(row["metadata"]) == json.dumps(json.loads(json.dumps(doc.metadata)))
        assert row["null_keys"] == {k: True for k, v in row["metadata"].items() if v is None}
    assert rows[0]["bm25_text"] and "  " not in rows[0]["bm25_text"] and rows[2]["bm25_text"] == ""
    with pytest.raises(FusionError, match="'bad' has metadata that is not JSON-serialisable"):
        writes.columns([Document(id="bad", page_content="x", metadata={"s": {1}})], vectors[:1], ["x"], analyzer, True)


class _DropsSearches:
    """A Milvus client whose searches fail as a lost connection does; its other calls go to ``client``."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, method: str) -> Any:
        from pymilvus.exceptions import MilvusException

        if method == "search":
            raise MilvusException(code=2, message="Fail connecting to server on unix:/gone.sock")
        return getattr(self._client, method)

    def close(self) -> None:
        """Nothing to close: the wrapped client is the store's."""
