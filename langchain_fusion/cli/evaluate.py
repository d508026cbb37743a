"""The ``langchain-fusion eval`` command: quality of vector, BM25, fusion, rerank and multi-query on labelled data."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from langchain_fusion.cli.arguments import (
    add_option_flag,
    checked,
    given_options,
    index_help,
    positive_int,
    rerank_spec,
    rewrites,
    seconds,
)
from langchain_fusion.cli.errors import UserError
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT, DEFAULT_RERANK_CANDIDATES
from langchain_fusion.search.diversity import DiversityOptions
from langchain_fusion.search.fusion import FUSION_METHODS
from langchain_fusion.search.options import SEARCH_DEFAULTS, SearchOptions
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY, check_min_relevance

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


def _load(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The index evaluated (a hierarchical folder's chunk index), the labels, and whose relevance is calibrated.

    The last is the index itself, or for a hierarchical folder the hierarchical index: its relevance model is
    fitted on hierarchical results (``--calibrate``) and checked on them.
    """
    from langchain_fusion.evaluation.datasets import load_beir, load_labelled
    from langchain_fusion.index.fusion_index import FusionIndex
    from langchain_fusion.index.hierarchical import HierarchicalIndex
    from langchain_fusion.index.opening import open_index
    from langchain_fusion.models.embeddings import CachedEmbeddings, resolve_embeddings

    if args.beir and (args.index or args.labels):
        raise UserError("use either --beir FOLDER, or --index DIR with --labels FILE, not both")
    if args.beir:
        dataset = load_beir(args.beir, args.split, include_title=not args.no_title)
        embeddings = CachedEmbeddings(resolve_embeddings(args.embeddings), args.cache)
        if not args.quiet:
            print(f"indexing {len(dataset.corpus)} documents (embedding cache: {embeddings.folder})", file=sys.stderr)
        index = FusionIndex.from_documents(dataset.corpus, embeddings)
        return index, dataset, index
    if not (args.index and args.labels):
        raise UserError("give a saved index and its labelled queries (--index DIR --labels FILE), or --beir FOLDER")
    opened = open_index(args.index)
    index = opened.chunks if isinstance(opened, HierarchicalIndex) else opened
    return index, load_labelled(args.labels, index.documents), opened


def _calibrate(args: argparse.Namespace, plan: _Plan) -> Any:
    """Fit the relevance model of the index at ``--index`` on ``--labels`` and save it there (under its update lock).

    A hierarchical folder gets the model of hierarchical search, saved with the folder (crash-safe, as any save).
    """
    from langchain_fusion.evaluation.datasets import load_labelled
    from langchain_fusion.index.hierarchical import HierarchicalIndex
    from langchain_fusion.index.opening import hierarchical_folder, open_for_update
    from langchain_fusion.stores.registry import engine_for

    engine = engine_for(args.index)
    folder = hierarchical_folder(args.index)
    with engine.updating(args.index):  # another run's update is not lost, nor is this model
        if folder is not None:
            hierarchical = HierarchicalIndex.load(folder)
            model = hierarchical.calibrate(
                load_labelled(args.labels, hierarchical.chunks.documents), fetch_k=plan.fetch_k
            )
            hierarchical.save(folder, info=hierarchical.chunks.saved_info)
            return model
        index = open_for_update(args.index)
        model = index.calibrate(load_labelled(args.labels, index.documents), fetch_k=plan.fetch_k)
        engine.save(args.index, index.store, index.info_to_save(index.saved_info))
    return model


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


@dataclass
class _Plan:
    """What an ``eval`` run computes, checked before any index is loaded or any model is called."""

    metrics: list[str]
    methods: Sequence[str]
    alphas: list[float]
    fetch_k: int | None
    rows: dict[str, Callable[[Any], Any]]
    pipeline_rows: list[str]
    vector_floors: list[float]
    bm25_floors: list[float]
    relevance_floors: list[float]
    no_answer: dict[str, str]
    baseline: Any = None


