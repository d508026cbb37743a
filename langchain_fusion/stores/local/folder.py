"""The in-process store as a folder: its layout, and the files of documents and arrays in it.

Layout of a saved store (format version 3)::

    manifest.json       format and library version, embeddings id and dimension, vector index
                        settings, analyzer (class and configuration) and BM25 parameters, text
                        fields, counts, the size and sha256 of every other file, and last
                        ``body_sha256``: the sha256 of all that (so an edited setting is refused)
    documents/ids.json  the document ids, one per row, in row order
    documents/texts.txt the rows' page_content, UTF-8, concatenated
    documents/text_offsets.npy      where each row's text starts (and the last one ends), int64
    documents/metadata.jsonl        one compact JSON object per row and line
    documents/metadata_offsets.npy  where each row's line starts, int64
    vectors.npy         the unit vectors, float32, one row per document
    vectors.ann         the approximate FAISS index, when one is configured (FAISS's format)
    bm25/vocabulary.json  the BM25 tokens; position = term id
    bm25/indptr.npy, bm25/rows.npy, bm25/tf.npy, bm25/lengths.npy
                        term postings (CSC: rows of each term and its frequency) and row lengths

Loading reads small files into memory and memory-maps large ones, watching them for changes (see
:mod:`~langchain_fusion.stores.local.mapped`): replace a served folder by saving, never by copying files
over it.

Version 2 kept the documents as one ``documents.jsonl`` of ``{"id", "page_content",
"metadata"}`` records; it is still read (and written as version 3 by the next save).

The folder's other parts each have a module: the manifest, its format check and the version of
the library (:mod:`~langchain_fusion.stores.local.manifest`); the record of every file's size and
sha256, checked on load (:mod:`~langchain_fusion.stores.local.checksums`); and the crash-safe,
atomic replacement of the folder with its locks (:mod:`~langchain_fusion.stores.local.saving`). A
saved folder is data to be read by this library only: do not load folders from untrusted sources
(they are checked, but not designed as a security boundary).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError, IndexFormatError

MANIFEST = "manifest.json"
"""The manifest's file name in a saved folder."""
HIERARCHICAL_FORMAT_NAME = "langchain-fusion-hierarchical-index"
"""The format name of a folder holding two saved stores (chunks and summaries) under one manifest."""
MAX_MANIFEST_BYTES = 16 << 20
"""The largest manifest this library reads (none it writes comes near)."""


def require_file(path: Path) -> None:
    """IndexFormatError unless ``path`` is a file."""
    if not path.is_file():
        raise IndexFormatError(f"{path} is missing; the index is incomplete, rebuild it")


# --- documents and arrays ----------------------------------------------------------------------


def write_documents(path: Path, documents: Iterator[Document] | Any) -> int:
    """Write documents as JSON lines; returns how many. Unserialisable metadata is a FusionError."""
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for doc in documents:
            record = {"id": doc.id, "page_content": doc.page_content, "metadata": doc.metadata}
            try:
                line = json.dumps(record, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise FusionError(
                    f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc}); "
                    "convert it to strings, numbers, lists or dicts before indexing"
                ) from None
            handle.write(line + "\n")
            count += 1
    return count


def read_documents(path: Path) -> list[Document]:
    """Documents written by :func:`write_documents`; IndexFormatError on a bad record."""
    documents = []
    try:
        # Split on "\n" only: JSON text may hold other line separators (U+2028) inside strings.
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{path} is not UTF-8 text ({exc.reason}); rebuild the index") from None
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("expected an object with a string id")
            documents.append(
                Document(id=record["id"], page_content=record["page_content"], metadata=record["metadata"])
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError) as exc:
            raise IndexFormatError(f"{path}, line {number}: not a valid document record ({exc})") from None
    return documents


def save_pieces(path: Path, pieces: Iterable[bytes]) -> None:
    """Write bytes handed over in bounded pieces as one plain file."""
    with path.open("wb") as handle:
        for piece in pieces:
            handle.write(piece)


def save_array(path: Path, array: NDArray[Any]) -> None:
    """Write one array as ``.npy`` (never with pickled objects)."""
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def load_array(path: Path, dtype: Any, ndim: int) -> NDArray[Any]:
    """Read an ``.npy`` array into memory, checking dtype and rank (see :func:`check_array`)."""
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise IndexFormatError(f"{path}: not a readable array ({exc}); rebuild the index") from None
    check_array(path, array.dtype, array.ndim, dtype, ndim)
    return np.asarray(array)


def check_array(path: Path, found: np.dtype[Any], found_ndim: int, dtype: Any, ndim: int) -> None:
    """IndexFormatError unless an array of ``found`` values and rank ``found_ndim`` is of ``dtype`` and ``ndim``.

    ``dtype`` is one dtype or a tuple of the allowed ones.
    """
    if found not in (np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))):
        raise IndexFormatError(f"{path} holds {found} values, expected {dtype}; the index is damaged")
    if found_ndim != ndim:
        raise IndexFormatError(f"{path} has {found_ndim} dimensions, expected {ndim}; the index is damaged")
