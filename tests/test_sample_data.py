"""The bundled sample in data/: well-formed labels, and a README that reports what they measure."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_fusion import FusionIndex
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import main
from langchain_fusion.evaluation import SIDES, EvalDataset, Report, evaluate_sides, load_labelled
from langchain_fusion.ingest.loading import load_files
from tests.helpers.cli import CliRun
from tests.helpers.paths import DATA, REPO, SAMPLE_QUERIES
from tests.helpers.shared_vectors import each_text_embedded_once

KINDS = ("keyword", "paraphrase", "mixed")
METRICS = ("ndcg@10", "recall@10", "mrr@10")
RECORDS: list[dict[str, Any]] = json.loads(SAMPLE_QUERIES.read_text(encoding="utf-8"))
README = (REPO / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = README.partition("\n## Why fusion")[0]
SAMPLE_SECTION = README.partition("\n## Sample data\n")[2].partition("\n## ")[0]


def _calibration_script() -> Any:
    """scripts/sample_calibration.py, imported (make sample-calibration runs it)."""
    spec = importlib.util.spec_from_file_location("sample_calibration", REPO / "scripts" / "sample_calibration.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _collapse(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module", autouse=True)
def embed_each_text_once(model_vectors: Path) -> Iterator[None]:
    """The measured tables search the same questions many times: each text and query embedded once."""
    with each_text_embedded_once(model_vectors):
        yield


@pytest.fixture(scope="module")
def place_texts() -> dict[tuple[str, int | None], str]:
    """(path relative to data/, page) -> the loaded text of that file or PDF page, whitespace collapsed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        documents = load_files([DATA]).documents
    return {
        (Path(d.metadata[keys.SOURCE]).relative_to(DATA).as_posix(), d.metadata.get(keys.PAGE)): _collapse(
            d.page_content
        )
        for d in documents
    }


class TestLabels:
    def test_ids_and_kinds(self) -> None:
        ids = [r["id"] for r in RECORDS]
        assert len(set(ids)) == len(ids) == 54
        assert Counter(r["kind"] for r in RECORDS) == {kind: 18 for kind in KINDS}
        for record in RECORDS:
            assert isinstance(record["query"], str) and record["query"].strip(), record["id"]
            assert isinstance(record["answer"], str) and record["answer"].strip(), record["id"]
        # The ranges data/README.md gives for each kind.
        ranges = {"keyword": [(1, 8), (25, 34)], "paraphrase": [(9, 16), (35, 44)], "mixed": [(17, 24), (45, 54)]}
        for record in RECORDS:
            number = int(record["id"][1:])
            assert any(lo <= number <= hi for lo, hi in ranges[record["kind"]]), record["id"]

    def test_relevant_places_exist(self, place_texts: dict[tuple[str, int | None], str]) -> None:
        for record in RECORDS:
            assert record["relevant"], record["id"]
            for place in record["relevant"]:
                path = DATA / place["source"]
                assert path.is_file(), (record["id"], place)
                page = place.get("page")
                assert (page is not None) == (path.suffix == ".pdf"), (record["id"], place)
                assert (place["source"], page) in place_texts, (record["id"], place)

    def test_file_names_are_unique(self, place_texts: dict[tuple[str, int | None], str]) -> None:
        # load_labelled matches a label's source to a chunk by file name.
        names = Counter(Path(source).name for source, page in place_texts if page in (None, 1))
        assert [name for name, count in names.items() if count > 1] == []

    def test_answers_are_verbatim_in_every_relevant_place(self, place_texts: dict[tuple[str, int | None], str]) -> None:
        for record in RECORDS:
            for place in record["relevant"]:
                answer = _collapse(place.get("answer", record["answer"]))
                assert answer in place_texts[(place["source"], place.get("page"))], (record["id"], place)


@pytest.fixture(scope="module")
def measured(bundled_sample_index: CliRun) -> tuple[Report, EvalDataset, dict[str, Any]]:
    """The sample indexed as the README says (``index data``), evaluated by the CLI and by the harness."""
    out, status, _, stderr = bundled_sample_index
    assert status == 0, stderr
    stdout = io.StringIO()
    argv = ["eval", "--index", str(out), "--labels", str(SAMPLE_QUERIES), "--alpha", "0:1:0.1", "--json", "-q"]
    with contextlib.redirect_stdout(stdout):
        assert main([*argv, "--metrics", ",".join(METRICS)]) == 0
    payload = json.loads(stdout.getvalue())
    index = FusionIndex.load(out)
    dataset = load_labelled(SAMPLE_QUERIES, index.documents)
    return evaluate_sides(index, dataset, METRICS, progress=False), dataset, payload


