"""Plotting an alpha sweep: one line per fusion method, with the single-side baselines."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from langchain_fusion.errors import MissingDependencyError
from langchain_fusion.evaluation.harness import Report


def plot_alpha_sweep(sweep: Report, metric: str, path: str | Path, *, title: str | None = None) -> Path:
    """Save a PNG of ``metric`` against alpha for each method in a :func:`sweep_alpha` report.

    Dashed horizontal lines mark vector-only (alpha=1) and BM25-only (alpha=0), read from the
    weighted rows when present. Needs matplotlib (the ``eval`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("plots need matplotlib: pip install 'langchain-fusion[eval]'") from None
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
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
