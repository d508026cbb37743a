"""Measuring retrieval quality: metrics, datasets, a harness, alpha sweeps and plots."""

from langchain_fusion.evaluation.datasets import EvalDataset, Qrels, load_beir, load_labelled, load_queries
from langchain_fusion.evaluation.harness import (
    DEFAULT_METRICS,
    SIDES,
    MethodResult,
    Report,
    alpha_grid,
    evaluate_retrievers,
    evaluate_sides,
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
    "SIDES",
    "alpha_grid",
    "evaluate_retrievers",
    "evaluate_run",
    "evaluate_sides",
    "load_beir",
    "load_labelled",
    "load_queries",
    "mean_scores",
    "parse_metric",
    "plot_alpha_sweep",
    "sweep_alpha",
    "sweep_floors",
]
