"""Saving and loading a FusionIndex: round trips, layout, verification, atomicity, no pickle."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

import langchain_fusion
from langchain_fusion import Analyzer, BM25Params, FusionIndex, __version__
from langchain_fusion._version import library_version
from langchain_fusion.errors import EmbeddingsMismatchError, FusionError, IndexFormatError
from langchain_fusion.stores.local.snapshot_folder import FORMAT_NAME, FORMAT_VERSION
from tests.helpers.corpora import hierarchical_animals

QUERIES = [
    "cat",
    "dog barking at the postman",
    "quantum particles and waves",
    "sunlight chemical energy",
    "cats and dogs as friends",
    "zebra",  # no known term: BM25 side is all zero
]
ALPHAS = [0.0, 0.5, 1.0]

EXTRA_DOCS = [
    Document(
        id="extra-1",
        page_content="A kitten chased the cat around the garden.",
        metadata={"source": "extra1.txt", "group": "odd"},
    ),
    Document(
        id="extra-2",
        page_content="Wave functions in quantum mechanics are complex.",
        metadata={"source": "extra2.txt", "group": "even"},
    ),
    Document(
        id="extra-3",
        page_content="The dog slept on the mat after barking.",
        metadata={"source": "extra3.txt", "group": "odd"},
    ),
]


def _results(index: FusionIndex, query: str, **options: Any) -> list[tuple[str | None, str, dict[str, Any]]]:
    docs = index.as_retriever(k=len(index) or 1, fetch_k=None, **options).invoke(query)
    return [(d.id, d.page_content, d.metadata) for d in docs]


def _assert_same_results(got: FusionIndex, expected: FusionIndex, *, exact: bool) -> None:
    for query in QUERIES:
        for alpha in ALPHAS:
            for method in ("weighted", "rrf"):
                a = _results(got, query, alpha=alpha, method=method)
                b = _results(expected, query, alpha=alpha, method=method)
                assert [r[0] for r in a] == [r[0] for r in b], (query, alpha, method)
                if exact:
                    assert a == b, (query, alpha, method)
                else:
                    for (_, text_a, meta_a), (_, text_b, meta_b) in zip(a, b, strict=True):
                        assert text_a == text_b
                        assert meta_a.keys() == meta_b.keys()
                        for key, value in meta_a.items():
                            if isinstance(value, float):
                                assert value == pytest.approx(meta_b[key], rel=1e-5, abs=1e-6), (query, key)
                            else:
                                assert value == meta_b[key], (query, key)


def _assert_aligned(index: FusionIndex) -> None:
    """Every live document has one row, in row order, on every side of one snapshot."""
    view = index.view()
    snapshot = view.snapshot  # type: ignore[attr-defined]
    snapshot.check_aligned()
    keys = view.keys_of([d.id for d in index.documents])  # type: ignore[misc]
    assert (keys >= 0).all() and (np.diff(keys) > 0).all()
    assert view.documents(keys) == list(index.documents)
    assert len(view) == snapshot.live_count == len(index)


@pytest.fixture
def ann_on_small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build ANN indexes for segments of any size (normally only from ANN_MIN_ROWS rows on)."""
    import langchain_fusion.stores.local.mutations as mutations_module

    monkeypatch.setattr(mutations_module, "ANN_MIN_ROWS", 1)


