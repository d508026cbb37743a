"""Tenants: a tenant's results on a shared, tenant-keyed index are exactly those of an index of its documents alone.

A randomized corpus of many tenants (different vocabularies and sizes, the same source names in
several tenants, copies of one text) is indexed once tenant-keyed and once per tenant; every
search setting is compared result by result, score by score, after adds, deletes, upserts and a
reopen. Isolation: nothing of another tenant is ever returned, listed in ``also_in``, explained
or counted through a tenant's view.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex, HierarchicalIndex, InvalidParameterError
from langchain_fusion import metadata as keys
from langchain_fusion.errors import UnknownDocumentError
from langchain_fusion.evaluation.datasets import EvalDataset
from langchain_fusion.ingest.summaries import leading_text_summaries
from langchain_fusion.retrievers.windows import ContextWindowRetriever
from langchain_fusion.stores.local.store import LocalStore
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.tenants import KEY, SETTINGS, assert_same, build, corpus, queries, tenant_documents


def compare(shared: FusionIndex, own: dict[str, FusionIndex], seed: int, every: int = 1) -> None:
    """Every setting on every ``every``-th tenant (offset by setting) gives the same results on both."""
    rng = np.random.default_rng(seed)
    tenants = sorted(own)
    for number, options in enumerate(SETTINGS):
        for tenant in tenants[number % every :: every]:
            for query in queries(rng, tenant):
                got = shared.as_retriever(tenant=tenant, **options).invoke(query)
                expected = own[tenant].as_retriever(**options).invoke(query)
                assert_same(got, expected, f"{tenant} {query!r} {options}")


@pytest.fixture(scope="module")
def many() -> tuple[dict[str, list[Document]], FusionIndex, dict[str, FusionIndex]]:
    by_tenant = corpus(7, 240)
    shared, own = build(by_tenant)
    return by_tenant, shared, own


class TestSameResultsAsOwnIndex:
    def test_every_setting(self, many: Any) -> None:
        _, shared, own = many
        compare(shared, own, seed=1, every=5)

    def test_batches_and_async_are_the_same(self, many: Any) -> None:
        _, shared, own = many
        for tenant in sorted(own)[:20]:
            asked = ["w0 w1", f"{tenant}x0", "w3"]
            got = shared.as_retriever(tenant=tenant, k=3).batch(asked)
            expected = own[tenant].as_retriever(k=3).batch(asked)
            for a, b in zip(got, expected, strict=True):
                assert_same(a, b, tenant)

    async def test_ainvoke(self, many: Any) -> None:
        _, shared, own = many
        tenant = sorted(own)[3]
        got = await shared.as_retriever(tenant=tenant).ainvoke("w2 w5")
        assert_same(got, own[tenant].as_retriever().invoke("w2 w5"), tenant)

    def test_per_call_tenant(self, many: Any) -> None:
        _, shared, own = many
        retriever = shared.as_retriever(k=3)
        for tenant in sorted(own)[:10]:
            assert_same(retriever.invoke("w1", tenant=tenant), own[tenant].as_retriever(k=3).invoke("w1"), tenant)

    @pytest.mark.slow  # 5,000 searches over four rounds of random changes and a reopen: seconds of CPU
    def test_after_adds_deletes_upserts_and_a_reopen(self, tmp_path: Path) -> None:
        by_tenant = corpus(11, 120)
        shared, own = build(by_tenant)
        rng = np.random.default_rng(3)
        for step in range(4):
            for tenant in rng.choice(sorted(by_tenant), size=25, replace=False).tolist():
                docs = own[tenant].documents
                gone = [d.id or "" for d in docs[: int(rng.integers(0, max(1, len(docs) // 3)))]]
                shared.delete(gone, tenant=tenant)
                own[tenant].delete(gone)
                added = tenant_documents(rng, tenant, int(rng.integers(1, 6)))
                added = [d.model_copy(update={"id": f"s{step}-{d.id}"}) for d in added]
                changed = [d.model_copy(update={"page_content": d.page_content + " w39"}) for d in docs[-2:]]
                shared.add_documents([*added, *changed])
                own[tenant].add_documents([*added, *changed])
            compare(shared, own, seed=step, every=7)
        reopened = FusionIndex.load(shared.save(tmp_path / "shared"), HashingEmbeddings())
        assert reopened.tenant_key == KEY and reopened.tenants() == shared.tenants()
        compare(reopened, own, seed=9, every=7)

    def test_calibrated_relevance(self) -> None:
        by_tenant = corpus(13, 30)
        shared, own = build(by_tenant)
        tenant = max(own, key=lambda t: len(own[t]))
        asked = {f"q{i}": q for i, q in enumerate(["w0", "w1 w2", "w3", "w4 w0", "w5", "w6 w1", "w2", f"{tenant}x0"])}
        qrels = {q: {d.id or "": 1 for d in own[tenant].as_retriever(k=2).invoke(text)} for q, text in asked.items()}
        labels = EvalDataset(name="labels", queries=asked, qrels=qrels)
        fitted = shared.calibrate(labels, tenant=tenant)  # calibrated on that tenant's results alone
        assert fitted == own[tenant].calibrate(labels)
        for floor in (None, 0.3):
            got = shared.as_retriever(tenant=tenant, min_relevance=floor).invoke("w0 w2")
            assert_same(got, own[tenant].as_retriever(min_relevance=floor).invoke("w0 w2"), tenant)
            assert all(keys.RELEVANCE in d.metadata for d in got)

    def test_context_windows(self, many: Any) -> None:
        _, shared, own = many
        for tenant in sorted(own)[:15]:
            got = ContextWindowRetriever(retriever=shared.as_retriever(tenant=tenant, k=3), n=1).invoke("w0 w4")
            expected = ContextWindowRetriever(retriever=own[tenant].as_retriever(k=3), n=1).invoke("w0 w4")
            assert_same(got, expected, tenant)

    def test_hierarchical_search(self, many: Any) -> None:
        _, shared, own = many
        chosen = sorted(own)[:12]
        summaries = [
            s.model_copy(update={"metadata": {**s.metadata, KEY: t}})
            for t in chosen
            for s in leading_text_summaries(list(shared.view(t).iter_documents()), chars=80)
        ]
        shared_h = HierarchicalIndex.from_summaries(shared, summaries)
        assert shared_h.summaries.tenant_key == KEY
        for tenant in chosen:
            own_h = HierarchicalIndex.from_summaries(
                own[tenant], leading_text_summaries(own[tenant].documents, chars=80)
            )
            for options in ({}, {"k_summaries": 1, "alpha": 0.2}, {"duplicates": "keep", "fetch_k": None}):
                got = shared_h.as_retriever(tenant=tenant, k=5, **options).invoke("w1 w3")
                expected = own_h.as_retriever(k=5, **options).invoke("w1 w3")
                assert_same(got, expected, f"{tenant} {options}")


class TestIsolation:
    def test_nothing_of_another_tenant_shows(self, many: Any) -> None:
        by_tenant, shared, _ = many
        rng = np.random.default_rng(5)
        for tenant in rng.choice(sorted(by_tenant), size=40, replace=False).tolist():
            mine = {d.id for d in by_tenant[tenant]}
            texts = {d.page_content for d in by_tenant[tenant]}
            retriever = shared.as_retriever(tenant=tenant, k=20, duplicates="exact", fetch_k=None)
            for query in ["w0", "w1 w2 w3", f"{tenant}x0", "t0x0 t1x1 t2x2"]:
                for doc in retriever.invoke(query):
                    assert doc.metadata[KEY] == tenant and doc.id in mine and doc.page_content in texts
                    for copy in doc.metadata.get(keys.ALSO_IN, []):
                        assert copy["id"] in mine
            assert len(shared.view(tenant)) == len(by_tenant[tenant])
            assert {d.id for d in shared.get_by_ids([*sorted(mine), "nope"], tenant=tenant)} == mine

    def test_explain_of_another_tenants_id_is_unknown(self, many: Any) -> None:
        by_tenant, shared, _ = many
        ordered = sorted(by_tenant, key=lambda t: len(by_tenant[t]))
        a, b = ordered[0], ordered[-1]  # b holds ids a does not
        only_b = sorted({d.id or "" for d in by_tenant[b]} - {d.id for d in by_tenant[a]})
        assert only_b
        with pytest.raises(UnknownDocumentError) as other:
            shared.explain("w0", only_b[0], tenant=a)
        with pytest.raises(UnknownDocumentError) as unknown:
            shared.explain("w0", "no-such-id", tenant=a)
        assert str(other.value).replace(only_b[0], "X") == str(unknown.value).replace("no-such-id", "X")
        assert shared.explain("w0", by_tenant[a][0].id or "", tenant=a).verdict in {
            "returned",
            "below_k",
            "outside_pool",
            "duplicate",
        }

    def test_a_search_without_a_tenant_is_refused(self, many: Any) -> None:
        _, shared, _ = many
        for call in (
            lambda: shared.as_retriever().invoke("w0"),
            lambda: shared.as_retriever().batch(["w0", "w1"]),
            lambda: shared.similarity_search("w0"),
            lambda: shared.max_marginal_relevance_search("w0"),
            lambda: shared.explain("w0", "c0"),
        ):
            with pytest.raises(FusionError, match="every search names its tenant"):
                call()

    def test_a_tenant_on_an_index_that_is_not_keyed_is_refused(self) -> None:
        plain = FusionIndex.from_texts(["alpha beta"], HashingEmbeddings())
        with pytest.raises(InvalidParameterError, match="not tenant-keyed"):
            plain.as_retriever(tenant="t0").invoke("alpha")

    def test_deletes_and_ids_are_scoped_by_tenant(self) -> None:
        by_tenant = corpus(3, 4)
        shared, _ = build(by_tenant)
        a, b = sorted(by_tenant)[:2]
        shared_id = sorted({d.id for d in by_tenant[a]} & {d.id for d in by_tenant[b]})[0]
        assert shared_id is not None
        assert shared.remove([shared_id], tenant=a) == 1
        assert shared.get_by_ids([shared_id], tenant=b) and not shared.get_by_ids([shared_id], tenant=a)
        with pytest.raises(UnknownDocumentError):
            shared.remove([shared_id], tenant=a)


class TestTheKey:
    def test_a_document_without_a_tenant_refuses_its_batch(self) -> None:
        index = FusionIndex(HashingEmbeddings(), tenant_key=KEY)
        docs = [
            Document(page_content="alpha", metadata={KEY: "a"}),
            Document(page_content="beta", metadata={}),
        ]
        with pytest.raises(InvalidParameterError, match=r"document 1 of this batch .* has no tenant") as caught:
            index.add_documents(docs)
        assert "\n" not in str(caught.value) and len(index) == 0

    @pytest.mark.parametrize("value", ["", "  ", None, 1.5, True, ["a"]])
    def test_what_a_tenant_can_be(self, value: Any) -> None:
        index = FusionIndex(HashingEmbeddings(), tenant_key=KEY)
        with pytest.raises(InvalidParameterError, match="has no tenant"):
            index.add_documents([Document(page_content="alpha", metadata={KEY: value})])

    def test_integer_tenants_read_as_their_string(self) -> None:
        index = FusionIndex(HashingEmbeddings(), tenant_key=KEY)
        index.add_documents([Document(page_content="alpha beta", metadata={KEY: 42})])
        assert index.tenants() == ["42"]
        assert [d.page_content for d in index.as_retriever(tenant=42).invoke("alpha")] == ["alpha beta"]

    @pytest.mark.parametrize("value", ["", " tenant", 5])
    def test_a_bad_tenant_key(self, value: Any) -> None:
        with pytest.raises(InvalidParameterError, match="tenant_key must be the metadata key"):
            FusionIndex(HashingEmbeddings(), tenant_key=value)

    def test_the_key_is_kept_with_the_store(self, tmp_path: Path) -> None:
        store = LocalStore(tenant_key=KEY)
        index = FusionIndex(HashingEmbeddings(), store=store)
        assert index.tenant_key == KEY
        with pytest.raises(InvalidParameterError, match="keeps the tenant key it was made with"):
            FusionIndex(HashingEmbeddings(), store=store, tenant_key="customer")
        index.add_documents([Document(page_content="alpha", metadata={KEY: "a"})])
        assert FusionIndex.load(index.save(tmp_path / "idx"), HashingEmbeddings()).tenant_key == KEY

    def test_a_write_across_tenants_is_all_or_nothing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        index = FusionIndex.from_documents(
            [Document(page_content="alpha", metadata={KEY: "a"}, id="1")], HashingEmbeddings(), tenant_key=KEY
        )
        calls = itertools.count()
        real = LocalStore.staged_upsert

        def fail_second(self: LocalStore, *args: Any) -> Any:
            if next(calls) == 1:
                raise MemoryError
            return real(self, *args)

        monkeypatch.setattr(LocalStore, "staged_upsert", fail_second)
        batch = [Document(page_content=f"beta {t}", metadata={KEY: t}, id="2") for t in ("a", "b")]
        with pytest.raises(MemoryError):
            index.add_documents(batch)
        assert index.tenants() == ["a"] and len(index) == 1


# --- the faces: the server binds the tenant from trusted context, MCP from its command line --------------------


def _served_index() -> tuple[FusionIndex, dict[str, list[Document]]]:
    by_tenant = corpus(21, 30)
    index, _ = build(by_tenant)
    return index, by_tenant


@pytest.fixture(scope="module")
def served() -> Any:
    """A LangServe app over a tenant-keyed index, each request's tenant named by its proxy's X-Tenant header."""
    from fastapi.testclient import TestClient

    from langchain_fusion.server import create_app
    from tests.helpers.paths import LOOPBACK_URL

    index, by_tenant = _served_index()
    with TestClient(create_app(index, tenant_header="X-Tenant"), base_url=LOOPBACK_URL) as client:
        yield client, by_tenant


class TestServer:
    def test_each_request_searches_the_tenant_its_header_names(self, served: Any) -> None:
        client, by_tenant = served
        rng = np.random.default_rng(2)
        for tenant in rng.choice(sorted(by_tenant), size=12, replace=False).tolist():
            mine = {d.id for d in by_tenant[tenant]}
            for path, body in (
                ("/retriever/invoke", {"input": "w0 w1", "config": {"configurable": {"k": 8}}}),
                ("/retriever/batch", {"inputs": ["w2", f"{tenant}x0"]}),
            ):
                response = client.post(path, json=body, headers={"X-Tenant": tenant})
                assert response.status_code == 200, response.text
                output = response.json()["output"]
                lists = output if path.endswith("batch") else [output]
                for docs in lists:
                    for doc in docs:
                        assert doc["metadata"][KEY] == tenant and doc["id"] in mine
                        assert {c["id"] for c in doc["metadata"].get(keys.ALSO_IN, [])} <= mine

    def test_a_request_without_the_header_is_refused(self, served: Any) -> None:
        client, _ = served
        for path, body in (("/retriever/invoke", {"input": "w0"}), ("/retriever/batch", {"inputs": ["w0"]})):
            response = client.post(path, json=body)
            assert response.status_code == 401 and "X-Tenant" in response.text.replace("x-tenant", "X-Tenant")

    @pytest.mark.parametrize("configurable", [{"tenant": "t0"}, {"langchain_fusion_tenant": "t0"}])
    def test_a_tenant_in_the_body_is_refused(self, served: Any, configurable: dict[str, Any]) -> None:
        client, _ = served
        body = {"input": "w0", "config": {"configurable": configurable}}
        response = client.post("/retriever/invoke", json=body, headers={"X-Tenant": "t1"})
        assert response.status_code == 422 and "unknown configurable field" in response.text

    def test_the_schemas_do_not_offer_a_tenant(self, served: Any) -> None:
        client, _ = served
        schema = client.get("/retriever/config_schema").json()
        assert "tenant" not in json_text(schema)

    def test_health_names_and_counts_no_tenant(self, served: Any) -> None:
        client, by_tenant = served
        health = client.get("/health").json()
        text = json_text(health)
        assert health["index"]["documents"] is None and health["index"]["tenant_key"] == KEY
        assert not any(f'"{tenant}"' in text for tenant in by_tenant)

    def test_one_tenant_per_server(self) -> None:
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app
        from tests.helpers.paths import LOOPBACK_URL

        index, by_tenant = _served_index()
        tenant = sorted(by_tenant)[1]
        with TestClient(create_app(index, tenant=tenant), base_url=LOOPBACK_URL) as client:
            docs = client.post("/retriever/invoke", json={"input": "w0 w1"}).json()["output"]
            assert docs and all(doc["metadata"][KEY] == tenant for doc in docs)
            assert client.get("/health").json()["index"]["documents"] == len(by_tenant[tenant])

    def test_tenancy_is_checked_when_the_app_is_made(self) -> None:
        from langchain_fusion.server import create_app

        index, _ = _served_index()
        with pytest.raises(InvalidParameterError, match="serve one tenant"):
            create_app(index)
        with pytest.raises(InvalidParameterError, match="not both"):
            create_app(index, tenant="t0", tenant_header="X-Tenant")
        plain = FusionIndex.from_texts(["alpha"], HashingEmbeddings())
        with pytest.raises(InvalidParameterError, match="applies to a tenant-keyed index"):
            create_app(plain, tenant_header="X-Tenant")


def json_text(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)


class TestMcp:
    async def test_the_tool_searches_the_servers_tenant_and_offers_no_tenant(self) -> None:
        from langchain_fusion.mcp import build_mcp_server
        from tests.helpers.mcp import call_search, connected, results_of, text_of

        index, by_tenant = _served_index()
        tenant = sorted(by_tenant)[2]
        server = build_mcp_server(index, tenant=tenant)
        async with connected(server) as session:
            tools = await session.list_tools()
            assert "tenant" not in json_text(tools.tools[0].inputSchema)
            found = results_of(await call_search(session, query="w0 w1", k=10))
            mine = {d.id for d in by_tenant[tenant]}
            assert found.results and all(hit.id in mine for hit in found.results)
            refused = await call_search(session, query="w0", tenant=sorted(by_tenant)[0])
            assert refused.isError and "tenant" in text_of(refused)


class TestIndexingPerTenant:
    def test_each_run_indexes_one_tenants_files(self, tmp_path: Path) -> None:
        from langchain_fusion import IndexSpec, build_index

        folders = {}
        for tenant, words in (("acme", "battery cabinet flood"), ("beta", "widget fan battery")):
            folder = folders[tenant] = tmp_path / tenant
            folder.mkdir()
            for i in range(3):
                (folder / f"report-{i}.txt").write_text(f"{words} note {i}. " * 20, encoding="utf-8")
        out = tmp_path / "idx"

        def run(tenant: str, **options: Any) -> Any:
            spec = IndexSpec(
                location=str(out),
                paths=(str(folders[tenant]),),
                embeddings=HashingEmbeddings(),
                tenant=tenant,
                **options,
            )
            return build_index(spec)

        first = run("acme", tenant_key=KEY, chunk_size=200, chunk_overlap=20)
        second = run("beta", chunk_size=200, chunk_overlap=20)
        assert (first.files, second.files) == (3, 3) and len(second.sync.files_added) == 3
        again = run("acme", chunk_size=200, chunk_overlap=20)
        assert len(again.sync.files_unchanged) == 3 and again.sync.chunks_embedded == 0
        (folders["beta"] / "report-0.txt").unlink()
        removed = run("beta", chunk_size=200, chunk_overlap=20)
        assert len(removed.sync.files_removed) == 1
        index = FusionIndex.load(out, HashingEmbeddings())
        assert index.tenants() == ["acme", "beta"]
        sources = {
            t: {Path(str(d.metadata[keys.SOURCE])).name for d in index.view(t).iter_documents()}
            for t in ("acme", "beta")
        }
        assert sources == {
            "acme": {"report-0.txt", "report-1.txt", "report-2.txt"},
            "beta": {"report-1.txt", "report-2.txt"},
        }
        assert set(index.saved_info["files"]["by_tenant"]) == {"acme", "beta"}
        with pytest.raises(InvalidParameterError, match="name the tenant"):
            build_index(IndexSpec(location=str(out), paths=(str(folders["acme"]),), embeddings=HashingEmbeddings()))


class TestEvaluationPerTenant:
    """``eval --tenant T`` on a tenant-keyed index reports what ``eval`` reports on an index of T's documents alone."""

    @staticmethod
    def labels(path: Path, tenant: str, docs: list[Document]) -> Path:
        """Labelled queries of one tenant: each names a source that other tenants have too."""
        records = [
            {"id": f"q{i}", "query": f"{tenant}x0 w{i}", "relevant": [{"source": str(doc.metadata[keys.SOURCE])}]}
            for i, doc in enumerate(docs[:3])
        ]
        path.write_text(json.dumps(records), encoding="utf-8")
        return path

    def test_a_tenants_report_is_its_own_indexs(self, tmp_path: Path) -> None:
        from tests.helpers.cli import assert_one_line_error, run_cli
        from tests.helpers.embeddings import fake_cli_embeddings

        by_tenant = corpus(23, 6)
        shared, own = build(by_tenant)
        shared_folder = shared.save(tmp_path / "shared")
        # A tenant smaller than another: the other's chunks of the same sources have ids this one lacks.
        tenant = sorted(by_tenant, key=lambda t: len(by_tenant[t]))[3]
        own_folder = own[tenant].save(tmp_path / "own")
        labels = self.labels(tmp_path / "labels.json", tenant, by_tenant[tenant])
        common = ["--labels", str(labels), "--json", "-q", "--alpha", "0,0.5,1", "--vector-floors", "0.1"]
        with fake_cli_embeddings():
            status, out, err = run_cli(["eval", "--index", str(shared_folder), "--tenant", tenant, *common])
            assert status == 0, err
            status, expected, err = run_cli(["eval", "--index", str(own_folder), *common])
            assert status == 0, err
            refused = run_cli(["eval", "--index", str(shared_folder), *common])
        got, want = json.loads(out), json.loads(expected)
        for part in ("retrievers", "sweep", "floors"):
            for row in (*got[part], *want[part]):
                row.pop("ms_per_query", None)
            assert got[part] == want[part], part
        assert_one_line_error(*refused, "is tenant-keyed (6 tenants): evaluate one tenant with --tenant T")


