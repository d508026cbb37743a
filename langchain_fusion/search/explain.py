"""Why not: where one document ended up in one fused search, read from that search's own record.

:func:`explain` takes what a real search saw (its :class:`~langchain_fusion.search.pool.SearchTrace`,
its results before and after the relevance floor) and says where the document went, in the
order the search decides:

1. ``filtered``: the metadata filter does not allow it.
2. ``outside_pool``: neither side put it among its best ``fetch_k`` (its exact rank on each side,
   among the rows the filter allows, is given; the BM25 side ranks only rows with a query term).
3. ``below_floor``: in the pool, but it clears no relevance floor that applies.
4. ``duplicate``: a copy of a returned result's text (:mod:`~langchain_fusion.search.duplicates`).
5. ``capped``: the cap per source was reached by results of its source ranked above it.
6. ``not_picked_by_mmr``: a candidate of maximal marginal relevance that was not picked.
7. ``below_k``: it qualifies, but ``k`` results ranked above it (its fused rank is given).
8. ``below_min_relevance``: it made the ``k`` but its calibrated relevance is under ``min_relevance``.
9. ``returned``: it is a result, at ``rank``.

Nothing here ranks or fuses again: the verdict is read from the search that produced the
results, so it always agrees with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.diversity import PASSED_OVER_CAPPED, PASSED_OVER_DUPLICATE
from langchain_fusion.search.options import SearchOptions
from langchain_fusion.search.pool import QueryScorers, SearchTrace
from langchain_fusion.stores.base import SideScorer, StoreView, Where

Verdict = Literal[
    "returned",
    "filtered",
    "outside_pool",
    "below_floor",
    "duplicate",
    "capped",
    "not_picked_by_mmr",
    "below_k",
    "below_min_relevance",
]
"""Where a document ended up in one search (see the module docstring)."""

RANK_SEARCH_START = 64
"""The first depth a side is searched to for a document's rank; each next search is 8 times deeper."""


@dataclass(frozen=True)
class Explanation:
    """Where one document ended up in one fused search, and why; ``str()`` is :attr:`message`.

    ``repr()`` (what a notebook shows) is the verdict and the message on one line; every figure is a
    field, and :meth:`to_dict` gives them all.
    """

    query: str
    """The query searched for."""
    doc_id: str
    """The document explained (``Document.id``: one chunk)."""
    verdict: Verdict
    """Where it ended up (see :mod:`~langchain_fusion.search.explain`)."""
    message: str
    """The verdict in one or two sentences, with the figures behind it."""
    rank: int | None = None
    """Its 1-based rank in the results when returned (or where it would be, when below ``min_relevance``)."""
    fused_rank: int | None = None
    """Its 1-based rank by fused score among the pool's candidates that clear the floors (None: not among them)."""
    fused_score: float | None = None
    """Its fused score in this search's pool (None outside the pool)."""
    vector_score: float | None = None
    """Its raw cosine similarity to the query."""
    bm25_score: float | None = None
    """Its raw BM25 score (0: no query term)."""
    vector_rank: int | None = None
    """Its 1-based rank on the vector side among the rows the filter allows (None: see ``ranks_searched``)."""
    bm25_rank: int | None = None
    """Its 1-based rank on the BM25 side among the allowed rows that contain a query term (None: no query term)."""
    ranks_searched: int | None = None
    """When a side's rank is None because the store cannot search that deep: how deep it searched."""
    pool_size: int | None = None
    """Candidates each side contributes: the larger of ``fetch_k`` and ``k`` (None: the whole corpus)."""
    relevance: float | None = None
    """Its calibrated relevance, on a calibrated index (None otherwise or when not among the ``k``)."""
    floors: dict[str, float] = field(default_factory=dict)
    """The relevance floors that applied (``min_vector_score``, ``min_bm25_score``)."""
    kept_copy: str | None = None
    """For a duplicate: the id of the copy returned in its place."""
    capped_by: list[str] = field(default_factory=list)
    """For a capped document: the ids of the returned results of its source ranked above it."""
    closest_pick: str | None = None
    """For a document MMR did not pick: the id of the picked result most similar to it."""

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"<Explanation {self.verdict}: {self.message}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """What IPython and Jupyter show: :meth:`__repr__` (their own pretty printer would list every field)."""
        printer.text(repr(self))

    def to_dict(self) -> dict[str, Any]:
        """The explanation as JSON-able data."""
        return asdict(self)


@dataclass(frozen=True)
class SearchRecord:
    """What one fused search saw and returned: the input of :func:`explain`."""

    view: StoreView
    """The view it searched."""
    scorers: QueryScorers
    """The query's two sides on that view."""
    trace: SearchTrace
    """The search's own record."""
    scored: Sequence[Document]
    """Its results before the ``min_relevance`` floor (with ``relevance`` on a calibrated index)."""
    returned: Sequence[Document]
    """Its results."""
    options: SearchOptions
    """The resolved search options."""


