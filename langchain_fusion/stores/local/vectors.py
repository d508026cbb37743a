"""The in-process vector side: exact scans of unit vectors, and optional FAISS ANN candidates."""

from __future__ import annotations

import functools
import queue
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss as _faiss
import numpy as np
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError
from langchain_fusion.threads import LazyPool, usable_cores

# faiss's bundled type stubs miss much of its API (SearchParametersHNSW, DirectMap, get_xb...).
faiss: Any = _faiss

FloatMatrix = NDArray[np.float32]


def normalize_rows(vectors: object, dimension: int) -> FloatMatrix:
    """Return a float32 copy of ``vectors`` (n x dimension) with every row L2-normalised.

    Rows of norm zero stay zero (they match nothing), instead of becoming NaN. Anything but a
    matrix of real numbers (ragged rows, strings, complex numbers, None) is a FusionError.
    """
    try:
        raw = np.asarray(vectors)
    except ValueError:  # numpy refuses ragged nesting
        raise FusionError("the embedding model returned vectors of different lengths") from None
    if raw.dtype.kind not in "iuf":
        found = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes"}.get(raw.dtype.kind)
        what = found or f"{type(vectors).__name__} of {raw.dtype}"
        raise FusionError(f"the embedding model returned {what}, not vectors of real numbers")
    matrix = np.array(raw, dtype=np.float32, copy=True, ndmin=2)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise FusionError(
            f"expected embeddings of dimension {dimension}; got an array of shape {matrix.shape}. "
            "Every text must be embedded by the same model that built the index."
        )
    if not np.all(np.isfinite(matrix)):
        raise FusionError("the embedding model returned NaN or infinite values")
    faiss.normalize_L2(matrix)
    return matrix


EF_SEARCH_SMALL = 128
"""efSearch of an HNSW graph of fewer than :data:`EF_SEARCH_LARGE_ROWS` rows (unless ``search_params`` set it)."""
EF_SEARCH_LARGE = 256
"""efSearch of a larger graph: recall falls as a graph grows (see the README's recall/latency table)."""
EF_SEARCH_LARGE_ROWS = 500_000
"""Graph size from which :data:`EF_SEARCH_LARGE` applies."""

EF_CONSTRUCTION = 128
"""efConstruction of a new HNSW graph unless ``search_params`` set it (FAISS's own default is 40).

The breadth of the search that links each new vector into the graph. At 40, a 1M-row graph of
the benchmark corpus finds only 0.86 of the exact top-100 even at efSearch 512, however long it
searches; at 80, 0.97; at 120, 0.98 already at efSearch 128, for about 2.7x the build time of 40.
"""

_MAX_BUILD_BREADTH = 100_000
"""Largest efConstruction accepted (FAISS stores it in a C int; beyond a few thousand it only slows the build)."""

_BUILD_PARAMETERS = ("efConstruction",)
"""Parameters of ``search_params`` applied when a graph is built rather than by FAISS's ParameterSpace."""

K_FACTOR_COMPRESSED = 10
"""Candidates per wanted row that an index of compressed codes (PQ, SQ, RaBitQ...) proposes unless ``k_factor`` says.

Its codes only approximate the vectors, so its own top-k misses true neighbours that its top
``k_factor * k`` holds; those candidates are rescored exactly from the stored vectors anyway.
"""

_MAX_K_FACTOR = 1_000
"""Largest ``k_factor`` accepted."""

_OWN_PARAMETERS = (*_BUILD_PARAMETERS, "k_factor")
"""Parameters of ``search_params`` this module applies itself; the rest go to FAISS's ParameterSpace."""


EF_SEARCH_NARROW_SMALL = 256
"""efSearch of a small graph built narrower than :data:`EF_CONSTRUCTION` (e.g. saved by an earlier version at 40)."""
EF_SEARCH_NARROW_LARGE = 1024
"""efSearch of a large graph built narrower than :data:`EF_CONSTRUCTION` (0.956 agreement at 1M, built at 40)."""


