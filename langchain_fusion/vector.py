"""The vector side: a FAISS inner-product index over L2-normalised vectors (cosine)."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import faiss as _faiss
import numpy as np
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError

# faiss's bundled type stubs miss much of its API (SearchParametersHNSW, DirectMap, get_xb...).
faiss: Any = _faiss

FloatMatrix = NDArray[np.float32]


def normalize_rows(vectors: object, dimension: int) -> FloatMatrix:
    """Return a float32 copy of ``vectors`` (n x dimension) with every row L2-normalised.

    Rows of norm zero stay zero (they match nothing), instead of becoming NaN.
    """
    matrix = np.array(vectors, dtype=np.float32, copy=True, ndmin=2)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise FusionError(
            f"expected embeddings of dimension {dimension}; got an array of shape {matrix.shape}. "
            "Every text must be embedded by the same model that built the index."
        )
    if not np.all(np.isfinite(matrix)):
        raise FusionError("the embedding model returned NaN or infinite values")
    faiss.normalize_L2(matrix)
    return matrix


class VectorIndex:
    """Rows 0..n-1 of unit vectors in a FAISS index built from a factory string.

    ``"Flat"`` (the default) is exact. Any other factory string (``"HNSW32"``,
    ``"IVF1024,Flat"``...) gives an approximate index; ``search_params`` (a FAISS
    ParameterSpace string such as ``"efSearch=128"`` or ``"nprobe=16"``) tunes its recall.
    """

    def __init__(self, dimension: int, factory: str = "Flat", search_params: str | None = None) -> None:
        """Create an empty index of ``dimension``-dimensional vectors."""
        if dimension < 1:
            raise FusionError(f"embedding dimension must be positive; got {dimension}")
        self.dimension = dimension
        self.factory = factory
        self.search_params = search_params
        self._index = self._new_index()

    def _new_index(self) -> Any:
        try:
            index = faiss.index_factory(self.dimension, self.factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise FusionError(
                f"FAISS could not build an index from factory string {self.factory!r}: "
                f"{str(exc).strip().splitlines()[-1]}. Use 'Flat' (exact), or e.g. 'HNSW32' or 'IVF256,Flat'."
            ) from None
        self._apply_search_params(index)
        return index

    def _apply_search_params(self, index: Any) -> None:
        if self.search_params:
            try:
                faiss.ParameterSpace().set_index_parameters(index, self.search_params)
            except RuntimeError as exc:
                raise FusionError(
                    f"invalid FAISS search parameters {self.search_params!r} for {self.factory!r}: "
                    f"{str(exc).strip().splitlines()[-1]}"
                ) from None

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def is_exact(self) -> bool:
        """True when searches are exhaustive (a flat index)."""
        return isinstance(self._index, faiss.IndexFlat)

    def add(self, vectors: FloatMatrix) -> None:
        """Append normalised vectors as new rows (training the index first if it needs it)."""
        if vectors.shape[0] == 0:
            return
        if not self._index.is_trained:
            if vectors.shape[0] < _min_training_size(self._index):
                raise FusionError(
                    f"the FAISS index {self.factory!r} must be trained on at least "
                    f"{_min_training_size(self._index)} vectors; got {vectors.shape[0]}. "
                    "Use 'Flat' for small corpora."
                )
            self._index.train(vectors)
        self._index.add(vectors)
        _enable_reconstruction(self._index)

    def delete(self, rows: NDArray[np.int64]) -> None:
        """Remove rows; remaining rows keep their order and are renumbered 0..n-1."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return
        if self.is_exact:
            # A flat index compacts on removal, preserving order: row ids stay positions.
            self._index.remove_ids(faiss.IDSelectorBatch(rows))
            return
        keep = np.setdiff1d(np.arange(len(self), dtype=np.int64), rows)
        remaining = self.vectors(keep)
        self._index = self._new_index()
        self.add(remaining)

    def vectors(self, rows: NDArray[np.int64]) -> FloatMatrix:
        """The stored vectors of ``rows`` (exact for flat and HNSW-flat indexes)."""
        if self.is_exact:
            return np.asarray(self._flat_view()[rows])
        if rows.size == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.asarray(self._index.reconstruct_batch(np.asarray(rows, dtype=np.int64)))

    def _flat_view(self) -> FloatMatrix:
        """Zero-copy view of a flat index's vectors (valid until the next add or delete)."""
        n = len(self)
        if n == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        view = faiss.rev_swig_ptr(self._index.get_xb(), n * self.dimension)
        return np.asarray(view).reshape(n, self.dimension)

    def scores_all(self, query: FloatMatrix) -> NDArray[np.float32]:
        """Exact similarity of the query to every row."""
        if self.is_exact:
            return _inner_products(self._flat_view(), np.ascontiguousarray(query[0], dtype=np.float32))
        return np.asarray(self.vectors(np.arange(len(self), dtype=np.int64)) @ query[0], dtype=np.float32)

    def scores_for(self, query: FloatMatrix, rows: NDArray[np.int64]) -> NDArray[np.float32]:
        """Exact similarity of the query to the given rows."""
        return np.asarray(self.vectors(rows) @ query[0], dtype=np.float32)

    def search(
        self, query: FloatMatrix, k: int, allowed: NDArray[np.int64] | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """The (approximately, for non-flat indexes) ``k`` most similar rows and their scores.

        ``allowed`` restricts the search to those rows inside FAISS (an id selector), so a
        restriction never starves the result.
        """
        k = min(k, len(self) if allowed is None else int(allowed.size))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        params = None
        if allowed is not None:
            params = self._params_with_selector(faiss.IDSelectorBatch(allowed.astype(np.int64)), k)
        scores, rows = self._index.search(query, k, params=params)
        keep = rows[0] >= 0
        found, found_scores = rows[0][keep].astype(np.int64), scores[0][keep]
        if allowed is not None and found.size < k:
            # A graph index can miss allowed rows under a selector: score them all exactly.
            all_scores = self.scores_for(query, allowed)
            top = np.argsort(-all_scores, kind="stable")[:k]
            return allowed[top].astype(np.int64), all_scores[top]
        return found, found_scores

    def _params_with_selector(self, selector: Any, k: int) -> Any:
        # Explicit search parameters replace the index's own, so carry its tuning over.
        index = self._index
        if isinstance(index, faiss.IndexHNSW):
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(index.hnsw.efSearch, k)
        else:
            try:
                ivf = faiss.extract_index_ivf(index)
            except RuntimeError:
                params = faiss.SearchParameters()
            else:
                params = faiss.SearchParametersIVF()
                params.nprobe = ivf.nprobe
        params.sel = selector
        params._selector = selector  # keep the selector alive as long as the params
        return params

    def save(self, path: Path) -> None:
        """Write the FAISS index to ``path`` (FAISS's own binary format; no pickle)."""
        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path, dimension: int, factory: str, search_params: str | None) -> VectorIndex:
        """Read an index written by :meth:`save`."""
        index = cls.__new__(cls)
        index.dimension, index.factory, index.search_params = dimension, factory, search_params
        index._index = faiss.read_index(str(path))
        if index._index.d != dimension:
            raise FusionError(f"vector index has dimension {index._index.d}; manifest says {dimension}")
        index._apply_search_params(index._index)
        _enable_reconstruction(index._index)
        return index


