"""`langchain-fusion index` on an existing index: incremental updates, removals, interruptions.

The embedding model is the deterministic fake (``--embeddings local`` resolves to it; see
``tests.helpers.embeddings.fake_cli_embeddings``): what is tested is the bookkeeping, not the model.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from langchain_fusion import Analyzer, FusionIndex
from langchain_fusion import metadata as keys
from langchain_fusion.cli import main
from langchain_fusion.index import sync
from langchain_fusion.stores.local.engine import FolderEngine
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings

NOTES = {
    "a.txt": "The GC-9 controller reboots nightly. " * 30,
    "b.md": "# Batteries\n\nThe NX-14 cabinet stores 14 kWh. Keep it dry and ventilated. " * 20,
    "c.txt": "Fans need new filters every quarter, more often in the dusty season. " * 25,
}


@pytest.fixture(autouse=True)
def fake_models() -> Iterator[None]:
    with fake_cli_embeddings():
        yield


def _run(*argv: str) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    text = out.getvalue()
    return status, json.loads(text) if text.startswith("{") else None, err.getvalue()


@pytest.fixture
def waiting(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when an update of a folder finds another update holding it and starts to wait (the ``on_wait`` call)."""
    event = threading.Event()
    real = FolderEngine.updating

    def updating(self: FolderEngine, location: str, on_wait: Any = None) -> Any:
        def said() -> None:
            event.set()
            if on_wait is not None:
                on_wait()

        return real(self, location, said)

    monkeypatch.setattr(FolderEngine, "updating", updating)
    return event


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _index(docs: Path, out: Path, *extra: str) -> dict[str, Any]:
    status, summary, err = _run("index", str(docs), "--out", str(out), "--embeddings", "local", "--json", *extra)
    assert status == 0, err
    assert summary is not None
    return summary


