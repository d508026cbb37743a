"""The flags of ``langchain-fusion eval``: data, sweeps, extra rows, floors and diversity, reports and the CI gate."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_fusion.cli.arguments import (
    add_option_flag,
    checked,
    index_help,
    positive_int,
    rerank_spec,
    rewrites,
    seconds,
)
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT, DEFAULT_RERANK_CANDIDATES
from langchain_fusion.search.fusion import FUSION_METHODS

DEFAULT_CACHE = Path.home() / ".cache" / "langchain-fusion" / "embeddings"
DEFAULT_BATCH_SIZE = 64
"""Queries per retriever batch (the harness's default, not imported: it pulls the evaluation package in)."""
DEFAULT_SIGNIFICANCE = 0.05
"""Significance level of --fail-if-worse (the reports module's default, not imported for the same reason)."""
EXIT_WORSE = 3
"""Exit status of ``eval --baseline REPORT --fail-if-worse`` when a metric is significantly worse (2: a user error)."""


def add_eval_parser(commands: Any) -> None:
    """Register the ``eval`` subcommand on the CLI's subparsers."""
    parser = commands.add_parser(
        "eval",
        help="measure retrieval quality (nDCG, recall, MRR...) of vector, BM25 and fusion; sweep alpha",
        description="Evaluate vector-only, BM25-only and fused retrieval on labelled queries, sweep alpha for "
        "each fusion method, and compare fusion with each single side query by query (and by kind of query, when "
        "the labels give one). Use a saved index with "
        "a labelled set (--index with --labels), or a BEIR folder (--beir), which is indexed on the fly with "
        "an embedding cache so reruns are fast.",
    )
    _add_data_arguments(parser)
    _add_sweep_arguments(parser)
    _add_row_arguments(parser)
    _add_floor_arguments(parser.add_argument_group("relevance floors and diversity (optional)"))
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="with --index and --labels: fit the index's relevance model on the labels and save it into the index, "
        "so results carry a calibrated relevance and --min-relevance works",
    )
    parser.add_argument("--plot", metavar="PNG", help="save a plot of the first metric against alpha")
    parser.add_argument(
        "--reliability-plot",
        metavar="PNG",
        help="on a calibrated index: save the reliability diagram of its relevance on the labels (predicted against "
        "observed per bin, with counts)",
    )
    _add_report_arguments(parser.add_argument_group("saved reports and a CI gate (optional)"))
    parser.add_argument("--json", action="store_true", help="print all results as JSON")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


def _significance(value: str) -> float:
    from langchain_fusion.evaluation.reports import check_significance

    return float(checked(check_significance, float, "a significance level between 0 and 1, e.g. 0.05")(value))


def _add_report_arguments(group: Any) -> None:
    group.add_argument(
        "--report",
        metavar="FILE",
        help="save the results as a JSON report with every query's metric values, to compare later runs with "
        "(--baseline)",
    )
    group.add_argument(
        "--baseline",
        metavar="REPORT",
        help="a report saved by an earlier run on the same queries: print each row's change per metric with its "
        "confidence interval and the p-value of a paired randomization test",
    )
    group.add_argument(
        "--fail-if-worse",
        action="store_true",
        help=f"with --baseline: exit with status {EXIT_WORSE} when any metric of any row both runs have is "
        "significantly worse",
    )
    group.add_argument(
        "--significance",
        type=_significance,
        default=DEFAULT_SIGNIFICANCE,
        metavar="LEVEL",
        help="significance level of the comparison; intervals are at 1 - LEVEL (default: %(default)g)",
    )


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("data (one of)")
    source.add_argument("--index", metavar="INDEX", help=f"with --labels: {index_help()}")
    source.add_argument("--labels", metavar="FILE", help="labelled queries (JSON or CSV; see the README)")
    source.add_argument("--beir", metavar="FOLDER", help="a BEIR folder: corpus.jsonl, queries.jsonl, qrels/")
    add_option_flag(
        parser,
        "tenant",
        help_text="with --index: evaluate this tenant of a tenant-keyed index, as the index of its documents alone "
        "(the labels are resolved against its documents; --calibrate fits the index's one relevance model on its "
        "results)",
    )
    parser.add_argument("--split", default="test", help="BEIR qrels split to use (default: %(default)s)")
    parser.add_argument("--no-title", action="store_true", help="BEIR: index the body text without the title")
    parser.add_argument(
        "--embeddings", metavar="SPEC", help="BEIR: embedding model (local, openai, PROVIDER:MODEL); default auto"
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        default=str(DEFAULT_CACHE),
        help="BEIR: embedding cache folder, keyed by model and text (default: %(default)s)",
    )