_PARALLEL_MIN_ROWS = 32_768
"""Below this many rows a scan is too short to gain from a second thread."""

_scan_pool: ThreadPoolExecutor | None = None


def _inner_products(matrix: FloatMatrix, vector: NDArray[np.float32]) -> NDArray[np.float32]:
    """``matrix @ vector`` with FAISS's SIMD kernel, split over threads for large matrices.

    A flat scan is bound by memory bandwidth. BLAS's own threads busy-wait for each other and
    stall for milliseconds when another process holds a core, so the scan uses FAISS's
    single-threaded kernel (which releases the GIL) on contiguous row blocks instead.
    """
    global _scan_pool
    rows, dimension = matrix.shape
    out = np.empty(rows, dtype=np.float32)

    def scan(start: int, stop: int) -> None:
        if stop > start:
            faiss.fvec_inner_products_ny(
                faiss.swig_ptr(out[start:stop]),
                faiss.swig_ptr(vector),
                faiss.swig_ptr(matrix[start:stop]),
                dimension,
                stop - start,
            )

    workers = min(os.cpu_count() or 1, 4)
    if rows < _PARALLEL_MIN_ROWS or workers < 2:
        scan(0, rows)
        return out
    if _scan_pool is None:
        _scan_pool = ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="langchain-fusion-scan")
    blocks = list(itertools.pairwise(int(b) for b in np.linspace(0, rows, workers + 1)))
    futures = [_scan_pool.submit(scan, start, stop) for start, stop in blocks[1:]]
    scan(*blocks[0])
    for future in futures:
        future.result()
    return out


def _min_training_size(index: Any) -> int:
    try:
        return int(faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        return 1


def _enable_reconstruction(index: Any) -> None:
    """IVF indexes need a direct map to reconstruct vectors by row."""
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        return
    if ivf.direct_map.type == faiss.DirectMap.NoMap:
        ivf.make_direct_map()