def explain(record: SearchRecord, query: str, doc_id: str, key: int) -> Explanation:
    """Where the document ``doc_id`` (key ``key`` in the record's view) ended up in the recorded search."""
    base: dict[str, Any] = {"query": query, "doc_id": doc_id, "pool_size": record.trace.pool_size}
    returned = [d.id for d in record.returned]
    scored_ids = [d.id for d in record.scored]
    pool = record.trace.pool
    position = int(np.searchsorted(pool, key))
    in_pool = position < pool.size and pool[position] == key
    if doc_id in scored_ids:
        doc = record.scored[scored_ids.index(doc_id)]
        base.update(_scores_of(doc), relevance=doc.metadata.get(keys.RELEVANCE))
        if in_pool:
            base["fused_rank"] = _fused_rank(record.trace, position)
        if doc_id in returned:
            return _returned(base, returned.index(doc_id) + 1, record)
        base["rank"] = scored_ids.index(doc_id) + 1
        floor = record.options.min_relevance
        return _verdict(
            base,
            "below_min_relevance",
            f"{doc_id} makes the top {record.options.k} at rank {base['rank']}, but its calibrated relevance "
            f"{base['relevance']:.3f} is below min_relevance={floor}",
        )
    filter_spec = record.options.filter
    if filter_spec is not None and record.view.select(Where(metadata=filter_spec, ids=frozenset({doc_id}))).size == 0:
        return _verdict(
            base, "filtered", f"{doc_id} is removed by the filter {filter_spec!r}: its metadata does not match"
        )
    if not in_pool:
        return _outside_pool(base, record, key)
    return _in_pool(base, record, position)


def _verdict(base: dict[str, Any], verdict: Verdict, message: str, **more: Any) -> Explanation:
    return Explanation(verdict=verdict, message=message, **{**base, **more})


def _scores_of(doc: Document) -> dict[str, Any]:
    meta = doc.metadata
    return {
        "fused_score": meta.get(keys.FUSION_SCORE),
        "vector_score": meta.get(keys.VECTOR_SCORE),
        "bm25_score": meta.get(keys.BM25_SCORE),
    }


def _returned(base: dict[str, Any], rank: int, record: SearchRecord) -> Explanation:
    shown = f"fused score {base['fused_score']:.3f}: vector {base['vector_score']:.3f}, BM25 {base['bm25_score']:.2f}"
    message = f"{base['doc_id']} is returned at rank {rank} of {len(record.returned)} ({shown})"
    return _verdict(base, "returned", message, rank=rank)


def _fused_rank(trace: SearchTrace, position: int) -> int | None:
    """The 1-based rank by fused score of the pool's candidate at ``position`` among those that clear the floors."""
    if trace.fused is None or (trace.eligible is not None and not trace.eligible[position]):
        return None
    return int(np.flatnonzero(trace.fused.order(None, trace.eligible) == position)[0]) + 1


