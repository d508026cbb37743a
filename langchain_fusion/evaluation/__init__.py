"""Measuring retrieval quality: metrics, datasets, a harness, alpha sweeps, calibration, saved reports and plots."""

from langchain_fusion.evaluation.calibration import CalibrationReport, ReliabilityBin, evaluate_calibration
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
    sweep_relevance,
)
from langchain_fusion.evaluation.metrics import METRICS, evaluate_run, mean_scores, parse_metric
from langchain_fusion.evaluation.plots import plot_alpha_sweep, plot_reliability
from langchain_fusion.evaluation.reports import BaselineComparison, EvalReport, MetricComparison, compare_reports
from langchain_fusion.evaluation.significance import PairedTest, paired_test

__all__ = [
    "DEFAULT_METRICS",
    "METRICS",
    "BaselineComparison",
    "CalibrationReport",
    "EvalDataset",
    "EvalReport",
    "MethodResult",
    "MetricComparison",
    "PairedTest",
    "Qrels",
    "ReliabilityBin",
    "Report",
    "SIDES",
    "alpha_grid",
    "compare_reports",
    "evaluate_calibration",
    "evaluate_retrievers",
    "evaluate_run",
    "evaluate_sides",
    "load_beir",
    "load_labelled",
    "load_queries",
    "mean_scores",
    "paired_test",
    "parse_metric",
    "plot_alpha_sweep",
    "plot_reliability",
    "sweep_alpha",
    "sweep_floors",
    "sweep_relevance",
]
