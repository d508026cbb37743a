"""Hostile arguments to every subcommand: exit status 2 and one error line on stderr, never a traceback.

Two kinds of refusal: argparse's (a value of the wrong type or range: its usage lines, then one
``langchain-fusion COMMAND: error: argument ...`` line) and the command's own (everything that
parses but cannot work: one ``langchain-fusion: error: ...`` line and nothing else). The index is
small and built with the deterministic fake embeddings, so no model is loaded. (The sample-data
runs with the bundled model are in test_cli.py.)
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from langchain_fusion import FusionIndex
from langchain_fusion.cli.app import main
from tests.helpers.cli import assert_one_line_error, rater_and_answerer, run_cli, use_chat_model
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings

ARGPARSE_ERROR = re.compile(r"^langchain-fusion(?: [a-z]+)?: error: ")
NOT_UTF8 = os.fsdecode(b"bad\xff")  # how Linux hands a file name that is not UTF-8 to Python


@pytest.fixture(autouse=True)
def fake_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every embedding model the CLI builds or reloads is the deterministic fake: no model, no network."""
    monkeypatch.setattr("langchain_fusion.models.embeddings.default_embeddings", HashingEmbeddings)
    monkeypatch.setattr("langchain_fusion.index.embedding.embeddings_from_id", lambda model_id: HashingEmbeddings())


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    metadatas = [{"source": f"doc{i}.txt"} for i in range(len(ANIMALS))]
    index = FusionIndex.from_texts(ANIMALS, HashingEmbeddings(), metadatas=metadatas)
    return index.save(tmp_path_factory.mktemp("hostile-cli") / "idx")


@pytest.fixture
def places(index_dir: Path, tmp_path: Path) -> dict[str, str]:
    """What ``{name}`` stands for in the argument lists below."""
    damaged = tmp_path / "damaged"
    shutil.copytree(index_dir, damaged)
    (damaged / "vectors.npy").write_bytes(b"not an array")
    (tmp_path / "file").write_text("a plain file", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("Cats purr on warm mats.", encoding="utf-8")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps([{"query": "cat", "relevant": [{"source": "doc0.txt"}]}]), encoding="utf-8")
    return {
        "index": str(index_dir),
        "damaged": str(damaged),
        "missing": str(tmp_path / "missing"),
        "file": str(tmp_path / "file"),
        "not_utf8": str(tmp_path / NOT_UTF8),
        "docs": str(tmp_path / "docs"),
        "labels": str(labels),
        "out": str(tmp_path / "out"),
        "tmp": str(tmp_path),
    }


def _argparse_refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``, which argparse must refuse; return its one error line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if ARGPARSE_ERROR.match(line)]
    assert len(errors) == 1, captured.err
    assert captured.err.splitlines()[-1] == errors[0]  # usage first, the error last
    return errors[0]


# Each subcommand with the least it needs, so only the option under test is wrong.
COMMANDS = {
    "query": ["query", "{index}", "cat"],
    "ask": ["ask", "{index}", "cat"],
    "serve": ["serve", "{index}", "--port", "0"],
    "mcp": ["mcp", "{index}"],
}
BAD_COUNTS = ["-1", "0", "nan", "true", "True", "2.0", "1e3", "0x10", "", " 3 4", "9" * 5000]
BAD_ALPHAS = ["nan", "NaN", "inf", "-inf", "2", "-0.1", "1.0000001", "true", "", "0,5"]


