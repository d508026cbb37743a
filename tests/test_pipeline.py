"""The option schema, the pipeline spec and the one composer, and how every face derives from them."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from pydantic import TypeAdapter, ValidationError

from langchain_fusion import (
    FusionIndex,
    FusionRetriever,
    HierarchicalIndex,
    HierarchyOptions,
    InvalidParameterError,
    PipelineSpec,
    SearchOptions,
    ServeLimits,
    build_pipeline,
)
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import build_parser, main
from langchain_fusion.cli.arguments import flag_of, given_options
from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever
from langchain_fusion.retrievers.multi_query import MultiQueryFusionRetriever
from langchain_fusion.retrievers.rerank_retriever import RerankRetriever
from langchain_fusion.retrievers.windows import ContextWindowRetriever
from langchain_fusion.search.fusion import FUSION_METHODS, NORMALISERS
from langchain_fusion.search.options import (
    OPTION_CHECKS,
    SEARCH_DEFAULTS,
    SELECTION_OPTIONS,
    DuplicateOptions,
    FusionOptions,
    request_annotation,
)
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import RatingModel
from tests.helpers.paths import LOOPBACK_URL

EDGES: dict[str, tuple[list[Any], list[Any]]] = {
    # option: (values the check accepts, values it refuses)
    "k": ([1, 7], [0, -1, 1.5, True]),
    "alpha": ([0, 0.0, 0.25, 1], [-0.01, 1.01, float("nan"), True, "0.5"]),
    "fetch_k": ([1, None], [0, 2.5]),
    "method": (list(FUSION_METHODS), ["max", 1]),
    "filter": ([None, {"source": "a.txt"}, {"page": [1, 2], "x": None}], [{"a": {"b": 1}}, [1], "a"]),
    "tenant": ([None, "acme", "tenant 7"], ["", "  ", True, 1.5, ["acme"]]),
    "min_vector_score": ([-1.0, 0, 1.0, None], [-1.01, 1.01, float("inf")]),
    "min_bm25_score": ([0, 3.5, None], [-0.1, float("nan")]),
    "lambda_mult": ([0, 1, None], [-0.1, 1.1]),
    "max_per_source": ([1, 3, None], [0, 1.5, False]),
    "min_relevance": ([0, 0.3, 1, None], [-0.1, 1.1, float("nan"), "0.3", True]),
    "duplicates": (["exact", "near", "keep"], ["collapse", True, 1]),
    "near_duplicate_similarity": ([0, 0.5, 0.98, 1], [-0.1, 1.01, True, "0.9"]),
    "k_summaries": ([1, 5], [0, 2.0]),
    "summary_weight": ([0, 1], [1.5, -0.5]),
}


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    docs = [Document(page_content=text, metadata={keys.SOURCE: f"doc{i % 3}.txt"}) for i, text in enumerate(ANIMALS)]
    return FusionIndex.from_documents(docs, HashingEmbeddings())


class TestOptionSchema:
    def test_every_option_has_a_default_a_check_and_a_description(self) -> None:
        fields = {**SearchOptions.model_fields, **HierarchyOptions.model_fields}
        assert set(OPTION_CHECKS) == set(fields) == set(EDGES)
        for name, field in fields.items():
            assert field.description and len(field.description) > 20, name
            assert OPTION_CHECKS[name](field.default) == field.default, name

    @pytest.mark.parametrize("name", list(EDGES))
    def test_the_schema_and_the_check_agree(self, name: str) -> None:
        """What a request's schema allows is what the check accepts (the bounds are written once, as data)."""
        accepted, refused = EDGES[name]
        adapter = TypeAdapter(request_annotation(name, nullable=True))
        for value in accepted:
            OPTION_CHECKS[name](value)
            adapter.validate_python(value, strict=True)
        for value in refused:
            with pytest.raises(InvalidParameterError):
                OPTION_CHECKS[name](value)
            if not isinstance(value, float) or value == value:  # the schema's numbers allow NaN; the check does not
                with pytest.raises(ValidationError):
                    adapter.validate_python(value, strict=True)

    def test_request_schema_caps_k_and_shows_the_bounds(self) -> None:
        schema = TypeAdapter(request_annotation("k", max_k=50)).json_schema()
        assert (schema["minimum"], schema["maximum"]) == (1, 50)
        assert "How many results" in schema["description"]
        floor = TypeAdapter(request_annotation("min_vector_score", nullable=True)).json_schema()
        assert floor["anyOf"][0] == {"type": "number", "minimum": -1.0, "maximum": 1.0}
        assert TypeAdapter(request_annotation("filter")).json_schema()["anyOf"][0]["type"] == "object"

    def test_the_retrievers_are_the_schema(self) -> None:
        assert FusionRetriever.per_call_option_names() == tuple(SearchOptions.model_fields)
        for name, field in SearchOptions.model_fields.items():
            assert FusionRetriever.model_fields[name].default == field.default
        expected = (
            *FusionOptions.model_fields,
            "tenant",
            "filter",
            *DuplicateOptions.model_fields,
            *HierarchyOptions.model_fields,
            "min_relevance",  # its own calibration (HierarchicalIndex.calibrate); no raw floors, no diversity
        )
        assert set(HierarchicalRetriever.per_call_option_names()) == set(expected)
        assert SELECTION_OPTIONS == (
            "min_vector_score",
            "min_bm25_score",
            "lambda_mult",
            "max_per_source",
            "min_relevance",
        )

    def test_each_fusion_method_has_a_normaliser(self) -> None:
        assert set(NORMALISERS) == set(FUSION_METHODS)

    def test_a_misspelt_option_is_named(self) -> None:
        with pytest.raises(InvalidParameterError, match="alhpa: not an option of SearchOptions"):
            SearchOptions(alhpa=0.3)  # type: ignore[call-arg]


