"""Reading the files an evaluation is given (labelled sets, query lists, saved reports).

Each is a regular file of at most :data:`MAX_FILE_BYTES`, read once: a device (``/dev/zero``), a pipe
or a file of gigabytes is refused in one line before anything is read. JSON that Python cannot read
(a number of more than 4,300 digits, nesting thousands deep) is a one-line error too.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from langchain_fusion.errors import FusionError

MAX_FILE_BYTES = 256 << 20
"""The largest labelled set, query file or report read (256 MiB: millions of labelled queries)."""


def read_text(path: Path, kind: str, missing: str, expected: str) -> str:
    """The UTF-8 text of the regular file ``path``; a one-line FusionError otherwise.

    ``kind`` names the file in the size error ("report"), ``missing`` is the whole error for a path
    with nothing there, and ``expected`` says what to give instead of a device or pipe.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise FusionError(missing) from None
    except OSError as exc:
        raise FusionError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise FusionError(f"{path}: not a regular file; give {expected}")
    too_big = f"more than the {MAX_FILE_BYTES:,} a {kind} may have; is it the right file?"
    if info.st_size > MAX_FILE_BYTES:
        raise FusionError(f"{path}: {info.st_size:,} bytes, {too_big}")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)  # bounded even if the file grows meanwhile
    except OSError as exc:
        raise FusionError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise FusionError(f"{path}: over {MAX_FILE_BYTES:,} bytes, {too_big}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FusionError(f"{path}: not UTF-8 text") from None


def parse_json(text: str, path: Path) -> Any:
    """The JSON value of ``text`` (read from ``path``); a one-line FusionError for anything Python cannot read."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FusionError(f"{path}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise FusionError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError:  # Python reads integers of at most 4,300 digits
        raise FusionError(f"{path}: not valid JSON (a number of more than 4300 digits)") from None
