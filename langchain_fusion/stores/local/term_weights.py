"""BM25 term weights kept for other queries under the same statistics: one term's weights per block.

Weighing a term depends on the live statistics only, not on the query: a batch of queries, or
every query of one index snapshot, can weigh it once and share the result (:class:`TermWeights`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

SHARED_WEIGHTS_BUDGET = 64 << 20
"""Bytes of term weights a batch keeps for its other queries (as much as one side's score arrays, 2^24 float32)."""

COMMON_WEIGHTS_BUDGET = 32 << 20
"""Bytes of common terms' weights an index snapshot keeps for every query it serves (8 terms over 1M rows)."""


@dataclass(frozen=True)
class BlockWeights:
    """One term's BM25 weight in the rows of one block (repeats not applied), as a :class:`TermWeights` keeps it.

    Sparse, the rows holding the term and its weight in each; dense, its weight in every row of
    the block, 0 where the term is absent. A row without the term gains ``+0.0``, which leaves
    its float32 score the same bits, so both forms add exactly what scattering the postings adds.
    Dense from :data:`~langchain_fusion.stores.local.bm25.DENSE_TERM_SHARE` on: no more memory
    than the sparse form (4 bytes a row against 12 a posting), and added as one contiguous vector
    instead of a scatter.
    """

    rows: NDArray[np.int64] | None
    """The rows holding the term, or None when ``weights`` covers every row of the block."""
    weights: NDArray[np.float32]
    """The term's weight in each of ``rows`` (or in each row of the block)."""

    def add_to(self, out: NDArray[np.float32], first_row: int, repeats: int) -> None:
        """Add the term's weight, ``repeats`` times, to ``out`` (whose row ``first_row`` is the block's first)."""
        weight = self.weights if repeats == 1 else self.weights * np.float32(repeats)
        if self.rows is None:
            out[first_row : first_row + weight.size] += weight
        elif self.rows.size:
            out[self.rows] += weight

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return self.weights.nbytes + (0 if self.rows is None else self.rows.nbytes)


class TermWeights:
    """Term weights kept for other queries: (term, block number) -> :class:`BlockWeights`.

    Weighing a term depends on the statistics only, not on the query, so queries under the same
    statistics can share it. A batch weighs each distinct term once and keeps it, up to
    ``budget`` bytes; terms weighed once the budget is spent are not kept (the queries that
    need them weigh them again). An index snapshot keeps only common terms (``common_only``: the
    dense form, see :class:`BlockWeights`), which recur in many queries and cost the most to
    weigh; a batch's store has the snapshot's as ``parent``, which it reads too and fills first
    with common terms. Threads may share a store: two may weigh the same term at once, and one
    copy is kept; a thread that finds another keeping weights at that moment does not keep its own
    (nor wait).
    """

    def __init__(
        self, budget: int = SHARED_WEIGHTS_BUDGET, *, common_only: bool = False, parent: TermWeights | None = None
    ) -> None:
        """An empty store of at most ``budget`` bytes."""
        self._parts: dict[tuple[int, int], BlockWeights] = {}
        self._left = budget
        self._lock = threading.Lock()
        self.common_only = common_only
        """Keep dense weights only (the common terms')."""
        self.parent = parent
        """A longer-lived store also read, and given common terms first, if any."""

    def get(self, term: int, block: int) -> BlockWeights | None:
        """The weights kept for ``term`` in block number ``block``, here or else in the parent, if any."""
        found = self._parts.get((term, block))
        if found is None and self.parent is not None:
            return self.parent.get(term, block)
        return found

    def has_room(self, nbytes: int) -> bool:
        """Whether weights of ``nbytes`` would be kept here or in the parent (budget left, no other thread keeping)."""
        here = nbytes <= self._left and not self._lock.locked()
        return here or (self.parent is not None and self.parent.has_room(nbytes))

    def keep(self, term: int, block: int, weights: BlockWeights) -> None:
        """Keep ``weights`` for other queries if a budget allows (and no other thread kept them)."""
        if weights.rows is None and self.parent is not None and self.parent.has_room(weights.nbytes):
            self.parent.keep(term, block, weights)
            return
        if self.common_only and weights.rows is not None:
            return
        # Never wait: a thread keeping weights at the same moment wins, and a child forked while another
        # thread held the lock keeps nothing more instead of blocking for ever.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if weights.nbytes <= self._left and (term, block) not in self._parts:
                self._parts[term, block] = weights
                self._left -= weights.nbytes
        finally:
            self._lock.release()

    def parts(self) -> list[tuple[tuple[int, int], BlockWeights]]:
        """Every ``((term, block number), weights)`` kept here (not in the parent)."""
        return list(self._parts.items())
