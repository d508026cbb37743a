"""Relevance floors and diversity on the command line (query, ask, serve).

The embedding model is the deterministic fake (see ``tests.helpers.embeddings.fake_cli_embeddings``): each
command is compared with the Python API over the same index, whatever the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_fusion import FusionIndex
from langchain_fusion.cli.app import main
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.embeddings import fake_cli_embeddings

ERROR_PREFIX = "langchain-fusion: error: "

TEXTS = {
    "solar.md": [
        "The solar panels on the clinic roof produce twelve kilowatts at noon.",
        "Solar panel output drops by a third when dust covers the glass.",
        "Cleaning the solar panels every month keeps their output high.",
    ],
    "battery.md": [
        "The battery cabinets store forty kilowatt hours for the night.",
        "Batteries must stay above ten degrees to charge safely.",
    ],
    "grid.md": [
        "The village grid connects sixty homes and the grain mill.",
        "A breaker trips when the mill motor starts under load.",
    ],
}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("floors-cli")
    for name, paragraphs in TEXTS.items():
        (root / name).write_text("\n\n".join(paragraphs), encoding="utf-8")
    out = root / "idx"
    with fake_cli_embeddings():
        status, _, err = run_cli(
            ["index", str(root), "--out", str(out), "--chunk-size", "80", "--chunk-overlap", "0", "-q"]
        )
    assert status == 0, err
    return out


def _query(index_dir: Path, question: str, *options: str) -> list[dict[str, Any]]:
    status, out, err = run_cli(["query", str(index_dir), question, "--json", *options])
    assert status == 0, err
    return list(json.loads(out))


@pytest.fixture(autouse=True)
def fake_models() -> Iterator[None]:
    with fake_cli_embeddings():
        yield


class TestQuery:
    def test_floors(self, index_dir: Path) -> None:
        index = FusionIndex.load(index_dir)
        expected = index.as_retriever(k=4, min_vector_score=0.5, min_bm25_score=1.0).invoke("solar panel output")
        got = _query(index_dir, "solar panel output", "-k", "4", "--min-vector-score", "0.5", "--min-bm25-score", "1")
        assert [r["id"] for r in got] == [d.id for d in expected] and got

    def test_nothing_above_the_floor(self, index_dir: Path) -> None:
        floors = ["--min-vector-score", "0.95", "--min-bm25-score", "50"]
        assert _query(index_dir, "recipe for banana bread", *floors) == []
        status, out, err = run_cli(["query", str(index_dir), "recipe for banana bread", *floors])
        assert status == 0 and out.strip() == "no results above the relevance floor", err

    def test_mmr(self, index_dir: Path) -> None:
        index = FusionIndex.load(index_dir)
        for options, kwargs in (([], {}), (["--lambda-mult", "0.2"], {"lambda_mult": 0.2})):
            expected = index.as_retriever(search_type="mmr", k=3, **kwargs).invoke("solar panel output")
            got = _query(index_dir, "solar panel output", "-k", "3", "--mmr", *options)
            assert [r["id"] for r in got] == [d.id for d in expected]
        plain = _query(index_dir, "solar panel output", "-k", "3")
        assert _query(index_dir, "solar panel output", "-k", "3", "--mmr", "--lambda-mult", "1") == plain

    def test_max_per_source(self, index_dir: Path) -> None:
        got = _query(index_dir, "solar panel output", "-k", "3", "--max-per-source", "1")
        sources = [Path(r["metadata"]["source"]).name for r in got]
        assert sorted(sources) == ["battery.md", "grid.md", "solar.md"]

    def test_with_a_window(self, index_dir: Path) -> None:
        got = _query(index_dir, "solar panel output", "-k", "2", "--max-per-source", "1", "--window", "1")
        assert len({r["metadata"]["source"] for r in got}) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-vector-score", "2"], "argument --min-vector-score: expected a number between -1 and 1, got '2'"),
        (["--min-vector-score", "x"], "argument --min-vector-score: expected a number between -1 and 1, got 'x'"),
        (["--min-vector-score", "nan"], "argument --min-vector-score: expected a number between -1 and 1, got 'nan'"),
        (["--min-bm25-score", "-1"], "argument --min-bm25-score: expected a number of 0 or more, got '-1'"),
        (["--lambda-mult", "1.5"], "argument --lambda-mult: expected a number between 0 and 1, got '1.5'"),
        (["--max-per-source", "0"], "argument --max-per-source: expected a positive integer, got '0'"),
        (["--max-per-source", "1.5"], "argument --max-per-source: expected a positive integer, got '1.5'"),
    ],
)
@pytest.mark.parametrize("command", ["query", "ask", "serve"])
def test_bad_values_exit_2(command: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    question = [] if command == "serve" else ["q"]
    with pytest.raises(SystemExit) as exc:
        main([command, "idx", *question, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"langchain-fusion {command}: error: {message}" in err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["query", "idx", "q", "--lambda-mult", "0.3"], "--lambda-mult is the weight of maximal marginal relevance"),
        (["ask", "idx", "q", "--lambda-mult", "0.3", "--llm", "openai"], "add --mmr"),
        (["serve", "idx", "--lambda-mult", "0.3"], "add --mmr"),
        (["query", "idx", "q", "--hierarchical", "--mmr"], "apply to fused search, not to hierarchical search"),
        (["query", "idx", "q", "--hierarchical", "--min-bm25-score", "1"], "or --hierarchical"),
    ],
)
def test_option_mistakes(argv: list[str], fragment: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: object())
    assert_one_line_error(*run_cli(argv), fragment)


def test_serve_passes_them_to_the_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("langserve")
    from langchain_fusion import pipeline
    from langchain_fusion.errors import FusionError

    seen: list[Any] = []

    def build(spec: Any) -> Any:
        seen.append(spec)
        raise FusionError("stopped by the test")

    monkeypatch.setattr(pipeline, "build", build)
    argv = ["serve", str(tmp_path), "--port", "0", "--min-vector-score", "0.4", "--min-bm25-score", "2"]
    assert_one_line_error(*run_cli([*argv, "--mmr", "--max-per-source", "2"]), "stopped by the test")
    assert seen[0].selection() == {
        "min_vector_score": 0.4,
        "min_bm25_score": 2.0,
        "lambda_mult": 0.5,
        "max_per_source": 2,
    }
    assert_one_line_error(*run_cli(["serve", str(tmp_path), "--port", "0"]), "stopped by the test")
    assert seen[1].selection() == {}
