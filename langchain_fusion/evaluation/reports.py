"""Saved evaluation reports, and a paired comparison of a run with a saved baseline (a CI gate).

An :class:`EvalReport` is a JSON file with a format name and version (:data:`REPORT_VERSION`):
the dataset, the metrics, the query ids and, for every row of the run (vector, BM25, fusion,
rerank...), each query's metric values, so a later run on the same queries can be paired with
it; a calibrated index's :class:`~langchain_fusion.evaluation.calibration.CalibrationReport` is
kept too. ``langchain-fusion eval --report FILE`` writes one, ``--baseline FILE`` compares with
one (:func:`compare_reports`) and ``--fail-if-worse`` turns a significantly worse metric into a
failing exit status.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from langchain_fusion._checks import CheckedModel, describe_validation, is_real_number
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.evaluation.calibration import CalibrationReport
from langchain_fusion.evaluation.files import read_text
from langchain_fusion.evaluation.harness import Report
from langchain_fusion.evaluation.significance import DEFAULT_RESAMPLES, DEFAULT_SEED, paired_test

REPORT_FORMAT: Final = "langchain-fusion eval report"
"""The ``format`` field of every saved report."""

REPORT_VERSION = 1
"""The version of the report schema this library writes and reads."""

DEFAULT_SIGNIFICANCE = 0.05
"""Significance level of :func:`compare_reports`: a worse metric with a p-value below it fails the gate."""


class MethodScores(CheckedModel):
    """One row of a saved report: its mean metric values and each query's."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    means: dict[str, float]
    """Metric -> mean over the queries."""
    per_query: dict[str, dict[str, float]]
    """Query id -> metric -> value."""


