"""Rows of bytes kept compressed in memory: consecutive rows share a zstd frame of about 8 KiB.

Texts and metadata are most of what an in-process index holds beside its vectors. As Lucene and
tantivy do for stored fields, :class:`CompressedRows` keeps them in independently compressed
frames of consecutive rows (zstd at level 1: about 2.2-2.7x on chunks of prose, 20x or more on
metadata JSON), and decompresses one frame (about 10 microseconds) to read a row. The last few
frames read are kept decompressed, so the neighbours a context window fetches, and the metadata
of rows near each other, cost one decompression. Each row's offset in the uncompressed bytes is
kept, so a row is found without reading its frame's other rows, and a saved folder gets the same
plain files whatever the rows' layout in memory.

Rows are only ever added in order (a new block, two blocks merged, a block without its deleted
rows): :class:`FrameWriter` takes rows and whole frames, reuses a full frame as it is, and packs
small frames and loose rows together, so a living index's many small additions end in full frames
once their segments merge.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zstandard
from numpy.typing import NDArray

from langchain_fusion.stores.local.packed import Bytes, Offsets, StoredRows

FRAME_BYTES = 8192
"""Uncompressed bytes a frame collects before it is compressed (a row is never split between frames).

8 KiB: the zipf corpus of ``benchmarks/scale.py`` compresses 2.54x (2.65x at 16 KiB, 2.82x at 64 KiB)
and a frame decompresses in about 10 microseconds (17 at 16 KiB, 60 at 64 KiB)."""

LEVEL = 1
"""zstd level: 1 compresses near 300 MB/s here and about as well as 3 on these frames."""

CACHED_FRAMES = 8
"""Decompressed frames kept per set of rows (about 64 KiB)."""

_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """The calling thread's decompressor (a zstd context is not shared between threads)."""
    found = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def _compressor() -> zstandard.ZstdCompressor:
    """The calling thread's compressor."""
    found = getattr(_local, "compressor", None)
    if found is None:
        found = _local.compressor = zstandard.ZstdCompressor(level=LEVEL)
    return found


@dataclass(frozen=True, eq=False)
class CompressedRows:
    """Rows of bytes in zstd frames of consecutive rows (see the module docstring); immutable."""

    frames: Bytes
    """Every frame's compressed bytes, concatenated."""
    frame_offsets: Offsets
    """Frame ``f`` is ``frames[frame_offsets[f]:frame_offsets[f + 1]]``."""
    first_rows: Offsets
    """The first row of each frame, then the row count."""
    offsets: Offsets
    """Where row ``i`` starts in the rows' uncompressed bytes (and, at ``n``, where they end)."""
    _cache: dict[int, bytes] = field(default_factory=dict, repr=False)
    """Frames decompressed lately (at most :data:`CACHED_FRAMES`)."""

    def __getstate__(self) -> dict[str, Any]:
        """The rows for ``pickle`` and ``copy.deepcopy``, without the frames decompressed lately."""
        return {**self.__dict__, "_cache": {}}

    @classmethod
    def of(cls, rows: Iterable[bytes]) -> CompressedRows:
        """Rows holding ``rows``, in order."""
        writer = FrameWriter()
        for row in rows:
            writer.add_row(row)
        return writer.finished()

    @property
    def nbytes(self) -> int:
        """Bytes of the compressed frames and the offsets."""
        arrays = (self.frames, self.frame_offsets, self.first_rows, self.offsets)
        return int(sum(a.nbytes for a in arrays))

    @property
    def frame_count(self) -> int:
        """Number of frames."""
        return int(self.frame_offsets.size) - 1

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def compressed(self, index: int) -> memoryview:
        """The compressed bytes of frame ``index``."""
        return self.frames[int(self.frame_offsets[index]) : int(self.frame_offsets[index + 1])].data

    def frame(self, index: int) -> bytes:
        """The uncompressed bytes of frame ``index`` (kept for the next reads)."""
        found = self._cache.get(index)
        if found is not None:
            return found
        found = _decompressor().decompress(self.compressed(index))
        cache = self._cache
        # Readers share the cache: each step is one dict operation, and a frame evicted twice is harmless.
        while len(cache) >= CACHED_FRAMES:
            try:
                cache.pop(next(iter(cache)), None)
            except (StopIteration, RuntimeError):
                break
        cache[index] = found
        return found

    def row(self, row: int) -> bytes:
        """The bytes of row ``row`` (its frame decompressed, or found among the last ones)."""
        index = int(np.searchsorted(self.first_rows, row, side="right")) - 1
        base = int(self.offsets[self.first_rows[index]])
        return self.frame(index)[int(self.offsets[row]) - base : int(self.offsets[row + 1]) - base]

    def __iter__(self) -> Iterator[bytes]:
        decompress = _decompressor().decompress
        for index in range(self.frame_count):
            first, stop = int(self.first_rows[index]), int(self.first_rows[index + 1])
            raw = decompress(self.compressed(index))
            bounds = (self.offsets[first : stop + 1] - self.offsets[first]).tolist()
            yield from (raw[lo:hi] for lo, hi in itertools.pairwise(bounds))

    def pieces(self) -> Iterator[bytes]:
        """Each frame's uncompressed bytes, in order."""
        decompress = _decompressor().decompress
        for index in range(self.frame_count):
            yield decompress(self.compressed(index))

    def frame_rows(self, index: int) -> NDArray[np.int64]:
        """The uncompressed length of each row of frame ``index``."""
        first, stop = int(self.first_rows[index]), int(self.first_rows[index + 1])
        return np.diff(self.offsets[first : stop + 1])


