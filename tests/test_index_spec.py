"""The write path from Python: IndexSpec (checked data) and build_index (one composer for Python and the CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from langchain_fusion import FusionIndex, HierarchicalIndex
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.index import sync
from langchain_fusion.index.opening import open_index
from langchain_fusion.index.sync import SyncEvents
from langchain_fusion.index.sync_spec import SyncSpec
from langchain_fusion.pipeline.index_spec import IndexSpec
from langchain_fusion.pipeline.indexing import IndexReport, build_index
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import RatingModel

NOTES = {
    "a.txt": "The GC-9 controller reboots nightly. " * 30,
    "b.md": "# Batteries\n\nThe NX-14 cabinet stores 14 kWh. Keep it dry and ventilated. " * 20,
    "c.txt": "Fans need new filters every quarter, more often in the dusty season. " * 25,
}


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


class Recorder:
    """An IndexProgress that keeps what it was told."""

    def __init__(self) -> None:
        self.statuses: list[str] = []
        self.problems: list[str] = []
        self.bars: list[tuple[str, int]] = []
        self.made: list[tuple[str, int, str]] = []
        """Each bar made: (description, total, unit)."""

    def status(self, message: str) -> None:
        self.statuses.append(message)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def bar(self, total: int, description: str, unit: str) -> Any:
        recorder = self
        self.made.append((description, total, unit))

        class Bar:
            def update(self, n: int = 1) -> None:
                recorder.bars.append((description, n))

            def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
                return None

            def close(self) -> None:
                return None

        return Bar()


class WindowedEmbeddings(HashingEmbeddings):
    """The fake embeddings, declaring a window of 20 tokens (whitespace-separated words), as the bundled model does."""

    max_word_pieces = 20

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(text.split()) for text in texts]


def spec(docs: Path, out: Path, **options: Any) -> IndexSpec:
    return IndexSpec(location=str(out), paths=(str(docs),), embeddings=HashingEmbeddings(), **options)


class TestIndexSpec:
    def test_defaults_and_paths(self, tmp_path: Path) -> None:
        made = IndexSpec(location=tmp_path / "idx", paths="notes")
        assert made.location == str(tmp_path / "idx") and made.paths == ("notes",)
        assert (made.chunk_size, made.chunk_overlap, made.max_chunk_tokens) == (1000, 200, None)
        assert not made.uses_llm and made.llm_timeout == 60.0

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"chunk_size": 0}, "chunk_size must be a positive whole number"),
            ({"chunk_size": 100, "chunk_overlap": 100}, "0 <= chunk_overlap < chunk_size; got 100 and 100"),
            ({"chunk_overlap": -1}, "0 <= chunk_overlap < chunk_size"),
            ({"max_chunk_tokens": 0}, "max_chunk_tokens must be a positive whole number"),
            ({"llm_concurrency": 0}, "llm_concurrency must be a positive whole number"),
            ({"llm_timeout": 0}, "llm_timeout must be a positive number of seconds"),
            ({"language": "klingon"}, "language"),
            ({"llm": "openai"}, "only for contextual=True and summaries=True: add one, or drop llm=..."),
            ({"llm_cache": "cache"}, "drop llm_cache=..."),
            ({"paths": ()}, "paths must be one or more files or folders"),
            ({"location": ""}, "location must be a folder or a store location"),
            ({"embeddings": 5}, "embeddings must be a spec"),
            ({"chunk_size": True}, "chunk_size must be a positive whole number"),
            ({"frobnicate": 1}, "not an option of IndexSpec"),
        ],
    )
    def test_refusals_are_one_line(self, options: dict[str, Any], message: str) -> None:
        given = {"location": "idx", "paths": ("notes",), **options}
        with pytest.raises(InvalidParameterError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
            IndexSpec(**given)
        assert "\n" not in str(caught.value)

    def test_a_spec_is_frozen(self) -> None:
        made = IndexSpec(location="idx", paths=("notes",))
        with pytest.raises(Exception, match="frozen"):
            made.chunk_size = 5  # type: ignore[misc]


class TestBuildIndex:
    def test_a_new_folder_index_then_an_incremental_run(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        progress = Recorder()
        first = build_index(spec(docs, out, chunk_size=300, chunk_overlap=30), progress)
        assert isinstance(first, IndexReport) and not first.interrupted
        assert first.files == 3 and first.chunks == len(FusionIndex.load(out, HashingEmbeddings()))
        assert len(first.sync.files_added) == 3 and first.sync.chunks_embedded == first.chunks
        assert sum(n for phase, n in progress.bars if phase == "embedding chunks") == first.chunks
        assert first.to_dict()["files_added"] == 3 and first.lines()[0].startswith("indexed 3 files")

        second = build_index(spec(docs, out, chunk_size=300, chunk_overlap=30))
        assert (
            second.sync.files_unchanged == sorted(second.sync.files_unchanged) and len(second.sync.files_unchanged) == 3
        )
        assert second.sync.chunks_embedded == 0 and second.chunks == first.chunks

        (docs / "c.txt").unlink()
        (docs / "d.txt").write_text("A new note about the KV-3300 inverter. " * 10, encoding="utf-8")
        third = build_index(spec(docs, out, chunk_size=300, chunk_overlap=30))
        assert (len(third.sync.files_added), len(third.sync.files_removed)) == (1, 1)
        index = FusionIndex.load(out, HashingEmbeddings())
        assert {Path(str(d.metadata["source"])).name for d in index.documents} == {"a.txt", "b.md", "d.txt"}

    def test_keep_missing_keeps_the_chunks_of_files_gone(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        build_index(spec(docs, out))
        (docs / "a.txt").unlink()
        kept = build_index(spec(docs, out, keep_missing=True))
        assert kept.sync.files_removed == [] and kept.files == 3

    def test_store_settings_of_a_new_index(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        report = build_index(spec(docs, out, language="german", vector_index="HNSW8"))
        index = FusionIndex.load(out, HashingEmbeddings())
        assert index.analyzer.stemmer == "german" and report.vector_index == "HNSW8"

    def test_unreadable_files_are_problems_not_failures(self, docs: Path, tmp_path: Path) -> None:
        (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
        progress = Recorder()
        report = build_index(spec(docs, tmp_path / "idx"), progress)
        assert [s.path for s in report.sync.skipped] == [str(docs / "broken.pdf")]
        assert any(p.startswith(f"skipped {docs / 'broken.pdf'}") for p in progress.problems)

    def test_nothing_readable_is_an_error_and_saves_nothing(self, tmp_path: Path) -> None:
        empty = tmp_path / "empty"
        empty.mkdir()
        with pytest.raises(FusionError, match="no readable documents in"):
            build_index(spec(empty, tmp_path / "idx"))
        assert not (tmp_path / "idx").exists()

    def test_summaries_make_a_hierarchical_folder(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        chat = RatingModel(rule=lambda prompt: "A summary of the page.", structured=False)
        report = build_index(spec(docs, out, summaries=True, llm=chat, llm_cache=tmp_path / "cache"))
        assert report.summaries is not None and report.summaries > 0 and "summaries" in report.llm
        opened = open_index(out, HashingEmbeddings())
        assert isinstance(opened, HierarchicalIndex) and len(opened.summaries) == report.summaries
        with pytest.raises(InvalidParameterError, match="holds page summaries too: add summaries=True"):
            build_index(spec(docs, out))

    def test_another_model_on_an_existing_index_is_refused(self, docs: Path, tmp_path: Path) -> None:
        out = tmp_path / "idx"
        build_index(spec(docs, out))
        other = HashingEmbeddings(model="another-v2")
        with pytest.raises(FusionError, match="choose a new location"):
            build_index(spec(docs, out).model_copy(update={"embeddings": other}))

    def test_an_interrupted_run_saves_the_files_done(
        self, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        out = tmp_path / "idx"
        calls = {"n": 0}
        real = FusionIndex.add_documents

        def interrupt_second(self: FusionIndex, *args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real(self, *args, **kwargs)

        monkeypatch.setattr(FusionIndex, "add_documents", interrupt_second)
        monkeypatch.setattr(sync, "GROUP_CHUNKS", 1)  # each file indexed on its own
        report = build_index(spec(docs, out))
        assert report.interrupted and report.saved and report.files == 1
        monkeypatch.setattr(FusionIndex, "add_documents", real)
        finished = build_index(spec(docs, out))
        assert len(finished.sync.files_added) == 2 and len(finished.sync.files_unchanged) == 1


class TestChunksThatFit:
    def test_a_model_that_declares_its_window_gets_chunks_within_it(self, docs: Path, tmp_path: Path) -> None:
        model = WindowedEmbeddings()
        report = build_index(spec(docs, tmp_path / "idx").model_copy(update={"embeddings": model}))
        index = FusionIndex.load(tmp_path / "idx", model)
        assert max(model.count_tokens([d.page_content for d in index.documents])) <= 20
        assert report.chunk_tokens == 20 and report.sync.chunks_bounded > 0
        assert report.to_dict()["chunks_bounded"] == report.sync.chunks_bounded
        assert (
            f"chunking: {report.sync.chunks_bounded} chunks had more than the 20 tokens each chunk may have, and were "
            "split to fit"
        ) in report.lines()

    def test_a_bound_given_wins_over_the_window(self, docs: Path, tmp_path: Path) -> None:
        model = WindowedEmbeddings()
        report = build_index(spec(docs, tmp_path / "idx", max_chunk_tokens=8).model_copy(update={"embeddings": model}))
        index = FusionIndex.load(tmp_path / "idx", model)
        assert report.chunk_tokens == 8
        assert max(model.count_tokens([d.page_content for d in index.documents])) <= 8

    def test_a_model_that_declares_nothing_is_chunked_in_characters(self, docs: Path, tmp_path: Path) -> None:
        report = build_index(spec(docs, tmp_path / "idx"))
        assert report.chunk_tokens is None and report.sync.chunks_bounded == 0
        assert not any(line.startswith("chunking:") for line in report.lines())

    def test_an_index_chunked_before_is_chunked_again_to_fit(self, docs: Path, tmp_path: Path) -> None:
        out, model = tmp_path / "idx", WindowedEmbeddings()
        before = build_index(spec(docs, out, max_chunk_tokens=1000).model_copy(update={"embeddings": model}))
        assert before.sync.chunks_bounded == 0
        again = build_index(spec(docs, out).model_copy(update={"embeddings": model}))
        assert len(again.sync.files_updated) == 3 and again.sync.chunks_bounded > 0


class TestWhereTheRunIs:
    def test_both_bars_have_a_total(self, docs: Path, tmp_path: Path) -> None:
        progress = Recorder()
        report = build_index(spec(docs, tmp_path / "idx", chunk_size=300, chunk_overlap=30), progress)
        assert progress.made == [("reading files", 3, "file"), ("embedding chunks", report.chunks, "chunk")]
        assert sum(n for bar, n in progress.bars if bar == "reading files") == 3
        assert sum(n for bar, n in progress.bars if bar == "embedding chunks") == report.chunks

    def test_a_run_with_nothing_to_do_draws_no_bar(self, docs: Path, tmp_path: Path) -> None:
        build_index(spec(docs, tmp_path / "idx"))
        progress = Recorder()
        build_index(spec(docs, tmp_path / "idx"), progress)
        assert progress.made == []

    def test_phase_times_in_the_report(self, docs: Path, tmp_path: Path) -> None:
        report = build_index(spec(docs, tmp_path / "idx"))
        assert list(report.phases) == ["load", "split", "embed", "bm25", "vectors", "save"]
        assert all(seconds >= 0 for seconds in report.phases.values())
        assert sum(report.phases.values()) <= report.seconds + 0.01  # rounding to milliseconds
        data = report.to_dict()
        assert data["phases"] == report.phases and data["seconds"] == report.seconds
        assert any(line.startswith(f"time: {report.seconds:.1f} s (load ") for line in report.lines())

    def test_files_of_other_types_are_reported_not_left_out_silently(self, docs: Path, tmp_path: Path) -> None:
        (docs / "photo.png").write_bytes(b"\x89PNG")
        (docs / "sub").mkdir()
        (docs / "sub" / "notes.docx").write_bytes(b"PK not really")
        report = build_index(spec(docs, tmp_path / "idx"))
        names = [str(docs / "photo.png"), str(docs / "sub" / "notes.docx")]
        assert report.sync.unsupported == names and report.files == 3
        data = report.to_dict()
        assert data["files_unsupported"] == 2 and data["unsupported"] == names
        assert report.lines()[-1] == (
            f"2 file(s) not indexed: their type is not read (.docx, .png; PDF, .txt and .md files are): {names[0]}, "
            f"{names[1]} (the JSON report lists them all)"
        )

    def test_ctrl_c_while_reading_saves_without_embedding(
        self, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        out = tmp_path / "idx"
        build_index(spec(docs, out, chunk_size=300, chunk_overlap=30))
        (docs / "d.txt").write_text("A new note about the KV-3300 inverter. " * 10, encoding="utf-8")
        (docs / "e.txt").write_text("Another note, on the fans. " * 10, encoding="utf-8")
        real = sync.split_into_chunks
        calls = {"n": 0}

        def interrupt_second(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(sync, "split_into_chunks", interrupt_second)
        progress = Recorder()
        report = build_index(spec(docs, out, chunk_size=300, chunk_overlap=30), progress)
        assert report.interrupted and report.saved and report.files == 3  # the files indexed before, kept
        assert [bar for bar, _, _ in progress.made] == ["reading files"]  # nothing was embedded
        assert len(FusionIndex.load(out, HashingEmbeddings()).documents) > 0


class TestSmallFilesTogether:
    def test_the_chunks_of_small_files_are_embedded_in_one_call(
        self, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls: list[int] = []
        real = HashingEmbeddings.embed_documents

        def counted(self: HashingEmbeddings, texts: list[str]) -> list[list[float]]:
            calls.append(len(texts))
            return real(self, texts)

        monkeypatch.setattr(HashingEmbeddings, "embed_documents", counted)
        report = build_index(spec(docs, tmp_path / "idx", chunk_size=300, chunk_overlap=30))
        assert calls == [report.chunks] and report.sync.files_added == sorted(report.sync.files_added)
        monkeypatch.setattr(sync, "GROUP_CHUNKS", 1)
        calls.clear()
        build_index(spec(docs, tmp_path / "other", chunk_size=300, chunk_overlap=30))
        assert len(calls) == 3  # one group, and so one call, per file


class Told(SyncEvents):
    """SyncEvents that keep what they were told (two chunks per embedding call)."""

    batch_size = 2

    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    def reading(self, files: int) -> None:
        self.told.append(("reading", files))

    def read(self, source: str) -> None:
        self.told.append(("read", Path(source).name))

    def embedding(self, chunks: int) -> None:
        self.told.append(("embedding", chunks))

    def embedded(self, chunks: int) -> None:
        self.told.append(("embedded", chunks))

    def indexed(self, source: str) -> None:
        self.told.append(("indexed", Path(source).name))

    def recorded(self, where: tuple[str, ...], value: Any) -> None:
        self.told.append(("recorded", where[0] if value is not None else "gone"))


class TestSyncFiles:
    """The file sync under build_index, for an index held in Python: a SyncSpec, a record and the run's events."""

    def test_an_index_spec_is_a_sync_spec(self) -> None:
        made = IndexSpec(location="idx", paths="notes", chunk_size=300, chunk_overlap=0, keep_missing=True)
        assert isinstance(made, SyncSpec)
        assert SyncSpec(**made.model_dump(include=set(SyncSpec.model_fields))) == SyncSpec(
            paths="notes", chunk_size=300, chunk_overlap=0, keep_missing=True
        )
        with pytest.raises(InvalidParameterError, match="location: not an option of SyncSpec"):
            SyncSpec(paths="notes", location="idx")
        with pytest.raises(InvalidParameterError, match="0 <= chunk_overlap < chunk_size"):
            SyncSpec(paths="notes", chunk_size=100, chunk_overlap=100)

    def test_events_tell_what_happens_in_order(self, docs: Path) -> None:
        index, record, events = FusionIndex(HashingEmbeddings()), {}, Told()
        files = SyncSpec(paths=docs, chunk_size=300, chunk_overlap=0)
        report = sync.sync_files(index, files, record, events=events)
        kinds = [kind for kind, _ in events.told]
        assert events.told[0] == ("recorded", "chunking") and events.told[1] == ("reading", 3)
        assert sorted(name for kind, name in events.told if kind == "read") == sorted(NOTES)
        assert ("embedding", report.chunks_embedded) in events.told
        embedded = [n for kind, n in events.told if kind == "embedded"]
        assert sum(embedded) == report.chunks_embedded == len(index) and max(embedded) == 2
        assert kinds.index("embedding") < kinds.index("embedded") < kinds.index("indexed")
        assert sorted(name for kind, name in events.told if kind == "indexed") == sorted(NOTES)
        assert [name for kind, name in events.told if kind == "recorded"] == ["chunking"] + ["by_path"] * 3
        (docs / "a.txt").unlink()
        again = Told()
        assert sync.sync_files(index, files, record, events=again).files_removed == [str(docs / "a.txt")]
        assert again.told == [("recorded", "gone")] and set(record["by_path"]) == {
            str(docs / n) for n in ("b.md", "c.txt")
        }
