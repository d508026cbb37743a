"""Rows of bytes kept compressed in memory: zstd frames of one or more consecutive rows.

Texts and metadata are most of what an in-process index holds beside its vectors. As Lucene and
tantivy do for stored fields, :class:`CompressedRows` keeps them in independently compressed
frames of consecutive rows (zstd at level 1: about 2x on chunks of prose compressed one by one,
15x or more on metadata JSON in frames of 2 KiB; :data:`TEXT_FRAME_BYTES`,
:data:`METADATA_FRAME_BYTES`), and decompresses one frame (a few microseconds) to read a row. The
last frames read are kept decompressed, so a text a query reads twice (its duplicate check, then
its Document) and the metadata of rows near each other cost one decompression. Each row's offset
in the uncompressed bytes is kept, so a row is found without reading its frame's other rows, and
a saved folder gets the same plain files whatever the rows' layout in memory.

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

from langchain_fusion.stores.local.packed import SAVE_PIECE_BYTES, Bytes, Offsets, StoredRows

TEXT_FRAME_BYTES = 256
"""Uncompressed bytes a frame of texts collects before it is compressed: a chunk of text is a frame of its own.

A query reads some 30 texts (its pool's duplicate checks, then its Documents), so a text must
decompress fast: alone, a 1 KB chunk of the zipf corpus of ``benchmarks/scale.py`` decompresses in
2.5 microseconds and compresses 2.0x; in frames of 8 KiB 2.5x, but a read costs 11 microseconds
(4 KiB: 2.4x, 7 microseconds). Texts under 256 bytes share a frame, so a frame's header never
outweighs what it saves."""

METADATA_FRAME_BYTES = 2048
"""The same for metadata, whose rows are short and alike (JSON of the same keys): 15x or more in
frames of 2 KiB (a few microseconds to read), where a row alone would not compress at all."""

LEVEL = 1
"""zstd level: 1 compresses near 300 MB/s here and about as well as 3 on these frames."""

CACHED_FRAMES = 32
"""Decompressed frames kept per set of rows (a query's pool of texts; at most 64 KiB of metadata)."""

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
    frame_of: NDArray[np.int32]
    """The frame of each row (an index, cheaper than a search of ``first_rows`` per read)."""
    offsets: Offsets
    """Where row ``i`` starts in the rows' uncompressed bytes (and, at ``n``, where they end)."""
    frame_bytes: int
    """Uncompressed bytes a frame collects (rows added later are framed the same way)."""
    _cache: dict[int, bytes] = field(default_factory=dict, repr=False)
    """Frames decompressed lately (at most :data:`CACHED_FRAMES`)."""

    def __getstate__(self) -> dict[str, Any]:
        """The rows for ``pickle`` and ``copy.deepcopy``, without the frames decompressed lately."""
        return {**self.__dict__, "_cache": {}}

    @classmethod
    def of(cls, rows: Iterable[bytes], frame_bytes: int) -> CompressedRows:
        """Rows holding ``rows``, in order, in frames of about ``frame_bytes``."""
        writer = FrameWriter(frame_bytes)
        for row in rows:
            writer.add_row(row)
        return writer.finished()

    @property
    def nbytes(self) -> int:
        """Bytes of the compressed frames and the offsets."""
        arrays = (self.frames, self.frame_offsets, self.first_rows, self.frame_of, self.offsets)
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
        index = int(self.frame_of[row])
        base = int(self.offsets[self.first_rows[index]])
        return self.frame(index)[int(self.offsets[row]) - base : int(self.offsets[row + 1]) - base]

    def __iter__(self) -> Iterator[bytes]:
        decompress = _decompressor().decompress  # not through the cache: a whole pass would only evict it
        for index in range(self.frame_count):
            yield from self.rows_in(index, decompress(self.compressed(index)))

    def rows_in(self, index: int, raw: bytes) -> list[bytes]:
        """The rows of frame ``index``, cut from ``raw``, its uncompressed bytes."""
        first, stop = int(self.first_rows[index]), int(self.first_rows[index + 1])
        bounds = (self.offsets[first : stop + 1] - self.offsets[first]).tolist()
        return [raw[lo:hi] for lo, hi in itertools.pairwise(bounds)]

    def pieces(self) -> Iterator[bytes]:
        """The uncompressed bytes, frames joined into pieces of about :data:`SAVE_PIECE_BYTES`, in order."""
        decompress, pending, size = _decompressor().decompress, [], 0
        for index in range(self.frame_count):
            pending.append(decompress(self.compressed(index)))
            size += len(pending[-1])
            if size >= SAVE_PIECE_BYTES:
                yield b"".join(pending)
                pending, size = [], 0
        if pending:
            yield b"".join(pending)

    def frame_rows(self, index: int) -> NDArray[np.int64]:
        """The uncompressed length of each row of frame ``index``."""
        first, stop = int(self.first_rows[index]), int(self.first_rows[index + 1])
        return np.diff(self.offsets[first : stop + 1])


def joined(parts: Sequence[StoredRows], frame_bytes: int) -> CompressedRows:
    """The rows of ``parts`` one after another, compressed (full frames of compressed parts reused as they are)."""
    writer = FrameWriter(frame_bytes)
    for part in parts:
        writer.add_rows(part)
    return writer.finished()


def kept(rows: StoredRows, keep: NDArray[np.bool_], frame_bytes: int) -> CompressedRows:
    """The rows flagged in ``keep``, in order, compressed (frames whose rows are all kept reused as they are)."""
    writer = FrameWriter(frame_bytes)
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
            frame_rows = rows.rows_in(index, rows.frame(index))
            for local in np.flatnonzero(flags).tolist():
                writer.add_row(frame_rows[local])
    return writer.finished()


class FrameWriter:
    """Builds :class:`CompressedRows` from rows and whole frames added in order (see the module docstring)."""

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes
        """Uncompressed bytes a frame collects before it is compressed."""
        self._reset()

    def _reset(self) -> None:
        self._frames: list[bytes] = []
        self._frame_rows: list[int] = []
        self._lengths: list[NDArray[np.int64]] = []
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def add_row(self, row: bytes) -> None:
        """One more row; a frame is compressed once :attr:`frame_bytes` are pending."""
        self._pending.append(row)
        self._pending_bytes += len(row)
        if self._pending_bytes >= self.frame_bytes:
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
        full = size >= self.frame_bytes // 2
        if full and self._pending_bytes >= self.frame_bytes // 2:
            self._flush()  # a frame of its own: the pending rows fill half of one
        if full and not self._pending:
            self._frames.append(bytes(rows.compressed(index)))
            self._frame_rows.append(int(lengths.size))
            self._lengths.append(lengths)
            return
        # A small frame, or small rows waiting: one frame of both (never split, so no later frame moves).
        self._pending.extend(rows.rows_in(index, rows.frame(index)))
        self._pending_bytes += size
        if self._pending_bytes >= self.frame_bytes:
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
        frame_of = np.repeat(np.arange(len(self._frames), dtype=np.int32), self._frame_rows)
        frames = np.frombuffer(b"".join(self._frames), dtype=np.uint8)
        self._reset()
        return CompressedRows(frames, frame_offsets, first_rows, frame_of, offsets, self.frame_bytes)