def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha",
        default="0:1:0.1",
        metavar="GRID",
        help="alphas to sweep: START:STOP:STEP or a comma list (default: %(default)s)",
    )
    parser.add_argument(
        "--methods",
        default=",".join(FUSION_METHODS),
        help="fusion methods to sweep, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics",
        default="ndcg@10,recall@10,mrr@10,hit_rate@5",
        help="NAME@K list; names: hit_rate, recall, precision, mrr, ndcg, map. The first is the one "
        "plotted and compared (default: %(default)s)",
    )
    add_option_flag(parser, "fetch_k")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help="queries per retriever batch (one embedding call and one scoring pass each); the table reports "
        "ms_per_query. 1 runs the queries one by one and reports latency p50/p95 instead (default: %(default)s)",
    )


def _add_row_arguments(parser: argparse.ArgumentParser) -> None:
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    parser.add_argument(
        "--rerank",
        type=rerank_spec,
        metavar="SPEC",
        help="add a row: the default fusion's --rerank-candidates reranked by SPEC, 'llm' (the --llm chat model rates "
        "each) or 'cross-encoder:MODEL' (a Hugging Face name or a folder; needs the local extra)",
    )
    parser.add_argument(
        "--rerank-candidates",
        type=positive_int,
        default=DEFAULT_RERANK_CANDIDATES,
        metavar="N",
        help="with --rerank, candidates reranked per query, at least the deepest metric cutoff (default: %(default)s)",
    )
    parser.add_argument(
        "--multi-query",
        type=rewrites,
        metavar="N",
        help="add a row: multi-query fusion over the default fusion, N rewrites per query by the --llm chat model",
    )
    parser.add_argument(
        "--llm",
        metavar="PROVIDER:MODEL",
        help=f"chat model of --rerank llm and --multi-query (default: openai:{OPENAI_DEFAULT_CHAT_MODEL}, needs "
        "OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--llm-timeout",
        type=seconds,
        default=DEFAULT_LLM_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for each chat model answer before it counts as failed (default: %(default)g)",
    )


def _add_floor_arguments(floors: Any) -> None:
    floors.add_argument(
        "--no-answer",
        metavar="FILE",
        help="queries the corpus does not answer (one per line, or a JSON list), for the floor sweep's "
        'no_answer_empty column; a labelled set may also hold records with "no_answer": true',
    )
    floors.add_argument(
        "--vector-floors",
        metavar="GRID",
        help="floors on the raw vector (cosine) score to sweep (START:STOP:STEP or a comma list), at the default "
        "alpha and method",
    )
    floors.add_argument(
        "--bm25-floors",
        metavar="GRID",
        help="floors on the raw BM25 score to sweep; with --vector-floors, every pair is a row too (kept: clears "
        "either)",
    )
    floors.add_argument(
        "--relevance-floors",
        metavar="GRID",
        help="floors on the calibrated relevance (0 to 1) to sweep, on an index calibrated before or by --calibrate "
        "(then on the labels it was fitted on)",
    )
    floors.add_argument(
        "--mmr",
        metavar="LAMBDAS",
        help="add a fusion row re-ranked by maximal marginal relevance for each weight of relevance (comma list)",
    )
    add_option_flag(floors, "max_per_source", help_text="add a fusion row with at most N results per source")
