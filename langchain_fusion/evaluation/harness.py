"""Running retrievers over an evaluation dataset: metric tables, alpha sweeps, per-query wins.

``evaluate_retrievers`` runs any LangChain retrievers, in batches (``retriever.batch``: one
embedding call and one scoring pass per batch for ours) or query by query with each query
timed; ``evaluate_sides`` runs it for vector only, BM25 only and fusion with its defaults.
``Report.by_kind`` and ``Report.kind_table`` break a report down by the kind of query the
labels give (keyword, paraphrase, ...). ``sweep_alpha`` scores a FusionIndex for many
(method, alpha) pairs cheaply: the queries are embedded and scored on both sides once, a slice at a time
(:func:`~langchain_fusion.search.pool.vector_scorers`), then fused for every setting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from tqdm import tqdm

from langchain_fusion import metadata as keys
from langchain_fusion._checks import check_fetch_k, check_positive_int
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.evaluation.datasets import EvalDataset
from langchain_fusion.evaluation.metrics import evaluate_run, mean_scores, parse_metric
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex, calibration_kind
from langchain_fusion.retrievers.fusion import BM25Retriever, FusionRetriever, VectorRetriever
from langchain_fusion.retrievers.rerank_retriever import RerankRetriever, with_top_n
from langchain_fusion.search.floors import FloorOptions
from langchain_fusion.search.fusion import FUSION_METHODS, FusionMethod, check_alpha, check_method
from langchain_fusion.search.options import SEARCH_DEFAULTS, PoolOptions
from langchain_fusion.search.pool import (
    QueryScorers,
    batch_reach,
    bm25_scorers,
    fused_search,
    queries_per_pass,
    vector_scorers,
)
from langchain_fusion.search.relevance import check_min_relevance, require_model

DEFAULT_METRICS = ("ndcg@10", "recall@10", "mrr@10", "hit_rate@5")
"""Metrics reported when none are asked for."""

DEFAULT_BATCH_SIZE = 64
"""Queries per ``retriever.batch`` call in :func:`evaluate_retrievers`."""

SIDES = ("vector", "bm25", "fusion (defaults)")
"""Row names of :func:`evaluate_sides`: vector only, BM25 only, fusion with its default settings."""

ALL_KINDS = "all"
"""Label of the row for every query in :meth:`Report.kind_table`."""


logger = logging.getLogger(__name__)


def deepest_cutoff(metrics: Sequence[str]) -> int:
    """How many results a run needs for ``metrics`` (the largest k among them)."""
    return max(parse_metric(m)[1] for m in metrics)


@dataclass
class MethodResult:
    """One retriever's (or fusion setting's) results on a dataset."""

    name: str
    """Row label, e.g. ``fusion (weighted, alpha=0.5)``."""
    per_query: dict[str, dict[str, float]]
    """Metric values per query id."""
    latencies_ms: list[float] = field(default_factory=list)
    """Wall-clock time of each query, when queries ran one by one."""
    ms_per_query: float | None = None
    """Wall-clock time of all queries divided by their number, when they ran in batches."""
    extra: dict[str, float] = field(default_factory=dict)
    """Other columns, e.g. the share of no-answer queries answered with nothing (:func:`sweep_floors`)."""

    @property
    def means(self) -> dict[str, float]:
        """Metric values averaged over the queries."""
        return mean_scores(self.per_query)

    def latency(self, quantile: float) -> float | None:
        """A latency quantile in milliseconds (0.5 for p50), or None if not measured."""
        return float(np.quantile(self.latencies_ms, quantile)) if self.latencies_ms else None


@dataclass
class Report:
    """Results of several methods on one dataset, with table and comparison helpers."""

    dataset: str
    """Dataset name."""
    metrics: list[str]
    """Metric names, in column order."""
    results: list[MethodResult]
    """One entry per method, in row order."""

    def rows(self) -> list[dict[str, object]]:
        """One dict per method: name, mean metric values, and the time measured.

        Queries run one by one give latency ``p50_ms``/``p95_ms``; queries run in batches give
        ``ms_per_query`` (the batches' time over the number of queries: throughput, not latency).
        """
        rows: list[dict[str, object]] = []
        for result in self.results:
            row: dict[str, object] = {"method": result.name, **result.means, **result.extra}
            if result.latencies_ms:
                row["p50_ms"], row["p95_ms"] = result.latency(0.5), result.latency(0.95)
            if result.ms_per_query is not None:
                row["ms_per_query"] = result.ms_per_query
            rows.append(row)
        return rows

    def to_markdown(self) -> str:
        """The table as GitHub markdown, metrics with 4 decimals and times with 1."""
        rows = self.rows()
        timings = [c for c in ("p50_ms", "p95_ms", "ms_per_query") if any(c in r for r in rows)]
        extras = list(dict.fromkeys(c for r in self.results for c in r.extra))
        columns = ["method", *self.metrics, *extras, *timings]
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
        for row in rows:
            cells = []
            for column in columns:
                value = row.get(column)
                if isinstance(value, float):
                    cells.append(f"{value:.1f}" if column in timings else f"{value:.4f}")
                else:
                    cells.append("" if value is None else str(value))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def result(self, name: str) -> MethodResult:
        """The result row called ``name``."""
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no method {name!r}; have {[r.name for r in self.results]}")

    def by_kind(self, kinds: Mapping[str, str]) -> dict[str, Report]:
        """One report per kind of query, restricted to its queries, kinds in the order they first appear.

        ``kinds`` maps query ids to kinds (:attr:`EvalDataset.kinds`); queries without a kind,
        and kinds of queries this report does not have, are left out. Each sub-report keeps the
        metric values per query, not the timings (they were measured for all queries together).
        """
        query_ids = list(self.results[0].per_query) if self.results else []
        groups: dict[str, list[str]] = {}
        for query_id in query_ids:
            if query_id in kinds:
                groups.setdefault(kinds[query_id], []).append(query_id)
        return {
            kind: Report(
                f"{self.dataset} ({kind})",
                list(self.metrics),
                [MethodResult(r.name, {q: r.per_query[q] for q in ids}) for r in self.results],
            )
            for kind, ids in groups.items()
        }

    def kind_table(self, kinds: Mapping[str, str], metric: str) -> str:
        """One metric as GitHub markdown: a row per kind of query and one for all, a column per method.

        Row labels carry the number of queries (``keyword (18)``, ``all (54)``); values have 4
        decimals, as in :meth:`to_markdown`.
        """
        if metric not in self.metrics:
            raise InvalidParameterError(f"metric {metric!r} is not in this report; it has {', '.join(self.metrics)}")
        names = [r.name for r in self.results]
        rows = [(f"{kind} ({len(sub.results[0].per_query)})", sub) for kind, sub in self.by_kind(kinds).items()]
        count = len(self.results[0].per_query) if self.results else 0
        rows.append((f"{ALL_KINDS} ({count})", self))
        header = [metric, *names]
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
        for label, report in rows:
            values = [r.means.get(metric) for r in report.results]  # none when there are no queries
            cells = ["" if value is None else f"{value:.4f}" for value in values]
            lines.append("| " + " | ".join([label, *cells]) + " |")
        return "\n".join(lines)

    def compare(self, method: str, baseline: str, metric: str) -> dict[str, object]:
        """Per-query wins, losses and ties of ``method`` against ``baseline`` on ``metric``.

        Returns counts and the query ids sorted by how much ``method`` won or lost.
        """
        ours, theirs = self.result(method).per_query, self.result(baseline).per_query
        deltas = {q: ours[q][metric] - theirs[q][metric] for q in ours}
        wins = sorted((q for q, d in deltas.items() if d > 1e-12), key=lambda q: -deltas[q])
        losses = sorted((q for q, d in deltas.items() if d < -1e-12), key=lambda q: deltas[q])
        return {
            "method": method,
            "baseline": baseline,
            "metric": metric,
            "wins": len(wins),
            "losses": len(losses),
            "ties": len(deltas) - len(wins) - len(losses),
            "biggest_wins": [(q, round(deltas[q], 4)) for q in wins[:5]],
            "biggest_losses": [(q, round(deltas[q], 4)) for q in losses[:5]],
        }


def evaluate_retrievers(
    retrievers: Mapping[str, BaseRetriever],
    dataset: EvalDataset,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    documents: Sequence[Document] | None = None,
    progress: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Report:
    """Run each retriever on every query and score it; any LangChain retriever works.

    Each retriever is asked for as many documents as the deepest metric cutoff (through its
    ``k`` field, or ``search_kwargs["k"]`` for a vector-store retriever; others return what
    they return). Results are matched to the labels by ``Document.id``; a result whose id is
    not one of the corpus's (another store's ids, or none) is matched by its source and
    ``chunk_index`` in ``documents`` (default: the dataset's corpus). Results that match
    nothing count as not relevant, and a retriever none of whose results can be matched is
    warned about instead of silently scoring 0.

    Queries go through ``retriever.batch`` ``batch_size`` at a time (the table then reports
    ``ms_per_query``); ``batch_size=1`` runs ``invoke`` per query and reports each query's
    latency (``p50_ms``, ``p95_ms``).
    """
    batch_size = check_positive_int(batch_size, "batch_size", "queries per retriever.batch call")
    depth = deepest_cutoff(metrics)
    matcher = _LabelMatcher(documents if documents is not None else dataset.corpus, dataset.corpus_ids)
    query_ids, texts = list(dataset.queries), list(dataset.queries.values())
    results = []
    for name, retriever in retrievers.items():
        deep = _at_depth(retriever, depth)
        answers: list[list[Document]] = []
        latencies: list[float] = []
        started = time.perf_counter()
        with tqdm(total=len(texts), desc=name, disable=not progress, leave=False) as bar:
            for lo in range(0, len(texts), batch_size):
                chunk = texts[lo : lo + batch_size]
                if batch_size == 1:
                    start = time.perf_counter()
                    answers.append(deep.invoke(chunk[0]))
                    latencies.append((time.perf_counter() - start) * 1000)
                else:
                    answers.extend(deep.batch(chunk))
                bar.update(len(chunk))
        elapsed_ms = (time.perf_counter() - started) * 1000
        run: dict[str, list[str]] = {}
        unmatched = total = 0
        for query_id, docs in zip(query_ids, answers, strict=True):
            ids = [matcher.label_id(d) for d in docs]
            total += len(ids)
            unmatched += ids.count(None)
            run[query_id] = list(dict.fromkeys(i for i in ids if i is not None))
        if total and unmatched == total:
            logger.warning(
                "%s: none of its %d results has a corpus id or a (source, chunk_index) found in the corpus; "
                "it scores 0. Give its documents the corpus's ids, or pass documents= to match by position.",
                name,
                total,
            )
        elif unmatched:
            logger.warning(
                "%s: %d of its %d results are not among the documents the labels were resolved against (another "
                "index, or other chunking?) and count as not relevant; resolve the labels against its documents "
                "(load_labelled(FILE, index.documents)) or pass documents= to match by position.",
                name,
                unmatched,
                total,
            )
        per_query = elapsed_ms / len(texts) if texts and batch_size > 1 else None
        results.append(MethodResult(name, evaluate_run(run, dataset.qrels, metrics), latencies, per_query))
    return Report(dataset.name, list(metrics), results)


def evaluate_sides(
    index: FusionIndex,
    dataset: EvalDataset,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k,
    progress: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    wrapped: Mapping[str, Callable[[BaseRetriever], BaseRetriever]] | None = None,
    tenant: str | None = None,
) -> Report:
    """Vector only, BM25 only and fusion with its default settings on ``dataset``: what ``eval`` prints first.

    Rows are named as in :data:`SIDES`; the fused retriever is a ``FusionRetriever`` with its
    defaults except ``fetch_k``. ``wrapped`` adds a row per name that wraps that fused retriever
    (e.g. in a rerank step). On a tenant-keyed index every retriever searches ``tenant``. Other
    arguments as for :func:`evaluate_retrievers`.
    """
    fusion = FusionRetriever(index=index, fetch_k=fetch_k, tenant=tenant)
    retrievers: dict[str, BaseRetriever] = {
        SIDES[0]: VectorRetriever(index=index, tenant=tenant),
        SIDES[1]: BM25Retriever(index=index, tenant=tenant),
        SIDES[2]: fusion,
        **{name: wrap(fusion) for name, wrap in (wrapped or {}).items()},
    }
    return evaluate_retrievers(retrievers, dataset, metrics, progress=progress, batch_size=batch_size)


def _at_depth(retriever: BaseRetriever, depth: int) -> BaseRetriever:
    """A copy of ``retriever`` that returns ``depth`` documents, where it has a knob for it.

    A :class:`~langchain_fusion.retrievers.rerank_retriever.RerankRetriever` keeps ``depth`` (its rerank
    step's ``top_n``, where it has one) of at least ``depth`` candidates.
    """
    if isinstance(retriever, RerankRetriever):
        inner = retriever.retriever
        inner_k = getattr(inner, "k", None)
        candidates = _at_depth(inner, depth) if isinstance(inner_k, int) and inner_k < depth else inner
        kept = {"reranker": with_top_n(retriever.reranker, depth), "top_n": depth}
        return retriever.model_copy(update={"retriever": candidates, **kept})
    fields = type(retriever).model_fields
    if "k" in fields:
        return retriever.model_copy(update={"k": depth})
    if "search_kwargs" in fields:
        search_kwargs = dict(getattr(retriever, "search_kwargs", None) or {})
        return retriever.model_copy(update={"search_kwargs": {**search_kwargs, "k": depth}})
    return retriever


class _LabelMatcher:
    """Maps a retrieved document to the corpus id the labels use."""

    def __init__(self, corpus: Sequence[Document], known_ids: frozenset[str] = frozenset()) -> None:
        self.ids = {doc.id for doc in corpus if doc.id is not None} | known_ids
        self.by_position: dict[tuple[str, int], str] = {}
        for doc in corpus:
            position = keys.chunk_position(doc)
            if position is not None and doc.id is not None:
                self.by_position.setdefault(position, doc.id)

    def label_id(self, doc: Document) -> str | None:
        if doc.id is not None and (not self.ids or doc.id in self.ids):
            return doc.id
        position = keys.chunk_position(doc)
        if position is not None and position in self.by_position:
            return self.by_position[position]
        return None


def alpha_grid(spec: str) -> list[float]:
    """Parse ``START:STOP:STEP`` (inclusive, e.g. ``0:1:0.1``) or a comma list into alphas."""
    return [check_alpha(v) for v in value_grid(spec, "alpha")]


def value_grid(spec: str, name: str) -> list[float]:
    """Parse ``START:STOP:STEP`` (inclusive) or a comma list into numbers (``name`` is for the error message)."""
    try:
        if ":" in spec:
            start, stop, step = (float(part) for part in spec.split(":"))
            if step <= 0:
                raise InvalidParameterError("step must be positive")
            count = round((stop - start) / step) + 1
            values = [round(start + i * step, 10) for i in range(count)]
        else:
            values = [float(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise InvalidParameterError(
            f"{name} grid {spec!r}: use START:STOP:STEP (e.g. 0:1:0.1) or a list (0.3,0.5,0.7)"
        ) from None
    if not values:
        raise InvalidParameterError(f"{name} grid {spec!r} is empty")
    return values


def _sweep_runs(
    index: FusionIndex,
    queries: Sequence[tuple[str, str]],
    searches: Sequence[PoolOptions],
    desc: str,
    progress: bool,
    tenant: str | None,
) -> list[dict[str, list[str]]]:
    """For each of ``searches`` (``fused_search`` options), query id -> the ids of its top ``k``.

    The queries are embedded and scored once per batch; every search reuses those scores. A
    tenant-keyed index is searched in ``tenant``'s view (its own index's).
    """
    runs: list[dict[str, list[str]]] = [{} for _ in searches]
    view = index.search_view(tenant)
    step = queries_per_pass(len(view))  # bounds the score arrays held at once
    depth, where = batch_reach(searches)  # the vector pass keeps only what the searches' top-k need
    with tqdm(total=len(queries), desc=desc, disable=not progress, leave=False) as bar:
        for lo in range(0, len(queries), step):
            chunk = queries[lo : lo + step]
            texts = [text for _, text in chunk]
            vectors = index.embed_queries(texts)
            sides = zip(vector_scorers(view, vectors, depth, where), bm25_scorers(view, texts), strict=True)
            for position, (vector, bm25) in enumerate(sides):
                unread = index.unread(texts[position])
                scorers = QueryScorers(vector, bm25, None if unread is None else str(unread))
                for run, options in zip(runs, searches, strict=True):
                    hits = fused_search(view, scorers, options)
                    keys = np.fromiter((h.key for h in hits), dtype=np.int64, count=len(hits))
                    run[chunk[position][0]] = view.ids(keys)
            bar.update(len(chunk))
    return runs


def _sweep_search(k: int, alpha: float, method: FusionMethod, fetch_k: int | None) -> PoolOptions:
    """One checked search of a sweep, as the fused retriever searches with these settings.

    Copies of one text are returned once, as :data:`SEARCH_DEFAULTS` does (``duplicates``): a cell of
    the sweep at the default settings is the ``fusion (defaults)`` row, on a corpus with copies too.
    Its ``alpha`` 0 and 1 cells then differ from the single-side retrievers, which return every copy.
    """
    return PoolOptions.model_construct(
        k=k,
        alpha=alpha,
        method=method,
        fetch_k=fetch_k,
        duplicates=SEARCH_DEFAULTS.duplicates,
        near_duplicate_similarity=SEARCH_DEFAULTS.near_duplicate_similarity,
    )


def sweep_alpha(
    index: FusionIndex,
    dataset: EvalDataset,
    alphas: Iterable[float],
    methods: Sequence[str] = FUSION_METHODS,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    fetch_k: int | None = 100,
    progress: bool = True,
    tenant: str | None = None,
) -> Report:
    """Score every (method, alpha) pair on the dataset (of ``tenant`` on a tenant-keyed index); one row per pair.

    Rows are named ``METHOD@ALPHA`` (``weighted@0.5``). ``alpha=1`` is vector-only and
    ``alpha=0`` BM25-only for every method. Each search is the fused retriever's with that method and
    alpha: copies of one text are returned once (see :func:`_sweep_search`), so ``weighted@0.5`` scores
    what ``FusionRetriever(index=index)`` returns.
    """
    alphas = [check_alpha(a) for a in alphas]
    checked = [check_method(m) for m in methods]
    depth = deepest_cutoff(metrics)
    settings = [(m, a) for m in checked for a in alphas]
    searches = [_sweep_search(depth, alpha, method, fetch_k) for method, alpha in settings]
    found = _sweep_runs(index, list(dataset.queries.items()), searches, "alpha sweep", progress, tenant)
    runs = dict(zip(settings, found, strict=True))
    results = [
        MethodResult(f"{method}@{alpha:g}", evaluate_run(runs[(method, alpha)], dataset.qrels, metrics))
        for method, alpha in settings
    ]
    return Report(dataset.name, list(metrics), results)


ANSWERED = "answered"
"""Column of :func:`sweep_floors`: the share of answerable queries that get at least one result."""
NO_ANSWER_EMPTY = "no_answer_empty"
"""Column of :func:`sweep_floors`: the share of no-answer queries that get no result at all."""


def check_floor_grids(vector_floors: Iterable[float], bm25_floors: Iterable[float]) -> None:
    """An InvalidParameterError for a floor value out of range (before any work)."""
    FloorOptions.grid(list(vector_floors), list(bm25_floors))


def sweep_floors(
    index: FusionIndex,
    dataset: EvalDataset,
    vector_floors: Iterable[float] = (),
    bm25_floors: Iterable[float] = (),
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    alpha: float = SEARCH_DEFAULTS.alpha,
    method: FusionMethod = SEARCH_DEFAULTS.method,
    fetch_k: int | None = SEARCH_DEFAULTS.fetch_k,
    progress: bool = True,
    tenant: str | None = None,
) -> Report:
    """Score relevance floors on the dataset: what they cost on answerable queries, what they buy on the others.

    One row per setting: no floor, each vector floor alone, each BM25 floor alone and, when both
    lists are given, every pair (a candidate is kept when it clears either floor; see
    :mod:`~langchain_fusion.search.floors`). Each row has the metrics over the answerable
    queries (a query answered with nothing scores 0), :data:`ANSWERED` (the share of them that
    get any result) and, when the dataset has :attr:`~EvalDataset.no_answer` queries,
    :data:`NO_ANSWER_EMPTY` (the share of those that get nothing, which is what a floor is for).
    Choose the floor where ``no_answer_empty`` is high while the metrics and ``answered`` hold.
    The queries are embedded and scored once; every setting reuses the scores. A tenant-keyed
    index is searched in ``tenant``.
    """
    settings = FloorOptions.grid(list(vector_floors), list(bm25_floors))  # each value checked
    base = _sweep_search(deepest_cutoff(metrics), check_alpha(alpha), check_method(method), check_fetch_k(fetch_k))
    everything = [*dataset.queries.items(), *dataset.no_answer.items()]
    searches = [base.model_copy(update=dict(setting)) for setting in settings]
    runs = _sweep_runs(index, everything, searches, "floor sweep", progress, tenant)
    results = [_floor_row(s.label, run, dataset, metrics) for s, run in zip(settings, runs, strict=True)]
    return Report(dataset.name, list(metrics), results)


def _floor_row(name: str, run: Mapping[str, list[str]], dataset: EvalDataset, metrics: Sequence[str]) -> MethodResult:
    """One row of a floor sweep: the metrics over the answerable queries, ``answered`` and ``no_answer_empty``."""
    scored = {query_id: run[query_id] for query_id in dataset.queries}
    extra = {ANSWERED: float(np.mean([bool(ids) for ids in scored.values()])) if scored else 0.0}
    if dataset.no_answer:
        extra[NO_ANSWER_EMPTY] = float(np.mean([not run[query_id] for query_id in dataset.no_answer]))
    return MethodResult(name, evaluate_run(scored, dataset.qrels, metrics), extra=extra)


def ranked_results(
    retriever: BaseRetriever, queries: Sequence[tuple[str, str]], desc: str, progress: bool
) -> dict[str, list[Document]]:
    """Query id -> what ``retriever`` returns for each (id, text) of ``queries``, run in batches with a progress bar."""
    ranked: list[list[Document]] = []
    with tqdm(total=len(queries), desc=desc, disable=not progress, leave=False) as bar:
        for lo in range(0, len(queries), DEFAULT_BATCH_SIZE):
            chunk = [text for _, text in queries[lo : lo + DEFAULT_BATCH_SIZE]]
            ranked.extend(retriever.batch(chunk))
            bar.update(len(chunk))
    return {query_id: docs for (query_id, _), docs in zip(queries, ranked, strict=True)}


def sweep_relevance(
    index: FusionIndex | HierarchicalIndex,
    dataset: EvalDataset,
    floors: Iterable[float],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    progress: bool = True,
    **search: Any,
) -> Report:
    """Score ``min_relevance`` floors on a calibrated index (plain or hierarchical), as :func:`sweep_floors` does.

    One row per floor (and one without): the metrics over the answerable queries, :data:`ANSWERED`
    and, with no-answer queries, :data:`NO_ANSWER_EMPTY`. The queries run once through the
    default retriever (or one with the ``search`` options); a floor only leaves results out, so
    each row filters those results by their relevance.
    """
    require_model(index.relevance_model, "a relevance floor sweep", calibration_kind(index))
    checked = {level for level in map(check_min_relevance, floors) if level is not None}
    levels: list[float | None] = [None, *sorted(checked)]
    depth = deepest_cutoff(metrics)
    everything = [*dataset.queries.items(), *dataset.no_answer.items()]
    found = ranked_results(index.as_retriever(k=depth, **search), everything, "relevance floors", progress)
    results = []
    for level in levels:
        run = {
            query_id: [doc.id or "" for doc in docs if level is None or doc.metadata[keys.RELEVANCE] >= level]
            for query_id, docs in found.items()
        }
        results.append(_floor_row("no floor" if level is None else f"relevance>={level:g}", run, dataset, metrics))
    return Report(dataset.name, list(metrics), results)
