"""Requests carrying a number JSON has no room for (NaN, Infinity, 1e400), answered before the SDK reads them.

Python's JSON readers accept these literals; the SDK then re-reads each request from a JSON dump that
writes them as null, so they would silently become the server's defaults. :class:`FiniteNumbersOnly`
sits on a transport's incoming messages (see :func:`~langchain_fusion._compat.filter_mcp_messages`).
"""

from __future__ import annotations

import math
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


def _first_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The path (``alpha``, ``filter['page'][1]``) and value of the first NaN or infinite float in it, or None."""
    pending = [(path, value)]
    while pending:  # a loop, not recursion: a request may nest as deep as its parser allowed
        where, item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
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


def _not_finite(where: str, number: float) -> str:
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
            refusal = _refusal(message)
            if refusal is None:
                return message
            await self._answers.send(refusal)

    async def aclose(self) -> None:
        """Close the transport's stream."""
        await self._messages.aclose()