def _fail_writing_bm25(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make saves fail half way: after the vectors, while writing the BM25 arrays (a partial file is left)."""
    from langchain_fusion.stores.local import folder as fmt

    real_save_array = fmt.save_array

    def broken(path: Path, array: Any) -> None:
        if path.parent.name != "bm25":
            real_save_array(path, array)
            return
        path.write_bytes(b"\x93NUMPY partial")
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(fmt, "save_array", broken)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _rewrite_manifest(folder: Path, change: Any) -> None:
    """Change the manifest and its own checksum with it: a crafted manifest, for the checks behind that one."""
    from langchain_fusion.stores.local.manifest import CHECKSUM, manifest_checksum

    path = folder / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    if CHECKSUM in manifest:
        manifest[CHECKSUM] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def _edit_manifest(folder: Path, pattern: str, replacement: str) -> None:
    """Edit the manifest's text as a person in an editor would (its checksum left as it was)."""
    path = folder / "manifest.json"
    text, count = re.subn(pattern, replacement, path.read_text(encoding="utf-8"))
    assert count == 1
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def saved(animal_index: FusionIndex, tmp_path: Path) -> Path:
    return animal_index.save(tmp_path / "idx")


class TestRoundTrip:
    def test_documents_ids_and_metadata_are_identical(self, animal_index: FusionIndex, saved: Path, embeddings) -> None:
        loaded = FusionIndex.load(saved, embeddings)
        assert len(loaded) == len(animal_index) == 8
        assert [d.id for d in loaded.documents] == [d.id for d in animal_index.documents]
        assert list(loaded.documents) == list(animal_index.documents)
        assert loaded.view().keys_of([d.id for d in animal_index.documents]).tolist() == list(range(8))  # type: ignore[misc]
        _assert_aligned(loaded)
        assert loaded.embeddings_id == animal_index.embeddings_id
        assert loaded.dimension == 64

    def test_retrieval_results_and_scores_are_identical(
        self, animal_index: FusionIndex, saved: Path, embeddings
    ) -> None:
        loaded = FusionIndex.load(saved, embeddings)
        _assert_same_results(loaded, animal_index, exact=True)

    def test_known_answer_after_load(self, saved: Path, embeddings) -> None:
        loaded = FusionIndex.load(saved, embeddings)
        top = loaded.as_retriever(k=1, alpha=0.0).invoke("parrots imitate speech")
        assert top[0].page_content == "Parrots can learn to imitate human speech."
        assert top[0].metadata["bm25_rank"] == 1

    def test_str_path_and_returned_path(self, animal_index: FusionIndex, tmp_path: Path, embeddings) -> None:
        returned = animal_index.save(str(tmp_path / "as-str"))
        assert returned == (tmp_path / "as-str").absolute()
        assert len(FusionIndex.load(str(returned), embeddings)) == 8

    def test_rich_metadata_and_unicode_survive(self, tmp_path: Path, embeddings) -> None:
        docs = [
            Document(
                id="ü-1",
                page_content="Müller\u2019s café \u2013 naïve \u201cquotes\u201d \u2713\nsecond line\ttab",
                metadata={"source": "ü.md", "page": 3, "score": 0.25, "tags": ["a", "b"], "nested": {"x": None}},
            ),
            Document(id="plain", page_content="plain text", metadata={}),
        ]
        index = FusionIndex.from_documents(docs, embeddings)
        loaded = FusionIndex.load(index.save(tmp_path / "idx"), embeddings)
        assert list(loaded.documents) == docs
        assert loaded.documents[0].metadata["nested"] == {"x": None}

    def test_analyzer_and_bm25_params_are_restored(self, animal_docs, tmp_path: Path, embeddings) -> None:
        analyzer = Analyzer(stemmer=None, stopwords=None, min_token_length=2)
        params = BM25Params(k1=1.2, b=0.5, method="bm25+", delta=1.0)
        index = FusionIndex.from_documents(animal_docs, embeddings, analyzer=analyzer, bm25_params=params)
        loaded = FusionIndex.load(index.save(tmp_path / "idx"), embeddings)
        assert loaded.analyzer == analyzer
        assert loaded.bm25_params == params
        _assert_same_results(loaded, index, exact=True)

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_hnsw_index_round_trip(self, animal_docs, tmp_path: Path, embeddings) -> None:
        index = FusionIndex.from_documents(animal_docs, embeddings, vector_index="HNSW16")
        folder = index.save(tmp_path / "hnsw")
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["vector_index"]["factory"] == "HNSW16"
        assert (folder / "vectors.ann").is_file() and "vectors.ann" in manifest["files"]
        loaded = FusionIndex.load(folder, embeddings)
        assert loaded.store.vector_index == "HNSW16"  # type: ignore[attr-defined]
        assert all(s.ann is not None for s in loaded.store.snapshot.segments)  # type: ignore[attr-defined]
        _assert_same_results(loaded, index, exact=True)
        # And it is still a working, aligned index after a delete.
        assert loaded.remove([loaded.documents[0].id]) == 1
        fresh = FusionIndex.from_documents(loaded.documents, embeddings, vector_index="HNSW16")
        _assert_same_results(loaded, fresh, exact=False)

    @pytest.mark.usefixtures("ann_on_small_segments")
    def test_an_altered_graph_is_never_given_to_faiss(
        self, animal_docs, tmp_path: Path, embeddings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # FAISS does not check what it parses: the graph file is read only once every checksum is verified.
        from langchain_fusion.stores.local.vectors import AnnIndex

        folder = FusionIndex.from_documents(animal_docs, embeddings, vector_index="HNSW16").save(tmp_path / "hnsw")
        path = folder / "vectors.ann"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        parsed: list[Path] = []
        monkeypatch.setattr(AnnIndex, "load", classmethod(lambda cls, path, *args: parsed.append(path)))
        with pytest.raises(IndexFormatError, match=r"vectors\.ann does not match its checksum"):
            FusionIndex.load(folder, embeddings)
        assert parsed == []

    def test_small_approximate_index_saves_no_ann_file(self, animal_docs, tmp_path: Path, embeddings) -> None:
        index = FusionIndex.from_documents(animal_docs, embeddings, vector_index="HNSW16")
        folder = index.save(tmp_path / "hnsw")
        assert not (folder / "vectors.ann").exists()  # fewer than ANN_MIN_ROWS rows: scanned exactly
        loaded = FusionIndex.load(folder, embeddings)
        assert loaded.store.vector_index == "HNSW16"  # type: ignore[attr-defined]
        _assert_same_results(loaded, index, exact=True)

    def test_empty_index_round_trip(self, tmp_path: Path, embeddings) -> None:
        folder = FusionIndex(embeddings).save(tmp_path / "empty")
        assert not (folder / "vectors.npy").exists()
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["counts"] == {"documents": 0, "vectors": 0, "bm25_rows": 0, "vocabulary": 0}
        assert manifest["embeddings"]["dimension"] is None
        loaded = FusionIndex.load(folder, embeddings)
        assert len(loaded) == 0
        assert loaded.dimension is None
        assert loaded.as_retriever().invoke("cat") == []

    def test_empty_index_can_be_filled_after_load(self, animal_docs, tmp_path: Path, embeddings) -> None:
        loaded = FusionIndex.load(FusionIndex(embeddings).save(tmp_path / "empty"), embeddings)
        loaded.add_documents(animal_docs)
        _assert_same_results(loaded, FusionIndex.from_documents(animal_docs, embeddings), exact=False)

    def test_index_emptied_by_delete_round_trips(self, animal_index: FusionIndex, tmp_path: Path, embeddings) -> None:
        animal_index.delete([d.id for d in animal_index.documents])
        loaded = FusionIndex.load(animal_index.save(tmp_path / "idx"), embeddings)
        assert len(loaded) == 0
        assert loaded.as_retriever().invoke("cat") == []

    def test_add_and_delete_after_load_stay_aligned(self, saved: Path, embeddings) -> None:
        loaded = FusionIndex.load(saved, embeddings)
        assert loaded.add_documents(EXTRA_DOCS) == ["extra-1", "extra-2", "extra-3"]
        removed = [loaded.documents[0].id, loaded.documents[3].id, "extra-2"]
        assert loaded.remove(removed) == 3
        assert len(loaded) == 8
        _assert_aligned(loaded)
        fresh = FusionIndex.from_documents(loaded.documents, embeddings)
        _assert_same_results(loaded, fresh, exact=False)
        top = loaded.as_retriever(k=1, alpha=0.0).invoke("kitten garden")
        assert top[0].id == "extra-1"

    def test_mutated_index_saves_and_loads_again(self, saved: Path, tmp_path: Path, embeddings) -> None:
        loaded = FusionIndex.load(saved, embeddings)
        loaded.add_documents(EXTRA_DOCS)
        loaded.delete([loaded.documents[1].id])
        again = FusionIndex.load(loaded.save(tmp_path / "second"), embeddings)
        assert list(again.documents) == list(loaded.documents)
        _assert_same_results(again, loaded, exact=True)


class TestLayoutAndManifest:
    def test_folder_layout(self, saved: Path) -> None:
        assert sorted(p.name for p in saved.iterdir()) == ["bm25", "documents", "manifest.json", "vectors.npy"]
        assert sorted(p.name for p in (saved / "documents").iterdir()) == [
            "ids.json",
            "metadata.jsonl",
            "metadata_offsets.npy",
            "text_offsets.npy",
            "texts.txt",
        ]
        assert (saved / "bm25").is_dir()
        bm25_files = {p.relative_to(saved / "bm25").as_posix() for p in (saved / "bm25").rglob("*") if p.is_file()}
        assert bm25_files == {"indptr.npy", "rows.npy", "tf.npy", "lengths.npy", "vocabulary.json"}
        assert not [name for name in bm25_files if name.endswith((".pkl", ".pickle", ".joblib"))]

    def test_arrays(self, animal_index: FusionIndex, saved: Path) -> None:
        vectors = np.load(saved / "vectors.npy", allow_pickle=False)
        assert vectors.dtype == np.float32 and vectors.shape == (8, 64)
        snapshot = animal_index.store.snapshot  # type: ignore[attr-defined]
        np.testing.assert_array_equal(vectors, snapshot.vectors_of(np.arange(8)))
        vocabulary = json.loads((saved / "bm25" / "vocabulary.json").read_text(encoding="utf-8"))
        assert vocabulary == sorted(snapshot.vocabulary, key=snapshot.vocabulary.__getitem__)
        indptr, rows, tf, lengths = (
            np.load(saved / "bm25" / f"{name}.npy", allow_pickle=False) for name in ("indptr", "rows", "tf", "lengths")
        )
        assert indptr.size == len(vocabulary) + 1 and indptr[-1] == rows.size == tf.size
        assert lengths.tolist() == [len(animal_index.analyzer.tokenize(d.page_content)) for d in animal_index.documents]
        np.testing.assert_array_equal(np.bincount(rows, weights=tf, minlength=8), lengths)

    def test_documents_files(self, animal_index: FusionIndex, saved: Path) -> None:
        folder = saved / "documents"
        documents = animal_index.documents
        assert json.loads((folder / "ids.json").read_text(encoding="utf-8")) == [d.id for d in documents]
        texts = (folder / "texts.txt").read_bytes()
        offsets = np.load(folder / "text_offsets.npy", allow_pickle=False)
        assert offsets.dtype == np.int64 and offsets.tolist()[0] == 0 and offsets[-1] == len(texts)
        assert [texts[a:b].decode() for a, b in itertools.pairwise(offsets.tolist())] == [
            d.page_content for d in documents
        ]
        lines = (folder / "metadata.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == [d.metadata for d in documents]
        line_offsets = np.load(folder / "metadata_offsets.npy", allow_pickle=False)
        assert line_offsets.size == len(lines) + 1 and line_offsets[-1] == (folder / "metadata.jsonl").stat().st_size

    def test_manifest_contents(self, animal_index: FusionIndex, saved: Path) -> None:
        manifest = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["format"] == FORMAT_NAME == "langchain-fusion-index"
        assert manifest["format_version"] == FORMAT_VERSION == 3
        assert set(manifest) == {
            "format",
            "format_version",
            "library_version",
            "created_at",
            "embeddings",
            "vector_index",
            "bm25",
            "text_fields",
            "counts",
            "info",
            "files",
            "body_sha256",
        }
        assert list(manifest)[-1] == "body_sha256"
        assert manifest["info"] == {}
        assert manifest["library_version"] == library_version()
        assert datetime.fromisoformat(manifest["created_at"]).tzinfo is not None
        assert manifest["embeddings"] == {"id": animal_index.embeddings_id, "dimension": 64}
        assert animal_index.embeddings_id.endswith("HashingEmbeddings:hashing-v1")
        assert manifest["vector_index"] == {
            "factory": "Flat",
            "search_params": None,
            "metric": "inner_product",
            "normalized": True,
        }
        assert manifest["bm25"] == {
            "analyzer": animal_index.analyzer.model_dump(),
            "analyzer_class": "langchain_fusion.stores.analyzer.Analyzer",
            "params": animal_index.bm25_params.model_dump(),
        }
        assert manifest["counts"] == {
            "documents": 8,
            "vectors": 8,
            "bm25_rows": 8,
            "vocabulary": len(animal_index.store.snapshot.vocabulary),  # type: ignore[attr-defined]
        }
        assert manifest["counts"]["vocabulary"] > 20

    def test_manifest_checksums_cover_every_file(self, saved: Path) -> None:
        manifest = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))
        on_disk = {
            p.relative_to(saved).as_posix(): p for p in saved.rglob("*") if p.is_file() and p.name != "manifest.json"
        }
        assert set(manifest["files"]) == set(on_disk)
        assert {"documents/ids.json", "documents/texts.txt", "vectors.npy", "bm25/rows.npy"} <= set(on_disk)
        for name, entry in manifest["files"].items():
            data = on_disk[name].read_bytes()
            assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def test_saving_twice_gives_the_same_files(self, animal_index: FusionIndex, tmp_path: Path) -> None:
        a = _snapshot(animal_index.save(tmp_path / "a"))
        b = _snapshot(animal_index.save(tmp_path / "b"))
        assert a.keys() == b.keys()
        assert {k: v for k, v in a.items() if k != "manifest.json"} == {
            k: v for k, v in b.items() if k != "manifest.json"
        }

    def test_saved_folder_has_normal_permissions(self, animal_index: FusionIndex, tmp_path: Path) -> None:
        umask = os.umask(0)
        os.umask(umask)
        reference = tmp_path / "made-by-mkdir"
        reference.mkdir()
        folder = animal_index.save(tmp_path / "idx")
        assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode) == 0o777 & ~umask