def _outside_pool(base: dict[str, Any], record: SearchRecord, key: int) -> Explanation:
    """Neither side took it: its rank on each side among the allowed rows, against the pool size."""
    options, where = record.options, _where(record.options)
    keys_ = np.asarray([key], dtype=np.int64)
    vector_score = float(record.scorers.vector.scores(keys_)[0])
    bm25_score = float(record.scorers.bm25.scores(keys_)[0])
    vector_rank, searched_v = side_rank(record.scorers.vector, key, where)
    bm25_rank, searched_b = (None, None) if bm25_score <= 0 else side_rank(record.scorers.bm25, key, where)
    searched = searched_v or searched_b
    pool = record.trace.pool_size
    alpha = options.alpha
    sides = []
    for name, rank, weight, score in (
        ("vector", vector_rank, alpha, f"{vector_score:.3f}"),
        ("BM25", bm25_rank, 1 - alpha, f"{bm25_score:.2f}"),
    ):
        if name == "BM25" and bm25_score <= 0:
            where_ = "no query term"
        elif rank is None:
            where_ = f"rank > {searched:,}"
        else:
            where_ = f"rank {rank:,}"
        unweighted = " (no weight: it adds no candidates)" if weight == 0 else ""
        sides.append(f"{name} {where_}, score {score}{unweighted}")
    size = "every allowed row" if pool is None else f"the best {pool:,} of each side (fetch_k={options.fetch_k})"
    message = f"{base['doc_id']} is outside both candidate pools: {'; '.join(sides)}; the pool takes {size}"
    if vector_rank is not None and pool is not None and vector_rank <= pool and alpha > 0:
        message += "; the approximate vector index did not propose it"
    return _verdict(
        base,
        "outside_pool",
        message,
        vector_score=vector_score,
        bm25_score=bm25_score,
        vector_rank=vector_rank,
        bm25_rank=bm25_rank,
        ranks_searched=searched,
    )


def side_rank(scorer: SideScorer, key: int, where: Where | None) -> tuple[int | None, int | None]:
    """The 1-based rank of ``key`` on one side among the rows ``where`` allows, by the side's own top-k.

    Returns (rank, None), or (None, depth) when the store cannot search deeper than ``depth``
    (Milvus returns at most 16,384 rows per search), or (None, None) when the side does not rank it.
    """
    depth = RANK_SEARCH_START
    while True:
        try:
            found, _ = scorer.top(depth, where)
        except InvalidParameterError:  # the store's limit on one search's rows
            return None, depth // 8
        hits = np.flatnonzero(found == key)
        if hits.size:
            return int(hits[0]) + 1, None
        if found.size < depth:
            return None, None
        depth *= 8


def _where(options: SearchOptions) -> Where | None:
    return None if options.filter is None else Where(metadata=options.filter)


def _in_pool(base: dict[str, Any], record: SearchRecord, position: int) -> Explanation:
    """In the pool but not among the results: below a floor, passed over by the selection, or below ``k``."""
    trace, options, doc_id = record.trace, record.options, base["doc_id"]
    assert trace.fused is not None
    fused = trace.fused
    base.update(
        fused_score=float(fused.fused[position]),
        vector_score=float(fused.vector[position]),
        bm25_score=float(fused.bm25[position]),
    )
    if trace.eligible is not None and not trace.eligible[position]:
        return _below_floor(base, options)
    base["fused_rank"] = _fused_rank(trace, position)
    read = np.flatnonzero(trace.ranked == position) if trace.ranked is not None else np.zeros(0, np.int64)
    if read.size and trace.picks is not None:
        index = int(read[0])
        why = trace.picks.passed_over.get(index)
        if why == PASSED_OVER_DUPLICATE or _copy_of_a_pick(trace, index):
            # Also a copy read after the k-th pick, which the selection never reached: its result lists it.
            return _duplicate(base, record, index)
        if why == PASSED_OVER_CAPPED:
            return _capped(base, record, index)
        if options.lambda_mult is not None:
            return _not_picked(base, record, position)
    k, rank = options.k, base["fused_rank"]
    message = f"{doc_id} qualifies but ranks {rank} by fused score ({base['fused_score']:.3f}), below k={k}"
    if options.lambda_mult is not None:
        message += f"; maximal marginal relevance chooses among the best {trace.pool_size or 'all'} only"
    elif trace.picks is not None and trace.picks.passed_over:
        above = [i for i in trace.picks.passed_over if not read.size or i < int(read[0])]
        message += f"; {len(above)} candidate(s) above it were passed over as copies or for their source's cap"
    return _verdict(base, "below_k", message)


