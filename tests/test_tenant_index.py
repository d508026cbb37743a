"""``index.for_tenant(t)``: one tenant of a shared index as a LangChain ``VectorStore`` of its own.

LangChain's own vector-store suite runs on a tenant of an index that already holds another
tenant's documents with the same ids and texts: nothing of the other tenant may show, and
nothing the suite does may touch it. The indexing API with a record manager per tenant, the
searches against a tenant's own index, and the refusals follow.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_fusion import FusionIndex, InvalidParameterError, TenantIndex
from langchain_fusion.errors import UnknownDocumentError
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.tenants import KEY, assert_same, corpus

NEIGHBOUR = "neighbour"
"""The tenant whose documents must stay untouched and unseen."""


def neighbour_documents() -> list[Document]:
    """Documents of another tenant that collide with what the standard suite writes (ids, texts)."""
    texts = ["foo", "bar", "baz", "qux", "foo bar", "kitty"]
    return [
        Document(id=str(uuid.UUID(int=i)), page_content=text, metadata={KEY: NEIGHBOUR, "id": i})
        for i, text in enumerate(texts)
    ]


def shared_index(embeddings: HashingEmbeddings | None = None, **kwargs: object) -> FusionIndex:
    """A tenant-keyed index that holds the neighbour's documents."""
    return FusionIndex.from_documents(
        neighbour_documents(), embeddings or HashingEmbeddings(), tenant_key=KEY, **kwargs
    )


def assert_neighbour_untouched(shared: FusionIndex) -> None:
    view = shared.view(NEIGHBOUR)
    expected = neighbour_documents()
    assert sorted(d.id or "" for d in view.iter_documents()) == sorted(d.id or "" for d in expected)
    assert {d.page_content for d in view.iter_documents()} == {d.page_content for d in expected}


class TestStandardVectorStoreOnATenant(VectorStoreIntegrationTests):
    """LangChain's vector-store suite, sync and async, on one tenant of a shared index."""

    @pytest.fixture
    def vectorstore(self) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        shared = shared_index(self.get_embeddings())  # type: ignore[arg-type]
        yield shared.for_tenant("mine")
        assert_neighbour_untouched(shared)


@pytest.mark.milvus
class TestStandardVectorStoreOnAMilvusTenant(VectorStoreIntegrationTests):
    """The same suite on a tenant of a tenant-keyed Milvus collection."""

    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        pytest.importorskip("pymilvus")
        if not os.environ.get("MILVUS_URI"):
            pytest.importorskip("milvus_lite")
        from langchain_fusion.stores.milvus import MilvusStore

        uri = os.environ.get("MILVUS_URI") or str(tmp_path / "tenant.db")
        store = MilvusStore(uri, f"t{uuid.uuid4().hex[:12]}", tenant_key=KEY)
        shared = shared_index(self.get_embeddings(), store=store)  # type: ignore[arg-type]
        yield shared.for_tenant("mine")
        assert_neighbour_untouched(shared)
        store.drop()


class TestATenantIsItsOwnIndex:
    def test_searches_equal_those_of_the_tenants_own_index(self) -> None:
        by_tenant = corpus(5, 12)
        shared = FusionIndex.from_documents(
            [d for docs in by_tenant.values() for d in docs], HashingEmbeddings(), tenant_key=KEY
        )
        for tenant, docs in by_tenant.items():
            mine, own = shared.for_tenant(tenant), FusionIndex.from_documents(docs, HashingEmbeddings())
            assert len(mine) == len(own) and {d.id for d in mine.documents} == {d.id for d in own.documents}
            for query in ("w0 w3", f"{tenant}x0", "nothing"):
                assert_same(mine.as_retriever(k=5).invoke(query), own.as_retriever(k=5).invoke(query), tenant)
                got = mine.similarity_search_with_score(query, k=4)
                expected = own.similarity_search_with_score(query, k=4)
                assert [(d.id, round(s, 6)) for d, s in got] == [(d.id, round(s, 6)) for d, s in expected]
                got_mmr = mine.max_marginal_relevance_search(query, k=3, fetch_k=10)
                assert [d.id for d in got_mmr] == [
                    d.id for d in own.max_marginal_relevance_search(query, k=3, fetch_k=10)
                ]
            first = docs[0].id or ""
            assert mine.explain("w0", first).rank == own.explain("w0", first).rank

    def test_added_documents_get_the_tenant(self) -> None:
        shared = shared_index()
        mine = shared.for_tenant("mine")
        mine.add_texts(["mine alone"], ids=["m1"])
        assert shared.get_by_ids(["m1"], tenant="mine")[0].metadata[KEY] == "mine"
        assert shared.get_by_ids(["m1"], tenant=NEIGHBOUR) == []
        assert shared.tenants() == ["mine", NEIGHBOUR]


class TestRefusals:
    def test_a_document_of_another_tenant_is_refused_and_nothing_is_added(self) -> None:
        shared = shared_index()
        mine = shared.for_tenant("mine")
        batch = [Document(page_content="fine"), Document(page_content="theirs", metadata={KEY: NEIGHBOUR})]
        with pytest.raises(InvalidParameterError, match="document 1 of this batch belongs to tenant 'neighbour'"):
            mine.add_documents(batch)
        assert len(mine) == 0
        assert_neighbour_untouched(shared)

    def test_another_tenant_cannot_be_asked_for(self) -> None:
        mine = shared_index().for_tenant("mine")
        with pytest.raises(InvalidParameterError, match="tenant 'mine'"):
            mine.similarity_search("foo", tenant=NEIGHBOUR)
        with pytest.raises(InvalidParameterError, match="tenant 'mine'"):
            mine.as_retriever(tenant=NEIGHBOUR)
        with pytest.raises(InvalidParameterError, match="tenant 'mine'"):
            mine.delete(None, tenant=NEIGHBOUR)

    def test_removing_another_tenants_document_removes_nothing(self) -> None:
        shared = shared_index()
        mine = shared.for_tenant("mine")
        mine.add_texts(["mine"], ids=["m1"])
        with pytest.raises(UnknownDocumentError):
            mine.remove(["m1", str(uuid.UUID(int=0))])
        assert len(mine) == 1
        assert_neighbour_untouched(shared)

    def test_an_index_without_tenants_has_no_tenant_to_give(self) -> None:
        with pytest.raises(InvalidParameterError, match="tenant"):
            FusionIndex(HashingEmbeddings()).for_tenant("mine")

    def test_a_tenant_index_is_not_made_from_texts(self) -> None:
        with pytest.raises(InvalidParameterError, match="for_tenant"):
            TenantIndex.from_texts(["a"], HashingEmbeddings())


class TestIndexingAPIPerTenant:
    """LangChain's indexing API, one record manager per tenant, cleans up within its tenant only."""

    def test_full_cleanup_deletes_within_the_tenant(self) -> None:
        shared = shared_index()
        mine = shared.for_tenant("mine")
        records = InMemoryRecordManager(namespace="fusion/mine")
        records.create_schema()
        docs = [Document(page_content=t, metadata={"source": "a.txt"}) for t in ("foo", "bar", "mine")]
        assert index(docs, records, mine, cleanup="full", key_encoder="sha256")["num_added"] == 3
        result = index(docs[:1], records, mine, cleanup="full", key_encoder="sha256")
        assert result["num_deleted"] == 2 and len(mine) == 1
        assert_neighbour_untouched(shared)
