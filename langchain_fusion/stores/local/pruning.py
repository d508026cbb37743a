"""The exact BM25 top-k found without weighing every posting: block-max MaxScore, or bitmaps.

A threshold ``theta`` at most the k-th best score comes first: the k-th best sum of the rarest
terms' weights, raised where it matters by scoring exactly the rows those terms weigh most. Then
the candidates, one of two ways:

- MaxScore (Turtle and Flood 1995): the terms whose bounds sum below ``theta`` cannot lift a row
  holding none of the others into the top k, so only the others' postings are read. Where they
  hold many postings, the bounds are taken per block of rows
  (:mod:`~langchain_fusion.stores.local.block_max`), as block-max MaxScore does (Chakrabarti et
  al. 2011, Mallia et al. 2019): a term is then read only in the blocks where the bounds of the
  terms left unread reach ``theta``.
- Bitmaps, when MaxScore would read two common terms or more and many postings (every term of
  middling frequency): the rows the common terms' bounds could lift to ``theta`` come from their
  presence bitmaps (:mod:`~langchain_fusion.stores.local.reaching`), the rarer terms are read
  whole, and ``theta`` is first raised by scoring the rows the common terms lift highest.

Each candidate's unread terms are then looked up, most weighty first (whether a row holds a term
first, its weight only where it does), while its known weights plus the bounds of its unread
terms still reach ``theta``; the survivors' exact scores are the same float32 sums as scoring
every row (:meth:`QueryWeights.summed`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local import block_max
from langchain_fusion.stores.local.bm25 import QueryWeights
from langchain_fusion.stores.local.postings import PRESENCE_MIN_SHARE, IntArray, Postings, holding
from langchain_fusion.stores.local.reaching import REACHING_MAX_TERMS, likely_mark, reaching_rows
from langchain_fusion.stores.ranking import top_rows

PRUNED_MAX_TERMS = 32
"""Queries of more distinct terms score every row: pruning reads most of their postings (measured at 300k and 1M
rows: 48 terms or more, pruning gave up on or lost to scoring every row for 18 of 20 queries)."""

SEED_MAX_SHARE = 0.5
"""The first threshold reads the rarest terms' postings up to this share of the rows (more: the bitmaps set it)."""

SEED_ROWS_PER_RESULT = 8
"""Rows scored exactly per result wanted to raise the first threshold (those the rarest terms weigh most)."""

SCORED_SEED_MIN_POSTINGS = 4
"""...once MaxScore would read more than this many postings per 64 rows under the first threshold."""

BITMAPS_MIN_POSTINGS = 8
"""The common terms' bitmaps give the candidates once MaxScore would read two of them or more, and more than this many
postings per 64 rows."""

BITMAPS_MAX_SHARE = 0.25
"""The bitmaps give way to MaxScore when they leave more than this share of the rows."""

EVERY_ROW_COST = 12
"""A pruned top-k gives up (the caller scores every row) where MaxScore would cost more: reading, merging and looking
up a posting cost about this many times what weighing one for every row does (measured at 1M rows, 6-48 terms:
80-100 against 6-7 ns)..."""

ROW_COST = 0.3
"""...plus, for scoring every row, this many postings' worth per row (its array and the top-k over it)."""

LIKELY_ROWS_PER_RESULT = 32
"""Rows per result the common terms are expected to lift highest, scored exactly to raise the threshold first."""

BLOCKS_MIN_POSTINGS = 4
"""MaxScore bounds the terms per block once it would read more than this many postings per block of rows..."""

BLOCKS_MAX_FILL = 0.75
"""...and the terms it would read have block bounds below this share of their largest on average (else bounds per
block would skip next to nothing: a term spread evenly over the rows, as the synthetic corpora draw them)."""

RAISE_MIN_CANDIDATES = 256
"""From this many candidates per result wanted, the threshold is raised by scoring the most promising exactly."""

RAISE_ROWS_PER_RESULT = 2
"""...that many rows per result wanted: those whose read terms weigh most."""

ROUNDING = 1e-5
"""Relative room left for float32 rounding when a sum of upper bounds is compared with a score."""

Part = tuple[IntArray, NDArray[np.float32]]
"""Positions among a pruned top-k's first candidates, and one term's weights there."""

