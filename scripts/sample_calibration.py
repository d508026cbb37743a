"""Calibrated relevance on the bundled sample: the README's table and ``docs/sample-reliability.png``.

Usage (from the repository root, with the ``local`` and ``eval`` extras; ``make sample-calibration``)::

    python scripts/sample_calibration.py                 # prints the table, writes the plot
    python scripts/sample_calibration.py --plot out.png  # the plot elsewhere

It indexes ``data/`` as ``langchain-fusion index data`` does (the bundled all-MiniLM-L6-v2), then
fits the relevance model twice with ``index.calibrate`` and default search settings:

- on all 54 labelled queries of ``data/queries.json``, measured on those same queries (in-sample,
  the figures ``eval --calibrate`` prints);
- on the odd-numbered 27 (q01, q03, ...), measured on the even-numbered 27 it never saw (held out;
  the kinds of query alternate, so both halves hold all three kinds).

Each row gives the share of its measured queries still answered at ``min_relevance=0.3`` (at least
one result), the share of the 16 questions of ``data/no-answer.json`` that get nothing at 0.3,
and the expected calibration error (10 bins) and Brier score of the relevance of the top 10 results
against the labels (``evaluation.evaluate_calibration``). The plot is the held-out row's reliability.

A second table (``docs/enrichment-and-hierarchy.md``) does the held-out measure for hierarchical
search, with each page's (or section's) leading 600 characters as its summary
(``leading_text_summaries``: no chat model) and default options: fused search with its own model,
hierarchical search with the flat model (the mistake a separate calibration avoids), and
hierarchical search with its own model (``HierarchicalIndex.calibrate``).
Everything is deterministic: a rerun prints the same tables and writes the same PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
PLOT = REPO / "docs" / "sample-reliability.png"
FLOOR = 0.3


def measure(index: Any) -> tuple[str, Any]:
    """The README's table (markdown) for a FusionIndex of ``data/``, and the held-out row's CalibrationReport."""
    part = parts(index)
    rows = [
        ("all 54 (in-sample)", part("all 54", None), part("all 54", None)),
        ("the 27 odd-numbered, measured on the 27 others (held out)", part("odd 27", 0), part("even 27", 1)),
    ]
    lines = [
        f"| relevance fitted on | answered at {FLOOR:g} | no-answer abstained at {FLOOR:g} | ECE | Brier |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, fit, measured in rows:
        index.calibrate(fit)
        row, checked = table_row(label, index, measured)
        lines.append(row)
    return "\n".join(lines), checked


def parts(index: Any) -> Callable[[str, int | None], Any]:
    """``part(name, parity)``: the labelled queries of ``data/`` at even (0) or odd (1) positions (None: all)."""
    from langchain_fusion.evaluation import EvalDataset, load_labelled, load_queries

    labelled = load_labelled(DATA / "queries.json", index.documents)
    no_answer = load_queries(DATA / "no-answer.json")

    def part(name: str, parity: int | None) -> EvalDataset:
        ids = [q for i, q in enumerate(labelled.queries) if parity is None or i % 2 == parity]
        queries = {q: labelled.queries[q] for q in ids}
        return EvalDataset(name, queries, {q: labelled.qrels[q] for q in ids}, no_answer=dict(no_answer))

    return part


def table_row(label: str, calibrated: Any, measured: Any) -> tuple[str, Any]:
    """One row (answered and abstained at the floor, ECE, Brier) of a calibrated index on ``measured``."""
    from langchain_fusion.evaluation import evaluate_calibration
    from langchain_fusion.evaluation.harness import ANSWERED, NO_ANSWER_EMPTY, sweep_relevance

    checked = evaluate_calibration(calibrated, measured, progress=False)
    floored = sweep_relevance(calibrated, measured, [FLOOR], ["ndcg@10"], progress=False).results[-1].extra
    answered, abstained = floored[ANSWERED], floored[NO_ANSWER_EMPTY]
    queries, no_answer = len(measured.queries), len(measured.no_answer)
    row = (
        f"| {label} | {round(answered * queries)}/{queries} | {round(abstained * no_answer)}/{no_answer} | "
        f"{checked.expected_calibration_error:.3f} | {checked.brier_score:.3f} |"
    )
    return row, checked


def measure_hierarchical(index: Any) -> str:
    """The hierarchical table (markdown) for a FusionIndex of ``data/``: fitted on 27 queries, measured on the others.

    Both ways: fitted on the odd-numbered and measured on the even-numbered, then the reverse.
    """
    from langchain_fusion import HierarchicalIndex
    from langchain_fusion.ingest.summaries import leading_text_summaries

    part = parts(index)
    summaries = HierarchicalIndex.from_summaries(index, leading_text_summaries(index.documents)).summaries
    lines = [
        f"| fitted on | search | answered at {FLOOR:g} | no-answer abstained at {FLOOR:g} | held-out ECE | Brier |",
        "|---|---|---:|---:|---:|---:|",
    ]
    splits = (("odd 27", part("odd", 0), part("even", 1)), ("even 27", part("even", 1), part("odd", 0)))
    for fitted, fit, measured in splits:
        borrowed, own = HierarchicalIndex(index, summaries), HierarchicalIndex(index, summaries)
        borrowed.relevance_data = index.calibrate(fit).model_dump(mode="json")  # the fused model on hierarchical ranks
        own.calibrate(fit)
        rows = [
            ("fused, its own model", index),
            ("hierarchical, the fused search's model", borrowed),
            ("hierarchical, its own model", own),
        ]
        lines += [table_row(f"{fitted} | {label}", calibrated, measured)[0] for label, calibrated in rows]
    return "\n".join(lines)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from langchain_fusion import FusionIndex
    from langchain_fusion.cli.app import main as cli
    from langchain_fusion.evaluation import plot_reliability

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, default=PLOT, help="where to write the reliability plot (PNG)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with contextlib.redirect_stdout(io.StringIO()):
            status = cli(["index", str(DATA), "--out", f"{folder}/arden-index", "--embeddings", "local", "-q"])
        if status != 0:
            raise SystemExit(f"indexing data/ failed with exit status {status}")
        table, held_out = measure(FusionIndex.load(f"{folder}/arden-index"))
        hierarchical = measure_hierarchical(FusionIndex.load(f"{folder}/arden-index"))
    print(table)
    print(f"\nhierarchical search:\n\n{hierarchical}")
    plot_reliability(held_out, args.plot, title="Sample, held out: fitted on 27 queries, measured on the 27 others")
    print(f"\nreliability plot of the held-out row: {args.plot}")


if __name__ == "__main__":
    main()
