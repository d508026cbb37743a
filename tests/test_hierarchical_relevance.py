"""Calibrated relevance for hierarchical search: its own model, saved with the folder, floored per call, on every face.

The corpus is :func:`tests.helpers.corpora.report_corpus` (six topics, twenty numbered reports each, one
relevant report per query), with one summary per half topic, so hierarchical search ranks the
right report first when its half is selected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex, HierarchicalIndex, PipelineSpec, build_pipeline
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import main
from langchain_fusion.errors import IndexFormatError, InvalidParameterError
from langchain_fusion.evaluation import evaluate_calibration
from langchain_fusion.evaluation.harness import ANSWERED, NO_ANSWER_EMPTY, sweep_relevance
from langchain_fusion.index.sync import SYNC_INFO_KEY
from langchain_fusion.ingest.summaries import leading_text_summaries
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY
from langchain_fusion.stores.local import folder as fmt
from tests.helpers.corpora import TOPICS, report_corpus, report_dataset
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.paths import DATA, LOOPBACK_URL, SAMPLE_QUERIES

NOT_CALIBRATED = "min_relevance needs a calibrated hierarchical index"
OFF_TOPIC = "how do I cook pasta"


def _hierarchical() -> HierarchicalIndex:
    texts, ids = report_corpus()
    chunks = FusionIndex.from_texts(texts, HashingEmbeddings(), ids=ids)
    summaries = [
        Document(
            page_content=f"{topic} reports {half * 10} to {half * 10 + 9}",
            metadata={
                keys.SOURCE: topic,
                keys.SUMMARY_CHUNK_IDS: [f"{t}-{j}" for j in range(10 * half, 10 * half + 10)],
            },
        )
        for t, topic in enumerate(TOPICS)
        for half in (0, 1)
    ]
    return HierarchicalIndex.from_summaries(chunks, summaries)


@pytest.fixture
def hierarchical() -> HierarchicalIndex:
    return _hierarchical()


@pytest.fixture(scope="module")
def calibrated() -> HierarchicalIndex:
    index = _hierarchical()
    index.calibrate(report_dataset())
    return index


class TestCalibrate:
    def test_fitted_on_hierarchical_results(self, hierarchical: HierarchicalIndex) -> None:
        model = hierarchical.calibrate(report_dataset(), k=5, k_summaries=2)
        assert hierarchical.relevance_model == model and model.k == 5 and model.dataset == "reports"
        assert (model.quality.queries, model.quality.results) == (60, 300)
        assert 0.0 <= model.quality.expected_calibration_error < 0.05
        assert hierarchical.chunks.relevance_model is None  # the chunk index keeps no model of it
        flat = hierarchical.chunks.calibrate(report_dataset(), k=5)
        assert flat.weights != model.weights  # two fits on two rankings, each kept apart
        assert hierarchical.relevance_model == model

    def test_every_result_carries_its_relevance(self, calibrated: HierarchicalIndex) -> None:
        docs = calibrated.as_retriever(k=5).invoke("solar panel report 7")  # a query it was not fitted on
        assert docs[0].id == "2-7"
        relevance = [doc.metadata[keys.RELEVANCE] for doc in docs]
        assert all(0.0 <= value <= 1.0 for value in relevance)
        assert relevance[0] > 0.5 > max(relevance[1:])
        assert all(keys.HIERARCHICAL_SCORE in doc.metadata for doc in docs)

    def test_min_relevance_drops_and_is_per_call(self, calibrated: HierarchicalIndex) -> None:
        retriever = calibrated.as_retriever(k=5, min_relevance=0.5)
        assert [doc.id for doc in retriever.invoke("wind turbine report 9")] == ["3-9"]
        assert retriever.invoke(OFF_TOPIC) == []
        assert len(retriever.invoke("wind turbine report 9", min_relevance=0.0)) == 5
        loose = calibrated.as_retriever(k=5)
        assert [d.id for d in loose.invoke("wind turbine report 9", min_relevance=0.5)] == ["3-9"]
        assert loose.batch(["grid outage report 3", OFF_TOPIC], min_relevance=0.5)[1] == []

    async def test_async_twin(self, calibrated: HierarchicalIndex) -> None:
        docs = await calibrated.as_retriever(k=5).ainvoke("wind turbine report 9", min_relevance=0.5)
        assert [doc.id for doc in docs] == ["3-9"]

    def test_answerability(self, calibrated: HierarchicalIndex) -> None:
        covered = calibrated.answerability("battery flood report 11")
        top = calibrated.as_retriever(k=1).invoke("battery flood report 11")[0]
        assert covered == top.metadata[keys.RELEVANCE] > 0.5 > calibrated.answerability(OFF_TOPIC)

    def test_evaluation_measures_hierarchical_results(self, calibrated: HierarchicalIndex) -> None:
        dataset = report_dataset(step=1)
        dataset.no_answer.update({"n1": OFF_TOPIC})
        report = evaluate_calibration(calibrated, dataset, progress=False)
        assert (report.queries, report.results) == (120, 1200) and report.expected_calibration_error < 0.1
        floors = sweep_relevance(calibrated, dataset, [0.5], ["recall@10"], progress=False).results[-1].extra
        assert floors[NO_ANSWER_EMPTY] == 1.0 and floors[ANSWERED] > 0.9


class TestWithoutCalibration:
    def test_no_relevance_is_made_up(self, hierarchical: HierarchicalIndex) -> None:
        assert hierarchical.relevance_model is None
        assert all(keys.RELEVANCE not in d.metadata for d in hierarchical.as_retriever().invoke("solar panel report 7"))

    def test_a_floor_is_one_clear_error(self, hierarchical: HierarchicalIndex) -> None:
        with pytest.raises(InvalidParameterError, match=f"{NOT_CALIBRATED}.*calibrate"):
            hierarchical.as_retriever(min_relevance=0.3).invoke("solar panel report 7")
        with pytest.raises(InvalidParameterError, match="answerability needs a calibrated hierarchical index"):
            hierarchical.answerability("solar panel report 7")
        with pytest.raises(InvalidParameterError, match="a calibration report needs a calibrated hierarchical"):
            evaluate_calibration(hierarchical, report_dataset(), progress=False)

    def test_a_flat_calibration_of_the_chunks_does_not_stand_in(self, hierarchical: HierarchicalIndex) -> None:
        hierarchical.chunks.calibrate(report_dataset())
        assert hierarchical.relevance_model is None
        assert all(keys.RELEVANCE not in d.metadata for d in hierarchical.as_retriever().invoke("solar panel report 7"))
        with pytest.raises(InvalidParameterError, match=NOT_CALIBRATED):
            hierarchical.as_retriever().invoke("solar panel report 7", min_relevance=0.3)

    @pytest.mark.parametrize("value", [-0.1, 1.5, "0.3", True])
    def test_the_floor_is_a_probability(self, hierarchical: HierarchicalIndex, value: object) -> None:
        with pytest.raises(InvalidParameterError, match="min_relevance must be a probability"):
            hierarchical.as_retriever(min_relevance=value)


class TestSaved:
    def test_round_trip(self, calibrated: HierarchicalIndex, tmp_path: Path) -> None:
        folder = calibrated.save(tmp_path / "hier", info={"note": "kept"})
        manifest = json.loads((folder / fmt.MANIFEST).read_text())
        assert manifest[RELEVANCE_INFO_KEY] == calibrated.relevance_data  # JSON data in the folder's manifest
        chunk_manifest = json.loads((folder / "chunks" / fmt.MANIFEST).read_text())
        assert RELEVANCE_INFO_KEY not in chunk_manifest["info"] and chunk_manifest["info"]["note"] == "kept"
        loaded = HierarchicalIndex.load(folder, HashingEmbeddings())
        assert loaded.relevance_model == calibrated.relevance_model and loaded.chunks.relevance_model is None
        query = "diesel backup report 11"
        assert [d.metadata[keys.RELEVANCE] for d in loaded.as_retriever().invoke(query)] == pytest.approx(
            [d.metadata[keys.RELEVANCE] for d in calibrated.as_retriever().invoke(query)]
        )

    def test_both_models_kept_apart(self, hierarchical: HierarchicalIndex, tmp_path: Path) -> None:
        flat = hierarchical.chunks.calibrate(report_dataset(), k=5)
        folder = hierarchical.save(tmp_path / "flat-only")
        loaded = HierarchicalIndex.load(folder, HashingEmbeddings())
        assert loaded.chunks.relevance_model == flat and loaded.relevance_model is None
        model = loaded.calibrate(report_dataset())
        again = HierarchicalIndex.load(loaded.save(folder), HashingEmbeddings())
        assert (again.relevance_model, again.chunks.relevance_model) == (model, flat)

    def test_a_folder_saved_without_it_loads(self, hierarchical: HierarchicalIndex, tmp_path: Path) -> None:
        folder = hierarchical.save(tmp_path / "older")
        assert RELEVANCE_INFO_KEY not in json.loads((folder / fmt.MANIFEST).read_text())
        loaded = HierarchicalIndex.load(folder, HashingEmbeddings())
        assert loaded.relevance_model is None and loaded.as_retriever().invoke("solar panel report 7")

    def test_an_invalid_saved_model_is_an_index_format_error(self, calibrated: HierarchicalIndex) -> None:
        index = HierarchicalIndex(calibrated.chunks, calibrated.summaries)
        index.relevance_data = {**(calibrated.relevance_data or {}), "weights": [1.0]}
        with pytest.raises(IndexFormatError, match="saved with this hierarchical index is not valid"):
            index.as_retriever().invoke("solar panel report 7")


class TestPipeline:
    def test_the_spec_passes_min_relevance_to_hierarchical_search(self, calibrated: HierarchicalIndex) -> None:
        pipeline = build_pipeline(PipelineSpec.of(calibrated, k=5, min_relevance=0.5))
        assert pipeline.hierarchical
        assert [d.id for d in pipeline.retriever.invoke("wind turbine report 9")] == ["3-9"]
        assert pipeline.retriever.invoke(OFF_TOPIC) == []
        assert len(pipeline.retriever.invoke("wind turbine report 9", min_relevance=0.0)) == 5
        assert (pipeline.defaults() or {})["min_relevance"] == 0.5

    def test_raw_floors_are_still_refused(self, calibrated: HierarchicalIndex) -> None:
        with pytest.raises(InvalidParameterError, match="min_vector_score apply to fused search, not to hierarchical"):
            build_pipeline(PipelineSpec.of(calibrated, min_vector_score=0.2, min_relevance=0.5))


class TestServed:
    """LangServe and MCP take min_relevance through the spec, as for a plain index."""

    def _post(self, index: HierarchicalIndex, min_relevance: float) -> Any:
        from fastapi.testclient import TestClient

        from langchain_fusion.server import create_app

        client = TestClient(create_app(index, k=5), base_url=LOOPBACK_URL)
        body = {"input": "wind turbine report 9", "config": {"configurable": {"min_relevance": min_relevance}}}
        return client.post("/retriever/invoke", json=body)

    def test_server(self, calibrated: HierarchicalIndex) -> None:
        pytest.importorskip("langserve")
        response = self._post(calibrated, 0.5)
        assert response.status_code == 200, response.text
        output = response.json()["output"]
        assert [doc["id"] for doc in output] == ["3-9"] and output[0]["metadata"]["relevance"] > 0.5
        assert keys.HIERARCHICAL_SCORE in output[0]["metadata"]

    def test_server_not_calibrated(self, hierarchical: HierarchicalIndex) -> None:
        pytest.importorskip("langserve")
        response = self._post(hierarchical, 0.5)
        assert response.status_code == 422 and NOT_CALIBRATED in response.json()["detail"]

    async def test_mcp(self, calibrated: HierarchicalIndex, hierarchical: HierarchicalIndex) -> None:
        from langchain_fusion.mcp import build_mcp_server
        from tests.helpers.mcp import call_search, connected, results_of, text_of

        async with connected(build_mcp_server(calibrated, k=5, log_level="WARNING")) as session:
            [tool] = (await session.list_tools()).tools
            floored = results_of(await call_search(session, query="wind turbine report 9", min_relevance=0.5)).results
            off_topic = results_of(await call_search(session, query=OFF_TOPIC, min_relevance=0.5)).results
        assert "min_relevance" in tool.inputSchema["properties"]
        assert [hit.id for hit in floored] == ["3-9"] and floored[0].metadata["relevance"] > 0.5
        assert off_topic == []
        async with connected(build_mcp_server(hierarchical, k=5, log_level="WARNING")) as session:
            refused = await call_search(session, query="wind turbine report 9", min_relevance=0.5)
        assert refused.isError is True and NOT_CALIBRATED in text_of(refused)


class TestCommandLine:
    """eval --calibrate on a hierarchical folder writes its model; query and ask then take --min-relevance."""

    @pytest.fixture
    def folder(self, tmp_path: Path) -> Path:
        with fake_cli_embeddings():
            assert main(["index", str(DATA), "--out", str(tmp_path / "flat"), "--embeddings", "local", "-q"]) == 0
            chunks = FusionIndex.load(tmp_path / "flat")
        hierarchical = HierarchicalIndex.from_summaries(chunks, leading_text_summaries(chunks.documents))
        return hierarchical.save(tmp_path / "sample-hierarchical", info=chunks.saved_info)  # with the file record

    def _run(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        with fake_cli_embeddings():
            status = main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    @pytest.mark.slow  # the sample indexed, calibrated with a floor sweep over 70 queries, then six commands
    def test_calibrate_then_query(
        self, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        model = FakeListChatModel(responses=["never asked"])
        monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        floor = ["--hierarchical", "--min-relevance"]
        status, _, err = self._run(capsys, "query", str(folder), "recipe for banana bread", *floor, "0.3")
        assert status == 2 and NOT_CALIBRATED in err and len(err.strip().splitlines()) == 1
        labels = ["--index", str(folder), "--labels", str(SAMPLE_QUERIES), "--alpha", "0.5", "--methods", "weighted"]
        sweep = ["--relevance-floors", "0.3", "--no-answer", str(DATA / "no-answer.json")]
        status, out, err = self._run(capsys, "eval", *labels, "--calibrate", *sweep, "-q")
        assert status == 0, err
        assert "calibrated relevance of hierarchical search saved into the index: fitted on 54 queries" in out
        assert "relevance of hierarchical search on the labels (the labels it was fitted on" in out
        assert "relevance floors (min_relevance of hierarchical search; 54 answerable and 16 no-answer" in out
        loaded = HierarchicalIndex.load(folder, HashingEmbeddings())
        assert loaded.relevance_model is not None and loaded.relevance_model.quality.queries == 54
        assert loaded.chunks.relevance_model is None  # the chunk index's own (flat) model is not written
        assert loaded.chunks.saved_info[SYNC_INFO_KEY]["by_path"]  # the file record survives the save
        status, out, _ = self._run(capsys, "query", str(folder), "recipe for banana bread", *floor, "0.99")
        assert status == 0 and out.strip() == "no results above the relevance floor"
        status, out, _ = self._run(capsys, "query", str(folder), "KV-5500 inverter kVA", "-k", "2", "--hierarchical")
        assert status == 0 and "P(rel)" in out.splitlines()[0] and "sum#" in out.splitlines()[0]
        status, out, _ = self._run(capsys, "query", str(folder), "KV-5500 inverter", "--hierarchical", "--json")
        results = json.loads(out)
        assert status == 0 and results
        assert all(0.0 <= r["metadata"]["relevance"] <= 1.0 and "hierarchical_score" in r["metadata"] for r in results)
        status, out, _ = self._run(capsys, "ask", str(folder), "recipe for banana bread", *floor, "0.99", "--json")
        assert status == 0 and json.loads(out)["sources"] == [] and json.loads(out)["answer"] != "never asked"
        # Searched flat, the chunks have no model of their own: the error says how to use the hierarchical one.
        status, _, err = self._run(capsys, "query", str(folder), "recipe for banana bread", "--min-relevance", "0.3")
        assert status == 2 and "calibrated for hierarchical search only" in err and "--hierarchical" in err
        status, out, _ = self._run(capsys, "eval", *labels, "--json", "-q")  # calibrated before: checked every run
        checked = json.loads(out)["calibration_check"]
        # The same top-10 results it was fitted on (fewer than 540: three small pages may hold fewer than ten chunks).
        assert status == 0 and checked["results"] == loaded.relevance_model.quality.results
        assert checked["queries"] == 54 and 0.0 <= checked["expected_calibration_error"] < 0.2
        # An index rerun (summaries written again) keeps the hierarchical model, as a plain index keeps its own.
        rerun = ["index", str(DATA), "--out", str(folder), "--embeddings", "local", "--summaries", "--llm", "openai"]
        status, _, err = self._run(capsys, *rerun, "-q")
        assert status == 0, err
        assert HierarchicalIndex.load(folder, HashingEmbeddings()).relevance_model == loaded.relevance_model


def test_leading_text_summaries() -> None:
    """Summaries without a chat model: each page or section's leading text, linked to its chunks."""
    from langchain_fusion.ingest.summaries import page_units

    chunks = [
        Document(id=f"c{i}", page_content=f"Page {page} paragraph {i}. " * 20, metadata={keys.SOURCE: "r.pdf", **loc})
        for i, (page, loc) in enumerate([(1, {keys.PAGE: 1}), (1, {keys.PAGE: 1}), (2, {keys.PAGE: 2})])
    ]
    summaries = leading_text_summaries(chunks, chars=50)
    units = page_units(chunks)
    assert [s.id for s in summaries] == [u.id for u in units]
    assert [s.metadata[keys.SUMMARY_CHUNK_IDS] for s in summaries] == [["c0", "c1"], ["c2"]]
    assert [s.page_content for s in summaries] == [u.text[:50] for u in units]
    assert all(s.metadata[keys.SUMMARY_FALLBACK] is True and s.metadata[keys.PAGE] for s in summaries)
    with pytest.raises(InvalidParameterError, match="chars must be >= 1"):
        leading_text_summaries(chunks, chars=0)