Parts = list[tuple[IntArray, NDArray[np.float32], int, int]]
"""Rows, weights, repeats and term number of postings read (term number -1: rows taken whatever they hold)."""

_LEAST = float(np.nextafter(np.float32(0), np.float32(1)))


class PrunedTop:
    """One pruned top-k of one query over ``(postings, first_row)`` blocks of ``size`` rows."""

    def __init__(self, weights: QueryWeights, size: int, blocks: Sequence[tuple[Postings, int]]) -> None:
        """Bound each of ``weights``' terms over every row (weighing the postings of the rare ones)."""
        self.weights, self.size, self.blocks = weights, size, blocks
        ends = [start for _, start in blocks[1:]] + [size]
        self._counts = [block_max.block_count(end - start) for (_, start), end in zip(blocks, ends, strict=True)]
        self._offsets = np.concatenate(([0], np.cumsum(self._counts))).astype(np.int64)
        self._starts = np.array([start for _, start in blocks], dtype=np.int64)
        terms = weights.terms
        self.postings = np.array([sum(p.term_count(term) for p, _ in blocks) for term, _, _ in terms], dtype=np.int64)
        """Postings of each term."""
        self._weighed: list[dict[int, tuple[IntArray, NDArray[np.float32]]]] = [{} for _ in terms]
        """Per term and segment: the rows holding it and its weight in each, once weighed whole."""
        self._kept: list[dict[int, tuple[NDArray[np.uint8], float]]] = [{} for _ in terms]
        """Per term and segment: its kept block bounds, in steps, and the weight of a step."""
        self._fill = np.minimum(self.postings / max(int(self._offsets[-1]), 1), 1.0)
        """Per term, how evenly its block bounds spread (mean over largest; a rare term: its postings per block)."""
        self._scored_terms: set[int] = set()
        """The terms whose weights chose the rows scored exactly for the first threshold."""
        largest = np.zeros(len(terms), dtype=np.float64)
        for number, (_, repeats, term_idf) in enumerate(terms):
            for segment, (postings, first_row) in enumerate(blocks):
                largest[number] = max(largest[number], self._bound(number, segment, postings, first_row, term_idf))
            largest[number] *= repeats
        self.bounds = largest[:, None]
        """Per term (row) and block (column): a bound of the term's weight (repeats applied) in any row of the block.

        One column (every row) unless MaxScore takes :meth:`block_bounds`."""
        self._order = np.argsort(largest, kind="stable")
        """The terms by their largest bound, ascending (the commonest first)."""
        self._common = [n for n in self._order[::-1].tolist() if self.postings[n] * PRESENCE_MIN_SHARE >= size]
        """The terms with bitmaps (holding 1/``PRESENCE_MIN_SHARE`` of the rows or more), weightiest first."""
        self._seeded = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)

    def _bound(self, number: int, segment: int, postings: Postings, first_row: int, term_idf: float) -> float:
        """The largest weight of term ``number`` in ``segment`` (repeats not applied); keeps how to bound its blocks."""
        term = self.weights.terms[number][0]
        if postings.term_count(term) == 0:
            return 0.0
        lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
        blocks = self._counts[segment]
        if hi - lo <= blocks:  # rare here: weigh every posting (reading kept bounds would cost as much)
            rows, weight = self.weights.term_weights(postings, first_row, term, term_idf)
            self._weighed[number][segment] = rows, weight
            return float(weight.max())
        params, weights = self.weights.params, self.weights
        relative = weights.relative_length[first_row : first_row + blocks * block_max.BLOCK_ROWS]
        steps, largest, fill, unit = postings.block_maxima.bounds(
            term, params.k1, params.b, weights.average, (postings.rows[lo:hi], postings.tf[lo:hi], relative), blocks
        )
        unit *= term_idf * (params.k1 + 1 if params.method == "atire" else 1.0)
        self._kept[number][segment] = steps, unit
        self._fill[number] = max(self._fill[number], fill)
        return largest * unit

    def block_bounds(self) -> NDArray[np.float64]:
        """Per term (row) and block (column): a bound of the term's weight (repeats applied) in any row of the block."""
        bounds = np.zeros((len(self.weights.terms), int(self._offsets[-1])), dtype=np.float64)
        for number, (_, repeats, _) in enumerate(self.weights.terms):
            for segment, (rows, weight) in self._weighed[number].items():
                local = rows - self.blocks[segment][1]
                span = bounds[number, self._offsets[segment] : self._offsets[segment + 1]]
                span[:] = block_max.block_maxima(local, weight, self._counts[segment]) * repeats
            for segment, (steps, unit) in self._kept[number].items():
                bounds[number, self._offsets[segment] : self._offsets[segment + 1]] = (steps * unit) * repeats
        return bounds

    def block_of(self, rows: IntArray) -> IntArray:
        """The block (column of :meth:`block_bounds`) of each of ``rows``."""
        if len(self.blocks) == 1:
            return rows >> block_max.BLOCK_SHIFT
        segment = np.searchsorted(self._starts, rows, side="right") - 1
        return self._offsets[segment] + ((rows - self._starts[segment]) >> block_max.BLOCK_SHIFT)

    def top(self, k: int, allowed: NDArray[np.bool_] | None) -> tuple[IntArray, NDArray[np.float32]] | None:
        """The ``k`` best ``allowed`` rows scoring above 0 and their scores (None: scoring every row costs less)."""
        theta = self._seed(k, allowed)
        words = (self.size + 63) // 64
        if theta is not None and self._essential_postings(theta)[0] > SCORED_SEED_MIN_POSTINGS * words:
            theta = self._scored_seed(k, theta)
        read, common = self._essential_postings(_LEAST if theta is None else theta)
        if common >= 2 and read > BITMAPS_MIN_POSTINGS * words and self._walkable(theta):
            theta, reached = self._through_bitmaps(k, allowed, _LEAST if theta is None else theta)
            if reached is not None:
                read_matrix = np.ones(self.bounds.shape, dtype=bool)
                read_matrix[self._common] = False  # the common terms are looked up, the others read whole
                return self._scored(k, allowed, theta, read_matrix, self.bounds[self._common].sum(axis=0), reached)
            read = self._essential_postings(theta)[0]
        if theta is None or read * EVERY_ROW_COST > self.postings.sum() + self.size * ROW_COST:
            return None  # MaxScore would cost more than scoring every row
        return self._scored(k, allowed, theta, *self._maxscore(theta))

    def _everywhere(self) -> float:
        """The bounds of the common terms past :data:`REACHING_MAX_TERMS`, which the walk counts as held everywhere."""
        return float(self.bounds[self._common[REACHING_MAX_TERMS:], 0].sum())

    def _walkable(self, theta: float | None) -> bool:
        """Whether the common terms the walk leaves out weigh under half of ``theta`` (else about every row reaches)."""
        return theta is None or self._everywhere() * 2 < theta

    def _through_bitmaps(
        self, k: int, allowed: NDArray[np.bool_] | None, theta: float
    ) -> tuple[float, IntArray | None]:
        """``theta`` raised, and the rows the common terms could lift to it (None: too many, see :mod:`reaching`).

        ``theta`` is first raised to the k-th best score of the rows the common terms lift to the
        mark :data:`LIKELY_ROWS_PER_RESULT` rows per result are expected to reach (an even sample
        when many more do); those rows are then the answer's unless the raised ``theta`` is below
        the mark. The common terms past :data:`REACHING_MAX_TERMS` count as held by every row;
        more than :data:`BITMAPS_MAX_SHARE` of the rows reaching ``theta``: None.
        """
        walked = self._common[:REACHING_MAX_TERMS]
        bounds, everywhere = self.bounds[walked, 0], self._everywhere()
        terms = [self.weights.terms[n][0] for n in walked]
        shares = self.postings[walked] / max(self.size, 1)
        mark = likely_mark(bounds, shares, self.size, LIKELY_ROWS_PER_RESULT * k) + everywhere
        if mark > theta:
            need = mark * (1 - 2 * ROUNDING) - everywhere
            promising = reaching_rows(self.blocks, self.size, terms, bounds.tolist(), need)
            scored = promising if allowed is None else promising[allowed[promising]]
            if scored.size > 4 * LIKELY_ROWS_PER_RESULT * k:  # far more than expected: an even sample of them
                scored = scored[:: scored.size // (LIKELY_ROWS_PER_RESULT * k)]
            if scored.size >= k:
                scores = self.weights.row_scores(scored, self.blocks)
                theta = max(theta, float(np.partition(scores, scores.size - k)[scores.size - k]))
            if theta >= mark:
                return theta, promising
        reached = reaching_rows(self.blocks, self.size, terms, bounds.tolist(), theta * (1 - 2 * ROUNDING) - everywhere)
        return theta, reached if reached.size <= self.size * BITMAPS_MAX_SHARE else None

    def _maxscore(self, theta: float) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """Per term and block, whether MaxScore reads the term's postings there; per block, the others' bound.

        The terms with the smallest bounds overall, while their bounds sum below ``theta``, are not
        read: a row holding none of the others cannot reach it. Per block of rows where MaxScore
        would read many postings (:data:`BLOCKS_MIN_POSTINGS`), else over every row.
        """
        blocks = int(self._offsets[-1])
        if blocks > 1 and self._essential_postings(theta)[0] > BLOCKS_MIN_POSTINGS * blocks:
            prefix = np.cumsum(self.bounds[self._order, 0]) * (1 + ROUNDING)
            essential = self._order[int(np.count_nonzero(prefix < theta)) :]
            fill = float(np.average(self._fill[essential], weights=self.postings[essential] + 1))
            if fill < BLOCKS_MAX_FILL:
                self.bounds = self.block_bounds()
        read = np.ones(self.bounds.shape, dtype=bool)
        summed = np.zeros(self.bounds.shape[1], dtype=np.float64)
        rest = np.zeros(self.bounds.shape[1], dtype=np.float64)
        for number in self._order.tolist():  # the least weighty first
            summed += self.bounds[number]
            skipped = summed * (1 + ROUNDING) < theta
            read[number] = ~skipped
            np.copyto(rest, summed, where=skipped)
        read &= self.bounds > 0
        return read, rest

    def _scored(
        self,
        k: int,
        allowed: NDArray[np.bool_] | None,
        theta: float,
        read: NDArray[np.bool_],
        rest: NDArray[np.float64],
        more: IntArray | None = None,
    ) -> tuple[IntArray, NDArray[np.float32]]:
        """The ``k`` best ``allowed`` rows among the rows holding a term ``read`` in their block and ``more``.

        ``rest``: per block (or over every row), the bound of the terms not read. Each candidate's
        unread terms are looked up, most weighty first, while it can still reach ``theta``.
        """
        found: list[list[Part]] = [[] for _ in self.weights.terms]
        candidates, partial = self._candidates(read, found, more)
        first_count = candidates.size
        column = np.arange(first_count)  # each remaining candidate's place among the first ones
        if allowed is not None:
            keep = allowed[candidates]
            candidates, partial, column = candidates[keep], partial[keep], column[keep]
        if not set(np.flatnonzero(read.any(axis=1)).tolist()) <= self._scored_terms:  # else the seed scored them
            theta = max(theta, self._raised(k, candidates, partial))
        # The bound of each candidate's unread terms: one for all over every row, else that of its block.
        blocked = rest.size > 1
        of_block = self.block_of(candidates) if blocked else np.zeros(0, dtype=np.int64)
        unread: NDArray[np.float64] | float = rest[of_block] if blocked else float(rest[0])
        for number in [-1, *self._order[::-1].tolist()]:  # -1: the read terms alone; then the weightiest first
            if number >= 0:
                if not candidates.size:
                    break
                term, repeats, term_idf = self.weights.terms[number]
                if blocked:
                    bounds = self.bounds[number][of_block]
                    need = np.flatnonzero((bounds > 0) & ~read[number][of_block])
                    unread[need] -= bounds[need]  # type: ignore[index]
                elif read[number][0] or not self.bounds[number][0]:
                    continue
                else:
                    need = np.arange(candidates.size)
                    unread = float(unread) - float(self.bounds[number][0])
                held = need[_holding(self.blocks, self._starts, term, candidates[need])]
                for at, weight in self.weights.weights_at(candidates[held], self.blocks, term, term_idf):
                    partial[held[at]] += weight.astype(np.float64) * repeats
                    found[number].append((column[held[at]], weight))
            keep = (partial + np.maximum(unread, 0.0)) * (1 + ROUNDING) >= theta
            if not keep.all():
                candidates, partial, column = candidates[keep], partial[keep], column[keep]
                if blocked:
                    of_block, unread = of_block[keep], unread[keep]  # type: ignore[index]
        scores = self.weights.summed(first_count, found)[column]  # the same bits as scoring every row
        best = top_rows(scores, k, above=0.0)
        return candidates[best], scores[best]

    def _raised(self, k: int, candidates: IntArray, partial: NDArray[np.float64]) -> float:
        """A score at most the k-th best from the candidates' partial sums (0 when fewer than k).

        The k-th best partial sum bounds it (a partial sum is at most the score); with many
        candidates, the k-th best exact score of those whose read terms weigh most is closer.
        """
        if candidates.size < k:
            return 0.0
        theta = float(np.partition(partial, partial.size - k)[partial.size - k]) * (1 - ROUNDING)
        if candidates.size < RAISE_MIN_CANDIDATES * k:
            return theta
        best = top_rows(partial, RAISE_ROWS_PER_RESULT * k)
        scores = self.weights.row_scores(np.sort(candidates[best]), self.blocks)
        return max(theta, float(np.partition(scores, scores.size - k)[scores.size - k]))

    def _candidates(
        self,
        read: NDArray[np.bool_] | Sequence[NDArray[np.bool_] | None],
        found: list[list[Part]] | None = None,
        more: IntArray | None = None,
    ) -> tuple[IntArray, NDArray[np.float64]]:
        """The rows holding a term read in their block (ascending) and the sum of those terms' weights in each.

        ``read[i]``: the blocks where term ``i``'s postings are read (None: every block; one
        column: every block or none). ``found`` receives, per term, the ``(positions among the
        rows, weights)`` read. ``more``: rows that are candidates too (ascending), whatever they hold.
        """
        parts: Parts = []
        if more is not None and more.size:
            parts.append((more, np.zeros(more.size, dtype=np.float32), 1, -1))
        for number, (term, repeats, term_idf) in enumerate(self.weights.terms):
            blocks = read[number]
            if blocks is not None and not blocks.any():
                continue
            weighed = self._weighed[number]
            for segment, (postings, first_row) in enumerate(self.blocks):
                if postings.term_count(term) == 0:
                    continue
                lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
                local = postings.rows[lo:hi]
                mask = None
                if blocks is not None and blocks.size > 1:
                    mask = blocks[int(self._offsets[segment]) + (local >> block_max.BLOCK_SHIFT)]
                    mask = None if mask.all() else mask
                if mask is not None and segment not in weighed:
                    positions = np.flatnonzero(mask)
                    rows = local[positions].astype(np.int64) + first_row
                    weight = self.weights.weigh(postings.tf[lo + positions], rows, term_idf)
                else:
                    if segment not in weighed:
                        weighed[segment] = self.weights.term_weights(postings, first_row, term, term_idf)
                    rows, weight = weighed[segment]
                    if mask is not None:
                        rows, weight = rows[mask], weight[mask]
                if rows.size:
                    parts.append((rows, weight, repeats, number))
        return merged(parts, found)

    def _seed(self, k: int, allowed: NDArray[np.bool_] | None) -> float | None:
        """A score at most the k-th best (None: the rarest terms hold over the seed's budget of postings).

        The k-th best sum of the rarest terms' weights (a partial sum is at most the score), read
        until ``k`` rows hold one. When fewer than ``k`` rows qualify, the least positive float32:
        every row with a positive score is then a candidate, which is still exact.
        """
        budget = max(int(self.size * SEED_MAX_SHARE), 4 * k)
        rows = np.zeros(0, dtype=np.int64)
        partial = np.zeros(0, dtype=np.float64)
        chosen: list[NDArray[np.bool_] | None] = [np.zeros(0, dtype=bool)] * len(self.weights.terms)
        self._seed_terms: list[int] = []
        postings = 0
        for number in self._order[::-1].tolist():  # the weightiest (rarest) terms first
            postings += int(self.postings[number])
            if postings > budget:
                return None
            chosen[number] = None
            self._seed_terms.append(number)
            rows, partial = self._candidates(chosen)
            if allowed is not None:
                keep = allowed[rows]
                rows, partial = rows[keep], partial[keep]
            if rows.size >= k:
                break
        self._seeded = rows, partial
        if rows.size < k:
            return _LEAST
        return max(float(np.partition(partial, partial.size - k)[partial.size - k]) * (1 - ROUNDING), _LEAST)

    def _scored_seed(self, k: int, theta: float) -> float:
        """``theta`` raised to the k-th best exact score of the seed's rows that the rarest terms weigh most."""
        rows, partial = self._seeded
        if rows.size < k:
            return theta
        best = top_rows(partial, SEED_ROWS_PER_RESULT * k)
        scores = self.weights.row_scores(np.sort(rows[best]), self.blocks)
        self._scored_terms = set(self._seed_terms)
        return max(theta, float(np.partition(scores, scores.size - k)[scores.size - k]))

    def _essential_postings(self, theta: float) -> tuple[int, int]:
        """Postings MaxScore reads under ``theta`` (bounds over every row), and how many common terms it reads."""
        largest = self.bounds.max(axis=1)
        prefix = np.cumsum(largest[self._order]) * (1 + ROUNDING)
        essential = self._order[int(np.count_nonzero(prefix < theta)) :].tolist()
        common = set(self._common)
        return int(self.postings[essential].sum()), sum(1 for n in essential if n in common)


def merged(parts: Parts, found: list[list[Part]] | None) -> tuple[IntArray, NDArray[np.float64]]:
    """The distinct rows of ``parts`` (ascending) and the sum of their weights (times repeats) in each.

    ``found`` receives each part's positions among the distinct rows, by term. Each part's rows
    ascend: a stable sort merges the runs (timsort), several times faster than an accumulation
    over every row of a million.
    """
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    if len(parts) == 1:
        rows, weight, repeats, number = parts[0]
        if found is not None and number >= 0:
            found[number].append((np.arange(rows.size), weight))
        return rows, weight.astype(np.float64) * repeats
    rows = np.concatenate([part[0] for part in parts])
    weights = np.concatenate([part[1].astype(np.float64) * part[2] for part in parts])
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    first = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    slot = np.cumsum(first) - 1
    if found is not None:
        position = np.empty(rows.size, dtype=np.int64)
        position[order] = slot
        end = 0
        for part_rows, weight, _, number in parts:
            end += part_rows.size
            if number >= 0:
                found[number].append((position[end - part_rows.size : end], weight))
    return ordered[first], np.asarray(np.bincount(slot, weights[order]), dtype=np.float64)


def _holding(
    blocks: Sequence[tuple[Postings, int]], starts: NDArray[np.int64], term: int, rows: IntArray
) -> NDArray[np.bool_]:
    """Which of ``rows`` (ascending) hold ``term``."""
    if len(blocks) == 1:
        return holding(blocks[0][0], term, (rows - blocks[0][1]).astype(np.int32))
    held = np.zeros(rows.size, dtype=bool)
    edges = np.searchsorted(rows, np.append(starts, np.iinfo(np.int64).max))
    for segment, (postings, first_row) in enumerate(blocks):
        lo, hi = int(edges[segment]), int(edges[segment + 1])
        if hi > lo:
            held[lo:hi] = holding(postings, term, (rows[lo:hi] - first_row).astype(np.int32))
    return held


def pruned_top(
    weights: QueryWeights,
    size: int,
    blocks: Sequence[tuple[Postings, int]],
    k: int,
    allowed: NDArray[np.bool_] | None,
) -> tuple[IntArray, NDArray[np.float32]] | None:
    """The ``k`` best ``allowed`` rows scoring above 0 and their scores, or None where pruning cannot help.

    Exactly the rows, order (ties by row) and scores of a top-k over :meth:`QueryWeights.scores`.
    None (the caller scores every row) for the variants that credit absent terms, for queries of
    more than :data:`PRUNED_MAX_TERMS` terms, or where pruning would cost more than scoring every row.
    """
    if k <= 0 or not weights.terms:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    if weights.absent is not None or len(weights.terms) > PRUNED_MAX_TERMS:
        return None
    return PrunedTop(weights, size, blocks).top(k, allowed)
