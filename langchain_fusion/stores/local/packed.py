"""Rows of bytes packed into one array with an offset per row, as the documents of a saved folder hold them.

:class:`RawRows` is the plain layout: every row's bytes concatenated, row ``i`` at
``data[offsets[i]:offsets[i + 1]]``. Loaded folders map their text and metadata files this way
(no copy), and ids are packed the same way in memory (:mod:`~langchain_fusion.stores.local.ids`).
Rows built in process are kept compressed instead (:mod:`~langchain_fusion.stores.local.frames`);
both kinds answer the same reads (:class:`StoredRows`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

Bytes = NDArray[np.uint8]
Offsets = NDArray[np.int64]

SAVE_PIECE_BYTES = 1 << 24
"""Bytes handed to a file per write when rows are saved (bounded steps, also from a memory map)."""


class StoredRows(Protocol):
    """Rows of bytes, whatever their layout: what a document block reads and saves."""

    @property
    def offsets(self) -> Offsets:
        """Where row ``i`` starts in the rows' concatenated bytes (and, at ``n``, where they end)."""

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (or mapped) for the rows."""

    def __len__(self) -> int: ...

    def row(self, row: int) -> bytes:
        """The bytes of row ``row``."""

    def __iter__(self) -> Iterator[bytes]:
        """Every row's bytes, in order."""

    def pieces(self) -> Iterator[bytes]:
        """The rows' concatenated bytes in bounded pieces, in order (what a saved folder's file holds)."""


def packed(parts: Sequence[bytes]) -> tuple[Bytes, Offsets]:
    """``parts`` concatenated into one byte array, with the offset of each (and the end)."""
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets


def concatenated(parts: Sequence[tuple[Bytes, Offsets]]) -> tuple[Bytes, Offsets]:
    """The packed rows of ``parts`` (each bytes and offsets) one after another."""
    data = np.concatenate([np.asarray(b) for b, _ in parts]) if parts else np.zeros(0, np.uint8)
    shifts = np.cumsum([0] + [int(o[-1]) for _, o in parts[:-1]])
    offsets = np.concatenate([[0], *[np.asarray(o[1:]) + shift for (_, o), shift in zip(parts, shifts, strict=True)]])
    return data.astype(np.uint8, copy=False), offsets.astype(np.int64)


def kept_ranges(data: Bytes, offsets: Offsets, keep: NDArray[np.bool_]) -> tuple[Bytes, Offsets]:
    """The bytes and new offsets of the kept rows: runs of consecutive kept rows are copied as one range."""
    lengths = np.diff(offsets)[keep]
    new_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], keep, [False])).astype(np.int8)))
    cursor = 0
    for first, stop in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        lo, hi = int(offsets[first]), int(offsets[stop])
        out[cursor : cursor + hi - lo] = data[lo:hi]
        cursor += hi - lo
    return out, new_offsets


@dataclass(frozen=True, eq=False)
class RawRows:
    """Rows as plain concatenated bytes (a loaded folder's mapped file, or ids in memory)."""

    data: Bytes
    """Every row's bytes, concatenated."""
    offsets: Offsets
    """Row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    @classmethod
    def of(cls, parts: Sequence[bytes]) -> RawRows:
        """Rows holding ``parts``."""
        return cls(*packed(parts))

    @property
    def nbytes(self) -> int:
        """Bytes of the data and offsets."""
        return int(self.data.nbytes + self.offsets.nbytes)

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def row(self, row: int) -> bytes:
        """The bytes of row ``row``."""
        return self.data[self.offsets[row] : self.offsets[row + 1]].tobytes()

    def __iter__(self) -> Iterator[bytes]:
        step = 1 << 16
        for first in range(0, len(self), step):
            bounds = self.offsets[first : first + step + 1]
            base = int(bounds[0])
            chunk = self.data[base : int(bounds[-1])].tobytes()
            starts = (bounds - base).tolist()
            yield from (chunk[lo:hi] for lo, hi in itertools.pairwise(starts))

    def pieces(self) -> Iterator[bytes]:
        """The data in pieces of at most :data:`SAVE_PIECE_BYTES`."""
        for lo in range(0, int(self.data.size), SAVE_PIECE_BYTES):
            yield np.ascontiguousarray(self.data[lo : lo + SAVE_PIECE_BYTES]).tobytes()

    def concatenated(self, others: Sequence[RawRows]) -> RawRows:
        """These rows, then each of ``others``'."""
        return RawRows(*concatenated([(r.data, r.offsets) for r in (self, *others)]))

    def kept(self, keep: NDArray[np.bool_]) -> RawRows:
        """The rows flagged in ``keep``, in order."""
        return self if keep.all() else RawRows(*kept_ranges(self.data, self.offsets, keep))
