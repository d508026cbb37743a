"""The one version of langchain-fusion: a leaf every module may import (it imports nothing of the package)."""

from __future__ import annotations

from functools import cache


@cache
def library_version() -> str:
    """The installed langchain-fusion version (``0+unknown`` when run from a checkout that was not installed)."""
    from importlib import metadata

    try:
        return metadata.version("langchain-fusion")
    except metadata.PackageNotFoundError:  # pragma: no cover - the tests run an installed package
        return "0+unknown"
