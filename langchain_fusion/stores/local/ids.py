"""The document ids of a block of rows, packed, and the rows of given ids found through sorted hashes.

:class:`PackedIds` keeps ids as their UTF-8 bytes in one array with an offset per row (about
the id's length plus 8 bytes a row, against some 60 for a tuple of Python strings). Rows are
found by id through a lookup built on first use: each row's 64-bit string hash, sorted, with
the row of each (12 bytes a row, against about 100 for a dict). A lookup hashes the wanted ids,
finds the equal hashes by binary search and compares the ids themselves, so two ids of equal
hash are told apart, and an id held by several rows (a deleted row and its replacement) yields
all of them: the snapshot keeps the live one. The lookup uses Python's string hash, so it is
never saved or pickled: a process builds its own when it needs one (a loaded folder's ids are
not looked up by queries).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local.packed import RawRows

_hash = hash
"""The string hash of the lookup (a name of its own so that tests can make every id collide)."""


@dataclass(frozen=True, eq=False)
class IdLookup:
    """Sorted hashes of a block's ids and the row of each."""

    hashes: NDArray[np.int64]
    """Every row's id hash, ascending."""
    rows: NDArray[np.int32] | NDArray[np.int64]
    """The row of each hash."""

    @property
    def nbytes(self) -> int:
        """Bytes of the two arrays."""
        return int(self.hashes.nbytes + self.rows.nbytes)


@dataclass(frozen=True, eq=False)
class PackedIds:
    """Document ids of consecutive rows (see the module docstring); immutable once built."""

    packed: RawRows
    """Each row's id as UTF-8 bytes (lone surrogates kept: any Python string round-trips)."""
    _lookup: list[IdLookup] = field(default_factory=list, repr=False)
    """The lookup, once built (a list: the one slot a frozen instance may fill)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """The ids for ``pickle`` and ``copy.deepcopy``, without the lookup (string hashes differ between processes)."""
        return {"packed": self.packed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lookup=[], _lock=threading.Lock())

    @classmethod
    def of(cls, ids: Sequence[str]) -> PackedIds:
        """Packed ``ids``."""
        return cls(RawRows.of([i.encode("utf-8", "surrogatepass") for i in ids]))

    def __len__(self) -> int:
        return len(self.packed)

    def __getitem__(self, row: int) -> str:
        return self.packed.row(row).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (raw.decode("utf-8", "surrogatepass") for raw in self.packed)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed ids."""
        return self.packed.nbytes

    @property
    def lookup_nbytes(self) -> int:
        """Bytes of the lookup (0 until built)."""
        return sum(lookup.nbytes for lookup in self._lookup)

    def concatenated(self, others: Sequence[PackedIds]) -> PackedIds:
        """These ids, then each of ``others``'."""
        return PackedIds(self.packed.concatenated([o.packed for o in others])) if others else self

    def kept(self, keep: NDArray[np.bool_]) -> PackedIds:
        """The ids of the rows flagged in ``keep``, in order."""
        return self if keep.all() else PackedIds(self.packed.kept(keep))

    def lookup(self) -> IdLookup:
        """The sorted hashes of the ids (built on first use, then kept)."""
        if self._lookup:
            return self._lookup[0]
        with self._lock:
            if not self._lookup:
                hashes = np.fromiter(map(_hash, self), dtype=np.int64, count=len(self))
                order = np.argsort(hashes, kind="stable")
                rows = order.astype(np.int32) if len(self) < 2**31 else order
                self._lookup.append(IdLookup(hashes[order], rows))
        return self._lookup[0]

    def matches(self, wanted: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every (position in ``wanted``, row) whose id is that wanted id, by position then row."""
        none = np.zeros(0, dtype=np.int64)
        if not wanted or not len(self):
            return none, none
        lookup = self.lookup()
        hashes = np.fromiter(map(_hash, wanted), dtype=np.int64, count=len(wanted))
        lo = np.searchsorted(lookup.hashes, hashes, side="left")
        counts = np.searchsorted(lookup.hashes, hashes, side="right") - lo
        if not counts.any():
            return none, none
        positions = np.repeat(np.arange(len(wanted), dtype=np.int64), counts)
        # The sorted slots of each equal-hash run: its start plus 0..count-1.
        slots = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(positions.size)
        rows = lookup.rows[slots].astype(np.int64)
        same = np.fromiter(
            (self[row] == wanted[at] for at, row in zip(positions.tolist(), rows.tolist(), strict=True)),
            dtype=bool,
            count=rows.size,
        )
        return positions[same], rows[same]
