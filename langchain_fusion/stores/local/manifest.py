"""The manifest of a saved folder: its format and versions, its own checksum, and the checks on reading it.

``manifest.json`` records the format and library version, the embeddings id and dimension, the
vector index settings, the analyzer and BM25 parameters, the text fields, the counts, the size and
sha256 of every other file (:mod:`~langchain_fusion.stores.local.checksums`), and last
``body_sha256``: the sha256 of all that, so an edited setting is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain_fusion._version import library_version
from langchain_fusion.errors import IndexFormatError
from langchain_fusion.stores.local.folder import MANIFEST, MAX_MANIFEST_BYTES
from langchain_fusion.stores.local.saving import STAGING_MARK, recover

CHECKSUM = "body_sha256"
"""The manifest field holding the sha256 of the manifest's other fields (see :func:`manifest_checksum`)."""

CHECKSUM_SINCE = (0, 3)
"""The first release (0.3.0) whose every save carries :data:`CHECKSUM`: a manifest written by it or later must have one.

The checksum came within index format 3 (hierarchical format 2), during 0.2.0's development, so no format
version marks it; the ``library_version`` every manifest records does. Without this, deleting the line made
an edited manifest read as an older save.
"""


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (for ``created_at``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """Hex sha256 of the manifest's fields but :data:`CHECKSUM`, as canonical JSON (sorted keys, no spaces, ASCII)."""
    body = {key: value for key, value in manifest.items() if key != CHECKSUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")).hexdigest()


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` (indented, UTF-8), its own checksum (:data:`CHECKSUM`) last."""
    # Checksum what a reader will parse (tuples become lists, keys strings), not the Python objects given.
    body = json.loads(json.dumps({key: value for key, value in manifest.items() if key != CHECKSUM}))
    text = json.dumps({**body, CHECKSUM: manifest_checksum(body)}, indent=2, ensure_ascii=False) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def saved_index_reason(folder: Path) -> str | None:
    """Why ``folder`` is not a folder of documents: it holds a saved index (or a save's leftovers); else None.

    For indexing folders: an index saved inside the folder it indexes must not index itself.
    """
    if folder.name.startswith(".") and STAGING_MARK in folder.name:
        return "a langchain-fusion save in progress or left over (not indexed)"
    path = folder / MANIFEST
    if not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = manifest.get("format") if isinstance(manifest, dict) else None
    if isinstance(name, str) and name.startswith("langchain-fusion"):
        return "a saved langchain-fusion index (not indexed)"
    return None


def read_manifest(folder: Path) -> Any:
    """The parsed ``manifest.json`` of ``folder`` (any JSON value), or IndexFormatError if there is none.

    Puts back an index a crashed save left aside first (see :func:`recover`); do not call it
    while holding :func:`~langchain_fusion.stores.local.saving.load_lock` on the same folder.
    """
    recover(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise IndexFormatError(f"{folder} is not a folder; give the folder an index was saved to")
    if not path.is_file():
        raise IndexFormatError(f"{folder} is not a langchain-fusion index: {MANIFEST} is missing")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise IndexFormatError(f"{path} is larger than any manifest this library writes; the index is damaged")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, or an integer of 4,300+ digits
        if isinstance(exc, RecursionError):
            reason = "nested too deeply"
        elif isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            reason = str(exc)
        else:
            reason = "a number too long to read"
        raise IndexFormatError(f"{path} is not valid JSON ({reason}); the index is damaged, rebuild it") from None


def check_format(
    folder: Path, manifest: Any, name: str, version: int, kind: str, older: Collection[int] = ()
) -> dict[str, Any]:
    """``manifest`` if it is a dict of format ``name`` and ``version`` matching its checksum; else IndexFormatError.

    ``older`` lists the earlier versions the caller still reads. A manifest saved before manifests
    had a checksum (no :data:`CHECKSUM` field, written by a release before :data:`CHECKSUM_SINCE`) is
    read as it is; any other manifest without one is refused.
    """
    if not isinstance(manifest, dict) or manifest.get("format") != name:
        raise IndexFormatError(f"{folder / MANIFEST} is not a langchain-fusion {kind} manifest")
    found: Any = manifest.get("format_version")
    whole = isinstance(found, int) and not isinstance(found, bool)
    if whole and found > version:
        raise IndexFormatError(
            f"{folder} uses {kind} format version {found}, newer than this langchain-fusion "
            f"({library_version()}) reads (version {version}): upgrade langchain-fusion to load it"
        )
    if not whole or (found != version and found not in older):
        raise IndexFormatError(
            f"{folder} uses {kind} format version {found!r}; this langchain-fusion ({library_version()}) "
            f"reads version {version}. Rebuild the index with this version."
        )
    if CHECKSUM not in manifest and not _saved_before_checksums(manifest.get("library_version")):
        since = ".".join(map(str, CHECKSUM_SINCE)) + ".0"
        raise IndexFormatError(
            f"{folder / MANIFEST} has no {CHECKSUM}, which every save since langchain-fusion {since} carries: it was "
            "removed, and an edited setting would silently change the results: restore the saved manifest, or rebuild "
            "the index (re-index its files)"
        )
    if CHECKSUM in manifest and manifest[CHECKSUM] != manifest_checksum(manifest):
        raise IndexFormatError(
            f"{folder / MANIFEST} was edited after it was saved (its {CHECKSUM} does not match its contents), and "
            "an edited setting would silently change the results: restore the saved manifest, or rebuild the index "
            "(re-index its files)"
        )
    return manifest


def _saved_before_checksums(version: Any) -> bool:
    """Whether ``version`` (a manifest's ``library_version``) is a release before :data:`CHECKSUM_SINCE`.

    Only a plain ``MAJOR.MINOR.PATCH`` below it is: a missing, edited or unreadable version proves nothing.
    """
    if not isinstance(version, str) or not re.fullmatch(r"\d{1,6}\.\d{1,6}\.\d{1,6}", version):
        return False
    major, minor, _ = (int(part) for part in version.split("."))
    return (major, minor) < CHECKSUM_SINCE
