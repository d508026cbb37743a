"""The ``langchain-fusion eval`` command: quality of vector, BM25, fusion, rerank and multi-query on labelled data.

Its flags are in :mod:`~langchain_fusion.cli.eval_arguments`, the checked plan of a run in
:mod:`~langchain_fusion.cli.eval_plan`, the printing of the results in
:mod:`~langchain_fusion.cli.eval_output`; here the run itself: load or index the data, calibrate,
evaluate and sweep, save a report and compare it with a baseline (the CI gate).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from langchain_fusion.cli.errors import UserError
from langchain_fusion.cli.eval_arguments import EXIT_WORSE
from langchain_fusion.cli.eval_output import EvalResults
from langchain_fusion.cli.eval_plan import EvalPlan, plan_eval
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate and print the tables (or JSON); :data:`EXIT_WORSE` when ``--fail-if-worse`` finds a worse metric."""
    from langchain_fusion.evaluation.harness import SIDES, evaluate_sides, sweep_alpha, sweep_floors, sweep_relevance
    from langchain_fusion.evaluation.reports import check_same_queries

    plan = plan_eval(args)
    index, dataset, calibrated = _load(args, plan.tenant)
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
    tenant = plan.tenant
    baselines = evaluate_sides(
        index,
        dataset,
        metrics,
        fetch_k=fetch_k,
        progress=progress,
        batch_size=args.batch_size,
        wrapped=plan.rows,
        tenant=tenant,
    )
    sweep = sweep_alpha(
        index, dataset, plan.alphas, plan.methods, metrics, fetch_k=fetch_k, progress=progress, tenant=tenant
    )
    floors = None
    if plan.vector_floors or plan.bm25_floors:
        floors = sweep_floors(
            index,
            dataset,
            plan.vector_floors,
            plan.bm25_floors,
            metrics,
            fetch_k=fetch_k,
            progress=progress,
            tenant=tenant,
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
            calibrated, dataset, plan.relevance_floors, metrics, progress=progress, fetch_k=fetch_k, tenant=tenant
        )
    report = EvalResults(dataset, index, baselines, sweep, floors, comparisons, best, plot_path, calibration, relevance)
    report.calibrated = calibrated  # the index, or the hierarchical index of a hierarchical folder
    report.tenant = tenant
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


def searched_documents(index: Any, tenant: str | None) -> list[Any]:
    """The documents an evaluation searches: ``tenant``'s on a tenant-keyed index (checked there), else all."""
    return list(index.view(tenant).iter_documents()) if tenant is not None else list(index.documents)


def _set_model(calibrated: Any, model: dict[str, Any]) -> None:
    """Give the index loaded for this run the relevance model just fitted and saved."""
    from langchain_fusion.index.hierarchical import HierarchicalIndex

    if isinstance(calibrated, HierarchicalIndex):
        calibrated.relevance_data = model
    else:
        calibrated.saved_info = {**calibrated.saved_info, RELEVANCE_INFO_KEY: model}


def _check_and_compare(args: argparse.Namespace, plan: EvalPlan, report: EvalResults, progress: bool) -> None:
    """Into ``report``: the calibration check and reliability plot, the saved report, the baseline comparison."""
    from langchain_fusion.evaluation.calibration import evaluate_calibration
    from langchain_fusion.evaluation.reports import EvalReport, compare_reports

    calibrated = report.calibrated
    if calibrated.relevance_model is not None:
        report.checked = evaluate_calibration(
            calibrated, report.dataset, progress=progress, fetch_k=plan.fetch_k, tenant=plan.tenant
        )
        if args.reliability_plot:
            from langchain_fusion.evaluation.plots import plot_reliability

            report.reliability_plot = str(plot_reliability(report.checked, args.reliability_plot))
    settings = {"fetch_k": plan.fetch_k, "chunks": report.chunks}
    saved = EvalReport.from_report(report.baselines, calibration=report.checked, settings=settings)
    if args.report:
        report.report_path = str(saved.save(args.report))
    if plan.baseline is not None:
        report.baseline = compare_reports(saved, plan.baseline, significance=args.significance)
        report.baseline_path = args.baseline


def _load(args: argparse.Namespace, tenant: str | None) -> tuple[Any, Any, Any]:
    """The index evaluated (a hierarchical folder's chunk index), the labels, and whose relevance is calibrated.

    The last is the index itself, or for a hierarchical folder the hierarchical index: its relevance model is
    fitted on hierarchical results (``--calibrate``) and checked on them. With ``tenant`` the labels are
    resolved against that tenant's documents.
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
    if tenant is None and index.tenant_key is not None:
        raise UserError(
            f"{args.index} is tenant-keyed ({len(index.tenants())} tenants): evaluate one tenant with --tenant T"
        )
    return index, load_labelled(args.labels, searched_documents(index, tenant)), opened


def _calibrate(args: argparse.Namespace, plan: EvalPlan) -> Any:
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
            labels = load_labelled(args.labels, searched_documents(hierarchical.chunks, plan.tenant))
            model = hierarchical.calibrate(labels, fetch_k=plan.fetch_k, tenant=plan.tenant)
            hierarchical.save(folder, info=hierarchical.chunks.saved_info)
            return model
        index = open_for_update(args.index)
        labels = load_labelled(args.labels, searched_documents(index, plan.tenant))
        model = index.calibrate(labels, fetch_k=plan.fetch_k, tenant=plan.tenant)
        engine.save(args.index, index.store, index.info_to_save(index.saved_info))
    return model
