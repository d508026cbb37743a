"""The suite's own guards, set in pyproject's [tool.pytest.ini_options]: tests stay on this machine and end.

pytest-socket (``--allow-hosts=127.0.0.1,::1 --allow-unix-socket``) refuses any connect beyond loopback
before a packet leaves; pytest-timeout (``timeout = 300``) fails a test that hangs instead of stalling
the run; ``--strict-config`` refuses an unknown option in that table.
"""

from __future__ import annotations

import _socket
import asyncio
import socket
import threading
from pathlib import Path

import pytest
from pytest_socket import SocketConnectBlockedError

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


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) == 300
    assert request.config.getoption("strict_config")
