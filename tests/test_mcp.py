"""Serving agents over MCP: the search tool in process (the SDK's in-memory client), over stdio and HTTP."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult

from langchain_fusion import ContextWindowRetriever, FusionError, FusionIndex, HierarchicalIndex
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import main
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.mcp import (
    DEFAULT_MAX_K,
    INDEX_RESOURCE,
    SEARCH_TOOL,
    SearchLimits,
    SearchResults,
    build_mcp_server,
    check_search_arguments,
    format_results,
)
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.mcp import TIMEOUT, call_search, connected, results_of, server_env, text_of
from tests.helpers.paths import REPO

SELECTION = ("min_vector_score", "min_bm25_score", "lambda_mult", "max_per_source", "min_relevance")


def _docs() -> list[Document]:
    return [
        Document(
            page_content=text,
            metadata={keys.SOURCE: f"doc{i}.txt", keys.PAGE: i // 2 + 1, "group": "even" if i % 2 == 0 else "odd"},
        )
        for i, text in enumerate(ANIMALS)
    ]


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    return FusionIndex.from_documents(_docs(), HashingEmbeddings())


@pytest.fixture(scope="module")
def server(index: FusionIndex) -> FastMCP:
    return build_mcp_server(index, log_level="WARNING")


def _expected(index: FusionIndex, query: str, **options: Any) -> list[Document]:
    return index.as_retriever().invoke(query, **options)


class TestSearchTool:
    async def test_listing(self, server: FastMCP) -> None:
        async with connected(server) as session:
            tools = (await session.list_tools()).tools
        assert [tool.name for tool in tools] == [SEARCH_TOOL]
        tool = tools[0]
        schema = tool.inputSchema
        assert schema["type"] == "object"
        assert schema["required"] == ["query"]
        options = {"query", "k", "alpha", "method", "filter", "duplicates", "near_duplicate_similarity", *SELECTION}
        assert set(schema["properties"]) == options  # but fetch_k
        assert schema["properties"]["query"]["type"] == "string"
        k = schema["properties"]["k"]["anyOf"][0]
        assert (k["type"], k["minimum"], k["maximum"]) == ("integer", 1, DEFAULT_MAX_K)
        alpha = schema["properties"]["alpha"]["anyOf"][0]
        assert (alpha["type"], alpha["minimum"], alpha["maximum"]) == ("number", 0.0, 1.0)
        assert schema["properties"]["method"]["anyOf"][0]["enum"] == ["weighted", "zscore", "rrf"]
        assert schema["properties"]["filter"]["anyOf"][0]["type"] == "object"
        for name, kind, low, high in (
            ("min_vector_score", "number", -1.0, 1.0),
            ("min_bm25_score", "number", 0.0, None),
            ("lambda_mult", "number", 0.0, 1.0),
            ("max_per_source", "integer", 1, None),
            ("min_relevance", "number", 0.0, 1.0),
            ("near_duplicate_similarity", "number", 0.0, 1.0),
        ):
            bounds = schema["properties"][name]["anyOf"][0]
            assert (bounds["type"], bounds["minimum"], bounds.get("maximum")) == (kind, low, high)
        assert all(schema["properties"][name]["description"] for name in schema["properties"])
        assert tool.outputSchema is not None
        assert set(tool.outputSchema["properties"]) == {"query", "results"}
        assert tool.annotations is not None and tool.annotations.readOnlyHint is True
        assert tool.description and "source" in tool.description

    async def test_text_and_structured_results(self, server: FastMCP, index: FusionIndex) -> None:
        async with connected(server) as session:
            result = await call_search(session, query="cat", k=3)
        expected = _expected(index, "cat", k=3)
        results = results_of(result)
        assert results.query == "cat"
        assert [hit.rank for hit in results.results] == [1, 2, 3]
        assert [hit.id for hit in results.results] == [d.id for d in expected]
        for hit, doc in zip(results.results, expected, strict=True):
            assert hit.text == doc.page_content
            assert hit.source == doc.metadata[keys.SOURCE]
            assert hit.page == doc.metadata[keys.PAGE]
            assert hit.fusion_score == pytest.approx(doc.metadata[keys.FUSION_SCORE])
            assert hit.vector_score == pytest.approx(doc.metadata[keys.VECTOR_SCORE])
            assert hit.bm25_score == pytest.approx(doc.metadata[keys.BM25_SCORE])
            assert hit.metadata["group"] == doc.metadata["group"]
            for key in (keys.VECTOR_RANK, keys.BM25_RANK, keys.FUSION_METHOD):
                assert hit.metadata[key] == doc.metadata[key]
        text = text_of(result)
        assert text == format_results(results)
        assert text.startswith("3 result(s) for 'cat', best first:")
        first = expected[0]
        assert f"[1] {first.metadata[keys.SOURCE]}, page {first.metadata[keys.PAGE]} (id {first.id}; fused " in text
        assert all(doc.page_content in text for doc in expected)

    async def test_per_call_options(self, server: FastMCP, index: FusionIndex) -> None:
        async with connected(server) as session:
            bm25 = results_of(await call_search(session, query="cat dog", k=2, alpha=0))
            vector = results_of(await call_search(session, query="cat dog", alpha=1.0))
            even = results_of(await call_search(session, query="cat", k=8, filter={"group": "even"}))
            chosen = results_of(await call_search(session, query="cat", filter={keys.SOURCE: ["doc1.txt", "doc4.txt"]}))
            as_string = results_of(await call_search(session, query="cat", filter='{"group": "odd"}'))
            nothing = await call_search(session, query="cat", filter={"group": "none"})
            null = results_of(await call_search(session, query="cat", k=None, alpha=None, filter=None))
        assert [h.id for h in bm25.results] == [d.id for d in _expected(index, "cat dog", k=2, alpha=0.0)]
        assert [h.id for h in vector.results] == [d.id for d in _expected(index, "cat dog", alpha=1.0)]
        assert len(vector.results) == 4  # the server's default k
        assert even.results and {h.metadata["group"] for h in even.results} == {"even"}
        assert {h.source for h in chosen.results} == {"doc1.txt", "doc4.txt"}
        assert as_string.results and {h.metadata["group"] for h in as_string.results} == {"odd"}
        assert results_of(nothing).results == [] and text_of(nothing) == "No results for 'cat'."
        assert [h.id for h in null.results] == [d.id for d in _expected(index, "cat")]

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"query": "cat", "k": 0}, "k must be a positive whole number (the number of documents to return); got 0"),
            ({"query": "cat", "k": True}, "k must be a positive whole number"),
            ({"query": "cat", "k": 2.0}, "k must be a positive whole number"),
            ({"query": "cat", "k": "3"}, "k must be a positive whole number"),
            ({"query": "cat", "k": DEFAULT_MAX_K + 1}, f"k must be at most {DEFAULT_MAX_K}"),
            ({"query": "cat", "alpha": 2}, "alpha must be a number between 0 and 1 (the weight of the vector side)"),
            ({"query": "cat", "alpha": "NaN"}, "alpha must be a number between 0 and 1"),
            ({"query": "cat", "alpha": "0.5"}, "alpha must be a number between 0 and 1"),
            ({"query": "cat", "alpha": False}, "alpha must be a number between 0 and 1"),
            ({"query": "cat", "filter": {"group": {"$eq": "even"}}}, "filter value for 'group' must be a string"),
            ({"query": "cat", "filter": {"group": [["even"]]}}, "filter value for 'group' must be a string"),
            ({"query": "cat", "filter": "group=even"}, "filter must be a mapping of metadata key to value"),
            ({"query": "cat", "filter": ["group"]}, "filter must be a mapping of metadata key to value"),
            ({"query": ""}, "query is empty"),
            ({"query": " \n\t"}, "query is empty"),
            ({}, "query is required"),
            ({"query": None}, "query is required"),
            ({"query": 3}, "query must be a string; got int"),
            ({"query": "x" * 2001}, "query is 2001 characters long; the limit is 2000"),
            ({"query": "cat", "top_k": 3}, "unknown argument(s) ['top_k']; the search tool takes query, k, alpha"),
        ],
    )
    async def test_bad_arguments_are_tool_errors(
        self, server: FastMCP, arguments: dict[str, Any], message: str
    ) -> None:
        async with connected(server) as session:
            bad = await session.call_tool(SEARCH_TOOL, arguments)
            good = await call_search(session, query="cat", k=1)
        assert bad.isError is True
        text = text_of(bad)
        assert "\n" not in text
        assert message in text
        assert len(results_of(good).results) == 1  # the server keeps serving

    async def test_unknown_tool(self, server: FastMCP) -> None:
        async with connected(server) as session:
            result = await session.call_tool("delete_everything", {})
            assert result.isError is True
            assert "Unknown tool" in text_of(result)
            assert results_of(await call_search(session, query="cat")).results

    async def test_index_resource_and_instructions(self, index: FusionIndex) -> None:
        server = build_mcp_server(index, max_k=10, log_level="WARNING")
        async with create_connected_server_and_client_session(server, read_timeout_seconds=TIMEOUT) as session:
            resources = (await session.list_resources()).resources
            contents = (await session.read_resource(resources[0].uri)).contents
        assert [str(r.uri) for r in resources] == [INDEX_RESOURCE]
        info = json.loads(contents[0].text)  # type: ignore[union-attr]
        assert info["kind"] == "index" and info["documents"] == len(index)
        assert info["embeddings"] == index.embeddings_id and info["dimension"] == 64
        assert info["limits"] == {"max_k": 10, "max_query_chars": 2000}
        assert "8 chunks" in (server.instructions or "")


class ToolCallingFakeModel(GenericFakeChatModel):
    """Replies with the given messages in turn (tool calls first); tools are accepted and ignored."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeModel:
        return self


