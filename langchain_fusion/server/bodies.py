"""Request bodies checked before anything parses them: their size (413), JSON that would fail later (422).

Python's JSON parser accepts what LangServe would answer with a 500 further on (see
:func:`_json_problem`); :class:`RequestBody` reads the body once, within ``max_request_bytes``, and
replays it to the app. It also answers 404 for a path no file can have (a NUL, or one the file system
refuses under the playground).
"""

from __future__ import annotations

import json
import math
import sys

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _NonFiniteNumber(ValueError):
    """A JSON body holds NaN or an infinite number."""


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFiniteNumber(text)
    return value


def _no_constant(name: str) -> float:
    raise _NonFiniteNumber(name)


class _LongInteger(ValueError):
    """A JSON body holds an integer with more digits than Python converts."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > sys.get_int_max_str_digits():
        raise _LongInteger(text[:20])
    return int(text)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"detail": "Not Found"}, status_code=404)(scope, receive, send)


class RequestBody:
    """ASGI middleware: 413 for a body above ``max_bytes`` (before parsing), 422 for bad JSON, 404 for a NUL in a path.

    Bad JSON is what Python's parser accepts but would fail later (see :func:`_json_problem`). A
    playground path that names no file LangServe can open (a folder, a name too long for the file
    system, a file used as a folder) is a 404 too: LangServe only turns a missing file into one.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the body, then pass the request on with the body replayed (or answer it)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", ""):  # e.g. /playground/assets/%00: no file has a NUL in its name
            await _not_found(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        problem = _json_problem(bytes(body))
        if problem is not None:
            error = {"type": "json_invalid", "loc": ["body"], "msg": problem}
            await JSONResponse({"detail": [error]}, status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # e.g. a streaming response waiting for the client to disconnect

        if "/playground/" in scope.get("path", ""):
            await self._playground(scope, replay, send)
        else:
            await self.app(scope, replay, send)

    async def _playground(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a playground file; a path the file system refuses (not only a missing file) is a 404."""
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except OSError:  # IsADirectoryError, NotADirectoryError, ENAMETOOLONG from LangServe's open()
            if started:
                raise
            await _not_found(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"the request body is larger than the limit of {self.max_bytes} bytes"}, status_code=413
        )
        await response(scope, receive, send)


def _json_problem(body: bytes) -> str | None:
    r"""What is wrong with a body that LangServe would not answer with a 4xx, if anything.

    Python's parser accepts NaN, Infinity, numbers out of range and unpaired surrogates (``\ud800``),
    guesses UTF-16 and UTF-32 from the first bytes, and fails on deep nesting with a RecursionError;
    LangServe fails on ``"config": null``. Each would become a 500 further on. Bodies that are not
    JSON at all are left to LangServe, which answers 422.
    """
    if not body:
        return None
    try:
        value = json.loads(
            body.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int
        )
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8 text"
    except _NonFiniteNumber:
        return "NaN and Infinity are not JSON numbers"
    except _LongInteger:
        return f"integers in the body are limited to {sys.get_int_max_str_digits()} digits"
    except UnicodeEncodeError:
        return "the body holds an unpaired surrogate escape (\\ud800 to \\udfff), which is not text"
    except RecursionError:
        return "the body is nested too deeply"
    except ValueError:
        return None
    if isinstance(value, dict) and "config" in value and value["config"] is None:
        return "config must be an object (or, for /batch, a list of objects) when given"
    return None
