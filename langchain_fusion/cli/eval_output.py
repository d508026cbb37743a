"""The results of an ``eval`` run (:class:`EvalResults`), printed as tables or as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from langchain_fusion.cli.eval_plan import EvalPlan
from langchain_fusion.search.options import SEARCH_DEFAULTS


@dataclass
class EvalResults:
    """The results of an ``eval`` run, as JSON or as tables."""

    dataset: Any
    """The labelled queries (an EvalDataset)."""
    index: Any
    """The index evaluated (a hierarchical folder's chunk index)."""
    baselines: Any
    """Vector, BM25, fusion and the extra rows at the defaults (an EvalReport of the harness)."""
    sweep: Any
    """The alpha sweep of every method."""
    floors: Any
    """The sweep of raw-score floors (--vector-floors, --bm25-floors), or None."""
    comparisons: list[dict[str, Any]]
    """Query-by-query wins, losses and ties: fusion against each side, each pipeline row against fusion."""
    best: dict[str, dict[str, float]]
    """Per method: its best alpha and that alpha's value of the first metric."""
    plot_path: str | None
    """Where the alpha plot was saved (--plot), or None."""
    calibration: Any = None
    """The relevance model fitted by --calibrate, or None."""
    relevance: Any = None
    """The sweep of relevance floors (--relevance-floors), or None."""
    checked: Any = None
    """The calibration check on the labels (a CalibrationReport), when the index is calibrated."""
    reliability_plot: str | None = None
    """Where the reliability diagram was saved (--reliability-plot), or None."""
    report_path: str | None = None
    """Where the report was saved (--report), or None."""
    baseline: Any = None
    """The comparison with --baseline (a BaselineComparison)."""
    baseline_path: str | None = None
    """The baseline report's file (--baseline), or None."""
    calibrated: Any = None
    """Whose relevance is calibrated: the index, or for a hierarchical folder the hierarchical index."""
    tenant: str | None = None
    """The tenant evaluated on a tenant-keyed index (--tenant), or None."""

    @property
    def chunks(self) -> int:
        """The chunks searched: the tenant's on a tenant-keyed index."""
        return len(self.index.view(self.tenant)) if self.tenant is not None else len(self.index)

    @property
    def searched(self) -> str:
        """The search the calibrated relevance belongs to, as the text says it ("" for fused search)."""
        return "" if self.calibrated is self.index else " of hierarchical search"

    def payload(self) -> dict[str, Any]:
        """The results as JSON values (``eval --json``)."""
        by_kind = self.baselines.by_kind(self.dataset.kinds)
        return {
            "dataset": self.dataset.name,
            "queries": len(self.dataset.queries),
            "retrievers": self.baselines.rows(),
            "by_kind": {
                kind: {"queries": len(report.results[0].per_query), "retrievers": report.rows()}
                for kind, report in by_kind.items()
            },
            "sweep": self.sweep.rows(),
            "best_alpha": self.best,
            "per_query": self.comparisons,
            "floors": self.floors.rows() if self.floors is not None else None,
            "plot": self.plot_path,
            "calibration": self.calibration.model_dump(mode="json") if self.calibration is not None else None,
            "relevance_floors": self.relevance.rows() if self.relevance is not None else None,
            "calibration_check": self.checked.model_dump(mode="json") if self.checked is not None else None,
            "reliability_plot": self.reliability_plot,
            "report": self.report_path,
            "baseline": self._baseline_payload(),
        }

    def _ends_differ(self, plan: EvalPlan, metric: str) -> bool:
        """Whether a sweep cell at alpha 1 (0) differs from the vector (bm25) row: copies are collapsed in one only."""
        names = {r.name for r in self.baselines.results}
        for side, alpha in (("vector", 1.0), ("bm25", 0.0)):
            if side not in names or alpha not in plan.alphas:
                continue
            side_value = self.baselines.result(side).means[metric]
            for method in plan.methods:
                if abs(self.sweep.result(f"{method}@{alpha:g}").means[metric] - side_value) > 1e-9:
                    return True
        return False

    def _baseline_payload(self) -> dict[str, Any] | None:
        if self.baseline is None:
            return None
        return {
            "file": self.baseline_path,
            "queries": self.baseline.queries,
            "significance": self.baseline.significance,
            "comparisons": [asdict(c) for c in self.baseline.comparisons],
            "worse": len(self.baseline.worse),
            "not_compared": {"rows": self.baseline.skipped_methods, "metrics": self.baseline.skipped_metrics},
        }

    def text(self, plan: EvalPlan) -> str:
        """The results as tables and lines for people."""
        dataset, main_metric = self.dataset, plan.metrics[0]
        of_tenant = f" of tenant {self.tenant!r}" if self.tenant is not None else ""
        lines = [f"{dataset.name}: {len(dataset.queries)} queries, {self.chunks} chunks{of_tenant}\n"]
        lines.append(self.baselines.to_markdown())
        if self.baselines.by_kind(dataset.kinds):
            lines += [f"\nby kind of query ({main_metric}):\n", self.baselines.kind_table(dataset.kinds, main_metric)]
        lines.append(f"\nalpha sweep ({main_metric}, fetch_k={plan.fetch_k}):\n")
        lines.append(_sweep_grid(self.sweep, plan.methods, plan.alphas, main_metric))
        if self._ends_differ(plan, main_metric):
            lines.append(
                f"note: the sweep searches as fusion (defaults) does, returning the copies of one text once "
                f"(duplicates={SEARCH_DEFAULTS.duplicates}); the vector and bm25 rows return every copy, so alpha 1 "
                "and 0 differ from them here"
            )
        best = ", ".join(f"{m} {b['alpha']:g} ({b[main_metric]:.4f})" for m, b in self.best.items())
        lines.append(f"\nbest alpha: {best}")
        for comparison in self.comparisons:
            label = "fusion" if comparison["method"] == "fusion (defaults)" else comparison["method"]
            lines.append(
                f"{label} vs {comparison['baseline']} on {main_metric}: {comparison['wins']} queries better, "
                f"{comparison['losses']} worse, {comparison['ties']} tied"
            )
        if self.floors is not None:
            lines.append(
                f"\nrelevance floors ({SEARCH_DEFAULTS.method}, alpha={SEARCH_DEFAULTS.alpha:g}, "
                f"fetch_k={plan.fetch_k}; {len(dataset.queries)} answerable and {len(dataset.no_answer)} no-answer "
                "queries):\n"
            )
            lines.append(self.floors.to_markdown())
        if self.relevance is not None:
            lines.append(
                f"\nrelevance floors (min_relevance{self.searched}; {len(dataset.queries)} answerable and "
                f"{len(dataset.no_answer)} no-answer queries):\n"
            )
            lines.append(self.relevance.to_markdown())
        if self.plot_path:
            lines.append(f"plot saved to {self.plot_path}")
        if self.calibration is not None:
            quality = self.calibration.quality
            lines.append(
                f"\ncalibrated relevance{self.searched} saved into the index: fitted on {quality.queries} queries "
                f"({quality.results} results, {quality.relevant} relevant); held out: expected calibration error "
                f"{quality.expected_calibration_error:.4f}, Brier score {quality.brier_score:.4f}"
            )
        lines += self._calibration_lines() + self._baseline_lines()
        return "\n".join(lines)

    def _calibration_lines(self) -> list[str]:
        checked = self.checked
        if checked is None:
            return []
        fitted_here = self.calibrated.relevance_model.dataset == checked.dataset
        note = " (the labels it was fitted on: in-sample, optimistic)" if fitted_here else ""
        lines = [
            f"\nrelevance{self.searched} on the labels{note}: top {checked.k} of {checked.queries} queries, "
            f"{checked.results} results ({checked.relevant} relevant): expected calibration error "
            f"{checked.expected_calibration_error:.4f}, "
            f"Brier score {checked.brier_score:.4f}\n",
            checked.to_markdown(),
        ]
        if self.reliability_plot:
            lines.append(f"reliability plot saved to {self.reliability_plot}")
        return lines

    def _baseline_lines(self) -> list[str]:
        lines = [f"\nreport saved to {self.report_path}"] if self.report_path else []
        comparison = self.baseline
        if comparison is None:
            return lines
        level = f"{(1 - comparison.significance) * 100:g}%"
        lines += [
            f"\ncompared with {self.baseline_path} ({comparison.queries} queries paired; {level} bootstrap intervals, "
            "p-values of a paired randomization test):\n",
            comparison.to_markdown(),
        ]
        if comparison.skipped_methods or comparison.skipped_metrics:
            skipped = [*comparison.skipped_methods, *comparison.skipped_metrics]
            lines.append(f"not in the baseline, not compared: {', '.join(skipped)}")
        worse = len(comparison.worse)
        lines.append(
            f"{worse} significantly worse (p < {comparison.significance:g})" if worse else "nothing significantly worse"
        )
        return lines


def _sweep_grid(sweep: Any, methods: Sequence[str], alphas: Sequence[float], metric: str) -> str:
    values = {r.name: r.means[metric] for r in sweep.results}
    lines = ["| alpha | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for alpha in alphas:
        cells = [f"{values[f'{m}@{alpha:g}']:.4f}" for m in methods]
        lines.append(f"| {alpha:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