async def test_langchain_agent_through_the_mcp_adapters(server: FastMCP, index: FusionIndex) -> None:
    """docs/serving.md's agent: LangChain's MCP adapters turn the search tool into a LangChain tool for create_agent."""
    from langchain.agents import create_agent
    from langchain_mcp_adapters.tools import load_mcp_tools

    replies = [
        AIMessage("", tool_calls=[{"name": SEARCH_TOOL, "args": {"query": "cat", "k": 0}, "id": "bad"}]),
        AIMessage("", tool_calls=[{"name": SEARCH_TOOL, "args": {"query": "cat", "k": 2}, "id": "good"}]),
        AIMessage("Cats purr when content [1]."),
    ]
    async with connected(server) as session:
        tools = await load_mcp_tools(session)
        assert [tool.name for tool in tools] == [SEARCH_TOOL]
        agent = create_agent(ToolCallingFakeModel(messages=iter(replies)), tools)
        state = await agent.ainvoke({"messages": [HumanMessage("What do cats do?")]})
    bad, good = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert bad.status == "error" and "k must be a positive whole number" in str(bad.content)
    expected = _expected(index, "cat", k=2)
    [block] = good.content  # one text block, as the adapters pass MCP text content on
    assert isinstance(block, dict) and block["type"] == "text"
    text = block["text"]
    assert text.startswith("2 result(s) for 'cat'") and expected[0].page_content in text
    results = SearchResults.model_validate(good.artifact["structured_content"])
    assert [h.id for h in results.results] == [d.id for d in expected]
    assert state["messages"][-1].content == "Cats purr when content [1]."


