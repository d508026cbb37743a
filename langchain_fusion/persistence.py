"""Saving and loading a FusionIndex as a folder: no pickle, checksummed, written atomically.

Layout of a saved index::

    manifest.json     format and library version, embeddings id and dimension, FAISS
                      factory, analyzer and BM25 parameters, counts, sha256 of every file
    documents.jsonl   one JSON object per row: {"id", "page_content", "metadata"}
    vectors.faiss     the FAISS index (FAISS's binary format); absent for an empty index
    bm25/             BM25 token arrays (.npy), vocabulary (JSON) and bm25s weights (.npy/JSON)

Saving writes a sibling temporary folder and renames it into place, so a crash never leaves
a half-written index under the target name. Loading verifies every checksum and count
before it trusts any file, and fails with :class:`IndexFormatError` on any mismatch.

A hierarchical index (:class:`~langchain_fusion.hierarchical.HierarchicalIndex`) is a folder
holding two saved indexes and a manifest of its own, saved and verified the same way::

    manifest.json     format (langchain-fusion-hierarchical-index) and version, library
                      version, counts, and the sha256 of each part's manifest
    chunks/           the chunk index (a saved FusionIndex, as above)
    summaries/        the page and section summaries (a saved FusionIndex, as above)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion.analyzer import Analyzer
from langchain_fusion.bm25 import BM25Index, BM25Params
from langchain_fusion.embeddings import embeddings_from_id, embeddings_id
from langchain_fusion.errors import EmbeddingsMismatchError, FusionError, IndexFormatError
from langchain_fusion.vector import VectorIndex

if TYPE_CHECKING:
    from langchain_fusion.hierarchical import HierarchicalIndex
    from langchain_fusion.index import FusionIndex

FORMAT_NAME = "langchain-fusion-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DOCUMENTS = "documents.jsonl"
VECTORS = "vectors.faiss"
BM25_DIR = "bm25"

HIERARCHICAL_FORMAT_NAME = "langchain-fusion-hierarchical-index"
HIERARCHICAL_FORMAT_VERSION = 1
CHUNKS_DIR = "chunks"
SUMMARIES_DIR = "summaries"


def library_version() -> str:
    """The installed langchain-fusion version (``0+unknown`` when run from a bare checkout)."""
    try:
        return importlib_metadata.version("langchain-fusion")
    except importlib_metadata.PackageNotFoundError:
        return "0+unknown"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def save_index(index: FusionIndex, folder: Path) -> Path:
    """Write ``index`` to ``folder`` atomically and return the folder's path.

    An existing folder is replaced only if it is a saved index itself; anything else there
    is never overwritten.
    """
    return _save_atomically(folder, lambda staging: _write_contents(index, staging))


def _save_atomically(folder: Path, write: Callable[[Path], None]) -> Path:
    """Run ``write`` on a sibling staging folder, then rename it into place as ``folder``."""
    folder = check_save_target(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.saving-", dir=folder.parent))
    try:
        staging.chmod(_default_folder_mode())  # mkdtemp makes it private; an index is not a secret
        write(staging)
        _fsync_tree(staging)
        _swap_into_place(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def _default_folder_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def check_save_target(folder: Path) -> Path:
    """Raise FusionError if saving to ``folder`` would overwrite something that is not an index."""
    folder = folder.expanduser().absolute()
    if folder.exists() and (not folder.is_dir() or (not (folder / MANIFEST).is_file() and any(folder.iterdir()))):
        raise FusionError(
            f"{folder} exists and is not a langchain-fusion index; refusing to overwrite it. "
            "Choose a new folder or remove it first."
        )
    return folder


def _swap_into_place(staging: Path, folder: Path) -> None:
    if not folder.exists():
        staging.rename(folder)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    retired.rmdir()
    folder.rename(retired)
    try:
        staging.rename(folder)
    except BaseException:
        retired.rename(folder)  # put the previous index back
        raise
    shutil.rmtree(retired, ignore_errors=True)


def _write_contents(index: FusionIndex, folder: Path) -> None:
    with (folder / DOCUMENTS).open("w", encoding="utf-8") as handle:
        for doc in index.documents:
            record = {"id": doc.id, "page_content": doc.page_content, "metadata": doc.metadata}
            try:
                line = json.dumps(record, ensure_ascii=False)
            except TypeError as exc:
                raise FusionError(
                    f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc}); "
                    "convert it to strings, numbers, lists or dicts before indexing"
                ) from None
            handle.write(line + "\n")
    if index.vectors is not None:
        index.vectors.save(folder / VECTORS)
    index.bm25.save(folder / BM25_DIR)
    files = {
        path.relative_to(folder).as_posix(): {"sha256": _sha256(path), "bytes": path.stat().st_size}
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_version": library_version(),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "embeddings": {"id": index.embeddings_id, "dimension": index.dimension},
        "vector_index": {
            "factory": index.vector_factory,
            "search_params": index.vector_search_params,
            "metric": "inner_product",
            "normalized": True,
        },
        "bm25": {"analyzer": index.bm25.analyzer.model_dump(), "params": index.bm25.params.model_dump()},
        "text_fields": {"embed": list(index.embed_fields), "bm25": list(index.bm25_fields)},
        "counts": {
            "documents": len(index),
            "vectors": 0 if index.vectors is None else len(index.vectors),
            "bm25_rows": len(index.bm25),
            "vocabulary": index.bm25.vocabulary_size,
        },
        "files": files,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _load_manifest(folder: Path) -> Any:
    """The parsed ``manifest.json`` of ``folder`` (any JSON value), or IndexFormatError if there is none."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise IndexFormatError(f"{folder} is not a folder; give the folder an index was saved to")
    if not path.is_file():
        raise IndexFormatError(f"{folder} is not a langchain-fusion index: {MANIFEST} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"{path} is not valid JSON ({exc}); the index is damaged, rebuild it") from None


def _check_format_version(folder: Path, manifest: dict[str, Any], expected: int, kind: str) -> None:
    version = manifest.get("format_version")
    if version != expected:
        raise IndexFormatError(
            f"{folder} uses {kind} format version {version!r}; this langchain-fusion "
            f"({library_version()}) reads version {expected}. Rebuild the index with this version."
        )


def _check_counts(folder: Path, expected: dict[str, Any], actual: dict[str, int]) -> None:
    for name, value in actual.items():
        if expected.get(name) != value:
            raise IndexFormatError(
                f"{folder}: {value} {name} found but the manifest says {expected.get(name)}; rebuild the index"
            )


def _check_checksum(path: Path, sha256: Any) -> None:
    if _sha256(path) != sha256:
        raise IndexFormatError(f"{path} does not match its checksum: the file is altered; rebuild the index")


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise IndexFormatError(f"{path} is missing; the index is incomplete, rebuild it")


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a saved index, checked for format and version."""
    path = folder / MANIFEST
    manifest = _load_manifest(folder)
    if isinstance(manifest, dict) and manifest.get("format") == HIERARCHICAL_FORMAT_NAME:
        raise IndexFormatError(
            f"{folder} is a hierarchical index (page summaries and chunks): load it with "
            f"HierarchicalIndex.load, or its {CHUNKS_DIR}/ folder with FusionIndex.load"
        )
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{path} is not a langchain-fusion manifest")
    _check_format_version(folder, manifest, FORMAT_VERSION, "index")
    return manifest


def _verify_files(folder: Path, manifest: dict[str, Any]) -> None:
    files = manifest.get("files")
    if not isinstance(files, dict) or DOCUMENTS not in files:
        raise IndexFormatError(f"{folder / MANIFEST} has no valid file list; the index is damaged, rebuild it")
    for name, expected in files.items():
        path = folder / name
        _require_file(path)
        size = path.stat().st_size
        if size != expected.get("bytes"):
            raise IndexFormatError(
                f"{path} has {size} bytes, the manifest says {expected.get('bytes')}: "
                "the file is truncated or altered; rebuild the index"
            )
        _check_checksum(path, expected.get("sha256"))


def _read_documents(path: Path) -> list[Document]:
    documents = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = json.loads(line)
                documents.append(
                    Document(id=record["id"], page_content=record["page_content"], metadata=record["metadata"])
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise IndexFormatError(f"{path}, line {number}: not a valid document record ({exc})") from None
    return documents


def load_index(folder: Path, embeddings: Embeddings | None = None) -> FusionIndex:
    """Load and verify a saved index; see :meth:`FusionIndex.load`."""
    from langchain_fusion.index import DEFAULT_TEXT_FIELDS, FusionIndex, check_text_fields

    folder = folder.expanduser()
    manifest = read_manifest(folder)
    _verify_files(folder, manifest)
    try:
        expected_id = manifest["embeddings"]["id"]
        dimension = manifest["embeddings"]["dimension"]
        vector_conf = manifest["vector_index"]
        analyzer = Analyzer.model_validate(manifest["bm25"]["analyzer"])
        params = BM25Params.model_validate(manifest["bm25"]["params"])
        counts = manifest["counts"]
        # Absent in indexes saved before contextual enrichment existed: they indexed page_content,
        # which is what the default gives for documents without a context.
        fields = manifest.get("text_fields", {})
        embed_fields = check_text_fields(fields.get("embed", DEFAULT_TEXT_FIELDS), "text_fields.embed")
        bm25_fields = check_text_fields(fields.get("bm25", DEFAULT_TEXT_FIELDS), "text_fields.bm25")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise IndexFormatError(f"{folder / MANIFEST} is incomplete or invalid ({exc}); rebuild the index") from None

    if embeddings is None:
        embeddings = embeddings_from_id(expected_id)
    given_id = embeddings_id(embeddings)
    if given_id != expected_id:
        raise EmbeddingsMismatchError(
            f"{folder} was built with embeddings {expected_id!r} but was given {given_id!r}; "
            "query an index with the model that built it (or rebuild the index)"
        )

    if dimension is not None:
        given_dimension = len(embeddings.embed_query("langchain-fusion dimension check"))
        if given_dimension != dimension:
            raise EmbeddingsMismatchError(
                f"{folder} holds {dimension}-dimensional vectors but the given embeddings make "
                f"{given_dimension}-dimensional ones; use the model that built the index"
            )

    index = FusionIndex(
        embeddings,
        analyzer=analyzer,
        bm25_params=params,
        vector_index=vector_conf["factory"],
        vector_search_params=vector_conf.get("search_params"),
        embed_fields=embed_fields,
        bm25_fields=bm25_fields,
    )
    documents = _read_documents(folder / DOCUMENTS)
    vectors = None
    try:
        if (folder / VECTORS).is_file():
            vectors = VectorIndex.load(
                folder / VECTORS, dimension, vector_conf["factory"], vector_conf.get("search_params")
            )
        bm25 = BM25Index.load(folder / BM25_DIR, analyzer, params)
    except (RuntimeError, ValueError, OSError, FusionError) as exc:
        raise IndexFormatError(f"{folder}: cannot read the index files ({exc}); rebuild the index") from None
    actual = {"documents": len(documents), "vectors": 0 if vectors is None else len(vectors), "bm25_rows": len(bm25)}
    _check_counts(folder, counts, actual)
    index.restore(documents, vectors, bm25)
    return index


# --- hierarchical indexes: two saved indexes under one manifest -------------------------------


def index_kind(folder: Path) -> Literal["index", "hierarchical"]:
    """Whether ``folder`` holds a saved FusionIndex or a hierarchical index (IndexFormatError if neither)."""
    try:
        read_manifest(folder.expanduser())
    except IndexFormatError:
        if _read_hierarchical_manifest(folder.expanduser(), strict=False) is not None:
            return "hierarchical"
        raise
    return "index"


def save_hierarchical(index: HierarchicalIndex, folder: Path) -> Path:
    """Write a hierarchical index to ``folder`` atomically: both parts, then the manifest."""

    def write(staging: Path) -> None:
        _write_part(index.chunks, staging / CHUNKS_DIR)
        _write_part(index.summaries, staging / SUMMARIES_DIR)
        manifest = {
            "format": HIERARCHICAL_FORMAT_NAME,
            "format_version": HIERARCHICAL_FORMAT_VERSION,
            "library_version": library_version(),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "embeddings": {"id": index.chunks.embeddings_id, "dimension": index.chunks.dimension},
            "counts": {"chunks": len(index.chunks), "summaries": len(index.summaries)},
            "parts": {
                name: {"folder": name, "manifest_sha256": _sha256(staging / name / MANIFEST)}
                for name in (CHUNKS_DIR, SUMMARIES_DIR)
            },
        }
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        (staging / MANIFEST).write_text(text, encoding="utf-8")

    return _save_atomically(folder, write)


def _write_part(index: FusionIndex, folder: Path) -> None:
    folder.mkdir()
    _write_contents(index, folder)


def _read_hierarchical_manifest(folder: Path, *, strict: bool = True) -> dict[str, Any] | None:
    path = folder / MANIFEST
    manifest = _load_manifest(folder)
    if not isinstance(manifest, dict) or manifest.get("format") != HIERARCHICAL_FORMAT_NAME:
        if not strict:
            return None
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME:
            raise IndexFormatError(
                f"{folder} is a plain index without page summaries: rebuild it with summaries "
                "(langchain-fusion index --summaries, or HierarchicalIndex.build)"
            )
        raise IndexFormatError(f"{path} is not a langchain-fusion manifest")
    _check_format_version(folder, manifest, HIERARCHICAL_FORMAT_VERSION, "hierarchical index")
    return manifest


def load_hierarchical(folder: Path, embeddings: Embeddings | None = None) -> HierarchicalIndex:
    """Load and verify a hierarchical index; see :meth:`HierarchicalIndex.load`."""
    from langchain_fusion.hierarchical import HierarchicalIndex

    folder = folder.expanduser()
    manifest = _read_hierarchical_manifest(folder)
    assert manifest is not None
    try:
        parts = {name: manifest["parts"][name] for name in (CHUNKS_DIR, SUMMARIES_DIR)}
        expected = {name: (part["folder"], part["manifest_sha256"]) for name, part in parts.items()}
        counts = manifest["counts"]
    except (KeyError, TypeError) as exc:
        raise IndexFormatError(f"{folder / MANIFEST} is incomplete or invalid ({exc}); rebuild the index") from None
    for name, (sub, checksum) in expected.items():
        if sub != name:
            raise IndexFormatError(f"{folder / MANIFEST} names an unexpected folder {sub!r} for the {name}")
        path = folder / sub / MANIFEST
        _require_file(path)
        _check_checksum(path, checksum)
    chunks = load_index(folder / CHUNKS_DIR, embeddings)
    summaries = load_index(folder / SUMMARIES_DIR, chunks.embeddings)
    _check_counts(folder, counts, {"chunks": len(chunks), "summaries": len(summaries)})
    return HierarchicalIndex(chunks, summaries)
