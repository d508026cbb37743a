"""Serving with LangServe: create_app's routes, bounds and health; a real uvicorn round trip; ``serve``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langserve import RemoteRunnable
from langserve.lzstring import LZString

from langchain_fusion import FusionError, FusionIndex, HierarchicalIndex, IndexFormatError
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import main
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.pipeline.spec import ServeLimits
from langchain_fusion.search.options import SELECTION_OPTIONS as SELECTION
from langchain_fusion.server import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_K,
    DEFAULT_MAX_QUERY_CHARS,
    bind_socket,
    create_app,
    is_loopback,
    url_of,
)
from langchain_fusion.stores.local.store import LocalStore
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.paths import LOOPBACK_URL

ANSWER = "Cats purr when they are content [1]."
ERROR_PREFIX = "langchain-fusion: error: "
SCORE_KEYS = ("fusion_score", "vector_score", "bm25_score", "vector_rank", "bm25_rank")


def _docs() -> list[Document]:
    return [Document(page_content=text, metadata={keys.SOURCE: f"doc{i}.txt"}) for i, text in enumerate(ANIMALS)]


def fake_llm() -> FakeListChatModel:
    """Answers every question with ANSWER (streamed character by character)."""
    return FakeListChatModel(responses=[ANSWER])


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    return FusionIndex.from_documents(_docs(), HashingEmbeddings())


@pytest.fixture(scope="module")
def saved(index: FusionIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return index.save(tmp_path_factory.mktemp("server") / "animals-index")


@pytest.fixture(scope="module")
def client(index: FusionIndex) -> Iterator[TestClient]:
    """An app over the in-memory index with a fake chat model; one event loop for all its requests."""
    with TestClient(create_app(index, llm=fake_llm()), base_url=LOOPBACK_URL) as test_client:
        yield test_client


@pytest.fixture(autouse=True)
def fresh_stream_exit_event() -> None:
    """sse-starlette 1.x binds one process-wide event to the first loop that streams; tests use several loops.

    (create_app resets it at each start-up, which covers loops that run one after another; the
    module's long-lived client overlaps with others, so every test starts afresh too.)
    """
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit_event = None


@pytest.fixture
def no_openai_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")  # so that undo also removes a key loaded from .env
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)  # no .env file can be found from here


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP clients talk to 127.0.0.1 directly, whatever proxy the environment names."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def _expected(index: FusionIndex, query: str, **options: Any) -> list[Document]:
    return index.as_retriever().invoke(query, **options)


def _as_docs(output: list[dict[str, Any]]) -> list[Document]:
    """Documents from LangServe's JSON serialisation of a list of Documents."""
    return [Document(id=d["id"], page_content=d["page_content"], metadata=d["metadata"]) for d in output]


def _same(actual: list[Document], expected: list[Document]) -> None:
    assert [d.id for d in actual] == [d.id for d in expected]
    assert [d.page_content for d in actual] == [d.page_content for d in expected]
    for got, want in zip(actual, expected, strict=True):
        for key in SCORE_KEYS:
            assert got.metadata[key] == pytest.approx(want.metadata[key]), key


def _sse_events(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a server-sent events body."""
    events = []
    for block in text.replace("\r\n", "\n").strip().split("\n\n"):
        fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in block.split("\n"))
        events.append((fields.get("event", ""), fields.get("data", "")))
    return events


def _detail(response: httpx.Response) -> list[dict[str, Any]]:
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    return detail


# --- the routes -----------------------------------------------------------------------------------


class TestRetrieverRoutes:
    def test_invoke_returns_the_documents_and_scores(self, client: TestClient, index: FusionIndex) -> None:
        response = client.post("/retriever/invoke", json={"input": "cat on a mat"})
        assert response.status_code == 200
        docs = _as_docs(response.json()["output"])
        assert len(docs) == 4
        _same(docs, _expected(index, "cat on a mat"))
        assert docs[0].metadata[keys.FUSION_METHOD] == "weighted"

    def test_configurable_k_alpha_method(self, client: TestClient, index: FusionIndex) -> None:
        config = {"configurable": {"k": 2, "alpha": 0.2, "method": "rrf"}}
        response = client.post("/retriever/invoke", json={"input": "dogs bark", "config": config})
        assert response.status_code == 200
        docs = _as_docs(response.json()["output"])
        _same(docs, _expected(index, "dogs bark", k=2, alpha=0.2, method="rrf"))
        assert {d.metadata[keys.FUSION_METHOD] for d in docs} == {"rrf"}

    def test_configuration_does_not_leak_between_requests(self, client: TestClient, index: FusionIndex) -> None:
        client.post("/retriever/invoke", json={"input": "cat", "config": {"configurable": {"k": 1, "alpha": 1.0}}})
        response = client.post("/retriever/invoke", json={"input": "cat"})
        _same(_as_docs(response.json()["output"]), _expected(index, "cat"))

    def test_batch_with_one_config_per_input(self, client: TestClient, index: FusionIndex) -> None:
        body = {
            "inputs": ["cat", "stock market", "parrots speech"],
            "config": [{"configurable": {"k": 1}}, {"configurable": {"k": 2, "alpha": 0.0}}, {}],
        }
        response = client.post("/retriever/batch", json=body)
        assert response.status_code == 200
        outputs = [_as_docs(o) for o in response.json()["output"]]
        _same(outputs[0], _expected(index, "cat", k=1))
        _same(outputs[1], _expected(index, "stock market", k=2, alpha=0.0))
        _same(outputs[2], _expected(index, "parrots speech"))

    def test_batch_with_a_shared_config(self, client: TestClient, index: FusionIndex) -> None:
        response = client.post(
            "/retriever/batch", json={"inputs": ["cat", "dog"], "config": {"configurable": {"k": 3}}}
        )
        assert [len(o) for o in response.json()["output"]] == [3, 3]

    def test_batch_is_scored_in_one_pass_per_configuration(
        self, client: TestClient, index: FusionIndex, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.local.snapshot import Snapshot

        passes: list[int] = []
        real = Snapshot.vector_contenders_many

        def spy(self: Snapshot, queries: Any, depth: int, where: Any) -> Any:
            passes.append(len(queries))
            return real(self, queries, depth, where)

        monkeypatch.setattr(Snapshot, "vector_contenders_many", spy)
        inputs = ["cat", "stock market", "parrots speech", "dogs bark"]
        configs = [{"configurable": {"k": 2}}, {}, {"configurable": {"k": 2}}, {}]
        response = client.post("/retriever/batch", json={"inputs": inputs, "config": configs})
        assert response.status_code == 200
        assert sorted(passes) == [2, 2]  # one scoring pass per distinct configuration, not one per input
        outputs = [_as_docs(o) for o in response.json()["output"]]
        for text, config, docs in zip(inputs, configs, outputs, strict=True):
            _same(docs, _expected(index, text, **config.get("configurable", {})))

    def test_stream(self, client: TestClient, index: FusionIndex) -> None:
        response = client.post("/retriever/stream", json={"input": "photosynthesis sunlight"})
        assert response.status_code == 200
        events = _sse_events(response.text)
        assert [e for e, _ in events] == ["metadata", "data", "end"]
        _same(_as_docs(json.loads(events[1][1])), _expected(index, "photosynthesis sunlight"))

    def test_config_hash_route(self, client: TestClient, index: FusionIndex) -> None:
        config_hash = LZString.compressToEncodedURIComponent(json.dumps({"configurable": {"k": 1}}))
        response = client.post(f"/retriever/c/{config_hash}/invoke", json={"input": "cat"})
        assert response.status_code == 200
        _same(_as_docs(response.json()["output"]), _expected(index, "cat", k=1))

    def test_schemas_show_the_bounds(self, client: TestClient) -> None:
        input_schema = client.get("/retriever/input_schema").json()
        assert input_schema["type"] == "string"
        assert (input_schema["minLength"], input_schema["maxLength"]) == (1, DEFAULT_MAX_QUERY_CHARS)
        configurable = client.get("/retriever/config_schema").json()["$defs"]["Configurable"]["properties"]
        every = {"k", "alpha", "method", "unread_queries", "filter", "duplicates", "near_duplicate_similarity"}
        every |= set(SELECTION)
        assert set(configurable) == every  # every option but fetch_k
        assert (configurable["k"]["minimum"], configurable["k"]["maximum"]) == (1, DEFAULT_MAX_K)
        assert (configurable["alpha"]["minimum"], configurable["alpha"]["maximum"]) == (0, 1)
        assert configurable["method"]["enum"] == ["weighted", "zscore", "rrf"]
        assert client.get("/retriever/output_schema").status_code == 200

    def test_playground_and_openapi(self, client: TestClient) -> None:
        page = client.get("/retriever/playground/")
        assert page.status_code == 200
        assert "<html" in page.text.lower()
        assert client.get("/retriever/playground/../../../etc/passwd").status_code == 404
        paths = client.get("/openapi.json").json()["paths"]
        for route in ("/retriever/invoke", "/retriever/batch", "/retriever/stream", "/rag/invoke", "/health"):
            assert route in paths
        assert "/retriever/stream_events" not in paths

    def test_streams_on_a_second_event_loop(self, index: FusionIndex) -> None:
        app = create_app(index, llm=fake_llm())
        for _ in range(2):  # each client runs its own loop; sse-starlette's exit event must follow
            with TestClient(app, base_url=LOOPBACK_URL) as client:
                response = client.post("/retriever/stream", json={"input": "cat"})
                assert [e for e, _ in _sse_events(response.text)] == ["metadata", "data", "end"]

    def test_stream_log_for_the_playground(self, client: TestClient) -> None:
        with pytest.warns(Warning):  # langchain-core deprecates astream_log, which the playground still uses
            response = client.post("/retriever/stream_log", json={"input": "cat"})
        assert response.status_code == 200
        assert [e for e, _ in _sse_events(response.text)][-1] == "end"


class TestRagRoutes:
    def test_invoke(self, client: TestClient, index: FusionIndex) -> None:
        response = client.post("/rag/invoke", json={"input": "Why do cats purr?", "config": {"configurable": {"k": 2}}})
        assert response.status_code == 200
        output = response.json()["output"]
        assert output["answer"] == ANSWER
        _same(_as_docs(output["sources"]), _expected(index, "Why do cats purr?", k=2))

    def test_stream_sends_sources_then_the_answer(self, client: TestClient) -> None:
        response = client.post("/rag/stream", json={"input": "Why do cats purr?"})
        assert response.status_code == 200
        events = _sse_events(response.text)
        assert events[0][0] == "metadata" and events[-1][0] == "end"
        chunks = [json.loads(data) for event, data in events if event == "data"]
        assert set(chunks[0]) == {"sources"} and len(chunks[0]["sources"]) == 4
        assert len(chunks) > 2  # the answer comes in pieces
        assert "".join(c.get("answer", "") for c in chunks[1:]) == ANSWER

    def test_batch(self, client: TestClient) -> None:
        response = client.post("/rag/batch", json={"inputs": ["cats?", "dogs?"]})
        assert response.status_code == 200
        assert [o["answer"] for o in response.json()["output"]] == [ANSWER, ANSWER]

    def test_config_schema_has_the_retriever_fields(self, client: TestClient) -> None:
        configurable = client.get("/rag/config_schema").json()["$defs"]["Configurable"]["properties"]
        assert {"k", "alpha", "method"} <= set(configurable)
        assert configurable["k"]["maximum"] == DEFAULT_MAX_K


class TestHealth:
    def test_in_memory_index(self, client: TestClient, index: FusionIndex) -> None:
        health = client.get("/health").json()
        assert health["status"] == "ok"
        assert health["index"] == {
            "kind": "index",
            "documents": len(ANIMALS),
            "embeddings": index.embeddings_id,
            "dimension": 64,
            "manifest": None,
        }
        assert health["routes"] == {"retriever": "/retriever", "rag": "/rag"}
        assert health["rag"] == {"enabled": True, "chat_model": "fake-list-chat-model", "reason": None}
        assert health["defaults"] == {"k": 4, "alpha": 0.5, "method": "weighted", "fetch_k": 100}
        assert health["limits"] == {
            "max_query_chars": DEFAULT_MAX_QUERY_CHARS,
            "max_k": DEFAULT_MAX_K,
            "max_batch_size": DEFAULT_MAX_BATCH_SIZE,
            "max_request_bytes": 1_000_000,
        }

    def test_folder_reports_its_manifest(self, saved: Path, index: FusionIndex) -> None:
        app = create_app(saved, embeddings=HashingEmbeddings(), llm=fake_llm(), k=3, alpha=0.7, method="zscore")
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            health = client.get("/health").json()
            manifest = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))
            assert health["index"]["manifest"] == manifest
            assert health["index"]["manifest"]["counts"]["documents"] == len(ANIMALS)
            assert health["defaults"] == {"k": 3, "alpha": 0.7, "method": "zscore", "fetch_k": 100}
            docs = _as_docs(client.post("/retriever/invoke", json={"input": "cat"}).json()["output"])
            _same(docs, _expected(index, "cat", k=3, alpha=0.7, method="zscore"))


# --- bad requests ---------------------------------------------------------------------------------

TOO_LONG = "cat " * 600  # 2400 characters


class TestBadRequests:
    @pytest.mark.parametrize("route", ["/retriever/invoke", "/retriever/stream", "/rag/invoke", "/rag/stream"])
    @pytest.mark.parametrize(
        ("value", "error_type"),
        [(TOO_LONG, "string_too_long"), ("", "string_too_short"), (42, "string_type"), ({"q": "cat"}, "string_type")],
    )
    def test_bad_query(self, client: TestClient, route: str, value: Any, error_type: str) -> None:
        response = client.post(route, json={"input": value})
        assert response.status_code == 422
        assert _detail(response)[0]["type"] == error_type

    @pytest.mark.parametrize("route", ["/retriever/invoke", "/retriever/stream", "/rag/invoke", "/retriever/batch"])
    @pytest.mark.parametrize(
        ("configurable", "error_type"),
        [
            ({"k": 0}, "greater_than_equal"),
            ({"k": -1}, "greater_than_equal"),
            ({"k": DEFAULT_MAX_K + 1}, "less_than_equal"),
            ({"k": 10**9}, "less_than_equal"),
            ({"k": "many"}, "int_parsing"),  # LangServe's own check, before ours
            ({"k": True}, "int_type"),  # strict: a boolean is not a number
            ({"k": 5.0}, "int_type"),
            ({"k": "5"}, "int_type"),
            ({"alpha": -0.1}, "greater_than_equal"),
            ({"alpha": 1.5}, "less_than_equal"),
            ({"alpha": True}, "float_type"),
            ({"alpha": "0.5"}, "float_type"),
            ({"alpha": "NaN"}, "float_type"),
            ({"alpha": "inf"}, "float_type"),
            ({"alpha": "-Infinity"}, "float_type"),
            ({"method": "bogus"}, "literal_error"),
            ({"method": 1}, "literal_error"),
            ({"foo": 1}, "extra_forbidden"),
            ({"index": "/etc"}, "extra_forbidden"),
            ({"fetch_k": 1}, "extra_forbidden"),
        ],
    )
    def test_configurable_out_of_bounds(
        self, client: TestClient, route: str, configurable: dict[str, Any], error_type: str
    ) -> None:
        payload: dict[str, Any] = {"config": {"configurable": configurable}}
        payload.update({"inputs": ["cat"]} if route.endswith("batch") else {"input": "cat"})
        response = client.post(route, json=payload)
        assert response.status_code == 422
        error = _detail(response)[0]
        assert error["type"] == error_type
        assert error["loc"][-1] == next(iter(configurable))

    @pytest.mark.parametrize(
        "configurable", [{"k": DEFAULT_MAX_K + 1}, {"k": True}, {"alpha": "NaN"}, {"alpha": "inf"}, {"foo": 1}]
    )
    @pytest.mark.parametrize("endpoint", ["invoke", "stream", "batch"])
    def test_checks_apply_to_the_config_hash_route(
        self, client: TestClient, configurable: dict[str, Any], endpoint: str
    ) -> None:
        config_hash = LZString.compressToEncodedURIComponent(json.dumps({"configurable": configurable}))
        body = {"inputs": ["cat"]} if endpoint == "batch" else {"input": "cat"}
        response = client.post(f"/retriever/c/{config_hash}/{endpoint}", json=body)
        assert response.status_code == 422, response.text
        assert _detail(response)[0]["loc"][:2] == ["path", "config_hash"]

    @pytest.mark.parametrize("config_hash", ["garbage", "%FF%FE", "N4Ig" * 50, "-", "\u00e9"])
    def test_undecodable_config_hashes_are_client_errors(self, client: TestClient, config_hash: str) -> None:
        response = client.post(f"/retriever/c/{config_hash}/invoke", json={"input": "cat"})
        assert 400 <= response.status_code < 500, response.text

    def test_a_nul_in_a_path_is_not_found(self, client: TestClient) -> None:
        for path in ("/retriever/playground/assets/%00", "/retriever/playground/%00x", "/health%00"):
            assert client.get(path).status_code == 404
        assert client.get("/health").status_code == 200  # the keep-alive connection still works

    @pytest.mark.parametrize(
        "path",
        [
            "/retriever/playground/assets/",  # a folder
            "/retriever/playground/assets",
            "/retriever/playground/index.html/x",  # a file used as a folder
            "/retriever/playground/assets/" + "a" * 300,  # longer than any file name
            "/retriever/playground/" + "a/" * 3000,
        ],
    )
    def test_playground_paths_that_name_no_file_are_not_found(self, client: TestClient, path: str) -> None:
        assert client.get(path).status_code == 404  # the test client raises what would have been a 500
        assert client.get("/retriever/playground/index.html").status_code == 200

    def test_bound_applies_to_each_config_of_a_batch(self, client: TestClient) -> None:
        body = {"inputs": ["cat", "dog"], "config": [{"configurable": {"k": 1}}, {"configurable": {"k": 1000}}]}
        response = client.post("/retriever/batch", json=body)
        assert response.status_code == 422

    def test_batch_too_large(self, client: TestClient) -> None:
        response = client.post("/retriever/batch", json={"inputs": ["cat"] * (DEFAULT_MAX_BATCH_SIZE + 1)})
        assert response.status_code == 422
        assert _detail(response)[0]["msg"] == f"a batch holds at most {DEFAULT_MAX_BATCH_SIZE} inputs; got 33"
        assert client.post("/rag/batch", json={"inputs": ["cat"] * 40}).status_code == 422
        full = client.post("/retriever/batch", json={"inputs": ["cat"] * DEFAULT_MAX_BATCH_SIZE})
        assert full.status_code == 200

    def test_bad_inputs_in_a_batch(self, client: TestClient) -> None:
        response = client.post("/retriever/batch", json={"inputs": ["cat", TOO_LONG, 7]})
        assert response.status_code == 422
        assert [(e["loc"], e["type"]) for e in _detail(response)] == [
            (["body", "inputs", 1], "string_too_long"),
            (["body", "inputs", 2], "string_type"),
        ]

    def test_malformed_bodies(self, client: TestClient) -> None:
        headers = {"content-type": "application/json"}
        assert client.post("/retriever/invoke", content=b"{not json", headers=headers).status_code == 422
        assert client.post("/retriever/batch", content=b"{not json", headers=headers).status_code == 422
        assert client.post("/retriever/invoke", json={"query": "cat"}).status_code == 422
        not_a_list = client.post("/retriever/batch", json={"inputs": "cat"})  # not three one-letter queries
        assert not_a_list.status_code == 422
        assert _detail(not_a_list)[0]["msg"] == "inputs must be a list of queries"
        assert client.post("/retriever/batch", json={"inputs": {"a": 1}}).status_code == 422
        assert client.post("/retriever/batch", json={"config": {}}).status_code == 422
        assert client.post("/retriever/batch", json={"inputs": ["a", "b"], "config": [{}]}).status_code == 422

    def test_body_too_large(self, client: TestClient) -> None:
        big = json.dumps({"input": "x" * 1_000_001}).encode()
        response = client.post("/retriever/invoke", content=big, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert "1000000 bytes" in response.json()["detail"]

        def chunked() -> Iterator[bytes]:  # no content-length: counted as it arrives
            yield b'{"input": "'
            for _ in range(20):
                yield b"x" * 60_000
            yield b'"}'

        response = client.post("/retriever/invoke", content=chunked(), headers={"content-type": "application/json"})
        assert response.status_code == 413

    @pytest.mark.parametrize("route", ["/retriever/invoke", "/retriever/batch", "/rag/stream"])
    @pytest.mark.parametrize(
        ("body", "message"),
        [
            (b'{"input": "cat", "config": {"configurable": {"alpha": NaN}}}', "NaN and Infinity"),
            (b'{"input": "cat", "config": {"configurable": {"alpha": -Infinity}}}', "NaN and Infinity"),
            (b'{"input": "cat", "config": {"configurable": {"k": 1e400}}}', "NaN and Infinity"),
            (b'{"inputs": ["cat", NaN], "input": NaN}', "NaN and Infinity"),
            (b'{"input": "cat \\ud800 dog", "inputs": ["\\udfff"]}', "unpaired surrogate"),
            (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
            (b"\xff\xfe\x00", "not UTF-8"),
            ('{"input": "café"}'.encode("utf-16"), "not UTF-8"),
            (b'{"input": "cat", "config": null}', "config must be an object"),
            (b'{"input": "cat", "x": ' + b"9" * 5000 + b"}", "limited to 4300 digits"),
            (b'{"input": "cat", "config": {"configurable": {"k": -' + b"1" * 4301 + b"}}}", "limited to 4300 digits"),
        ],
    )
    def test_json_that_python_accepts_but_is_not_json(
        self, client: TestClient, route: str, body: bytes, message: str
    ) -> None:
        response = client.post(route, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422
        error = _detail(response)[0]
        assert error["type"] == "json_invalid"
        assert message in error["msg"]

    @pytest.mark.parametrize(
        "body",
        [
            b"",
            b"null",
            b"[]",
            b'"cat"',
            b'{"input": null}',
            b'{"input": ["cat"]}',
            b'{"input": "cat", "config": null}',
            b'{"input": "cat", "config": []}',
            b'{"input": "cat", "config": {"configurable": null}}',
            b'{"input": "cat", "config": {"configurable": [1]}}',
            b'{"input": "cat", "config": {"configurable": {"k": null, "alpha": "high", "method": 3}}}',
            b'{"inputs": [], "config": []}',
            b'{"inputs": null}',
            b'{"inputs": [null, {}, []]}',
            b'{"inputs": ["cat"], "config": "k=3"}',
            b'{"input": "cat", "kwargs": {"k": 500}}',
            b"\xff\xfe\x00",
            '{"input": "caf\u00e9 \U0001f600 \u0000"}'.encode(),
        ],
    )
    def test_odd_bodies_never_fail_the_server(self, client: TestClient, body: bytes) -> None:
        for route in ("/retriever/invoke", "/retriever/batch", "/retriever/stream", "/rag/invoke"):
            response = client.post(route, content=body, headers={"content-type": "application/json"})
            assert response.status_code < 500, (route, body, response.text)

    def test_wrong_method_and_unknown_routes(self, client: TestClient) -> None:
        assert client.get("/retriever/invoke").status_code == 405
        assert client.post("/retriever/stream_events", json={"input": "cat"}).status_code == 404
        assert client.post("/index/invoke", json={"input": "cat"}).status_code == 404

    def test_unknown_configurable_keys_are_named(self, client: TestClient) -> None:
        config = {"configurable": {"fetch_k": 1, "index": "/etc", "filter": {"source": "doc0.txt"}}}
        response = client.post("/retriever/invoke", json={"input": "cat", "config": config})
        assert response.status_code == 422
        errors = _detail(response)
        assert sorted(e["loc"][-1] for e in errors) == ["fetch_k", "index"]  # the filter is a request option
        fields = ["k", "alpha", "method", "unread_queries", "filter", "duplicates", "near_duplicate_similarity"]
        fields = sorted([*fields, *SELECTION])
        assert all(f"the fields are {fields}" in e["msg"] for e in errors)

    def test_other_config_keys_are_refused_or_dropped(self, client: TestClient, index: FusionIndex) -> None:
        response = client.post("/retriever/invoke", json={"input": "cat", "config": {"recursion_limit": 1}})
        assert response.status_code == 200
        _same(_as_docs(response.json()["output"]), _expected(index, "cat"))

    def test_custom_limits(self, index: FusionIndex) -> None:
        app = create_app(
            index, llm=fake_llm(), k=2, max_query_chars=10, max_k=3, max_batch_size=2, max_request_bytes=300
        )
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            assert client.post("/retriever/invoke", json={"input": "cat dog bird"}).status_code == 422
            assert client.post("/retriever/invoke", json={"input": "cat dog"}).status_code == 200
            k4 = {"input": "cat", "config": {"configurable": {"k": 4}}}
            assert client.post("/retriever/invoke", json=k4).status_code == 422
            assert client.post("/retriever/batch", json={"inputs": ["a", "b", "c"]}).status_code == 422
            padded = {"input": "cat", "padding": "x" * 300}
            assert client.post("/retriever/invoke", json=padded).status_code == 413
            assert client.get("/health").json()["limits"]["max_k"] == 3


# --- what create_app accepts ------------------------------------------------------------------------


class _KeyRefused(FakeListChatModel):
    """A provider refusing the API key on every call, streamed or not."""

    def _call(self, *args: Any, **kwargs: Any) -> str:
        raise PermissionError("Incorrect API key provided")

    def _stream(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError("Incorrect API key provided")

    async def _astream(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError("Incorrect API key provided")
        yield  # an async generator that fails before its first chunk


class TestCrossSiteRequests:
    """What a web page the user visits could send a server on this machine: refused before anything runs."""

    @pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", ""])
    def test_a_foreign_host_is_refused_on_a_loopback_address(self, client: TestClient, host: str) -> None:
        response = client.post("/rag/invoke", json={"input": "cat"}, headers={"host": host})
        assert response.status_code == 421
        assert "this server does not answer for the host" in response.json()["detail"]
        assert client.get("/health", headers={"host": host}).status_code == 421

    @pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "LOCALHOST:8000", "[::1]:8000", "::1"])
    def test_this_machines_names_are_answered(self, client: TestClient, host: str) -> None:
        assert client.post("/retriever/invoke", json={"input": "cat"}, headers={"host": host}).status_code == 200

    @pytest.mark.parametrize(
        "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
    )
    def test_a_body_that_is_not_json_is_refused(self, client: TestClient, content_type: str | None) -> None:
        headers = {} if content_type is None else {"content-type": content_type}
        response = client.post("/rag/invoke", content=b'{"input": "cat"}', headers=headers)
        assert response.status_code == 415
        assert "Content-Type: application/json" in response.json()["detail"]
        headers = {"content-type": "application/json; charset=utf-8"}
        assert client.post("/rag/invoke", content=b'{"input": "cat"}', headers=headers).status_code == 200

    def test_allowed_hosts(self, index: FusionIndex) -> None:
        limits = ServeLimits(allowed_hosts="search.example.com, Other.Example")
        assert limits.allowed_hosts == ("search.example.com", "other.example")
        with TestClient(create_app(index, llm=None, limits=limits), base_url="http://search.example.com") as client:
            assert client.post("/retriever/invoke", json={"input": "cat"}).status_code == 200
            assert client.get("/health", headers={"host": "other.example"}).status_code == 200
            assert client.get("/health", headers={"host": "evil.example"}).status_code == 421
        anywhere = create_app(index, llm=None, limits=ServeLimits(allowed_hosts=("*",)))
        with TestClient(anywhere, base_url="http://evil.example") as client:
            assert client.get("/health").status_code == 200
        exposed = create_app(index, llm=None, limits=ServeLimits(host="0.0.0.0"))  # the network decides
        with TestClient(exposed, base_url="http://search.example.com") as client:
            assert client.get("/health").status_code == 200
        with pytest.raises(InvalidParameterError, match="allowed_hosts must be host names"):
            ServeLimits(allowed_hosts=[3])


class TestProviderFailures:
    def test_a_failing_chat_model_answers_502_in_one_line(self, index: FusionIndex) -> None:
        app = create_app(index, llm=_KeyRefused(responses=["x"]), llm_timeout=5)
        with TestClient(app, raise_server_exceptions=False, base_url=LOOPBACK_URL) as client:
            response = client.post("/rag/invoke", json={"input": "cat"})
            assert response.status_code == 502
            assert response.json() == {"detail": "the chat model failed: PermissionError: Incorrect API key provided"}
            assert client.post("/retriever/invoke", json={"input": "cat"}).status_code == 200  # still serving

    def test_a_stream_whose_chat_model_fails_ends_with_an_error_event(
        self, index: FusionIndex, caplog: pytest.LogCaptureFixture
    ) -> None:
        app = create_app(index, llm=_KeyRefused(responses=["x"]), llm_timeout=5)
        with (
            TestClient(app, base_url=LOOPBACK_URL) as client,
            caplog.at_level(logging.WARNING),
        ):  # raises if the app raised
            response = client.post("/rag/stream", json={"input": "cat"})
            assert response.status_code == 200
            events = _sse_events(response.text)
            assert [event for event, _ in events] == ["metadata", "data", "error"]
            assert json.loads(events[-1][1]) == {
                "status_code": 502,
                "message": "the chat model failed: PermissionError: Incorrect API key provided",
            }
            assert client.post("/retriever/stream", json={"input": "cat"}).status_code == 200  # still serving
        assert "Traceback" not in caplog.text
        assert "POST /rag/stream: the chat model failed: PermissionError: Incorrect API key provided" in caplog.text

    def test_a_rerank_that_rated_nothing_answers_502(self, index: FusionIndex) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        model = RatingModel(rule=lambda text: ConnectionError("connection refused"))
        app = create_app(index, llm=model, reranker="llm", rerank_candidates=4)
        with TestClient(app, raise_server_exceptions=False, base_url=LOOPBACK_URL) as client:
            response = client.post("/retriever/invoke", json={"input": "cat"})
        assert response.status_code == 502
        assert response.json()["detail"].startswith(
            "rerank failed: no candidate could be rated: candidates 1, 2, 3, 4 ("
        )

    @pytest.mark.parametrize("timeout", [0, -1.0, True, "5"])
    def test_a_bad_llm_timeout_is_refused(self, index: FusionIndex, timeout: Any) -> None:
        with pytest.raises(InvalidParameterError, match="timeout"):
            create_app(index, llm=fake_llm(), llm_timeout=timeout)


class TestCreateApp:
    def test_index_is_loaded_once_not_per_request(self, saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        app = create_app(saved, embeddings=HashingEmbeddings(), llm=fake_llm())

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a request loaded an index")

        monkeypatch.setattr(FusionIndex, "load", refuse)
        monkeypatch.setattr(HierarchicalIndex, "load", refuse)
        monkeypatch.setattr(LocalStore, "load", refuse)
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            assert client.post("/retriever/invoke", json={"input": "cat"}).status_code == 200
            assert client.post("/retriever/batch", json={"inputs": ["cat", "dog"]}).status_code == 200
            assert client.post("/rag/invoke", json={"input": "cat"}).status_code == 200
            assert client.get("/health").status_code == 200

    def test_without_a_chat_model_only_the_retriever(
        self, index: FusionIndex, no_openai_key: None, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level("INFO", logger="langchain_fusion.server"):
            app = create_app(index)
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            health = client.get("/health").json()
            assert health["routes"] == {"retriever": "/retriever", "rag": None}
            assert health["rag"]["enabled"] is False
            assert health["rag"]["chat_model"] is None
            assert health["rag"]["reason"].startswith("OPENAI_API_KEY is not set")
            assert client.post("/rag/invoke", json={"input": "cat"}).status_code == 404
            assert client.post("/retriever/invoke", json={"input": "cat"}).status_code == 200
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1
        assert "no chat model, so only /retriever is served" in warnings[0].getMessage()
        assert "OPENAI_API_KEY" in warnings[0].getMessage()

    def test_default_chat_model_with_a_key(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")  # nothing is called
        health = create_app(index).state.langchain_fusion
        assert health["rag"] == {"enabled": True, "chat_model": "openai-chat:gpt-4o-mini", "reason": None}

    def test_chat_model_spec_that_cannot_be_built(self, index: FusionIndex, no_openai_key: None) -> None:
        with pytest.raises(FusionError, match="OPENAI_API_KEY is not set"):
            create_app(index, llm="openai:gpt-4.1")
        with pytest.raises(FusionError, match="unknown chat model 'nonsense'"):
            create_app(index, llm="nonsense")

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"k": 0}, "k must be a positive whole number"),
            ({"k": 101}, "k \\(101\\) must be at most max_k \\(100\\)"),
            ({"k": 5, "max_k": 4}, "k \\(5\\) must be at most max_k \\(4\\)"),
            ({"alpha": 2}, "alpha must be"),
            ({"method": "max"}, "method must be one of"),
            ({"fetch_k": 0}, "fetch_k must be"),
            ({"max_query_chars": 0}, "max_query_chars must be a positive whole number"),
            ({"max_batch_size": -1}, "max_batch_size must be"),
            ({"max_request_bytes": 1.5}, "max_request_bytes must be"),
        ],
    )
    def test_invalid_parameters(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            create_app(index, llm=fake_llm(), **options)

    def test_not_an_index(self, tmp_path: Path) -> None:
        with pytest.raises(IndexFormatError, match="is not a folder"):
            create_app(tmp_path / "ghost", llm=fake_llm())
        (tmp_path / "empty").mkdir()
        with pytest.raises(IndexFormatError, match=r"manifest\.json is missing"):
            create_app(tmp_path / "empty", llm=fake_llm())

    def test_wrong_embeddings(self, saved: Path) -> None:
        with pytest.raises(FusionError, match="was built with embeddings"):
            create_app(saved, embeddings=HashingEmbeddings(model="other"), llm=fake_llm())


@pytest.fixture(scope="module")
def hierarchical(index: FusionIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ids = [d.id for d in index.documents]
    summaries = [
        Document(
            page_content="Pets: cats, dogs and parrots, purring, barking and speech.",
            metadata={keys.SOURCE: "pets", keys.SUMMARY_CHUNK_IDS: [ids[i] for i in (0, 1, 2, 4, 6)]},
        ),
        Document(
            page_content="Science and money: quantum physics, photosynthesis and the stock market.",
            metadata={keys.SOURCE: "science", keys.SUMMARY_CHUNK_IDS: [ids[i] for i in (3, 5, 7)]},
        ),
    ]
    built = HierarchicalIndex.from_summaries(index, summaries)
    return built.save(tmp_path_factory.mktemp("hier") / "animals-hierarchical")


class TestPipeline:
    """Rerank and multi-query fusion around the served retriever, configured at start-up."""

    def test_cross_encoder_rerank(self, index: FusionIndex, tiny_cross_encoder: Path) -> None:
        from langchain_fusion import CrossEncoderReranker, RerankRetriever

        app = create_app(index, llm=fake_llm(), reranker=f"cross-encoder:{tiny_cross_encoder}", rerank_candidates=6)
        reference = RerankRetriever(
            retriever=index.as_retriever(k=6), reranker=CrossEncoderReranker(model=str(tiny_cross_encoder))
        )
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            docs = _as_docs(client.post("/retriever/invoke", json={"input": "cat"}).json()["output"])
            assert [d.id for d in docs] == [d.id for d in reference.invoke("cat", top_n=4)]
            assert all(keys.RERANK_SCORE in d.metadata and keys.FUSION_SCORE in d.metadata for d in docs)
            body = {"input": "cat", "config": {"configurable": {"k": 2, "alpha": 0.3}}}
            two = _as_docs(client.post("/retriever/invoke", json=body).json()["output"])
            assert [d.id for d in two] == [d.id for d in reference.invoke("cat", top_n=2, alpha=0.3)]
            batch = client.post("/retriever/batch", json={"inputs": ["cat", "dog"]}).json()["output"]
            assert [d["id"] for d in batch[0]] == [d.id for d in docs]
            sources = client.post("/rag/invoke", json={"input": "cat"}).json()["output"]["sources"]
            assert [d["id"] for d in sources] == [d.id for d in docs]
            health = client.get("/health").json()
            assert health["pipeline"] == {
                "rerank": {"step": "CrossEncoderReranker", "model": str(tiny_cross_encoder), "candidates": 6},
                "multi_query": None,
                "window": None,
            }

    def test_windows_fill_the_requested_k(self) -> None:
        # The best hits are adjacent chunks of one source: their windows merge, and the search goes deeper.
        docs, start = [], 0
        for i in range(12):
            text = f"part {i} " + ("zebra " * 3 if i in (4, 5, 6) else "zebra " if i in (0, 10) else "") + "grass."
            meta = {keys.SOURCE: "a.txt", keys.CHUNK_INDEX: i, keys.START_INDEX: start}
            docs.append(Document(id=f"a-{i}", page_content=text, metadata=meta))
            start += len(text) + 1
        app = create_app(FusionIndex.from_documents(docs, HashingEmbeddings()), llm=fake_llm(), window=1, alpha=0.0)
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            body = {"input": "zebra", "config": {"configurable": {"k": 3}}}
            passages = _as_docs(client.post("/retriever/invoke", json=body).json()["output"])
        assert [d.id for d in passages] == ["a-4", "a-0", "a-10"]
        assert passages[0].metadata[keys.WINDOW_HITS] == [4, 5, 6]

    def test_llm_rerank_and_multi_query(self, index: FusionIndex) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        def rule(prompt: str) -> Any:
            if "search queries" in prompt:
                return "kitten\nparrots talking"
            if "numbered passages" in prompt:
                return ANSWER
            return 9 if "purr" in prompt else 2

        app = create_app(index, llm=RatingModel(rule=rule), reranker="llm", multi_query=2)
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            body = {"input": "cats", "config": {"configurable": {"k": 3}}}
            docs = _as_docs(client.post("/retriever/invoke", json=body).json()["output"])
            assert len(docs) == 3
            assert docs[0].metadata[keys.RERANK_RATING] == 9 and "purr" in docs[0].page_content
            assert all(d.metadata[keys.MULTI_QUERY_REWRITES] == ["kitten", "parrots talking"] for d in docs)
            rag = client.post("/rag/invoke", json={"input": "cats"}).json()["output"]
            assert rag["answer"] == ANSWER and len(rag["sources"]) == 4
            assert client.get("/health").json()["pipeline"]["multi_query"] == 2

    def test_any_compressor(self, index: FusionIndex) -> None:
        from collections.abc import Sequence

        from langchain_core.callbacks import Callbacks
        from langchain_core.documents import BaseDocumentCompressor

        class Reverse(BaseDocumentCompressor):
            def compress_documents(
                self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
            ) -> Sequence[Document]:
                return list(reversed(documents))

        with TestClient(
            create_app(index, llm=fake_llm(), reranker=Reverse(), rerank_candidates=5), base_url=LOOPBACK_URL
        ) as client:
            docs = _as_docs(client.post("/retriever/invoke", json={"input": "cat"}).json()["output"])
        assert [d.id for d in docs] == [d.id for d in reversed(index.as_retriever(k=5).invoke("cat"))][:4]
        assert [d.metadata[keys.RERANK_RANK] for d in docs] == [1, 2, 3, 4]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"reranker": "cohere"}, "rerank must be 'llm'"),
            pytest.param(
                {"reranker": "cross-encoder:./no-such-model"},
                "does not exist",
                marks=pytest.mark.slow,  # looking for a cross-encoder imports sentence-transformers (torch) first
            ),
            ({"reranker": 42}, "rerank must be 'llm'"),
            ({"reranker": "llm", "rerank_candidates": 0}, "rerank_candidates"),
            ({"reranker": "llm", "rerank_candidates": True}, "rerank_candidates"),
            ({"multi_query": 0}, "n must be"),
            ({"multi_query": 11}, "n must be at most 10"),
            ({"multi_query": True}, "n must be"),
        ],
    )
    def test_invalid_options(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        with pytest.raises(FusionError, match=message):
            create_app(index, llm=fake_llm(), **options)

    @pytest.mark.parametrize("options", [{"reranker": "llm"}, {"multi_query": 2}])
    def test_chat_model_needed(self, index: FusionIndex, no_openai_key: None, options: dict[str, Any]) -> None:
        with pytest.raises(InvalidParameterError, match=r"needs a chat model.*OPENAI_API_KEY"):
            create_app(index, **options)

    @pytest.mark.slow  # looking for a cross-encoder imports sentence-transformers (torch) first
    def test_serve_command_errors(self, saved: Path, no_openai_key: None) -> None:
        status, out, err = run_cli(["serve", str(saved), "--port", "0", "--rerank", "cross-encoder:./no-such-model"])
        assert_one_line_error(status, out, err, "cross-encoder folder './no-such-model' does not exist")
        status, out, err = run_cli(["serve", str(saved), "--port", "0", "--multi-query", "2"])
        assert_one_line_error(status, out, err, "multi_query needs a chat model")


class TestHierarchicalFolder:
    def test_serves_the_hierarchical_retriever(self, hierarchical: Path) -> None:
        loaded = HierarchicalIndex.load(hierarchical, HashingEmbeddings())
        app = create_app(hierarchical, embeddings=HashingEmbeddings(), llm=fake_llm())
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            health = client.get("/health").json()
            assert health["index"]["kind"] == "hierarchical"
            assert (health["index"]["documents"], health["index"]["summaries"]) == (len(ANIMALS), 2)
            assert health["index"]["manifest"]["format"] == "langchain-fusion-hierarchical-index"
            assert health["defaults"]["k_summaries"] == 3
            config = {"configurable": {"k": 3, "k_summaries": 1}}
            response = client.post("/retriever/invoke", json={"input": "cats purr", "config": config})
            assert response.status_code == 200
            docs = _as_docs(response.json()["output"])
            expected = loaded.as_retriever().invoke("cats purr", k=3, k_summaries=1)
            assert [d.id for d in docs] == [d.id for d in expected]
            assert all(d.metadata[keys.SUMMARY_RANK] == 1 for d in docs)
            assert docs[0].metadata[keys.HIERARCHICAL_SCORE] == pytest.approx(
                expected[0].metadata[keys.HIERARCHICAL_SCORE]
            )
            too_many = {"input": "cats", "config": {"configurable": {"k_summaries": DEFAULT_MAX_K + 1}}}
            assert client.post("/retriever/invoke", json=too_many).status_code == 422
            rag = client.post("/rag/invoke", json={"input": "cats purr", "config": config}).json()["output"]
            assert rag["answer"] == ANSWER and len(rag["sources"]) == 3

    def test_k_summaries_default_is_checked(self, hierarchical: Path, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match=r"k_summaries \(6\) must be at most max_k \(5\)"):
            create_app(hierarchical, embeddings=HashingEmbeddings(), llm=fake_llm(), k_summaries=6, max_k=5)
        create_app(index, llm=fake_llm(), k_summaries=6, max_k=5)  # not used by a plain index


# --- a real server ----------------------------------------------------------------------------------


@contextlib.contextmanager
def running(app: FastAPI) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free loopback port in a thread; yield its URL; stop it."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = url_of(sock)
    try:
        _wait_for_health(url, thread.is_alive, timeout=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
    assert not thread.is_alive(), "the server did not stop"


def _wait_for_health(url: str, alive: Any, timeout: float) -> dict[str, Any]:
    """GET /health until it answers (bounded in time); the server must stay alive meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(f"{url}/health", timeout=2)
            if response.status_code == 200:
                health: dict[str, Any] = response.json()
                return health
        except httpx.TransportError:
            pass
        if not alive():
            raise AssertionError("the server stopped before answering /health")
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not answer {url}/health within {timeout} s")
        time.sleep(0.05)


@pytest.mark.usefixtures("loopback_only")
class TestRoundTrip:
    def test_remote_runnable(self, saved: Path, index: FusionIndex) -> None:
        app = create_app(saved, embeddings=HashingEmbeddings(), llm=fake_llm())
        with running(app) as url:
            assert url.startswith("http://127.0.0.1:")
            retriever = RemoteRunnable(f"{url}/retriever/")
            docs = retriever.invoke("cat on a mat")
            assert all(isinstance(d, Document) for d in docs)
            _same(docs, _expected(index, "cat on a mat"))

            config = {"configurable": {"k": 2, "alpha": 0.3, "method": "zscore"}}
            _same(
                retriever.invoke("dogs bark", config=config),
                _expected(index, "dogs bark", k=2, alpha=0.3, method="zscore"),
            )

            batched = retriever.batch(["quantum waves", "parrots"], config={"configurable": {"k": 3}})
            _same(batched[0], _expected(index, "quantum waves", k=3))
            _same(batched[1], _expected(index, "parrots", k=3))

            streamed = list(retriever.stream("sunlight energy"))
            assert len(streamed) == 1
            _same(streamed[0], _expected(index, "sunlight energy"))

            with pytest.raises(httpx.HTTPStatusError, match="422"):
                retriever.invoke("cat", config={"configurable": {"k": DEFAULT_MAX_K + 1}})
            with pytest.raises(httpx.HTTPStatusError, match="422"):
                retriever.batch(["cat"] * (DEFAULT_MAX_BATCH_SIZE + 1))

            rag = RemoteRunnable(f"{url}/rag/")
            result = rag.invoke("Why do cats purr?", config={"configurable": {"k": 2}})
            assert result["answer"] == ANSWER
            _same(result["sources"], _expected(index, "Why do cats purr?", k=2))
            chunks = list(rag.stream("Why do cats purr?"))
            assert set(chunks[0]) == {"sources"}
            assert "".join(c.get("answer", "") for c in chunks[1:]) == ANSWER

            health = httpx.get(f"{url}/health").json()
            assert health["index"]["manifest"]["counts"]["documents"] == len(ANIMALS)

    def test_refusals_keep_the_connection_alive(self, index: FusionIndex) -> None:
        """Each refusal is a 4xx on the same keep-alive connection (an unhandled error would be a 500)."""
        import http.client

        config_hash = LZString.compressToEncodedURIComponent(json.dumps({"configurable": {"alpha": "-Infinity"}}))
        requests = [
            ("POST", "/retriever/invoke", b'{"input": "cat", "config": {"configurable": {"alpha": "NaN"}}}', 422),
            ("POST", "/retriever/stream", b'{"input": "cat", "config": {"configurable": {"alpha": "inf"}}}', 422),
            ("POST", f"/retriever/c/{config_hash}/invoke", b'{"input": "cat"}', 422),
            ("POST", f"/retriever/c/{config_hash}/stream", b'{"input": "cat"}', 422),
            ("POST", "/retriever/invoke", b'{"input": "cat", "config": {"configurable": {"alpha": NaN}}}', 422),
            ("POST", "/retriever/invoke", b'{"input": "cat", "x": ' + b"9" * 5000 + b"}", 422),
            ("POST", "/retriever/invoke", b'{"input": "cat", "config": {"configurable": {"k": true}}}', 422),
            ("POST", "/retriever/invoke", b'{"input": "cat", "config": {"configurable": {"foo": 1}}}', 422),
            ("GET", "/retriever/playground/assets/%00", None, 404),
            ("GET", "/retriever/playground/assets/" + "a" * 300, None, 404),
            ("GET", "/health", None, 200),
        ]
        with running(create_app(index, llm=fake_llm())) as url:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                connection.connect()
                first = connection.sock
                for method, path, body, status in requests:
                    headers = {} if body is None else {"content-type": "application/json"}
                    connection.request(method, path, body=body, headers=headers)
                    response = connection.getresponse()
                    response.read()
                    assert (path[:60], response.status) == (path[:60], status)
                    assert not response.will_close and connection.sock is first
            finally:
                connection.close()

    async def test_async_client(self, index: FusionIndex) -> None:
        with running(create_app(index, llm=fake_llm())) as url:
            retriever = RemoteRunnable(f"{url}/retriever/")
            _same(await retriever.ainvoke("cat", config={"configurable": {"k": 2}}), _expected(index, "cat", k=2))
            results = await retriever.abatch(["cat", "dog", "market"])
            assert [len(r) for r in results] == [4, 4, 4]


# --- the serve command ------------------------------------------------------------------------------


class TestServeCommand:
    def test_help_explains_every_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--help"])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        for flag in ("--host", "--port", "--llm", "--embeddings", "-k", "--alpha", "--method", "--fetch-k"):
            assert flag in text
        for flag in ("--max-k", "--max-query-chars", "--max-batch-size", "--log-level", "127.0.0.1", "/health"):
            assert flag in text

    def test_a_stop_gives_requests_in_flight_a_deadline(
        self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import uvicorn

        from langchain_fusion import server

        configs: list[Any] = []
        monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: configs.append(self.config))
        with bind_socket("127.0.0.1", 0) as sock:
            server.serve(create_app(index, llm=None), sock=sock)
        (config,) = configs
        assert config.timeout_graceful_shutdown == server.SHUTDOWN_GRACE_SECONDS == 10

    def test_missing_folder(self, tmp_path: Path) -> None:
        assert_one_line_error(*run_cli(["serve", str(tmp_path / "ghost"), "--port", "0"]), "is not a folder")

    def test_bad_port(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "idx", "--port", "70000"])
        assert exit_info.value.code == 2
        assert "expected a TCP port from 0 to 65535" in capsys.readouterr().err

    def test_k_above_max_k(self, saved: Path) -> None:
        assert_one_line_error(
            *run_cli(["serve", str(saved), "-k", "20", "--max-k", "10"]), "k (20) must be at most max_k (10)"
        )

    def test_port_in_use_fails_before_loading(self, tmp_path: Path) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            status, out, err = run_cli(["serve", str(tmp_path / "ghost"), "--port", str(port)])
        assert_one_line_error(status, out, err, f"cannot listen on 127.0.0.1:{port}")

    def test_explicit_chat_model_that_cannot_be_built(self, saved: Path, no_openai_key: None) -> None:
        status, out, err = run_cli(["serve", str(saved), "--port", "0", "--llm", "openai:gpt-4.1"])
        assert_one_line_error(status, out, err, "OPENAI_API_KEY is not set")

    def test_index_that_cannot_be_reopened_by_name(self, saved: Path) -> None:
        # The hashing embeddings of the tests cannot be recreated from the manifest.
        assert_one_line_error(*run_cli(["serve", str(saved), "--port", "0"]), "cannot be recreated by name")

    def test_without_the_server_extra(self, saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "langserve", None)  # as if LangServe were not installed
        monkeypatch.delitem(sys.modules, "langchain_fusion.server")
        monkeypatch.delattr("langchain_fusion.server")
        status, out, err = run_cli(["serve", str(saved)])
        assert_one_line_error(
            status, out, err, "needs the 'server' extra (langserve is missing)", "langchain-fusion[server]"
        )

    def test_flags_are_the_serving_limits(self) -> None:
        from langchain_fusion.cli.app import build_parser
        from langchain_fusion.cli.arguments import limits_from_args
        from langchain_fusion.pipeline import ServeLimits

        args = build_parser().parse_args(["serve", "idx"])
        assert limits_from_args(args) == ServeLimits()
        args = build_parser().parse_args(["serve", "idx", "--max-k", "7", "--port", "0", "--host", "::1"])
        assert limits_from_args(args) == ServeLimits(max_k=7, port=0, host="::1")

    def test_loopback(self) -> None:
        assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
        assert is_loopback("[::1]") and is_loopback("127.0.0.2")
        assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.org")


@pytest.mark.local_model
@pytest.mark.subprocess
@pytest.mark.usefixtures("loopback_only")
def test_serve_command_round_trip(handbook_index: Path, tmp_path: Path) -> None:
    """``langchain-fusion serve`` in a subprocess on a free port: start-up lines, /health, a query, Ctrl-C."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    # What the console script runs (pyproject: langchain-fusion = "langchain_fusion.cli:main").
    entry = "import sys; from langchain_fusion.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", entry, "serve", str(handbook_index), "--port", "0"]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or []], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None:
            assert time.monotonic() < deadline, f"no start-up line within 120 s: {seen}"
            assert process.poll() is None or not lines.empty(), f"serve exited ({process.returncode}): {seen}"
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=0.5))
                match = re.search(r" at (http://127\.0\.0\.1:\d+)$", seen[-1].rstrip())
                url = match.group(1) if match else None
        health = _wait_for_health(url, lambda: process.poll() is None, timeout=60)
        assert health["index"]["embeddings"] == "local:sentence-transformers/all-MiniLM-L6-v2"
        assert health["rag"]["enabled"] is False
        docs = RemoteRunnable(f"{url}/retriever/").invoke(
            "torque for the busbar bolts", config={"configurable": {"k": 2}}
        )
        assert len(docs) == 2
        assert all(d.metadata["source"].endswith("maintenance-handbook.md") for d in docs)
        with contextlib.suppress(queue.Empty):
            while True:
                seen.append(lines.get(timeout=0.5))
        startup = [line for line in seen if line.startswith("langchain-fusion: ")]
        assert startup[0].startswith(f"langchain-fusion: serving {handbook_index} (")
        assert any("no chat model, so /rag is not served: OPENAI_API_KEY is not set" in line for line in startup)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=60)  # the pipe closes when the process exits; a loaded machine may take a while to drain it
        if process.stderr is not None:
            process.stderr.close()  # our end of the pipe
    while not lines.empty():
        seen.append(lines.get())
    assert process.returncode == 0, seen
    assert seen[-1] == "langchain-fusion: stopped\n"
    assert "Traceback" not in "".join(seen)
