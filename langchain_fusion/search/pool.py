"""Scoring one query over a store view: single-side top-k and the fused top-k over a candidate pool.

The fused search builds a candidate pool from both sides (``fetch_k`` rows each, or every row
when ``fetch_k`` is None), then completes each candidate's score on the side that did not
return it by asking that side for the exact score of that row, before normalising and fusing.
Nothing is ever combined by list position, and the same code runs on every store.
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Callable, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.diversity import Picks
from langchain_fusion.search.duplicates import copies_entry, copies_of, duplicate_groups
from langchain_fusion.search.fusion import FusedPool, fuse_pool
from langchain_fusion.search.options import FusionOptions, PoolOptions
from langchain_fusion.stores.base import (
    BatchScorer,
    ConcurrentSides,
    ConcurrentWholeCorpus,
    FloatMatrix,
    JointCompletion,
    Keys,
    SideScorer,
    StoreView,
    TextReader,
    Where,
    WholeCorpusScorer,
)
from langchain_fusion.threads import LazyPool, usable_cores

BATCH_SCORES_BUDGET = 1 << 24
"""Scores per side held at once when many queries are scored together (64 MB of float32)."""


def queries_per_pass(rows: int) -> int:
    """How many queries to score together over ``rows`` rows within :data:`BATCH_SCORES_BUDGET`."""
    return max(1, BATCH_SCORES_BUDGET // max(1, rows))


@dataclass(frozen=True)
class Hit:
    """One ranked result: its key in the view and the score provenance retrievers put in metadata."""

    key: int
    """Key of the row in the view it was found in."""
    fused: float | None = None
    """Fused score (fused search only)."""
    vector_score: float | None = None
    """Raw cosine similarity, when the vector side was consulted."""
    vector_normalized: float | None = None
    """Normalised vector score (fused search only)."""
    vector_rank: int | None = None
    """1-based rank on the vector side among the candidates."""
    bm25_score: float | None = None
    """Raw BM25 score, when the BM25 side was consulted."""
    bm25_normalized: float | None = None
    """Normalised BM25 score (fused search only)."""
    bm25_rank: int | None = None
    """1-based rank on the BM25 side; None when no query term matched."""
    copies: tuple[int, ...] = ()
    """Keys of the other copies of its text among the candidates read, best first (see
    :mod:`~langchain_fusion.search.duplicates`)."""
    vector_dropped: str | None = None
    """Why the vector side had no weight in its fused score (see :attr:`QueryScorers.unread`); None: it had alpha."""


@dataclass(frozen=True)
class QueryScorers:
    """One query's two sides on one view; reuse it to fuse the same query under several settings."""

    vector: SideScorer
    """The vector side for the query's embedding."""
    bm25: SideScorer
    """The BM25 side for the query's text."""
    unread: str | None = None
    """Why the embedding model cannot read the query (see :mod:`~langchain_fusion.models.scripts`), or None when
    it reads it: its side then gets no weight in the fused scores (see :func:`~.fusion.fuse_pool`)."""

    def dropped(self, alpha: float) -> str | None:
        """Why the vector side has no weight in a fused search with ``alpha``: :attr:`unread` when 0 < alpha < 1."""
        return self.unread if 0 < alpha < 1 else None


