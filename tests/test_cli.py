"""The ``langchain-fusion`` command, run in-process.

Every embedding model here is the deterministic fake (``tests.helpers.embeddings.HashingEmbeddings``): the
default, ``--embeddings local`` and the model a saved index records all resolve to it, so what is
tested is the command, not the model. ``TestBundledModel`` runs the real bundled model once, on the
sample data.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pypdf import PdfReader, PdfWriter

from langchain_fusion import CrossEncoderReranker, FusionIndex, LocalEmbeddings
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import build_parser, main
from langchain_fusion.ingest.loading import load_files, split_documents, split_into_chunks
from tests.helpers.cli import (
    ANSWER,
    ERROR_PREFIX,
    CliRun,
    assert_one_line_error,
    rater_and_answerer,
    run_cli,
    use_chat_model,
)
from tests.helpers.embeddings import FAKE_DIMENSION, FAKE_ID, HashingEmbeddings, fake_cli_embeddings
from tests.helpers.paths import DATA

LOCAL_ID = "local:sentence-transformers/all-MiniLM-L6-v2"
SAMPLE_FILES = sorted(p for p in DATA.rglob("*") if p.suffix in {".pdf", ".md"})
SAMPLE_UNITS = 14 + 2 + len(SAMPLE_FILES) - 2  # PDF pages, the handbook's two sections, one for every other file
SCORE_KEYS = ("fusion_score", "vector_score", "bm25_score", "vector_rank", "bm25_rank")


_BAR = re.compile(r"(reading files|embedding chunks|enriching chunks|summarising pages|embedding summaries): ")
"""How the index command's progress bars start (tqdm draws them on stderr, redrawn after a carriage return)."""

TIME_LINE = re.compile(
    r"time: [0-9.]+ s \(load [0-9.]+, split [0-9.]+(, embed [0-9.]+)?, bm25 [0-9.]+.*, save [0-9.]+\)"
)
"""The report's line of where the run's time went."""


def _notes(stderr: str) -> list[str]:
    """The lines the run wrote for people on stderr, without its progress bars."""
    shown = [line.rsplit("\r", 1)[-1].strip() for line in stderr.splitlines()]
    return [line for line in shown if line and not _BAR.match(line)]


@pytest.fixture(autouse=True)
def fake_models() -> Iterator[None]:
    """The fake embeddings for every test (module-scoped fixtures open their own ``fake_cli_embeddings``)."""
    with fake_cli_embeddings():
        yield


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    shutil.copytree(DATA, root / "data")
    rng = random.Random(1234)
    (root / "data" / "broken.pdf").write_bytes(bytes(rng.randrange(256) for _ in range(3000)))
    return root


