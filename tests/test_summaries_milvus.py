"""A summarised (hierarchical) index on a Milvus location: page summaries beside the chunks, kept in line incrementally.

``build_index`` with ``summaries=True`` (and ``index --summaries``) into a ``milvus+lite:`` location
keeps the summaries in ``COLLECTION__summaries``; ``open_index`` opens the location as a
``HierarchicalIndex``. The summaries must always end up as a folder build of the same files makes
them (the same ids, texts and chunk links), whatever happened in between: reruns, changed and
removed files, runs killed at any step, a failed summary, another chat model, tenants. Offline:
Milvus Lite (or the server at ``MILVUS_URI``), hashing embeddings and a fake chat model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex, HierarchicalIndex, IndexFormatError, IndexSpec, InvalidParameterError
from langchain_fusion import metadata as keys
from langchain_fusion.evaluation import load_labelled
from langchain_fusion.index import summary_sync, sync
from langchain_fusion.index.opening import open_index
from langchain_fusion.ingest.summaries import PageSummarizer, page_units
from langchain_fusion.pipeline.indexing import build_index
from langchain_fusion.stores.locations import parse_location
from tests.helpers.cli import run_cli_json
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.fake_chat_models import RatingModel
from tests.helpers.milvus import fresh_location, skip_without_milvus
from tests.helpers.paths import DATA, SAMPLE_QUERIES

skip_without_milvus()

pytestmark = pytest.mark.milvus

SECTION = "The GC-9 controller reboots nightly and logs each restart to the event journal. "
"""80 characters: 110 of them make a text file of three sections (chunks of 400), 60 of two, 10 of one."""


class OtherModel(RatingModel):
    """A chat model of another name: its answers are cached apart."""

    model_name: str = "other"


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no save, no clean-up)."""


@pytest.fixture
def location(tmp_path: Path) -> str:
    """A fresh collection: on the server at MILVUS_URI, else in a Milvus Lite file."""
    return fresh_location(tmp_path, "sum")


def _summary_of(prompt: str) -> str:
    """The fake's summary of the text in a summary (or reduce) prompt: its first words."""
    text = prompt.partition('">\n')[2].partition("\n</")[0]
    return "Summary: " + " ".join(text.split()[:40])


@pytest.fixture
def model() -> RatingModel:
    """A chat model whose summary of a page is the page's first words (so each page's is its own)."""
    return RatingModel(rule=_summary_of, structured=False)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("The NX-14 cabinet stores 14 kWh. Keep it dry and ventilated. " * 20, "utf-8")
    (folder / "b.md").write_text("# Pumps\n\nThe VX-2 pump is primed before every start in winter. " * 20, "utf-8")
    (folder / "long.txt").write_text(SECTION * 110, "utf-8")  # three sections of about 4,000 characters
    return folder


def _spec(location: str | Path, paths: Any, model: RatingModel, cache: Path, **options: Any) -> IndexSpec:
    return IndexSpec(
        location=str(location),
        paths=paths,
        embeddings=HashingEmbeddings(),
        chunk_size=400,
        chunk_overlap=40,
        summaries=True,
        llm=model,
        llm_cache=cache,
        **options,
    )


def _opened(location: str | Path) -> HierarchicalIndex:
    opened = open_index(str(location), HashingEmbeddings())
    assert isinstance(opened, HierarchicalIndex)
    return opened


def _summaries(index: HierarchicalIndex, tenant: str | None = None) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Each summary by id: its source, its text and the chunks it covers (what a hierarchical search reads)."""
    return {
        doc.id or "": (doc.metadata[keys.SOURCE], doc.page_content, tuple(sorted(doc.metadata[keys.SUMMARY_CHUNK_IDS])))
        for doc in index.summaries.view(tenant).iter_documents()
    }


def _assert_in_line(index: HierarchicalIndex, tenant: str | None = None) -> None:
    """Each source's summaries cover exactly its chunks, one per page or section; no source without chunks has any."""
    chunks: dict[str, list[Document]] = {}
    for chunk in index.chunks.view(tenant).iter_documents():
        chunks.setdefault(chunk.metadata[keys.SOURCE], []).append(chunk)
    by_source: dict[str, list[tuple[str, ...]]] = {}
    for source, _, covered in _summaries(index, tenant).values():
        by_source.setdefault(source, []).append(covered)
    assert set(by_source) == set(chunks)
    for source, members in chunks.items():
        assert sorted(i for covered in by_source[source] for i in covered) == sorted(c.id or "" for c in members)
        assert len(by_source[source]) == len(page_units(members))