@dataclass
class SearchTrace:
    """What one fused search saw on its way to the results: give one to :func:`fused_search` to have it filled.

    It is the search's own record, not a second computation: explaining a result
    (:mod:`~langchain_fusion.search.explain`) reads it.
    """

    pool: Keys = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The candidate pool's keys, ascending (empty when the view is)."""
    pool_size: int | None = None
    """Candidates taken from each side with a weight (the larger of ``fetch_k`` and ``k``); None: the whole corpus."""
    fused: FusedPool | None = None
    """The fused pool (scores aligned with :attr:`pool`)."""
    eligible: NDArray[np.bool_] | None = None
    """Candidates that clear the relevance floors (None: no floor applies)."""
    ranked: NDArray[np.int64] | None = None
    """Pool positions the selection read, best first; None when the results are the plain top ``k``."""
    copies: NDArray[np.int64] | None = None
    """For each of :attr:`ranked`, the index in it of the candidate it is a copy of (itself if none)."""
    picks: Picks | None = None
    """The selection's choice among :attr:`ranked` (positions in it) and what it passed over."""
    chosen: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Pool positions of the results, in result order."""


def query_scorers(view: StoreView, query: str, query_vector: FloatMatrix, unread: str | None = None) -> QueryScorers:
    """Both sides of ``view`` for one query (``unread``: see :class:`QueryScorers`)."""
    return QueryScorers(vector=view.vector(query_vector), bm25=view.bm25(query), unread=unread)


def batch_reach(searches: Sequence[PoolOptions]) -> tuple[int | None, Where | None]:
    """How deep each query's vector top-k goes in every one of ``searches``, and under which filter.

    The depth covers the largest candidate pool, the row :func:`tied_top` reads past it, and its
    second read when that row ties (twice as many); None when a search reads the whole corpus
    (``fetch_k=None``) or the searches filter differently (then a batch's vector pass keeps every
    row's score).
    """
    if not searches or any(options.fetch_k is None for options in searches):
        return None, None
    first = searches[0].filter
    if any(options.filter != first for options in searches[1:]):
        return None, None
    depth = 2 * (max(max(options.fetch_k or 0, options.k) for options in searches) + 1)
    return depth, None if first is None else Where(metadata=first)


def contender_scores(rows: int, depth: int | None) -> int:
    """Memory a query of a batch keeps before it runs, in float32 scores: its vector contenders over ``rows`` rows.

    A contender takes a row number and a score (12 bytes); a pass keeps up to four times the
    ``depth`` per query between its tightenings. Without a depth nothing is kept before the query runs.
    """
    return 1 if depth is None else 3 * min(rows, 4 * depth)


def vector_scorers(
    view: StoreView, query_vectors: FloatMatrix, depth: int | None = None, where: Where | None = None
) -> list[SideScorer]:
    """The vector side of ``view`` for each row of ``query_vectors``, equal to ``view.vector`` of each.

    A view with the :class:`~langchain_fusion.stores.base.BatchScorer` capability scores them all
    in one pass over its vectors (``depth``: the deepest top-k to be asked for under ``where``, which
    it may prepare instead of every row's score); others get one scorer per query.
    """
    if isinstance(view, BatchScorer):
        return list(view.vector_many(query_vectors, depth, where))
    return [view.vector(query_vectors[i : i + 1]) for i in range(query_vectors.shape[0])]


def bm25_scorers(view: StoreView, queries: Sequence[str]) -> list[SideScorer]:
    """The BM25 side of ``view`` for each query, in one pass over the postings where the view can."""
    if isinstance(view, BatchScorer):
        return list(view.bm25_many(queries))
    return [view.bm25(query) for query in queries]


def vector_search(
    view: StoreView, query_vector: FloatMatrix, k: int, where: Where | None, scorer: SideScorer | None = None
) -> list[Hit]:
    """Top ``k`` rows by cosine similarity, restricted to ``where``.

    ``scorer`` is the query's vector side when it was scored already (in a batch).
    """
    if view.known_empty():
        return []
    found, scores = (scorer or view.vector(query_vector)).top(k, where)
    return [
        Hit(key=int(r), vector_score=float(s), vector_rank=rank)
        for rank, (r, s) in enumerate(zip(found, scores, strict=True), start=1)
    ]


def bm25_search(
    view: StoreView, query: str, k: int, where: Where | None, scorer: SideScorer | None = None
) -> list[Hit]:
    """Top ``k`` rows by BM25 among rows that match at least one query term (``scorer``: see :func:`vector_search`)."""
    if view.known_empty():
        return []
    found, scores = (scorer or view.bm25(query)).top(k, where)
    return [
        Hit(key=int(r), bm25_score=float(s), bm25_rank=rank)
        for rank, (r, s) in enumerate(zip(found, scores, strict=True), start=1)
    ]


def fused_search(
    view: StoreView,
    scorers: QueryScorers,
    options: PoolOptions,
    trace: SearchTrace | None = None,
    within: frozenset[str] | None = None,
) -> list[Hit]:
    """Top ``options.k`` rows by fused score; see the module docstring for the candidate pool.

    ``scorers`` are the query's two sides on ``view`` (:func:`query_scorers`; reuse them to fuse the
    same query under several options). The rows searched are those ``options.filter`` allows,
    and only those with an id in ``within`` when it is given.

    A side whose weight is zero (``alpha`` 0 or 1) adds no candidates, so the limits give
    exactly the single-side rankings. Ties are broken by the raw score of the side with the
    larger weight, then by key.

    The floors (:class:`~langchain_fusion.search.floors.FloorOptions`) leave out the candidates
    below a relevance floor; diversity (:class:`~langchain_fusion.search.diversity.DiversityOptions`)
    chooses the ``k`` results by maximal marginal relevance among the best ``fetch_k`` fused
    candidates (all of them when ``fetch_k`` is None) and/or caps the results per source;
    ``duplicates`` (:class:`~langchain_fusion.search.duplicates.DuplicateOptions`) returns copies of
    one text once. None of them changes a returned candidate's scores.
    ``trace`` is filled with what the search saw (:class:`SearchTrace`).
    """
    if view.known_empty():
        return []
    alpha, k = options.alpha, options.k
    where = None if options.filter is None and within is None else Where(metadata=options.filter, ids=within)
    pool_size = None if options.fetch_k is None else max(options.fetch_k, k)
    if (
        pool_size is None
        and isinstance(scorers.vector, WholeCorpusScorer)
        and isinstance(scorers.bm25, WholeCorpusScorer)
    ):
        pool, vector_pool, bm25_pool = _whole_corpus_pool(view, scorers, alpha, where)
    else:
        found = _side_tops(view, scorers, pool_size, where, alpha)
        pool = _sorted_union([keys_ for keys_, _ in found])
        vector_pool, bm25_pool = _complete(
            view, pool, scorers, found[0] if alpha > 0 else None, found[-1] if alpha < 1 else None
        )
    if trace is not None:
        trace.pool, trace.pool_size = pool, pool_size
    if pool.size == 0:
        return []
    dropped = scorers.dropped(alpha)
    fused = fuse_pool(vector_pool, bm25_pool, alpha, options.method, tie_break=pool, vector_evidence=dropped is None)
    selecting = trace if trace is not None else SearchTrace()
    selecting.fused, selecting.eligible = fused, options.passing(vector_pool, bm25_pool, alpha)
    if not options.diversifies and not options.collapses_copies:
        selecting.chosen = fused.order(k, selecting.eligible)
    else:
        _select(view, pool, selecting, options, pool_size)
    return _hits(pool, fused, selecting.chosen, copies=_copies(pool, selecting), dropped=dropped)


def _select(view: StoreView, pool: Keys, trace: SearchTrace, options: PoolOptions, candidates: int | None) -> None:
    """Choose the ``k`` results by diversity and duplicates (see :func:`fused_search`), into ``trace``."""
    assert trace.fused is not None
    fused, eligible, k = trace.fused, trace.eligible, options.k
    near, mmr = options.copies_by_vector, options.reads_vectors
    depth: int | None = candidates if mmr else 2 * k  # MMR: one reading
    while True:  # the fused ranking, read deeper until k results fit (cap, copies) or the pool runs out
        ranked = fused.order(depth, eligible)
        keys_ = pool[ranked]
        vectors = view.vectors(keys_) if mmr or near else None
        groups = options.cap_groups(view.documents(keys_)) if options.caps_sources else None
        copies = None
        if options.collapses_copies:
            copies = duplicate_groups(_texts(view, keys_), vectors if near else None, options.near_duplicate_similarity)
        picks = options.choose(fused.fused[ranked], vectors, k, groups, copies)
        if depth is None or mmr or picks.positions.size == k or ranked.size < depth:
            trace.ranked, trace.copies, trace.picks, trace.chosen = ranked, copies, picks, ranked[picks.positions]
            return
        depth *= 4


def _texts(view: StoreView, keys_: Keys) -> list[str]:
    if isinstance(view, TextReader):
        return view.texts(keys_)
    return [doc.page_content for doc in view.documents(keys_)]


def _copies(pool: Keys, trace: SearchTrace) -> list[tuple[int, ...]] | None:
    """For each result of ``trace``, the keys of its other copies among the candidates read, best first."""
    if trace.copies is None or trace.ranked is None or trace.picks is None:
        return None
    keys_ = pool[trace.ranked]
    return [tuple(int(keys_[i]) for i in others) for others in copies_of(trace.copies, trace.picks.positions)]


def _whole_corpus_pool(
    view: StoreView, scorers: QueryScorers, alpha: float, where: Where | None
) -> tuple[Keys, NDArray[np.floating], NDArray[np.floating]]:
    """Every allowed row (``alpha`` 0: every allowed row a query term matches) with both scores, read directly.

    The vector side returns every allowed row, so with any vector weight the pool is simply
    the allowed rows; no per-side top-k or union is needed.
    """
    # Both scorers score every row: fused_search checked that before choosing this path.
    vector_all, bm25_all = _all_scores(view, scorers.vector, scorers.bm25, where)  # type: ignore[arg-type]
    pool = view.select(where or Where()) if alpha > 0 else np.sort(scorers.bm25.top(None, where)[0])
    if pool.size == vector_all.size:  # every key: no gather needed
        return pool, vector_all, bm25_all
    return pool, vector_all[pool], bm25_all[pool]


_side_pool = LazyPool(usable_cores(), "langchain-fusion-side")

_Aside = TypeVar("_Aside")
_Here = TypeVar("_Here")


def _side_by_side(aside: Callable[[], _Aside], here: Callable[[], _Here]) -> tuple[_Aside, _Here]:
    """``aside()`` in a worker thread, in the caller's context as if it ran here, while ``here()`` runs in this one."""
    future = _side_pool.get().submit(contextvars.copy_context().run, aside)
    try:
        mine = here()
    finally:
        wait([future])
    return future.result(), mine


def _all_scores(
    view: StoreView, vector: WholeCorpusScorer, bm25: WholeCorpusScorer, where: Where | None
) -> tuple[NDArray[np.floating], NDArray[np.floating]]:
    """Every row's score on each side; BM25 in a worker thread while this one scans, where the view allows."""
    if not (isinstance(view, ConcurrentWholeCorpus) and view.whole_corpus_in_parallel(where)):
        return vector.all_scores(), bm25.all_scores()
    bm25_all, vector_all = _side_by_side(bm25.all_scores, vector.all_scores)
    return vector_all, bm25_all


def _side_tops(
    view: StoreView, scorers: QueryScorers, pool_size: int | None, where: Where | None, alpha: float
) -> list[tuple[Keys, NDArray[np.float64]]]:
    """The candidates of each side with a weight (vector first), the two searched at once where the view allows.

    On a large local index each side takes milliseconds (a graph search or a scan; postings and
    a top-k over every row) and both release the GIL, so the vector side runs in a worker thread
    while the BM25 side runs in this one.
    """
    if not (0 < alpha < 1 and isinstance(view, ConcurrentSides) and view.sides_in_parallel(where)):
        found: list[tuple[Keys, NDArray[np.float64]]] = []
        if alpha > 0:
            found.append(tied_top(scorers.vector, pool_size, where))
        if alpha < 1:
            found.append(tied_top(scorers.bm25, pool_size, where))
        return found
    vector, bm25 = _side_by_side(
        lambda: tied_top(scorers.vector, pool_size, where), lambda: tied_top(scorers.bm25, pool_size, where)
    )
    return [vector, bm25]


def tied_top(scorer: SideScorer, k: int | None, where: Where | None) -> tuple[Keys, NDArray[np.float64]]:
    """The side's best ``k`` rows and every further row tied with the ``k``-th: a pool no engine's tie order moves.

    Rows tied at the edge of a side's top ``k`` would otherwise enter the pool in whatever order
    the engine breaks ties in, and move its normalisation: with all of them, every store builds
    the same pool. Reading one row more than ``k`` tells whether there is a tie to follow.
    """
    if k is None:
        return scorer.top(None, where)
    try:
        keys, scores = scorer.top(k + 1, where)
    except InvalidParameterError:  # k fills the engine's window for one search: no row past it can be read
        return scorer.top(k, where)
    while keys.size > k and scores[-1] == scores[k - 1]:  # the last row read still ties: read deeper
        depth = 2 * keys.size
        try:
            keys, scores = scorer.top(depth, where)
        except InvalidParameterError:  # beyond the engine's window for one search: keep what was read
            break
        if keys.size < depth:
            break
    if keys.size <= k:
        return keys, scores
    tied = int(np.count_nonzero(scores[k:] == scores[k - 1]))
    return keys[: k + tied], scores[: k + tied]


def _sorted_union(parts: list[Keys]) -> Keys:
    """The distinct keys of ``parts``, ascending (a sort, cheaper than ``np.unique`` for small pools)."""
    if not parts:
        return np.zeros(0, dtype=np.int64)
    merged = np.concatenate(parts).astype(np.int64, copy=False)
    merged.sort()
    if merged.size < 2:
        return merged
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))]


