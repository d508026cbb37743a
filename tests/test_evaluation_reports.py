"""Saved evaluation reports, the paired significance test, and eval --report / --baseline / --fail-if-worse."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from langchain_fusion.cli.app import main
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.evaluation import EvalReport, MethodResult, Report, compare_reports, paired_test
from tests.helpers.embeddings import fake_cli_embeddings
from tests.helpers.paths import DATA, SAMPLE_QUERIES

METRICS = ["ndcg@10", "recall@10"]


def _report(values: dict[str, list[float]], queries: list[str] | None = None) -> EvalReport:
    """A saved report whose row ``name`` has ``values[name][i]`` for query i, on every metric."""
    queries = queries or [f"q{i:02d}" for i in range(len(next(iter(values.values()))))]
    results = [
        MethodResult(name, {q: dict.fromkeys(METRICS, v) for q, v in zip(queries, row, strict=True)})
        for name, row in values.items()
    ]
    return EvalReport.from_report(Report("sample", list(METRICS), results))


class TestPairedTest:
    def test_identical_runs_change_nothing(self) -> None:
        values = np.random.default_rng(0).random(60)
        test = paired_test(values, values.copy())
        assert (test.delta, test.low, test.high, test.p_value) == (0.0, 0.0, 0.0, 1.0)

    def test_a_clearly_worse_run(self) -> None:
        rng = np.random.default_rng(1)
        baseline = rng.random(60)
        current = baseline - 0.1 + rng.normal(0, 0.05, 60)
        test = paired_test(current, baseline)
        assert test.p_value < 0.001 and test.high < 0 and test.low < test.delta < test.high
        assert test.confidence == 0.95

    def test_noise_is_not_significant(self) -> None:
        rng = np.random.default_rng(2)
        baseline = rng.random(60)
        test = paired_test(baseline + rng.normal(0, 0.1, 60), baseline)
        assert test.p_value > 0.2 and test.low < 0 < test.high

    def test_seeded_and_deterministic(self) -> None:
        rng = np.random.default_rng(3)
        a, b = rng.random(200), rng.random(200)
        assert paired_test(a, b) == paired_test(a, b)
        assert paired_test(a, b, seed=1) != paired_test(a, b)

    def test_few_queries_get_the_exact_p_value(self) -> None:
        # Every query 1 worse: of the 2**3 sign patterns, only all-minus and all-plus are that far from 0.
        assert paired_test([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]).p_value == 2 / 8
        diff = np.array([0.3, -0.1, 0.2, 0.25])
        means = [abs(np.dot(signs, diff)) / 4 for signs in itertools.product((1, -1), repeat=4)]
        exact = sum(m >= abs(diff.mean()) - 1e-12 for m in means) / 16
        assert paired_test(diff, np.zeros(4)).p_value == exact

    @pytest.mark.parametrize(
        "current,baseline,message",
        [
            ([1.0, 2.0], [1.0], "the same queries in the same order; got 2 and 1 values"),
            ([], [], "at least one query"),
            ([1.0, float("nan")], [1.0, 1.0], "finite values"),
        ],
    )
    def test_bad_input(self, current: list[float], baseline: list[float], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            paired_test(current, baseline)


class TestEvalReport:
    def test_round_trip(self, tmp_path: Path) -> None:
        report = _report({"fusion (defaults)": [0.5, 1.0, 0.0], "bm25": [0.25, 1.0, 1.0]})
        path = report.save(tmp_path / "reports" / "base.json")
        assert EvalReport.load(path) == report
        saved = json.loads(path.read_text())
        assert (saved["format"], saved["version"]) == ("langchain-fusion eval report", 1)
        assert saved["methods"]["bm25"]["per_query"]["q00"] == {"ndcg@10": 0.25, "recall@10": 0.25}
        assert saved["methods"]["bm25"]["means"]["ndcg@10"] == pytest.approx(0.75)

    @pytest.mark.parametrize(
        "edit,message",
        [
            (lambda d: "not json", "not an evaluation report \\(not valid JSON\\)"),
            (lambda d: {**d, "format": "something else"}, "not a langchain-fusion evaluation report"),
            (lambda d: {**d, "version": 2}, "report format version 2; this langchain-fusion reads version 1"),
            (lambda d: {**d, "queries": [*d["queries"], "q99"]}, "row 'bm25' does not have a value for every query"),
        ],
    )
    def test_a_bad_file_is_one_clear_error(self, tmp_path: Path, edit: object, message: str) -> None:
        path = _report({"bm25": [0.5, 1.0]}).save(tmp_path / "base.json")
        changed = edit(json.loads(path.read_text()))  # type: ignore[operator]
        path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
        with pytest.raises(FusionError, match=message):
            EvalReport.load(path)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(FusionError, match="no such report; write one with langchain-fusion eval --report"):
            EvalReport.load(tmp_path / "nothing.json")

    @pytest.mark.parametrize("value", ["1e308", "-0.5", "1.5", "2", "-1e-9"])
    @pytest.mark.parametrize("where", ["per_query", "means"])
    def test_every_metric_is_between_0_and_1(self, tmp_path: Path, value: str, where: str) -> None:
        # A baseline of 1e308 (or -1) everywhere made every run look worse (or better) than it: it passed the gate.
        path = _report({"bm25": [0.5, 1.0]}).save(tmp_path / "base.json")
        saved = json.loads(path.read_text())
        if where == "per_query":
            saved["methods"]["bm25"]["per_query"]["q01"]["ndcg@10"] = 0.0
        else:
            saved["methods"]["bm25"]["means"]["ndcg@10"] = 0.0
        path.write_text(json.dumps(saved).replace("0.0", value, 1))
        with pytest.raises(FusionError, match=r"^.*base.json: not a valid evaluation report: .*between 0 and 1") as e:
            EvalReport.load(path)
        assert "\n" not in str(e.value)

    def test_a_number_of_5000_digits_is_one_line(self, tmp_path: Path) -> None:
        path = _report({"bm25": [0.5, 1.0]}).save(tmp_path / "base.json")
        path.write_text(path.read_text().replace('"version": 1', '"version": ' + "9" * 5000))
        with pytest.raises(FusionError, match=r"base.json: not valid JSON \(a number of more than 4300 digits\)"):
            EvalReport.load(path)

    @pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
    def test_a_device_is_not_read(self) -> None:
        # /dev/zero was read until it filled the memory (10 GB in 40 s).
        with pytest.raises(
            FusionError, match=r"^/dev/zero: not a regular file; give a report written by eval --report"
        ):
            EvalReport.load("/dev/zero")

    def test_the_read_is_bounded(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_fusion.evaluation import files

        path = _report({"bm25": [0.5, 1.0]}).save(tmp_path / "base.json")
        monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
        with pytest.raises(FusionError, match=r"base.json: [0-9,]+ bytes, more than the 100 a report may have"):
            EvalReport.load(path)


class TestCompareReports:
    def test_identical_reports_are_not_worse(self) -> None:
        report = _report({"fusion (defaults)": list(np.linspace(0, 1, 30))})
        comparison = compare_reports(report, report)
        assert [c.p_value for c in comparison.comparisons] == [1.0, 1.0]
        assert comparison.worse == [] and comparison.queries == 30

    def test_a_clearly_worse_row_is_worse(self) -> None:
        rng = np.random.default_rng(4)
        baseline = rng.random(40)
        current = np.clip(baseline - 0.15 + rng.normal(0, 0.05, 40), 0, 1)
        same = list(rng.random(40))
        comparison = compare_reports(
            _report({"bm25": same, "fusion (defaults)": list(current)}),
            _report({"bm25": same, "fusion (defaults)": list(baseline)}),
        )
        assert [(c.method, c.metric) for c in comparison.worse] == [
            ("fusion (defaults)", "ndcg@10"),
            ("fusion (defaults)", "recall@10"),
        ]
        worse = comparison.worse[0]
        assert worse.delta == pytest.approx(float(np.mean(current - baseline)))
        assert worse.high < 0 and worse.p_value < 0.05
        assert "| fusion (defaults) | ndcg@10 |" in comparison.to_markdown() and "| worse |" in comparison.to_markdown()

    def test_better_is_not_worse(self) -> None:
        baseline = list(np.linspace(0, 0.5, 40))
        comparison = compare_reports(_report({"fusion": [v + 0.3 for v in baseline]}), _report({"fusion": baseline}))
        assert comparison.worse == [] and all(c.delta > 0 and c.p_value < 0.05 for c in comparison.comparisons)

    def test_different_query_sets_are_refused(self) -> None:
        current = _report({"bm25": [0.5] * 5}, ["q1", "q2", "q3", "q4", "q5"])
        baseline = _report({"bm25": [0.5] * 4}, ["q1", "q2", "q3", "q9"])
        with pytest.raises(FusionError) as refused:
            compare_reports(current, baseline)
        message = str(refused.value)
        assert "the baseline was made on another query set" in message
        assert "2 of this run's queries are not in it (q4, q5) and 1 of its queries are not in this run (q9)" in message

    def test_rows_and_metrics_only_one_side_has(self) -> None:
        current = _report({"bm25": [0.5, 1.0], "fusion + rerank": [1.0, 1.0]})
        comparison = compare_reports(current, _report({"bm25": [0.5, 1.0]}))
        assert {c.method for c in comparison.comparisons} == {"bm25"}
        assert comparison.skipped_methods == ["fusion + rerank"]
        with pytest.raises(FusionError, match="the baseline has no row in common with this run"):
            compare_reports(current, _report({"vector": [0.5, 1.0]}))

    @pytest.mark.parametrize("level", [0.0, 1.0, True, float("nan")])
    def test_significance_is_a_level(self, level: float) -> None:
        report = _report({"bm25": [0.5, 1.0]})
        with pytest.raises(InvalidParameterError, match="the significance level must be between 0 and 1"):
            compare_reports(report, report, significance=level)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sample indexed with the fake embeddings, which every CLI call of the module then uses."""
    out = tmp_path_factory.mktemp("gate") / "arden-index"
    with fake_cli_embeddings():
        assert main(["index", str(DATA), "--out", str(out), "-q"]) == 0
        yield out