class TestLoadErrors:
    def test_missing_folder(self, tmp_path: Path, embeddings) -> None:
        with pytest.raises(IndexFormatError, match=r"nowhere is not a folder"):
            FusionIndex.load(tmp_path / "nowhere", embeddings)

    def test_missing_manifest(self, saved: Path, embeddings) -> None:
        (saved / "manifest.json").unlink()
        with pytest.raises(IndexFormatError, match=r"is not a langchain-fusion index: manifest\.json is missing"):
            FusionIndex.load(saved, embeddings)

    def test_manifest_not_json(self, saved: Path, embeddings) -> None:
        (saved / "manifest.json").write_text('{"format": "langchain-fusion-index", ', encoding="utf-8")
        with pytest.raises(IndexFormatError, match=r"manifest\.json is not valid JSON"):
            FusionIndex.load(saved, embeddings)

    def test_a_number_too_long_to_read_in_the_manifest(self, saved: Path, embeddings) -> None:
        text = (saved / "manifest.json").read_text(encoding="utf-8")
        (saved / "manifest.json").write_text(re.sub(r'"k1": [0-9.]+', '"k1": ' + "9" * 5000, text), encoding="utf-8")
        with pytest.raises(IndexFormatError, match=r"manifest\.json is not valid JSON \(a number too long to read\)"):
            FusionIndex.load(saved, embeddings)

    def test_manifest_of_another_format(self, saved: Path, embeddings) -> None:
        _rewrite_manifest(saved, lambda m: m.update(format="something-else"))
        with pytest.raises(IndexFormatError, match=r"manifest\.json is not a langchain-fusion index manifest"):
            FusionIndex.load(saved, embeddings)

    @pytest.mark.parametrize("version", [1, 0, "2", None, True])
    def test_wrong_format_version(self, saved: Path, embeddings, version: Any) -> None:
        _rewrite_manifest(saved, lambda m: m.update(format_version=version))
        with pytest.raises(IndexFormatError, match=rf"uses index format version {re.escape(repr(version))}; .* reads"):
            FusionIndex.load(saved, embeddings)

    def test_newer_format_version_asks_for_an_upgrade(self, saved: Path, embeddings) -> None:
        _rewrite_manifest(saved, lambda m: m.update(format_version=4))
        with pytest.raises(IndexFormatError, match=r"uses index format version 4, newer .*upgrade langchain-fusion"):
            FusionIndex.load(saved, embeddings)

    @pytest.mark.parametrize(
        "name",
        [
            "documents/ids.json",
            "documents/texts.txt",
            "documents/text_offsets.npy",
            "documents/metadata.jsonl",
            "documents/metadata_offsets.npy",
            "vectors.npy",
            "bm25/vocabulary.json",
            "bm25/indptr.npy",
            "bm25/rows.npy",
            "bm25/tf.npy",
            "bm25/lengths.npy",
        ],
    )
    def test_missing_file(self, saved: Path, embeddings, name: str) -> None:
        (saved / name).unlink()
        with pytest.raises(IndexFormatError, match=rf"{re.escape(name)} is missing; the index is incomplete"):
            FusionIndex.load(saved, embeddings)

    def test_missing_file_not_listed_in_the_manifest(self, saved: Path, embeddings) -> None:
        (saved / "bm25" / "tf.npy").unlink()
        _rewrite_manifest(saved, lambda m: m["files"].pop("bm25/tf.npy"))
        with pytest.raises(IndexFormatError, match=r"does not list \['bm25/tf\.npy'\]"):
            FusionIndex.load(saved, embeddings)

    @pytest.mark.parametrize(
        "name", ["vectors.faiss", "bm25/weights/data.csc.index.npy", "../outside.npy", "notes.txt"]
    )
    def test_unexpected_file_in_the_manifest(self, saved: Path, embeddings, name: str) -> None:
        _rewrite_manifest(saved, lambda m: m["files"].update({name: {"sha256": "0" * 64, "bytes": 0}}))
        with pytest.raises(IndexFormatError, match=r"lists an unexpected file"):
            FusionIndex.load(saved, embeddings)

    def test_truncated_vectors_file(self, saved: Path, embeddings) -> None:
        path = saved / "vectors.npy"
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        expected = rf"vectors\.npy has {len(data) // 2} bytes, the manifest says {len(data)}: .*truncated"
        with pytest.raises(IndexFormatError, match=expected):
            FusionIndex.load(saved, embeddings)

    def test_altered_documents_file_same_size(self, saved: Path, embeddings) -> None:
        path = saved / "documents" / "texts.txt"
        data = bytearray(path.read_bytes())
        position = data.index(b"warm mat")
        data[position] = ord("W")
        path.write_bytes(bytes(data))
        assert path.stat().st_size == len(data)
        with pytest.raises(IndexFormatError, match=r"texts\.txt does not match its checksum: the file is altered"):
            FusionIndex.load(saved, embeddings)

    def test_an_altered_file_that_no_longer_parses_is_named_as_altered(self, saved: Path, embeddings) -> None:
        # The files are read while they are hashed: the reader fails first here, the checksum is still the cause given.
        path = saved / "bm25" / "vocabulary.json"
        data = bytearray(path.read_bytes())
        assert data[:1] == b"["
        data[0] = ord("{")
        path.write_bytes(bytes(data))
        with pytest.raises(IndexFormatError, match=r"vocabulary\.json does not match its checksum: the file is"):
            FusionIndex.load(saved, embeddings)

    def test_ctrl_c_during_a_load_stops_the_hashing_and_stays_ctrl_c(
        self, saved: Path, embeddings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import threading

        import langchain_fusion.stores.local.snapshot_folder as store_module

        path = saved / "bm25" / "vocabulary.json"  # altered too: the interrupt is still what the caller gets
        path.write_bytes(b"{" + path.read_bytes()[1:])

        def interrupted(*args: Any, **kwargs: Any) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(store_module, "read_snapshot", interrupted)
        with pytest.raises(KeyboardInterrupt):
            FusionIndex.load(saved, embeddings)
        for thread in threading.enumerate():
            if thread.name == "fusion-checksums":
                thread.join(timeout=10)
                assert not thread.is_alive()

    @pytest.mark.parametrize("name", ["tf.npy", "rows.npy", "lengths.npy"])
    def test_altered_bm25_postings(self, saved: Path, embeddings, name: str) -> None:
        path = saved / "bm25" / name
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(IndexFormatError, match=rf"{re.escape(name)} does not match its checksum"):
            FusionIndex.load(saved, embeddings)

    @pytest.mark.parametrize("count", ["documents", "vectors", "bm25_rows"])
    def test_count_mismatch(self, saved: Path, embeddings, count: str) -> None:
        _rewrite_manifest(saved, lambda m: m["counts"].update({count: 9}))
        with pytest.raises(IndexFormatError, match=rf": 8 {count} found but the manifest says 9; rebuild"):
            FusionIndex.load(saved, embeddings)

    def test_vocabulary_count_mismatch(self, saved: Path, embeddings) -> None:
        size = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))["counts"]["vocabulary"]
        _rewrite_manifest(saved, lambda m: m["counts"].update(vocabulary=size + 1))
        with pytest.raises(IndexFormatError, match=rf": {size} vocabulary found but the manifest says {size + 1}"):
            FusionIndex.load(saved, embeddings)

    def test_missing_vectors_file_removed_from_manifest_is_a_count_mismatch(self, saved: Path, embeddings) -> None:
        (saved / "vectors.npy").unlink()
        _rewrite_manifest(saved, lambda m: m["files"].pop("vectors.npy"))
        with pytest.raises(IndexFormatError, match=r": 0 vectors found but the manifest says 8"):
            FusionIndex.load(saved, embeddings)

    def test_manifest_without_file_list(self, saved: Path, embeddings) -> None:
        _rewrite_manifest(saved, lambda m: m.pop("files"))
        with pytest.raises(IndexFormatError, match=r"has no valid file list"):
            FusionIndex.load(saved, embeddings)

    def test_manifest_missing_a_section(self, saved: Path, embeddings) -> None:
        _rewrite_manifest(saved, lambda m: m.pop("counts"))
        with pytest.raises(IndexFormatError, match=r"manifest\.json is incomplete or invalid"):
            FusionIndex.load(saved, embeddings)

    def test_errors_are_fusion_errors(self) -> None:
        assert issubclass(IndexFormatError, FusionError)
        assert issubclass(EmbeddingsMismatchError, FusionError)


