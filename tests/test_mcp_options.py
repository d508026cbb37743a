"""The MCP server's floor, diversity, rerank and multi-query options: as defaults, per call, and refused.

Served results are compared with the retriever that the same options build directly, and every
option is first shown to change the results on the query used, so an option that is silently
dropped fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from mcp.server.fastmcp import FastMCP

from langchain_fusion import ContextWindowRetriever, FusionIndex, HierarchicalIndex
from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.mcp import INDEX_RESOURCE, build_mcp_server, describe_server, per_call_selection
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.mcp import call_search, connected, results_of, text_of
from tests.helpers.options import BAD_SELECTION_OPTIONS

QUERIES = ("cat and dog", "stock market", "cats purr")
ONE_AT_A_TIME = [
    {"min_vector_score": 0.2},
    {"min_bm25_score": 1.0},
    {"lambda_mult": 0.3},
    {"max_per_source": 1},
]
DUPLICATES = ("duplicates", "near_duplicate_similarity")
SELECTION = ("min_vector_score", "min_bm25_score", "lambda_mult", "max_per_source", "min_relevance")
REWRITES = "photosynthesis\nsunlight energy\nchemical energy from sunlight"
"""Three rewrites of "cats" that all find the same chunk of doc1 (not the one "cats" finds there)."""


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    """Eight chunks over three sources, so that a per-source cap has something to cap."""
    docs = [Document(page_content=t, metadata={keys.SOURCE: f"doc{i % 3}.txt"}) for i, t in enumerate(ANIMALS)]
    return FusionIndex.from_documents(docs, HashingEmbeddings())


@pytest.fixture(scope="module")
def plain(index: FusionIndex) -> FastMCP:
    return build_mcp_server(index, k=3, log_level="WARNING")


@pytest.fixture
def no_openai_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)  # no .env file can be found from here


def _ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


def _served_ids(result: Any) -> list[str | None]:
    return [hit.id for hit in results_of(result).results]


def _changes_results(index: FusionIndex, options: dict[str, Any], query: str, k: int = 3) -> bool:
    return _ids(index.as_retriever(k=k, **options).invoke(query)) != _ids(index.as_retriever(k=k).invoke(query))


def _resource(info_text: Any) -> dict[str, Any]:
    return dict(json.loads(info_text.contents[0].text))


def _hierarchical(index: FusionIndex) -> HierarchicalIndex:
    ids = [d.id for d in index.documents]
    summaries = [Document(page_content="Pets and science.", metadata={keys.SOURCE: "all", keys.SUMMARY_CHUNK_IDS: ids})]
    return HierarchicalIndex.from_summaries(index, summaries)


class TestServerDefaults:
    @pytest.mark.parametrize("options", ONE_AT_A_TIME, ids=lambda o: next(iter(o)))
    async def test_each_default_serves_what_the_retriever_returns(
        self, index: FusionIndex, options: dict[str, Any]
    ) -> None:
        assert any(_changes_results(index, options, q) for q in QUERIES)  # the option matters here
        server = build_mcp_server(index, k=3, **options, log_level="WARNING")
        async with connected(server) as session:
            for query in QUERIES:
                served = _served_ids(await call_search(session, query=query))
                assert served == _ids(index.as_retriever(k=3, **options).invoke(query)), query
            info = _resource(await session.read_resource(INDEX_RESOURCE))
        assert info["defaults"] == {"k": 3, "alpha": 0.5, "method": "weighted", "fetch_k": 100, **options}
        assert info["pipeline"] == {"rerank": None, "multi_query": None, "window": None}

    async def test_all_together(self, index: FusionIndex) -> None:
        options: dict[str, Any] = {"min_vector_score": 0.2, "min_bm25_score": 1.0, "lambda_mult": 0.6}
        options["max_per_source"] = 1
        server = build_mcp_server(index, k=3, **options, log_level="WARNING")
        async with connected(server) as session:
            for query in (*QUERIES, "zebra"):
                served = await call_search(session, query=query)
                assert _served_ids(served) == _ids(index.as_retriever(k=3, **options).invoke(query)), query
            nothing = await call_search(session, query="zebra")
        assert results_of(nothing).results == [] and text_of(nothing) == "No results for 'zebra'."

    async def test_a_call_overrides_a_default(self, index: FusionIndex) -> None:
        server = build_mcp_server(index, k=3, max_per_source=1, min_vector_score=0.5, log_level="WARNING")
        async with connected(server) as session:
            default = _served_ids(await call_search(session, query="cat and dog"))
            wider = _served_ids(await call_search(session, query="cat and dog", max_per_source=3, min_vector_score=-1))
        expected = index.as_retriever(k=3, max_per_source=1, min_vector_score=0.5)
        assert default == _ids(expected.invoke("cat and dog"))
        assert wider == _ids(expected.invoke("cat and dog", max_per_source=3, min_vector_score=-1.0))
        assert len(default) < len(wider) == 3

    @pytest.mark.parametrize(
        ("options", "message"),
        BAD_SELECTION_OPTIONS,
    )
    def test_bad_defaults(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=re.escape(message)) as raised:
            build_mcp_server(index, **options)
        assert "\n" not in str(raised.value)

    def test_bad_defaults_fail_before_the_index_is_opened(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidParameterError, match="max_per_source must be"):
            build_mcp_server(tmp_path / "ghost", max_per_source=0)

    def test_a_hierarchical_index_refuses_them(self, index: FusionIndex) -> None:
        with pytest.raises(
            InvalidParameterError, match="lambda_mult apply to fused search, not to hierarchical search"
        ):
            build_mcp_server(_hierarchical(index), lambda_mult=0.5)

    def test_a_retriever_brings_its_own(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match=r"^min_bm25_score, max_per_source: options of the retriever"):
            build_mcp_server(index.as_retriever(), min_bm25_score=1.0, max_per_source=2)
        with pytest.raises(InvalidParameterError, match=r"^multi_query, reranker, rerank_candidates: options of"):
            build_mcp_server(index.as_retriever(), reranker="llm", multi_query=2, rerank_candidates=5)
        with pytest.raises(InvalidParameterError, match=r"^llm, llm_timeout: options of the retriever"):
            build_mcp_server(index.as_retriever(), llm="openai", llm_timeout=5.0)


class TestPerCall:
    @pytest.mark.parametrize("options", ONE_AT_A_TIME, ids=lambda o: next(iter(o)))
    async def test_each_option_serves_what_the_retriever_returns(
        self, plain: FastMCP, index: FusionIndex, options: dict[str, Any]
    ) -> None:
        assert any(_changes_results(index, options, q) for q in QUERIES)
        async with connected(plain) as session:
            for query in QUERIES:
                served = _served_ids(await call_search(session, query=query, **options))
                assert served == _ids(index.as_retriever(k=3).invoke(query, **options)), query

    async def test_with_the_other_options(self, plain: FastMCP, index: FusionIndex) -> None:
        arguments = {"k": 5, "alpha": 0.2, "filter": {keys.SOURCE: ["doc0.txt", "doc2.txt"]}, "max_per_source": 2}
        async with connected(plain) as session:
            served = results_of(await call_search(session, query="cat and dog", **arguments, lambda_mult=0.4))
        expected = index.as_retriever(k=3).invoke("cat and dog", **arguments, lambda_mult=0.4)
        assert [h.id for h in served.results] == _ids(expected)
        assert len(served.results) == 4 and {h.source for h in served.results} == {"doc0.txt", "doc2.txt"}

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"min_vector_score": 1.5}, "min_vector_score must be a cosine similarity between -1 and 1"),
            ({"min_vector_score": True}, "min_vector_score must be a cosine similarity"),
            ({"min_vector_score": "0.2"}, "min_vector_score must be a cosine similarity"),
            ({"min_vector_score": "NaN"}, "min_vector_score must be a cosine similarity"),
            ({"min_bm25_score": -1}, "min_bm25_score must be a BM25 score of 0 or more"),
            ({"min_bm25_score": False}, "min_bm25_score must be a BM25 score"),
            ({"lambda_mult": 1.5}, "lambda_mult must be a number between 0 (most diverse) and 1 (most relevant)"),
            ({"lambda_mult": True}, "lambda_mult must be a number between 0"),
            ({"max_per_source": 0}, "max_per_source must be a positive whole number (results per source)"),
            ({"max_per_source": 1.0}, "max_per_source must be a positive whole number"),
            ({"max_per_source": True}, "max_per_source must be a positive whole number"),
            ({"max_per_source": "2"}, "max_per_source must be a positive whole number"),
        ],
    )
    async def test_bad_values_are_tool_errors(self, plain: FastMCP, arguments: dict[str, Any], message: str) -> None:
        async with connected(plain) as session:
            bad = await call_search(session, query="cat", **arguments)
            good = await call_search(session, query="cat", k=1)
        assert bad.isError is True
        text = text_of(bad)
        assert "\n" not in text and message in text
        assert len(results_of(good).results) == 1  # the server keeps serving

    async def test_listed_in_the_tool(self, plain: FastMCP) -> None:
        async with connected(plain) as session:
            [tool] = (await session.list_tools()).tools
        assert list(tool.inputSchema["properties"]) == [
            "query",
            "k",
            "alpha",
            "method",
            "filter",
            *DUPLICATES,
            *SELECTION,
        ]
        assert tool.description and "min_vector_score" in tool.description and "max_per_source" in tool.description

    async def test_not_on_a_hierarchical_index(self, index: FusionIndex) -> None:
        server = build_mcp_server(_hierarchical(index), log_level="WARNING")
        async with connected(server) as session:
            [tool] = (await session.list_tools()).tools
            refused = await call_search(session, query="cat", max_per_source=1)
            served = await call_search(session, query="cat")
        assert set(tool.inputSchema["properties"]) == {
            "query",
            "k",
            "alpha",
            "method",
            "filter",
            *DUPLICATES,
            "min_relevance",  # a floor on its own calibrated relevance (HierarchicalIndex.calibrate)
            "k_summaries",
            "summary_weight",
        }
        assert tool.description and "min_vector_score" not in tool.description
        assert "optional relevance floor (min_relevance)" in tool.description
        assert refused.isError is True
        takes = (
            "query, k, alpha, method, filter, duplicates, near_duplicate_similarity, min_relevance, k_summaries, "
            "summary_weight"
        )
        assert f"unknown argument(s) ['max_per_source']; the search tool takes {takes}" in text_of(refused)
        assert results_of(served).results

    async def test_through_a_wrapping_retriever(self, index: FusionIndex) -> None:
        windows = ContextWindowRetriever(retriever=index.as_retriever(k=3), index=index, n=0)
        assert per_call_selection(windows) == SELECTION
        query = next(q for q in QUERIES if _changes_results(index, {"max_per_source": 1}, q))
        server = build_mcp_server(windows, log_level="WARNING")
        async with connected(server) as session:
            served = _served_ids(await call_search(session, query=query, max_per_source=1))
        assert served == _ids(windows.invoke(query, max_per_source=1))
        assert served != _ids(windows.invoke(query))

    def test_per_call_selection(self, index: FusionIndex) -> None:
        assert per_call_selection(index.as_retriever()) == SELECTION
        assert per_call_selection(_hierarchical(index).as_retriever()) == ("min_relevance",)
        assert set(SELECTION) <= set(index.as_retriever().per_call_option_names())
        assert set(SELECTION) & set(_hierarchical(index).as_retriever().per_call_option_names()) == {"min_relevance"}


class TestPipeline:
    """A rerank step and multi-query fusion around every search, as ``create_app`` builds them."""

    async def test_cross_encoder_rerank(self, index: FusionIndex, tiny_cross_encoder: Path) -> None:
        from langchain_fusion import CrossEncoderReranker, RerankRetriever

        server = build_mcp_server(
            index, reranker=f"cross-encoder:{tiny_cross_encoder}", rerank_candidates=6, log_level="WARNING"
        )
        reference = RerankRetriever(
            retriever=index.as_retriever(k=6), reranker=CrossEncoderReranker(model=str(tiny_cross_encoder))
        )
        async with connected(server) as session:
            default = results_of(await call_search(session, query="cat"))
            two = _served_ids(await call_search(session, query="cat", k=2, alpha=0.3))
            capped = _served_ids(await call_search(session, query="cat and dog", max_per_source=1))
            [tool] = (await session.list_tools()).tools
        expected = reference.invoke("cat", top_n=4)
        assert [h.id for h in default.results] == _ids(expected)
        assert _ids(expected) != _ids(index.as_retriever(k=4).invoke("cat"))  # the rerank step changed the order
        assert all(keys.RERANK_SCORE in h.metadata and h.fusion_score is not None for h in default.results)
        assert two == _ids(reference.invoke("cat", top_n=2, alpha=0.3))
        assert capped == _ids(reference.invoke("cat and dog", top_n=4, max_per_source=1))
        assert len(capped) == 3  # three sources, one chunk each
        info = describe_server(server)
        assert info["pipeline"] == {
            "rerank": {"step": "CrossEncoderReranker", "model": str(tiny_cross_encoder), "candidates": 6},
            "multi_query": None,
            "window": None,
        }
        assert tool.description and "reranks the candidates" in tool.description

    async def test_llm_rerank_and_multi_query(self, index: FusionIndex) -> None:
        from langchain_fusion import LLMReranker, MultiQueryFusionRetriever, RerankRetriever
        from langchain_fusion.retrievers.multi_query import DEFAULT_K_PER_QUERY
        from tests.helpers.fake_chat_models import RatingModel

        def rule(prompt: str) -> Any:
            if "search queries" in prompt:
                return "kitten\nparrots talking"
            return 9 if "purr" in prompt else 2

        model = RatingModel(rule=rule)
        server = build_mcp_server(index, llm=model, reranker="llm", multi_query=2, log_level="WARNING")
        async with connected(server) as session:
            results = results_of(await call_search(session, query="cats", k=3))
            capped = results_of(await call_search(session, query="cats", k=4, max_per_source=1))
        hits = results.results
        assert len(hits) == 3
        assert hits[0].metadata[keys.RERANK_RATING] == 9 and "purr" in hits[0].text
        assert all(h.metadata[keys.MULTI_QUERY_REWRITES] == ["kitten", "parrots talking"] for h in hits)
        # The equivalent retriever: 20 candidates from the query and its rewrites (each search and the fused list
        # capped), rated.
        rewrites = MultiQueryFusionRetriever.from_llm(
            index.as_retriever(), model, n=2, k=20, k_per_query=max(20, DEFAULT_K_PER_QUERY)
        )
        reference = RerankRetriever(retriever=rewrites, reranker=LLMReranker(llm=model, top_n=None))
        assert [h.id for h in hits] == _ids(reference.invoke("cats", top_n=3))
        assert [h.id for h in capped.results] == _ids(reference.invoke("cats", top_n=4, max_per_source=1))
        assert len(capped.results) == 3  # three sources, one candidate each: the cap held for the fused list
        assert len(reference.invoke("cats", top_n=4)) == 4
        assert describe_server(server)["pipeline"] == {
            "rerank": {"step": "LLMReranker", "model": None, "candidates": 20},
            "multi_query": 2,
            "window": None,
        }

    async def test_multi_query_caps_the_fused_results(self, index: FusionIndex) -> None:
        from langchain_fusion import MultiQueryFusionRetriever
        from tests.helpers.fake_chat_models import RatingModel

        # Each search capped at one chunk per source, the rewrites' best chunk of doc1 ("Photosynthesis...")
        # outranks the query's third one; the fused list must still hold one chunk per source.
        model = RatingModel(rule=lambda prompt: REWRITES, structured=False)
        by_default = build_mcp_server(index, llm=model, multi_query=3, k=3, max_per_source=1, log_level="WARNING")
        per_call = build_mcp_server(index, llm=model, multi_query=3, k=3, log_level="WARNING")
        async with connected(by_default) as session:
            default = results_of(await call_search(session, query="cats"))
        async with connected(per_call) as session:
            called = results_of(await call_search(session, query="cats", max_per_source=1))
        expected = MultiQueryFusionRetriever.from_llm(index.as_retriever(max_per_source=1), model, n=3, k=3)
        for results in (default, called):
            assert [h.id for h in results.results] == _ids(expected.invoke("cats"))
            assert sorted(h.source or "" for h in results.results) == ["doc0.txt", "doc1.txt", "doc2.txt"]

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
            ({"reranker": "cross-encoder:x", "rerank_candidates": 0}, "rerank_candidates"),
            ({"reranker": "llm", "rerank_candidates": True}, "rerank_candidates"),
            ({"multi_query": 0}, "n must be"),
            ({"multi_query": 11}, "n must be at most 10"),
            ({"multi_query": True}, "n must be"),
        ],
    )
    def test_invalid_options(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        needs_llm = options.get("reranker") == "llm" or "multi_query" in options
        llm = RatingModel(rule=lambda _: 5) if needs_llm else None
        with pytest.raises(FusionError, match=message):
            build_mcp_server(index, llm=llm, **options)

    @pytest.mark.parametrize("options", [{"reranker": "llm"}, {"multi_query": 2}])
    def test_chat_model_needed(self, index: FusionIndex, no_openai_key: None, options: dict[str, Any]) -> None:
        with pytest.raises(InvalidParameterError, match=r"needs a chat model.*OPENAI_API_KEY"):
            build_mcp_server(index, **options)

    def test_chat_model_without_a_use(self, index: FusionIndex) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        with pytest.raises(InvalidParameterError, match=r"used here only to rerank \(reranker='llm'"):
            build_mcp_server(index, llm=RatingModel(rule=lambda _: 5))

    def test_errors_come_before_the_index_is_opened(self, tmp_path: Path, no_openai_key: None) -> None:
        with pytest.raises(InvalidParameterError, match="multi_query needs a chat model"):
            build_mcp_server(tmp_path / "ghost", multi_query=2)


@pytest.fixture(scope="module")
def saved(index: FusionIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return index.save(tmp_path_factory.mktemp("mcp-options") / "index")


class TestMcpCommand:
    def test_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        from langchain_fusion.cli.app import main

        with pytest.raises(SystemExit):
            main(["mcp", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for flag in ("--min-vector-score", "--min-bm25-score", "--mmr", "--lambda-mult", "--max-per-source"):
            assert flag in text
        for flag in ("--rerank", "--rerank-candidates", "--multi-query", "--llm", "--llm-timeout"):
            assert flag in text

    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            pytest.param(
                ["--rerank", "cross-encoder:./no-such-model"],
                "cross-encoder folder './no-such-model' does not exist",
                marks=pytest.mark.slow,  # looking for a cross-encoder imports sentence-transformers (torch) first
            ),
            (["--multi-query", "2"], "multi_query needs a chat model"),
            (["--rerank"], "rerank 'llm' needs a chat model"),
            (["--lambda-mult", "0.3"], "--lambda-mult is the weight of maximal marginal relevance: add --mmr"),
        ],
    )
    def test_errors_before_the_index_is_opened(
        self, saved: Path, no_openai_key: None, flags: list[str], message: str
    ) -> None:
        # The index was built with test embeddings the command cannot recreate by name: reaching it would fail.
        assert_one_line_error(*run_cli(["mcp", str(saved), *flags]), message)

    def test_bad_flag_values(self, saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from langchain_fusion.cli.app import main

        with pytest.raises(SystemExit) as exit_info:
            main(["mcp", str(saved), "--max-per-source", "0"])
        assert exit_info.value.code == 2
        assert "argument --max-per-source: expected a positive integer, got '0'" in capsys.readouterr().err

    def test_flags_reach_the_server(self, saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The command turns each flag into the pipeline spec the server is built from (checked above)."""
        from langchain_fusion import pipeline

        received: list[Any] = []

        def stop(spec: Any) -> Any:
            received.append(spec)
            raise InvalidParameterError("stopped here")

        monkeypatch.setattr(pipeline, "build", stop)
        flags = ["--min-vector-score", "0.2", "--min-bm25-score", "1", "--mmr", "--max-per-source", "2"]
        flags += [
            "--min-relevance",
            "0.4",
            "--rerank",
            "cross-encoder:m",
            "--rerank-candidates",
            "7",
            "--multi-query",
            "3",
            "--llm",
            "x:y",
        ]
        flags += ["--window", "1", "--k-summaries", "2"]
        assert_one_line_error(*run_cli(["mcp", str(saved), *flags, "--llm-timeout", "5"]), "stopped here")
        [spec] = received
        assert spec.index == str(saved)
        assert {name: getattr(spec.search, name) for name in SELECTION} == {
            "min_vector_score": 0.2,
            "min_bm25_score": 1.0,
            "lambda_mult": 0.5,
            "max_per_source": 2,
            "min_relevance": 0.4,
        }
        assert (spec.reranker, spec.rerank_candidates, spec.multi_query) == ("cross-encoder:m", 7, 3)
        assert (spec.llm, spec.llm_timeout, spec.window, spec.hierarchy.k_summaries) == ("x:y", 5.0, 1, 2)
