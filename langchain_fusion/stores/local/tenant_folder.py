"""The folder of a tenant-keyed in-process store: one index folder per tenant under a manifest of its own.

::

    manifest.json     format (langchain-fusion-tenant-index) and version, library version, the
                      tenant key, the shared settings, each tenant's folder, document count and
                      the sha256 of its manifest, and the index's ``info``
    tenants/000000/   the first tenant's rows: an index folder of the usual format
    tenants/000001/   ...

The whole folder is written into a staging folder and put in place at once (see
:mod:`~langchain_fusion.stores.local.saving`), so a crash never leaves a mix of tenants' states.
Reading checks each tenant's manifest against its recorded checksum, then each folder as any index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from langchain_fusion._checks import describe_validation
from langchain_fusion._version import library_version
from langchain_fusion.errors import IndexFormatError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local import folder as fmt
from langchain_fusion.stores.local.checksums import check_checksum, sha256_file
from langchain_fusion.stores.local.manifest import check_format, now_iso, read_manifest, write_manifest
from langchain_fusion.stores.local.snapshot import Snapshot
from langchain_fusion.stores.local.snapshot_folder import BASE_ANALYZER, read_folder, saved_analyzer, write_snapshot
from langchain_fusion.stores.settings import StoreSettings

FORMAT_NAME = "langchain-fusion-tenant-index"
"""The ``format`` of a tenant-keyed folder's manifest."""
FORMAT_VERSION = 1
"""The version of that format this library writes and reads."""
TENANTS_DIR = "tenants"
"""Where the tenants' folders are."""


@dataclass(frozen=True)
class TenantFolder:
    """What a tenant-keyed folder holds: its key, shared settings, vector index and each tenant's snapshot."""

    tenant_key: str
    """The metadata key that holds each document's tenant."""
    settings: StoreSettings
    """The settings every tenant shares."""
    vector_index: str
    """The FAISS factory string."""
    vector_search_params: str | None
    """The FAISS search parameters."""
    snapshots: dict[str, Snapshot]
    """Each tenant's rows (tenants without rows are left out)."""


def writer(saved: TenantFolder, extra: dict[str, Any]) -> Callable[[Path], None]:
    """What writes ``saved`` into a staging folder (``extra`` in its manifest)."""

    def write(staging: Path) -> None:
        (staging / TENANTS_DIR).mkdir()
        listed = []
        for number, (tenant, snapshot) in enumerate(sorted(saved.snapshots.items())):
            sub = f"{TENANTS_DIR}/{number:06d}"
            (staging / sub).mkdir()
            write_snapshot(snapshot, staging / sub, {})
            listed.append(
                {
                    "tenant": tenant,
                    "folder": sub,
                    "documents": snapshot.live_count,
                    "manifest_sha256": sha256_file(staging / sub / fmt.MANIFEST),
                }
            )
        settings = saved.settings
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "library_version": library_version(),
            "created_at": now_iso(),
            "tenant_key": saved.tenant_key,
            "settings": settings.model_dump(mode="json"),
            "analyzer_class": f"{type(settings.analyzer).__module__}.{type(settings.analyzer).__qualname__}",
            "vector_index": {"factory": saved.vector_index, "search_params": saved.vector_search_params},
            "tenants": listed,
            **extra,
        }
        write_manifest(staging, manifest)

    return write


def read(folder: Path, manifest: Any, analyzer: Analyzer | None) -> TenantFolder:
    """What the tenant-keyed folder holds (its manifest read already), every part checked."""
    manifest = check_format(folder, manifest, FORMAT_NAME, FORMAT_VERSION, "tenant-keyed index")
    try:
        saved = dict(manifest["settings"])
        built_with = saved_analyzer(folder, manifest.get("analyzer_class", BASE_ANALYZER), saved["analyzer"], analyzer)
        settings = StoreSettings.model_validate({**saved, "analyzer": built_with})
        tenant_key = manifest["tenant_key"]
        listed = list(manifest["tenants"])
        vector = manifest["vector_index"]
        factory, params = str(vector["factory"]), vector["search_params"]
        entries = [(str(e["tenant"]), str(e["folder"]), int(e["documents"]), str(e["manifest_sha256"])) for e in listed]
    except ValidationError as exc:
        raise IndexFormatError(
            f"{folder / fmt.MANIFEST}: {describe_validation('settings', exc)}; rebuild the index"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(f"{folder / fmt.MANIFEST} is incomplete or invalid ({exc}); rebuild the index") from None
    if settings.tenant_key != tenant_key or not isinstance(tenant_key, str):
        raise IndexFormatError(f"{folder / fmt.MANIFEST}: its tenant key and settings disagree; rebuild the index")
    snapshots: dict[str, Snapshot] = {}
    for tenant, sub, documents, checksum in entries:
        if not sub.startswith(f"{TENANTS_DIR}/") or "/" in sub[len(TENANTS_DIR) + 1 :] or tenant in snapshots:
            raise IndexFormatError(f"{folder / fmt.MANIFEST} names an unexpected folder {sub!r}; rebuild the index")
        path = folder / sub
        fmt.require_file(path / fmt.MANIFEST)
        check_checksum(path / fmt.MANIFEST, checksum)
        part, _ = read_folder(path, read_manifest(path), settings.analyzer)
        if part.live_count != documents:
            raise IndexFormatError(
                f"{path}: {part.live_count} documents found but the manifest says {documents}; rebuild it"
            )
        snapshots[tenant] = replace(part, settings=settings.model_copy(update={"dimension": part.settings.dimension}))
    return TenantFolder(tenant_key, settings, factory, params if isinstance(params, str) else None, snapshots)