class TestCommandLineFlags:
    @pytest.mark.parametrize("command", ["query", "ask", "serve", "mcp"])
    def test_a_flag_per_option_with_the_schema_default(
        self, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("COLUMNS", "400")
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for name in [*SearchOptions.model_fields, *HierarchyOptions.model_fields]:
            assert flag_of(name) in text, (command, name)
        assert "(default: 100" in text and "(default: weighted" in text

    def test_flags_not_given_leave_the_schema_defaults(self) -> None:
        args = build_parser().parse_args(["query", "idx", "q"])
        assert given_options(args) == {}
        args = build_parser().parse_args(["query", "idx", "q", "--fetch-k", "all", "-k", "3", "--filter", '{"a": 1}'])
        assert given_options(args) == {"fetch_k": None, "k": 3, "filter": {"a": 1}}

    def test_a_flag_value_is_checked_by_the_option_check(self, capsys: pytest.CaptureFixture[str]) -> None:
        for argv, message in [
            (["--alpha", "1.5"], "argument --alpha: expected a number between 0 and 1, got '1.5'"),
            (["--filter", "[1]"], "argument --filter: expected a JSON object"),
            (["--filter", '{"a": {"b": 1}}'], "argument --filter: expected a JSON object"),
        ]:
            with pytest.raises(SystemExit):
                main(["query", "idx", "q", *argv])
            assert message in capsys.readouterr().err


class TestSpec:
    def test_flat_options_are_routed(self) -> None:
        spec = PipelineSpec.of("idx", k=8, alpha=0.3, k_summaries=2, reranker="llm", llm="openai:x")
        assert (spec.search.k, spec.search.alpha, spec.hierarchy.k_summaries) == (8, 0.3, 2)
        assert spec.reranker == "llm" and spec.needs_chat_model
        assert spec.options_set() == ["k", "alpha", "k_summaries", "reranker", "llm"]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"bogus": 1}, r"unknown option\(s\) \['bogus'\]; the options are \[.*'alpha'"),
            ({"alpha": 2}, "alpha must be a number between 0 and 1"),
            ({"window_max_chars": 100}, r"window_max_chars is the character budget of context windows: set window=N"),
            (
                {"hierarchical": False, "k_summaries": 2},
                r"k_summaries: options of hierarchical .*set hierarchical=True",
            ),
            ({"hierarchical": True, "max_per_source": 2}, "max_per_source apply to fused search"),
            ({"llm": "openai:x"}, r"used here only to rerank"),
            ({"reranker": "best"}, "rerank must be 'llm'"),
            ({"multi_query": 11}, "n must be at most 10"),
            ({"window": -1}, "window must be a whole number of 0 or more"),
            ({"llm_timeout": 0}, "llm_timeout"),
        ],
    )
    def test_refusals_name_what_is_wrong(self, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            PipelineSpec.of("idx", **options)

    def test_a_retriever_given_brings_its_own_options(self, index: FusionIndex) -> None:
        PipelineSpec.of(index.as_retriever())
        with pytest.raises(InvalidParameterError, match=r"^embeddings, k, window: options of the retriever"):
            PipelineSpec.of(index.as_retriever(), k=3, window=1, embeddings="local")

    def test_limits(self) -> None:
        assert ServeLimits().bounds() == {
            "max_query_chars": 2000,
            "max_k": 100,
            "max_batch_size": 32,
            "max_request_bytes": 1_000_000,
        }
        with pytest.raises(InvalidParameterError, match="port must be a TCP port"):
            ServeLimits(port=70000)
        with pytest.raises(InvalidParameterError, match="max_k must be a positive whole number"):
            ServeLimits(max_k=0)


def _rewrites(prompt: str) -> Any:
    return "kitten purring\nparrots speech" if "search queries" in prompt else (9 if "purr" in prompt else 2)


class TestComposer:
    def test_order_and_k(self, index: FusionIndex) -> None:
        model = RatingModel(rule=_rewrites)
        spec = PipelineSpec.of(index, k=3, multi_query=2, window=1, reranker="llm", rerank_candidates=6, llm=model)
        pipeline = build_pipeline(spec)
        rerank = pipeline.retriever
        assert isinstance(rerank, RerankRetriever) and rerank.top_n == 3
        window = rerank.retriever
        assert isinstance(window, ContextWindowRetriever) and window.n == 1
        multi = window.retriever
        assert isinstance(multi, MultiQueryFusionRetriever) and multi.k == 6 and multi.n == 2
        assert isinstance(multi.retriever, FusionRetriever) and multi.retriever.k == 3
        docs = pipeline.retriever.invoke("cats")
        assert len(docs) == 3 and docs[0].metadata[keys.RERANK_RATING] == 9
        assert pipeline.describe()["pipeline"] == {
            "rerank": {"step": "LLMReranker", "model": None, "candidates": 6},
            "multi_query": 2,
            "window": {"n": 1, "max_chars": 4000},
        }

    def test_a_request_k_is_what_the_steps_keep(self, index: FusionIndex) -> None:
        pipeline = build_pipeline(PipelineSpec.of(index, reranker="llm", llm=RatingModel(rule=_rewrites)))
        two = pipeline.around(pipeline.search.model_copy(update={"k": 2}))
        assert len(two.invoke("cats")) == 2
        assert len(pipeline.retriever.invoke("cats")) == SEARCH_DEFAULTS.k

    def test_no_steps_is_the_search_itself(self, index: FusionIndex) -> None:
        pipeline = build_pipeline(PipelineSpec.of(index, k=2, max_per_source=1))
        assert pipeline.retriever is pipeline.search
        assert pipeline.retriever.invoke("cats") == index.as_retriever(k=2, max_per_source=1).invoke("cats")
        assert pipeline.defaults() == {"k": 2, "alpha": 0.5, "method": "weighted", "fetch_k": 100, "max_per_source": 1}
        assert pipeline.describe()["index"] == {
            "kind": "index",
            "documents": len(ANIMALS),
            "embeddings": index.embeddings_id,
            "dimension": index.dimension,
            "manifest": None,
        }

    def test_hierarchical_follows_the_index(self, index: FusionIndex) -> None:
        summaries = [Document(page_content="pets", metadata={keys.SUMMARY_CHUNK_IDS: [d.id for d in index.documents]})]
        hierarchical = HierarchicalIndex.from_summaries(index, summaries)
        assert isinstance(build_pipeline(PipelineSpec.of(hierarchical)).search, HierarchicalRetriever)
        plain = build_pipeline(PipelineSpec.of(hierarchical, hierarchical=False, max_per_source=1)).search
        assert isinstance(plain, FusionRetriever) and plain.index is index
        with pytest.raises(InvalidParameterError, match="apply to fused search"):
            build_pipeline(PipelineSpec.of(hierarchical, max_per_source=1))
        limited = build_pipeline(PipelineSpec.of(hierarchical)).within(ServeLimits(max_k=2))
        assert limited.search.k_summaries == 2  # type: ignore[attr-defined]
        with pytest.raises(InvalidParameterError, match=r"k_summaries \(3\) must be at most max_k \(2\)"):
            build_pipeline(PipelineSpec.of(hierarchical, k_summaries=3)).within(ServeLimits(max_k=2))

    def test_chat_model_checks_come_first(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.chdir(tmp_path)  # no .env file here
        with pytest.raises(InvalidParameterError, match="rerank 'llm' needs a chat model: OPENAI_API_KEY"):
            build_pipeline(PipelineSpec.of(tmp_path / "missing", reranker="llm"))
        answering = build_pipeline(PipelineSpec.of(FusionIndex(HashingEmbeddings()), answer="if_available"))
        assert answering.chat_model is None and "OPENAI_API_KEY" in (answering.no_chat_reason or "")


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


class TestFacesAgree:
    def test_cli_server_and_mcp_serve_one_spec(self, index: FusionIndex, tmp_path: Path) -> None:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app

        saved = index.save(tmp_path / "idx")
        options = {"k": 3, "alpha": 0.3, "max_per_source": 1, "window": 1}
        spec = PipelineSpec.of(saved, embeddings=HashingEmbeddings(), **options)
        expected = [d.id for d in build_pipeline(spec).retriever.invoke("cat dog")]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("langchain_fusion.models.embeddings.resolve_embeddings", lambda spec: HashingEmbeddings())
            flags = ["-k", "3", "--alpha", "0.3", "--max-per-source", "1", "--window", "1", "--embeddings", "h"]
            status, out, err = _cli(["query", str(saved), "cat dog", "--json", *flags])
        assert status == 0, err
        assert [r["id"] for r in json.loads(out)] == expected
        app = create_app(saved, embeddings=HashingEmbeddings(), llm=None, **options)
        with TestClient(app, base_url=LOOPBACK_URL) as client:
            served = client.post("/retriever/invoke", json={"input": "cat dog"}).json()["output"]
            assert [d["id"] for d in served] == expected
            assert client.get("/health").json()["pipeline"]["window"] == {"n": 1, "max_chars": 4000}

    def test_requests_set_floors_and_filters(self, index: FusionIndex) -> None:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app

        with TestClient(create_app(index, llm=None), base_url=LOOPBACK_URL) as client:
            for configurable in (
                {"min_vector_score": 0.3},
                {"filter": {"source": "doc1.txt"}},
                {"max_per_source": 1, "method": "rrf"},
            ):
                body = {"input": "cat", "config": {"configurable": configurable}}
                response = client.post("/retriever/invoke", json=body)
                assert response.status_code == 200, response.text
                served = [d["id"] for d in response.json()["output"]]
                assert served == [d.id for d in index.as_retriever(**configurable).invoke("cat")], configurable
            refused = client.post("/retriever/invoke", json={"input": "cat", "config": {"configurable": {"k": True}}})
            assert refused.status_code == 422
            bad_filter = {"configurable": {"filter": {"source": {"nested": 1}}}}
            assert client.post("/retriever/invoke", json={"input": "cat", "config": bad_filter}).status_code == 422


class TestIndexingSkipsIndexes:
    def test_an_index_inside_the_indexed_folder_is_not_indexed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("langchain_fusion.models.embeddings.default_embeddings", HashingEmbeddings)
        monkeypatch.setattr("langchain_fusion.index.embedding.embeddings_from_id", lambda model_id: HashingEmbeddings())
        (tmp_path / "notes.txt").write_text("The GC-9 controller reboots nightly.", encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        counts = []
        for _ in range(3):
            status, out, err = _cli(["index", ".", "--out", "idx", "--json", "-q"])
            assert status == 0, err
            summary = json.loads(out)
            counts.append(summary["chunks"])
        assert counts == [1, 1, 1]
        assert summary["files"] == 1
        assert [s["reason"] for s in summary["skipped"]] == ["a saved langchain-fusion index (not indexed)"]


def test_namespace_of_parsed_flags_is_not_mutated() -> None:
    args = argparse.Namespace()
    assert given_options(args) == {}


class TestServedRequests:
    """What a served request's options mean, the same on LangServe and MCP."""

    def test_null_is_the_server_default_and_a_filter_only_narrows(self, index: FusionIndex) -> None:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app

        server_default = {"source": ["doc0.txt", "doc1.txt"]}
        app = create_app(index, llm=None, filter=server_default, min_vector_score=0.2)

        def served(configurable: dict[str, Any]) -> list[str]:
            body = {"input": "cat", "config": {"configurable": configurable}}
            response = TestClient(app, base_url=LOOPBACK_URL).post("/retriever/invoke", json=body)
            assert response.status_code == 200, response.text
            return [d["id"] for d in response.json()["output"]]

        def expected(**options: Any) -> list[str | None]:
            return [d.id for d in index.as_retriever(**options).invoke("cat")]

        assert served({}) == served({"min_vector_score": None, "filter": None})
        assert served({}) == expected(filter=server_default, min_vector_score=0.2)
        # A request cannot widen the server's filter: doc2 stays out; it can narrow it to doc1.
        assert served({"filter": {"source": "doc2.txt"}}) == []
        assert served({"filter": {"source": "doc1.txt"}}) == expected(
            filter={"source": "doc1.txt"}, min_vector_score=0.2
        )

    async def test_mcp_narrows_the_same_way(self, index: FusionIndex) -> None:
        pytest.importorskip("mcp")
        from langchain_fusion.mcp import INDEX_RESOURCE, build_mcp_server
        from tests.helpers.mcp import call_search, connected, results_of

        server = build_mcp_server(index, filter={"source": {"doc0.txt", "doc1.txt"}}, log_level="WARNING")
        async with connected(server) as session:
            wide = results_of(await call_search(session, query="cat", filter={"source": "doc2.txt"}))
            narrow = results_of(await call_search(session, query="cat", filter={"source": "doc1.txt"}, k=8))
            info = json.loads((await session.read_resource(INDEX_RESOURCE)).contents[0].text)  # type: ignore[union-attr]
        assert wide.results == []
        assert {hit.source for hit in narrow.results} == {"doc1.txt"}
        assert info["defaults"]["filter"] == {"source": ["doc0.txt", "doc1.txt"]}  # a set, shown as JSON

    def test_a_retriever_given_keeps_its_own_k(self, index: FusionIndex) -> None:
        pytest.importorskip("mcp")
        from langchain_fusion.mcp import build_mcp_server, describe_server

        server = build_mcp_server(index.as_retriever(k=2), max_k=3, fetch_k=100, llm_timeout=60.0)
        assert describe_server(server)["kind"] == "retriever"
        build_mcp_server(index, k=None, alpha=None, method=None)  # None: the default, as before

    def test_create_app_refuses_a_retriever_in_one_line(self, index: FusionIndex) -> None:
        pytest.importorskip("langserve")
        from langchain_fusion.server import create_app

        with pytest.raises(InvalidParameterError, match=r"create_app serves an index .* not a FusionRetriever"):
            create_app(index.as_retriever(), llm=None)


def test_within_returns_a_new_pipeline(index: FusionIndex) -> None:
    summaries = [Document(page_content="pets", metadata={keys.SUMMARY_CHUNK_IDS: [d.id for d in index.documents]})]
    pipeline = build_pipeline(PipelineSpec.of(HierarchicalIndex.from_summaries(index, summaries)))
    narrow = pipeline.within(ServeLimits(max_k=2))
    assert narrow.search.k_summaries == 2 and pipeline.search.k_summaries == 3  # type: ignore[attr-defined]
    assert pipeline.within(ServeLimits(max_k=50)) is pipeline


def test_rerank_k_is_the_number_of_candidates(index: FusionIndex, tmp_path: Path, tiny_cross_encoder: Path) -> None:
    saved = index.save(tmp_path / "idx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("langchain_fusion.index.embedding.embeddings_from_id", lambda model_id: HashingEmbeddings())
        rerank = ["--rerank", f"cross-encoder:{tiny_cross_encoder}"]
        for flags, count in ((["-k", "3"], 3), (["-k", "3", "--top-n", "5"], 3), (["-k", "6", "--top-n", "2"], 2)):
            status, out, err = _cli(["query", str(saved), "cat", "--json", *rerank, *flags])
            assert status == 0, err
            assert len(json.loads(out)) == count, flags


@pytest.mark.subprocess
def test_the_spec_is_import_light() -> None:
    import subprocess
    import sys

    code = "import sys, langchain_fusion.pipeline.spec; print('langsmith' in sys.modules, 'faiss' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_merge_filters() -> None:
    from langchain_fusion.stores.filters import merge_filters

    assert merge_filters(None, {"a": 1}) == {"a": 1} and merge_filters({"a": 1}, None) == {"a": 1}
    assert merge_filters({"a": [1, 2], "b": "x"}, {"a": [2, 3], "c": True}) == {"a": [2], "b": "x", "c": True}
    assert merge_filters({"a": 1}, {"a": True}) == {"a": []}  # 1 and True are different values: nothing matches
    both = merge_filters({"a": 1}, lambda meta: meta.get("b") == 2)
    assert callable(both) and both({"a": 1, "b": 2}) and not both({"a": 2, "b": 2})
