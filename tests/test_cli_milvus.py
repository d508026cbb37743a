"""The command line and the server pointed at a Milvus collection (milvus-lite; a server when MILVUS_URI is set)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_fusion import FusionError, FusionIndex
from langchain_fusion import metadata as keys
from langchain_fusion.index import sync
from langchain_fusion.index.opening import open_index
from langchain_fusion.stores.locations import parse_location
from langchain_fusion.testing import corpus
from tests.helpers.cli import run_cli_json
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.milvus import fresh_location, skip_without_milvus
from tests.helpers.paths import LOOPBACK_URL

skip_without_milvus()

pytestmark = pytest.mark.milvus

NOTES = {
    "a.txt": "The GC-9 controller reboots nightly. " * 30,
    "b.md": "# Batteries\n\nThe NX-14 cabinet stores 14 kWh. Keep it dry and ventilated. " * 20,
}


@pytest.fixture
def location(tmp_path: Path) -> str:
    """A fresh collection: on the server at MILVUS_URI, else in a Milvus Lite file."""
    return fresh_location(tmp_path, "cli")


class TestInfoRecord:
    def test_written_record_reads_back_and_large_ones_span_rows(self, location: str) -> None:
        store = parse_location(location).open()
        assert store.read_info() == {}
        big = {
            "files": {f"/data/file-{i}.pdf": {"sha256": "ab" * 32, "chunks": i} for i in range(2000)},
            "model": {"weights": ["x" * 100] * 400},  # 40,000 characters: one entry over three rows
        }
        store.write_info(big)
        assert parse_location(location).open().read_info() == big
        store.write_info({"files": {}})  # shorter: the extra rows go
        assert store.read_info() == {"files": {}}
        assert parse_location(location).open().read_info() == {"files": {}}

    def test_two_writers_keep_each_others_entries(self, location: str) -> None:
        """Each writer writes the entries it changed, never the whole record over the other's."""
        first, second = parse_location(location).open(), parse_location(location).open()
        assert first.read_info() == second.read_info() == {}
        chunking = {"chunk_size": 800, "chunk_overlap": 0}
        first.write_info_entry(("files", "by_path", "a.txt"), {"sha256": "a", "chunks": 1})
        second.write_info_entry(("files", "by_path", "b.txt"), {"sha256": "b", "chunks": 2})
        first.write_info({"files": {"chunking": chunking, "by_path": {"a.txt": {"sha256": "a", "chunks": 1}}}})
        second.write_info({"files": {"chunking": chunking, "by_path": {"b.txt": {"sha256": "b", "chunks": 2}}}})
        by_path = {"a.txt": {"sha256": "a", "chunks": 1}, "b.txt": {"sha256": "b", "chunks": 2}}
        assert parse_location(location).open().read_info() == {"files": {"chunking": chunking, "by_path": by_path}}
        first.write_info_entry(("files", "by_path", "b.txt"), None)  # a deletion reaches an entry it never read
        assert parse_location(location).open().read_info()["files"]["by_path"] == {"a.txt": by_path["a.txt"]}

    def test_a_record_kept_before_entries_is_read_and_moved(self, location: str) -> None:
        from pymilvus import DataType

        store = parse_location(location).open()
        old = store.collection_name + "_fusion_info"
        schema = store.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
        schema.add_field("piece", DataType.VARCHAR, max_length=65535)
        schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)
        index = store.client.prepare_index_params()
        index.add_index(field_name="unused", index_type="FLAT", metric_type="IP")
        store.client.create_collection(old, schema=schema, index_params=index, consistency_level="Strong")
        text = json.dumps({"files": {"by_path": {"a.txt": {"sha256": "a", "chunks": 1}}}})
        pieces = [{"id": str(n), "piece": text[n * 20 : n * 20 + 20], "unused": [1.0, 0.0]} for n in range(4)]
        store.client.upsert(old, pieces)
        assert store.read_info() == {"files": {"by_path": {"a.txt": {"sha256": "a", "chunks": 1}}}}
        store.write_info_entry(("files", "by_path", "b.txt"), {"sha256": "b", "chunks": 1})
        again = parse_location(location).open()
        assert sorted(again.read_info()["files"]["by_path"]) == ["a.txt", "b.txt"]
        assert not again.client.has_collection(old)

    def test_unserialisable_records_are_refused(self, location: str) -> None:
        with pytest.raises(FusionError, match="JSON-serialisable"):
            parse_location(location).open().write_info({"x": object()})

    def test_drop_removes_the_collection_and_its_record(self, location: str) -> None:
        store = parse_location(location).open()
        FusionIndex.from_documents(corpus(1, 5), HashingEmbeddings(), store=store)
        store.write_info({"files": {"a": 1}})
        store.drop()
        again = parse_location(location).open()
        assert not again.exists and again.read_info() == {}


