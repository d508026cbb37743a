"""Plots: an alpha sweep (one line per fusion method, with the single-side baselines), and reliability."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from langchain_fusion.errors import MissingDependencyError
from langchain_fusion.evaluation.calibration import CalibrationReport
from langchain_fusion.evaluation.harness import Report


def _pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, or the error that says how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("plots need matplotlib: pip install 'langchain-fusion[eval]'") from None
    return plt


def _save(plt: Any, figure: Any, path: str | Path) -> Path:
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # No timestamp or software version in the file: the same figures give the same bytes.
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return path


def plot_alpha_sweep(sweep: Report, metric: str, path: str | Path, *, title: str | None = None) -> Path:
    """Save a PNG of ``metric`` against alpha for each method in a :func:`sweep_alpha` report.

    Dashed horizontal lines mark vector-only (alpha=1) and BM25-only (alpha=0), read from the
    weighted rows when present. Needs matplotlib (the ``eval`` extra).
    """
    plt = _pyplot()
    curves: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for result in sweep.results:
        method, _, alpha = result.name.partition("@")
        curves[method].append((float(alpha), result.means[metric]))
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for method, points in curves.items():
        points.sort()
        axes.plot([a for a, _ in points], [v for _, v in points], marker="o", markersize=3, label=method)
    ends = dict(next(iter(curves.values()))) if curves else {}
    if 1.0 in ends:
        axes.axhline(ends[1.0], color="tab:gray", linestyle="--", linewidth=1, label="vector only (alpha=1)")
    if 0.0 in ends:
        axes.axhline(ends[0.0], color="black", linestyle=":", linewidth=1, label="BM25 only (alpha=0)")
    axes.set_xlabel("alpha (weight of the vector side)")
    axes.set_ylabel(metric)
    axes.set_title(title or f"{metric} vs alpha on {sweep.dataset}")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return _save(plt, figure, path)


def plot_reliability(report: CalibrationReport, path: str | Path, *, title: str | None = None) -> Path:
    """Save a PNG reliability diagram of an :func:`evaluate_calibration` report.

    Top: per bin of predicted relevance, the share of its results that is relevant against their
    mean predicted relevance (on the diagonal when calibrated), each point labelled with its count.
    Bottom: how many results fall in each bin. Needs matplotlib (the ``eval`` extra).
    """
    plt = _pyplot()
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(5.5, 6), dpi=120, sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    filled = [b for b in report.bins if b.count]
    top.plot([0, 1], [0, 1], color="tab:gray", linestyle="--", linewidth=1, label="perfectly calibrated")
    top.plot(
        [b.predicted for b in filled], [b.observed for b in filled], marker="o", color="tab:blue", label="observed"
    )
    for b in filled:
        top.annotate(str(b.count), (b.predicted, b.observed), textcoords="offset points", xytext=(4, -10), fontsize=7)
    top.set_xlim(0, 1)
    top.set_ylim(-0.02, 1.04)  # room for a point at 0 or 1
    top.set_ylabel("share relevant (labels)")
    top.grid(alpha=0.3)
    top.legend(fontsize=8, loc="upper left")
    top.set_title(
        title
        or f"Reliability on {report.dataset}: ECE {report.expected_calibration_error:.3f}, "
        f"Brier {report.brier_score:.3f}",
        fontsize=10,
    )
    width = [b.upper - b.lower for b in report.bins]
    bottom.bar([b.lower for b in report.bins], [b.count for b in report.bins], width=width, align="edge",
               color="tab:blue", alpha=0.5, edgecolor="white")  # fmt: skip
    bottom.set_xlabel(f"predicted relevance (top {report.k} of {report.queries} queries, {report.results} results)")
    bottom.set_ylabel("results")
    bottom.grid(alpha=0.3)
    return _save(plt, figure, path)
