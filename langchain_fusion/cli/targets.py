"""Where the ``index`` command writes: a folder (saved atomically) or a Milvus collection (written as it goes).

Both keep the file record that makes reruns incremental: a folder in its manifest's ``info``,
a collection in its side collection (:meth:`~langchain_fusion.stores.milvus.MilvusStore.write_info`).
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langchain_fusion.cli.errors import UserError
from langchain_fusion.errors import EmbeddingsMismatchError
from langchain_fusion.stores.locations import MilvusLocation, is_store_location, parse_location

if TYPE_CHECKING:  # the command line imports only what a command needs
    from langchain_fusion.index.fusion_index import FusionIndex
    from langchain_fusion.stores.milvus import MilvusStore

LLM_CACHE_SUFFIX = ".llm-cache"


class IndexTarget(ABC):
    """The place an ``index`` run reads its existing index from and writes the result to."""

    @abstractmethod
    def check_options(self, args: argparse.Namespace) -> None:
        """UserError for options this target cannot honour (before any paid work)."""

    @abstractmethod
    def open(self, args: argparse.Namespace) -> FusionIndex:
        """The index to update (a new empty one if there is none yet)."""

    @abstractmethod
    def record(self, index: FusionIndex) -> dict[str, Any]:
        """The file record kept with ``index`` (``{}`` for a new one)."""

    @abstractmethod
    def save(self, index: FusionIndex, record: dict[str, Any], hierarchical: Any = None) -> str:
        """Persist ``index`` (or ``hierarchical``, built on it) with ``record``; returns where, for people."""

    @abstractmethod
    def default_llm_cache(self) -> Path:
        """The chat-model cache folder when ``--llm-cache`` is not given."""


def index_target(out: str) -> IndexTarget:
    """The target named by ``--out``; UserError before any work if it cannot be written."""
    if is_store_location(out):
        return MilvusTarget(parse_location(out))
    from langchain_fusion.stores.local.folder import check_save_target

    return FolderTarget(check_save_target(Path(out)))


class FolderTarget(IndexTarget):
    """An index folder, saved atomically at the end of the run (or at an interruption)."""

    def __init__(self, folder: Path) -> None:
        """Write to ``folder`` (already checked to be an index folder or free)."""
        self.folder = folder

    def check_options(self, args: argparse.Namespace) -> None:
        """A folder takes every option (an existing one is checked against them when opened)."""
        return None

    def open(self, args: argparse.Namespace) -> FusionIndex:
        """The index saved in the folder (its chunks, for a hierarchical one), or a new empty index."""
        from langchain_fusion.index.fusion_index import FusionIndex
        from langchain_fusion.index.hierarchical import CHUNKS_DIR, is_hierarchical
        from langchain_fusion.models.embeddings import resolve_embeddings

        out = self.folder
        embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
        if not (out / "manifest.json").is_file():
            return FusionIndex(
                embeddings if embeddings is not None else resolve_embeddings(None),
                vector_index=args.vector_index or "Flat",
                vector_search_params=args.vector_search_params,
            )
        hierarchical = is_hierarchical(out)
        if hierarchical and not args.summaries:
            raise UserError(
                f"{out} holds page summaries too: add --summaries to keep them up to date, or choose a new --out"
            )
        try:
            # No probe embedding: a rerun with nothing new must not pay for loading the model.
            index = FusionIndex.load(out / CHUNKS_DIR if hierarchical else out, embeddings, check_dimension=False)
        except EmbeddingsMismatchError as exc:
            raise UserError(f"{exc}; to use other embeddings, choose a new --out") from None
        store_factory = getattr(index.store, "vector_index", None)
        if args.vector_index and args.vector_index != store_factory:
            raise UserError(
                f"{out} uses vector index {store_factory!r}, not {args.vector_index!r}: "
                "drop --vector-index, or choose a new --out"
            )
        return index

    def record(self, index: FusionIndex) -> dict[str, Any]:
        """The record saved in the manifest's ``info``."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        return dict(index.saved_info.get(SYNC_INFO_KEY) or {})

    def save(self, index: FusionIndex, record: dict[str, Any], hierarchical: Any = None) -> str:
        """Save the folder atomically (the hierarchical index, when there is one)."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        info = {SYNC_INFO_KEY: record}
        return str((hierarchical or index).save(self.folder, info=info))

    def default_llm_cache(self) -> Path:
        """``NAME.llm-cache`` beside the folder."""
        return self.folder.parent / f"{self.folder.name}{LLM_CACHE_SUFFIX}"


class MilvusTarget(IndexTarget):
    """A Milvus collection: rows are upserted as files are done; the record is written at the end."""

    def __init__(self, location: MilvusLocation) -> None:
        """Write into the collection at ``location``."""
        self.location = location

    def check_options(self, args: argparse.Namespace) -> None:
        """Summaries and FAISS options belong to index folders."""
        if args.summaries:
            raise UserError(
                "page summaries (--summaries) are kept in index folders only: give --out a folder, or drop --summaries"
            )
        if args.vector_index or args.vector_search_params:
            raise UserError(
                "--vector-index and --vector-search-params configure the in-process FAISS store; "
                "a Milvus collection uses its own exact (FLAT) index: drop them"
            )

    def open(self, args: argparse.Namespace) -> FusionIndex:
        """The index over the collection (created by the first upsert if it does not exist)."""
        from langchain_fusion.index.opening import open_milvus_index
        from langchain_fusion.models.embeddings import resolve_embeddings

        embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
        try:
            return open_milvus_index(self.location, embeddings, create=True, check_dimension=False)
        except EmbeddingsMismatchError as exc:
            raise UserError(f"{exc}; to use other embeddings, choose another collection") from None

    def record(self, index: FusionIndex) -> dict[str, Any]:
        """The record in the collection's side collection."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        return dict(self._store(index).read_info().get(SYNC_INFO_KEY) or {})

    def save(self, index: FusionIndex, record: dict[str, Any], hierarchical: Any = None) -> str:
        """The rows are already in the collection: write the record."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        self._store(index).write_info({SYNC_INFO_KEY: record})
        return str(self.location)

    def default_llm_cache(self) -> Path:
        """``COLLECTION.llm-cache`` in the working folder."""
        return Path(f"{self.location.collection_name}{LLM_CACHE_SUFFIX}")

    @staticmethod
    def _store(index: FusionIndex) -> MilvusStore:
        return cast("MilvusStore", index.store)