def _same_as_a_folder(location: str, paths: Any, model: RatingModel, cache: Path, folder: Path) -> None:
    """The summaries at ``location`` are those a folder build of ``paths`` makes (same ids, texts, chunk links)."""
    build_index(_spec(folder, paths, model, cache))
    assert _summaries(_opened(location)) == _summaries(HierarchicalIndex.load(folder, HashingEmbeddings()))


class TestBuildIndex:
    """build_index(IndexSpec(location="milvus...", summaries=True, ...)): incremental, and as a folder makes it."""

    def test_the_sample_is_summarised_as_a_folder_would_be_and_searched_hierarchically(
        self, location: str, model: RatingModel, tmp_path: Path
    ) -> None:
        cache = tmp_path / "cache"
        report = build_index(_spec(location, [DATA], model, cache))
        assert report.summaries == report.llm["summaries"].items > 0 and report.location == location
        opened = _opened(location)
        assert len(opened.summaries) == report.summaries and len(opened.chunks) == report.chunks
        _assert_in_line(opened)
        results = opened.as_retriever(k=4, k_summaries=2).invoke("Why did the batteries survive the flood?")
        assert results and all(keys.HIERARCHICAL_SCORE in doc.metadata for doc in results)
        assert {doc.metadata[keys.SUMMARY_RANK] for doc in results} <= {1, 2}
        _same_as_a_folder(location, [DATA], model, cache, tmp_path / "folder")

    def test_a_rerun_summarises_and_embeds_nothing_and_changes_touch_only_their_files(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache = tmp_path / "cache"
        first = build_index(_spec(location, [docs], model, cache))
        assert first.summaries == 5  # a.txt, b.md, and long.txt's three sections
        calls = len(model.calls)
        embedded: list[int] = []
        real = HashingEmbeddings.embed_documents

        def counted(self: HashingEmbeddings, texts: list[str]) -> list[list[float]]:
            embedded.append(len(texts))
            return real(self, texts)

        monkeypatch.setattr(HashingEmbeddings, "embed_documents", counted)
        again = build_index(_spec(location, [docs], model, cache))
        assert (again.summaries, again.sync.chunks_embedded, again.llm["summaries"].items) == (5, 0, 0)
        assert len(model.calls) == calls and embedded == []  # no call, no embedding, not even of a summary

        (docs / "long.txt").write_text(SECTION * 10, "utf-8")  # three sections become one
        (docs / "b.md").unlink()
        (docs / "c.txt").write_text("Fans are cleaned monthly, filters changed twice a year. " * 10, "utf-8")
        changed = build_index(_spec(location, [docs], model, cache))
        assert (changed.sync.files_updated, changed.sync.files_removed) == (
            [str(docs / "long.txt")],
            [str(docs / "b.md")],
        )
        assert changed.summaries == 3 and changed.llm["summaries"].items == 2  # long.txt's section and c.txt
        assert len(model.calls) == calls + 2
        opened = _opened(location)
        _assert_in_line(opened)
        assert {Path(source).name for source, _, _ in _summaries(opened).values()} == {"a.txt", "long.txt", "c.txt"}
        _same_as_a_folder(location, [docs], model, cache, tmp_path / "folder")

    def test_a_plain_collection_gains_summaries_and_then_keeps_them(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path
    ) -> None:
        plain = _spec(location, [docs], model, tmp_path / "cache").model_copy(update={"summaries": False, "llm": None})
        build_index(plain)
        assert isinstance(open_index(location, HashingEmbeddings()), FusionIndex)
        report = build_index(_spec(location, [docs], model, tmp_path / "cache"))
        assert report.sync.chunks_embedded == 0 and report.summaries == 5
        with pytest.raises(InvalidParameterError, match="keeps page summaries beside it: add summaries=True"):
            build_index(plain)
        assert len(_opened(location).summaries) == 5

    def test_another_chat_model_summarises_every_page_again(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path
    ) -> None:
        build_index(_spec(location, [docs], model, tmp_path / "cache"))
        other = OtherModel(rule=lambda prompt: "Another summary.", structured=False)
        report = build_index(_spec(location, [docs], other, tmp_path / "cache"))
        assert report.llm["summaries"].items == 5 and len(other.calls) == 5
        assert {text for _, text, _ in _summaries(_opened(location)).values()} == {"Another summary."}
        assert build_index(_spec(location, [docs], other, tmp_path / "cache")).llm["summaries"].items == 0

    def test_a_failed_summary_is_retried_by_the_next_run_alone(self, location: str, docs: Path, tmp_path: Path) -> None:
        def fails_on_pumps(prompt: str) -> str:
            if "VX-2" in prompt:
                raise ValueError("the model refused")
            return "A summary."

        failing = RatingModel(rule=fails_on_pumps, structured=False)
        report = build_index(_spec(location, [docs], failing, tmp_path / "cache"))
        assert report.summaries == 5 and [f.label for f in report.llm["summaries"].failed] == [str(docs / "b.md")]
        working = RatingModel(rule=lambda prompt: "A summary.", structured=False)
        again = build_index(_spec(location, [docs], working, tmp_path / "cache"))
        assert again.llm["summaries"].items == 1 and len(working.calls) == 1  # b.md only; the rest are current
        assert {text for _, text, _ in _summaries(_opened(location)).values()} == {"A summary."}


class TestCrashes:
    """Chunks and summaries are two collections, written one after the other: a rerun repairs any cut."""

    def test_killed_between_chunks_and_summaries(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache = tmp_path / "cache"
        build_index(_spec(location, [docs], model, cache))
        (docs / "long.txt").write_text(SECTION * 60, "utf-8")
        (docs / "a.txt").unlink()

        def killed(*args: Any, **kwargs: Any) -> Any:
            raise Killed

        with monkeypatch.context() as patch:
            patch.setattr(summary_sync, "plan_summaries", killed)
            with pytest.raises(Killed):
                build_index(_spec(location, [docs], model, cache))
        left = _opened(location)  # the chunks are new, the summaries old: some cover chunks that are gone
        assert str(docs / "a.txt") in {source for source, _, _ in _summaries(left).values()}
        with pytest.raises(AssertionError):
            _assert_in_line(left)
        rerun = build_index(_spec(location, [docs], model, cache))
        assert rerun.sync.chunks_embedded == 0 and rerun.llm["summaries"].items == 2  # long.txt's two sections
        _assert_in_line(_opened(location))
        _same_as_a_folder(location, [docs], model, cache, tmp_path / "folder")

    def test_killed_while_summarising_a_new_index(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache = tmp_path / "cache"
        real = PageSummarizer.summarize
        batches: list[int] = []

        def dies_on_the_second_batch(self: PageSummarizer, chunks: Any, **kwargs: Any) -> Any:
            if chunks:
                batches.append(len(chunks))
                if len(batches) == 2:
                    raise Killed
            return real(self, chunks, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(summary_sync, "BATCH_CHUNKS", 1)  # a source per batch
            patch.setattr(PageSummarizer, "summarize", dies_on_the_second_batch)
            with pytest.raises(Killed):
                build_index(_spec(location, [docs], model, cache))
        assert isinstance(open_index(location, HashingEmbeddings()), FusionIndex)  # not yet hierarchical
        calls = len(model.calls)
        rerun = build_index(_spec(location, [docs], model, cache))
        assert rerun.sync.chunks_embedded == 0 and rerun.llm["summaries"].items == 5 - 1  # a.txt's was kept
        assert rerun.llm["summaries"].cached == 0 and len(model.calls) == calls + 4
        _assert_in_line(_opened(location))

    def test_killed_before_stale_summaries_are_deleted(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache = tmp_path / "cache"
        build_index(_spec(location, [docs], model, cache))
        (docs / "long.txt").write_text(SECTION * 10, "utf-8")  # its sections 2 and 3 go
        real = summary_sync._delete

        def dies_when_deleting(summaries: FusionIndex, ids: list[str], tenant: str | None) -> int:
            if ids:
                raise Killed
            return real(summaries, ids, tenant)

        with monkeypatch.context() as patch:
            patch.setattr(summary_sync, "_delete", dies_when_deleting)
            with pytest.raises(Killed):
                build_index(_spec(location, [docs], model, cache))
        assert len(_opened(location).summaries) == 5  # the new summary is in, the two stale ones too
        rerun = build_index(_spec(location, [docs], model, cache))
        assert rerun.summaries == 3 and rerun.llm["summaries"].cached == 1 and rerun.llm["summaries"].calls == 0
        _same_as_a_folder(location, [docs], model, cache, tmp_path / "folder")

    def test_ctrl_c_while_indexing_files_saves_the_chunks_and_a_rerun_summarises(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache = tmp_path / "cache"
        build_index(_spec(location, [docs], model, cache))
        (docs / "a.txt").write_text("The NX-16 cabinet replaced the NX-14 in May. " * 10, "utf-8")
        (docs / "b.md").write_text("# Pumps\n\nThe VX-3 pump needs no priming. " * 10, "utf-8")
        real = FusionIndex.add_documents

        def ctrl_c_on_the_second_file(self: FusionIndex, documents: Any, **kwargs: Any) -> Any:
            if any(str(doc.metadata.get(keys.SOURCE)).endswith("b.md") for doc in documents):
                raise KeyboardInterrupt
            return real(self, documents, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(FusionIndex, "add_documents", ctrl_c_on_the_second_file)
            patch.setattr(sync, "GROUP_CHUNKS", 1)  # each file embedded and added on its own
            report = build_index(_spec(location, [docs], model, cache))
        assert report.interrupted and report.saved
        assert len(_opened(location).summaries) == 5  # still the record's hierarchical index
        rerun = build_index(_spec(location, [docs], model, cache))
        assert rerun.sync.files_updated == [str(docs / "b.md")] and rerun.llm["summaries"].items == 2
        _same_as_a_folder(location, [docs], model, cache, tmp_path / "folder")


class TestOpening:
    def test_calibration_is_saved_with_the_index_and_kept_by_reruns(
        self, location: str, model: RatingModel, tmp_path: Path
    ) -> None:
        build_index(_spec(location, [DATA], model, tmp_path / "cache"))
        opened = _opened(location)
        assert opened.relevance_model is None
        fitted = opened.calibrate(load_labelled(SAMPLE_QUERIES, opened.chunks.documents))
        assert opened.save(location) == location
        files = opened.chunks.saved_info["files"]
        reopened = _opened(location)
        assert reopened.relevance_model == fitted and reopened.chunks.relevance_model is None
        assert reopened.chunks.saved_info["files"] == files  # the file record is untouched
        best = reopened.as_retriever(k=3, min_relevance=0.0).invoke("KV-5500 inverter rating kVA")[0]
        assert 0.0 <= best.metadata["relevance"] <= 1.0
        build_index(_spec(location, [DATA], model, tmp_path / "cache"))
        assert _opened(location).relevance_model == fitted
        reopened.relevance_data = None
        reopened.save(location)
        assert _opened(location).relevance_model is None

    def test_saving_an_in_process_index_to_a_store_location_is_refused(self, location: str) -> None:
        chunks = FusionIndex.from_documents(
            [Document("The GC-9 controller.", metadata={"source": "a"})], HashingEmbeddings()
        )
        summaries = FusionIndex.from_documents(
            [Document("GC-9.", metadata={"source": "a", keys.SUMMARY_CHUNK_IDS: [chunks.documents[0].id]})],
            HashingEmbeddings(),
        )
        with pytest.raises(IndexFormatError, match="only an index whose chunks and summaries already live there"):
            HierarchicalIndex(chunks, summaries).save(location)

    def test_missing_summaries_and_a_newer_format_are_one_clear_error(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path
    ) -> None:
        build_index(_spec(location, [docs], model, tmp_path / "cache"))
        store = parse_location(location).open()
        store.write_info_entry(("hierarchical", "format_version"), 2)
        with pytest.raises(IndexFormatError, match=r"format version 2; .* upgrade langchain-fusion"):
            open_index(location, HashingEmbeddings())
        store.write_info_entry(("hierarchical", "format_version"), 1)
        store.summaries_store().drop()
        with pytest.raises(IndexFormatError, match="records page summaries but they are gone"):
            open_index(location, HashingEmbeddings())
        build_index(_spec(location, [docs], model, tmp_path / "cache"))  # a rerun makes them again
        _assert_in_line(_opened(location))

    def test_dropping_the_index_drops_its_summaries(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path
    ) -> None:
        build_index(_spec(location, [docs], model, tmp_path / "cache"))
        store = parse_location(location).open()
        name = store.collection_name
        assert store.client.has_collection(name + "__summaries")
        store.drop()
        assert [c for c in store.client.list_collections() if str(c).startswith(name)] == []


def _text_of(tenant: str) -> str:
    return f"{tenant} keeps its NX-14 cabinet dry. " * 20


class TestTenants:
    """A tenant-keyed collection: each tenant's pages summarised from its own chunks, in its own collection."""

    def test_each_tenant_gets_its_own_summaries(
        self, location: str, docs: Path, model: RatingModel, tmp_path: Path
    ) -> None:
        cache, folder = tmp_path / "cache", tmp_path / "folder"
        runs = []
        for tenant in ("acme", "globex"):  # the same file names, each tenant's own text
            (docs / "a.txt").write_text(_text_of(tenant), "utf-8")
            for where in (location, folder):
                runs.append(build_index(_spec(where, [docs], model, cache, tenant_key="tenant", tenant=tenant)))
        assert [run.summaries for run in runs] == [5, 5, 5, 5]
        opened, saved = _opened(location), HierarchicalIndex.load(folder, HashingEmbeddings())
        for tenant in ("acme", "globex"):
            _assert_in_line(opened, tenant)
            assert _summaries(opened, tenant) == _summaries(saved, tenant)
            assert all(doc.metadata["tenant"] == tenant for doc in opened.summaries.view(tenant).iter_documents())
            results = opened.as_retriever(k=3, tenant=tenant).invoke(f"{tenant} keeps its NX-14 cabinet dry")
            assert results and all(doc.metadata["tenant"] == tenant for doc in results)
            assert tenant in results[0].page_content
        _assert_own_collections(location, {"acme": 5, "globex": 5})
        calls, globex = len(model.calls), _summaries(opened, "globex")
        (docs / "a.txt").write_text(_text_of("acme"), "utf-8")  # acme's files as it indexed them
        again = build_index(_spec(location, [docs], model, cache, tenant_key="tenant", tenant="acme"))
        assert again.llm["summaries"].items == 0 and len(model.calls) == calls
        (docs / "b.md").unlink()
        changed = build_index(_spec(location, [docs], model, cache, tenant="acme"))
        assert changed.summaries == 4 and _summaries(_opened(location), "globex") == globex
        _assert_own_collections(location, {"acme": 4, "globex": 5})
        store = parse_location(location).open()
        name = store.collection_name
        store.drop()
        assert [c for c in store.client.list_collections() if str(c).startswith(name)] == []


def _assert_own_collections(location: str, counts: dict[str, int]) -> None:
    """Each tenant's summaries are ``COLLECTION__summaries__t<digest>``, holding that tenant's rows alone."""
    store = parse_location(location).open()
    summaries = store.summaries_store()
    assert summaries.collection_name == f"{store.collection_name}__summaries" and summaries.tenant_set is not None
    stores = summaries.tenant_set.stores
    assert sorted(stores) == sorted(counts)
    for tenant, own in stores.items():
        digest = hashlib.sha256(tenant.encode()).hexdigest()[:20]
        assert own.collection_name == f"{store.collection_name}__summaries__t{digest}"
        assert store.client.has_collection(own.collection_name)
        rows = list(FusionIndex(HashingEmbeddings(), store=own).view().iter_documents())
        assert len(rows) == counts[tenant] and {doc.metadata["tenant"] for doc in rows} == {tenant}


class TestCommandLine:
    """``index --summaries --out milvus...``, ``query --hierarchical`` and ``eval --calibrate`` on the collection."""

    @pytest.fixture(autouse=True)
    def fakes(self, model: RatingModel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
        monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        monkeypatch.chdir(tmp_path)  # where the default chat model cache goes (COLLECTION.llm-cache)
        with fake_cli_embeddings():
            yield

    def test_index_query_calibrate_and_serve_a_summarised_collection(self, location: str, model: RatingModel) -> None:
        status, first, err = run_cli_json("index", str(DATA), "--out", location, "--summaries", "--json")
        assert status == 0, err
        assert first["summaries"] > 0 and first["llm"]["summaries"]["calls"] == first["summaries"]
        assert Path(first["llm"]["cache"]).name == f"{parse_location(location).collection_name}.llm-cache"
        status, again, err = run_cli_json("index", str(DATA), "--out", location, "--summaries", "--json")
        assert status == 0, err
        assert again["summaries"] == first["summaries"] and again["llm"]["summaries"]["calls"] == 0
        assert again["chunks_embedded"] == 0

        status, results, err = run_cli_json(
            "query", location, "battery cabinet flood", "--hierarchical", "-k", "3", "--json"
        )
        assert status == 0, err
        assert len(results) == 3 and all(keys.SUMMARY_RANK in r["metadata"] for r in results)
        status, flat, err = run_cli_json("query", location, "battery cabinet flood", "-k", "3", "--json")
        assert status == 0 and all(keys.SUMMARY_RANK not in r["metadata"] for r in flat), err

        status, _, err = run_cli_json("index", str(DATA), "--out", location, "--json")
        assert status == 2 and "keeps page summaries beside it: add --summaries" in err

        status, _, err = run_cli_json(
            "eval", "--index", location, "--labels", str(SAMPLE_QUERIES), "--calibrate", "--alpha", "0.5", "--quiet"
        )
        assert status == 0, err
        assert _opened_cli(location).relevance_model is not None
        status, kept, err = run_cli_json(
            "query", location, "KV-5500 inverter rating kVA", "--hierarchical", "--min-relevance", "0.0", "--json"
        )
        assert status == 0 and kept and all("relevance" in r["metadata"] for r in kept), err

        from langchain_fusion import PipelineSpec, build_pipeline
        from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever

        pipeline = build_pipeline(PipelineSpec.of(location, k_summaries=2))  # what serve and mcp compose
        assert isinstance(pipeline.retriever, HierarchicalRetriever)
        assert pipeline.describe()["index"]["kind"] == "hierarchical"

    def test_hierarchical_search_of_a_plain_collection_says_how_to_add_summaries(self, location: str) -> None:
        status, _, err = run_cli_json("index", str(DATA / "tickets"), "--out", location, "--quiet")
        assert status == 0, err
        status, _, err = run_cli_json("query", location, "x", "--hierarchical")
        assert status == 2 and "plain index without page summaries" in err and "--summaries" in err

    def test_a_tenant_keyed_summarised_collection_is_indexed_searched_and_calibrated_per_tenant(
        self, location: str, tmp_path: Path
    ) -> None:
        labels = []
        for tenant in ("acme", "globex"):
            folder = tmp_path / tenant
            folder.mkdir()
            (folder / "a.txt").write_text(_text_of(tenant), "utf-8")
            for i, part in enumerate(("pump", "valve", "fan", "relay", "meter", "breaker")):
                own = folder / f"{part}.md"
                own.write_text(f"# {part}\n\nThe {tenant} {part} is checked every {i + 2} weeks. " * 8, "utf-8")
                relevant = [{"source": str(own)}]
                labels.append({"id": f"{tenant}{i}", "query": f"{tenant} {part} checked", "relevant": relevant})
            keyed = ("--out", location, "--summaries", "--tenant-key", "tenant", "--json")
            status, report, err = run_cli_json("index", str(folder), *keyed, "--tenant", tenant)
            assert status == 0 and report["summaries"] == 7, err
        _assert_own_collections(location, {"acme": 7, "globex": 7})
        status, results, err = run_cli_json(
            "query", location, "pump checked", "--hierarchical", "--tenant", "globex", "--json"
        )
        assert status == 0 and results, err
        assert {r["metadata"]["tenant"] for r in results} == {"globex"} and keys.SUMMARY_RANK in results[0]["metadata"]
        path = tmp_path / "labels.json"
        path.write_text(json.dumps([q for q in labels if q["id"].startswith("acme")]), "utf-8")
        calibrate = ("eval", "--index", location, "--labels", str(path), "--calibrate", "-q")
        status, _, err = run_cli_json(*calibrate, "--tenant", "acme")
        assert status == 0, err
        assert _opened_cli(location).relevance_model is not None
        status, _, err = run_cli_json(*calibrate)
        assert status == 2 and "evaluate one tenant with --tenant T" in err


def _opened_cli(location: str) -> HierarchicalIndex:
    opened = open_index(location)
    assert isinstance(opened, HierarchicalIndex)
    return opened