class EvalReport(CheckedModel):
    """A saved evaluation: per-query metric values of every row, so a later run can be paired with it."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    format: Literal["langchain-fusion eval report"] = REPORT_FORMAT
    """Always :data:`REPORT_FORMAT`: what the file is."""
    version: int = REPORT_VERSION
    """The schema version (:data:`REPORT_VERSION`)."""
    library_version: str
    """The langchain-fusion version that wrote it."""
    dataset: str
    """The labelled set's name."""
    metrics: list[str]
    """Metric names, in column order."""
    queries: list[str]
    """The ids of the queries every row was scored on."""
    methods: dict[str, MethodScores]
    """Row name (``vector``, ``bm25``, ``fusion (defaults)``, ...) -> its scores."""
    calibration: CalibrationReport | None = None
    """How well the index's relevance matched these labels, when it was calibrated."""
    settings: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    """What the run was made with (e.g. ``fetch_k``, the index's chunk count), for the reader."""

    @model_validator(mode="after")
    def _complete(self) -> EvalReport:
        if self.version != REPORT_VERSION:
            raise ValueError(
                f"report format version {self.version}; this langchain-fusion reads version {REPORT_VERSION} "
                "(make the report again with this version)"
            )
        expected = set(self.queries)
        for name, scores in self.methods.items():
            if set(scores.per_query) != expected:
                raise ValueError(f"row {name!r} does not have a value for every query of the report")
            for query, values in scores.per_query.items():
                if set(values) != set(self.metrics) or not all(is_real_number(v) for v in values.values()):
                    raise ValueError(f"row {name!r} does not have a finite value of every metric for every query")
                _check_metric_values(values, f"row {name!r}, query {query!r}")
            _check_metric_values(scores.means, f"row {name!r}, its mean")
        return self

    @classmethod
    def from_report(
        cls,
        report: Report,
        *,
        calibration: CalibrationReport | None = None,
        settings: Mapping[str, str | int | float | bool | None] | None = None,
    ) -> EvalReport:
        """The saved form of a harness :class:`~langchain_fusion.evaluation.harness.Report` (its rows, per query)."""
        from langchain_fusion._version import library_version as version

        queries = list(report.results[0].per_query) if report.results else []
        methods = {
            r.name: MethodScores(means=r.means, per_query={q: dict(v) for q, v in r.per_query.items()})
            for r in report.results
        }
        return cls(
            library_version=version(),
            dataset=report.dataset,
            metrics=list(report.metrics),
            queries=queries,
            methods=methods,
            calibration=calibration,
            settings=dict(settings or {}),
        )

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON to ``path`` (replaced whole: a crash leaves the old file or the new one)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.tmp")
        staging.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")
        os.replace(staging, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        """Read a report written by :meth:`save`; one clear error if it is missing, not a report, or invalid."""
        path = Path(path)
        missing = f"{path}: no such report; write one with langchain-fusion eval --report FILE"
        text = read_text(path, "report", missing, "a report written by eval --report FILE")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise FusionError(f"{path}: not an evaluation report (not valid JSON)") from None
        except ValueError:  # Python reads integers of at most 4,300 digits
            raise FusionError(f"{path}: not valid JSON (a number of more than 4300 digits)") from None
        if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
            raise FusionError(
                f'{path}: not a langchain-fusion evaluation report (no "format": "{REPORT_FORMAT}"); write one '
                "with langchain-fusion eval --report FILE"
            )
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise FusionError(f"{path}: not a valid evaluation report: {describe_validation('report', exc)}") from None


def _check_metric_values(values: Mapping[str, float], where: str) -> None:
    """A ValueError naming the first value outside [0, 1]: every metric (hit rate, recall, nDCG...) is a share."""
    for metric, value in values.items():
        if not (is_real_number(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"{where} has {metric} = {value!r:.40}; every metric is between 0 and 1")


@dataclass(frozen=True)
class MetricComparison:
    """One row's metric in the current run against the baseline: the paired difference and its test."""

    method: str
    """The row (``fusion (defaults)``, ...)."""
    metric: str
    """The metric (``ndcg@10``, ...)."""
    baseline: float
    """Its mean in the baseline report."""
    current: float
    """Its mean in the current run."""
    delta: float
    """current - baseline (the mean of the per-query differences)."""
    low: float
    """Lower end of the delta's bootstrap confidence interval."""
    high: float
    """Upper end of that interval."""
    p_value: float
    """Two-sided p-value of the paired randomization test."""
    worse: bool
    """Significantly worse: the delta is negative and the p-value below the significance level."""


@dataclass(frozen=True)
class BaselineComparison:
    """A run compared with a baseline report, row by row and metric by metric (:func:`compare_reports`)."""

    queries: int
    """Queries paired."""
    significance: float
    """The significance level (intervals are at 1 - significance)."""
    comparisons: list[MetricComparison]
    """One per (row, metric) both reports have, in the current run's order."""
    skipped_methods: list[str] = field(default_factory=list)
    """Rows of the current run the baseline does not have (not compared)."""
    skipped_metrics: list[str] = field(default_factory=list)
    """Metrics of the current run the baseline does not have (not compared)."""

    @property
    def worse(self) -> list[MetricComparison]:
        """The comparisons that are significantly worse: what ``--fail-if-worse`` fails on."""
        return [c for c in self.comparisons if c.worse]

    def to_markdown(self) -> str:
        """The comparisons as GitHub markdown: baseline, current, delta with its interval, p-value, verdict."""
        level = f"{(1 - self.significance) * 100:g}%"
        lines = [
            f"| row | metric | baseline | current | delta | {level} interval | p-value | |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for c in self.comparisons:
            verdict = "worse" if c.worse else ("better" if c.delta > 0 and c.p_value < self.significance else "")
            lines.append(
                f"| {c.method} | {c.metric} | {c.baseline:.4f} | {c.current:.4f} | {c.delta:+.4f} | "
                f"{c.low:+.4f} .. {c.high:+.4f} | {c.p_value:.4f} | {verdict} |"
            )
        return "\n".join(lines)


def check_significance(value: Any) -> float:
    """The significance level: a number strictly between 0 and 1."""
    if not (is_real_number(value) and 0.0 < float(value) < 1.0):
        raise InvalidParameterError(f"the significance level must be between 0 and 1, e.g. 0.05; got {value!r}")
    return float(value)


def check_same_queries(query_ids: Collection[str], dataset: str, baseline: EvalReport) -> None:
    """A FusionError saying how the query sets differ, unless ``query_ids`` (of ``dataset``) are the baseline's."""
    ours, theirs = set(query_ids), set(baseline.queries)
    if ours == theirs:
        return
    new, gone = sorted(ours - theirs), sorted(theirs - ours)
    raise FusionError(
        f"the baseline was made on another query set ({baseline.dataset!r}, {len(theirs)} queries; this run: "
        f"{dataset!r}, {len(ours)}): {len(new)} of this run's queries are not in it{_examples(new)} and "
        f"{len(gone)} of its queries are not in this run{_examples(gone)}; compare runs on the same labelled queries"
    )


def _examples(ids: list[str]) -> str:
    return f" ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})" if ids else ""


def compare_reports(
    current: EvalReport,
    baseline: EvalReport,
    *,
    significance: float = DEFAULT_SIGNIFICANCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> BaselineComparison:
    """Pair ``current`` with ``baseline`` query by query: every row and metric both have gets a paired test.

    Refuses (FusionError) reports on different query sets, or with no row or no metric in common.
    A comparison is ``worse`` when its delta is negative with a p-value below ``significance``
    (see :func:`~langchain_fusion.evaluation.significance.paired_test`; the intervals are at
    ``1 - significance``).
    """
    significance = check_significance(significance)
    check_same_queries(current.queries, current.dataset, baseline)
    methods = [m for m in current.methods if m in baseline.methods]
    metrics = [m for m in current.metrics if m in baseline.metrics]
    if not methods or not metrics:
        missing = "row" if not methods else "metric"
        raise FusionError(
            f"the baseline has no {missing} in common with this run (its rows: {', '.join(baseline.methods)}; its "
            f"metrics: {', '.join(baseline.metrics)}); run eval with the same --metrics and rows"
        )
    queries = sorted(current.queries)
    comparisons = []
    for method in methods:
        ours, theirs = current.methods[method].per_query, baseline.methods[method].per_query
        for metric in metrics:
            a, b = [ours[q][metric] for q in queries], [theirs[q][metric] for q in queries]
            test = paired_test(a, b, confidence=1 - significance, resamples=resamples, seed=seed)
            comparisons.append(
                MetricComparison(
                    method=method,
                    metric=metric,
                    baseline=sum(b) / len(b),
                    current=sum(a) / len(a),
                    delta=test.delta,
                    low=test.low,
                    high=test.high,
                    p_value=test.p_value,
                    worse=test.delta < 0 and test.p_value < significance,
                )
            )
    return BaselineComparison(
        queries=len(queries),
        significance=significance,
        comparisons=comparisons,
        skipped_methods=[m for m in current.methods if m not in baseline.methods],
        skipped_metrics=[m for m in current.metrics if m not in baseline.metrics],
    )
