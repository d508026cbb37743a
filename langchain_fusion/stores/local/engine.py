"""The folder engine: an index location that is a folder, holding an in-process store saved by ``save``.

See :mod:`langchain_fusion.stores.registry`. A folder is saved atomically and crash-safely
(:mod:`~langchain_fusion.stores.local.saving`); its manifest keeps the record of an ``index`` run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.base import FusionStore
from langchain_fusion.stores.local.folder import MANIFEST
from langchain_fusion.stores.local.saving import check_save_target, update_lock
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.registry import (
    LLM_CACHE_SUFFIX,
    NewStoreOptions,
    OpenedStore,
    StoreEngine,
    check_tenant_key_kept,
)


class FolderEngine(StoreEngine):
    """Index folders on this machine (the default engine)."""

    name = "folder"

    def folder(self, location: str) -> Path:
        """The folder itself."""
        return Path(location).expanduser()

    def updating(self, location: str, on_wait: Callable[[], None] | None = None) -> AbstractContextManager[None]:
        """The folder's update lock (see :func:`~langchain_fusion.stores.local.saving.update_lock`)."""
        return update_lock(self.folder(location), on_wait)

    def open(self, location: str) -> OpenedStore:
        """The store saved in the folder, verified (manifest and checksums), with the manifest's ``info``."""
        store, manifest = LocalStore.load(self.folder(location))
        info = manifest.get("info")
        return OpenedStore(store, info if isinstance(info, dict) else {})

    def check_target(self, location: str, options: NewStoreOptions) -> None:
        """The folder must be new, empty or an index, and writable."""
        check_save_target(self.folder(location))

    def open_or_create(self, location: str, options: NewStoreOptions) -> OpenedStore:
        """The store saved in the folder, or a new one when the folder is new or empty."""
        folder = check_save_target(self.folder(location))
        if not (folder / MANIFEST).is_file():
            store = LocalStore(
                options.analyzer,
                vector_index=options.vector_index or "Flat",
                vector_search_params=options.vector_search_params,
                tenant_key=options.tenant_key,
            )
            return OpenedStore(store, created=True)
        opened = self.open(str(folder))
        assert isinstance(opened.store, LocalStore)
        kept = opened.store.vector_index
        if options.vector_index and options.vector_index != kept:
            raise FusionError(
                f"{folder} uses vector index {kept!r}, not {options.vector_index!r}: keep its own (open it without "
                "vector_index) or choose a new location"
            )
        check_tenant_key_kept(str(folder), opened.store, options)
        if options.analyzer is not None and options.analyzer != opened.store.settings.analyzer:
            raise FusionError(
                f"{folder} was built with another analyzer ({opened.store.settings.analyzer!r}): keep its own (open "
                "it without analyzer) or choose a new location"
            )
        return opened

    def save(self, location: str, store: FusionStore, info: Mapping[str, Any]) -> str:
        """Save the folder atomically, the record in its manifest."""
        if not isinstance(store, LocalStore):
            raise FusionError(
                f"{type(store).__name__} keeps its rows on its engine; a folder holds the in-process store"
            )
        return str(store.save(self.folder(location), {"info": dict(info)}))

    def describe(self, location: str, store: FusionStore) -> dict[str, Any]:
        """The folder and its manifest."""
        manifest = json.loads((self.folder(location) / MANIFEST).read_text(encoding="utf-8"))
        return {"store": self.name, "location": str(location), "manifest": manifest}

    def default_llm_cache(self, location: str) -> Path:
        """``NAME.llm-cache`` beside the folder."""
        folder = self.folder(location).absolute()
        return folder.parent / f"{folder.name}{LLM_CACHE_SUFFIX}"
