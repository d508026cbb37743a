"""TCP sockets for the HTTP servers (LangServe and MCP): bind before start-up, and say where."""

from __future__ import annotations

import ipaddress
import socket

DEFAULT_HOST = "127.0.0.1"
"""Where the servers listen by default: this machine only (they have no authentication)."""
DEFAULT_PORT = 8000
"""The servers' default TCP port."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_socket(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: a free one), for either server; OSError if it cannot bind.

    It listens at once, so a client that connects while the server is still starting waits
    instead of being refused, and a busy port fails before any index is loaded.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket, path: str = "") -> str:
    """``http://HOST:PORT`` of a bound socket (IPv6 hosts in brackets), followed by ``path``."""
    host, port = sock.getsockname()[:2]
    return (f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}") + path
