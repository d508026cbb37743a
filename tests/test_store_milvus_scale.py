"""The Milvus store past Milvus's result window (16,384 rows per query or search): nothing is cut or lost.

One collection of 20,480 chunks is built once per module with ``langchain-fusion index`` (fake
embeddings); the two tests that delete build their own collection of 20,100 rows directly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex, InvalidParameterError
from langchain_fusion import metadata as keys
from langchain_fusion.cli import main
from langchain_fusion.index.sync import SYNC_INFO_KEY, sync_files
from langchain_fusion.index.sync_spec import SyncSpec
from langchain_fusion.ingest.loading import load_files, source_name, split_documents
from langchain_fusion.stores.base import Where
from langchain_fusion.stores.locations import parse_location
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.milvus import skip_without_milvus

skip_without_milvus()

pytestmark = pytest.mark.milvus

WINDOW = 16384
"""Milvus's result window: offset + limit of one query, top-k of one search."""
FILES, LINES = 16, 1280
ROWS = FILES * LINES
"""Chunks of the shared collection: one per line (each line is over half of ``CHUNK_SIZE``)."""
CHUNK_SIZE = 40


def _lines(file: int, edition: str = "") -> str:
    return "".join(f"file{file:02d}{edition} line {i:05d} w{i % 7} w{i % 11}\n" for i in range(LINES))


def _location(folder: Path, name: str) -> str:
    server = os.environ.get("MILVUS_URI")
    if server:
        parts = urlsplit(server)
        return (
            f"{'milvus+https' if parts.scheme == 'https' else 'milvus'}://{parts.netloc}/{name}_{uuid.uuid4().hex[:8]}"
        )
    return f"milvus+lite:{folder / 'scale.db'}/{name}"


def _index(*argv: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["index", *argv, "--json", "--quiet"])
    assert status == 0, err.getvalue()
    summary: dict[str, Any] = json.loads(out.getvalue())
    return summary


class Built(NamedTuple):
    location: str
    docs: Path


@pytest.fixture(scope="module")
def fake_models() -> Iterator[None]:
    with fake_cli_embeddings():
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """16 files of 1,280 one-line chunks synced into one collection, with the record ``index`` keeps."""
    folder = tmp_path_factory.mktemp("scale")
    docs = folder / "docs"
    docs.mkdir()
    for file in range(FILES):
        (docs / f"f{file:02d}.txt").write_text(_lines(file), encoding="utf-8")
    location = _location(folder, "scale")
    store = parse_location(location).open()
    record: dict[str, Any] = {}
    spec = SyncSpec(paths=[docs], chunk_size=CHUNK_SIZE, chunk_overlap=0)
    report = sync_files(FusionIndex(HashingEmbeddings(), store=store), spec, record)
    assert report.chunks_embedded == ROWS
    store.write_info({SYNC_INFO_KEY: record})
    return Built(location, docs)


@pytest.fixture
def index(built: Built) -> FusionIndex:
    return FusionIndex(HashingEmbeddings(), store=parse_location(built.location).open())


def _per_source(documents: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in documents:
        source = Path(doc.metadata[keys.SOURCE]).name
        counts[source] = counts.get(source, 0) + 1
    return counts


class TestReadsPastTheWindow:
    def test_listing_returns_every_row(self, index: FusionIndex) -> None:
        documents = index.documents
        assert len(documents) == ROWS == len({doc.id for doc in documents})
        assert _per_source(documents) == {f"f{file:02d}.txt": LINES for file in range(FILES)}

    def test_select_with_a_filter_past_the_window_returns_every_match(self, built: Built, index: FusionIndex) -> None:
        wanted = [source_name(built.docs / f"f{file:02d}.txt") for file in range(14)]
        view = index.view()
        selected = view.select(Where(metadata={keys.SOURCE: wanted}))
        assert selected.size == 14 * LINES > WINDOW
        assert _per_source(view.documents(selected)) == {f"f{file:02d}.txt": LINES for file in range(14)}

    def test_reading_more_ids_than_the_window_by_id_returns_them_all(self, built: Built, index: FusionIndex) -> None:
        loaded = load_files([built.docs / f"f{file:02d}.txt" for file in range(14)])
        ids = [chunk.id or "" for chunk in split_documents(loaded.documents, chunk_size=CHUNK_SIZE, chunk_overlap=0)]
        assert len(ids) == 14 * LINES > WINDOW
        assert [doc.id for doc in index.get_by_ids(ids)] == ids
        assert int(np.count_nonzero(index.view().keys_of([*ids, "no such id"]) >= 0)) == len(ids)

    def test_a_listing_that_comes_back_short_is_an_error(
        self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        monkeypatch.setattr(MilvusStore, "count", lambda self, expression="": ROWS + 1)
        with pytest.raises(FusionError, match=f"expected {ROWS + 1:,} rows .* read {ROWS:,}"):
            index.documents  # noqa: B018

    def test_fetch_k_past_the_window_is_refused_not_cut(self, index: FusionIndex) -> None:
        retriever = index.as_retriever(k=3, fetch_k=WINDOW + 1)
        with pytest.raises(InvalidParameterError, match=r"at most 16,384 rows per search .* 16,385 candidates"):
            retriever.invoke("w3 w5")
        with pytest.raises(InvalidParameterError, match="at most 16,384"):
            index.similarity_search("w3", k=WINDOW + 1)
        assert len(index.as_retriever(k=3, fetch_k=WINDOW).invoke("w3 w5")) == 3

    def test_an_incremental_rerun_embeds_only_what_changed(
        self, built: Built, index: FusionIndex, fake_models: None
    ) -> None:
        chunking = ("--chunk-size", str(CHUNK_SIZE), "--chunk-overlap", "0")
        again = _index(str(built.docs), "--out", built.location, *chunking)
        assert again["files_unchanged"] == FILES and again["chunks_embedded"] == 0
        (built.docs / "f15.txt").write_text(_lines(15, edition="b"), encoding="utf-8")
        changed = _index(str(built.docs), "--out", built.location, *chunking)
        assert (changed["files_unchanged"], changed["files_updated"]) == (FILES - 1, 1)
        assert changed["chunks_embedded"] == LINES and changed["chunks"] == ROWS
        assert len(index) == ROWS
        assert sum("file15b" in doc.page_content for doc in index.documents) == LINES


DELETED = 20000


@pytest.fixture
def rows(tmp_path: Path) -> FusionIndex:
    """A fresh collection of 20,100 rows (tiny vectors, upserted directly: no embedding)."""
    store = parse_location(_location(tmp_path, "deletes")).open()
    count = DELETED + 100
    documents = [
        Document(id=f"r{i:06d}", page_content=f"row {i} w{i % 7}", metadata={keys.SOURCE: f"s{i % 3}"})
        for i in range(count)
    ]
    vectors = np.random.default_rng(0).standard_normal((count, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = FusionIndex(HashingEmbeddings(size=8), store=store)  # records the model before the rows go in
    store.upsert(documents, vectors, [doc.page_content for doc in documents])
    assert len(index) == count
    return index


class TestDeletesPastTheWindow:
    def test_deleting_20000_ids_by_id_deletes_them_all(self, rows: FusionIndex) -> None:
        ids = [f"r{i:06d}" for i in range(DELETED)]
        assert rows.store.delete(ids) == DELETED
        assert len(rows) == 100
        assert rows.store.delete(ids) == 0

    def test_deleting_everything_leaves_nothing(self, rows: FusionIndex) -> None:
        assert rows.delete() is True
        assert len(rows) == 0 and rows.documents == ()