class TestArgparseRefusals:
    @pytest.mark.parametrize("command", list(COMMANDS))
    @pytest.mark.parametrize("value", BAD_COUNTS)
    def test_k(self, command: str, value: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
        argv = [a.format(**places) for a in COMMANDS[command]]
        line = _argparse_refusal([*argv, f"-k={value}"], capsys)
        assert "argument -k: expected a positive integer, got " in line and len(line) < 200

    @pytest.mark.parametrize("command", list(COMMANDS))
    @pytest.mark.parametrize("value", BAD_ALPHAS)
    def test_alpha(self, command: str, value: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
        argv = [a.format(**places) for a in COMMANDS[command]]
        line = _argparse_refusal([*argv, f"--alpha={value}"], capsys)
        assert "argument --alpha: expected a number between 0 and 1, got " in line

    @pytest.mark.parametrize(
        ("argv", "fragment"),
        [
            (["query", "{index}", "cat", "--fetch-k=-5"], "argument --fetch-k: expected a positive integer or 'all'"),
            (["query", "{index}", "cat", "--fetch-k", "nan"], "argument --fetch-k"),
            (["query", "{index}", "cat", "--window=-1"], "argument --window: expected a non-negative integer"),
            (["query", "{index}", "cat", "--window", "2", "--max-chars", "0"], "argument --max-chars"),
            (["query", "{index}", "cat", "--max-per-source", "0"], "argument --max-per-source"),
            (["query", "{index}", "cat", "--min-vector-score", "nan"], "argument --min-vector-score"),
            (["query", "{index}", "cat", "--min-bm25-score=-1"], "argument --min-bm25-score"),
            (["query", "{index}", "cat", "--method", "max"], "argument --method: invalid choice"),
            (["ask", "{index}", "cat", "--llm-timeout", "nan"], "argument --llm-timeout"),
            (["serve", "{index}", "--port=-1"], "argument --port: expected a TCP port"),
            (["serve", "{index}", "--max-k", "0"], "argument --max-k: expected a positive integer"),
            (["mcp", "{index}", "--port", "65536"], "argument --port: expected a TCP port"),
            (["mcp", "{index}", "--transport", "carrier-pigeon"], "argument --transport: invalid choice"),
            (["index", "{docs}", "--out", "{out}", "--chunk-size", "0"], "argument --chunk-size"),
            (["index", "{docs}", "--out", "{out}", "--chunk-overlap", "nan"], "argument --chunk-overlap"),
            (["index", "{docs}", "--out", "{out}", "--max-file-chars=-1"], "argument --max-file-chars"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--fetch-k", "0"], "argument --fetch-k"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--batch-size", "true"], "argument --batch-size"),
        ],
    )
    def test_other_options(
        self, argv: list[str], fragment: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        line = _argparse_refusal([a.format(**places) for a in argv], capsys)
        assert fragment in line
        assert not Path(places["out"]).exists()


class TestCommandRefusals:
    """Arguments that parse but cannot work: one ``langchain-fusion: error:`` line, before any work."""

    @pytest.fixture(autouse=True)
    def chat_model(self, monkeypatch: pytest.MonkeyPatch) -> None:
        use_chat_model(monkeypatch, rater_and_answerer())  # ask needs one before it opens the index

    @pytest.mark.parametrize("command", ["query", "ask", "serve", "mcp", "eval"])
    @pytest.mark.parametrize(
        ("where", "fragment"),
        [
            ("missing", "missing is not a folder; give the folder an index was saved to"),
            ("file", "file is not a folder"),
            ("not_utf8", "bad\udcff is not a folder"),
            ("damaged", "vectors.npy has 12 bytes, the manifest says"),
        ],
    )
    def test_index_folders(self, command: str, where: str, fragment: str, places: dict[str, str]) -> None:
        argv = {
            "query": ["query", places[where], "cat"],
            "ask": ["ask", places[where], "cat"],
            "serve": ["serve", places[where], "--port", "0"],
            "mcp": ["mcp", places[where]],
            "eval": ["eval", "--index", places[where], "--labels", places["labels"]],
        }[command]
        assert_one_line_error(*run_cli(argv), fragment)

    @pytest.mark.parametrize(
        "argv",
        [
            ["query", "{index}", "cat", "--embeddings", "bogus"],
            ["ask", "{index}", "cat", "--embeddings", "bogus"],
            ["serve", "{index}", "--port", "0", "--embeddings", "bogus"],
            ["mcp", "{index}", "--embeddings", "bogus"],
            ["index", "{docs}", "--out", "{out}", "--embeddings", "bogus"],
        ],
    )
    def test_unknown_embeddings(self, argv: list[str], places: dict[str, str]) -> None:
        assert_one_line_error(*run_cli([a.format(**places) for a in argv]), "unknown embeddings 'bogus'")
        assert not Path(places["out"]).exists()

    @pytest.mark.parametrize("question", ["", " ", "\t\n"])
    @pytest.mark.parametrize("command", ["query", "ask"])
    def test_empty_questions(self, command: str, question: str, places: dict[str, str]) -> None:
        assert_one_line_error(*run_cli([command, places["index"], question]), "is empty")

    @pytest.mark.parametrize(
        ("argv", "fragment"),
        [
            (["serve", "{index}", "--port", "0", "-k", "101"], "k (101) must be at most max_k (100)"),
            (["mcp", "{index}", "-k", "5", "--max-k", "4"], "k (5) must be at most max_k (4)"),
            (["index", "{docs}", "--out", "{file}"], "is not a langchain-fusion index; refusing to overwrite"),
            (["index", "{docs}", "--out", "{file}/sub"], "file is a file, not a folder"),
            (["index", "{docs}", "--out", "{damaged}"], "vectors.npy has 12 bytes"),
            (["index", "{docs}", "--out", "{out}", "--chunk-overlap=-1"], "0 <= chunk_overlap < chunk_size"),
            (["index", "{docs}", "--out", "{out}", "--chunk-size", "10", "--chunk-overlap", "10"], "chunk_overlap"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--alpha", "nan"], "alpha must be a number"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--alpha", "2"], "got 2.0"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--alpha", "0:1:0"], "alpha grid '0:1:0'"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--metrics", "ndcg@0"], "unknown metric"),
            (["eval", "--index", "{index}", "--labels", "{labels}", "--methods", "max"], "method must be one of"),
            (["eval", "--index", "{index}", "--labels", "{missing}"], "missing is missing"),
            (["eval", "--index", "{index}", "--labels", "{file}"], "not valid JSON"),
            (["eval", "--index", "{index}"], "give a saved index and its labelled queries"),
            (["eval", "--beir", "{missing}"], "qrels/test.tsv is missing"),
        ],
    )
    def test_other_mistakes(self, argv: list[str], fragment: str, places: dict[str, str]) -> None:
        assert_one_line_error(*run_cli([a.format(**places) for a in argv]), fragment)
        assert not Path(places["out"]).exists()

    def test_a_huge_k_is_not_a_mistake_for_query(self, places: dict[str, str]) -> None:
        """``k`` above the corpus size is defined (every chunk); serve and mcp bound it with --max-k."""
        status, out, err = run_cli(["query", places["index"], "cat", "-k", str(10**30), "--json"])
        assert status == 0, err
        assert len(json.loads(out)) == len(ANIMALS)