def _sources(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in FusionIndex.load(out).documents:
        name = Path(doc.metadata[keys.SOURCE]).name
        counts[name] = counts.get(name, 0) + 1
    return counts


class TestIncrementalIndex:
    def test_first_run_then_a_rerun_embeds_nothing(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        first = _index(docs, out)
        assert (first["files_added"], first["files_unchanged"]) == (3, 0)
        assert first["chunks_embedded"] == first["chunks"] > 3
        again = _index(docs, out)
        assert again["files_unchanged"] == 3
        assert again["files_added"] == again["files_updated"] == again["files_removed"] == 0
        assert again["chunks_embedded"] == 0
        assert again["chunks"] == first["chunks"]

    def test_runs_and_queries_leave_nothing_beside_the_index(self, docs: Path, tmp_path: Path) -> None:
        # As `make demo` does in a checkout: no lock file left to dirty it.
        out = tmp_path / "idx"
        _index(docs, out)
        _index(docs, out)
        status, _, err = _run("query", str(out), "batteries", "-k", "2", "--embeddings", "local")
        assert status == 0, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["docs", "idx"]

    def test_a_changed_file_has_its_chunks_replaced(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        first = _index(docs, out)
        before = _sources(out)
        (docs / "a.txt").write_text("The GC-9 controller was replaced by a GC-10 in March.", encoding="utf-8")
        second = _index(docs, out)
        assert (second["files_updated"], second["files_unchanged"]) == (1, 2)
        assert second["chunks_embedded"] == 1
        assert second["chunks_removed"] == before["a.txt"]
        after = _sources(out)
        assert after["a.txt"] == 1 and after["b.md"] == before["b.md"]
        assert second["chunks"] == first["chunks"] - before["a.txt"] + 1
        found = FusionIndex.load(out).as_retriever(k=1, alpha=0.0).invoke("GC-10 March")
        assert "GC-10" in found[0].page_content

    def test_a_deleted_file_has_its_chunks_removed(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        removed = _sources(out)["c.txt"]
        (docs / "c.txt").unlink()
        summary = _index(docs, out)
        assert summary["files_removed"] == 1 and summary["chunks_removed"] == removed
        assert "c.txt" not in _sources(out)

    def test_keep_missing_keeps_them(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        (docs / "c.txt").unlink()
        summary = _index(docs, out, "--keep-missing")
        assert summary["files_removed"] == 0
        assert "c.txt" in _sources(out)

    def test_files_outside_the_given_paths_are_kept(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        status, summary, err = _run("index", str(docs / "a.txt"), "--out", str(out), "--embeddings", "local", "--json")
        assert status == 0, err
        assert summary is not None and summary["files_removed"] == 0 and summary["files_unchanged"] == 1
        assert set(_sources(out)) == {"a.txt", "b.md", "c.txt"}

    def test_new_chunking_reindexes_everything(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        summary = _index(docs, out, "--chunk-size", "300", "--chunk-overlap", "30")
        assert summary["files_updated"] == 3 and summary["files_unchanged"] == 0

    def test_a_token_bound_is_recorded_and_a_rerun_keeps_it(
        self, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def words(self: HashingEmbeddings, texts: Sequence[str]) -> list[int]:  # a model counting words
            return [len(text.split()) for text in texts]

        out = tmp_path / "idx"
        plain = _index(docs, out)
        status, _, err = _run("index", str(docs), "--out", str(out), "--max-chunk-tokens", "40", "-q")
        assert status == 2 and len(err.splitlines()) == 1, err
        no_counter = "--max-chunk-tokens counts the embedding model's tokens, and HashingEmbeddings has no count_tokens"
        assert no_counter in err
        assert "(--chunk-size N) instead, or index with the bundled model (--embeddings local)" in err
        monkeypatch.setattr(HashingEmbeddings, "count_tokens", words, raising=False)
        bounded = _index(docs, out, "--max-chunk-tokens", "40")
        assert bounded["files_updated"] == 3 and bounded["chunks"] > plain["chunks"]
        assert max(len(d.page_content.split()) for d in FusionIndex.load(out).documents) <= 40
        assert _index(docs, out, "--max-chunk-tokens", "40")["files_unchanged"] == 3
        assert _index(docs, out)["files_updated"] == 3  # the bound is part of the chunking

    def test_a_language_is_chosen_for_a_new_index_and_kept(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out, "--language", "german")
        analyzer = FusionIndex.load(out).analyzer
        assert (analyzer.stemmer, analyzer.stopwords) == ("german", "german")
        assert _index(docs, out)["files_unchanged"] == 3  # a rerun keeps it
        assert _index(docs, out, "--language", "german")["files_unchanged"] == 3
        status, _, err = _run("index", str(docs), "--out", str(out), "--language", "french", "-q")
        assert status == 2 and len(err.splitlines()) == 1, err
        assert "was built with another analyzer" in err and "choose a new --out" in err
        assert "open it without --language" in err  # the library's analyzer=, as the command line says it
        with pytest.raises(SystemExit) as exited, contextlib.redirect_stderr(io.StringIO()) as stderr:
            main(["index", str(docs), "--out", str(tmp_path / "x"), "--language", "klingon"])
        assert exited.value.code == 2 and "argument --language: invalid choice: 'klingon'" in stderr.getvalue()

    def test_an_index_built_before_the_new_analyzer_says_how_to_move(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        FusionIndex(HashingEmbeddings(), analyzer=Analyzer(**Analyzer.LEGACY)).save(out)
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            assert main(["index", str(docs), "--out", str(out), "-q"]) == 0
        assert "note: this index keeps the BM25 analysis it was built with before 0.2" in buffer.getvalue()
        assert FusionIndex.load(out).analyzer.is_legacy
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            assert main(["index", str(docs), "--out", str(tmp_path / "new"), "-q"]) == 0
        assert "before 0.2" not in buffer.getvalue()

    def test_two_runs_on_one_folder_keep_both_runs_files(
        self, docs: Path, tmp_path: Path, waiting: threading.Event
    ) -> None:
        """The second run waits for the first's save, then updates what it saved (it used to save over it)."""
        other = tmp_path / "other"
        other.mkdir()
        (other / "d.txt").write_text("Inverters need their fans cleaned every spring. " * 20, encoding="utf-8")
        out = tmp_path / "idx"
        outcome: dict[str, Any] = {}

        def second_run() -> None:
            outcome["result"] = _run("index", str(other), "--out", str(out), "--json")

        with FolderEngine().updating(str(out)):  # a first run, between its load and its save
            runner = threading.Thread(target=second_run)
            runner.start()
            assert waiting.wait(timeout=60) and runner.is_alive()  # the second run waits; it has not loaded the index
            _save_first_run(docs, out)
        runner.join(timeout=60)
        status, summary, err = outcome["result"]
        assert status == 0, err
        assert "waiting for another index run on" not in err  # --json is quiet
        assert set(_sources(out)) == {"a.txt", "b.md", "c.txt", "d.txt"}
        assert summary is not None and (summary["files_added"], summary["files"]) == (1, 4)

    def test_a_waiting_run_says_so(self, docs: Path, tmp_path: Path, waiting: threading.Event) -> None:
        out = tmp_path / "idx"
        outcome: dict[str, Any] = {}
        with FolderEngine().updating(str(out)):
            runner = threading.Thread(target=lambda: outcome.update(result=_run("index", str(docs), "--out", str(out))))
            runner.start()
            assert waiting.wait(timeout=60)
        runner.join(timeout=60)
        status, _, err = outcome["result"]
        assert status == 0 and f"waiting for another index run on {out} to finish..." in err

    def test_ctrl_c_keeps_the_work_done_and_a_rerun_finishes(
        self, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        out = tmp_path / "idx"
        _ctrl_c_at_the_second_file(monkeypatch)
        status, _, err = _run("index", str(docs), "--out", str(out), "--embeddings", "local", "-q")
        monkeypatch.undo()
        assert status == 130
        assert "interrupted; saved the 1 files done so far" in err
        assert set(_sources(out)) == {"a.txt"}
        summary = _index(docs, out)
        assert (summary["files_unchanged"], summary["files_added"]) == (1, 2)
        assert set(_sources(out)) == {"a.txt", "b.md", "c.txt"}

    def test_other_embeddings_on_an_existing_index_are_one_line(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        status, _, err = _run("index", str(docs), "--out", str(out), "--vector-index", "HNSW32", "-q")
        assert status == 2 and "uses vector index 'Flat'" in err and len(err.splitlines()) == 1
        assert "open it without --vector-index" in err

    def test_text_output_says_what_the_run_did(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        _index(docs, out)
        status, _, _ = _run("index", str(docs), "--out", str(out), "-q")
        assert status == 0
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            main(["index", str(docs), "--out", str(out), "-q"])
        assert "this run: 0 files added, 0 updated, 0 removed, 3 unchanged; 0 chunks embedded, 0 removed" in (
            buffer.getvalue()
        )


def _ctrl_c_at_the_second_file(patch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (KeyboardInterrupt) while the second file of the run is embedded (each file indexed on its own)."""
    patch.setattr(sync, "GROUP_CHUNKS", 1)
    real_add = FusionIndex.add_documents
    calls = [0]

    def interrupted(self: FusionIndex, *args: Any, **kwargs: Any) -> list[str]:
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real_add(self, *args, **kwargs)

    patch.setattr(FusionIndex, "add_documents", interrupted)


def _save_first_run(docs: Path, out: Path) -> None:
    """What a first ``index docs --out out`` run saves, written while the test holds the update lock."""
    from langchain_fusion.index.sync import SYNC_INFO_KEY, sync_files
    from langchain_fusion.index.sync_spec import SyncSpec

    index = FusionIndex(HashingEmbeddings())
    record: dict[str, Any] = {}
    sync_files(index, SyncSpec(paths=[docs], chunk_size=1000, chunk_overlap=200), record)
    index.save(out, info={SYNC_INFO_KEY: record})


def _summary_model() -> Any:
    from tests.helpers.fake_chat_models import RatingModel

    return RatingModel(rule=lambda prompt: "Summary: " + " ".join(prompt.split()[-12:]), structured=False)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): equal before and after means untouched."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".lock")  # locks come and go
    return {str(p.relative_to(folder)): p.read_bytes() for p in files}


def _summarised_sources(out: Path) -> set[str]:
    from langchain_fusion import HierarchicalIndex

    return {Path(d.metadata[keys.SOURCE]).name for d in HierarchicalIndex.load(out).summaries.documents}


class TestHierarchicalRerun:
    """``index --summaries`` on a folder that holds page summaries: an interrupted run never loses them."""

    @pytest.fixture
    def model(self, monkeypatch: pytest.MonkeyPatch) -> Any:
        model = _summary_model()
        monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        return model

    @pytest.fixture
    def built(self, docs: Path, tmp_path: Path, model: Any) -> Path:
        out = tmp_path / "idx"
        summary = _index(docs, out, "--summaries")
        assert summary["summaries"] == 3
        (docs / "c.txt").write_text("Fans are cleaned monthly now, filters changed twice a year. " * 25, "utf-8")
        (docs / "d.txt").write_text("The VX-2 pump is primed before every start in winter. " * 25, "utf-8")
        return out

    def test_ctrl_c_keeps_the_previous_index_and_a_rerun_finishes(
        self, docs: Path, built: Path, model: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.index.hierarchical import is_hierarchical

        before = _files(built)
        with monkeypatch.context() as patch:
            _ctrl_c_at_the_second_file(patch)  # of the two changed files
            status, _, err = _run("index", str(docs), "--out", str(built), "--embeddings", "local", "-q", "--summaries")
        assert status == 130
        assert is_hierarchical(built) and _files(built) == before  # summaries and manifest untouched
        assert len(err.splitlines()) == 1 and f"nothing saved: {built} keeps its previous index" in err
        assert "run the same command again" in err
        calls_before = len(model.calls)
        summary = _index(docs, built, "--summaries")
        assert (summary["files_added"], summary["files_updated"], summary["files_unchanged"]) == (1, 1, 2)
        assert summary["summaries"] == 4 and _summarised_sources(built) == {"a.txt", "b.md", "c.txt", "d.txt"}
        assert summary["llm"]["summaries"]["cached"] == 2  # a.txt and b.md are not summarised again
        assert len(model.calls) - calls_before == summary["llm"]["summaries"]["calls"] == 2

    def test_a_rerun_reads_the_chunks_under_the_folders_lock(
        self, docs: Path, built: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # As HierarchicalIndex.load reads them: a save of the whole folder waits (not only one of the part).
        from langchain_fusion.stores.local import saving

        locked: list[Path] = []
        real = saving.load_lock

        def recorded(folder: Path) -> Any:
            locked.append(Path(folder))
            return real(folder)

        monkeypatch.setattr(saving, "load_lock", recorded)
        _index(docs, built, "--summaries")
        assert locked and locked[0] == built and built / "chunks" not in locked

    def test_an_invalid_saved_model_fails_before_any_summary(
        self, docs: Path, built: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.ingest.summaries import PageSummarizer
        from langchain_fusion.stores.local.manifest import CHECKSUM, manifest_checksum

        path = built / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["relevance_model"] = {"features": ["nothing"]}  # e.g. written by a newer version
        manifest[CHECKSUM] = manifest_checksum(manifest)
        path.write_text(json.dumps(manifest), encoding="utf-8")
        monkeypatch.setattr(PageSummarizer, "summarize", lambda *a, **k: pytest.fail("summarised first"))
        status, _, err = _run("index", str(docs), "--out", str(built), "--embeddings", "local", "-q", "--summaries")
        assert status == 2 and len(err.splitlines()) == 1
        assert "relevance model saved with" in err and "calibrate it again" in err

    def test_ctrl_c_while_summarising_keeps_the_previous_index(
        self, docs: Path, built: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.ingest.summaries import PageSummarizer

        before = _files(built)

        def interrupted(*args: Any, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(PageSummarizer, "summarize", interrupted)
        status, _, err = _run("index", str(docs), "--out", str(built), "--embeddings", "local", "-q", "--summaries")
        assert status == 130 and "interrupted" in err
        assert _files(built) == before

    def test_a_failing_embedder_keeps_the_previous_index(
        self, docs: Path, built: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        before = _files(built)

        def failing(self: HashingEmbeddings, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("embedding service unavailable")

        monkeypatch.setattr(HashingEmbeddings, "embed_documents", failing)
        status, _, err = _run("index", str(docs), "--out", str(built), "--embeddings", "local", "-q", "--summaries")
        assert status == 2 and "embedding service unavailable" in err
        assert _files(built) == before

    def test_a_rerun_without_summaries_is_refused_in_one_line(self, docs: Path, built: Path) -> None:
        before = _files(built)
        status, _, err = _run("index", str(docs), "--out", str(built), "--embeddings", "local", "-q")
        assert status == 2 and len(err.splitlines()) == 1
        assert "holds page summaries too: add --summaries" in err
        assert _files(built) == before

    def test_ctrl_c_on_a_new_folder_saves_its_chunks_and_a_rerun_adds_the_summaries(
        self, docs: Path, tmp_path: Path, model: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.index.hierarchical import is_hierarchical

        out = tmp_path / "idx"
        with monkeypatch.context() as patch:
            _ctrl_c_at_the_second_file(patch)
            status, _, err = _run("index", str(docs), "--out", str(out), "--embeddings", "local", "-q", "--summaries")
        assert status == 130 and "interrupted; saved the 1 files done so far" in err
        assert not is_hierarchical(out) and set(_sources(out)) == {"a.txt"}
        summary = _index(docs, out, "--summaries")
        assert (summary["files_unchanged"], summary["files_added"], summary["summaries"]) == (1, 2, 3)
        assert is_hierarchical(out) and _summarised_sources(out) == {"a.txt", "b.md", "c.txt"}
