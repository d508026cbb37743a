"""Milvus locations for tests: a fresh collection on the server at ``MILVUS_URI``, else in a Milvus Lite file."""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest


def skip_without_milvus() -> None:
    """Skip the calling test module unless pymilvus is installed, and milvus-lite too when ``MILVUS_URI`` is not set.

    The packages are found, not imported: a module whose tests the fast tier deselects pays no import of
    pymilvus (about a second per test process) when it is collected.
    """
    for package in ("pymilvus",) if os.environ.get("MILVUS_URI") else ("pymilvus", "milvus_lite"):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"could not find {package}: the milvus extra is not installed", allow_module_level=True)


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