class TestBuild:
    async def test_initialize_reports_the_library_not_the_sdk(self, server: FastMCP) -> None:
        from importlib.metadata import version

        from langchain_fusion._version import library_version

        async with connected(server) as session:
            info = (await session.initialize()).serverInfo
        assert (info.name, info.version) == ("langchain-fusion", library_version())
        assert info.version != version("mcp")

    async def test_server_defaults(self, index: FusionIndex) -> None:
        server = build_mcp_server(index, k=2, alpha=0.0, method="rrf", log_level="WARNING")
        async with connected(server) as session:
            results = results_of(await call_search(session, query="cat dog"))
        expected = _expected(index, "cat dog", k=2, alpha=0.0, method="rrf")
        assert [h.id for h in results.results] == [d.id for d in expected]
        assert results.results[0].metadata[keys.FUSION_METHOD] == "rrf"

    async def test_saved_folder(self, index: FusionIndex, tmp_path: Path) -> None:
        folder = index.save(tmp_path / "animals")
        server = build_mcp_server(folder, embeddings=HashingEmbeddings(), log_level="WARNING")
        async with connected(server) as session:
            results = results_of(await call_search(session, query="parrots speech", k=1))
        assert results.results[0].text == ANIMALS[6]

    async def test_retriever(self, index: FusionIndex) -> None:
        server = build_mcp_server(index.as_retriever(k=1, filter={"group": "odd"}), log_level="WARNING")
        async with connected(server) as session:
            default = results_of(await call_search(session, query="cat"))
            more = results_of(await call_search(session, query="cat", k=3))
            info = json.loads((await session.read_resource(INDEX_RESOURCE)).contents[0].text)  # type: ignore[union-attr]
        assert len(default.results) == 1 and len(more.results) == 3
        assert {h.metadata["group"] for h in more.results} == {"odd"}
        assert info["kind"] == "retriever" and info["retriever"] == "FusionRetriever"

    async def test_context_windows(self) -> None:
        """A ContextWindowRetriever hands agents whole passages; k, alpha and filter reach its fused retriever."""
        offsets = [sum(len(t) + 1 for t in ANIMALS[:i]) for i in range(len(ANIMALS))]
        chunks = [
            Document(
                page_content=text,
                metadata={keys.SOURCE: "animals.txt", keys.CHUNK_INDEX: i, keys.START_INDEX: offsets[i], "n": i},
            )
            for i, text in enumerate(ANIMALS)
        ]
        index = FusionIndex.from_documents(chunks, HashingEmbeddings())
        windows = ContextWindowRetriever(retriever=index.as_retriever(), index=index, n=1, max_chars=None)
        server = build_mcp_server(windows, log_level="WARNING")
        async with connected(server) as session:
            results = results_of(await call_search(session, query="market", k=1, alpha=0.0, filter={"n": [3, 5]}))
        [passage] = results.results
        expected = windows.invoke("market", k=1, alpha=0.0, filter={"n": [3, 5]})
        assert passage.text == expected[0].page_content
        assert passage.metadata[keys.WINDOW_SPAN] == [4, 6] and ANIMALS[4] in passage.text

    async def test_hierarchical_index(self, index: FusionIndex) -> None:
        chunks = index.documents
        summaries = [
            Document(id="pets", page_content="cats and dogs", metadata={keys.SUMMARY_CHUNK_IDS: [chunks[0].id]}),
            Document(id="science", page_content="physics", metadata={keys.SUMMARY_CHUNK_IDS: [chunks[3].id]}),
        ]
        server = build_mcp_server(HierarchicalIndex.from_summaries(index, summaries), log_level="WARNING")
        async with connected(server) as session:
            results = results_of(await call_search(session, query="cat"))
            info = json.loads((await session.read_resource(INDEX_RESOURCE)).contents[0].text)  # type: ignore[union-attr]
        # Only the chunks of the selected summaries' pages, the cat chunk first.
        assert [h.id for h in results.results] == [chunks[0].id, chunks[3].id]
        assert results.results[0].metadata[keys.SUMMARY_ID] == "pets"
        assert (info["kind"], info["documents"], info["summaries"]) == ("hierarchical", 8, 2)

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"k": 0}, "k must be a positive whole number"),
            ({"k": 20, "max_k": 10}, "k (20) must be at most max_k (10)"),
            ({"alpha": float("nan")}, "alpha must be a number between 0 and 1"),
            ({"method": "best"}, "method must be one of weighted, zscore, rrf"),
            ({"fetch_k": 0}, "fetch_k must be a positive whole number"),
            ({"max_k": 0}, "max_k must be a positive whole number"),
            ({"max_query_chars": True}, "max_query_chars must be a positive whole number"),
        ],
    )
    def test_bad_options(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=re.escape(message)):
            build_mcp_server(index, **options)

    def test_retriever_with_index_options(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="k, alpha: options of the retriever built from an index"):
            build_mcp_server(index.as_retriever(), k=3, alpha=0.2)
        with pytest.raises(InvalidParameterError, match=r"^embeddings, fetch_k: options of the retriever"):
            build_mcp_server(index.as_retriever(), embeddings=HashingEmbeddings(), fetch_k=None)

    def test_missing_folder(self, tmp_path: Path) -> None:
        with pytest.raises(FusionError, match="is not a folder"):
            build_mcp_server(tmp_path / "ghost")
        with pytest.raises(InvalidParameterError, match="alpha must be"):  # options are checked before opening
            build_mcp_server(tmp_path / "ghost", alpha=1.5)

    def test_embeddings_with_a_loaded_index(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="a loaded index brings its own: drop embeddings"):
            build_mcp_server(index, embeddings=HashingEmbeddings())

    def test_check_search_arguments(self) -> None:
        checked = check_search_arguments({"query": "q", "k": 3, "alpha": 1, "filter": {"page": [1, 2]}})
        assert checked == {"query": "q", "k": 3, "alpha": 1.0, "filter": {"page": [1, 2]}}
        assert type(checked["alpha"]) is float
        limits = SearchLimits(max_k=5, max_query_chars=3)
        with pytest.raises(InvalidParameterError, match="k must be at most 5"):
            check_search_arguments({"query": "q", "k": 6}, limits)
        with pytest.raises(InvalidParameterError, match="the limit is 3"):
            check_search_arguments({"query": "four"}, limits)


