"""Open an index by its location: a saved folder, or another engine's store (:mod:`~langchain_fusion.stores.registry`).

The command line, the server, MCP and users who keep a location in their configuration all go
through :func:`open_index`, so a team can point every tool at its cluster with one string.
"""

from __future__ import annotations

import os
from pathlib import Path

from langchain_core.embeddings import Embeddings

from langchain_fusion.errors import IndexFormatError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex, is_hierarchical, stored_entry
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY
from langchain_fusion.stores.local.folder import MANIFEST
from langchain_fusion.stores.registry import NewStoreOptions, StoreEngine, SummaryStores, engine_for


def open_index(
    location: str | os.PathLike[str], embeddings: Embeddings | None = None, *, check_dimension: bool = True
) -> FusionIndex | HierarchicalIndex:
    """The index at ``location``: a folder saved by ``save`` (plain or hierarchical), or another engine's store.

    ``embeddings`` default to the model recorded with the index. A store of another engine
    must exist (``langchain-fusion index ... --out LOCATION`` creates one); a folder is verified
    as :meth:`FusionIndex.load` does. A store whose record says it keeps page summaries beside it
    (``build_index`` with ``summaries=True``) opens as a :class:`HierarchicalIndex`.
    """
    engine = engine_for(location)
    folder = engine.folder(str(location))
    if folder is not None and is_hierarchical(folder):
        return HierarchicalIndex.load(folder, embeddings)
    opened = engine.open(str(location))
    index = FusionIndex.from_store(opened.store, embeddings, check_dimension=check_dimension, label=str(location))
    index.saved_info = opened.info
    return with_summaries(engine, str(location), index) or index


def with_summaries(engine: StoreEngine, location: str, chunks: FusionIndex) -> HierarchicalIndex | None:
    """The hierarchical index of ``chunks`` when the record of their store says it keeps page summaries beside them.

    None for a plain index. Its hierarchical relevance model is read from the record.
    """
    entry = stored_entry(chunks.saved_info, location)
    if entry is None:
        return None
    if not isinstance(engine, SummaryStores):
        raise IndexFormatError(f"{location} records page summaries, which {engine.name} stores do not keep")
    summaries = FusionIndex(chunks.embeddings, store=engine.summaries_store(location, chunks.store))
    if summaries.view().known_empty() and not chunks.view().known_empty():
        raise IndexFormatError(
            f"{location} records page summaries but they are gone: make them again with langchain-fusion index "
            f"PATH... --summaries --out {location} (build_index with summaries=True)"
        )
    hierarchical = HierarchicalIndex(chunks, summaries, check_links=False)
    hierarchical.relevance_data = entry.get(RELEVANCE_INFO_KEY)
    return hierarchical


def open_for_update(
    location: str | os.PathLike[str],
    embeddings: Embeddings | None = None,
    options: NewStoreOptions | None = None,
) -> FusionIndex:
    """The plain index at ``location`` to add documents to, or a new empty one made with ``options``.

    ``embeddings`` default to the model recorded with an existing index (no probe embedding is
    made, so a run with nothing new loads no model), and to :func:`default_embeddings` for a new one.
    """
    engine = engine_for(location)
    opened = engine.open_or_create(str(location), options or NewStoreOptions())
    if opened.created:
        from langchain_fusion.models import embeddings as models

        return FusionIndex(embeddings if embeddings is not None else models.default_embeddings(), store=opened.store)
    index = FusionIndex.from_store(opened.store, embeddings, check_dimension=False, label=str(location))
    index.saved_info = opened.info
    return index


def hierarchical_folder(location: str | os.PathLike[str]) -> Path | None:
    """The folder of ``location`` when it holds a hierarchical index (page summaries beside the chunks)."""
    folder = engine_for(location).folder(str(location))
    if folder is None or not (folder / MANIFEST).is_file():
        return None
    return folder if is_hierarchical(folder) else None


def keeps_summaries(location: str | os.PathLike[str]) -> bool:
    """Whether the engine of ``location`` can keep page summaries (in the index folder, or in a store beside it)."""
    engine = engine_for(location)
    return engine.folder(str(location)) is not None or isinstance(engine, SummaryStores)