def default_ef_search(rows: int, ef_construction: int = EF_CONSTRUCTION) -> int:
    """The efSearch an HNSW graph of ``rows`` rows, built at ``ef_construction``, searches with unless told otherwise.

    Chosen on the benchmark corpus (``benchmarks/scale.py``) with graphs built at
    :data:`EF_CONSTRUCTION`, so that the fused top-10 agrees with the exact one at least 0.99 at
    every size measured (``docs/benchmarks.md``), leaving room for harder data. A narrower
    graph needs a wider search: it gets the defaults graphs had when they were built at 40.
    """
    large = rows >= EF_SEARCH_LARGE_ROWS
    if ef_construction < EF_CONSTRUCTION:
        return EF_SEARCH_NARROW_LARGE if large else EF_SEARCH_NARROW_SMALL
    return EF_SEARCH_LARGE if large else EF_SEARCH_SMALL


class AnnIndex:
    """An approximate FAISS index over one immutable block of unit vectors.

    Built from a factory string (``"HNSW32"``, ``"IVF1024,Flat"``...) with inner product as
    the metric; ``search_params`` (a FAISS ParameterSpace string such as ``"efSearch=128"`` or
    ``"nprobe=16"``) tunes its recall, and for a graph ``"efConstruction=N"`` the breadth it is
    built with (:data:`EF_CONSTRUCTION` unless set). It only proposes candidates: exact scores
    always come from the stored vectors.

    A graph index over full vectors (``HNSW32``, i.e. FAISS's ``IndexHNSWFlat``) keeps the
    vectors in its own storage: :attr:`shared_vectors` exposes them as a NumPy view, so the
    segment keeps one copy, and :meth:`save` writes the graph alone (the vectors are in
    ``vectors.npy`` already).
    """

    def __init__(self, index: Any, factory: str, search_params: str | None, storage: Any = None) -> None:
        """Wrap an already-built FAISS ``index`` (see :meth:`build` and :meth:`load`).

        ``storage`` is a flat index attached to a graph read without its vectors; it is kept
        here so that it lives as long as the graph that points at it.
        """
        self._index = index
        self._storage = storage
        self.factory = factory
        self.search_params = search_params
        if isinstance(index, faiss.IndexHNSW):
            # search_params may override it
            index.hnsw.efSearch = default_ef_search(int(index.ntotal), int(index.hnsw.efConstruction))
        _apply_search_params(index, factory, search_params)
        default = 1 if _holds_full_vectors(index) else K_FACTOR_COMPRESSED
        self.k_factor = _own_parameters(factory, search_params).get("k_factor", default)
        """Candidates proposed per wanted row (``k_factor`` of ``search_params``; see :data:`K_FACTOR_COMPRESSED`)."""

    @classmethod
    def build(cls, vectors: FloatMatrix, factory: str, search_params: str | None) -> AnnIndex:
        """Train (if needed) and fill a new index with ``vectors``."""
        index = new_faiss_index(vectors.shape[1], factory)
        if isinstance(index, faiss.IndexHNSW):
            index.hnsw.efConstruction = _build_parameters(factory, search_params).get("efConstruction", EF_CONSTRUCTION)
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
        return cls(index, factory, search_params)

    @property
    def shared_vectors(self) -> FloatMatrix | None:
        """The indexed vectors as a read-only view of the index's own storage, where it holds them in full."""
        storage = _flat_storage(self._index)
        if storage is None or storage.ntotal == 0:
            return None
        view = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d).reshape(storage.ntotal, storage.d)
        view.flags.writeable = False
        return view  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        """Memory held by the index, vectors it holds in full included (measured by writing it to a buffer once)."""
        shared = self.shared_vectors
        flags = faiss.IO_FLAG_SKIP_STORAGE if shared is not None else 0
        writer = faiss.VectorIOWriter()
        faiss.write_index(self._index, writer, flags)
        return int(writer.data.size()) + (0 if shared is None else shared.nbytes)

    def search(
        self, query: FloatMatrix, k: int, allowed: NDArray[np.bool_] | None
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Candidates for the ``k`` best rows among ``allowed`` ones (all if None), best first by the index's scores.

        Up to :attr:`k_factor` ``* k`` of them: the caller rescores them exactly. None at all if
        the index cannot apply a filter (FAISS refuses a selector for e.g. ``PQ16`` or
        ``PQ32x4fs``): the caller then scans the allowed rows exactly.
        """
        k = min(k * self.k_factor, len(self) if allowed is None else int(np.count_nonzero(allowed)))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        params = None
        if allowed is not None:
            bits = np.packbits(allowed, bitorder="little")
            selector = faiss.IDSelectorBitmap(allowed.size, faiss.swig_ptr(bits))
            params = self._params_with_selector(selector, k)
            params._bits = bits  # keep the bitmap alive as long as the params
        try:
            scores, rows = self._index.search(query, k, params=params)
        except RuntimeError:
            if params is None:
                raise
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        keep = rows[0] >= 0
        return rows[0][keep].astype(np.int64), scores[0][keep]

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
        """Write the FAISS index to ``path`` (FAISS's own binary format; no pickle).

        A graph over full vectors is written without them (they are saved beside it).
        """
        flags = faiss.IO_FLAG_SKIP_STORAGE if _flat_storage(self._index) is not None else 0
        faiss.write_index(self._index, str(path), flags)

    @classmethod
    def load(cls, path: Path, vectors: FloatMatrix, factory: str, search_params: str | None) -> AnnIndex:
        """Read an index written by :meth:`save` over ``vectors`` (a graph gets them as its storage, copied once)."""
        index = faiss.read_index(str(path), faiss.IO_FLAG_SKIP_STORAGE)
        dimension = int(vectors.shape[1])
        if index.d != dimension:
            raise FusionError(f"vector index has dimension {index.d}; manifest says {dimension}")
        storage = None
        if isinstance(index, faiss.IndexHNSW) and index.storage is None:
            storage = faiss.IndexFlatIP(dimension)
            for lo in range(0, vectors.shape[0], 1 << 16):  # from a memory map, a block at a time
                storage.add(np.ascontiguousarray(vectors[lo : lo + (1 << 16)]))
            index.storage = storage
            index.own_fields = False
        return cls(index, factory, search_params, storage)


def _holds_full_vectors(index: Any) -> bool:
    """Whether ``index`` scores candidates with the full float32 vectors (a graph over them, IVF,Flat)."""
    exact_kinds = (faiss.IndexIVFFlat, faiss.IndexFlat)
    return _flat_storage(index) is not None or isinstance(faiss.downcast_index(index), exact_kinds)


def _flat_storage(index: Any) -> Any:
    """The flat float32 storage of a graph index (HNSW over full vectors), or None for any other kind."""
    if not isinstance(index, faiss.IndexHNSW) or index.storage is None:
        return None
    storage = faiss.downcast_index(index.storage)
    return storage if isinstance(storage, faiss.IndexFlat) and storage.code_size == 4 * storage.d else None


def faiss_reason(exc: RuntimeError) -> str:
    """The reason in a FAISS error, without its C++ function signature and source location."""
    last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^Error in .*? at \S+:\d+: (Error: )?", "", last)


def new_faiss_index(dimension: int, factory: str) -> Any:
    """An empty inner-product FAISS index from a factory string, or a FusionError that says why not."""
    try:
        return faiss.index_factory(dimension, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise FusionError(
            f"FAISS could not build an index from factory string {factory!r}: "
            f"{faiss_reason(exc)}. Use 'Flat' (exact), or e.g. 'HNSW32' or 'IVF256,Flat'."
        ) from None


def _apply_search_params(index: Any, factory: str, search_params: str | None) -> None:
    build = _build_parameters(factory, search_params)
    _own_parameters(factory, search_params)  # checks k_factor
    if build and not isinstance(index, faiss.IndexHNSW):
        raise FusionError(
            f"invalid FAISS search parameters {search_params!r} for {factory!r}: "
            f"{', '.join(build)} applies only to an index that is an HNSW graph at the top level "
            "(e.g. 'HNSW32' or 'HNSW32,SQ8')"
        )
    searching = ",".join(p for p in _parameters(search_params) if p.partition("=")[0].strip() not in _OWN_PARAMETERS)
    if searching:
        try:
            faiss.ParameterSpace().set_index_parameters(index, searching)
        except RuntimeError as exc:
            raise FusionError(
                f"invalid FAISS search parameters {search_params!r} for {factory!r}: {faiss_reason(exc)}"
            ) from None


def _parameters(search_params: str | None) -> list[str]:
    return [p for p in (search_params or "").split(",") if p.strip()]


def _build_parameters(factory: str, search_params: str | None) -> dict[str, int]:
    """The graph-building entries of ``search_params`` (``efConstruction=N``), checked."""
    return {name: value for name, value in _own_parameters(factory, search_params).items() if name in _BUILD_PARAMETERS}


def _own_parameters(factory: str, search_params: str | None) -> dict[str, int]:
    """The entries of ``search_params`` this module applies itself (``efConstruction``, ``k_factor``), checked."""
    found: dict[str, int] = {}
    for entry in _parameters(search_params):
        name, _, value = (part.strip() for part in entry.partition("="))
        if name in _OWN_PARAMETERS:
            largest = _MAX_BUILD_BREADTH if name in _BUILD_PARAMETERS else _MAX_K_FACTOR
            if not (value.isascii() and value.isdecimal() and 1 <= int(value) <= largest):
                raise FusionError(
                    f"invalid FAISS search parameters {search_params!r} for {factory!r}: "
                    f"{name} must be a whole number from 1 to {largest}; got {value!r}"
                )
            found[name] = int(value)
    return found


_CHECK_DIMENSION = 3840
"""Dimension a factory string is checked with before the embedding's is known: a multiple of every
usual number of PQ sub-quantizers (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384...)."""


@functools.lru_cache(maxsize=64)
def check_vector_index(factory: str, search_params: str | None) -> int:
    """Validate a factory string and search parameters now; returns the rows it needs to train."""
    index = new_faiss_index(_CHECK_DIMENSION, factory)
    _apply_search_params(index, factory, search_params)
    try:
        return max(int(faiss.extract_index_ivf(index).nlist), 1)
    except RuntimeError:
        return 1


_PARALLEL_MIN_ROWS = 32_768
"""Below this many rows a scan is too short to gain from a second thread."""

_SCAN_WORKERS = min(usable_cores(), 4)
"""Threads a large scan is split over (read once: counting cores is not free)."""

_scan_pool = LazyPool(_SCAN_WORKERS - 1, "langchain-fusion-scan")


def inner_products(matrix: FloatMatrix, vector: NDArray[np.float32]) -> NDArray[np.float32]:
    """``matrix @ vector`` with FAISS's SIMD kernel, split over threads for large matrices.

    A flat scan is bound by memory bandwidth. BLAS's own threads busy-wait for each other and
    stall for milliseconds when another process holds a core, so the scan uses FAISS's
    single-threaded kernel (which releases the GIL) on contiguous row blocks instead. The
    blocks are small (:data:`_SCAN_BLOCK_BYTES`) and each thread takes the next one left: a
    thread slowed by other work on its core (the BM25 side of the same query, another query)
    scans fewer of them instead of holding up the rest.
    """
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

    if rows < _PARALLEL_MIN_ROWS or _SCAN_WORKERS < 2:
        scan(0, rows)
        return out
    block_rows = max(_SCAN_BLOCK_BYTES // (dimension * matrix.itemsize), 1)
    in_blocks(rows, block_rows, scan)
    return out


def in_blocks(rows: int, block_rows: int, work: Callable[[int, int], None]) -> None:
    """``work(start, stop)`` for each block of ``rows`` rows, on this thread and the scan pool's, each taking the next.

    A thread slowed by other work on its core does fewer blocks instead of holding up the rest.
    ``work`` must release the GIL for most of its time (FAISS and BLAS kernels do) to gain from this.
    """
    blocks: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for start in range(0, rows, block_rows):
        blocks.put((start, min(start + block_rows, rows)))

    def take_blocks() -> None:
        while True:
            try:
                start, stop = blocks.get_nowait()
            except queue.Empty:
                return
            work(start, stop)

    pool = _scan_pool.get() if _SCAN_WORKERS > 1 else None
    futures = [pool.submit(take_blocks) for _ in range(_SCAN_WORKERS - 1)] if pool is not None else []
    take_blocks()
    for future in futures:
        if not future.cancel():  # a helper that never started (its threads busy elsewhere) is not waited for
            future.result()


_SCAN_BLOCK_BYTES = 4 << 20
"""Bytes of the matrix in one block of a parallel scan (2,730 rows of 384 dimensions: 367 blocks for a million)."""


def exact_products(vectors: FloatMatrix, query: NDArray[np.floating]) -> NDArray[np.float64]:
    """Float64 inner products of each row of ``vectors`` with ``query``, summed row by row.

    Not a BLAS matrix-vector product: BLAS sums a row in an order that depends on how many rows
    it is given (1-3 rows differ from more in the last bit), and a row's score must not depend on
    which rows are scored with it.
    """
    widened = np.array(vectors, dtype=np.float64)  # a copy of our own, multiplied in place
    widened *= np.asarray(query, dtype=np.float64)
    return np.asarray(np.add.reduce(widened, axis=-1), dtype=np.float64)


def products_at(matrix: FloatMatrix, rows: NDArray[np.int64], vector: NDArray[np.float32]) -> ProductsAt:
    """``matrix[rows] @ vector`` in float32, with a bound on each product's rounding error.

    FAISS reads the rows in place (no copy of them is made) and releases the GIL. The bound
    holds for any order of summation: a float32 dot product of ``d`` terms is within
    ``gamma_d * |x| * |q|`` of the exact one (``gamma_d = d u / (1 - d u)``, ``u = 2^-24``). The
    row norms are computed alongside, widened for their own rounding and underflow; the bound is
    then doubled so that it also covers the float64 rescoring that follows, in any order of
    summation. ``rows`` must be rows of ``matrix`` (IndexError otherwise: FAISS does not check).
    """
    ids = np.ascontiguousarray(rows, dtype=np.int64)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= matrix.shape[0]):
        raise IndexError(f"rows outside the matrix's {matrix.shape[0]} rows")
    products = np.empty(ids.size, dtype=np.float32)
    squared_norms = np.empty(ids.size, dtype=np.float32)
    dimension = matrix.shape[1]
    query = np.ascontiguousarray(vector, dtype=np.float32)
    if ids.size and matrix.dtype == np.float32 and matrix.flags.c_contiguous:
        origin = np.zeros(dimension, dtype=np.float32)
        # FAISS runs these loops over OpenMP threads even for one query: the idle thread would then spin
        # for a while on the core the BM25 side needs. One thread for this call (a per-thread setting).
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            faiss.fvec_inner_products_by_idx(
                faiss.swig_ptr(products), faiss.swig_ptr(query), faiss.swig_ptr(matrix), faiss.swig_ptr(ids),
                dimension, 1, ids.size,
            )  # fmt: skip
            faiss.fvec_L2sqr_by_idx(
                faiss.swig_ptr(squared_norms), faiss.swig_ptr(origin), faiss.swig_ptr(matrix), faiss.swig_ptr(ids),
                dimension, 1, ids.size,
            )  # fmt: skip
        finally:
            faiss.omp_set_num_threads(threads)
    elif ids.size:
        picked = np.asarray(matrix[ids], dtype=np.float32)
        products[:] = picked @ query
        squared_norms[:] = np.einsum("ij,ij->i", picked, picked)
    return ProductsAt(products.astype(np.float64), product_error(squared_norms, query, dimension))


def product_error(squared_norms: Any, query: NDArray[np.float32], dimension: int) -> Any:
    """Bound on how far a float32 product of a row (float32 ``squared_norms``) with ``query`` is from its float64 one.

    Each of the two, summed in any order, is within half of it from the exact product (see
    :func:`products_at`). Takes an array of squared norms (one bound each) or one value (the bound
    of every row up to that norm).
    """
    unit = 2.0**-24 * dimension
    gamma = unit / (1 - unit)
    query_norm = float(np.linalg.norm(np.asarray(query, dtype=np.float64)))
    # Squares below float32's range are lost from a norm (at most 2^-149 each, as much again in rounding; 2^-126
    # where the CPU flushes subnormals to zero), and products in the subnormal range are exact only to 2^-149
    # (2^-126) each: both covered by absolute terms.
    norms = np.sqrt(np.asarray(squared_norms, dtype=np.float64) / (1 - gamma) + dimension * 2.0**-125)
    return 2 * gamma * norms * query_norm + dimension * 2.0**-126


@dataclass(frozen=True)
class ProductsAt:
    """Float32 inner products of some rows with a query, and a bound on how far each is from the exact one."""

    products: NDArray[np.float64]
    """The float32 products (widened)."""
    error: NDArray[np.float64]
    """For each, a bound on its distance from the exact inner product and from a float64 one (any summation order)."""

    def contenders(self, k: int) -> NDArray[np.int64]:
        """Positions of the rows that may be among the ``k`` largest float64 products (all if the bounds cannot tell).

        Each row's float64 product lies within ``products +- error``. A row whose largest possible
        product is below the ``k``-th largest smallest possible one is below at least ``k`` rows,
        ties included, so it is left out.
        """
        size = self.products.size
        if k <= 0 or size <= k or not (np.isfinite(self.products).all() and np.isfinite(self.error).all()):
            return np.arange(size, dtype=np.int64)
        lowest = self.products - self.error
        kth = np.partition(lowest, size - k)[size - k]
        return np.flatnonzero(self.products + self.error >= kth)
