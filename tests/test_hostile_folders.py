"""Hostile saved folders: every damaged or crafted index folder is refused at load with one line.

What a fault-injection pass tried, and what a careful reviewer would try next: manifests nested
deeply, fields of the wrong type, file names that leave the folder, files that are consistent
with their checksums (the manifest's own checksum recomputed too) and with each other but not
with the documents, versions from the future.
A folder is refused by ``load`` (an :class:`IndexFormatError`), never at the first query.
(Missing, truncated and altered files are covered in test_persistence.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from langchain_fusion import FusionIndex, HierarchicalIndex, IndexFormatError
from langchain_fusion.index.opening import open_index
from langchain_fusion.stores.local.manifest import CHECKSUM, manifest_checksum
from tests.helpers.embeddings import HashingEmbeddings

TEXTS = [f"document {i} about {word} and {other}" for i, (word, other) in enumerate(
    [("cats", "mats"), ("dogs", "logs"), ("birds", "words"), ("fish", "dishes"), ("frogs", "bogs")] * 4
)]  # fmt: skip


@pytest.fixture
def embeddings() -> HashingEmbeddings:
    return HashingEmbeddings()


@pytest.fixture
def saved(tmp_path: Path, embeddings: HashingEmbeddings) -> Path:
    return FusionIndex.from_texts(TEXTS, embeddings, ids=[f"d{i}" for i in range(len(TEXTS))]).save(tmp_path / "idx")


def manifest_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def rewrite_manifest(folder: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """Change the manifest and its own checksum with it (a crafted manifest: the checks behind that one)."""
    manifest = manifest_of(folder)
    change(manifest)
    manifest[CHECKSUM] = manifest_checksum(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def replace_file(folder: Path, name: str, data: bytes) -> None:
    """Replace a file and record its new size and checksum: an edit the checksums cannot catch."""
    (folder / name).write_bytes(data)

    def update(manifest: dict[str, Any]) -> None:
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    rewrite_manifest(folder, update)


def save_npy(array: np.ndarray[Any, Any]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def refused(folder: Path, embeddings: HashingEmbeddings, match: str) -> IndexFormatError:
    with pytest.raises(IndexFormatError, match=match) as caught:
        FusionIndex.load(folder, embeddings)
    assert "\n" not in str(caught.value)
    return caught.value


class TestManifestShape:
    @pytest.mark.parametrize("depth", [1_000, 100_000])
    def test_deeply_nested_manifest(self, saved: Path, embeddings: HashingEmbeddings, depth: int) -> None:
        (saved / "manifest.json").write_text("[" * depth + "]" * depth, encoding="utf-8")
        refused(saved, embeddings, r"not (valid JSON|a langchain-fusion index manifest)")

    def test_deeply_nested_vocabulary(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        replace_file(saved, "bm25/vocabulary.json", b"[" * 100_000 + b"]" * 100_000)
        refused(saved, embeddings, r"vocabulary\.json is not valid JSON")

    def test_huge_manifest(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        (saved / "manifest.json").write_text(" " * 20_000_000 + "{}", encoding="utf-8")
        refused(saved, embeddings, "larger than any manifest")

    @pytest.mark.parametrize("value", [[], "text", 5, None])
    def test_manifest_that_is_not_an_object(self, saved: Path, embeddings: HashingEmbeddings, value: Any) -> None:
        (saved / "manifest.json").write_text(json.dumps(value), encoding="utf-8")
        refused(saved, embeddings, "not a langchain-fusion index manifest")

    def test_manifest_that_is_not_utf8(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        (saved / "manifest.json").write_bytes(b"\xff\xfe{}")
        refused(saved, embeddings, "not valid JSON")


class TestFieldTypes:
    @pytest.mark.parametrize(
        "change",
        [
            lambda m: m["embeddings"].update(dimension=64.0),
            lambda m: m["embeddings"].update(dimension="64"),
            lambda m: m["embeddings"].update(dimension=True),
            lambda m: m["embeddings"].update(dimension=-1),
            lambda m: m["embeddings"].update(id=5),
            lambda m: m["vector_index"].update(factory=5),
            lambda m: m["vector_index"].update(factory="NoSuchIndex,Flat"),
            lambda m: m["vector_index"].update(search_params="efSearch=64"),
            lambda m: m["bm25"]["params"].update(k1="0.9"),
            lambda m: m["bm25"]["params"].update(b=True),
            lambda m: m["bm25"]["params"].update(method="magic"),
            lambda m: m["bm25"]["analyzer"].update(stemmer=5),
            lambda m: m["bm25"]["analyzer"].update(min_token_length="1"),
            lambda m: m["bm25"].update(analyzer=[]),
            lambda m: m.update(text_fields={"embed": ["nope"]}),
            lambda m: m.update(text_fields=[]),
            lambda m: m["counts"].update(documents="20"),
            lambda m: m["counts"].update(documents=20.0),
            lambda m: m.update(counts=None),
            lambda m: m.update(files=[]),
            lambda m: m["files"]["vectors.npy"].update(bytes="640"),
        ],
    )
    def test_wrong_types_are_refused_at_load(self, saved: Path, embeddings: HashingEmbeddings, change: Any) -> None:
        rewrite_manifest(saved, change)
        with pytest.raises(IndexFormatError) as caught:
            index = FusionIndex.load(saved, embeddings)
            index.as_retriever().invoke("cats")  # never reached: refused at load, not at the first query
        assert "\n" not in str(caught.value)


class TestFileNames:
    @pytest.mark.parametrize(
        "name",
        ["../outside.npy", "bm25/../../outside.npy", "/etc/passwd", "bm25/../vectors.npy", "", ".", "bm25"],
    )
    def test_names_outside_the_format_are_refused(self, saved: Path, embeddings: HashingEmbeddings, name: str) -> None:
        rewrite_manifest(saved, lambda m: m["files"].update({name: {"sha256": "0" * 64, "bytes": 0}}))
        refused(saved, embeddings, "unexpected file")

    def test_a_file_replaced_by_a_symbolic_link(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        outside = saved.parent / "outside.npy"
        (saved / "vectors.npy").rename(outside)
        os.symlink(outside, saved / "vectors.npy")
        refused(saved, embeddings, "symbolic link")

    @pytest.mark.parametrize("sub_folder", ["bm25", "documents"])
    def test_a_sub_folder_replaced_by_a_symbolic_link_from_any_working_folder(
        self, saved: Path, embeddings: HashingEmbeddings, sub_folder: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        outside = saved.parent / f"outside-{sub_folder}"
        (saved / sub_folder).rename(outside)
        os.symlink(outside, saved / sub_folder)
        monkeypatch.chdir(saved.parent)  # the check once looked the sub-folder up in the working folder
        refused(saved, embeddings, "symbolic link")

    def test_a_hierarchical_part_outside_the_folder(self, tmp_path: Path, embeddings: HashingEmbeddings) -> None:
        from tests.helpers.corpora import hierarchical_animals

        folder = hierarchical_animals(embeddings).save(tmp_path / "hier")
        rewrite_manifest(folder, lambda m: m["parts"]["chunks"].update(folder="/tmp"))
        with pytest.raises(IndexFormatError, match="unexpected folder"):
            HierarchicalIndex.load(folder, embeddings)


class TestConsistentEdits:
    """Files whose checksums were updated with them: consistent on their own, not with the documents."""

    def test_a_replaced_vocabulary(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        vocabulary = json.loads((saved / "bm25/vocabulary.json").read_text(encoding="utf-8"))
        replaced = [f"x{t}" for t in vocabulary]  # same count, other words
        replace_file(saved, "bm25/vocabulary.json", json.dumps(replaced).encode())
        refused(saved, embeddings, "BM25 index does not match the documents")

    def test_a_reordered_vocabulary(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        before = FusionIndex.load(saved, embeddings).as_retriever(k=3, alpha=0.0).invoke("cats")
        assert before[0].page_content.endswith("cats and mats")
        vocabulary = json.loads((saved / "bm25/vocabulary.json").read_text(encoding="utf-8"))
        replace_file(saved, "bm25/vocabulary.json", json.dumps(vocabulary[::-1]).encode())
        refused(saved, embeddings, "does not match the documents")

    def test_postings_of_another_corpus(self, saved: Path, embeddings: HashingEmbeddings, tmp_path: Path) -> None:
        other_texts = [t.replace("document", "paper") for t in TEXTS]
        other = FusionIndex.from_texts(other_texts, embeddings).save(tmp_path / "other")
        for name in ("bm25/vocabulary.json", "bm25/indptr.npy", "bm25/rows.npy", "bm25/tf.npy", "bm25/lengths.npy"):
            replace_file(saved, name, (other / name).read_bytes())
        rewrite_manifest(saved, lambda m: m["counts"].update(vocabulary=manifest_of(other)["counts"]["vocabulary"]))
        refused(saved, embeddings, "does not match the documents")

    def test_term_frequencies_moved_between_rows(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        tf = np.load(saved / "bm25/tf.npy")
        tf = tf.copy()
        tf[0], tf[1] = tf[0] + 1, tf[1]  # lengths then disagree with the postings
        replace_file(saved, "bm25/tf.npy", save_npy(tf))
        refused(saved, embeddings, "disagree|does not match")

    def test_vectors_of_another_dimension(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        vectors = np.load(saved / "vectors.npy")
        replace_file(saved, "vectors.npy", save_npy(np.ascontiguousarray(vectors[:, :32])))
        refused(saved, embeddings, "32 dimensions")

    def test_vectors_that_are_not_finite(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        vectors = np.load(saved / "vectors.npy").copy()
        vectors[3, 0] = np.nan
        replace_file(saved, "vectors.npy", save_npy(vectors))
        refused(saved, embeddings, "not finite|NaN")

    def test_an_object_array_is_never_unpickled(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        import io
        import pickle

        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (20,)})
        replace_file(saved, "bm25/lengths.npy", header.getvalue() + pickle.dumps([0] * 20))
        refused(saved, embeddings, r"lengths\.npy: not a readable array")


class TestVersions:
    def test_a_newer_format_asks_for_an_upgrade(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        rewrite_manifest(saved, lambda m: m.update(format_version=m["format_version"] + 1))
        error = refused(saved, embeddings, "newer")
        assert "upgrade langchain-fusion" in str(error) and "rebuild" not in str(error).lower()

    def test_an_older_format_asks_for_a_rebuild(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        rewrite_manifest(saved, lambda m: m.update(format_version=1))
        refused(saved, embeddings, "Rebuild the index")

    def test_open_index_refuses_the_same_way(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        rewrite_manifest(saved, lambda m: m.update(format_version=m["format_version"] + 1))
        with pytest.raises(IndexFormatError, match="upgrade"):
            open_index(saved, embeddings)


class TestDocumentFiles:
    """The compact document files (format 3): offsets, ids, texts and metadata edited consistently."""

    def test_offsets_that_miss_the_end_of_the_texts(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        offsets = np.load(saved / "documents/text_offsets.npy").copy()
        offsets[-1] -= 1
        replace_file(saved, "documents/text_offsets.npy", save_npy(offsets))
        refused(saved, embeddings, r"text_offsets\.npy does not describe 20 rows of documents/texts\.txt")

    def test_offsets_that_go_backwards(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        offsets = np.load(saved / "documents/metadata_offsets.npy").copy()
        offsets[3], offsets[4] = offsets[4], offsets[3]
        replace_file(saved, "documents/metadata_offsets.npy", save_npy(offsets))
        refused(saved, embeddings, r"metadata_offsets\.npy does not describe")

    @pytest.mark.parametrize("ids", [{"d0": 0}, [1, 2], ["d0", ""], "d0"])
    def test_ids_that_are_not_a_list_of_ids(self, saved: Path, embeddings: HashingEmbeddings, ids: Any) -> None:
        replace_file(saved, "documents/ids.json", json.dumps(ids).encode())
        refused(saved, embeddings, "is not a list of document ids")

    def test_repeated_ids(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        ids = json.loads((saved / "documents/ids.json").read_text(encoding="utf-8"))
        replace_file(saved, "documents/ids.json", json.dumps(["d0", *ids[1:-1], "d0"]).encode())
        refused(saved, embeddings, "document ids repeat")

    def test_fewer_ids_than_rows(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        ids = json.loads((saved / "documents/ids.json").read_text(encoding="utf-8"))
        replace_file(saved, "documents/ids.json", json.dumps(ids[:-1]).encode())
        refused(saved, embeddings, "does not describe 19 rows")

    def test_texts_swapped_between_rows(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        texts = (saved / "documents/texts.txt").read_bytes()
        offsets = np.load(saved / "documents/text_offsets.npy")
        first, second = texts[offsets[0] : offsets[1]], texts[offsets[1] : offsets[2]]
        swapped = second + first + texts[offsets[2] :]
        new_offsets = offsets.copy()
        new_offsets[1] = len(second)
        replace_file(saved, "documents/texts.txt", swapped)
        replace_file(saved, "documents/text_offsets.npy", save_npy(new_offsets))
        refused(saved, embeddings, "does not match the documents")

    def test_metadata_that_is_not_an_object(self, saved: Path, embeddings: HashingEmbeddings) -> None:
        lines = (saved / "documents/metadata.jsonl").read_bytes().split(b"\n")[:-1]
        lines[0] = b"[1]"
        data = b"".join(line + b"\n" for line in lines)
        offsets = np.concatenate([[0], np.cumsum([len(line) + 1 for line in lines])]).astype(np.int64)
        replace_file(saved, "documents/metadata.jsonl", data)
        replace_file(saved, "documents/metadata_offsets.npy", save_npy(offsets))
        refused(saved, embeddings, "metadata of document 'd0' is not a JSON object")
