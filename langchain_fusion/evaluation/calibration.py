"""How well a calibrated index's relevance matches the labels: expected calibration error, Brier score, reliability.

:func:`evaluate_calibration` runs every labelled query through a calibrated index, takes the
relevance each of its top ``k`` results carries as the prediction and whether the labels call it
relevant as the outcome, and reports the expected calibration error (10 equal-width bins, as the
fit's own held-out figure), the Brier score and the reliability table: per bin, how many results
fell in it, their mean predicted relevance and the share of them that is relevant.
:func:`~langchain_fusion.evaluation.plots.plot_reliability` draws that table.

On the labels the model was fitted on these figures are in-sample (optimistic); measure on
queries it was not fitted on for figures you can rely on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel, check_k
from langchain_fusion.evaluation.datasets import EvalDataset
from langchain_fusion.evaluation.harness import ranked_results
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex, calibration_kind
from langchain_fusion.search.relevance import expected_calibration_error, probability_bins, require_model

RELIABILITY_BINS = 10
"""Equal-width bins of predicted relevance, as the fit's own expected calibration error uses."""


class ReliabilityBin(CheckedModel):
    """One bin of predicted relevance: how many results fell in it, what they predicted, how many were relevant."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    lower: float
    """The bin's lower edge."""
    upper: float
    """The bin's upper edge (the last bin includes 1.0)."""
    count: int = Field(ge=0)
    """Results whose relevance fell in the bin."""
    predicted: float | None
    """Their mean predicted relevance (None for an empty bin)."""
    observed: float | None
    """The share of them the labels call relevant (None for an empty bin)."""


class CalibrationReport(CheckedModel):
    """Expected calibration error, Brier score and reliability of a relevance model on labelled queries."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    dataset: str
    """The labelled set measured on."""
    queries: int = Field(ge=0)
    """Labelled queries run."""
    k: int = Field(ge=1)
    """Results per query measured (the top ``k``)."""
    results: int = Field(ge=0)
    """Results measured (at most ``k`` per query)."""
    relevant: int = Field(ge=0)
    """How many of them the labels call relevant."""
    expected_calibration_error: float
    """Mean |predicted - observed| over :data:`RELIABILITY_BINS` equal-width bins, weighted by count (0 is perfect)."""
    brier_score: float
    """Mean squared difference between predicted relevance and the label (1 or 0; lower is better)."""
    bins: list[ReliabilityBin]
    """The reliability table, one entry per bin from 0 to 1."""

    def to_markdown(self) -> str:
        """The reliability table as GitHub markdown: bin, results, mean predicted, observed share relevant."""
        lines = ["| predicted relevance | results | mean predicted | observed relevant |", "|---|---:|---:|---:|"]
        for b in self.bins:
            mean = "" if b.predicted is None else f"{b.predicted:.3f}"
            seen = "" if b.observed is None else f"{b.observed:.3f}"
            lines.append(f"| {b.lower:.1f}-{b.upper:.1f} | {b.count} | {mean} | {seen} |")
        return "\n".join(lines)


def calibration_report(
    predicted: Sequence[float] | np.ndarray,
    observed: Sequence[bool] | np.ndarray,
    *,
    dataset: str,
    queries: int,
    k: int,
) -> CalibrationReport:
    """The :class:`CalibrationReport` of predicted relevances against 0/1 outcomes (one pair per result)."""
    p, y = np.asarray(predicted, dtype=np.float64), np.asarray(observed, dtype=np.float64)
    which = probability_bins(p, RELIABILITY_BINS)
    bins = []
    for b in range(RELIABILITY_BINS):
        inside = which == b
        count = int(np.count_nonzero(inside))
        bins.append(
            ReliabilityBin(
                lower=b / RELIABILITY_BINS,
                upper=(b + 1) / RELIABILITY_BINS,
                count=count,
                predicted=float(p[inside].mean()) if count else None,
                observed=float(y[inside].mean()) if count else None,
            )
        )
    return CalibrationReport(
        dataset=dataset,
        queries=queries,
        k=k,
        results=int(p.size),
        relevant=int(y.sum()),
        expected_calibration_error=expected_calibration_error(p, y, RELIABILITY_BINS),
        brier_score=float(np.mean((p - y) ** 2)) if p.size else 0.0,
        bins=bins,
    )


def evaluate_calibration(
    index: FusionIndex | HierarchicalIndex,
    dataset: EvalDataset,
    *,
    k: int | None = None,
    progress: bool = True,
    **search: Any,
) -> CalibrationReport:
    """Measure a calibrated index's relevance on ``dataset``: each query's top ``k``, relevant = in its labels.

    ``index``: a calibrated :class:`FusionIndex`, or a :class:`HierarchicalIndex` calibrated for
    hierarchical search (its own results are measured).

    ``k`` defaults to the depth the model was fitted at; ``search`` are search options (e.g.
    ``fetch_k``: use those you query with). Labels are matched by ``Document.id``, as
    :meth:`~langchain_fusion.index.fusion_index.FusionIndex.calibrate` matches them. No-answer
    queries take no part (they have no labels; see
    :func:`~langchain_fusion.evaluation.harness.sweep_relevance` for them).
    """
    model = require_model(index.relevance_model, "a calibration report", calibration_kind(index))
    depth = model.k if k is None else check_k(k)
    retriever = index.as_retriever(k=depth, **search)
    found = ranked_results(retriever, list(dataset.queries.items()), "calibration", progress)
    predicted: list[float] = []
    observed: list[bool] = []
    for query_id, docs in found.items():
        judged = dataset.qrels.get(query_id, {})
        predicted.extend(float(doc.metadata[keys.RELEVANCE]) for doc in docs)
        observed.extend(judged.get(str(doc.id), 0) > 0 for doc in docs)
    return calibration_report(predicted, observed, dataset=dataset.name, queries=len(found), k=depth)
