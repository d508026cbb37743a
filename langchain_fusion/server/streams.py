"""A stream whose chat model fails ends with an error event that says why (502), then normally."""

from __future__ import annotations

import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from langchain_fusion.errors import ProviderError, redact

logger = logging.getLogger(__name__)


class StreamErrors:
    """ASGI middleware: a stream whose chat model fails ends with an error event that says why, then normally.

    LangServe sends ``event: error`` with a generic 500 and re-raises, so the connection drops
    mid-stream and the server logs a traceback. Here the error event is held back until the stream
    either continues (it is sent as it was) or the exception arrives: for a
    :class:`~langchain_fusion.errors.ProviderError` the event carries status 502 and its one-line,
    redacted message, the body ends normally, and one warning line is logged.
    """

    _ERROR_EVENT = b"event: error"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; a ``/stream`` response's error event is held back until it is understood."""
        if scope["type"] != "http" or not scope.get("path", "").endswith("/stream"):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        ended = False

        async def holding(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.body" and message.get("body", b"").lstrip().startswith(
                self._ERROR_EVENT
            ):
                held.append(message)
                return
            for waiting in held:
                await send(waiting)
            held.clear()
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        try:
            await self.app(scope, receive, holding)
        except Exception as exc:
            failure = _provider_error_in(exc)
            if failure is None or not held or ended:
                raise
            message = redact(str(failure))
            logger.warning("%s %s: %s", scope.get("method", ""), scope.get("path", ""), message)
            data = json.dumps({"status_code": 502, "message": message})
            body = f"event: error\r\ndata: {data}\r\n\r\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        for waiting in held:  # an error event the stream went on from (not LangServe's way, but not lost)
            await send(waiting)


def _provider_error_in(exc: BaseException) -> ProviderError | None:
    """The ProviderError ``exc`` is, or holds (an exception group from the stream's task group)."""
    if isinstance(exc, ProviderError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _provider_error_in(inner)
        if found is not None:
            return found
    return None
