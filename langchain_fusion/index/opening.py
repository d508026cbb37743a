"""Open an index by its location: a saved folder or a Milvus collection (see :mod:`~langchain_fusion.stores.locations`).

The command line, the server and users who keep a location in their configuration all go
through :func:`open_index`, so a team can point every tool at its cluster with one string.
"""

from __future__ import annotations

import os
from pathlib import Path

from langchain_core.embeddings import Embeddings

from langchain_fusion.errors import FusionError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex, is_hierarchical
from langchain_fusion.stores.locations import MilvusLocation, is_store_location, parse_location


def open_index(
    location: str | os.PathLike[str], embeddings: Embeddings | None = None, *, check_dimension: bool = True
) -> FusionIndex | HierarchicalIndex:
    """The index at ``location``: a folder saved by ``save`` (plain or hierarchical), or a Milvus collection.

    ``embeddings`` default to the model recorded with the index. A Milvus collection must
    exist (``langchain-fusion index ... --out LOCATION`` creates one); a folder is verified
    as :meth:`FusionIndex.load` does.
    """
    if is_store_location(location):
        return open_milvus_index(parse_location(str(location)), embeddings, check_dimension=check_dimension)
    path = Path(location).expanduser()
    if is_hierarchical(path):
        return HierarchicalIndex.load(path, embeddings)
    return FusionIndex.load(path, embeddings, check_dimension=check_dimension)


def open_milvus_index(
    location: MilvusLocation,
    embeddings: Embeddings | None = None,
    *,
    create: bool = False,
    check_dimension: bool = True,
) -> FusionIndex:
    """The index over a Milvus collection; with ``create``, a new empty one if it does not exist yet."""
    store = location.open()
    if not store.exists and not create:
        raise FusionError(
            f"{location}: there is no collection {location.collection_name!r} at {location.uri}; "
            f"build it with: langchain-fusion index PATH... --out {location}"
        )
    return FusionIndex.from_store(store, embeddings, check_dimension=check_dimension, label=str(location))