def joined(parts: Sequence[StoredRows]) -> CompressedRows:
    """The rows of ``parts`` one after another, compressed (full frames of compressed parts reused as they are)."""
    writer = FrameWriter()
    for part in parts:
        writer.add_rows(part)
    return writer.finished()


def kept(rows: StoredRows, keep: NDArray[np.bool_]) -> CompressedRows:
    """The rows flagged in ``keep``, in order, compressed (frames whose rows are all kept reused as they are)."""
    writer = FrameWriter()
    if not isinstance(rows, CompressedRows):
        for row, alive in zip(rows, keep.tolist(), strict=True):
            if alive:
                writer.add_row(row)
        return writer.finished()
    for index in range(rows.frame_count):
        first, stop = int(rows.first_rows[index]), int(rows.first_rows[index + 1])
        flags = keep[first:stop]
        if flags.all():
            writer.add_frame(rows, index)
        elif flags.any():
            raw, bounds = rows.frame(index), (rows.offsets[first : stop + 1] - rows.offsets[first]).tolist()
            for local in np.flatnonzero(flags).tolist():
                writer.add_row(raw[bounds[local] : bounds[local + 1]])
    return writer.finished()


class FrameWriter:
    """Builds :class:`CompressedRows` from rows and whole frames added in order (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._frames: list[bytes] = []
        self._frame_rows: list[int] = []
        self._lengths: list[NDArray[np.int64]] = []
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def add_row(self, row: bytes) -> None:
        """One more row; a frame is compressed once :data:`FRAME_BYTES` are pending."""
        self._pending.append(row)
        self._pending_bytes += len(row)
        if self._pending_bytes >= FRAME_BYTES:
            self._flush()

    def add_rows(self, rows: StoredRows) -> None:
        """Every row of ``rows``: a compressed set's frames as they are where full, other rows one by one."""
        if isinstance(rows, CompressedRows):
            for index in range(rows.frame_count):
                self.add_frame(rows, index)
        else:
            for row in rows:
                self.add_row(row)

    def add_frame(self, rows: CompressedRows, index: int) -> None:
        """Frame ``index`` of ``rows``: kept compressed when it is full and nothing small waits before it."""
        lengths = rows.frame_rows(index)
        size = int(lengths.sum())
        full = size >= FRAME_BYTES // 2
        if full and self._pending_bytes >= FRAME_BYTES // 2:
            self._flush()  # a frame of its own: the pending rows fill half of one
        if full and not self._pending:
            self._frames.append(bytes(rows.compressed(index)))
            self._frame_rows.append(int(lengths.size))
            self._lengths.append(lengths)
            return
        # A small frame, or small rows waiting: one frame of both (never split, so no later frame moves).
        raw = rows.frame(index)
        bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
        self._pending.extend(raw[lo:hi] for lo, hi in itertools.pairwise(bounds))
        self._pending_bytes += size
        if self._pending_bytes >= FRAME_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        self._frames.append(_compressor().compress(b"".join(self._pending)))
        self._frame_rows.append(len(self._pending))
        self._lengths.append(np.fromiter(map(len, self._pending), dtype=np.int64, count=len(self._pending)))
        self._pending, self._pending_bytes = [], 0

    def finished(self) -> CompressedRows:
        """The rows added so far (the writer is left empty)."""
        self._flush()
        frame_offsets = np.zeros(len(self._frames) + 1, dtype=np.int64)
        np.cumsum([len(f) for f in self._frames], out=frame_offsets[1:])
        first_rows = np.zeros(len(self._frames) + 1, dtype=np.int64)
        np.cumsum(self._frame_rows, out=first_rows[1:])
        offsets = np.zeros(int(first_rows[-1]) + 1, dtype=np.int64)
        if self._lengths:
            np.cumsum(np.concatenate(self._lengths), out=offsets[1:])
        frames = np.frombuffer(b"".join(self._frames), dtype=np.uint8)
        self._reset()
        return CompressedRows(frames, frame_offsets, first_rows, offsets)
