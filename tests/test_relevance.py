"""Calibrated relevance: fitted on labelled queries, saved with the index, floored per call, never made up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from langchain_fusion import FusionIndex, VectorRetriever
from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError, IndexFormatError, InvalidParameterError
from langchain_fusion.evaluation.datasets import EvalDataset
from langchain_fusion.index.opening import open_index
from langchain_fusion.search.relevance import (
    RELEVANCE_INFO_KEY,
    RelevanceModel,
    expected_calibration_error,
    fit_relevance,
)
from tests.helpers.corpora import report_corpus, report_dataset
from tests.helpers.embeddings import HashingEmbeddings


@pytest.fixture
def index() -> FusionIndex:
    texts, ids = report_corpus()
    return FusionIndex.from_texts(texts, HashingEmbeddings(), ids=ids)


@pytest.fixture
def calibrated(index: FusionIndex) -> FusionIndex:
    index.calibrate(report_dataset())
    return index


class TestCalibrate:
    def test_fit_reports_its_quality(self, index: FusionIndex) -> None:
        model = index.calibrate(report_dataset())
        assert index.relevance_model == model
        assert (model.quality.queries, model.quality.results, model.quality.relevant) == (60, 600, 60)
        assert 0.0 <= model.quality.expected_calibration_error < 0.05
        assert 0.0 <= model.quality.brier_score < 0.05
        assert model.dataset == "reports" and model.k == 10

    def test_every_result_carries_its_relevance(self, calibrated: FusionIndex) -> None:
        docs = calibrated.as_retriever(k=5).invoke("solar panel report 7")  # a query it was not fitted on
        assert docs[0].id == "2-7"
        relevance = [doc.metadata[keys.RELEVANCE] for doc in docs]
        assert all(0.0 <= value <= 1.0 for value in relevance)
        assert relevance[0] > 0.5 > max(relevance[1:])

    def test_min_relevance_leaves_out_what_is_not_relevant(self, calibrated: FusionIndex) -> None:
        retriever = calibrated.as_retriever(k=5, min_relevance=0.5)
        assert [doc.id for doc in retriever.invoke("wind turbine report 9")] == ["3-9"]
        assert retriever.invoke("an unrelated question about cooking pasta") == []
        assert len(retriever.invoke("wind turbine report 9", min_relevance=0.0)) == 5  # per call
        assert calibrated.as_retriever(k=5).batch(["grid outage report 3", "cooking pasta"], min_relevance=0.5)[1] == []

    def test_too_few_relevant_results_is_one_clear_error(self, index: FusionIndex) -> None:
        empty = EvalDataset(name="none", queries={"q": "battery flood report 1"}, qrels={"q": {"nowhere": 1}})
        with pytest.raises(FusionError, match="calibration needs relevant and non-relevant results"):
            index.calibrate(empty)

    def test_a_fit_takes_no_relevance_floor(self, calibrated: FusionIndex) -> None:
        # A floor would fit the new model on what the old one kept.
        with pytest.raises(FusionError, match="calibrate fits on every result of the search, so it takes no min_rel"):
            calibrated.calibrate(report_dataset(), min_relevance=0.3)

    def test_search_options_of_the_fit(self, index: FusionIndex) -> None:
        model = index.calibrate(report_dataset(), k=5, alpha=0.3)
        assert model.k == 5 and model.quality.results == 300


class TestRelevanceSweep:
    def test_rows_trade_answers_for_abstentions(self, calibrated: FusionIndex) -> None:
        from langchain_fusion.evaluation.harness import ANSWERED, NO_ANSWER_EMPTY, sweep_relevance

        dataset = report_dataset(step=3)
        dataset.no_answer.update({"n1": "how do I cook pasta", "n2": "who won the world cup"})
        report = sweep_relevance(calibrated, dataset, [0.9, 0.1, 0.5], ["ndcg@10", "recall@10"], progress=False)
        assert [r.name for r in report.results] == ["no floor", "relevance>=0.1", "relevance>=0.5", "relevance>=0.9"]
        answered = [r.extra[ANSWERED] for r in report.results]
        empty = [r.extra[NO_ANSWER_EMPTY] for r in report.results]
        assert answered == sorted(answered, reverse=True) and empty == sorted(empty)
        assert (answered[0], empty[0], empty[2]) == (1.0, 0.0, 1.0)
        assert report.results[0].means["recall@10"] == 1.0

    def test_needs_a_calibrated_index(self, index: FusionIndex) -> None:
        from langchain_fusion.evaluation.harness import sweep_relevance

        with pytest.raises(InvalidParameterError, match="a relevance floor sweep needs a calibrated index"):
            sweep_relevance(index, report_dataset(), [0.3], progress=False)


class TestCalibrationOnLabels:
    """ECE, Brier score and reliability of a calibrated index's relevance on labelled queries (what eval reports)."""

    def test_figures_of_the_top_k_against_the_labels(self, calibrated: FusionIndex) -> None:
        from langchain_fusion.evaluation import evaluate_calibration

        dataset = report_dataset(step=1)  # the 60 queries it was fitted on and the 60 it was not
        report = evaluate_calibration(calibrated, dataset, progress=False)
        ranked = calibrated.as_retriever(k=10).batch(list(dataset.queries.values()))
        predicted = [doc.metadata[keys.RELEVANCE] for docs in ranked for doc in docs]
        pairs = zip(dataset.queries, ranked, strict=True)
        observed = [float(str(doc.id) in dataset.qrels[q]) for q, docs in pairs for doc in docs]
        assert (report.queries, report.k, report.results) == (120, 10, 1200)
        assert report.relevant == sum(observed) > 100
        assert report.expected_calibration_error == pytest.approx(expected_calibration_error(predicted, observed))
        assert report.brier_score == pytest.approx(float(np.mean((np.array(predicted) - observed) ** 2)))
        assert 0.0 <= report.expected_calibration_error < 0.1 and report.brier_score < 0.1
        assert len(report.bins) == 10 and sum(b.count for b in report.bins) == 1200
        low = report.bins[0]
        inside = [y for p, y in zip(predicted, observed, strict=True) if p < 0.1]
        assert low.count == len(inside) and low.observed == pytest.approx(np.mean(inside))

    def test_a_shuffled_model_is_badly_calibrated(self, calibrated: FusionIndex) -> None:
        from langchain_fusion.evaluation import evaluate_calibration

        model = calibrated.relevance_model
        assert model is not None
        flipped = model.model_copy(update={"weights": [-w for w in model.weights], "bias": -model.bias})
        calibrated.saved_info = {**calibrated.saved_info, RELEVANCE_INFO_KEY: flipped.model_dump(mode="json")}
        report = evaluate_calibration(calibrated, report_dataset(step=1), k=5, progress=False)
        assert report.k == 5 and report.expected_calibration_error > 0.5

    def test_reliability_plot(self, calibrated: FusionIndex, tmp_path: Path) -> None:
        from langchain_fusion.evaluation import evaluate_calibration, plot_reliability

        report = evaluate_calibration(calibrated, report_dataset(step=3), progress=False)
        path = plot_reliability(report, tmp_path / "plots" / "reliability.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "| 0.0-0.1 |" in report.to_markdown()

    def test_needs_a_calibrated_index(self, index: FusionIndex) -> None:
        from langchain_fusion.evaluation import evaluate_calibration

        with pytest.raises(InvalidParameterError, match="a calibration report needs a calibrated index"):
            evaluate_calibration(index, report_dataset(), progress=False)


class TestAnswerability:
    def test_a_gate_before_answering(self, calibrated: FusionIndex) -> None:
        covered = calibrated.answerability("inverter rating report 13")
        assert covered == calibrated.as_retriever(k=1).invoke("inverter rating report 13")[0].metadata[keys.RELEVANCE]
        assert covered > 0.5 > calibrated.answerability("how do I cook pasta")
        assert calibrated.answerability("inverter rating report 13", filter={"nothing": "matches"}) == 0.0

    def test_needs_a_calibrated_index(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="answerability needs a calibrated index"):
            index.answerability("battery flood report 2")


class TestWithoutCalibration:
    def test_no_relevance_is_made_up(self, index: FusionIndex) -> None:
        for doc in index.as_retriever(k=3).invoke("battery flood report 2"):
            assert keys.RELEVANCE not in doc.metadata
        assert index.relevance_model is None

    def test_a_floor_without_a_model_is_one_clear_error(self, index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match=r"min_relevance needs a calibrated index: .*calibrate"):
            index.as_retriever(min_relevance=0.3).invoke("battery flood report 2")

    @pytest.mark.parametrize("value", [-0.1, 1.5, "0.3", True, float("nan")])
    def test_the_floor_is_a_probability(self, index: FusionIndex, value: object) -> None:
        with pytest.raises(InvalidParameterError, match="min_relevance must be a probability"):
            index.as_retriever(min_relevance=value)


class TestScoreKey:
    def test_score_is_the_ranking_score(self, index: FusionIndex) -> None:
        for doc in index.as_retriever(k=3).invoke("battery flood report 2"):
            assert doc.metadata[keys.SCORE] == doc.metadata[keys.FUSION_SCORE]
        for doc in VectorRetriever(index=index, k=3).invoke("battery flood report 2"):
            assert doc.metadata[keys.SCORE] == doc.metadata[keys.VECTOR_SCORE]


class TestSaved:
    def test_saved_and_loaded_with_the_index(self, calibrated: FusionIndex, tmp_path: Path) -> None:
        calibrated.save(tmp_path / "index", info={"note": "kept too"})
        for loaded in (
            FusionIndex.load(tmp_path / "index", HashingEmbeddings()),
            open_index(tmp_path / "index", HashingEmbeddings()),
        ):
            assert isinstance(loaded, FusionIndex)
            assert loaded.relevance_model == calibrated.relevance_model
            assert loaded.saved_info["note"] == "kept too"
            query = "diesel backup report 11"
            assert [d.metadata[keys.RELEVANCE] for d in loaded.as_retriever().invoke(query)] == pytest.approx(
                [d.metadata[keys.RELEVANCE] for d in calibrated.as_retriever().invoke(query)]
            )

    def test_an_update_keeps_it(self, calibrated: FusionIndex) -> None:
        info = calibrated.info_to_save({"sync": {"by_path": {}}})
        assert info["sync"] == {"by_path": {}} and RELEVANCE_INFO_KEY in info

    def test_an_invalid_saved_model_is_an_index_format_error(self, calibrated: FusionIndex) -> None:
        saved = dict(calibrated.saved_info[RELEVANCE_INFO_KEY])
        calibrated.saved_info = {RELEVANCE_INFO_KEY: {**saved, "weights": [1.0]}}
        with pytest.raises(IndexFormatError, match="relevance model saved with this index is not valid"):
            calibrated.as_retriever().invoke("battery flood report 2")


class TestModel:
    def test_expected_calibration_error(self) -> None:
        assert expected_calibration_error([0.1] * 10, [1] + [0] * 9) == pytest.approx(0.0)
        assert expected_calibration_error([0.9, 0.9], [0, 0]) == pytest.approx(0.9)
        assert expected_calibration_error([0.05, 0.95], [0, 1]) == pytest.approx(0.05)

    def test_recovers_a_known_logistic_relation(self) -> None:
        from langchain_core.documents import Document

        rng = np.random.default_rng(1)
        ranked, labels = [], []
        for _ in range(400):
            cosines = np.sort(rng.uniform(0, 1, 10))[::-1]
            docs = [Document(page_content="x", metadata={"vector_score": float(c), "bm25_score": 0.0}) for c in cosines]
            p = 1 / (1 + np.exp(-(8 * cosines - 6)))
            ranked.append(docs)
            labels.append(list(rng.uniform(0, 1, 10) < p))
        model = fit_relevance(ranked, labels, k=10, dataset="synthetic")
        assert model.quality.expected_calibration_error < 0.03
        probe = [Document(page_content="x", metadata={"vector_score": c, "bm25_score": 0.0}) for c in (0.9, 0.5)]
        high, low = model.relevance(probe)
        assert high == pytest.approx(1 / (1 + np.exp(-(8 * 0.9 - 6))), abs=0.1)
        assert low < high
        assert RelevanceModel.model_validate(model.model_dump(mode="json")) == model


class TestServed:
    """A served request may set min_relevance like any option; on an index without a model it is a 422."""

    def _post(self, index: FusionIndex, min_relevance: float) -> object:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app
        from tests.helpers.paths import LOOPBACK_URL

        client = TestClient(create_app(index, k=5), base_url=LOOPBACK_URL)
        body = {"input": "wind turbine report 9", "config": {"configurable": {"min_relevance": min_relevance}}}
        return client.post("/retriever/invoke", json=body)

    def test_calibrated(self, calibrated: FusionIndex) -> None:
        response = self._post(calibrated, 0.5)
        assert response.status_code == 200  # type: ignore[attr-defined]
        output = response.json()["output"]  # type: ignore[attr-defined]
        assert [doc["id"] for doc in output] == ["3-9"] and output[0]["metadata"]["relevance"] > 0.5

    def test_not_calibrated(self, index: FusionIndex) -> None:
        response = self._post(index, 0.5)
        assert response.status_code == 422  # type: ignore[attr-defined]
        assert "min_relevance needs a calibrated index" in response.json()["detail"]  # type: ignore[attr-defined]


class TestRagChain:
    """A question nothing relevant answers is answered as such, without calling the model."""

    def test_no_passage_no_model_call(self, calibrated: FusionIndex) -> None:
        from langchain_core.language_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage

        from langchain_fusion.chains import NO_SOURCES_ANSWER, build_rag_chain

        calls: list[object] = []

        def answers() -> object:
            while True:
                calls.append(1)
                yield AIMessage(content="The report says so [1].")

        model = GenericFakeChatModel(messages=answers())
        chain = build_rag_chain(calibrated.as_retriever(k=4, min_relevance=0.5), model)
        assert chain.invoke("how do I cook pasta") == {"answer": NO_SOURCES_ANSWER, "sources": []}
        chunks = list(chain.stream("how do I cook pasta"))
        assert {"sources": []} in chunks and "".join(c.get("answer", "") for c in chunks) == NO_SOURCES_ANSWER
        assert calls == []
        covered = chain.invoke("wind turbine report 9")
        assert covered["answer"] == "The report says so [1]." and [d.id for d in covered["sources"]] == ["3-9"]
        assert len(calls) == 1
        asked = build_rag_chain(calibrated.as_retriever(k=4, min_relevance=0.5), model, no_sources_answer=None)
        assert asked.invoke("how do I cook pasta")["answer"] == "The report says so [1]."
        assert len(calls) == 2
