"""Same-origin protection: the Host names the server answers (421 for another), and JSON bodies only (415).

A web page the user visits could otherwise make the browser send this server requests behind the
user's back (see :class:`SameOrigin`).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from langchain_fusion.pipeline import ServeLimits
from langchain_fusion.sockets import is_loopback

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""The names of this machine a browser uses for a server listening on a loopback address."""


def allowed_hosts(limits: ServeLimits) -> frozenset[str] | None:
    """The Host names the server answers (None: any), from ``limits.allowed_hosts`` and where it listens.

    On a loopback address, this machine's names and the ones given; on another address, the ones
    given and that address, or any when none are given (the network in front of it decides).
    """
    names = set(limits.allowed_hosts)
    if "*" in names:
        return None
    if is_loopback(limits.host):
        return frozenset(names | LOOPBACK_NAMES)
    if not names:
        return None
    return frozenset(names | {limits.host.strip("[]").lower()})


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port: ``[::1]:8000`` -> ``::1``, ``Name:80`` -> ``name``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class SameOrigin:
    """ASGI middleware: no request a web page could send this server behind the user's back.

    A page the user visits can make the browser POST a "simple" request (a form or ``text/plain``
    body, no preflight) to ``127.0.0.1:8000`` and spend the user's key, and with DNS rebinding it can
    read the answers under a name it controls. So a request naming another Host is refused (421),
    and a body that is not JSON is refused (415) before anything reads it.
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse another Host (421) or a body that is not JSON (415); pass anything else on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.allowed is not None:
            host = _host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.allowed:
                detail = (
                    f"this server does not answer for the host {host!r}: it answers for "
                    f"{', '.join(sorted(self.allowed))} (allow another with --allowed-hosts or allowed_hosts)"
                )
                await JSONResponse({"detail": detail}, status_code=421)(scope, receive, send)
                return
        if scope.get("method") in ("POST", "PUT", "PATCH") and not _is_json(headers.get(b"content-type")):
            detail = "send the request body as JSON, with the header Content-Type: application/json"
            await JSONResponse({"detail": detail}, status_code=415)(scope, receive, send)
            return
        await self.app(scope, receive, send)
