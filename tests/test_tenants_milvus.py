"""Tenants on Milvus: a collection per tenant, so Milvus's BM25 statistics are the tenant's own.

The same randomized comparison as ``test_tenants.py``: each tenant's results on the tenant-keyed
collection equal those of a Milvus collection of its documents alone (the same scores in the same
order; the same ids but among exactly equal scores, whose order is Milvus's), after deletes and
upserts, and reopened from the collection name alone.
A collection costs tens of milliseconds to create (its indexes are polled, not waited for in
pymilvus's half-second sleeps), so 200 tenants and their 200 reference collections take about a minute.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex
from langchain_fusion import metadata as keys
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.milvus import skip_without_milvus
from tests.helpers.tenants import KEY, SCORE_KEYS, SETTINGS, corpus, queries, tenant_documents

skip_without_milvus()

pytestmark = pytest.mark.milvus

TENANTS = 200
"""Tenants in the shared collection (each also gets a collection of its own, the reference)."""
EVERY = 20
"""Each setting is compared on every EVERY-th tenant, a different slice per setting: every tenant is searched."""
WHOLE_CORPUS = 1000
"""fetch_k=None is refused on Milvus; a pool larger than any tenant is the same."""


def on_milvus(options: dict[str, Any]) -> dict[str, Any]:
    return {**options, "fetch_k": WHOLE_CORPUS} if "fetch_k" in options and options["fetch_k"] is None else options


def assert_same_up_to_ties(got: list[Document], expected: list[Document], where: str) -> None:
    """The same fused scores in the same order, each result's scores those of its twin in ``expected``.

    A result's twin is the expected result of its id, or of its text (a copy may stand in for
    another); a result without one must tie, by fused score, with the last expected ones. Results
    with exactly equal fused scores come in the order of their keys, which Milvus assigns as it
    returns rows (its order of equal rows is its own), so only their order may differ.
    """
    assert len(got) == len(expected), where
    fused = [d.metadata.get(keys.FUSION_SCORE) or 0.0 for d in expected]
    np.testing.assert_allclose([d.metadata.get(keys.FUSION_SCORE) or 0.0 for d in got], fused, atol=1e-6)
    by_id = {d.id: d for d in expected}
    by_text = {d.page_content: d for d in expected}
    for position, a in enumerate(got):
        b = by_id.get(a.id) or by_text.get(a.page_content)
        if b is None:
            assert abs(fused[position] - fused[-1]) <= 1e-6, (where, a.id)
            continue
        for name in SCORE_KEYS:
            x, y = a.metadata.get(name), b.metadata.get(name)
            assert (x is None) == (y is None), (where, name)
            if x is not None:
                assert abs(x - y) <= 1e-6, (where, name, x, y)


def compare(shared: FusionIndex, own: dict[str, FusionIndex], seed: int, every: int) -> None:
    """Every setting on every ``every``-th tenant (offset by setting) gives the same results on both."""
    rng = np.random.default_rng(seed)
    for number, options in enumerate(SETTINGS):
        for tenant in sorted(own)[number % every :: every]:
            for query in queries(rng, tenant):
                got = shared.as_retriever(tenant=tenant, **on_milvus(options)).invoke(query)
                expected = own[tenant].as_retriever(**on_milvus(options)).invoke(query)
                assert_same_up_to_ties(got, expected, f"{tenant} {query!r} {options}")
                assert all(d.metadata[KEY] == tenant for d in got)


def test_a_tenant_keyed_collection_searches_each_tenant_as_its_own_index(tmp_path: Any) -> None:
    from langchain_fusion.stores.milvus import MilvusStore

    uri = os.environ.get("MILVUS_URI") or str(tmp_path / "tenants.db")
    name = f"tenants_{np.random.default_rng().integers(1 << 30)}"
    by_tenant = corpus(17, TENANTS)
    store = MilvusStore(uri, name, tenant_key=KEY)
    shared = FusionIndex.from_documents(
        [doc for docs in by_tenant.values() for doc in docs], HashingEmbeddings(), store=store
    )
    own = {
        tenant: FusionIndex.from_documents(docs, HashingEmbeddings(), store=MilvusStore(uri, f"{name}_own{number}"))
        for number, (tenant, docs) in enumerate(by_tenant.items())
    }
    assert shared.tenants() == sorted(by_tenant)
    compare(shared, own, seed=1, every=EVERY)

    rng = np.random.default_rng(4)
    for tenant in rng.choice(sorted(by_tenant), size=20, replace=False).tolist():
        docs = own[tenant].documents
        gone = [d.id or "" for d in docs[:2]]
        assert shared.remove(gone, tenant=tenant) == own[tenant].remove(gone)
        added = [d.model_copy(update={"id": f"n-{d.id}"}) for d in tenant_documents(rng, tenant, 3)]
        shared.add_documents(added)
        own[tenant].add_documents(added)
    store.close()

    reopened = FusionIndex(HashingEmbeddings(), store=MilvusStore(uri, name))  # the tenants are found by name
    assert reopened.tenant_key == KEY and reopened.tenants() == sorted(by_tenant)
    compare(reopened, own, seed=2, every=EVERY)
    with pytest.raises(FusionError, match="every search names its tenant"):
        reopened.as_retriever().invoke("w0")
    with pytest.raises(FusionError, match="not tenant-keyed"):
        plain = f"{name}_plain"
        FusionIndex.from_texts(["alpha"], HashingEmbeddings(), store=MilvusStore(uri, plain))
        MilvusStore(uri, plain, tenant_key=KEY)
    reopened.store.close()