def _plan(args: argparse.Namespace) -> _Plan:
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
    if args.fail_if_worse and not args.baseline:
        raise UserError("--fail-if-worse compares with a saved report: add --baseline REPORT")
    if args.calibrate and not (args.index and args.labels):
        raise UserError("--calibrate writes the relevance model into a saved index: give --index INDEX --labels FILE")
    if args.no_answer and not (vector_floors or bm25_floors or relevance_floors):
        raise UserError(
            "--no-answer queries are scored by the floor sweep: add --vector-floors, --bm25-floors or "
            "--relevance-floors"
        )
    return _Plan(
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
    )


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate and print the tables (or JSON); :data:`EXIT_WORSE` when ``--fail-if-worse`` finds a worse metric."""
    from langchain_fusion.evaluation.harness import SIDES, evaluate_sides, sweep_alpha, sweep_floors, sweep_relevance
    from langchain_fusion.evaluation.reports import check_same_queries

    plan = _plan(args)
    index, dataset, calibrated = _load(args)
    if plan.baseline is not None:  # before any work
        check_same_queries(dataset.queries, dataset.name, plan.baseline)
    if args.reliability_plot and calibrated.relevance_model is None and not args.calibrate:
        raise UserError("--reliability-plot needs a calibrated index: add --calibrate, or calibrate it first")
    dataset.no_answer.update(plan.no_answer)
    calibration = _calibrate(args, plan) if args.calibrate else None
    if calibration is not None:  # the index evaluated here is the one just calibrated
        _set_model(calibrated, calibration.model_dump(mode="json"))
    progress = not (args.quiet or args.json)
    fetch_k, metrics = plan.fetch_k, plan.metrics
    baselines = evaluate_sides(
        index, dataset, metrics, fetch_k=fetch_k, progress=progress, batch_size=args.batch_size, wrapped=plan.rows
    )
    sweep = sweep_alpha(index, dataset, plan.alphas, plan.methods, metrics, fetch_k=fetch_k, progress=progress)
    floors = None
    if plan.vector_floors or plan.bm25_floors:
        floors = sweep_floors(
            index, dataset, plan.vector_floors, plan.bm25_floors, metrics, fetch_k=fetch_k, progress=progress
        )
    main_metric = metrics[0]
    fused, sides = SIDES[2], SIDES[:2]
    comparisons = [baselines.compare(fused, side, main_metric) for side in sides]
    comparisons += [baselines.compare(name, fused, main_metric) for name in plan.pipeline_rows]
    best = {}
    for method in plan.methods:
        rows = [r for r in sweep.results if r.name.startswith(f"{method}@")]
        top = max(rows, key=lambda r: r.means[main_metric])
        best[method] = {"alpha": float(top.name.partition("@")[2]), main_metric: top.means[main_metric]}
    plot_path = None
    if args.plot:
        from langchain_fusion.evaluation.plots import plot_alpha_sweep

        plot_path = str(plot_alpha_sweep(sweep, main_metric, args.plot))
    relevance = None
    if plan.relevance_floors:
        relevance = sweep_relevance(
            calibrated, dataset, plan.relevance_floors, metrics, progress=progress, fetch_k=fetch_k
        )
    report = _Report(dataset, index, baselines, sweep, floors, comparisons, best, plot_path, calibration, relevance)
    report.calibrated = calibrated  # the index, or the hierarchical index of a hierarchical folder
    _check_and_compare(args, plan, report, progress)
    if args.json:
        print(json.dumps(report.payload(), indent=2))
    else:
        print(report.text(plan))
    worse = report.baseline.worse if report.baseline is not None else []
    if args.fail_if_worse and worse:
        listed = ", ".join(f"{c.method} {c.metric} {c.delta:+.4f} (p={c.p_value:.4f})" for c in worse)
        print(f"langchain-fusion: significantly worse than {args.baseline}: {listed}", file=sys.stderr)
        return EXIT_WORSE
    return 0


def _set_model(calibrated: Any, model: dict[str, Any]) -> None:
    """Give the index loaded for this run the relevance model just fitted and saved."""
    from langchain_fusion.index.hierarchical import HierarchicalIndex

    if isinstance(calibrated, HierarchicalIndex):
        calibrated.relevance_data = model
    else:
        calibrated.saved_info = {**calibrated.saved_info, RELEVANCE_INFO_KEY: model}


def _check_and_compare(args: argparse.Namespace, plan: _Plan, report: _Report, progress: bool) -> None:
    """Into ``report``: the calibration check and reliability plot, the saved report, the baseline comparison."""
    from langchain_fusion.evaluation.calibration import evaluate_calibration
    from langchain_fusion.evaluation.reports import EvalReport, compare_reports

    calibrated = report.calibrated
    if calibrated.relevance_model is not None:
        report.checked = evaluate_calibration(calibrated, report.dataset, progress=progress, fetch_k=plan.fetch_k)
        if args.reliability_plot:
            from langchain_fusion.evaluation.plots import plot_reliability

            report.reliability_plot = str(plot_reliability(report.checked, args.reliability_plot))
    settings = {"fetch_k": plan.fetch_k, "chunks": len(report.index)}
    saved = EvalReport.from_report(report.baselines, calibration=report.checked, settings=settings)
    if args.report:
        report.report_path = str(saved.save(args.report))
    if plan.baseline is not None:
        report.baseline = compare_reports(saved, plan.baseline, significance=args.significance)
        report.baseline_path = args.baseline


@dataclass
class _Report:
    """The results of an ``eval`` run, as JSON or as tables."""

    dataset: Any
    index: Any
    baselines: Any
    sweep: Any
    floors: Any
    comparisons: list[dict[str, Any]]
    best: dict[str, dict[str, float]]
    plot_path: str | None
    calibration: Any = None
    relevance: Any = None
    checked: Any = None
    """The calibration check on the labels (a CalibrationReport), when the index is calibrated."""
    reliability_plot: str | None = None
    report_path: str | None = None
    baseline: Any = None
    """The comparison with --baseline (a BaselineComparison)."""
    baseline_path: str | None = None
    calibrated: Any = None
    """Whose relevance is calibrated: the index, or for a hierarchical folder the hierarchical index."""

    @property
    def searched(self) -> str:
        """The search the calibrated relevance belongs to, as the text says it ("" for fused search)."""
        return "" if self.calibrated is self.index else " of hierarchical search"

    def payload(self) -> dict[str, Any]:
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

    def text(self, plan: _Plan) -> str:
        dataset, main_metric = self.dataset, plan.metrics[0]
        lines = [f"{dataset.name}: {len(dataset.queries)} queries, {len(self.index)} chunks\n"]
        lines.append(self.baselines.to_markdown())
        if self.baselines.by_kind(dataset.kinds):
            lines += [f"\nby kind of query ({main_metric}):\n", self.baselines.kind_table(dataset.kinds, main_metric)]
        lines.append(f"\nalpha sweep ({main_metric}, fetch_k={plan.fetch_k}):\n")
        lines.append(_sweep_grid(self.sweep, plan.methods, plan.alphas, main_metric))
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


def _sweep_grid(sweep: Any, methods: Sequence[str], alphas: Sequence[float], metric: str) -> str:
    values = {r.name: r.means[metric] for r in sweep.results}
    lines = ["| alpha | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for alpha in alphas:
        cells = [f"{values[f'{m}@{alpha:g}']:.4f}" for m in methods]
        lines.append(f"| {alpha:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