# --- the mcp command ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(index: FusionIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return index.save(tmp_path_factory.mktemp("mcp") / "animals-index")


class TestMcpCommand:
    def test_help_explains_every_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["mcp", "--help"])
        assert exit_info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for flag in ("--transport", "stdio", "streamable-http", "--host", "--port", "--embeddings", "-k", "--alpha"):
            assert flag in text
        for flag in ("--method", "--fetch-k", "--max-k", "--max-query-chars", "--log-level", "127.0.0.1", "/mcp"):
            assert flag in text

    def test_missing_folder(self, tmp_path: Path) -> None:
        assert_one_line_error(*run_cli(["mcp", str(tmp_path / "ghost")]), "is not a folder")

    def test_missing_folder_over_http(self, tmp_path: Path) -> None:
        assert_one_line_error(
            *run_cli(["mcp", str(tmp_path / "ghost"), "--transport", "streamable-http", "--port", "0"])
        )

    def test_index_that_cannot_be_reopened_by_name(self, saved: Path) -> None:
        assert_one_line_error(*run_cli(["mcp", str(saved)]), "cannot be recreated by name")

    def test_k_above_max_k(self, saved: Path) -> None:
        assert_one_line_error(
            *run_cli(["mcp", str(saved), "-k", "20", "--max-k", "10"]), "k (20) must be at most max_k (10)"
        )

    def test_bad_transport(self, saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["mcp", str(saved), "--transport", "sse"])
        assert exit_info.value.code == 2
        assert "invalid choice: 'sse'" in capsys.readouterr().err

    def test_port_in_use_fails_before_loading(self, tmp_path: Path) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            status, out, err = run_cli(
                ["mcp", str(tmp_path / "ghost"), "--transport", "streamable-http", "--port", str(port)]
            )
        assert_one_line_error(status, out, err, f"cannot listen on 127.0.0.1:{port}")

    def test_without_the_mcp_extra(self, saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in [name for name in sys.modules if name == "mcp" or name.startswith("mcp.")]:
            monkeypatch.setitem(sys.modules, name, None)  # as if the MCP SDK were not installed
        monkeypatch.delitem(sys.modules, "langchain_fusion.mcp")
        monkeypatch.delattr("langchain_fusion.mcp")
        status, out, err = run_cli(["mcp", str(saved)])
        assert_one_line_error(status, out, err, "serving over MCP needs the 'mcp' extra (mcp", "langchain-fusion[mcp]")


# --- real transports, in subprocesses -------------------------------------------------------------


async def _stdio_session_calls(
    command: list[str], errlog: Path
) -> tuple[list[Any], CallToolResult, CallToolResult, list[Exception]]:
    """Start ``command`` as an MCP stdio server with the SDK's client: list tools, one bad and one good search.

    Anything on the server's stdout that is not a protocol message reaches the client as an exception,
    which is collected and returned.
    """
    problems: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            problems.append(message)

    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=str(REPO))
    with anyio.fail_after(180), errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write, read_timeout_seconds=TIMEOUT, message_handler=on_message) as session,
        ):
            await session.initialize()
            tools = (await session.list_tools()).tools
            bad = await call_search(session, query="bolts", k=True)
            good = await call_search(session, query="torque for the busbar bolts", k=2)
    return tools, bad, good, problems


