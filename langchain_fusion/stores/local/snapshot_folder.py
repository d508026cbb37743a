"""The folder of one snapshot: the format an in-process store (or one tenant of it) is saved in.

::

    manifest.json            format, versions, model, vector index, BM25 analyzer and parameters,
                             text fields, counts, and every file's size and sha256
    documents/               ids, texts and metadata, each a file of records and an offsets array
    vectors.npy              the normalised vectors (float32), row-aligned with the documents
    vectors.ann              the approximate index, when the store has one
    bm25/                    the vocabulary and the postings (indptr, rows, tf) and row lengths

:func:`write_snapshot` writes one; :func:`read_folder` reads one back, checking the manifest, the
file list and every checksum (the files are hashed while they are read).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from langchain_fusion._checks import describe_validation
from langchain_fusion._version import library_version
from langchain_fusion.errors import FusionError, IndexFormatError
from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, check_text_fields, indexed_text
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local import folder as fmt
from langchain_fusion.stores.local.checksums import PendingChecksums, check_file_list, file_entries
from langchain_fusion.stores.local.documents import DocumentBlock
from langchain_fusion.stores.local.ids import PackedIds
from langchain_fusion.stores.local.manifest import check_format, now_iso, write_manifest
from langchain_fusion.stores.local.mapped import MappedFiles
from langchain_fusion.stores.local.mutations import ann_min_rows, compacted, maintained
from langchain_fusion.stores.local.packed import RawRows
from langchain_fusion.stores.local.postings import Postings
from langchain_fusion.stores.local.snapshot import Segment, Snapshot, empty_snapshot
from langchain_fusion.stores.local.tokens import tokenize
from langchain_fusion.stores.local.vectors import AnnIndex, check_vector_index
from langchain_fusion.stores.settings import MAX_DIMENSION, BM25Params, StoreSettings

logger = logging.getLogger(__name__)

FORMAT_NAME = "langchain-fusion-index"
FORMAT_VERSION = 3
OLDER_VERSIONS = (2,)
"""Format versions this library still reads (the next save writes :data:`FORMAT_VERSION`)."""
DOCUMENTS_DIR = "documents"
IDS = f"{DOCUMENTS_DIR}/ids.json"
TEXTS = f"{DOCUMENTS_DIR}/texts.txt"
TEXT_OFFSETS = f"{DOCUMENTS_DIR}/text_offsets.npy"
METADATA = f"{DOCUMENTS_DIR}/metadata.jsonl"
METADATA_OFFSETS = f"{DOCUMENTS_DIR}/metadata_offsets.npy"
DOCUMENT_FILES = {IDS, TEXTS, TEXT_OFFSETS, METADATA, METADATA_OFFSETS}
DOCUMENTS_V2 = "documents.jsonl"
"""Format 2 kept every document as one JSON record in this file."""
VECTORS = "vectors.npy"
ANN = "vectors.ann"
BM25_DIR = "bm25"
VOCABULARY = f"{BM25_DIR}/vocabulary.json"
BM25_ARRAYS = {
    "indptr": (np.int64, 1),
    "rows": (np.int32, 1),
    "tf": ((np.uint16, np.int32), 1),
    "lengths": (np.int32, 1),
}
BM25_FILES = {VOCABULARY} | {f"{BM25_DIR}/{name}.npy" for name in BM25_ARRAYS}
REQUIRED_FILES = DOCUMENT_FILES | BM25_FILES
"""Files every saved store has (``vectors.npy`` too once it holds rows)."""
_FILES = REQUIRED_FILES | {VECTORS, ANN}
_FILES_V2 = {DOCUMENTS_V2, VECTORS, ANN} | BM25_FILES


def write_snapshot(snapshot: Snapshot, folder: Path, extra: dict[str, Any]) -> None:
    """Write the live rows of ``snapshot`` into ``folder`` in the format above (refuses misaligned parts)."""
    snapshot.check_aligned()
    compact = compacted(snapshot)
    segment = compact.segments[0] if compact.segments else None
    write_documents(folder, segment.documents if segment is not None else DocumentBlock.empty())
    dimension = compact.settings.dimension
    if segment is not None:
        fmt.save_array(folder / VECTORS, segment.vectors)
        ann = segment.ann
        if ann is None and compact.vector_index != "Flat" and segment.size >= ann_min_rows(compact.vector_index):
            ann = AnnIndex.build(
                np.ascontiguousarray(segment.vectors), compact.vector_index, compact.vector_search_params
            )
        if ann is not None:
            ann.save(folder / ANN)
        postings = segment.postings
    else:
        postings = Postings(
            indptr=np.zeros(len(compact.vocabulary) + 1, np.int64),
            rows=np.zeros(0, np.int32),
            tf=np.zeros(0, np.uint16),
        )
    (folder / BM25_DIR).mkdir()
    vocabulary = sorted(compact.vocabulary, key=compact.vocabulary.__getitem__)
    (folder / VOCABULARY).write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    arrays: dict[str, NDArray[Any]] = {
        "indptr": postings.indptr,
        "rows": postings.rows,
        "tf": postings.tf.astype(np.uint16) if postings.tf.dtype == np.uint8 else postings.tf,  # the format's types
        "lengths": compact.lengths,
    }
    for name, array in arrays.items():
        fmt.save_array(folder / BM25_DIR / f"{name}.npy", array)
    settings = compact.settings
    analyzer = settings.analyzer
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_version": library_version(),
        "created_at": now_iso(),
        "embeddings": {"id": settings.embeddings_id, "dimension": dimension},
        "vector_index": {
            "factory": compact.vector_index,
            "search_params": compact.vector_search_params,
            "metric": "inner_product",
            "normalized": True,
        },
        "bm25": {
            "analyzer": analyzer.model_dump(mode="json"),
            "analyzer_class": f"{type(analyzer).__module__}.{type(analyzer).__qualname__}",
            "params": settings.bm25_params.model_dump(mode="json"),
        },
        "text_fields": {"embed": list(settings.embed_fields), "bm25": list(settings.bm25_fields)},
        "counts": {
            "documents": compact.size,
            "vectors": 0 if segment is None else segment.size,
            "bm25_rows": int(compact.lengths.size),
            "vocabulary": len(vocabulary),
        },
        **extra,
        "files": file_entries(folder),
    }
    write_manifest(folder, manifest)


def write_documents(folder: Path, block: DocumentBlock) -> None:
    """The documents of one block, as the ``documents/`` files of format 3."""
    (folder / DOCUMENTS_DIR).mkdir()
    (folder / IDS).write_text(json.dumps(list(block.ids), ensure_ascii=False), encoding="utf-8")
    fmt.save_pieces(folder / TEXTS, block.texts.pieces())
    fmt.save_array(folder / TEXT_OFFSETS, block.texts.offsets)
    fmt.save_pieces(folder / METADATA, block.metadata_rows.pieces())
    fmt.save_array(folder / METADATA_OFFSETS, block.metadata_rows.offsets)


def read_documents(folder: Path, paths: dict[str, Path], files: MappedFiles) -> tuple[DocumentBlock, list[str]]:
    """The documents of a saved folder and their ids (format 3's files read or mapped, or format 2's records parsed)."""
    if DOCUMENTS_V2 in paths:
        records = fmt.read_documents(paths[DOCUMENTS_V2])
        return DocumentBlock.from_documents(records), [doc.id or "" for doc in records]
    ids = _read_ids(paths[IDS])
    parts: list[NDArray[Any]] = []
    for data_name, offsets_name in ((TEXTS, TEXT_OFFSETS), (METADATA, METADATA_OFFSETS)):
        data = files.data(paths[data_name])
        offsets = files.array(paths[offsets_name], np.int64, 1)
        if (
            offsets.size != len(ids) + 1
            or offsets[0] != 0
            or offsets[-1] != data.size
            or (offsets.size > 1 and bool(np.any(np.diff(offsets) < 0)))
        ):
            raise IndexFormatError(
                f"{folder}: {offsets_name} does not describe {len(ids)} rows of {data_name}; rebuild the index"
            )
        parts += [data, offsets]
    texts, text_offsets, metadata, metadata_offsets = parts
    return DocumentBlock(PackedIds.of(ids), RawRows(texts, text_offsets), RawRows(metadata, metadata_offsets)), ids


def _read_ids(path: Path) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise IndexFormatError(f"{path} is not valid JSON ({type(exc).__name__}); rebuild the index") from None
    if not isinstance(ids, list) or not set(map(type, ids)) <= {str} or "" in ids:
        raise IndexFormatError(f"{path} is not a list of document ids; rebuild the index")
    return ids


def _parse_manifest(
    folder: Path, manifest: dict[str, Any], analyzer: Analyzer | None
) -> tuple[StoreSettings, dict[str, Any], dict[str, Any]]:
    try:
        embeddings = manifest["embeddings"]
        vector_conf = manifest["vector_index"]
        bm25 = manifest["bm25"]
        counts = manifest["counts"]
        if not isinstance(vector_conf, dict) or not isinstance(vector_conf.get("factory"), str):
            raise TypeError("vector_index.factory must be a string")
        if not isinstance(vector_conf.get("search_params"), (str, type(None))):
            raise TypeError("vector_index.search_params must be a string or null")
        if not isinstance(counts, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in counts.values()
        ):
            raise TypeError("counts must be whole numbers from 0 to 2**63 - 1")
        dimension = embeddings["dimension"]
        if dimension is not None and (
            not isinstance(dimension, int) or isinstance(dimension, bool) or not 1 <= dimension <= MAX_DIMENSION
        ):
            raise TypeError(f"embeddings.dimension must be a whole number from 1 to {MAX_DIMENSION}")
        if not isinstance(embeddings["id"], (str, type(None))):
            raise TypeError("embeddings.id must be a string")
        fields = manifest.get("text_fields", {})
        if not isinstance(fields, dict):
            raise TypeError("text_fields must be an object")
        saved_class = bm25.get("analyzer_class", BASE_ANALYZER)
        analyzer = saved_analyzer(folder, saved_class, bm25["analyzer"], analyzer)
        settings = StoreSettings(
            embeddings_id=embeddings["id"],
            dimension=dimension,
            analyzer=analyzer,
            bm25_params=BM25Params.model_validate(bm25["params"]),
            embed_fields=check_text_fields(fields.get("embed", DEFAULT_TEXT_FIELDS), "text_fields.embed"),
            bm25_fields=check_text_fields(fields.get("bm25", DEFAULT_TEXT_FIELDS), "text_fields.bm25"),
        )
        check_vector_index(vector_conf["factory"], vector_conf.get("search_params"))
    except (KeyError, TypeError, ValueError, AttributeError, ValidationError, FusionError) as exc:
        if isinstance(exc, IndexFormatError):
            raise
        reason = (
            describe_validation("manifest", exc) if isinstance(exc, ValidationError) else " ".join(str(exc).split())
        )
        raise IndexFormatError(
            f"{folder / fmt.MANIFEST} is incomplete or invalid ({reason}); rebuild the index"
        ) from None
    return settings, vector_conf, counts


BASE_ANALYZER = f"{Analyzer.__module__}.{Analyzer.__qualname__}"
"""The class name a manifest records for the default analyzer."""


def saved_analyzer(folder: Path, saved_class: Any, config: Any, given: Analyzer | None) -> Analyzer:
    """The analyzer a saved folder was built with: its saved configuration, or ``given`` when that is the same.

    A configuration saved before an option existed reads as it was built (:meth:`Analyzer.from_saved`);
    a custom analyzer class must be given.
    """
    base = BASE_ANALYZER
    config = Analyzer.from_saved(config)  # an index saved before an option existed keeps how it was built
    if given is None:
        if saved_class != base:
            raise IndexFormatError(
                f"{folder} was built with the custom analyzer {saved_class}; pass an instance of it to "
                "load, e.g. FusionIndex.load(folder, analyzer=MyAnalyzer())"
            )
        return Analyzer.model_validate(config)
    given_class = f"{type(given).__module__}.{type(given).__qualname__}"
    if given_class != saved_class or given.model_dump(mode="json") != config:
        raise IndexFormatError(
            f"{folder} was built with analyzer {saved_class} {config}; the given analyzer is {given_class} "
            f"{given.model_dump(mode='json')}. Load it with the analyzer that built it."
        )
    return given


def read_snapshot(
    folder: Path,
    paths: dict[str, Path],
    settings: StoreSettings,
    vector_conf: dict[str, Any],
    counts: dict[str, Any],
    verified: Callable[[], None] = lambda: None,
) -> Snapshot:
    """The snapshot saved in ``folder``, checked for consistency.

    ``verified`` returns once the files' checksums are verified (raising if one is not): the
    FAISS graph is read only after it, as FAISS does not check what it parses. Small files are
    read into memory, large ones mapped (see :mod:`~langchain_fusion.stores.local.mapped`).
    """
    files = MappedFiles(folder)
    documents, ids = read_documents(folder, paths, files)
    factory, search_params = vector_conf["factory"], vector_conf.get("search_params")
    vocabulary_list = _read_vocabulary(folder / VOCABULARY)
    arrays = {}
    for name, (dtype, ndim) in BM25_ARRAYS.items():
        path = folder / BM25_DIR / f"{name}.npy"
        fmt.require_file(path)
        arrays[name] = files.array(path, dtype, ndim)
    vectors = None
    if VECTORS in paths:
        vectors = files.array(paths[VECTORS], np.float32, 2)
    actual = {
        "documents": len(documents),
        "vectors": 0 if vectors is None else int(vectors.shape[0]),
        "bm25_rows": int(arrays["lengths"].size),
        "vocabulary": len(vocabulary_list),
    }
    for name, value in actual.items():
        if counts.get(name) != value:
            raise IndexFormatError(
                f"{folder}: {value} {name} found but the manifest says {counts.get(name)}; rebuild the index"
            )
    n, vocabulary_size = len(documents), len(vocabulary_list)
    indptr, rows, tf, lengths = arrays["indptr"], arrays["rows"], arrays["tf"], arrays["lengths"]
    problems = []
    if vectors is not None and (settings.dimension is None or vectors.shape[1] != settings.dimension):
        problems.append(f"vectors have {vectors.shape[1]} dimensions, the manifest says {settings.dimension}")
    if n and vectors is None:
        problems.append("documents without vectors")
    elif vectors is not None and not _all_finite(vectors):
        problems.append("vectors hold values that are not finite (NaN or infinity)")
    if indptr.size != vocabulary_size + 1 or (indptr.size and (indptr[0] != 0 or np.any(np.diff(indptr) < 0))):
        problems.append("BM25 term pointers do not match the vocabulary")
    elif indptr[-1] != rows.size or rows.size != tf.size:
        problems.append("BM25 postings are truncated")
    elif rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n or int(tf.min()) < 1):
        problems.append("BM25 postings point outside the rows")
    if lengths.size != n or (n and int(lengths.min()) < 0):
        problems.append("BM25 row lengths do not match the documents")
    if _repeats(ids):
        problems.append("document ids repeat")
    if problems:
        raise IndexFormatError(f"{folder}: the index files disagree ({'; '.join(problems)}); rebuild the index")
    if rows.size and not _lengths_agree(rows, tf, lengths):
        raise IndexFormatError(f"{folder}: BM25 row lengths disagree with the postings; rebuild the index")
    postings = Postings(indptr=np.asarray(indptr), rows=rows, tf=tf)
    vocabulary = {t: i for i, t in enumerate(vocabulary_list)}  # built once: the check and the snapshot share it
    mismatch = _postings_mismatch(documents, vocabulary, vocabulary_list, postings, lengths, settings)
    if mismatch:
        raise IndexFormatError(f"{folder}: the BM25 index does not match the documents ({mismatch}); rebuild the index")
    snapshot = replace(empty_snapshot(settings, factory, search_params), mapped=files if len(files) else None)
    if not n:
        return replace(snapshot, vocabulary=vocabulary, document_frequency=np.zeros(vocabulary_size, np.int64))
    assert vectors is not None
    ann = None
    if ANN in paths:
        verified()
        try:
            ann = AnnIndex.load(paths[ANN], vectors, factory, search_params)
        except (RuntimeError, FusionError) as exc:
            raise IndexFormatError(f"{folder}: cannot read {ANN} ({exc}); rebuild the index") from None
        if len(ann) != n:
            raise IndexFormatError(f"{folder}: {ANN} holds {len(ann)} vectors for {n} documents; rebuild the index")
        shared = ann.shared_vectors
        if shared is not None:  # the graph's storage holds the vectors now: drop the memory map
            vectors = shared
    segment = Segment(start=0, vectors=vectors, postings=postings, documents=documents, ann=ann)
    loaded = replace(
        snapshot,
        vocabulary=vocabulary,
        segments=(segment,),
        lengths=np.asarray(lengths),
        document_frequency=np.diff(np.asarray(indptr)).astype(np.int64),
        live_length=int(np.asarray(lengths).sum()),
    )
    if ann is None and factory != "Flat" and n >= ann_min_rows(factory):
        logger.info("building the %s index of %s (%d rows): it was not saved", factory, folder, n)
    return maintained(loaded)


def _repeats(ids: Sequence[str]) -> bool:
    """Whether an id occurs twice: sorted string hashes first (fast), then the strings of any equal hashes."""
    hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
    hashes.sort()
    if not bool(np.any(hashes[1:] == hashes[:-1])):
        return False
    return len(set(ids)) != len(ids)


def _lengths_agree(rows: NDArray[np.int32], tf: NDArray[np.integer], lengths: NDArray[np.int32]) -> bool:
    """Whether each row's length is the sum of its term frequencies (in blocks: no full-size temporary).

    Blocks of 2**20 postings keep each block's temporaries in cache: about twice as fast as 2**22.
    """
    totals = np.zeros(lengths.size, dtype=np.float64)
    block = 1 << 20
    for lo in range(0, rows.size, block):
        totals += np.bincount(rows[lo : lo + block], weights=tf[lo : lo + block], minlength=lengths.size)
    return bool(np.array_equal(totals, lengths))


def _all_finite(vectors: NDArray[np.float32], block: int = 65_536) -> bool:
    """Whether every value is finite, checked a block of rows at a time (no full-size temporary)."""
    return all(bool(np.isfinite(vectors[i : i + block]).all()) for i in range(0, vectors.shape[0], block))


SPOT_CHECK_ROWS = 64
"""Rows whose text is analysed again at load and compared with the saved BM25 postings."""


def _postings_mismatch(
    documents: DocumentBlock,
    term_of: dict[str, int],
    vocabulary: list[str],
    postings: Postings,
    lengths: NDArray[np.int32],
    settings: StoreSettings,
) -> str | None:
    """What disagrees between a spread sample of rows' texts and the postings (``term_of``: term -> id), or None.

    The checksums only prove the files are the ones the manifest lists; this catches files that
    are consistent with each other but not with the documents (a replaced or reordered
    vocabulary, postings of another corpus, an analyzer that no longer gives a row's tokens), at
    the cost of analysing a few dozen texts.
    """
    n = len(documents)
    if not n:
        return None
    indptr, rows, tf = postings.indptr, postings.rows, postings.tf
    for row in sorted({int(r) for r in np.linspace(0, n - 1, min(n, SPOT_CHECK_ROWS))}):
        counts: dict[int, int] = {}
        for token in tokenize(settings.analyzer, indexed_text(documents.document(row), settings.bm25_fields)):
            term = term_of.get(token)
            if term is None:
                return f"row {row} has the token {token!r}, which the vocabulary lacks"
            counts[term] = counts.get(term, 0) + 1
        if sum(counts.values()) != int(lengths[row]):  # fewer tokens now: an analyzer edited to drop some
            return f"row {row} has {sum(counts.values())} tokens, the BM25 index {int(lengths[row])}"
        for term, count in counts.items():
            start, end = int(indptr[term]), int(indptr[term + 1])
            at = start + int(np.searchsorted(rows[start:end], row))  # a term's rows ascend
            if at >= end or int(rows[at]) != row or int(tf[at]) != count:
                return f"row {row}: the postings of {vocabulary[term]!r} do not list it {count} time(s)"
    return None


def _read_vocabulary(path: Path) -> list[str]:
    fmt.require_file(path)
    try:
        vocabulary = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise IndexFormatError(f"{path} is not valid JSON ({type(exc).__name__}); rebuild the index") from None
    if not isinstance(vocabulary, list) or not all(isinstance(t, str) for t in vocabulary):
        raise IndexFormatError(f"{path} is not a list of tokens; rebuild the index")
    if len(set(vocabulary)) != len(vocabulary):
        raise IndexFormatError(f"{path} repeats tokens; rebuild the index")
    return vocabulary


def read_folder(folder: Path, manifest: Any, analyzer: Analyzer | None) -> tuple[Snapshot, dict[str, Any]]:
    """The snapshot saved in ``folder`` (its manifest already read) and the checked manifest."""
    manifest = check_format(folder, manifest, FORMAT_NAME, FORMAT_VERSION, "index", OLDER_VERSIONS)
    version = manifest["format_version"]
    paths = check_file_list(folder, manifest, (_FILES if version == FORMAT_VERSION else _FILES_V2).__contains__)
    required = REQUIRED_FILES if version == FORMAT_VERSION else BM25_FILES | {DOCUMENTS_V2}
    missing = sorted(required - set(paths))
    if missing:
        raise IndexFormatError(f"{folder / fmt.MANIFEST} does not list {missing}; the index is damaged")
    settings, vector_conf, counts = _parse_manifest(folder, manifest, analyzer)
    # The files are hashed while they are read and checked (see PendingChecksums): an altered file is
    # reported as such even when reading it failed first.
    checksums = PendingChecksums(paths, manifest).start()
    try:
        snapshot = read_snapshot(folder, paths, settings, vector_conf, counts, verified=checksums.wait)
    except Exception:
        checksums.wait()
        raise
    except BaseException:  # Ctrl-C: stop now, not after hashing every file
        checksums.cancel()
        raise
    checksums.wait()
    return snapshot, manifest
