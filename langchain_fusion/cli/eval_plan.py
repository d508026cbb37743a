"""What an ``eval`` run computes (:class:`EvalPlan`), checked from its flags before any index loads or model runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_fusion.cli.arguments import given_options
from langchain_fusion.cli.errors import UserError
from langchain_fusion.search.diversity import DiversityOptions
from langchain_fusion.search.options import SearchOptions
from langchain_fusion.search.relevance import check_min_relevance


@dataclass
class EvalPlan:
    """What an ``eval`` run computes, checked before any index is loaded or any model is called."""

    metrics: list[str]
    """The metrics (``NAME@K``, checked); the first is the one plotted and compared."""
    methods: Sequence[str]
    """The fusion methods swept (checked)."""
    alphas: list[float]
    """The alphas swept."""
    fetch_k: int | None
    """Candidates per side (None: the whole corpus)."""
    rows: dict[str, Callable[[Any], Any]]
    """The extra rows: row name -> how to wrap the default fusion retriever."""
    pipeline_rows: list[str]
    """Of those, the rows of a pipeline step (--rerank, --multi-query), compared with plain fusion."""
    vector_floors: list[float]
    """Floors on the raw vector score to sweep."""
    bm25_floors: list[float]
    """Floors on the raw BM25 score to sweep."""
    relevance_floors: list[float]
    """Floors on the calibrated relevance to sweep."""
    no_answer: dict[str, str]
    """Queries the corpus does not answer, by id (--no-answer)."""
    baseline: Any = None
    """The report compared with (--baseline; an EvalReport), or None."""
    tenant: str | None = None
    """The tenant evaluated on a tenant-keyed index (--tenant), or None."""


def plan_eval(args: argparse.Namespace) -> EvalPlan:
    """The plan of the ``eval`` run ``args`` asks for; a UserError (or the library's own) for what cannot work."""
    from langchain_fusion.evaluation.datasets import load_queries
    from langchain_fusion.evaluation.harness import alpha_grid, check_floor_grids, value_grid
    from langchain_fusion.evaluation.metrics import parse_metric
    from langchain_fusion.evaluation.reports import EvalReport
    from langchain_fusion.search.fusion import check_method

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    for metric in metrics:
        parse_metric(metric)
    methods = [check_method(m.strip()) for m in args.methods.split(",") if m.strip()]
    alphas = alpha_grid(args.alpha)
    pipeline = _pipeline_rows(args)  # a missing key or cross-encoder fails before any indexing
    vector_floors = value_grid(args.vector_floors, "--vector-floors") if args.vector_floors else []
    bm25_floors = value_grid(args.bm25_floors, "--bm25-floors") if args.bm25_floors else []
    check_floor_grids(vector_floors, bm25_floors)
    relevance_floors = value_grid(args.relevance_floors, "--relevance-floors") if args.relevance_floors else []
    for level in relevance_floors:
        check_min_relevance(level)
    lambdas = value_grid(args.mmr, "--mmr") if args.mmr else []
    for value in lambdas:
        DiversityOptions(lambda_mult=value)  # checks the weight
    tenant = given_options(args).get("tenant")
    if tenant is not None and args.beir:
        raise UserError("--tenant evaluates one tenant of a tenant-keyed index: give --index INDEX --labels FILE")
    if args.fail_if_worse and not args.baseline:
        raise UserError("--fail-if-worse compares with a saved report: add --baseline REPORT")
    if args.calibrate and not (args.index and args.labels):
        raise UserError("--calibrate writes the relevance model into a saved index: give --index INDEX --labels FILE")
    if args.no_answer and not (vector_floors or bm25_floors or relevance_floors):
        raise UserError(
            "--no-answer queries are scored by the floor sweep: add --vector-floors, --bm25-floors or "
            "--relevance-floors"
        )
    return EvalPlan(
        metrics=metrics,
        methods=methods,
        alphas=alphas,
        fetch_k=SearchOptions(**given_options(args)).fetch_k,
        rows={**pipeline, **_selection_rows(args, lambdas)},
        pipeline_rows=list(pipeline),
        vector_floors=vector_floors,
        bm25_floors=bm25_floors,
        relevance_floors=relevance_floors,
        no_answer=load_queries(args.no_answer) if args.no_answer else {},
        baseline=EvalReport.load(args.baseline) if args.baseline else None,
        tenant=tenant,
    )


def _selection_rows(args: argparse.Namespace, lambdas: Sequence[float]) -> dict[str, Callable[[Any], Any]]:
    """The extra fusion rows asked for by --mmr (``lambdas``, checked) and --max-per-source: row name -> wrapper."""

    def with_options(diversity: DiversityOptions) -> Callable[[Any], Any]:
        given = diversity.model_dump(exclude_none=True)
        # A new retriever rather than model_copy, so the options go through its validation.
        return lambda fusion: type(fusion)(**{n: getattr(fusion, n) for n in fusion.model_fields_set} | given)

    rows: dict[str, Callable[[Any], Any]] = {}
    for weight in lambdas:
        rows[f"fusion, mmr lambda={weight:g}"] = with_options(DiversityOptions(lambda_mult=weight))
    cap = DiversityOptions(**{n: v for n, v in given_options(args).items() if n in DiversityOptions.model_fields})
    if cap.max_per_source is not None:
        rows[f"fusion, max {cap.max_per_source} per source"] = with_options(cap)
    return rows


def _pipeline_rows(args: argparse.Namespace) -> dict[str, Callable[[Any], Any]]:
    """The extra rows asked for (--rerank, --multi-query): row name -> how to wrap the default fusion retriever.

    Each row is one step of the pipeline composer around the default fusion (keeping the deepest cutoff).
    """
    from langchain_fusion.pipeline import PipelineSpec, build_steps
    from langchain_fusion.pipeline.composer import chat_model_for

    uses_llm = args.multi_query is not None or (args.rerank is not None and args.rerank.uses_chat_model)
    if args.llm is not None and not uses_llm:
        raise UserError("eval uses a chat model only for --rerank llm and --multi-query: add one, or drop --llm")
    steps = {"llm": args.llm, "llm_timeout": args.llm_timeout}
    chat_model = chat_model_for(PipelineSpec(**steps, answer="required"))[0] if uses_llm else None
    rows: dict[str, Callable[[Any], Any]] = {}
    if args.rerank is not None:
        spec = PipelineSpec(reranker=str(args.rerank), rerank_candidates=args.rerank_candidates, **steps)
        rows[f"fusion + rerank ({args.rerank})"] = build_steps(spec, chat_model).around
    if args.multi_query is not None:
        spec = PipelineSpec(multi_query=args.multi_query, **steps)
        rows[f"fusion + multi-query (n={args.multi_query})"] = build_steps(spec, chat_model).around
    return rows
