"""Measuring retrieval quality: metrics, datasets, a harness, alpha sweeps and plots."""

from langchain_fusion.evaluation.datasets import EvalDataset, Qrels, load_beir, load_labelled, load_queries
from langchain_fusion.evaluation.harness import (
    DEFAULT_METRICS,
    MethodResult,
    Report,
    alpha_grid,
    evaluate_retrievers,
    sweep_alpha,
    sweep_floors,
)
from langchain_fusion.evaluation.metrics import METRICS, evaluate_run, mean_scores, parse_metric
from langchain_fusion.evaluation.plots import plot_alpha_sweep

__all__ = [
    "DEFAULT_METRICS",
    "METRICS",
    "EvalDataset",
    "MethodResult",
    "Qrels",
    "Report",
    "alpha_grid",
    "evaluate_retrievers",
    "evaluate_run",
    "load_beir",
    "load_labelled",
    "load_queries",
    "mean_scores",
    "parse_metric",
    "plot_alpha_sweep",
    "sweep_alpha",
    "sweep_floors",
]