@pytest.fixture(scope="module")
def expected_chunks(workspace: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_files([workspace / "data"])
    return len(split_documents(loaded.documents))


@pytest.fixture(scope="module")
def built(workspace: Path) -> tuple[Path, int, str, str]:
    """The index built by ``index --json`` over the data copy (default chunking)."""
    out = workspace / "idx"
    with fake_cli_embeddings():
        status, stdout, stderr = run_cli(
            ["index", str(workspace / "data"), "--out", str(out), "--embeddings", "local", "--json"]
        )
    return out, status, stdout, stderr


@pytest.fixture(scope="module")
def index_dir(built: tuple[Path, int, str, str]) -> Path:
    assert built[1] == 0, built[3]
    return built[0]


def _query_json(index_dir: Path, question: str, *options: str) -> list[dict[str, Any]]:
    status, out, err = run_cli(["query", str(index_dir), question, "--json", *options])
    assert status == 0, err
    assert "Traceback" not in err
    return json.loads(out)


class TestIndexCommand:
    def test_json_summary(self, built: tuple[Path, int, str, str], workspace: Path, expected_chunks: int) -> None:
        out_dir, status, stdout, stderr = built
        assert status == 0, stderr
        summary = json.loads(stdout)
        broken = str(workspace / "data" / "broken.pdf")
        assert expected_chunks > 40
        assert summary["index"] == str(out_dir)
        assert summary["files"] == len(SAMPLE_FILES)
        assert summary["pages"] == 14
        assert summary["chunks"] == expected_chunks
        assert [s["path"] for s in summary["skipped"]] == [broken]
        assert summary["skipped"][0]["reason"].startswith("not a readable PDF (")
        assert summary["embeddings"] == FAKE_ID
        assert summary["dimension"] == FAKE_DIMENSION
        assert summary["vector_index"] == "Flat"
        # No progress bar in JSON mode; the skip is still reported on stderr.
        assert "embedding chunks" not in stderr
        assert "Traceback" not in stderr
        skip_lines = [line for line in stderr.splitlines() if line.startswith("skipped ")]
        assert len(skip_lines) == 1
        assert skip_lines[0].startswith(f"skipped {broken}: not a readable PDF (")

    def test_saved_index_is_loadable_and_complete(self, index_dir: Path, expected_chunks: int) -> None:
        manifest = json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["embeddings"] == {"id": FAKE_ID, "dimension": FAKE_DIMENSION}
        assert manifest["counts"]["documents"] == expected_chunks
        index = FusionIndex.load(index_dir)
        assert isinstance(index.embeddings, HashingEmbeddings)
        sources = {Path(d.metadata[keys.SOURCE]).name for d in index.documents}
        assert sources == {p.name for p in SAMPLE_FILES}

    def test_text_summary(self, tmp_path: Path) -> None:
        folder = tmp_path / "docs"
        folder.mkdir()
        writer = PdfWriter()
        for page in PdfReader(DATA / "arden-microgrids-report.pdf").pages[2:4]:
            writer.add_page(page)
        with (folder / "two-pages.pdf").open("wb") as handle:
            writer.write(handle)
        (folder / "note.txt").write_text("The GC-9 controller reboots nightly.", encoding="utf-8")
        (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a PDF")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chunks = len(split_documents(load_files([folder]).documents))
        out_dir = tmp_path / "idx"
        argv = ["index", str(folder), "--out", str(out_dir), "--embeddings", "local"]
        status, stdout, stderr = run_cli([*argv, "--vector-index", "HNSW32", "--vector-search-params", "efSearch=64"])
        assert status == 0, stderr
        lines = stdout.splitlines()
        assert lines[:3] == [
            f"indexed 2 files (2 PDF pages) into {chunks} chunks -> {out_dir}",
            f"this run: 2 files added, 0 updated, 0 removed, 0 unchanged; {chunks} chunks embedded, 0 removed",
            f"embeddings: {FAKE_ID} ({FAKE_DIMENSION} dimensions); vector index: HNSW32",
        ]
        assert TIME_LINE.fullmatch(lines[3]), lines[3]
        assert lines[4:] == ["skipped 1 file(s); see above"]
        assert _notes(stderr)[0].startswith(f"skipped {folder / 'broken.pdf'}: not a readable PDF (")
        # The progress bars, on stderr, with their totals: 3 files to read, then the chunks of the 2 readable ones.
        assert "reading files: 100%|" in stderr and "| 3/3 [" in stderr
        assert "embedding chunks: 100%|" in stderr and f"| {chunks}/{chunks} [" in stderr
        assert "Traceback" not in stderr
        manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["vector_index"]["factory"] == "HNSW32"
        assert manifest["vector_index"]["search_params"] == "efSearch=64"
        # The approximate index answers queries.
        results = _query_json(out_dir, "Solvane NX-14 cabinet capacity kWh", "-k", "2")
        assert len(results) == 2
        assert results[0]["metadata"][keys.PAGE] == 1  # page 3 of the report is page 1 here

    def test_quiet_hides_the_progress_bar(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("A single short note about inverters.", encoding="utf-8")
        argv = ["index", str(tmp_path / "a.txt"), "-o", str(tmp_path / "idx"), "--embeddings", "local", "--quiet"]
        status, stdout, stderr = run_cli(argv)
        assert status == 0
        assert stderr == ""
        assert stdout.startswith("indexed 1 files (0 PDF pages) into 1 chunks -> ")

    def test_refuses_to_overwrite_a_folder_that_is_not_an_index(self, tmp_path: Path) -> None:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "note.txt").write_text("A single short note about inverters.", encoding="utf-8")
        notes = tmp_path / "notes"
        notes.mkdir()
        (notes / "keep.txt").write_text("precious", encoding="utf-8")
        status, out, err = run_cli(["index", str(tmp_path / "in"), "--out", str(notes), "--embeddings", "local", "-q"])
        assert_one_line_error(status, out, err, "refusing to overwrite")
        assert (notes / "keep.txt").read_text(encoding="utf-8") == "precious"
        assert sorted(p.name for p in notes.iterdir()) == ["keep.txt"]


@pytest.mark.local_model
@pytest.mark.timeout(600)  # bundled_sample_index embeds the whole sample (180 s seen on a loaded 2-core machine)
class TestBundledModel:
    """The one run of the real bundled model here: ``index data --embeddings local``, then queries of it."""

    @pytest.fixture(autouse=True)
    def fake_models(self) -> None:
        """No fake: this class is about the bundled model itself."""

    def test_text_summary(self, bundled_sample_index: CliRun) -> None:
        out_dir, status, stdout, stderr = bundled_sample_index
        assert status == 0, stderr
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pages = load_files([DATA]).documents
        split = split_into_chunks(pages, max_tokens=254, count_tokens=LocalEmbeddings().count_tokens)
        chunks = len(split.chunks)
        assert chunks > len(split_documents(pages))  # chunks the model would truncate were split to fit it
        files = len(SAMPLE_FILES)
        lines = stdout.splitlines()
        assert lines[:3] == [
            f"indexed {files} files (14 PDF pages) into {chunks} chunks -> {out_dir}",
            f"this run: {files} files added, 0 updated, 0 removed, 0 unchanged; {chunks} chunks embedded, 0 removed",
            f"embeddings: {LOCAL_ID} (384 dimensions); vector index: Flat",
        ]
        # The sample has 1,000-character chunks longer than the 254 word pieces the model reads: by default they are
        # split to fit, so none is truncated (no note says so), and the summary counts them.
        assert split.bounded > 0
        assert lines[3] == (
            f"chunking: {split.bounded} chunks had more than the 254 tokens each chunk may have, and were split to fit"
        )
        assert TIME_LINE.fullmatch(lines[4]), lines[4]
        # Files of other types in the folder are not read, and the summary says which.
        assert lines[5:] == [
            "2 file(s) not indexed: their type is not read (.json; PDF, .txt and .md files are): "
            f"{DATA / 'no-answer.json'}, {DATA / 'queries.json'} (the JSON report lists them all)"
        ]
        assert _notes(stderr)[0] == "loading the bundled embedding model..."
        assert "embedding chunks" in stderr  # the progress bar, on stderr
        assert "Traceback" not in stderr

    def test_saved_index_reloads_the_bundled_model(self, bundled_sample_index: CliRun) -> None:
        manifest = json.loads((bundled_sample_index.out / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["embeddings"] == {"id": LOCAL_ID, "dimension": 384}
        assert isinstance(FusionIndex.load(bundled_sample_index.out).embeddings, LocalEmbeddings)

    def test_queries_answer_from_the_right_document(self, bundled_sample_index: CliRun) -> None:
        index_dir = bundled_sample_index.out
        # Vectors alone (alpha 1) find a paraphrase that shares few words with its ticket.
        question = "Has an animal ever cut off someone's electricity by biting a wire?"
        results = _query_json(index_dir, question, "-k", "3", "--alpha", "1")
        assert Path(results[0]["metadata"][keys.SOURCE]).name == "av-25-0192.md"  # the chewed service cable
        assert results[0]["metadata"]["vector_rank"] == 1
        # The fused table, as a person reads it.
        status, out, err = run_cli(
            ["query", str(index_dir), "How much rain fell in the July monsoon flood?", "-k", "3"]
        )
        assert status == 0, err
        first = out.splitlines()[2]
        assert re.match(r"\s*1\s+\S+\s+\S+\s+\S+\s+arden-microgrids-report\.pdf\s+7\s", first), out


class TestQueryCommand:
    def test_table(self, index_dir: Path) -> None:
        question = "lifeline tariff price for the first 20 kWh each month"
        status, out, err = run_cli(["query", str(index_dir), question, "-k", "3"])
        assert status == 0, err
        lines = out.splitlines()
        assert re.fullmatch(r"\s*rank\s+fused\s+vector\s+bm25\s+source\s+page\s+text", lines[0])
        assert set(lines[1]) == {"-"}
        rows = lines[2:]
        assert len(rows) == 3
        parsed = [
            re.match(r"\s*(\d+)\s+(-?\d+\.\d{3})\s+(-?\d+\.\d{3})\s+(\d+\.\d{2})\s+(\S+)\s+(\d*)\s", r) for r in rows
        ]
        assert all(parsed), rows
        assert [int(m.group(1)) for m in parsed] == [1, 2, 3]
        fused = [float(m.group(2)) for m in parsed]
        assert fused == sorted(fused, reverse=True)
        assert 0.0 <= fused[-1] <= fused[0] <= 1.0
        assert parsed[0].group(5) == "arden-microgrids-report.pdf"
        assert parsed[0].group(6) == "8"

    def test_table_snippets_for_every_script(self, tmp_path: Path) -> None:
        # Japanese and Chinese have no spaces: a snippet cut only at spaces was "..." or only a title.
        from langchain_fusion.cli.search import display_width

        docs = tmp_path / "docs"
        docs.mkdir()
        texts = {
            "ja.md": "東京は日本の首都であり、政治・経済・文化の中心地である。"
            "人口は約千四百万人で、多くの企業が本社を置いている。",
            "zh.md": "# 电池报告\n\n合作社的电池在洪水中完好无损，"
            "因为电池柜安装在高于地面一点五米的平台上，并且每月检查一次密封条。",
            "長い名前の日本語のファイル名です.md": "首都東京の人口と企業の本社について、"
            "詳しく説明する文書である。首都の人口は多い。",
        }
        for name, text in texts.items():
            (docs / name).write_text(text * 2, encoding="utf-8")  # each longer than a row shows
        out = tmp_path / "idx"
        status, _, err = run_cli(["index", str(docs), "--out", str(out), "--embeddings", "local", "-q"])
        assert status == 0, err
        for question, name, start in (
            ("東京の首都", "ja.md", "東京は日本の首都"),
            ("电池 洪水", "zh.md", "# 电池报告 合作社的电池"),
            ("首都の人口", "長い名前の日本語の", "首都東京の人口"),
        ):
            status, table, err = run_cli(["query", str(out), question, "-k", "3"])
            assert status == 0, err
            row = next(line for line in table.splitlines()[2:] if name in line)
            assert start in row, table
            text = row[row.index(start) :]
            assert 30 <= display_width(text) <= 70 and text.endswith("..."), row
        # The text column starts at one place on the screen, wide characters in the source names and all.
        header, rows = table.splitlines()[0], table.splitlines()[2:]
        firsts = ("東京は", "首都東京", "# 电池")
        starts = {display_width(r[: r.index(f)]) for r in rows for f in firsts if f in r}
        assert starts == {header.index("text")}, table

    def test_k_rows(self, index_dir: Path) -> None:
        status, out, _ = run_cli(["query", str(index_dir), "battery", "-k", "6"])
        assert status == 0
        assert len(out.splitlines()) == 2 + 6

    def test_json(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "How much rain fell in the July monsoon flood?", "-k", "5")
        assert [r["rank"] for r in results] == [1, 2, 3, 4, 5]
        assert len({r["id"] for r in results}) == 5
        for result in results:
            meta = result["metadata"]
            assert set(SCORE_KEYS) <= set(meta)
            assert isinstance(meta["fusion_score"], float)
            assert isinstance(meta["vector_score"], float)
            assert isinstance(meta["bm25_score"], float)
            assert isinstance(meta["vector_rank"], int) and meta["vector_rank"] >= 1
            assert meta["bm25_rank"] is None or meta["bm25_rank"] >= 1
            assert meta["fusion_method"] == "weighted"
            assert {keys.SOURCE, keys.CHUNK_INDEX, keys.START_INDEX} <= set(meta)
            assert result["text"]
        scores = [r["metadata"]["fusion_score"] for r in results]
        assert scores == sorted(scores, reverse=True)

    def test_json_matches_the_python_api(self, index_dir: Path) -> None:
        question = "Why could the flood losses not be claimed from the insurer?"
        results = _query_json(index_dir, question, "-k", "4", "--alpha", "0.3")
        docs = FusionIndex.load(index_dir).as_retriever(k=4, alpha=0.3).invoke(question)
        assert [r["id"] for r in results] == [d.id for d in docs]
        assert [r["text"] for r in results] == [d.page_content for d in docs]
        assert results[0]["metadata"]["fusion_score"] == pytest.approx(docs[0].metadata["fusion_score"], rel=1e-6)

    def test_alpha_zero_is_bm25_order(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "Halvorsen HL-8 busbar bolt torque", "-k", "3", "--alpha", "0")
        assert [r["metadata"]["bm25_rank"] for r in results] == [1, 2, 3]
        assert Path(results[0]["metadata"][keys.SOURCE]).name == "maintenance-handbook.md"
        assert results[0]["metadata"]["fusion_score"] == pytest.approx(1.0)

    def test_alpha_one_is_vector_order(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "Halvorsen HL-8 busbar bolt torque", "-k", "3", "--alpha", "1")
        assert [r["metadata"]["vector_rank"] for r in results] == [1, 2, 3]
        vector = [r["metadata"]["vector_score"] for r in results]
        assert vector == sorted(vector, reverse=True)
        assert results[0]["metadata"]["fusion_score"] == pytest.approx(1.0)

    def test_method_rrf(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "GC-9 firmware 4.2.1 Milsett failure", "-k", "3", "--method", "rrf")
        for result in results:
            meta = result["metadata"]
            assert meta["fusion_method"] == "rrf"
            bm25_term = 0.0 if meta["bm25_rank"] is None else 1 / (60 + meta["bm25_rank"])
            expected = 0.5 / (60 + meta["vector_rank"]) + 0.5 * bm25_term
            assert meta["fusion_score"] == pytest.approx(expected)
        # The ticket of that failure; RRF over the fake embeddings' ranks puts the GC-9 parts close to it.
        assert "av-25-0067.md" in [Path(r["metadata"][keys.SOURCE]).name for r in results]

    def test_fetch_k_all(self, index_dir: Path) -> None:
        question = "storm overflowed the river"
        exact = _query_json(index_dir, question, "-k", "4", "--fetch-k", "all")
        small = _query_json(index_dir, question, "-k", "4", "--fetch-k", "5")
        docs = FusionIndex.load(index_dir).as_retriever(k=4, fetch_k=None).invoke(question)
        assert [r["id"] for r in exact] == [d.id for d in docs]
        assert len(small) == 4

    def test_explicit_matching_embeddings(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "lockout tag", "-k", "1", "--embeddings", "local")
        assert len(results) == 1


class TestUserErrors:
    def test_query_missing_folder(self, tmp_path: Path) -> None:
        status, out, err = run_cli(["query", str(tmp_path / "nope"), "anything"])
        assert_one_line_error(status, out, err, "nope is not a folder")

    def test_query_folder_that_is_not_an_index(self, workspace: Path) -> None:
        status, out, err = run_cli(["query", str(workspace / "data"), "anything"])
        assert_one_line_error(status, out, err, "is not a langchain-fusion index", "manifest.json is missing")

    def test_query_damaged_index(self, index_dir: Path, tmp_path: Path) -> None:
        copy = shutil.copytree(index_dir, tmp_path / "damaged")
        vectors = copy / "vectors.npy"
        vectors.write_bytes(vectors.read_bytes()[:100])
        status, out, err = run_cli(["query", str(copy), "anything"])
        assert_one_line_error(status, out, err, "vectors.npy has 100 bytes", "truncated")

    def test_index_empty_folder(self, tmp_path: Path) -> None:
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "picture.png").write_bytes(b"\x89PNG")
        status, out, err = run_cli(["index", str(tmp_path / "empty"), "--out", str(tmp_path / "idx")])
        assert_one_line_error(status, out, err, "no readable documents in", "empty")
        assert not (tmp_path / "idx").exists()

    def test_index_folder_with_only_unreadable_files(self, tmp_path: Path) -> None:
        folder = tmp_path / "bad"
        folder.mkdir()
        (folder / "broken.pdf").write_bytes(b"not a pdf at all")
        status, out, err = run_cli(["index", str(folder), "--out", str(tmp_path / "idx")])
        assert status == 2
        assert out == ""
        assert "Traceback" not in err
        lines = _notes(err)
        assert lines[0].startswith(f"skipped {folder / 'broken.pdf'}: not a readable PDF (")
        assert lines[1:] == [f"{ERROR_PREFIX}no readable documents in {folder} (PDF, .txt and .md files are indexed)"]
        assert not (tmp_path / "idx").exists()

    def test_index_missing_path(self, tmp_path: Path) -> None:
        status, _, err = run_cli(["index", str(tmp_path / "ghost"), "--out", str(tmp_path / "idx")])
        assert status == 2
        assert err.splitlines() == [
            f"skipped {tmp_path / 'ghost'}: no such file or directory",
            f"{ERROR_PREFIX}no readable documents in {tmp_path / 'ghost'} (PDF, .txt and .md files are indexed)",
        ]

    def test_index_openai_without_key(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.chdir(tmp_path)  # no .env file can be found from here
        shutil.copy(DATA / "maintenance-handbook.md", tmp_path / "handbook.md")
        status, out, err = run_cli(["index", "handbook.md", "--out", "idx", "--embeddings", "openai"])
        assert_one_line_error(status, out, err, "OPENAI_API_KEY")
        assert not (tmp_path / "idx").exists()

    def test_query_openai_without_key(self, index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.chdir(tmp_path)
        status, out, err = run_cli(["query", str(index_dir), "anything", "--embeddings", "openai"])
        assert_one_line_error(status, out, err, "OPENAI_API_KEY is not set")

    def test_unknown_embeddings_spec(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("text", encoding="utf-8")
        status, out, err = run_cli(
            ["index", str(tmp_path / "a.txt"), "-o", str(tmp_path / "i"), "--embeddings", "bogus"]
        )
        assert_one_line_error(status, out, err, "unknown embeddings 'bogus'")

    def test_overlap_not_smaller_than_chunk_size(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("text", encoding="utf-8")
        argv = ["index", str(tmp_path / "a.txt"), "-o", str(tmp_path / "i"), "--chunk-size", "100"]
        status, out, err = run_cli([*argv, "--chunk-overlap", "100"])
        assert_one_line_error(status, out, err, "chunk_overlap < chunk_size", "got 100 and 100")

    def test_bad_faiss_factory(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("text", encoding="utf-8")
        argv = ["index", str(tmp_path / "a.txt"), "-o", str(tmp_path / "i"), "--embeddings", "local"]
        status, out, err = run_cli([*argv, "-q", "--vector-index", "NoSuchIndex42"])
        assert_one_line_error(status, out, err, "FAISS could not build an index from factory string 'NoSuchIndex42'")

    def test_no_library_log_noise(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # Outside pytest nothing configures logging, so any WARNING record reaches stderr
        # through logging.lastResort: `langchain-fusion index bad/ --out idx` shows it.
        folder = tmp_path / "bad"
        folder.mkdir()
        (folder / "broken.pdf").write_bytes(random.Random(7).randbytes(3000))
        with caplog.at_level(logging.WARNING):
            status, _, _ = run_cli(["index", str(folder), "--out", str(tmp_path / "idx")])
        assert status == 2
        assert [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING] == []


class TestArgparseErrors:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["query", "idx", "q", "--alpha", "2"], "argument --alpha: expected a number between 0 and 1, got '2'"),
            (["query", "idx", "q", "--alpha", "x"], "argument --alpha: expected a number between 0 and 1, got 'x'"),
            (["query", "idx", "q", "--alpha", "nan"], "argument --alpha: expected a number between 0 and 1, got 'nan'"),
            (["query", "idx", "q", "--alpha=-inf"], "argument --alpha: expected a number between 0 and 1"),
            (["query", "idx", "q", "-k", "true"], "argument -k: expected a positive integer, got 'true'"),
            (["query", "idx", "q", "-k", "2.0"], "argument -k: expected a positive integer, got '2.0'"),
            # a 5,000-digit number is shown shortened, so the error stays one readable line
            (
                ["query", "idx", "q", "-k", "9" * 5000],
                "argument -k: expected a positive integer, got '99999999999999999999...9999999999'",
            ),
            (["query", "idx", "q", "-k", "0"], "argument -k: expected a positive integer, got '0'"),
            (["query", "idx", "q", "--fetch-k", "0"], "argument --fetch-k: expected a positive integer or 'all'"),
            (["query", "idx", "q", "--method", "max"], "argument --method: invalid choice: 'max'"),
            (["query", "idx", "q", "--window", "-1"], "argument --window: expected a non-negative integer, got '-1'"),
            (["ask", "idx", "q", "--top-n", "0"], "argument --top-n: expected a positive integer, got '0'"),
            (["query", "idx", "q", "--rerank", "cohere"], "argument --rerank: rerank must be 'llm' (a chat model"),
            (["query", "idx", "q", "--rerank", "cross-encoder:"], "argument --rerank: rerank must be 'llm'"),
            (["query", "--rerank", "idx", "q"], "argument --rerank: rerank must be 'llm'"),  # SPEC, not INDEX
            (["query", "idx", "q", "--multi-query", "0"], "argument --multi-query: expected 1 to 10 rewrites, got '0'"),
            (["ask", "idx", "q", "--multi-query", "11"], "argument --multi-query: expected 1 to 10 rewrites, got '11'"),
            (["ask", "idx", "q", "--multi-query", "2.0"], "argument --multi-query: expected 1 to 10 rewrites"),
            (["serve", "idx", "--multi-query", "true"], "argument --multi-query: expected 1 to 10 rewrites"),
            (["serve", "idx", "--rerank", "x"], "argument --rerank: rerank must be 'llm'"),
            (["serve", "idx", "--rerank-candidates", "0"], "argument --rerank-candidates: expected a positive"),
            (["ask", "idx"], "the following arguments are required: question"),
            (["query", "idx"], "the following arguments are required: question"),
            (["index", "data"], "the following arguments are required: --out/-o"),
            (["index", "data", "-o", "x", "--chunk-size", "0"], "argument --chunk-size: expected a positive integer"),
            (["index", "data", "-o", "x", "--llm-concurrency", "0"], "argument --llm-concurrency: expected a positive"),
            (["ask", "x", "q", "--llm-timeout", "0"], "argument --llm-timeout: expected a positive number"),
            (["query", "x", "q", "--llm-timeout", "nan"], "argument --llm-timeout: expected a positive number"),
            (["index", "data", "-o", "x", "--llm-timeout", "inf"], "argument --llm-timeout: expected a positive"),
            (["query", "idx", "q", "--k-summaries", "0"], "argument --k-summaries: expected a positive integer"),
            (["query", "idx", "q", "--summary-weight", "2"], "argument --summary-weight: expected a number between"),
            (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
            ([], "the following arguments are required: COMMAND"),
        ],
    )
    def test_exit_2_with_a_message(self, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert err.splitlines()[0].startswith("usage: langchain-fusion")
        assert (
            f"langchain-fusion{'' if not argv or argv[0] == 'frobnicate' else ' ' + argv[0]}: error: {message}" in err
        )


class TestHelp:
    FLAGS: ClassVar[dict[str, tuple[str, ...]]] = {
        "index": ("PATH", "--out", "-o", "--embeddings", "--chunk-size", "--chunk-overlap", "--vector-index",
                  "--vector-search-params", "--json", "--quiet", "-q", "--contextual", "--summaries", "--llm",
                  "--llm-cache", "--llm-concurrency", "--llm-timeout", "--keep-missing", "--max-file-chars",
                  "--max-chunk-tokens", "--language", "--store-timeout", "--tenant-key", "--tenant"),
        "query": ("INDEX", "question", "-k", "--alpha", "--method", "--fetch-k", "--embeddings", "--json",
                  "--window", "--max-chars", "--rerank", "--top-n", "--llm", "--llm-timeout", "--hierarchical",
                  "--k-summaries", "--summary-weight", "--multi-query", "--min-vector-score", "--min-bm25-score",
                  "--mmr", "--lambda-mult", "--max-per-source", "--min-relevance", "--filter", "--store-timeout",
                  "--duplicates", "--near-duplicate-similarity", "--tenant", "--unread-queries"),
        "ask": ("INDEX", "question", "-k", "--alpha", "--method", "--fetch-k", "--embeddings", "--json",
                "--window", "--max-chars", "--rerank", "--top-n", "--llm", "--llm-timeout", "--hierarchical",
                "--k-summaries", "--summary-weight", "--multi-query", "--min-vector-score", "--min-bm25-score",
                "--mmr", "--lambda-mult", "--max-per-source", "--min-relevance", "--filter", "--store-timeout",
                "--duplicates", "--near-duplicate-similarity", "--tenant", "--unread-queries"),
        "explain": ("INDEX", "question", "DOC_ID", "-k", "--alpha", "--method", "--fetch-k", "--embeddings", "--json",
                    "--min-vector-score", "--min-bm25-score", "--mmr", "--lambda-mult", "--max-per-source",
                    "--min-relevance", "--filter", "--duplicates", "--near-duplicate-similarity", "--store-timeout",
                    "--tenant", "--unread-queries"),
    }  # fmt: skip

    @pytest.mark.subprocess
    def test_console_script_help(self) -> None:
        proc = subprocess.run(
            # What the console script runs (pyproject: langchain-fusion = "langchain_fusion.cli:main").
            [sys.executable, "-c", "import sys; from langchain_fusion.cli import main; sys.exit(main())", "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        text = proc.stdout
        assert text.startswith("usage: langchain-fusion [-h] [--version] COMMAND")
        assert re.search(r"^\s+index\s+load files, split them into chunks and save a fusion index$", text, re.M)
        assert re.search(r"^\s+query\s+search a saved index$", text, re.M)
        assert re.search(r"^\s+ask\s+answer a question from a saved index with a chat model", text, re.M)
        assert "--version" in text

    def test_console_script_is_installed(self) -> None:
        script = Path(sys.executable).parent / "langchain-fusion"
        if not script.exists():
            pytest.skip("package not installed with its console script")
        assert "from langchain_fusion.cli import main" in script.read_text(encoding="utf-8", errors="replace")

    @pytest.mark.parametrize("command", ["index", "query", "ask", "explain"])
    def test_subcommand_help_mentions_every_flag(
        self, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("COLUMNS", "200")
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: langchain-fusion {command}")
        for flag in self.FLAGS[command]:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), flag

    @pytest.mark.parametrize("command", ["index", "query", "ask", "explain"])
    def test_every_option_has_help_text(self, command: str) -> None:
        parser = build_parser()
        sub = next(a for a in parser._actions if a.dest == "command").choices[command]
        documented = {s for a in sub._actions for s in a.option_strings} | {a.metavar or a.dest for a in sub._actions}
        assert set(self.FLAGS[command]) <= documented
        for action in sub._actions:
            assert action.help, action
        expected_options = {f for f in self.FLAGS[command] if f.startswith("-")} | {"-h", "--help"}
        assert {s for a in sub._actions for s in a.option_strings} == expected_options

    def test_a_run_builds_its_own_commands_flags_alone(self, capsys: pytest.CaptureFixture[str]) -> None:
        def commands(parser: Any) -> list[str]:
            return list(next(a for a in parser._actions if a.dest == "command").choices)

        every = ["index", "query", "ask", "explain", "eval", "serve", "mcp"]
        assert commands(build_parser()) == commands(build_parser("--help")) == every
        assert commands(build_parser("explain")) == ["query", "ask", "explain"]
        assert commands(build_parser("serve")) == ["serve"]
        full = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
        alone = next(a for a in build_parser("serve")._actions if a.dest == "command").choices["serve"]
        assert alone.format_help() == full.format_help()  # the same flags, help and store options
        with pytest.raises(SystemExit):
            main(["serach", "idx", "q"])
        assert (
            "invalid choice: 'serach' (choose from 'index', 'query', 'ask', 'explain', 'eval'"
            in capsys.readouterr().err
        )


# --- context windows, rerank and ask --------------------------------------------------------


@pytest.fixture
def no_openai_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)  # no .env file can be found from here


class TestQueryWindowAndRerank:
    def test_window(self, index_dir: Path) -> None:
        plain = _query_json(index_dir, "How much rain fell in the July monsoon flood?", "-k", "3")
        results = _query_json(index_dir, "How much rain fell in the July monsoon flood?", "-k", "3", "--window", "1")
        assert len(results) == 3  # merged windows do not shrink the results: the search goes deeper
        for result in results:
            meta = result["metadata"]
            first, last = meta[keys.WINDOW_SPAN]
            assert meta[keys.CHUNK_INDEX] in meta[keys.WINDOW_HITS]
            assert last - first <= 2 * len(meta[keys.WINDOW_HITS])
            assert first <= min(meta[keys.WINDOW_HITS]) and max(meta[keys.WINDOW_HITS]) <= last
        assert results[0]["id"] == plain[0]["id"]
        assert plain[0]["text"] in results[0]["text"]
        assert len(results[0]["text"]) > len(plain[0]["text"])

    def test_window_budget(self, index_dir: Path) -> None:
        results = _query_json(index_dir, "inverter", "-k", "3", "--window", "2", "--max-chars", "1")
        for result in results:
            first, last = result["metadata"][keys.WINDOW_SPAN]
            assert last - first + 1 == len(result["metadata"][keys.WINDOW_HITS])  # hits only

    def test_window_table_shows_page_ranges(self, index_dir: Path) -> None:
        status, out, err = run_cli(["query", str(index_dir), "battery flood", "-k", "4", "--window", "3"])
        assert status == 0, err
        assert len(out.splitlines()) >= 3

    def test_rerank_json(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        specs = use_chat_model(monkeypatch, rater_and_answerer())
        results = _query_json(index_dir, "flood damage", "--rerank", "--top-n", "3", "--llm", "openai:gpt-4.1")
        assert specs == ["openai:gpt-4.1"]
        assert len(results) == 3
        ratings = [r["metadata"][keys.RERANK_RATING] for r in results]
        assert ratings == sorted(ratings, reverse=True)
        assert ratings[0] == 9
        assert all("flood" in r["text"].lower() for r in results if r["metadata"][keys.RERANK_RATING] == 9)

    def test_rerank_rates_k_candidates(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        model = rater_and_answerer()
        use_chat_model(monkeypatch, model)
        _query_json(index_dir, "flood damage", "--rerank")
        assert len(model.calls) == 20  # the default candidate count with --rerank
        model = rater_and_answerer()
        use_chat_model(monkeypatch, model)
        assert len(_query_json(index_dir, "flood damage", "--rerank", "-k", "6")) == 4  # default top-n
        assert len(model.calls) == 6

    def test_rerank_table(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        use_chat_model(monkeypatch, rater_and_answerer())
        status, out, err = run_cli(
            ["query", str(index_dir), "flood damage", "--rerank", "--top-n", "2", "--window", "1"]
        )
        assert status == 0, err
        lines = out.splitlines()
        assert re.fullmatch(r"\s*rank\s+fused\s+vector\s+bm25\s+rating\s+source\s+page\s+text", lines[0])
        assert len(lines) == 4
        assert re.match(r"\s*1\s+\S+\s+\S+\s+\S+\s+9\s", lines[2])


class TestCrossEncoderAndMultiQuery:
    def test_cross_encoder_rerank_json(
        self, index_dir: Path, tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        specs = use_chat_model(monkeypatch, None)
        spec = f"cross-encoder:{tiny_cross_encoder}"
        results = _query_json(index_dir, "flood damage", "--rerank", spec, "--top-n", "3", "-k", "10")
        assert specs == []  # no chat model
        assert len(results) == 3
        scores = [r["metadata"][keys.RERANK_SCORE] for r in results]
        assert scores == sorted(scores, reverse=True)
        candidates = _query_json(index_dir, "flood damage", "-k", "10")
        reference = CrossEncoderReranker(model=str(tiny_cross_encoder), top_n=3)
        expected = reference.score("flood damage", [c["text"] for c in candidates])
        assert sorted(scores, reverse=True) == pytest.approx(sorted(expected, reverse=True)[:3])

    def test_cross_encoder_table(self, index_dir: Path, tiny_cross_encoder: Path) -> None:
        argv = ["query", str(index_dir), "flood damage", "--rerank", f"cross-encoder:{tiny_cross_encoder}"]
        status, out, err = run_cli(argv)
        assert status == 0, err
        lines = out.splitlines()
        assert re.fullmatch(r"\s*rank\s+fused\s+vector\s+bm25\s+rerank\s+source\s+page\s+text", lines[0])
        assert len(lines) == 2 + 4  # the default --top-n
        assert re.match(r"\s*1\s+\S+\s+\S+\s+\S+\s+0\.\d{3}\s", lines[2])

    @pytest.mark.slow  # looking for a cross-encoder imports sentence-transformers (torch) first
    def test_missing_cross_encoder_is_one_line(self, index_dir: Path) -> None:
        status, out, err = run_cli(["query", str(index_dir), "flood", "--rerank", "cross-encoder:./no-such-model"])
        assert_one_line_error(status, out, err, "cross-encoder folder './no-such-model' does not exist")

    def test_multi_query_json_and_table(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        model = RatingModel(rule=lambda prompt: "1. monsoon rain in July\n2. battery racks above the water")
        specs = use_chat_model(monkeypatch, model)
        results = _query_json(index_dir, "flood damage", "--multi-query", "2", "--llm", "openai:gpt-4.1", "-k", "5")
        assert specs == ["openai:gpt-4.1"]
        assert len(results) == 5
        rewrites = ["monsoon rain in July", "battery racks above the water"]
        for result in results:
            assert result["metadata"][keys.MULTI_QUERY_REWRITES] == rewrites
            assert len(result["metadata"][keys.MULTI_QUERY_RANKS]) == 3
        scores = [r["metadata"][keys.MULTI_QUERY_SCORE] for r in results]
        assert scores == sorted(scores, reverse=True)
        assert "2 different search queries" in model.calls[0]
        status, out, err = run_cli(["query", str(index_dir), "flood damage", "--multi-query", "2"])
        assert status == 0, err
        assert out.splitlines()[0] == "also searched: monsoon rain in July; battery racks above the water"

    def test_multi_query_with_a_failing_model(
        self, index_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        use_chat_model(monkeypatch, RatingModel(rule=lambda prompt: ValueError("bad request")))
        with caplog.at_level(logging.WARNING):
            status, out, err = run_cli(["query", str(index_dir), "flood damage", "--multi-query", "3"])
        assert status == 0, err
        assert out.splitlines()[0] == "also searched: nothing (no usable rewrites)"
        assert "multi-query: no rewrites (ValueError: bad request)" in caplog.text

    def test_ask_with_multi_query_window_and_cross_encoder(
        self, index_dir: Path, tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        def rule(prompt: str) -> Any:
            return ANSWER if "numbered passages" in prompt else "battery racks\nmonsoon flood"

        model = RatingModel(rule=rule)
        use_chat_model(monkeypatch, model)
        argv = ["ask", str(index_dir), "What did the flood do?", "--json", "--multi-query", "2", "--window", "1"]
        status, out, err = run_cli([*argv, "--rerank", f"cross-encoder:{tiny_cross_encoder}", "--top-n", "2"])
        assert status == 0, err
        payload = json.loads(out)
        assert payload["answer"] == ANSWER
        assert len(payload["sources"]) == 2
        for source in payload["sources"]:
            meta = source["metadata"]
            assert keys.RERANK_SCORE in meta and keys.WINDOW_SPAN in meta
            assert meta[keys.MULTI_QUERY_REWRITES] == ["battery racks", "monsoon flood"]
        assert len(model.calls) == 2  # the rewrites, then the answer


class TestAskCommand:
    def test_answer_and_numbered_sources(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

        use_chat_model(monkeypatch, GenericFakeChatModel(messages=iter([ANSWER])))
        question = "Why did the batteries come through the flood without harm?"
        status, out, err = run_cli(["ask", str(index_dir), question, "-k", "3"])
        assert status == 0, err
        assert err == ""
        answer, sources = out.split("\n\nSources:\n")
        assert answer == ANSWER
        lines = sources.splitlines()
        docs = FusionIndex.load(index_dir).as_retriever(k=3).invoke(question)
        expected = []
        for n, doc in enumerate(docs, 1):
            page = doc.metadata.get(keys.PAGE)
            expected.append(f"[{n}] {doc.metadata[keys.SOURCE]}" + ("" if page is None else f", p. {page}"))
        assert lines == expected

    def test_json(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

        use_chat_model(monkeypatch, GenericFakeChatModel(messages=iter([ANSWER])))
        status, out, err = run_cli(["ask", str(index_dir), "flood", "--json", "-k", "2", "--window", "1"])
        assert status == 0, err
        payload = json.loads(out)
        assert payload["question"] == "flood"
        assert payload["answer"] == ANSWER
        assert [s["n"] for s in payload["sources"]] == list(range(1, len(payload["sources"]) + 1))
        for source in payload["sources"]:
            assert source["label"].startswith(source["metadata"][keys.SOURCE])
            assert keys.WINDOW_SPAN in source["metadata"]
            assert source["text"]

    def test_window_and_rerank(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        model = rater_and_answerer()
        use_chat_model(monkeypatch, model)
        argv = ["ask", str(index_dir), "What did the flood do?", "--json", "--window", "1", "--rerank", "--top-n", "2"]
        status, out, err = run_cli([*argv, "-k", "8"])
        assert status == 0, err
        payload = json.loads(out)
        assert payload["answer"] == ANSWER
        assert len(payload["sources"]) == 2
        assert payload["sources"][0]["metadata"][keys.RERANK_RATING] == 9
        assert len(model.calls) <= 8 + 1  # at most one rating per passage, then the answer

    @pytest.mark.parametrize("command", ["query", "ask"])
    def test_a_rerank_that_rated_nothing_fails(
        self, index_dir: Path, monkeypatch: pytest.MonkeyPatch, command: str
    ) -> None:
        # Network errors fail every rating alike, as a refused key does: the rerank asked for did not happen.
        from tests.helpers.fake_chat_models import RatingModel

        use_chat_model(monkeypatch, RatingModel(rule=lambda text: ConnectionError("connection refused")))
        status, out, err = run_cli([command, str(index_dir), "flood", "--rerank", "-k", "3"])
        assert_one_line_error(
            status, out, err, "rerank failed: no candidate could be rated", "ConnectionError: connection refused"
        )

    def test_model_failure_is_one_line(self, index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        use_chat_model(monkeypatch, RatingModel(rule=lambda text: ConnectionError("connection refused")))
        status, out, err = run_cli(["ask", str(index_dir), "flood"])
        assert_one_line_error(
            status, out, err, "the chat model failed after 3 tries: ConnectionError: connection refused"
        )


class TestHostileArguments:
    """Arguments that parse but cannot work: exit 2 with one line, before any work, for every subcommand."""

    @pytest.mark.parametrize(
        ("argv", "fragments"),
        [
            (["query", "{index}", ""], ["the query is empty"]),
            (["query", "{index}", " \t\n "], ["the query is empty"]),
            (["ask", "{index}", "   "], ["the question is empty"]),
            (["query", "{tmp}/missing", "q"], ["is not a folder"]),
            (["query", "{index}/manifest.json", "q"], ["is not a folder"]),
            (["ask", "{tmp}/missing", "q", "--llm", "openai"], ["OPENAI_API_KEY"]),
            (["serve", "{tmp}/missing"], ["is not a folder"]),
            (["query", "milvus://host:99999/c", "q"], ["port"]),
            (["query", "milvus://host/bad-name!", "q"], ["collection"]),
            (["query", "{index}", "q", "--embeddings", "nope:model"], ["embeddings 'nope:model'"]),
            (["index", "{tmp}", "--out", "{index}/manifest.json/sub"], ["is a file, not a folder"]),
            (["index", "{tmp}", "--out", "{tmp}/x", "--vector-index", "Garbage"], ["could not parse index string"]),
            (
                ["index", "{tmp}", "--out", "{tmp}/x", "--vector-index", "HNSW8", "--vector-search-params", "ef=x"],
                ["invalid FAISS search parameters"],
            ),
            (["index", "{tmp}", "--out", "{tmp}/x", "--chunk-size", "10", "--chunk-overlap", "50"], ["chunk_overlap"]),
        ],
    )
    def test_one_line_and_exit_2(
        self, argv: list[str], fragments: list[str], index_dir: Path, tmp_path: Path, no_openai_key: None
    ) -> None:
        filled = [a.format(index=index_dir, tmp=tmp_path) for a in argv]
        status, out, err = run_cli(filled)
        line = assert_one_line_error(status, out, err, *fragments)
        assert "Error in " not in line and ".cpp:" not in line  # no C++ locations from FAISS
        assert not (tmp_path / "x").exists()  # refused before any work


class TestAskAndRerankErrors:
    def test_ask_without_key(self, no_openai_key: None, tmp_path: Path) -> None:
        status, out, err = run_cli(["ask", str(tmp_path / "no-index-needed"), "What happened?"])
        line = assert_one_line_error(status, out, err, "OPENAI_API_KEY is not set", "--llm PROVIDER:MODEL")
        assert "not a folder" not in line  # the key is checked before anything else

    def test_rerank_without_key(self, no_openai_key: None, tmp_path: Path) -> None:
        status, out, err = run_cli(["query", str(tmp_path / "no-index-needed"), "flood", "--rerank"])
        assert_one_line_error(status, out, err, "OPENAI_API_KEY is not set")

    def test_query_without_rerank_needs_no_key(self, no_openai_key: None, tmp_path: Path) -> None:
        status, out, err = run_cli(["query", str(tmp_path / "nope"), "flood", "--window", "1"])
        assert_one_line_error(status, out, err, "nope is not a folder")

    def test_provider_without_the_llm_extra(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setitem(sys.modules, "langchain", None)
        monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
        status, out, err = run_cli(["ask", str(tmp_path), "flood", "--llm", "anthropic:claude-sonnet-4-5"])
        assert_one_line_error(status, out, err, "pip install 'langchain-fusion[llm]'", "langchain-anthropic")

    @pytest.mark.parametrize(
        ("argv", "fragment"),
        [
            (["query", "idx", "q", "--top-n", "2"], "--top-n is the number of reranked results to keep: add --rerank"),
            (["ask", "idx", "q", "--top-n", "2"], "add --rerank"),
            (
                ["query", "idx", "q", "--max-chars", "500"],
                "--max-chars is the character budget of context windows: set --window N",
            ),
            (["query", "idx", "q", "--llm", "openai"], "is used here only to rerank"),
            (["query", "idx", "q", "--llm", "openai", "--rerank", "cross-encoder:m"], "add one, or drop it"),
            (["query", "idx", "q", "--top-n", "2", "--multi-query", "2"], "add --rerank"),
            (["ask", "idx", "   "], "the question is empty"),
        ],
    )
    def test_option_mistakes(self, argv: list[str], fragment: str) -> None:
        status, out, err = run_cli(argv)
        assert_one_line_error(status, out, err, fragment)


# --- contextual enrichment, summaries and hierarchical search -------------------------------


def _chunk_of(prompt: str) -> str:
    return prompt.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]


def _indexing_rule(prompt: str) -> Any:
    """Contexts for the enrichment prompt, the first words of the text for the summary prompt."""
    if "<chunk>" in prompt:
        return "Context zqxmarker: " + " ".join(_chunk_of(prompt).split()[:5])
    text = prompt.split('">\n', 1)[1].split("\n</", 1)[0]
    return "Summary: " + " ".join(text.split()[:40])


def _indexing_model(rule: Any = _indexing_rule) -> Any:
    from tests.helpers.fake_chat_models import RatingModel

    return RatingModel(rule=rule, structured=False)


@pytest.fixture(scope="module")
def llm_built(workspace: Path) -> tuple[Path, dict[str, Any], Any]:
    """``index --contextual --summaries --json`` over the data copy, with a fake chat model."""
    model = _indexing_model()
    out = workspace / "llm-idx"
    with fake_cli_embeddings(), pytest.MonkeyPatch.context() as patch:
        patch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        argv = ["index", str(workspace / "data"), "--out", str(out), "--embeddings", "local", "--json"]
        status, stdout, stderr = run_cli([*argv, "--contextual", "--summaries", "--llm", "openai:gpt-4.1-mini"])
    assert status == 0, stderr
    return out, json.loads(stdout), model


class TestIndexWithChatModel:
    def test_json_summary(self, llm_built: tuple[Path, dict[str, Any], Any], expected_chunks: int) -> None:
        out, summary, model = llm_built
        assert summary["chunks"] == expected_chunks
        assert summary["summaries"] == SAMPLE_UNITS
        llm = summary["llm"]
        assert llm["cache"] == f"{out}.llm-cache"
        contextual, summaries = llm["contextual"], llm["summaries"]
        assert contextual["task"] == "contextual enrichment" and contextual["model"] == "rating-fake"
        assert contextual["items"] == contextual["calls"] == expected_chunks
        assert (contextual["cached"], contextual["retries"], contextual["failed"]) == (0, 0, [])
        assert summaries["items"] == summaries["calls"] == SAMPLE_UNITS
        assert len(model.calls) == expected_chunks + SAMPLE_UNITS

    def test_saved_folder(self, llm_built: tuple[Path, dict[str, Any], Any]) -> None:
        from langchain_fusion import HierarchicalIndex

        out, _, _ = llm_built
        assert sorted(p.name for p in out.iterdir()) == ["chunks", "manifest.json", "summaries"]
        assert (out.parent / f"{out.name}.llm-cache").is_dir()
        hierarchical = HierarchicalIndex.load(out)
        assert isinstance(hierarchical.chunks.embeddings, HashingEmbeddings)
        for doc in hierarchical.chunks.documents:
            assert doc.metadata[keys.CONTEXT].startswith("Context zqxmarker: ")
            assert "zqxmarker" not in doc.page_content  # the original text is what is stored and shown
        units = {
            (d.metadata[keys.SOURCE], d.metadata.get(keys.PAGE), d.metadata.get(keys.SECTION))
            for d in hierarchical.summaries.documents
        }
        assert len(units) == SAMPLE_UNITS
        assert all(d.page_content.startswith("Summary: ") for d in hierarchical.summaries.documents)

    def test_second_run_makes_no_calls(self, llm_built: tuple[Path, dict[str, Any], Any], tmp_path: Path,
                                       workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        out, first, _ = llm_built
        idle = _indexing_model(lambda prompt: AssertionError("called despite the cache"))
        use_chat_model(monkeypatch, idle)
        argv = ["index", str(workspace / "data"), "--out", str(tmp_path / "again"), "--embeddings", "local", "--json"]
        status, stdout, stderr = run_cli([*argv, "--contextual", "--summaries", "--llm-cache", f"{out}.llm-cache"])
        assert status == 0, stderr
        summary = json.loads(stdout)
        assert idle.calls == []
        assert summary["llm"]["contextual"]["calls"] == summary["llm"]["summaries"]["calls"] == 0
        assert summary["llm"]["contextual"]["cached"] == first["chunks"]
        assert summary["llm"]["summaries"]["cached"] == SAMPLE_UNITS
        assert not (tmp_path / "again.llm-cache").exists()

    def test_query_hierarchical(self, llm_built: tuple[Path, dict[str, Any], Any]) -> None:
        out, _, _ = llm_built
        results = _query_json(out, "KV-5500 inverter rating kVA", "--hierarchical", "--k-summaries", "1", "-k", "3")
        assert 1 <= len(results) <= 3
        assert len({(r["metadata"][keys.SOURCE], r["metadata"].get(keys.PAGE)) for r in results}) == 1
        for result in results:
            meta = result["metadata"]
            assert meta[keys.SUMMARY_RANK] == 1
            expected = 0.5 * meta[keys.SUMMARY_SCORE] + 0.5 * meta[keys.FUSION_SCORE]
            assert meta[keys.HIERARCHICAL_SCORE] == pytest.approx(expected)
            assert "zqxmarker" not in result["text"]
        weighted = _query_json(out, "flood", "--hierarchical", "--summary-weight", "1", "-k", "10")
        ranks = [r["metadata"][keys.SUMMARY_RANK] for r in weighted]
        assert ranks == sorted(ranks) and set(ranks) <= {1, 2, 3}

    def test_query_hierarchical_table(self, llm_built: tuple[Path, dict[str, Any], Any]) -> None:
        out, _, _ = llm_built
        status, stdout, err = run_cli(
            ["query", str(out), "battery flood", "--hierarchical", "-k", "3", "--window", "1"]
        )
        assert status == 0, err
        lines = stdout.splitlines()
        assert re.fullmatch(r"\s*rank\s+hier\s+sum#\s+fused\s+vector\s+bm25\s+source\s+page\s+text", lines[0])
        assert 1 <= len(lines) - 2 <= 3

    def test_plain_query_of_a_hierarchical_index_uses_its_chunks(
        self, llm_built: tuple[Path, dict[str, Any], Any], index_dir: Path
    ) -> None:
        out, _, _ = llm_built
        results = _query_json(out, "Halvorsen HL-8 busbar bolt torque", "-k", "3")
        assert len(results) == 3
        assert all(keys.HIERARCHICAL_SCORE not in r["metadata"] for r in results)
        assert results[0]["metadata"][keys.CONTEXT].startswith("Context zqxmarker")

    def test_hierarchical_query_of_a_plain_index(self, index_dir: Path) -> None:
        status, out, err = run_cli(["query", str(index_dir), "flood", "--hierarchical"])
        assert_one_line_error(status, out, err, "is a plain index without page summaries", "--summaries")

    def test_ask_hierarchical(
        self, llm_built: tuple[Path, dict[str, Any], Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

        out, _, _ = llm_built
        use_chat_model(monkeypatch, GenericFakeChatModel(messages=iter([ANSWER])))
        status, stdout, err = run_cli(["ask", str(out), "Why did the batteries survive?", "--hierarchical", "--json"])
        assert status == 0, err
        payload = json.loads(stdout)
        assert payload["answer"] == ANSWER
        assert all(keys.SUMMARY_ID in s["metadata"] for s in payload["sources"])

    def test_text_output_and_failures(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        text = "The GC-9 controller reboots nightly.\n\n" + "".join(
            f"Lockout {i} is logged in hut {i} with the date and the technician's initials.\n\n" for i in range(8)
        )
        (tmp_path / "notes.txt").write_text(text, encoding="utf-8")

        def rule(prompt: str) -> Any:
            if "<chunk>" in prompt and _chunk_of(prompt).startswith("The GC-9"):
                return ValueError("refused by the content filter")
            return _indexing_rule(prompt)

        use_chat_model(monkeypatch, _indexing_model(rule))
        argv = ["index", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "idx"), "--embeddings", "local"]
        status, stdout, stderr = run_cli([*argv, "--contextual", "--chunk-size", "200", "--chunk-overlap", "0", "-q"])
        assert status == 0, stderr
        lines = stdout.splitlines()
        assert lines[0].startswith("indexed 1 files (0 PDF pages) into ")
        assert re.fullmatch(
            r"contextual enrichment \(rating-fake\): (\d+) chunks, \1 model calls \(0 retries\), 0 cached, 1 failed",
            lines[3],
        )
        assert lines[4] == f"chat model answers cached in {tmp_path / 'idx.llm-cache'}"
        failures = [line for line in stderr.splitlines() if line.startswith("enrichment failed for ")]
        assert failures == [
            f"enrichment failed for {tmp_path / 'notes.txt'}, chunk 0: ValueError: refused by the content filter; "
            "indexed without context"
        ]
        assert "Traceback" not in stderr
        assert [line for line in stderr.splitlines() if "failed" in line] == failures  # no duplicate log record
        loaded = FusionIndex.load(tmp_path / "idx")
        assert keys.CONTEXT not in loaded.documents[0].metadata
        assert all(keys.CONTEXT in d.metadata for d in loaded.documents[1:])


class TestChatModelErrors:
    @pytest.mark.parametrize("flag", ["--contextual", "--summaries"])
    def test_without_key_one_line_before_any_work(
        self, flag: str, no_openai_key: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def no_embedding_work(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("embedding work started before the key check")

        monkeypatch.setattr("langchain_fusion.models.embeddings.resolve_embeddings", no_embedding_work)
        monkeypatch.setattr(LocalEmbeddings, "load_model", no_embedding_work)
        shutil.copy(DATA / "maintenance-handbook.md", tmp_path / "handbook.md")
        status, out, err = run_cli(["index", "handbook.md", "--out", "idx", flag])
        assert_one_line_error(status, out, err, "OPENAI_API_KEY is not set", "--llm PROVIDER:MODEL")
        assert not (tmp_path / "idx").exists()
        assert not (tmp_path / "idx.llm-cache").exists()

    @pytest.mark.parametrize(
        "option", [["--llm", "openai"], ["--llm-cache", "c"], ["--llm-concurrency", "2"], ["--llm-timeout", "5"]]
    )
    def test_llm_options_need_a_chat_model_step(self, option: list[str], tmp_path: Path) -> None:
        status, out, err = run_cli(["index", str(tmp_path), "--out", str(tmp_path / "idx"), *option])
        assert_one_line_error(status, out, err, "only for --contextual and --summaries", option[0])

    @pytest.mark.parametrize(
        ("command", "option"), [("query", ["--k-summaries", "2"]), ("ask", ["--summary-weight", "0.2"])]
    )
    def test_hierarchical_options_need_hierarchical(self, command: str, option: list[str]) -> None:
        status, out, err = run_cli([command, "idx", "q", *option])
        assert_one_line_error(status, out, err, f"{option[0]}: options of hierarchical search", "set --hierarchical")

    def test_query_hierarchical_needs_no_chat_model(self, no_openai_key: None, tmp_path: Path) -> None:
        status, out, err = run_cli(["query", str(tmp_path / "nope"), "flood", "--hierarchical"])
        assert_one_line_error(status, out, err, "nope is not a folder")