def _complete(
    view: StoreView,
    pool: Keys,
    scorers: QueryScorers,
    vector_found: tuple[Keys, NDArray[np.float64]] | None,
    bm25_found: tuple[Keys, NDArray[np.float64]] | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every pooled key's score on each side: those the side returned, then the real score of the rest.

    A view with the :class:`~langchain_fusion.stores.base.JointCompletion` capability completes
    both sides in one request (a remote store's round trip), others ask each side.
    """
    vector, vector_missing = _known(pool, vector_found)
    bm25, bm25_missing = _known(pool, bm25_found)
    if vector_missing.size and bm25_missing.size and isinstance(view, JointCompletion):
        vector[vector_missing], bm25[bm25_missing] = view.complete_both(
            scorers.vector, pool[vector_missing], scorers.bm25, pool[bm25_missing]
        )
        return vector, bm25
    if vector_missing.size:
        vector[vector_missing] = scorers.vector.scores(pool[vector_missing])
    if bm25_missing.size:
        bm25[bm25_missing] = scorers.bm25.scores(pool[bm25_missing])
    return vector, bm25


def _known(pool: Keys, found: tuple[Keys, NDArray[np.float64]] | None) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The pool's scores on one side where ``found`` has them, and the positions still missing."""
    scores = np.empty(pool.size, dtype=np.float64)
    known = np.zeros(pool.size, dtype=bool)
    if found is not None and found[0].size:
        positions = np.searchsorted(pool, found[0])
        scores[positions] = found[1]
        known[positions] = True
    return scores, np.flatnonzero(~known)


def rank_pool(
    keys_: Keys,
    vector_scores: NDArray[np.floating],
    bm25_scores: NDArray[np.floating],
    options: FusionOptions,
    vector_known: NDArray[np.bool_] | None = None,
) -> list[Hit]:
    """Fuse an aligned candidate pool with ``options.alpha`` and ``options.method``; its top ``options.k`` as hits.

    ``keys_`` must be sorted ascending (it is the final tie-break). ``vector_known`` marks the
    candidates whose vector score was actually observed; the others are reported with no
    vector score or rank (their placeholder score still takes part in normalisation).
    """
    fused = fuse_pool(vector_scores, bm25_scores, options.alpha, options.method, tie_break=keys_)
    return _hits(keys_, fused, fused.order(options.k), vector_known)


def _hits(
    keys_: Keys,
    fused: FusedPool,
    positions: NDArray[np.int64],
    vector_known: NDArray[np.bool_] | None = None,
    copies: Sequence[tuple[int, ...]] | None = None,
    dropped: str | None = None,
) -> list[Hit]:
    """The hits at ``positions`` (in that order) of a fused pool whose keys are ``keys_``.

    ``copies``: of each; ``dropped``: why the vector side had no weight (see :attr:`Hit.vector_dropped`).
    """
    top = fused.at(positions)
    vector_scores, bm25_scores = fused.vector, fused.bm25
    hits = []
    for i, position in enumerate(top.positions.tolist()):
        known = vector_known is None or bool(vector_known[position])
        hits.append(
            Hit(
                key=int(keys_[position]),
                fused=float(top.fused[i]),
                vector_score=float(vector_scores[position]) if known else None,
                vector_normalized=float(top.vector_normalized[i]),
                vector_rank=int(top.vector_rank[i]) if known else None,
                bm25_score=float(bm25_scores[position]),
                bm25_normalized=float(top.bm25_normalized[i]),
                bm25_rank=int(top.bm25_rank[i]) or None,
                copies=copies[i] if copies is not None else (),
                vector_dropped=dropped,
            )
        )
    return hits


def scored_copy(document: Document, hit: Hit, method: str | None = None, *, owned: bool = False) -> Document:
    """``document`` with the hit's score provenance in its metadata: a copy, or the document itself if ``owned``.

    ``owned``: ``document`` is a new object no one else holds (see ``StoreView.documents_are_new``).
    """
    meta = document.metadata if owned else copy.deepcopy(document.metadata)
    if hit.fused is not None:
        meta[keys.SCORE] = hit.fused
        meta[keys.FUSION_SCORE] = hit.fused
        meta[keys.FUSION_METHOD] = method
        meta[keys.VECTOR_SCORE] = hit.vector_score
        meta[keys.VECTOR_SCORE_NORMALIZED] = hit.vector_normalized
        meta[keys.VECTOR_RANK] = hit.vector_rank
        meta[keys.BM25_SCORE] = hit.bm25_score
        meta[keys.BM25_SCORE_NORMALIZED] = hit.bm25_normalized
        meta[keys.BM25_RANK] = hit.bm25_rank
        if hit.vector_dropped is not None:
            meta[keys.VECTOR_DROPPED] = hit.vector_dropped
    elif hit.vector_score is not None:
        meta[keys.SCORE] = hit.vector_score
        meta[keys.VECTOR_SCORE] = hit.vector_score
        meta[keys.VECTOR_RANK] = hit.vector_rank
    else:
        meta[keys.SCORE] = hit.bm25_score
        meta[keys.BM25_SCORE] = hit.bm25_score
        meta[keys.BM25_RANK] = hit.bm25_rank
    if owned:
        return document
    return Document(id=document.id, page_content=document.page_content, metadata=meta)


def hits_to_documents(view: StoreView, hits: list[Hit], method: str | None = None) -> list[Document]:
    """The hits' documents with their scores (see :func:`scored_copy`), in hit order; copies listed in ``also_in``.

    The view's documents get the scores in place where it builds new ones (``StoreView.documents_are_new``),
    else copies of them do.
    """
    documents = view.documents(np.fromiter((h.key for h in hits), dtype=np.int64, count=len(hits)))
    owned = view.documents_are_new
    results = [scored_copy(doc, hit, method, owned=owned) for doc, hit in zip(documents, hits, strict=True)]
    copy_keys = [key for hit in hits for key in hit.copies]
    if copy_keys:
        found = dict(zip(copy_keys, view.documents(np.asarray(copy_keys, dtype=np.int64)), strict=True))
        for doc, hit in zip(results, hits, strict=True):
            if hit.copies:
                doc.metadata[keys.ALSO_IN] = [copies_entry(found[key]) for key in hit.copies]
    return results
