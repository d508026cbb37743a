"""Requests carrying a number the server cannot take, answered before the SDK reads them.

NaN, Infinity and 1e400: Python's JSON readers accept these literals; the SDK then re-reads each
request from a JSON dump that writes them as null, so they would silently become the server's
defaults. Integers of more than 4,300 digits: JSON allows them, but Python (and pydantic) refuse to
read them, so the SDK failed the whole request (HTTP: "Internal Server Error"; stdio: no answer at
all). :class:`FiniteNumbersOnly` sits on a transport's incoming messages (see
:func:`~langchain_fusion._compat.filter_mcp_messages`) and :class:`ReadableNumbersOnly` on the HTTP
app: each such request is answered, in one line naming the argument, and the server goes on.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCRequest,
    JSONRPCResponse,
    TextContent,
)

MAX_DIGITS: int = int(getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300)
"""The most digits of an integer Python reads (its default limit; pydantic's JSON reader has the same)."""


class TooManyDigits:
    """An integer read from a request's text whose digits are past :data:`MAX_DIGITS` (the value is not read)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def read_request(text: str | bytes) -> Any:
    """A request's JSON with every integer past :data:`MAX_DIGITS` read as a :class:`TooManyDigits` (else as JSON)."""
    return json.loads(text, parse_int=lambda s: TooManyDigits(len(s.lstrip("-"))) if len(s) > MAX_DIGITS else int(s))


def _first_non_finite(value: Any, path: str = "") -> tuple[str, float | TooManyDigits] | None:
    """The path (``alpha``, ``filter['page'][1]``) and value of the first number the server cannot take, or None.

    NaN and infinite floats, and integers of too many digits (:class:`TooManyDigits`).
    """
    pending = [(path, value)]
    while pending:  # a loop, not recursion: a request may nest as deep as its parser allowed
        where, item = pending.pop()
        if isinstance(item, TooManyDigits) or (isinstance(item, float) and not math.isfinite(item)):
            return where, item
        if isinstance(item, dict):
            children = [(f"{where}[{key!r}]" if where else str(key), child) for key, child in item.items()]
        elif isinstance(item, list):
            children = [(f"{where}[{i}]", child) for i, child in enumerate(item)]
        else:
            continue
        pending.extend(reversed(children))  # depth first, in the order sent
    return None


def _refusal(message: SessionMessage | Exception) -> SessionMessage | None:
    """The answer to a request carrying a number JSON has no room for (None for any other message).

    A ``tools/call`` is answered with a tool error, as any other bad argument; other requests, with
    a JSON-RPC invalid-params error. Notifications and responses pass as they are: nothing answers them.
    """
    if isinstance(message, Exception) or not isinstance(message.message.root, JSONRPCRequest):
        return None
    request = message.message.root
    params = request.params or {}
    arguments = params.get("arguments") if request.method == "tools/call" else None
    found = _first_non_finite(arguments) if isinstance(arguments, dict) else None
    if found is None:
        found = _first_non_finite(params, "params")
        if found is None:
            return None
        answer: JSONRPCResponse | JSONRPCError = JSONRPCError(
            jsonrpc="2.0",
            id=request.id,
            error=ErrorData(code=INVALID_PARAMS, message=f"Invalid request parameters: {_not_finite(*found)}"),
        )
    else:
        result = CallToolResult(content=[TextContent(type="text", text=_not_finite(*found))], isError=True)
        answer = JSONRPCResponse(
            jsonrpc="2.0", id=request.id, result=result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
    return SessionMessage(JSONRPCMessage(answer))


def _not_finite(where: str, number: float | TooManyDigits) -> str:
    if isinstance(number, TooManyDigits):
        return f"{where} must be a number of at most {MAX_DIGITS} digits; got one of {number.digits} digits"
    shown = "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return (
        f"{where} must be a finite number; got {shown} (JSON has no NaN or Infinity, and a number beyond the "
        "float range, such as 1e400, reads as Infinity)"
    )


class FiniteNumbersOnly(ObjectReceiveStream[SessionMessage | Exception]):
    """A transport's incoming messages, less the requests carrying a NaN or infinite number: those are answered here."""

    def __init__(
        self,
        messages: ObjectReceiveStream[SessionMessage | Exception],
        answers: ObjectSendStream[SessionMessage],
    ) -> None:
        self._messages = messages
        self._answers = answers

    async def receive(self) -> SessionMessage | Exception:
        """The next message that may go on to the session."""
        while True:
            message = await self._messages.receive()
            refusal = _refusal(message) if isinstance(message, SessionMessage) else unreadable_refusal(message)
            if refusal is None:
                return message
            await self._answers.send(refusal)

    async def aclose(self) -> None:
        """Close the transport's stream."""
        await self._messages.aclose()


def unreadable_refusal(problem: Exception) -> SessionMessage | None:
    """The answer to a request the transport could not read for a number of too many digits, else None.

    Over stdio the SDK reads each line with pydantic, which refuses such a number ("number out of
    range") and hands the session the error, which answers nothing: the client would wait forever.
    The line, which the error holds, is read again with :func:`read_request` and answered as
    :func:`refuse_text` does.
    """
    errors = getattr(problem, "errors", None)
    try:
        found = errors() if callable(errors) else []
    except Exception:
        return None
    raw = found[0].get("input") if found and found[0].get("type") == "json_invalid" else None
    return refuse_text(raw) if isinstance(raw, (str, bytes)) else None


def refuse_text(text: str | bytes) -> SessionMessage | None:
    """The answer to the request ``text`` if it holds a number the server cannot take (see the module), else None."""
    try:
        parsed = read_request(text)
        request = JSONRPCRequest.model_validate(parsed)
    except Exception:  # not JSON, or not a request (a notification needs no answer): the SDK says what it says
        return None
    return _refusal(SessionMessage(JSONRPCMessage(request)))


class ReadableNumbersOnly:
    """An ASGI app in front of the streamable HTTP app: answers a request holding an integer of too many digits.

    The SDK reads the body with ``json.loads``, which raises on such a number, and answers "Internal
    Server Error". Only a body that the SDK's reader would fail on is read a second time.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass the request on, unless its body is answered here."""
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            event = await receive()
            if event["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([event], receive), send)
                return
            chunks.append(event.get("body", b""))
            more = event.get("more_body", False)
        body = b"".join(chunks)
        answer = refuse_text(body) if _past_the_digit_limit(body) else None
        if answer is None:
            whole = {"type": "http.request", "body": body, "more_body": False}
            await self.app(scope, _replay([whole], receive), send)
            return
        payload = answer.message.model_dump_json(by_alias=True, exclude_none=True).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _past_the_digit_limit(body: bytes) -> bool:
    """Whether reading ``body`` as JSON fails on an integer of too many digits (a ValueError, not a JSON error).

    Only a body with that many digits in a row is read to find out (a scan in C; a request rarely has one).
    """
    if _LONG_DIGIT_RUN.search(body) is None:
        return False
    try:
        json.loads(body)
    except json.JSONDecodeError:
        return False
    except ValueError:
        return True
    return False


_LONG_DIGIT_RUN = re.compile(rb"[0-9]{%d}" % (MAX_DIGITS + 1))


def _replay(events: list[dict[str, Any]], receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``events``, then what ``receive`` gives (the client's disconnect)."""
    pending = list(events)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
