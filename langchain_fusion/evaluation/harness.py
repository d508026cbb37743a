"""Running retrievers over an evaluation dataset: metric tables, alpha sweeps, per-query wins.

``evaluate_retrievers`` runs any LangChain retrievers (timing each query). ``sweep_alpha``
scores a FusionIndex for many (method, alpha) pairs cheaply: each query is embedded and
scored on both sides once (:func:`~langchain_fusion.search.pool.query_scorers`), then fused for
every setting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from tqdm import tqdm

from langchain_fusion import metadata as keys
from langchain_fusion._checks import FusionMethod, check_alpha, check_method
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.evaluation.datasets import EvalDataset
from langchain_fusion.evaluation.metrics import evaluate_run, mean_scores, parse_metric
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.search.pool import fused_search, query_scorers

DEFAULT_METRICS = ("ndcg@10", "recall@10", "mrr@10", "hit_rate@5")
"""Metrics reported when none are asked for."""


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
    """Wall-clock time of each query, when measured."""

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
        """One dict per method: name, mean metric values, latency p50/p95 (ms) when measured."""
        rows: list[dict[str, object]] = []
        for result in self.results:
            row: dict[str, object] = {"method": result.name, **result.means}
            if result.latencies_ms:
                row["p50_ms"], row["p95_ms"] = result.latency(0.5), result.latency(0.95)
            rows.append(row)
        return rows

    def to_markdown(self) -> str:
        """The table as GitHub markdown, metrics with 4 decimals and latencies with 1."""
        rows = self.rows()
        columns = ["method", *self.metrics] + (["p50_ms", "p95_ms"] if any("p50_ms" in r for r in rows) else [])
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
        for row in rows:
            cells = []
            for column in columns:
                value = row.get(column)
                if isinstance(value, float):
                    cells.append(f"{value:.1f}" if column.endswith("_ms") else f"{value:.4f}")
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
) -> Report:
    """Run each retriever on every query and score it; any LangChain retriever works.

    Each retriever is asked for as many documents as the deepest metric cutoff (through its
    ``k`` field, or ``search_kwargs["k"]`` for a vector-store retriever; others return what
    they return). Results are matched to the labels by ``Document.id``; a result whose id is
    not one of the corpus's (another store's ids, or none) is matched by its source and
    ``chunk_index`` in ``documents`` (default: the dataset's corpus). Results that match
    nothing count as not relevant, and a retriever none of whose results can be matched is
    warned about instead of silently scoring 0. Latency is measured per query around ``invoke``.
    """
    depth = deepest_cutoff(metrics)
    matcher = _LabelMatcher(documents if documents is not None else dataset.corpus)
    results = []
    for name, retriever in retrievers.items():
        deep = _at_depth(retriever, depth)
        run: dict[str, list[str]] = {}
        latencies = []
        unmatched = total = 0
        for query_id, text in tqdm(dataset.queries.items(), desc=name, disable=not progress, leave=False):
            start = time.perf_counter()
            docs = deep.invoke(text)
            latencies.append((time.perf_counter() - start) * 1000)
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
        results.append(MethodResult(name, evaluate_run(run, dataset.qrels, metrics), latencies))
    return Report(dataset.name, list(metrics), results)


def _at_depth(retriever: BaseRetriever, depth: int) -> BaseRetriever:
    """A copy of ``retriever`` that returns ``depth`` documents, where it has a knob for it."""
    fields = type(retriever).model_fields
    if "k" in fields:
        return retriever.model_copy(update={"k": depth})
    if "search_kwargs" in fields:
        search_kwargs = dict(getattr(retriever, "search_kwargs", None) or {})
        return retriever.model_copy(update={"search_kwargs": {**search_kwargs, "k": depth}})
    return retriever


class _LabelMatcher:
    """Maps a retrieved document to the corpus id the labels use."""

    def __init__(self, corpus: Sequence[Document]) -> None:
        self.ids = {doc.id for doc in corpus if doc.id is not None}
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
            f"alpha grid {spec!r}: use START:STOP:STEP (e.g. 0:1:0.1) or a list (0.3,0.5,0.7)"
        ) from None
    if not values:
        raise InvalidParameterError(f"alpha grid {spec!r} is empty")
    return [check_alpha(v) for v in values]


def sweep_alpha(
    index: FusionIndex,
    dataset: EvalDataset,
    alphas: Iterable[float],
    methods: Sequence[FusionMethod] = ("weighted", "zscore", "rrf"),
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    fetch_k: int | None = 100,
    progress: bool = True,
) -> Report:
    """Score every (method, alpha) pair on the dataset; one result row per pair.

    Rows are named ``METHOD@ALPHA`` (``weighted@0.5``). ``alpha=1`` is vector-only and
    ``alpha=0`` BM25-only for every method.
    """
    alphas = [check_alpha(a) for a in alphas]
    methods = [check_method(m) for m in methods]
    depth = deepest_cutoff(metrics)
    vectors = {
        qid: index.embed_query(text)
        for qid, text in tqdm(dataset.queries.items(), desc="embedding queries", disable=not progress, leave=False)
    }
    view = index.view()
    scorers = {qid: query_scorers(view, text, vectors[qid]) for qid, text in dataset.queries.items()}
    results = []
    settings = [(m, a) for m in methods for a in alphas]
    for method, alpha in tqdm(settings, desc="alpha sweep", disable=not progress, leave=False):
        run = {}
        for query_id, text in dataset.queries.items():
            hits = fused_search(
                view,
                text,
                vectors[query_id],
                k=depth,
                alpha=alpha,
                fetch_k=fetch_k,
                method=method,
                where=None,
                scorers=scorers[query_id],
            )
            documents = view.documents(np.fromiter((h.key for h in hits), dtype=np.int64, count=len(hits)))
            run[query_id] = [doc.id or "" for doc in documents]
        results.append(MethodResult(f"{method}@{alpha:g}", evaluate_run(run, dataset.qrels, metrics)))
    return Report(dataset.name, list(metrics), results)
