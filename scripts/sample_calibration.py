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
Everything is deterministic: a rerun prints the same table and writes the same PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
PLOT = REPO / "docs" / "sample-reliability.png"
FLOOR = 0.3


def measure(index: Any) -> tuple[str, Any]:
    """The README's table (markdown) for a FusionIndex of ``data/``, and the held-out row's CalibrationReport."""
    from langchain_fusion.evaluation import EvalDataset, evaluate_calibration, load_labelled, load_queries
    from langchain_fusion.evaluation.harness import ANSWERED, NO_ANSWER_EMPTY, sweep_relevance

    labelled = load_labelled(DATA / "queries.json", index.documents)
    no_answer = load_queries(DATA / "no-answer.json")

    def part(name: str, parity: int | None) -> EvalDataset:
        ids = [q for i, q in enumerate(labelled.queries) if parity is None or i % 2 == parity]
        queries = {q: labelled.queries[q] for q in ids}
        return EvalDataset(name, queries, {q: labelled.qrels[q] for q in ids}, no_answer=dict(no_answer))

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
        checked = evaluate_calibration(index, measured, progress=False)
        floored = sweep_relevance(index, measured, [FLOOR], ["ndcg@10"], progress=False).results[-1].extra
        answered, abstained = floored[ANSWERED], floored[NO_ANSWER_EMPTY]
        lines.append(
            f"| {label} | {round(answered * len(measured.queries))}/{len(measured.queries)} | "
            f"{round(abstained * len(no_answer))}/{len(no_answer)} | "
            f"{checked.expected_calibration_error:.3f} | {checked.brier_score:.3f} |"
        )
    return "\n".join(lines), checked


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
    print(table)
    plot_reliability(held_out, args.plot, title="Sample, held out: fitted on 27 queries, measured on the 27 others")
    print(f"\nreliability plot of the held-out row: {args.plot}")


if __name__ == "__main__":
    main()
