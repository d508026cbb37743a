"""The engine registry: a third store is one engine file plus one registry line.

The engine below keeps in-process stores in a dictionary under ``memory://NAME`` locations. It
is registered from the test, as an application would register its own, and then every face
works with it unchanged: ``index`` (incremental), ``query``, ``ask``, ``eval``, the LangServe app,
the MCP server and the Python API.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langchain_fusion import FusionError, InvalidParameterError, PipelineSpec, build_pipeline
from langchain_fusion.index.opening import open_index
from langchain_fusion.stores.base import FusionStore
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.registry import (
    ENGINES,
    EngineEntry,
    NewStoreOptions,
    OpenedStore,
    StoreEngine,
    engine_for,
    is_store_location,
    location_help,
    register_engine,
    unregister_engine,
)
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.paths import DATA, LOOPBACK_URL


class MemoryEngine(StoreEngine):
    """In-process stores kept by name: what a new engine file holds."""

    name = "memory"

    def __init__(self) -> None:
        self.stores: dict[str, tuple[LocalStore, dict[str, Any]]] = {}

    def open(self, location: str) -> OpenedStore:
        if location not in self.stores:
            raise FusionError(f"{location}: nothing saved there yet")
        store, info = self.stores[location]
        return OpenedStore(store, dict(info))

    def open_or_create(self, location: str, options: NewStoreOptions) -> OpenedStore:
        if location in self.stores:
            return self.open(location)
        return OpenedStore(LocalStore(vector_index=options.vector_index or "Flat"), created=True)

    def save(self, location: str, store: FusionStore, info: Mapping[str, Any]) -> str:
        assert isinstance(store, LocalStore)
        self.stores[location] = (store, dict(info))
        return location

    def describe(self, location: str, store: FusionStore) -> dict[str, Any]:
        return {"store": self.name, "location": location, "rows": len(store.view())}


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryEngine]:
    monkeypatch.setattr("langchain_fusion.models.embeddings.default_embeddings", HashingEmbeddings)
    monkeypatch.setattr("langchain_fusion.index.embedding.embeddings_from_id", lambda model_id: HashingEmbeddings())
    engine = MemoryEngine()
    register_engine(EngineEntry("memory", ("memory://",), engine, "an in-memory store: memory://NAME"))
    try:
        yield engine
    finally:
        unregister_engine("memory")


def _index(location: str) -> dict[str, Any]:
    status, out, err = run_cli(["index", str(DATA), "--out", location, "--json", "--quiet"])
    assert status == 0, err
    return json.loads(out)


class TestRegistry:
    def test_locations_are_claimed_by_prefix(self, engine: MemoryEngine) -> None:
        assert engine_for("memory://docs") is engine
        assert is_store_location("memory://docs") and not is_store_location("memory-docs")
        assert engine_for("milvus://h/c").name == "milvus"
        assert engine_for("some/folder").name == "folder"
        assert "memory://NAME" in location_help()

    def test_overlapping_prefixes_are_refused(self, engine: MemoryEngine) -> None:
        with pytest.raises(InvalidParameterError, match="overlap"):
            register_engine(EngineEntry("other", ("memory://x",), engine, "-"))
        with pytest.raises(InvalidParameterError, match="at least one location prefix"):
            register_engine(EngineEntry("nothing", (), engine, "-"))
        assert [entry.name for entry in ENGINES].count("memory") == 1


class TestEveryFace:
    def test_index_is_incremental(self, engine: MemoryEngine) -> None:
        first = _index("memory://docs")
        assert first["chunks"] > 0 and first["index"] == "memory://docs"
        again = _index("memory://docs")
        assert again["chunks"] == first["chunks"]
        assert again["files_unchanged"] == first["files"] and again["chunks_embedded"] == 0

    def test_query_and_ask(self, engine: MemoryEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        _index("memory://docs")
        index = open_index("memory://docs")
        expected = index.as_retriever(k=3).invoke("flood batteries")
        status, out, err = run_cli(["query", "memory://docs", "flood batteries", "-k", "3", "--json"])
        assert status == 0, err
        assert [r["id"] for r in json.loads(out)] == [d.id for d in expected]
        model = FakeListChatModel(responses=["From the report [1]."])
        monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        status, out, err = run_cli(["ask", "memory://docs", "flood batteries", "--json"])
        assert status == 0, err
        assert json.loads(out)["answer"] == "From the report [1]."

    def test_summaries_need_a_folder(self, engine: MemoryEngine) -> None:
        assert_one_line_error(
            *run_cli(["index", str(DATA), "--out", "memory://docs", "--summaries"]), "kept in index folders only"
        )
        _index("memory://docs")
        assert_one_line_error(*run_cli(["query", "memory://docs", "x", "--hierarchical"]), "index folders")

    def test_eval(self, engine: MemoryEngine) -> None:
        _index("memory://docs")
        labels = DATA / "queries.json"
        status, out, err = run_cli(["eval", "--index", "memory://docs", "--labels", str(labels), "--json", "-q"])
        assert status == 0, err
        assert {row["method"] for row in json.loads(out)["retrievers"]} >= {"vector", "bm25", "fusion (defaults)"}

    def test_pipeline_and_servers(self, engine: MemoryEngine) -> None:
        pytest.importorskip("langserve")
        pytest.importorskip("mcp")
        from fastapi.testclient import TestClient

        from langchain_fusion.mcp import build_mcp_server, describe_server
        from langchain_fusion.server import create_app

        _index("memory://docs")
        pipeline = build_pipeline(PipelineSpec.of("memory://docs", k=2))
        assert len(pipeline.retriever.invoke("flood")) == 2
        assert pipeline.describe()["index"]["manifest"]["store"] == "memory"
        with TestClient(create_app("memory://docs", llm=None), base_url=LOOPBACK_URL) as client:
            health = client.get("/health").json()
            assert health["index"]["manifest"] == {
                "store": "memory",
                "location": "memory://docs",
                "rows": len(open_index("memory://docs")),
            }
            response = client.post("/retriever/invoke", json={"input": "flood", "config": {"configurable": {"k": 2}}})
            assert response.status_code == 200 and len(response.json()["output"]) == 2
        assert describe_server(build_mcp_server("memory://docs"))["documents"] == len(open_index("memory://docs"))

    def test_missing_store(self, engine: MemoryEngine, tmp_path: Path) -> None:
        assert_one_line_error(*run_cli(["query", "memory://nothing", "x"]), "nothing saved there yet")