class TestLabelledSets:
    """``eval --labels`` with files that are not the documented shape: one line naming the record."""

    @pytest.mark.parametrize(
        ("content", "fragment"),
        [
            (b'[{"query": "cat", "relevant": ["doc0.txt"]}]', "record 1 has the relevant place 'doc0.txt'"),
            (b'[{"query": "cat", "relevant": "doc0.txt"}]', "record 1 has 'relevant' 'doc0.txt'; expected a list"),
            (b'[{"query": "cat", "relevant": [{"page": 1}]}]', "expected {'source': FILE, 'page': N} or {'id': ID}"),
            (b'[{"query": "cat", "relevant": [{"source": 7}]}]', "whose 'source' is 7; expected text"),
            (b'[{"query": "cat", "relevant": [{"source": "doc0.txt", "page": "1"}]}]', "whose 'page' is '1'"),
            (b'[{"query": "cat", "relevant": [{"id": ["x"]}]}]', "whose 'id' is ['x']"),
            (b'[{"query": 5, "relevant": [{"id": "x"}]}]', "record 1 has no 'query'"),
            (b'[{"query": "cat", "id": {"a": 1}, "relevant": [{"id": "x"}]}]', "has 'id' {'a': 1}"),
            (b'[{"query": "cat", "match_answer": true, "answer": 5}]', "has 'answer' 5; expected text"),
            (b'[{"query": "caf\xe9"}]', "not UTF-8 text"),
            (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ],
    )
    def test_json(self, content: bytes, fragment: str, places: dict[str, str], tmp_path: Path) -> None:
        (tmp_path / "bad.json").write_bytes(content)
        argv = ["eval", "--index", places["index"], "--labels", str(tmp_path / "bad.json"), "-q"]
        assert_one_line_error(*run_cli(argv), fragment)

    @pytest.mark.parametrize(
        ("content", "fragment"),
        [
            (b"query,source,page\ncat,doc0.txt,one\n", "'page' 'one' is not a whole number"),
            (b"query,source\ncaf\xe9,doc0.txt\n", "not UTF-8 text"),
        ],
    )
    def test_csv(self, content: bytes, fragment: str, places: dict[str, str], tmp_path: Path) -> None:
        (tmp_path / "bad.csv").write_bytes(content)
        argv = ["eval", "--index", places["index"], "--labels", str(tmp_path / "bad.csv"), "-q"]
        assert_one_line_error(*run_cli(argv), fragment)

    def test_no_answer_queries_that_are_not_utf8(self, places: dict[str, str], tmp_path: Path) -> None:
        (tmp_path / "none.txt").write_bytes(b"caf\xe9 opening hours\n")
        argv = [
            "eval",
            "--index",
            places["index"],
            "--labels",
            places["labels"],
            "--no-answer",
            str(tmp_path / "none.txt"),
        ]
        assert_one_line_error(*run_cli([*argv, "--vector-floors", "0.5", "-q"]), "none.txt: not UTF-8 text")

    @pytest.mark.parametrize(
        ("line", "fragment"),
        [(b'["a list"]', "line 1: expected an object with an '_id'"), (b"\xff", "not UTF-8 text")],
    )
    def test_beir_records(self, line: bytes, fragment: str, tmp_path: Path) -> None:
        beir = tmp_path / "beir"
        (beir / "qrels").mkdir(parents=True)
        (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
        (beir / "queries.jsonl").write_bytes(line + b"\n")
        (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "cats"}\n', encoding="utf-8")
        assert_one_line_error(*run_cli(["eval", "--beir", str(beir), "-q"]), fragment)


def _strict_stdout() -> io.TextIOWrapper:
    """A stdout like a terminal's under a UTF-8 locale: it refuses to encode lone surrogates."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def _run_strict(argv: list[str]) -> tuple[int, str, str]:
    """Like ``run_cli``, with a strict UTF-8 stdout; stdout is returned decoded."""
    import contextlib

    out, err = _strict_stdout(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    assert out.errors == "strict"  # restored
    return status, out.buffer.getvalue().decode("utf-8"), err.getvalue()


class TestPathsThatAreNotUtf8:
    """File names that are not UTF-8 are indexed and shown escaped; they never abort a run."""

    def test_a_file_name_inside_an_indexed_folder(self, tmp_path: Path) -> None:
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "good.txt").write_text("The NX-14 cabinet stores 14 kWh.", encoding="utf-8")
        try:
            (docs / f"{NOT_UTF8}.txt").write_text("The GC-9 controller reboots nightly.", encoding="utf-8")
        except (OSError, UnicodeError):
            pytest.skip("this file system does not accept file names that are not UTF-8")
        status, out, err = _run_strict(["index", str(docs), "--out", str(tmp_path / "idx"), "--json"])
        assert status == 0, err
        assert json.loads(out)["files"] == 2 and "skipped" not in err
        status, out, err = _run_strict(["query", str(tmp_path / "idx"), "GC-9 controller", "-k", "1", "--json"])
        assert status == 0, err
        assert json.loads(out)[0]["metadata"]["source"] == f"{docs}/bad\\xff.txt"

    @pytest.mark.parametrize("json_flag", [[], ["--json"]])
    def test_an_index_folder_name(self, tmp_path: Path, json_flag: list[str]) -> None:
        (tmp_path / "a.txt").write_text("Cats purr on warm mats.", encoding="utf-8")
        out_dir = tmp_path / NOT_UTF8
        try:
            status, out, err = _run_strict(["index", str(tmp_path / "a.txt"), "--out", str(out_dir), "-q", *json_flag])
        except UnicodeEncodeError:
            raise AssertionError("the summary of a finished run became a traceback") from None
        assert status == 0, err
        assert "bad\\udcff" in out  # a backslash escape, as Python writes to stderr
        assert FusionIndex.load(out_dir, HashingEmbeddings()).as_retriever(k=1).invoke("cats")
