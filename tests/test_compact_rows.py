"""Documents kept compactly in memory: rows in zstd frames, packed ids, rows found by id through sorted hashes."""

from __future__ import annotations

import copy
import pickle
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex
from langchain_fusion.stores.local import frames, ids
from langchain_fusion.stores.local.frames import CACHED_FRAMES, CompressedRows
from langchain_fusion.stores.local.ids import PackedIds
from langchain_fusion.stores.local.packed import RawRows
from tests.helpers.embeddings import HashingEmbeddings

FRAME_BYTES = 8192  # frames of many rows; the texts' frames of one row are checked through the index below


def rows_of(seed: int, n: int) -> list[bytes]:
    """Rows of varied sizes: empty ones, short ones, repetitive text and some longer than a frame."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}".encode() for i in range(200)]
    out = []
    for _ in range(n):
        size = int(rng.choice([0, 1, 40, 300, 2000, 3 * FRAME_BYTES]))
        out.append(b" ".join(words[int(i)] for i in rng.integers(200, size=size // 4))[:size])
    return out


def contents(rows: CompressedRows | RawRows) -> list[bytes]:
    return [rows.row(i) for i in range(len(rows))]


class TestCompressedRows:
    @pytest.mark.parametrize("seed", range(3))
    def test_round_trip(self, seed: int) -> None:
        expected = rows_of(seed, 120)
        rows = CompressedRows.of(expected, FRAME_BYTES)
        assert contents(rows) == list(rows) == expected
        assert b"".join(rows.pieces()) == b"".join(expected)
        assert rows.offsets.tolist() == RawRows.of(expected).offsets.tolist()
        assert rows.nbytes < RawRows.of(expected).nbytes  # the words repeat: frames are smaller than the text

    def test_no_rows(self) -> None:
        rows = CompressedRows.of([], FRAME_BYTES)
        assert len(rows) == 0 and list(rows) == [] and rows.frame_count == 0 and b"".join(rows.pieces()) == b""

    def test_frames_hold_whole_rows_of_about_a_frame(self) -> None:
        rows = CompressedRows.of([b"x" * 100] * 1000, FRAME_BYTES)
        sizes = np.diff(rows.offsets[rows.first_rows])
        assert rows.frame_count == 13 and sizes[:-1].min() >= FRAME_BYTES and sizes.max() < FRAME_BYTES + 100

    def test_small_parts_end_in_full_frames(self) -> None:
        # A living index adds a row at a time: merging its segments packs their one-row frames together.
        parts = [CompressedRows.of([f"row {i} ".encode() * 20], FRAME_BYTES) for i in range(600)]
        joined = frames.joined(parts, FRAME_BYTES)
        assert contents(joined) == [part.row(0) for part in parts]
        assert joined.frame_count <= int(joined.offsets[-1]) // (FRAME_BYTES // 2) + 1

    def test_full_frames_are_reused_as_they_are(self) -> None:
        first, second = CompressedRows.of(rows_of(1, 200), FRAME_BYTES), CompressedRows.of(rows_of(2, 200), FRAME_BYTES)
        joined = frames.joined([first, RawRows.of([b"loose"]), second], FRAME_BYTES)
        assert contents(joined) == [*contents(first), b"loose", *contents(second)]
        reused = {bytes(first.compressed(i)) for i in range(first.frame_count - 1)}
        assert reused <= {bytes(joined.compressed(i)) for i in range(joined.frame_count)}

    @pytest.mark.parametrize("share", [0.0, 0.02, 0.5, 1.0])
    def test_kept(self, share: float) -> None:
        expected = rows_of(4, 300)
        keep = np.random.default_rng(5).random(300) >= share
        wanted = [row for row, alive in zip(expected, keep.tolist(), strict=True) if alive]
        for rows in (CompressedRows.of(expected, FRAME_BYTES), RawRows.of(expected)):
            assert contents(frames.kept(rows, keep, FRAME_BYTES)) == wanted

    def test_few_frames_kept_decompressed(self) -> None:
        rows = CompressedRows.of(rows_of(6, 400), 512)
        assert rows.frame_count > 2 * CACHED_FRAMES
        for i in range(len(rows)):
            rows.row(i)
        assert 0 < len(rows._cache) <= CACHED_FRAMES

    def test_copies_leave_the_cache_behind(self) -> None:
        rows = CompressedRows.of(rows_of(7, 50), FRAME_BYTES)
        rows.row(3)
        for copied in (pickle.loads(pickle.dumps(rows)), copy.deepcopy(rows)):
            assert not copied._cache and contents(copied) == contents(rows)

    def test_threads_read_the_same_rows(self) -> None:
        expected = rows_of(8, 400)
        rows = CompressedRows.of(expected, FRAME_BYTES)
        wrong: list[int] = []

        def read(seed: int) -> None:
            for i in np.random.default_rng(seed).integers(len(expected), size=3000).tolist():
                if rows.row(i) != expected[i]:
                    wrong.append(i)

        threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not wrong


class TestPackedIds:
    IDS: ClassVar[list[str]] = ["a", "b", "ünï", "数据", "", "e\nf", "b", "lone \ud800 surrogate"]

    def test_round_trip(self) -> None:
        packed = PackedIds.of(self.IDS)
        assert list(packed) == self.IDS and [packed[i] for i in range(len(packed))] == self.IDS
        assert packed.lookup_nbytes == 0  # built on first use only

    def test_matches_every_row_of_an_id(self) -> None:
        packed = PackedIds.of(self.IDS)
        positions, rows = packed.matches(["b", "zz", "数据", "a", "b"])
        assert list(zip(positions.tolist(), rows.tolist(), strict=True)) == [
            (0, 1),
            (0, 6),
            (2, 3),
            (3, 0),
            (4, 1),
            (4, 6),
        ]
        assert packed.lookup_nbytes == 12 * len(self.IDS)
        assert packed.matches(["lone \ud800 surrogate"])[1].tolist() == [7]

    def test_equal_hashes_are_told_apart(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ids, "_hash", len)  # ids of one length collide
        packed = PackedIds.of([f"id{i:03d}" for i in range(300)])
        positions, rows = packed.matches(["id123", "id999", "id000"])
        assert positions.tolist() == [0, 2] and rows.tolist() == [123, 0]

    def test_copies_build_their_own_lookup(self) -> None:
        packed = PackedIds.of(self.IDS)
        packed.matches(["a"])
        copied = pickle.loads(pickle.dumps(packed))
        assert copied.lookup_nbytes == 0 and copied.matches(["数据"])[1].tolist() == [3]

    def test_kept_and_concatenated(self) -> None:
        packed = PackedIds.of(self.IDS)
        assert list(packed.kept(np.array([True, False, True, True, False, True, False, False]))) == [
            "a",
            "ünï",
            "数据",
            "e\nf",
        ]
        assert list(packed.concatenated([PackedIds.of(["x"]), PackedIds.of([])])) == [*self.IDS, "x"]


class TestRowsByIdInALivingIndex:
    @pytest.mark.parametrize("collide", [False, True])
    def test_against_a_dict(self, collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        """Upserts, deletes, merges and compactions: the row of each id is the live one, as a dict would say."""
        if collide:
            monkeypatch.setattr(ids, "_hash", lambda s: len(s) % 3)
        rng = np.random.default_rng(9)
        index = FusionIndex.from_documents(
            [Document(id=f"d{i}", page_content=f"text {i}") for i in range(50)], HashingEmbeddings(8)
        )
        texts = {f"d{i}": f"text {i}" for i in range(50)}
        for step in range(40):
            if rng.random() < 0.6:
                batch = sorted({f"d{int(i)}" for i in rng.integers(80, size=int(rng.integers(1, 12)))})
                index.add_documents([Document(id=i, page_content=f"text {i} v{step}") for i in batch])
                texts.update({i: f"text {i} v{step}" for i in batch})
            else:
                gone = [i for i in texts if rng.random() < 0.2]
                index.delete(gone)
                for i in gone:
                    del texts[i]
            view = index.view()
            wanted = [f"d{i}" for i in range(80)]
            keys = view.keys_of(wanted)
            assert [i for i, key in zip(wanted, keys.tolist(), strict=True) if key >= 0] == sorted(
                texts, key=wanted.index
            )
            found = view.documents(keys[keys >= 0])
            assert {d.id: d.page_content for d in found} == texts


def test_saved_files_are_plain_whatever_the_layout(tmp_path: Path) -> None:
    """An index built in process (compressed) and one loaded from its folder (mapped) save the same documents."""
    docs = [Document(id=f"d{i}", page_content=f"chunk {i} " * (i % 40), metadata={"i": i}) for i in range(300)]
    built = FusionIndex.from_documents(docs, HashingEmbeddings(8))
    built.save(tmp_path / "a")
    FusionIndex.load(tmp_path / "a", HashingEmbeddings(8)).save(tmp_path / "b")
    for name in ("texts.txt", "text_offsets.npy", "metadata.jsonl", "metadata_offsets.npy", "ids.json"):
        assert (tmp_path / "a/documents" / name).read_bytes() == (tmp_path / "b/documents" / name).read_bytes(), name
    assert (tmp_path / "a/documents/texts.txt").read_bytes() == "".join(d.page_content for d in docs).encode()
