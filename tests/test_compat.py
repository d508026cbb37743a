"""The workarounds of langchain_fusion/_compat.py, pinned to the versions they were written for.

Each test asserts that the installed dependency is within the range its workaround was written for (the
bounds of the extras in pyproject.toml), and that the private thing the workaround relies on still exists
and behaves as assumed. An upgrade then fails here, naming the workaround, rather than deep in a request.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ObjectReceiveStream
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from langchain_fusion._compat import (
    filter_mcp_messages,
    fresh_sse_exit_event,
    mcp_lowlevel_server,
    pymilvus_column_upsert,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli before Python 3.11
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
TIMEOUT = timedelta(seconds=60)


def extra_range(extra: str, package: str) -> SpecifierSet:
    """The version range of ``package`` in the ``extra`` of pyproject.toml."""
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for line in extras[extra]:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == canonicalize_name(package):
            return requirement.specifier
    raise AssertionError(f"pyproject.toml's {extra!r} extra names no {package}")


def required_range(owner: str, package: str) -> SpecifierSet:
    """The version range of ``package`` that the installed ``owner`` requires (in any of its extras)."""
    for line in importlib.metadata.requires(owner) or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == canonicalize_name(package):
            return requirement.specifier
    raise AssertionError(f"{owner} does not require {package}")


def assert_within(package: str, allowed: SpecifierSet, workaround: str) -> None:
    installed = Version(importlib.metadata.version(package))
    assert allowed.contains(installed, prereleases=True), (
        f"{package} {installed} is outside {allowed}, the range {workaround} in langchain_fusion/_compat.py was "
        "written for: check that it still holds (or is still needed), then update the range"
    )


class TestSseStarletteExitEvent:
    """fresh_sse_exit_event: sse-starlette 1.x keeps one exit event per process, bound to its first event loop."""

    @pytest.fixture(autouse=True)
    def _server_extra(self) -> None:
        pytest.importorskip("langserve")
        pytest.importorskip("sse_starlette")

    def test_versions(self) -> None:
        assert_within("langserve", extra_range("server", "langserve"), "fresh_sse_exit_event")
        sse_range = required_range("langserve", "sse-starlette")
        assert_within("sse-starlette", sse_range, "fresh_sse_exit_event")
        assert Version(importlib.metadata.version("sse-starlette")).major == 1, "written for sse-starlette 1.x"

    def test_the_event_is_bound_to_the_first_loop_until_forgotten(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from sse_starlette.sse import AppStatus, EventSourceResponse

        monkeypatch.setattr(AppStatus, "should_exit", False)  # as in a process no signal has stopped
        assert "should_exit_event" in vars(AppStatus), "AppStatus.should_exit_event is gone"
        fresh_sse_exit_event()
        assert AppStatus.should_exit_event is None

        async def first_stream() -> None:
            with anyio.move_on_after(0.05):  # it waits for the exit signal; the event is made first
                await EventSourceResponse.listen_for_exit_signal()

        anyio.run(first_stream)
        assert isinstance(AppStatus.should_exit_event, anyio.Event), "the exit event is no longer in AppStatus"
        with pytest.raises(RuntimeError, match="different event loop"):  # what the workaround avoids
            anyio.run(first_stream)
        fresh_sse_exit_event()
        anyio.run(first_stream)  # a fresh event, made on this loop
        fresh_sse_exit_event()
        assert AppStatus.should_exit_event is None


class TestMcpLowLevelServer:
    """mcp_lowlevel_server and filter_mcp_messages: FastMCP's private low-level server runs every session."""

    @pytest.fixture(autouse=True)
    def _mcp_extra(self) -> None:
        pytest.importorskip("mcp")

    def test_version(self) -> None:
        assert_within("mcp", extra_range("mcp", "mcp"), "mcp_lowlevel_server and filter_mcp_messages")

    def test_the_low_level_server_runs_a_session_on_given_streams(self) -> None:
        from mcp.server.fastmcp import FastMCP
        from mcp.server.lowlevel import Server

        lowlevel = mcp_lowlevel_server(FastMCP("compat"))
        assert isinstance(lowlevel, Server)
        assert list(inspect.signature(lowlevel.run).parameters)[:3] == [
            "read_stream",
            "write_stream",
            "initialization_options",
        ]
        assert callable(lowlevel.create_initialization_options)

    def test_the_low_level_server_names_the_version_initialize_reports(self) -> None:
        from mcp.server.fastmcp import FastMCP

        lowlevel = mcp_lowlevel_server(FastMCP("compat"))
        lowlevel.version = "9.8.7"
        assert lowlevel.create_initialization_options().server_version == "9.8.7"

    def test_the_streamable_http_transport_runs_the_same_low_level_server(self) -> None:
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("compat", stateless_http=True, json_response=True)
        server.streamable_http_app()
        assert server.session_manager.app is mcp_lowlevel_server(server), "its run would not be filtered"

    async def test_filtered_messages_reach_the_session_and_tool_calls_reach_call_tool(self) -> None:
        from mcp.server.fastmcp import FastMCP
        from mcp.shared.memory import create_connected_server_and_client_session

        seen: list[str] = []
        called: list[str] = []

        class Recording(FastMCP):
            async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
                called.append(name)  # the search tool's arguments are checked here, as sent
                return await super().call_tool(name, arguments)

        class Watched(ObjectReceiveStream[Any]):
            def __init__(self, messages: ObjectReceiveStream[Any], answers: Any) -> None:
                self.messages = messages

            async def receive(self) -> Any:
                message = await self.messages.receive()
                seen.append(type(message.message.root).__name__)
                return message

            async def aclose(self) -> None:
                await self.messages.aclose()

        server = Recording("compat")
        server.add_tool(lambda text: text, name="echo")
        filter_mcp_messages(server, Watched)
        async with create_connected_server_and_client_session(server, read_timeout_seconds=TIMEOUT) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"text": "hi"})
        assert not result.isError
        assert "JSONRPCRequest" in seen, "the session no longer reads through the low-level server's run"
        assert called == ["echo"], "tools/call no longer goes through FastMCP.call_tool"


class TestPymilvusColumnUpsert:
    """pymilvus_column_upsert: the column upsert of MilvusClient's private connection."""

    @pytest.fixture(autouse=True)
    def _milvus_extra(self) -> None:
        pytest.importorskip("pymilvus")

    def test_version(self) -> None:
        assert_within("pymilvus", extra_range("milvus", "pymilvus"), "pymilvus_column_upsert")

    def test_the_client_reaches_its_connection_and_call_context(self) -> None:
        from pymilvus import MilvusClient
        from pymilvus.client.grpc_handler import GrpcHandler

        assert callable(getattr(MilvusClient, "_get_connection", None)), "MilvusClient._get_connection is gone"
        assert callable(getattr(MilvusClient, "_generate_call_context", None)), "_generate_call_context is gone"
        parameters = inspect.signature(GrpcHandler.upsert).parameters
        assert {"collection_name", "entities", "timeout", "context"} <= set(parameters)
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()), "no room for schema="

    def test_a_client_without_them_gets_the_row_path(self) -> None:
        assert pymilvus_column_upsert(object()) is None

        class Client:
            def _get_connection(self) -> str:
                return "handler"

            def _generate_call_context(self) -> str:
                return "context"

        assert pymilvus_column_upsert(Client()) == ("handler", "context")
