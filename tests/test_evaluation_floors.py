"""Evaluating relevance floors and diversity: no-answer queries, the floor sweep and the eval command's rows."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_fusion import FusionError, FusionIndex, FusionRetriever
from langchain_fusion.cli.app import main
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.evaluation import evaluate_retrievers, load_labelled, load_queries, sweep_floors
from langchain_fusion.evaluation.harness import ANSWERED, NO_ANSWER_EMPTY, value_grid
from langchain_fusion.ingest.loading import load_files, split_documents
from langchain_fusion.search.floors import floor_name
from tests.helpers.corpora import write_beir
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.paths import DATA, SAMPLE_QUERIES

NO_ANSWER = DATA / "no-answer.json"


@pytest.fixture(scope="module")
def sample_index() -> FusionIndex:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = split_documents(load_files([DATA]).documents)
    return FusionIndex.from_documents(chunks, HashingEmbeddings())


@pytest.fixture(scope="module")
def dataset(sample_index: FusionIndex) -> object:
    loaded = load_labelled(SAMPLE_QUERIES, sample_index.documents)
    loaded.no_answer.update(load_queries(NO_ANSWER))
    return loaded


class TestNoAnswerQueries:
    def test_the_sample_file(self) -> None:
        queries = load_queries(NO_ANSWER)
        assert len(queries) == 16 and queries["n01"] == "recipe for banana bread"

    def test_text_and_json_forms(self, tmp_path: Path) -> None:
        (tmp_path / "q.txt").write_text("# a comment\nfirst query\n\n  second query  \n")
        assert load_queries(tmp_path / "q.txt") == {"n1": "first query", "n2": "second query"}
        (tmp_path / "q.json").write_text(json.dumps(["one", {"id": "x", "query": "two"}]))
        assert load_queries(tmp_path / "q.json") == {"n1": "one", "x": "two"}

    @pytest.mark.parametrize(
        ("content", "message"),
        [("{}", "expected a JSON list"), ("[3]", "record 1 is neither"), ("[", "not valid JSON"), ('[""]', "record 1")],
    )
    def test_invalid_files(self, tmp_path: Path, content: str, message: str) -> None:
        (tmp_path / "q.json").write_text(content)
        with pytest.raises(FusionError, match=message):
            load_queries(tmp_path / "q.json")
        with pytest.raises(FusionError, match="is missing"):
            load_queries(tmp_path / "nope.txt")

    def test_in_a_labelled_set(self, tmp_path: Path, sample_index: FusionIndex) -> None:
        records = [
            {
                "id": "a",
                "query": "KV-5500 inverter",
                "relevant": [{"source": "arden-microgrids-report.pdf", "page": 4}],
            },
            {"id": "b", "query": "banana bread", "no_answer": True},
            {"query": "bitcoin price", "no_answer": True},
        ]
        (tmp_path / "labels.json").write_text(json.dumps(records))
        loaded = load_labelled(tmp_path / "labels.json", sample_index.documents)
        assert list(loaded.queries) == ["a"] and loaded.no_answer == {"b": "banana bread", "q3": "bitcoin price"}
        records[1]["relevant"] = [{"source": "maintenance-handbook.md"}]
        (tmp_path / "labels.json").write_text(json.dumps(records))
        with pytest.raises(FusionError, match="record 2 is marked no_answer but names relevant places"):
            load_labelled(tmp_path / "labels.json", sample_index.documents)


class TestSweepFloors:
    def test_rows_equal_the_retriever_with_that_floor(self, sample_index: FusionIndex, dataset: object) -> None:
        report = sweep_floors(sample_index, dataset, [0.2], [2.0], progress=False)  # type: ignore[arg-type]
        names = [r.name for r in report.results]
        assert names == ["no floor", "bm25>=2", "vector>=0.2", "vector>=0.2|bm25>=2"]
        settings = {"no floor": {}, "bm25>=2": {"min_bm25_score": 2.0}, "vector>=0.2": {"min_vector_score": 0.2}}
        settings["vector>=0.2|bm25>=2"] = {"min_vector_score": 0.2, "min_bm25_score": 2.0}
        retrievers = {name: FusionRetriever(index=sample_index, **options) for name, options in settings.items()}
        direct = evaluate_retrievers(retrievers, dataset, progress=False)  # type: ignore[arg-type]
        for name, options in settings.items():
            assert report.result(name).per_query == direct.result(name).per_query
            retriever = FusionRetriever(index=sample_index, k=10, **options)
            answered = [bool(retriever.invoke(q)) for q in dataset.queries.values()]  # type: ignore[attr-defined]
            empty = [not retriever.invoke(q) for q in dataset.no_answer.values()]  # type: ignore[attr-defined]
            extra = report.result(name).extra
            assert extra[ANSWERED] == pytest.approx(sum(answered) / len(answered))
            assert extra[NO_ANSWER_EMPTY] == pytest.approx(sum(empty) / len(empty))
        assert report.result("no floor").extra == {ANSWERED: 1.0, NO_ANSWER_EMPTY: 0.0}

    def test_a_floor_nothing_clears(self, sample_index: FusionIndex, dataset: object) -> None:
        report = sweep_floors(sample_index, dataset, [1.0], [], ["ndcg@10"], progress=False)  # type: ignore[arg-type]
        row = report.result("vector>=1")
        assert row.means["ndcg@10"] == 0.0 and row.extra == {ANSWERED: 0.0, NO_ANSWER_EMPTY: 1.0}
        table = report.to_markdown()
        assert table.splitlines()[0] == "| method | ndcg@10 | answered | no_answer_empty |"

    def test_without_no_answer_queries(self, sample_index: FusionIndex) -> None:
        plain = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        report = sweep_floors(sample_index, plain, [], [0.0], ["ndcg@10"], progress=False)
        assert [set(r.extra) for r in report.results] == [{ANSWERED}, {ANSWERED}]

    def test_invalid_values(self, sample_index: FusionIndex, dataset: object) -> None:
        with pytest.raises(InvalidParameterError, match="min_vector_score must be"):
            sweep_floors(sample_index, dataset, [2.0], progress=False)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="min_bm25_score must be"):
            sweep_floors(sample_index, dataset, [], [True], progress=False)  # type: ignore[arg-type, list-item]
        with pytest.raises(InvalidParameterError, match="--vector-floors grid 'x'"):
            value_grid("x", "--vector-floors")

    def test_names(self) -> None:
        assert [floor_name(None, None), floor_name(0.25, None), floor_name(None, 3.0), floor_name(0.4, 0.0)] == [
            "no floor",
            "vector>=0.25",
            "bm25>=3",
            "vector>=0.4|bm25>=0",
        ]


class TestEvalCommand:
    """The eval command; ``--embeddings local`` is the deterministic fake here (see ``fake_cli_embeddings``)."""

    @pytest.fixture(autouse=True)
    def fake_models(self) -> Iterator[None]:
        with fake_cli_embeddings():
            yield

    def test_floor_sweep_and_diversity_rows(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = write_beir(tmp_path / "beir")
        (tmp_path / "none.txt").write_text("banana bread recipe\nfootball world cup\n")
        argv = ["eval", "--beir", str(folder), "--embeddings", "local", "--cache", str(tmp_path / "cache")]
        options = ["--vector-floors", "0.3,0.6", "--bm25-floors", "1", "--no-answer", str(tmp_path / "none.txt")]
        assert main([*argv, "--alpha", "0.5", *options, "--mmr", "0.5,1", "--max-per-source", "1", "--json", "-q"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert [r["method"] for r in payload["retrievers"]] == [
            "vector",
            "bm25",
            "fusion (defaults)",
            "fusion, mmr lambda=0.5",
            "fusion, mmr lambda=1",
            "fusion, max 1 per source",
        ]
        by_name = {r["method"]: r for r in payload["retrievers"]}
        assert by_name["fusion, mmr lambda=1"]["ndcg@10"] == by_name["fusion (defaults)"]["ndcg@10"]
        floors = {r["method"]: r for r in payload["floors"]}
        assert list(floors) == [
            "no floor",
            "bm25>=1",
            "vector>=0.3",
            "vector>=0.3|bm25>=1",
            "vector>=0.6",
            "vector>=0.6|bm25>=1",
        ]
        assert floors["no floor"][NO_ANSWER_EMPTY] == 0.0 and floors["no floor"][ANSWERED] == 1.0
        assert floors["no floor"]["ndcg@10"] == by_name["fusion (defaults)"]["ndcg@10"]
        assert main([*argv, "--alpha", "0.5", "--bm25-floors", "0", "-q"]) == 0
        text = capsys.readouterr().out
        assert "relevance floors (weighted, alpha=0.5, fetch_k=100; 2 answerable and 0 no-answer queries)" in text
        assert "| bm25>=0 |" in text

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["--no-answer", "q.txt"], "--no-answer queries are scored by the floor sweep: add --vector-floors"),
            (["--vector-floors", "0.2,2"], "min_vector_score must be a cosine similarity between -1 and 1"),
            (["--bm25-floors", "a:b"], "--bm25-floors grid 'a:b'"),
            (["--mmr", "0.5,3"], "lambda_mult must be a number between 0"),
        ],
    )
    def test_user_errors(self, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["eval", "--beir", "x", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("langchain-fusion: error:") and message in err and len(err.strip().splitlines()) == 1
