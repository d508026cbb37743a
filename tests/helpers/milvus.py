"""Milvus locations for tests: a fresh collection on the server at ``MILVUS_URI``, else in a Milvus Lite file."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit


def fresh_location(folder: Path, prefix: str) -> str:
    """A location of a new collection named ``prefix`` and a random suffix.

    On the server at ``MILVUS_URI`` when it is set (``milvus+https`` for an https address), else in
    the Milvus Lite file ``folder/<prefix>.db``.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    server = os.environ.get("MILVUS_URI")
    if server:
        parts = urlsplit(server)
        return f"{'milvus+https' if parts.scheme == 'https' else 'milvus'}://{parts.netloc}/{name}"
    return f"milvus+lite:{folder / f'{prefix}.db'}/{name}"