def test_a_tenant_keyed_folder_saved_before_an_analyzer_option_reads_as_built(tmp_path: Path) -> None:
    """Folders saved before case folding existed keep lower-casing, in the shared manifest and every tenant's."""
    from langchain_fusion.stores.analyzer import Analyzer
    from langchain_fusion.stores.local.checksums import sha256_file
    from langchain_fusion.stores.local.manifest import read_manifest, write_manifest

    docs = [Document(id="s", page_content="Straße 9", metadata={KEY: t}) for t in ("a", "b")]
    index = FusionIndex.from_documents(docs, HashingEmbeddings(), tenant_key=KEY, analyzer=Analyzer(casefold=False))
    folder = index.save(tmp_path / "idx")
    top = read_manifest(folder)
    for entry in top["tenants"]:  # each tenant's manifest as a save before the option
        part = folder / entry["folder"]
        manifest = read_manifest(part)
        assert manifest["bm25"]["analyzer"].pop("casefold") is False
        write_manifest(part, manifest)
        entry["manifest_sha256"] = sha256_file(part / "manifest.json")
    assert top["settings"]["analyzer"].pop("casefold") is False
    write_manifest(folder, top)
    loaded = FusionIndex.load(folder, HashingEmbeddings())
    assert loaded.analyzer.casefold is False
    for tenant in ("a", "b"):
        assert loaded.as_retriever(tenant=tenant, alpha=0.0).invoke("strasse") == []
        assert [d.id for d in loaded.as_retriever(tenant=tenant, alpha=0.0).invoke("Straße")] == ["s"]