class TestEvalGate:
    """eval --report, --baseline, --fail-if-worse and the exit status, on the sample with the fake embeddings."""

    def _eval(self, index: Path, *extra: str) -> int:
        argv = ["eval", "--index", str(index), "--labels", str(SAMPLE_QUERIES), "--alpha", "0.5"]
        return main([*argv, "--methods", "weighted", "-q", *extra])

    def test_the_same_run_passes_the_gate(
        self, sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        report = tmp_path / "base.json"
        assert self._eval(sample, "--report", str(report)) == 0
        assert f"report saved to {report}" in capsys.readouterr().out
        assert EvalReport.load(report).queries == [f"q{i:02d}" for i in range(1, 55)]
        assert self._eval(sample, "--baseline", str(report), "--fail-if-worse") == 0
        out = capsys.readouterr().out
        assert "compared with" in out and "54 queries paired" in out and "nothing significantly worse" in out

    def test_a_worse_run_fails_with_exit_status_3(
        self, sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        report = tmp_path / "base.json"
        assert self._eval(sample, "--report", str(report)) == 0
        saved = json.loads(report.read_text())
        fused = saved["methods"]["fusion (defaults)"]["per_query"]
        for values in fused.values():  # a baseline that found everything: this run is worse
            values["ndcg@10"] = 1.0
        report.write_text(json.dumps(saved))
        capsys.readouterr()
        assert self._eval(sample, "--baseline", str(report)) == 0  # without --fail-if-worse: reported only
        assert "| fusion (defaults) | ndcg@10 | 1.0000 |" in capsys.readouterr().out
        assert self._eval(sample, "--baseline", str(report), "--fail-if-worse", "--json") == 3
        captured = capsys.readouterr()
        payload = json.loads(captured.out)["baseline"]
        assert payload["worse"] == 1 and payload["significance"] == 0.05
        assert "significantly worse than" in captured.err and "fusion (defaults) ndcg@10 -0." in captured.err

    def test_another_query_set_is_refused(
        self, sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        labels = json.loads(SAMPLE_QUERIES.read_text())
        fewer = tmp_path / "fewer.json"
        fewer.write_text(json.dumps(labels[:50]))
        report = tmp_path / "base.json"
        argv = ["eval", "--index", str(sample), "--labels", str(fewer), "--alpha", "0.5", "-q", "--report", str(report)]
        assert main(argv) == 0
        capsys.readouterr()
        assert self._eval(sample, "--baseline", str(report), "--fail-if-worse") == 2
        err = capsys.readouterr().err
        assert "the baseline was made on another query set" in err and "4 of this run's queries are not in it" in err

    def test_a_calibrated_index_reports_its_calibration(
        self, sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        index = tmp_path / "calibrated"
        shutil.copytree(sample, index)
        plot, report = tmp_path / "reliability.png", tmp_path / "report.json"
        assert self._eval(index, "--calibrate", "--reliability-plot", str(plot), "--report", str(report)) == 0
        out = capsys.readouterr().out
        assert "relevance on the labels (the labels it was fitted on: in-sample, optimistic): top 10 of 54" in out
        assert f"reliability plot saved to {plot}" in out and plot.read_bytes()[:4] == b"\x89PNG"
        checked = EvalReport.load(report).calibration
        assert checked is not None and (checked.queries, checked.results) == (54, 540)
        assert self._eval(index, "--json") == 0  # calibrated before: reported on every run
        payload = json.loads(capsys.readouterr().out)["calibration_check"]
        assert payload["expected_calibration_error"] == checked.expected_calibration_error
        assert sum(b["count"] for b in payload["bins"]) == 540

    @pytest.mark.parametrize(
        "extra,message",
        [
            (["--fail-if-worse"], "--fail-if-worse compares with a saved report: add --baseline REPORT"),
            (["--baseline", "no-such-report.json"], "no-such-report.json: no such report"),
            (["--baseline", "/dev/zero"], "/dev/zero: not a regular file"),
            (["--labels", "/dev/zero"], "/dev/zero: not a regular file"),
            (["--no-answer", "/dev/zero", "--vector-floors", "0.3"], "/dev/zero: not a regular file"),
            (["--reliability-plot", "r.png"], "--reliability-plot needs a calibrated index"),
        ],
    )
    def test_user_errors(
        self, sample: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert self._eval(sample, *extra) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err

    def test_the_significance_level_is_checked(self, sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            self._eval(sample, "--significance", "1.5")
        assert exit_info.value.code == 2
        assert "--significance: expected a significance level between 0 and 1" in capsys.readouterr().err


class TestEvalCommandDefaults:
    def test_significance_matches_the_library(self) -> None:
        from langchain_fusion.cli import eval_arguments as command
        from langchain_fusion.evaluation import reports

        assert command.DEFAULT_SIGNIFICANCE == reports.DEFAULT_SIGNIFICANCE