class TestManifestChecksum:
    """The manifest carries the sha256 of its other fields: an edited setting is refused, not used to re-rank."""

    @pytest.mark.parametrize(
        ("pattern", "replacement"),
        [
            (r'"k1": [0-9.]+', '"k1": 1.2'),
            (r'"b": [0-9.]+', '"b": 0.75'),
            (r'"min_token_length": 1', '"min_token_length": 3'),
            (r'"stopwords": "english"', '"stopwords": null'),
        ],
    )
    def test_an_edited_setting_is_refused(self, saved: Path, embeddings, pattern: str, replacement: str) -> None:
        _edit_manifest(saved, pattern, replacement)
        with pytest.raises(IndexFormatError, match=r"manifest\.json was edited after it was saved") as caught:
            FusionIndex.load(saved, embeddings)
        assert "\n" not in str(caught.value) and "rebuild" in str(caught.value)

    def test_an_unedited_save_loads(self, animal_index: FusionIndex, saved: Path, embeddings) -> None:
        manifest = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))
        assert re.fullmatch(r"[0-9a-f]{64}", manifest["body_sha256"])
        _assert_same_results(FusionIndex.load(saved, embeddings), animal_index, exact=True)

    def test_reformatting_the_manifest_is_not_an_edit(self, saved: Path, embeddings) -> None:
        path = saved / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(dict(reversed(manifest.items())), indent=7), encoding="utf-8")
        assert len(FusionIndex.load(saved, embeddings)) == 8

    @pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
    def test_a_manifest_saved_before_checksums_loads(
        self, animal_index: FusionIndex, saved: Path, embeddings, version: str
    ) -> None:
        path = saved / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        del manifest["body_sha256"]
        manifest["library_version"] = version  # the releases before every save carried one
        path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _assert_same_results(FusionIndex.load(saved, embeddings), animal_index, exact=True)

    @pytest.mark.parametrize("version", [None, "0.3.0", "0.4.0", "1.0.0rc1", "not a version", 3])
    def test_a_deleted_checksum_is_refused(self, saved: Path, embeddings, version: Any) -> None:
        # Deleting the line made a manifest read as an older save: an edited k1 loaded silently.
        path = saved / "manifest.json"
        text = path.read_text(encoding="utf-8")
        manifest = json.loads(text)
        assert manifest["library_version"] == __version__
        del manifest["body_sha256"]
        manifest["bm25"]["params"]["k1"] = 0.3
        if version is None:
            del manifest["library_version"]
        else:
            manifest["library_version"] = version
        path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        with pytest.raises(
            IndexFormatError,
            match=r"manifest\.json has no body_sha256, which every save since "
            r"langchain-fusion 0\.3\.0 carries: .*restore the saved manifest, or rebuild",
        ) as e:
            FusionIndex.load(saved, embeddings)
        assert "\n" not in str(e.value)

    @pytest.mark.parametrize("value", [None, 5, "0" * 64])
    def test_a_damaged_checksum_is_refused(self, saved: Path, embeddings, value: Any) -> None:
        path = saved / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**manifest, "body_sha256": value}), encoding="utf-8")
        with pytest.raises(IndexFormatError, match=r"was edited after it was saved"):
            FusionIndex.load(saved, embeddings)

    def test_an_edited_hierarchical_manifest_is_refused(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        _edit_manifest(folder, r'"summaries": 2', '"summaries": 3')
        with pytest.raises(IndexFormatError, match=r"hier/manifest\.json was edited after it was saved"):
            HierarchicalIndex.load(folder, embeddings)
        _edit_manifest(folder, r',\s*"body_sha256": "[0-9a-f]+"', "")
        with pytest.raises(IndexFormatError, match=r"hier/manifest\.json has no body_sha256, which every save since"):
            HierarchicalIndex.load(folder, embeddings)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda m: m["bm25"]["analyzer"].update(min_token_length=10**100), r"min_token_length"),
            (lambda m: m["bm25"]["analyzer"].update(min_token_length=100_000), r"min_token_length"),
            (lambda m: m["embeddings"].update(dimension=10**30), r"dimension"),
            (lambda m: m["counts"].update(documents=2**64), r"counts"),
            (lambda m: m["counts"].update(vectors=-1), r"counts"),
        ],
    )
    def test_whole_numbers_are_bounded(self, saved: Path, embeddings, change: Any, message: str) -> None:
        """Also in a manifest without a checksum (saved before them, or crafted): a bound, not silence."""

        def without_checksum(manifest: dict[str, Any]) -> None:
            change(manifest)
            manifest.pop("body_sha256", None)
            manifest["library_version"] = "0.2.0"  # as saved before checksums

        _rewrite_manifest(saved, without_checksum)
        with pytest.raises(IndexFormatError, match=rf"incomplete or invalid \(.*{message}") as caught:
            FusionIndex.load(saved, embeddings)
        assert len(str(caught.value)) < 1000