class TestOpenIndex:
    def test_a_missing_collection_says_how_to_build_it(self, location: str) -> None:
        with pytest.raises(FusionError, match=r"there is no collection .*langchain-fusion index PATH\.\.\. --out"):
            open_index(location, HashingEmbeddings())

    def test_reopens_with_the_recorded_model(self, location: str) -> None:
        FusionIndex.from_documents(corpus(1, 12), HashingEmbeddings(), store=parse_location(location).open())
        index = open_index(location, HashingEmbeddings())
        assert isinstance(index, FusionIndex) and len(index) == 12
        with pytest.raises(FusionError, match="cannot be recreated by name"):
            open_index(location)  # the test model is not one that can be rebuilt from its name


class TestCommandLine:
    """index, query and eval against a collection; ``--embeddings local`` is the deterministic fake here."""

    @pytest.fixture(autouse=True)
    def fake_models(self) -> Iterator[None]:
        with fake_cli_embeddings():
            yield

    @pytest.fixture
    def docs(self, tmp_path: Path) -> Path:
        folder = tmp_path / "docs"
        folder.mkdir()
        for name, text in NOTES.items():
            (folder / name).write_text(text, encoding="utf-8")
        return folder

    def test_index_update_query_and_eval_against_a_collection(self, docs: Path, location: str) -> None:
        status, first, err = run_cli_json("index", str(docs), "--out", location, "--embeddings", "local", "--json")
        assert status == 0, err
        assert first["index"] == location and first["files_added"] == 2 and first["chunks"] > 2
        status, again, err = run_cli_json("index", str(docs), "--out", location, "--json")
        assert status == 0, err
        assert again["files_unchanged"] == 2 and again["chunks_embedded"] == 0  # the record lives in Milvus
        (docs / "a.txt").write_text("The GC-9 controller was replaced by a GC-10 in March.", encoding="utf-8")
        (docs / "b.md").unlink()
        status, third, err = run_cli_json("index", str(docs), "--out", location, "--json")
        assert status == 0, err
        assert (third["files_updated"], third["files_removed"], third["chunks"]) == (1, 1, 1)

        status, results, err = run_cli_json("query", location, "GC-10 controller", "-k", "2", "--json")
        assert status == 0, err
        assert len(results) == 1 and "GC-10" in results[0]["text"]
        assert results[0]["metadata"][keys.SOURCE].endswith("a.txt")
        assert results[0]["metadata"][keys.BM25_SCORE] > 0

        status, text, err = run_cli_json("query", location, "GC-10 controller", "--window", "1")
        assert status == 0 and "GC-10" in text, err

    def test_a_killed_run_keeps_the_files_it_finished(
        self, tmp_path: Path, location: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each file's entry is written with its chunks: a rerun after a kill embeds only the files left."""
        folder = tmp_path / "many"
        folder.mkdir()
        for n in range(5):
            (folder / f"f{n}.txt").write_text(f"Note {n}: the GC-{n} controller reboots.", encoding="utf-8")

        class Killed(BaseException):
            """Stands for SIGKILL: nothing after it runs (no save)."""

        real = HashingEmbeddings.embed_documents
        calls: list[int] = []

        def dies_on_the_third_file(self: HashingEmbeddings, texts: list[str]) -> list[list[float]]:
            calls.append(len(texts))
            if len(calls) == 3:
                raise Killed
            return real(self, texts)

        monkeypatch.setattr(HashingEmbeddings, "embed_documents", dies_on_the_third_file)
        monkeypatch.setattr(sync, "GROUP_CHUNKS", 1)  # each file indexed on its own
        with pytest.raises(Killed):
            run_cli_json("index", str(folder), "--out", location, "--json")
        monkeypatch.setattr(HashingEmbeddings, "embed_documents", real)
        status, rerun, err = run_cli_json("index", str(folder), "--out", location, "--json")
        assert status == 0, err
        assert (rerun["files_unchanged"], rerun["files_added"], rerun["chunks_embedded"]) == (2, 3, 3)
        assert rerun["files"] == rerun["chunks"] == 5

    def test_store_timeout_goes_into_the_location(self, docs: Path, location: str, tmp_path: Path) -> None:
        status, _, err = run_cli_json("index", str(docs), "--out", location, "--store-timeout", "30", "--quiet")
        assert status == 0, err
        status, results, err = run_cli_json("query", location, "GC-9", "-k", "1", "--store-timeout", "30", "--json")
        assert status == 0 and len(results) == 1, err
        status, _, err = run_cli_json("query", location, "GC-9", "--store-timeout", "0.000001")
        assert status == 2 and "took longer than the 1e-06 s timeout" in err and err.count("\n") == 1, err
        status, _, err = run_cli_json("query", str(tmp_path), "GC-9", "--store-timeout", "5")
        assert status == 2 and "--store-timeout: " in err and "folder locations take no options" in err, err

    def test_folder_only_options_are_refused_before_any_work(self, docs: Path, location: str) -> None:
        status, _, err = run_cli_json("index", str(docs), "--out", location, "--vector-index", "PQ16")
        assert status == 2 and "a Milvus vector_index is 'Flat' (exact), 'HNSW<M>'" in err, err
        assert not parse_location(location).open().exists

    def test_a_missing_collection_is_one_line(self, location: str) -> None:
        status, _, err = run_cli_json("query", location, "anything")
        assert status == 2
        assert err.count("\n") == 1 and "there is no collection" in err

    def test_a_malformed_location_is_one_line(self, docs: Path) -> None:
        status, _, err = run_cli_json("index", str(docs), "--out", "milvus://localhost:19530/my-docs")
        assert status == 2 and "collection name 'my-docs'" in err and err.count("\n") == 1


def _unavailable(*args: object, **kwargs: object) -> object:
    from pymilvus.exceptions import MilvusException

    raise MilvusException(code=2, message="Fail connecting to server")


class TestServer:
    def test_create_app_serves_a_collection(self, location: str) -> None:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient
        from pymilvus import MilvusClient

        from langchain_fusion.server import create_app

        FusionIndex.from_documents(corpus(3, 20), HashingEmbeddings(), store=parse_location(location).open())
        with TestClient(
            create_app(location, embeddings=HashingEmbeddings(), llm=None), base_url=LOOPBACK_URL
        ) as client:
            health = client.get("/health").json()
            assert health["index"]["documents"] == 20
            assert health["index"]["manifest"]["store"] == "milvus"
            assert health["index"]["manifest"]["location"] == location
            response = client.post("/retriever/invoke", json={"input": "w1 w2", "config": {"configurable": {"k": 3}}})
            assert response.status_code == 200, response.text
            assert len(response.json()["output"]) == 3
            with pytest.MonkeyPatch.context() as patch:  # the server stops answering
                patch.setattr(MilvusClient, "has_collection", _unavailable)
                gone = client.get("/health")
            assert gone.status_code == 503 and gone.json()["status"] == "unavailable"
            assert "does not answer" in gone.json()["error"]

    async def test_the_mcp_resource_says_whether_the_store_answers(self, location: str) -> None:
        pytest.importorskip("mcp")
        from datetime import timedelta

        from mcp.shared.memory import create_connected_server_and_client_session
        from pymilvus import MilvusClient

        from langchain_fusion.mcp import INDEX_RESOURCE, build_mcp_server

        FusionIndex.from_documents(corpus(3, 20), HashingEmbeddings(), store=parse_location(location).open())
        server = build_mcp_server(location, embeddings=HashingEmbeddings(), log_level="WARNING")
        async with create_connected_server_and_client_session(server, read_timeout_seconds=timedelta(seconds=60)) as s:
            info = json.loads((await s.read_resource(INDEX_RESOURCE)).contents[0].text)  # type: ignore[union-attr]
            assert info["status"] == "ok" and info["documents"] == 20 and "error" not in info
            with pytest.MonkeyPatch.context() as patch:  # the server stops answering
                patch.setattr(MilvusClient, "has_collection", _unavailable)
                gone = json.loads((await s.read_resource(INDEX_RESOURCE)).contents[0].text)  # type: ignore[union-attr]
        assert gone["status"] == "unavailable" and "does not answer" in gone["error"]


class TestCalibration:
    """A collection keeps its relevance model like a folder does: eval --calibrate, then query and index reruns."""

    @pytest.fixture(autouse=True)
    def fake_models(self) -> Iterator[None]:
        with fake_cli_embeddings():
            yield

    def test_calibrate_a_collection(self, location: str) -> None:
        from tests.helpers.paths import DATA, SAMPLE_QUERIES

        assert run_cli_json("index", str(DATA), "--out", location, "--embeddings", "local", "-q")[0] == 0
        eval_args = ["--labels", str(SAMPLE_QUERIES), "--calibrate", "--alpha", "0.5", "--methods", "weighted", "-q"]
        status, text, err = run_cli_json("eval", "--index", location, *eval_args)
        assert status == 0 and "calibrated relevance saved into the index: fitted on 54 queries" in text, err
        status, results, err = run_cli_json("query", location, "KV-5500 inverter rating kVA", "-k", "2", "--json")
        assert status == 0 and all(0.0 <= r["metadata"][keys.RELEVANCE] <= 1.0 for r in results), err
        assert run_cli_json("query", location, "recipe for banana bread", "--min-relevance", "0.99", "--json")[1] == []
        status, again, err = run_cli_json("index", str(DATA), "--out", location, "--json")
        assert status == 0 and again["chunks_embedded"] == 0, err
        reopened = open_index(location, HashingEmbeddings())
        assert isinstance(reopened, FusionIndex) and reopened.relevance_model is not None