NOISY_SERVER = textwrap.dedent(
    """
    import json, os, sys
    from langchain_core.documents import Document
    from langchain_fusion import FusionIndex
    from langchain_fusion.mcp import build_mcp_server, run_mcp
    from tests.helpers.embeddings import HashingEmbeddings

    class NoisyEmbeddings(HashingEmbeddings):
        # A library that prints while it works: from Python and at the file descriptor level.
        def embed_query(self, text):
            print("stray print")
            os.write(1, b"stray bytes\\n")
            return super().embed_query(text)

    docs = [Document(page_content=text, metadata={"source": source}) for text, source in json.loads(sys.argv[1])]
    index = FusionIndex.from_documents(docs, NoisyEmbeddings())
    run_mcp(build_mcp_server(index, log_level="WARNING"))
    """
)


@pytest.mark.subprocess
async def test_stdio_keeps_stdout_for_the_protocol(tmp_path: Path) -> None:
    """The Python entry point over stdio: prints during a search go to stderr, never into the protocol."""
    docs = [
        Document(page_content="Torque the busbar bolts to 45 Nm.", metadata={keys.SOURCE: "handbook.md"}),
        Document(page_content="Inspect the cabinets every month.", metadata={keys.SOURCE: "handbook.md"}),
        Document(page_content="Bolts on the busbar loosen over time.", metadata={keys.SOURCE: "notes.md"}),
    ]
    corpus = json.dumps([[d.page_content, d.metadata[keys.SOURCE]] for d in docs])
    errlog = tmp_path / "stderr.txt"
    tools, bad, good, problems = await _stdio_session_calls([sys.executable, "-c", NOISY_SERVER, corpus], errlog)
    assert problems == []
    assert [tool.name for tool in tools] == [SEARCH_TOOL]
    assert bad.isError is True and "k must be a positive whole number" in text_of(bad)
    results = results_of(good)
    assert [h.text for h in results.results] == [docs[0].page_content, docs[2].page_content]
    log = errlog.read_text()
    assert "stray print" in log and "stray bytes" in log
    assert "Traceback" not in log