class TestEmbeddingsCheck:
    def test_different_model_id(self, saved: Path, embeddings) -> None:
        other = type(embeddings)(model="other")
        with pytest.raises(
            EmbeddingsMismatchError,
            match=r"was built with embeddings '[\w.]*HashingEmbeddings:hashing-v1' "
            r"but was given '[\w.]*HashingEmbeddings:other'",
        ):
            FusionIndex.load(saved, other)

    def test_same_id_different_dimension(self, saved: Path, embeddings) -> None:
        smaller = type(embeddings)(size=32)
        with pytest.raises(
            EmbeddingsMismatchError,
            match=r"holds 64-dimensional vectors but the given embeddings make 32-dimensional ones",
        ):
            FusionIndex.load(saved, smaller)

    def test_embeddings_not_recreatable_by_name(self, saved: Path) -> None:
        with pytest.raises(FusionError, match=r"cannot be recreated by name: pass the same embeddings object"):
            FusionIndex.load(saved)

    def test_an_equal_but_new_embeddings_object_is_accepted(self, saved: Path, embeddings) -> None:
        loaded = FusionIndex.load(saved, type(embeddings)())
        assert len(loaded) == 8


class TestAtomicSave:
    def test_failed_save_over_existing_index_keeps_the_old_one(
        self, animal_index: FusionIndex, tmp_path: Path, embeddings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        parent = tmp_path / "parent"
        folder = animal_index.save(parent / "idx")
        before = _snapshot(folder)

        changed = FusionIndex.load(folder, embeddings)
        changed.add_documents(EXTRA_DOCS)
        _fail_writing_bm25(monkeypatch)
        with pytest.raises(RuntimeError, match="disk full"):
            changed.save(folder)
        monkeypatch.undo()

        assert sorted(p.name for p in parent.iterdir()) == ["idx"]  # nothing beside the index, not even a lock
        assert _snapshot(folder) == before
        old = FusionIndex.load(folder, embeddings)
        assert list(old.documents) == list(animal_index.documents)
        _assert_same_results(old, animal_index, exact=True)

    def test_failed_first_save_leaves_nothing(
        self, animal_index: FusionIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        parent = tmp_path / "parent"
        parent.mkdir()
        _fail_writing_bm25(monkeypatch)
        with pytest.raises(RuntimeError, match="disk full"):
            animal_index.save(parent / "idx")
        assert [p.name for p in parent.iterdir()] == []  # no index, no staging folder, no lock

    def test_unserialisable_metadata_is_refused_when_added(self, tmp_path: Path, embeddings) -> None:
        index = FusionIndex.from_documents([Document(id="d0", page_content="dog")], embeddings)
        doc = Document(id="d1", page_content="cat", metadata={"when": datetime(2026, 1, 1)})
        with pytest.raises(FusionError, match=r"document 'd1' has metadata that is not JSON-serialisable.*isoformat"):
            index.add_documents([doc])
        assert [d.id for d in index.documents] == ["d0"]  # nothing half added
        index.save(tmp_path / "idx")

    def test_numpy_metadata_values_are_kept_as_numbers(self, embeddings) -> None:
        doc = Document(id="d1", page_content="cat", metadata={"page": np.int64(3), "score": np.float32(0.5)})
        stored = FusionIndex.from_documents([doc], embeddings).documents[0].metadata
        assert stored == {"page": 3, "score": 0.5} and type(stored["page"]) is int

    def test_successful_save_over_an_index_replaces_it(
        self, animal_index: FusionIndex, tmp_path: Path, embeddings
    ) -> None:
        folder = animal_index.save(tmp_path / "idx")
        smaller = FusionIndex.from_documents(animal_index.documents[:3], embeddings)
        assert smaller.save(folder) == folder
        assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
        assert [d.id for d in FusionIndex.load(folder, embeddings).documents] == [
            d.id for d in animal_index.documents[:3]
        ]

    def test_saving_into_an_empty_existing_folder(self, animal_index: FusionIndex, tmp_path: Path, embeddings) -> None:
        folder = tmp_path / "idx"
        folder.mkdir()
        animal_index.save(folder)
        assert len(FusionIndex.load(folder, embeddings)) == 8
        assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]

    def test_refuses_to_overwrite_a_folder_that_is_not_an_index(
        self, animal_index: FusionIndex, tmp_path: Path
    ) -> None:
        folder = tmp_path / "my-notes"
        folder.mkdir()
        (folder / "thesis.txt").write_text("years of work", encoding="utf-8")
        (folder / "sub").mkdir()
        (folder / "sub" / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
        before = _snapshot(folder)
        with pytest.raises(FusionError, match=r"exists and is not a langchain-fusion index; refusing to overwrite"):
            animal_index.save(folder)
        assert _snapshot(folder) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["my-notes"]

    def test_refuses_to_overwrite_a_file(self, animal_index: FusionIndex, tmp_path: Path) -> None:
        path = tmp_path / "idx"
        path.write_text("not a folder", encoding="utf-8")
        with pytest.raises(FusionError, match=r"refusing to overwrite"):
            animal_index.save(path)
        assert path.read_text(encoding="utf-8") == "not a folder"


class TestNoPickle:
    SOURCE = Path(langchain_fusion.__file__).resolve().parent
    FORBIDDEN = (
        re.compile(r"^\s*(import|from)\s+(c?pickle|dill|cloudpickle|joblib|shelve|marshal)\b", re.MULTILINE),
        re.compile(r"\bpickle\.(loads?|dumps?|Unpickler|Pickler)\b"),
        re.compile(r"\bjoblib\b"),
        re.compile(r"allow_pickle\s*=\s*True"),
        re.compile(r"allow_dangerous_deserialization"),
        re.compile(r"torch\.load\("),
    )

    def test_source_has_no_pickle(self) -> None:
        files = sorted(self.SOURCE.rglob("*.py"))
        assert len(files) >= 10
        offenders = [
            f"{path.name}: {pattern.pattern}"
            for path in files
            for pattern in self.FORBIDDEN
            if pattern.search(path.read_text(encoding="utf-8"))
        ]
        assert offenders == []

    def test_scanner_would_catch_pickle(self) -> None:
        sample = "import pickle\nx = pickle.loads(b'')\nnp.load(p, allow_pickle=True)\n"
        assert sum(bool(p.search(sample)) for p in self.FORBIDDEN) == 3

    def test_load_never_unpickles(self, saved: Path, embeddings, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("pickle used while loading an index")

        real_np_load = np.load

        def checked_np_load(*args: Any, **kwargs: Any) -> Any:
            assert kwargs.get("allow_pickle", False) is False
            return real_np_load(*args, **kwargs)

        monkeypatch.setattr(pickle, "load", refuse)
        monkeypatch.setattr(pickle, "loads", refuse)
        monkeypatch.setattr(pickle, "Unpickler", refuse)
        monkeypatch.setattr(np, "load", checked_np_load)
        loaded = FusionIndex.load(saved, embeddings)
        assert len(loaded) == 8

    def test_saved_files_are_not_pickles(self, saved: Path) -> None:
        for path in saved.rglob("*"):
            if path.is_file():
                head = path.read_bytes()[:2]
                assert head[:1] != b"\x80", path  # pickle protocol 2+ opcode PROTO


# --- text fields (contextual enrichment) and hierarchical indexes ---------------------------------

ENRICHED_DOCS = [
    Document(
        id="e1",
        page_content="The cabinets stood on raised racks.",
        metadata={
            "source": "r.pdf",
            "page": 2,
            "chunk_index": 0,
            "start_index": 0,
            "context": "From the zephyr flood.",
        },
    ),
    Document(
        id="e2",
        page_content="Fans need new filters every quarter.",
        metadata={"source": "h.md", "chunk_index": 0, "start_index": 0},
    ),
]


class TestTextFields:
    def test_recorded_in_the_manifest_and_restored(self, tmp_path: Path, embeddings) -> None:
        index = FusionIndex.from_documents(ENRICHED_DOCS, embeddings, bm25_fields=("content",))
        folder = index.save(tmp_path / "idx")
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["text_fields"] == {"embed": ["context", "content"], "bm25": ["content"]}
        loaded = FusionIndex.load(folder, embeddings)
        assert (loaded.embed_fields, loaded.bm25_fields) == (("context", "content"), ("content",))
        assert list(loaded.documents) == ENRICHED_DOCS  # the context is stored apart from the text
        for query in ["zephyr flood", "racks", "filters"]:
            for alpha in ALPHAS:
                a = loaded.as_retriever(k=2, alpha=alpha, fetch_k=None).invoke(query)
                b = index.as_retriever(k=2, alpha=alpha, fetch_k=None).invoke(query)
                assert a == b

    def test_honoured_by_add_documents_after_load(self, tmp_path: Path, embeddings) -> None:
        index = FusionIndex(embeddings, embed_fields=("content",), bm25_fields=("context",))
        index.add_documents(ENRICHED_DOCS[1:])
        loaded = FusionIndex.load(index.save(tmp_path / "idx"), embeddings)
        loaded.add_documents(ENRICHED_DOCS[:1])
        fresh = FusionIndex.from_documents(
            [ENRICHED_DOCS[1], ENRICHED_DOCS[0]], embeddings, embed_fields=("content",), bm25_fields=("context",)
        )
        ours, theirs = loaded.store.snapshot, fresh.store.snapshot  # type: ignore[attr-defined]
        assert [d.id for d in loaded.documents] == [d.id for d in fresh.documents] == ["e2", "e1"]
        assert np.array_equal(ours.bm25_scores_all("zephyr"), theirs.bm25_scores_all("zephyr"))
        assert ours.bm25_scores_all("zephyr")[1] > 0
        assert ours.bm25_scores_all("racks").tolist() == [0.0, 0.0]  # BM25 sees only the context
        rows = np.arange(2)
        np.testing.assert_allclose(ours.vectors_of(rows), theirs.vectors_of(rows), atol=1e-6)

    def test_a_manifest_without_text_fields_loads_with_the_defaults(self, saved: Path, embeddings) -> None:
        _rewrite_manifest(saved, lambda m: m.pop("text_fields"))
        loaded = FusionIndex.load(saved, embeddings)
        assert (loaded.embed_fields, loaded.bm25_fields) == (("context", "content"), ("context", "content"))

    @pytest.mark.parametrize("fields", [{"embed": ["title"]}, {"bm25": []}, ["content"], {"embed": "content"}])
    def test_invalid_text_fields(self, saved: Path, embeddings, fields: Any) -> None:
        _rewrite_manifest(saved, lambda m: m.update(text_fields=fields))
        with pytest.raises(IndexFormatError, match=r"manifest\.json is incomplete or invalid"):
            FusionIndex.load(saved, embeddings)


def _hierarchical_results(index: Any, query: str) -> list[tuple[str | None, dict[str, Any]]]:
    return [(d.id, d.metadata) for d in index.as_retriever(k=8, k_summaries=2).invoke(query)]


class TestHierarchicalPersistence:
    def test_round_trip(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        original = hierarchical_animals(embeddings)
        folder = original.save(tmp_path / "hier")
        assert folder == (tmp_path / "hier").absolute()
        assert sorted(p.name for p in folder.iterdir()) == ["chunks", "manifest.json", "summaries"]
        for part in ("chunks", "summaries"):
            assert sorted(p.name for p in (folder / part).iterdir()) == [
                "bm25",
                "documents",
                "manifest.json",
                "vectors.npy",
            ]
        loaded = HierarchicalIndex.load(folder, embeddings)
        assert list(loaded.chunks.documents) == list(original.chunks.documents)
        assert list(loaded.summaries.documents) == list(original.summaries.documents)
        assert loaded.summaries.embeddings is loaded.chunks.embeddings
        for summary in loaded.summaries.documents:  # every summary still links to chunks of the index
            linked = summary.metadata["summary_chunk_ids"]
            assert linked and all(chunk_id in loaded.chunks for chunk_id in linked)
        for query in ["cat", "parrots speech", "market waves"]:
            assert _hierarchical_results(loaded, query) == _hierarchical_results(original, query)

    def test_manifest(self, tmp_path: Path, embeddings) -> None:
        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["format"] == "langchain-fusion-hierarchical-index"
        assert manifest["format_version"] == 2
        assert manifest["library_version"] == library_version()
        assert manifest["counts"] == {"chunks": 8, "summaries": 2}
        assert manifest["embeddings"]["dimension"] == 64
        for part in ("chunks", "summaries"):
            data = (folder / part / "manifest.json").read_bytes()
            assert manifest["parts"][part] == {"folder": part, "manifest_sha256": hashlib.sha256(data).hexdigest()}

    @pytest.mark.parametrize("part", ["chunks", "summaries"])
    def test_a_part_is_never_saved_alone(self, tmp_path: Path, embeddings, part: str) -> None:
        # Saved alone (e.g. calibrated through --index H/chunks) a part would break the folder's checksums.
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        before = (folder / part / "manifest.json").read_bytes()
        index = FusionIndex.load(folder / part, embeddings)
        with pytest.raises(FusionError, match=r"is part of the index with page summaries at .*hier: saved alone"):
            index.save(folder / part)
        assert (folder / part / "manifest.json").read_bytes() == before
        HierarchicalIndex.load(folder, embeddings)
        index.save(tmp_path / "elsewhere")  # a copy elsewhere is fine

    def test_loads_as_a_hierarchical_index_only(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex
        from langchain_fusion.index.hierarchical import is_hierarchical

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        plain = FusionIndex.from_documents(EXTRA_DOCS, embeddings).save(tmp_path / "plain")
        assert (is_hierarchical(folder), is_hierarchical(plain)) == (True, False)
        with pytest.raises(IndexFormatError):
            FusionIndex.load(folder, embeddings)
        assert len(FusionIndex.load(folder / "chunks", embeddings)) == 8  # its chunk index is a plain index
        with pytest.raises(IndexFormatError, match=r"is a plain index without page summaries"):
            HierarchicalIndex.load(plain, embeddings)
        with pytest.raises(IndexFormatError, match=r"is not a folder"):
            HierarchicalIndex.load(tmp_path / "nowhere", embeddings)
        with pytest.raises(IndexFormatError, match=r"manifest\.json is missing"):
            is_hierarchical(tmp_path)

    def test_loading_a_hierarchical_folder_as_a_plain_index_names_the_right_loader(
        self, tmp_path: Path, embeddings
    ) -> None:
        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        with pytest.raises(IndexFormatError, match=r"is a hierarchical index .*HierarchicalIndex\.load"):
            FusionIndex.load(folder, embeddings)

    def test_altered_part_manifest(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        _rewrite_manifest(folder / "summaries", lambda m: m["counts"].update(documents=3))
        with pytest.raises(IndexFormatError, match=r"summaries/manifest\.json does not match its checksum"):
            HierarchicalIndex.load(folder, embeddings)

    def test_altered_part_file(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        path = folder / "chunks" / "documents" / "texts.txt"
        path.write_bytes(path.read_bytes().replace(b"warm mat", b"Warm mat"))
        with pytest.raises(IndexFormatError, match=r"chunks/documents/texts\.txt does not match its checksum"):
            HierarchicalIndex.load(folder, embeddings)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda m: m.update(format_version=1), r"hierarchical index format version 1; .* reads version 2"),
            (lambda m: m.update(format_version=3), r"hierarchical index format version 3, newer .*upgrade"),
            (lambda m: m.pop("parts"), r"incomplete or invalid"),
            (lambda m: m["counts"].update(summaries=5), r": 2 summaries found but the manifest says 5"),
            (lambda m: m["parts"]["chunks"].update(folder="../elsewhere"), r"unexpected folder"),
        ],
    )
    def test_bad_manifest(self, tmp_path: Path, embeddings, change: Any, message: str) -> None:
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        _rewrite_manifest(folder, change)
        with pytest.raises(IndexFormatError, match=message):
            HierarchicalIndex.load(folder, embeddings)

    def test_missing_part(self, tmp_path: Path, embeddings) -> None:
        import shutil

        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        shutil.rmtree(folder / "summaries")
        with pytest.raises(IndexFormatError, match=r"summaries/manifest\.json is missing"):
            HierarchicalIndex.load(folder, embeddings)

    def test_other_embeddings_are_refused(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        with pytest.raises(EmbeddingsMismatchError):
            HierarchicalIndex.load(folder, type(embeddings)(model="other"))

    def test_save_is_atomic(self, tmp_path: Path, embeddings, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_fusion import HierarchicalIndex

        parent = tmp_path / "parent"
        original = hierarchical_animals(embeddings)
        folder = original.save(parent / "hier")
        before = _snapshot(folder)

        _fail_writing_bm25(monkeypatch)
        with pytest.raises(RuntimeError, match="disk full"):
            original.save(folder)
        with pytest.raises(RuntimeError, match="disk full"):
            original.save(parent / "new")
        monkeypatch.undo()
        assert sorted(p.name for p in parent.iterdir()) == ["hier"]
        assert _snapshot(folder) == before
        assert len(HierarchicalIndex.load(folder, embeddings).summaries) == 2

    def test_replaces_an_index_but_nothing_else(self, tmp_path: Path, embeddings) -> None:
        from langchain_fusion import HierarchicalIndex

        plain = FusionIndex.from_documents(EXTRA_DOCS, embeddings).save(tmp_path / "idx")
        hierarchical_animals(embeddings).save(plain)
        assert len(HierarchicalIndex.load(plain, embeddings).chunks) == 8
        FusionIndex.from_documents(EXTRA_DOCS, embeddings).save(plain)  # and back
        assert len(FusionIndex.load(plain, embeddings)) == 3
        notes = tmp_path / "notes"
        notes.mkdir()
        (notes / "keep.txt").write_text("precious", encoding="utf-8")
        with pytest.raises(FusionError, match="refusing to overwrite"):
            hierarchical_animals(embeddings).save(notes)
        assert [p.name for p in notes.iterdir()] == ["keep.txt"]


class TestSavedInfo:
    def test_info_round_trips_through_the_manifest(self, animal_index: FusionIndex, tmp_path: Path, embeddings) -> None:
        folder = animal_index.save(tmp_path / "idx", info={"files": {"by_path": {"a.txt": {"sha256": "x"}}}})
        assert FusionIndex.load(folder, embeddings).saved_info == {"files": {"by_path": {"a.txt": {"sha256": "x"}}}}
        assert FusionIndex.load(animal_index.save(tmp_path / "plain"), embeddings).saved_info == {}


def _as_format_2(folder: Path) -> None:
    """Rewrite a saved folder the way format 2 kept it: one documents.jsonl of whole records."""
    from langchain_fusion.stores.local.checksums import file_entries
    from langchain_fusion.stores.local.store import LocalStore

    store, _ = LocalStore.load(folder)
    index_docs = list(store.view().iter_documents())
    records = [{"id": d.id, "page_content": d.page_content, "metadata": d.metadata} for d in index_docs]
    (folder / "documents.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    for path in (folder / "documents").iterdir():
        path.unlink()
    (folder / "documents").rmdir()

    def update(manifest: dict[str, Any]) -> None:
        manifest["format_version"] = 2
        manifest["files"] = file_entries(folder)

    _rewrite_manifest(folder, update)


class TestFormat2:
    """Folders saved by the previous format (one documents.jsonl) still load; the next save writes format 3."""

    def test_loads_and_answers_the_same(self, animal_index: FusionIndex, saved: Path, embeddings) -> None:
        _as_format_2(saved)
        assert (saved / "documents.jsonl").is_file() and not (saved / "documents").exists()
        loaded = FusionIndex.load(saved, embeddings)
        assert list(loaded.documents) == list(animal_index.documents)
        _assert_same_results(loaded, animal_index, exact=True)

    def test_saving_upgrades_it(self, animal_index: FusionIndex, saved: Path, embeddings, tmp_path: Path) -> None:
        _as_format_2(saved)
        again = FusionIndex.load(saved, embeddings).save(saved)
        manifest = json.loads((again / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["format_version"] == 3 and not (again / "documents.jsonl").exists()
        _assert_same_results(FusionIndex.load(again, embeddings), animal_index, exact=True)

    def test_a_format_2_folder_lists_only_its_own_files(self, saved: Path, embeddings) -> None:
        _as_format_2(saved)
        _rewrite_manifest(saved, lambda m: m["files"].update({"documents/ids.json": {"sha256": "0", "bytes": 0}}))
        with pytest.raises(IndexFormatError, match=r"lists an unexpected file 'documents/ids\.json'"):
            FusionIndex.load(saved, embeddings)


class TestAnalyzerOfOlderIndexes:
    """An index saved before the analyzer's script, identifier and normalisation options keeps its analysis."""

    def test_loads_with_the_analysis_it_was_built_with(self, tmp_path: Path, embeddings) -> None:
        texts = ("getLogger writes 東京は日本の首都", "get logger", "the KV-3300 unit")
        docs = [Document(page_content=t) for t in texts]
        built = FusionIndex.from_documents(docs, embeddings, analyzer=Analyzer(**Analyzer.LEGACY))
        folder = built.save(tmp_path / "old")

        def as_saved_before(manifest: dict[str, Any]) -> None:
            for option in Analyzer.LEGACY:
                del manifest["bm25"]["analyzer"][option]

        _rewrite_manifest(folder, as_saved_before)
        loaded = FusionIndex.load(folder, embeddings)
        assert loaded.analyzer.is_legacy and loaded.analyzer == built.analyzer
        _assert_same_results(loaded, built, exact=True)
        assert [d.page_content for d in loaded.as_retriever(alpha=0.0, k=3).invoke("logger")] == ["get logger"]

    def test_a_new_index_records_every_option(self, animal_index: FusionIndex, saved: Path) -> None:
        manifest = json.loads((saved / "manifest.json").read_text(encoding="utf-8"))
        assert {"scripts": "bigrams", "identifiers": True, "normalization": "NFKC"}.items() <= manifest["bm25"][
            "analyzer"
        ].items()