@pytest.mark.local_model
@pytest.mark.timeout(600)  # bundled_sample_index embeds the whole sample (180 s seen on a loaded 2-core machine)
class TestSampleResults:
    def test_table_structure(self, measured: tuple[Report, EvalDataset, dict[str, Any]]) -> None:
        report, dataset, payload = measured
        assert len(dataset.queries) == payload["queries"] == 54
        assert [r.name for r in report.results] == [r["method"] for r in payload["retrievers"]] == list(SIDES)
        assert list(payload["by_kind"]) == list(report.by_kind(dataset.kinds)) == list(KINDS)
        for kind, part in payload["by_kind"].items():
            assert part["queries"] == 18
            assert [r["method"] for r in part["retrievers"]] == list(SIDES)
            for row, result in zip(part["retrievers"], report.by_kind(dataset.kinds)[kind].results, strict=True):
                assert {m: row[m] for m in METRICS} == pytest.approx(result.means)
        for row, result in zip(payload["retrievers"], report.results, strict=True):
            assert {m: row[m] for m in METRICS} == pytest.approx(result.means)
            assert all(0.0 <= row[m] <= 1.0 for m in METRICS)

    def test_readme_reports_the_measured_tables(self, measured: tuple[Report, EvalDataset, dict[str, Any]]) -> None:
        report, dataset, _ = measured
        stale = "README.md is stale; paste this table (langchain-fusion eval prints it):\n"
        ndcg = report.kind_table(dataset.kinds, "ndcg@10")
        assert ndcg in FIRST_SCREEN, stale + ndcg
        for metric in ("recall@10", "mrr@10"):
            table = report.kind_table(dataset.kinds, metric)
            assert table in SAMPLE_SECTION, stale + table

    def test_readme_quotes_the_measured_numbers(self, measured: tuple[Report, EvalDataset, dict[str, Any]]) -> None:
        report, _, payload = measured
        text = _collapse(SAMPLE_SECTION)
        vector, bm25, fusion = (report.result(name).means["ndcg@10"] for name in SIDES)
        against = {side: report.compare(SIDES[2], side, "ndcg@10") for side in SIDES[:2]}
        best = payload["best_alpha"]
        quotes = [
            f"nDCG@10 {fusion:.3f} against {bm25:.3f} (BM25) and {vector:.3f} (vector)",
            "better than BM25 on {wins} queries, worse on {losses} and ties {ties}".format(**against["bm25"]),
            "against vector search {wins}, {losses} and {ties}".format(**against["vector"]),
            f"({fusion - bm25:.3f} over BM25, {fusion - vector:.3f} over vector)",
            "{wins} wins against {losses} losses".format(**against["bm25"]),
            f"best `alpha` for this sample at {best['weighted']['alpha']:g} for `weighted` (nDCG@10 "
            f"{best['weighted']['ndcg@10']:.3f}) and {best['zscore']['alpha']:g} for `zscore` (nDCG@10 "
            f"{best['zscore']['ndcg@10']:.3f}), above the default's {fusion:.3f}",
        ]
        assert min(best["weighted"]["ndcg@10"], best["zscore"]["ndcg@10"]) > fusion
        for quote in quotes:
            assert quote in text, f"README.md's Sample data section should say: {quote}"

    def test_readme_reports_the_calibration(self, bundled_sample_index: CliRun) -> None:
        """The calibration table is what scripts/sample_calibration.py (make sample-calibration) measures."""
        table, held_out = _calibration_script().measure(FusionIndex.load(bundled_sample_index[0]))
        assert table in README, "README.md is stale; paste this table (make sample-calibration prints it):\n" + table
        assert (held_out.queries, held_out.results) == (27, 270)

    def test_docs_report_the_hierarchical_calibration(self, bundled_sample_index: CliRun) -> None:
        """The hierarchical table of docs/enrichment-and-hierarchy.md is what the same script measures."""
        table = _calibration_script().measure_hierarchical(FusionIndex.load(bundled_sample_index[0]))
        page = (REPO / "docs" / "enrichment-and-hierarchy.md").read_text(encoding="utf-8")
        assert table in page, "docs/enrichment-and-hierarchy.md is stale; paste this table:\n" + table

    def test_readme_claims_hold(self, measured: tuple[Report, EvalDataset, dict[str, Any]]) -> None:
        """What the README says in words about the tables: fusion best overall, vector search best on paraphrases."""
        report, dataset, _ = measured
        vector, bm25, fusion = (report.result(name).means for name in SIDES)
        for metric in METRICS:
            assert fusion[metric] > max(vector[metric], bm25[metric]), metric
        best = {
            kind: max(part.results, key=lambda r: r.means["ndcg@10"]).name
            for kind, part in report.by_kind(dataset.kinds).items()
        }
        assert best == {"keyword": "fusion (defaults)", "paraphrase": "vector", "mixed": "fusion (defaults)"}