@pytest.mark.local_model
@pytest.mark.subprocess
async def test_mcp_command_over_stdio(handbook_index: Path, tmp_path: Path) -> None:
    """``langchain-fusion mcp INDEX`` started by the SDK's stdio client, as Claude Desktop or an IDE would."""
    entry = "import sys; from langchain_fusion.cli import main; sys.exit(main())"
    errlog = tmp_path / "stderr.txt"
    tools, bad, good, problems = await _stdio_session_calls(
        [sys.executable, "-c", entry, "mcp", str(handbook_index)], errlog
    )
    assert problems == []
    assert [tool.name for tool in tools] == [SEARCH_TOOL]
    assert bad.isError is True and "\n" not in text_of(bad)
    results = results_of(good)
    assert len(results.results) == 2
    assert all(h.source and h.source.endswith("maintenance-handbook.md") for h in results.results)
    assert "Torque" in results.results[0].text
    lines = [line for line in errlog.read_text().splitlines() if line.startswith("langchain-fusion: ")]
    assert lines[0].startswith(f"langchain-fusion: MCP tool 'search' searches {handbook_index} (")
    assert "local:sentence-transformers/all-MiniLM-L6-v2" in lines[0]
    assert lines[1] == "langchain-fusion: serving MCP clients over stdio"


@contextlib.contextmanager
def _lines_of(process: subprocess.Popen[str]) -> Iterator[queue.Queue[str]]:
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or []], daemon=True)
    reader.start()
    try:
        yield lines
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


@pytest.mark.local_model
@pytest.mark.subprocess
async def test_mcp_command_over_streamable_http(handbook_index: Path, tmp_path: Path) -> None:
    """``langchain-fusion mcp INDEX --transport streamable-http --port 0``: the URL line, one call, Ctrl-C."""
    entry = "import sys; from langchain_fusion.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", entry, "mcp", str(handbook_index), "--transport", "streamable-http", "--port", "0"]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seen: list[str] = []
    with _lines_of(process) as lines:
        url = None
        deadline = time.monotonic() + 120
        while url is None:
            assert time.monotonic() < deadline, f"no start-up line within 120 s: {seen}"
            assert process.poll() is None or not lines.empty(), f"mcp exited ({process.returncode}): {seen}"
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=0.5))
                match = re.search(r"serving MCP clients at (http://127\.0\.0\.1:\d+/mcp)$", seen[-1].rstrip())
                url = match.group(1) if match else None
        with anyio.fail_after(120):
            async with (
                streamable_http_client(url) as (read, write, _),
                ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session,
            ):
                await session.initialize()
                good = await call_search(session, query="torque for the busbar bolts", k=1)
                bad = await call_search(session, query="torque", alpha="NaN")
    while not lines.empty():
        seen.append(lines.get())
    assert len(results_of(good).results) == 1
    assert bad.isError is True and "alpha must be a number between 0 and 1" in text_of(bad)
    assert process.returncode == 0, seen
    assert seen[-1] == "langchain-fusion: stopped\n"
    assert "Traceback" not in "".join(seen)