def _below_floor(base: dict[str, Any], options: SearchOptions) -> Explanation:
    alpha = options.alpha
    applied: dict[str, float] = {}
    parts = []
    if options.min_vector_score is not None and alpha > 0:
        applied["min_vector_score"] = options.min_vector_score
        parts.append(f"vector {base['vector_score']:.3f} < min_vector_score={options.min_vector_score}")
    if options.min_bm25_score is not None and alpha < 1:
        applied["min_bm25_score"] = options.min_bm25_score
        shown = "0 (no query term)" if base["bm25_score"] <= 0 else f"{base['bm25_score']:.2f}"
        parts.append(f"BM25 {shown} < min_bm25_score={options.min_bm25_score}")
    message = f"{base['doc_id']} is in the candidate pool but below every relevance floor: {'; '.join(parts)}"
    return _verdict(base, "below_floor", message, floors=applied)


def _chosen_documents(record: SearchRecord) -> list[Document]:
    return record.view.documents(record.trace.pool[record.trace.chosen])


def _copy_of_a_pick(trace: SearchTrace, index: int) -> bool:
    """Whether the candidate read at ``index`` is a copy of a chosen one (what that result's ``also_in`` lists)."""
    if trace.copies is None or trace.picks is None:
        return False
    group = trace.copies[index]
    return any(trace.copies[pick] == group and pick != index for pick in trace.picks.positions.tolist())


def _duplicate(base: dict[str, Any], record: SearchRecord, index: int) -> Explanation:
    trace = record.trace
    assert trace.copies is not None and trace.picks is not None
    group = trace.copies[index]
    kept = next(i for i, pick in enumerate(trace.picks.positions.tolist()) if trace.copies[pick] == group)
    kept_id = _chosen_documents(record)[kept].id
    returned = [d.id for d in record.returned]
    same = "the same text as" if record.options.duplicates == "exact" else "the same or nearly the same text as"
    if kept_id in returned:
        place = f"returned at rank {returned.index(kept_id) + 1} in its place; that result lists it in metadata['"
        place += f"{keys.ALSO_IN}']"
    else:
        place = f"chosen in its place, then left out below min_relevance={record.options.min_relevance}"
    message = f"{base['doc_id']} holds {same} {kept_id}, {place} (duplicates={record.options.duplicates!r})"
    return _verdict(base, "duplicate", message, kept_copy=kept_id)


def _capped(base: dict[str, Any], record: SearchRecord, index: int) -> Explanation:
    trace = record.trace
    assert trace.ranked is not None
    source = record.view.documents(trace.pool[trace.ranked[index : index + 1]])[0].metadata.get(keys.SOURCE)
    chosen = _chosen_documents(record)
    by = [d.id or "" for d in chosen if d.metadata.get(keys.SOURCE) == source]
    cap = record.options.max_per_source
    message = (
        f"{base['doc_id']} is capped by max_per_source={cap}: {source!r} already gives {len(by)} result(s) "
        f"chosen before it ({', '.join(by)})"
    )
    returned = {d.id for d in record.returned}
    dropped = [i for i in by if i not in returned]
    if dropped:
        message += f"; {', '.join(dropped)} then fell below min_relevance={record.options.min_relevance}"
    return _verdict(base, "capped", message, capped_by=by)


def _not_picked(base: dict[str, Any], record: SearchRecord, position: int) -> Explanation:
    trace = record.trace
    chosen = trace.pool[trace.chosen]
    target = record.view.vectors(trace.pool[position : position + 1])[0]
    similarity = record.view.vectors(chosen) @ target if chosen.size else np.zeros(0)
    closest = int(np.argmax(similarity)) if similarity.size else None
    closest_id = None if closest is None else record.view.documents(chosen[closest : closest + 1])[0].id
    message = (
        f"{base['doc_id']} was a candidate of maximal marginal relevance (fused rank {base['fused_rank']}) but was "
        f"not picked: with lambda_mult={record.options.lambda_mult}, the {chosen.size} picks were more relevant "
        "or less like those already picked"
    )
    if closest is not None:
        message += f"; it is most like {closest_id} (cosine {float(similarity[closest]):.3f})"
    return _verdict(base, "not_picked_by_mmr", message, closest_pick=closest_id)
