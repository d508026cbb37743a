"""Diversity: maximal marginal relevance over a fused ranking, and a cap on results per source.

Both choose ``k`` results from candidates given best first (the fused ranking), so they run
after fusion and after any relevance floor.

- **Maximal marginal relevance** (Carbonell and Goldstein, 1998) picks, one at a time, the
  candidate with the best ``lambda_mult * relevance - (1 - lambda_mult) * similarity``, where
  ``relevance`` is the candidate's fused score min-max scaled to [0, 1] over the candidates
  (so ``lambda_mult`` means the same for every fusion method) and ``similarity`` its largest
  cosine similarity to a candidate already picked, from the stored vectors. The first pick is
  the best fused candidate; ``lambda_mult=1`` returns the fused order; ties go to the better
  fused rank.
- **A cap per source** (``max_per_source``) skips a candidate once ``max_per_source`` results
  come from its source (the ``source`` metadata key) and takes the next one instead. With MMR
  the capped candidates are left out of the choice (they do not count as picked). Documents
  without a source are not capped.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray
from pydantic import BeforeValidator, Field

from langchain_fusion import metadata as keys
from langchain_fusion._checks import OptionGroup, Switch, is_real_number, is_whole_number
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.search.fusion import min_max

DEFAULT_MMR_WEIGHT = 0.5
"""The weight of relevance when MMR is asked for without one (LangChain's default)."""


def check_lambda_mult(value: Any, *, optional: bool = True) -> float | None:
    """The relevance weight of maximal marginal relevance: a number in [0, 1] (None: no MMR, where allowed)."""
    if value is None and optional:
        return None
    if not is_real_number(value) or not 0.0 <= float(value) <= 1.0:
        off = ", or None for no MMR" if optional else ""
        raise InvalidParameterError(
            f"lambda_mult must be a number between 0 (most diverse) and 1 (most relevant){off}; got {value!r}"
        )
    return float(value)


def check_max_per_source(value: Any) -> int | None:
    """The most results from one source: a whole number >= 1, or None for no cap."""
    if value is None:
        return None
    if not is_whole_number(value) or value < 1:
        raise InvalidParameterError(
            f"max_per_source must be a positive whole number (results per source), or None for no cap; got {value!r}"
        )
    return int(value)


class DiversityOptions(OptionGroup):
    """How one search spreads its results; both None: the plain fused top ``k``. See the module docstring."""

    lambda_mult: Annotated[
        Annotated[float, Field(ge=0.0, le=1.0)] | None,
        BeforeValidator(check_lambda_mult),
        Switch(
            "mmr",
            DEFAULT_MMR_WEIGHT,
            "re-rank the best fetch_k fused candidates by maximal marginal relevance, so that near-copies of one "
            "passage do not fill the results",
            "with --mmr, the weight of relevance against diversity, 0 to 1 (1: the fused order)",
            "the weight of maximal marginal relevance",
        ),
    ] = None
    """Diversity by maximal marginal relevance among the best fetch_k fused candidates: the weight of relevance
    against variety, 0 to 1 (1: the fused order). None: no MMR."""
    max_per_source: Annotated[Annotated[int, Field(ge=1)] | None, BeforeValidator(check_max_per_source)] = None
    """At most this many results from one source (file), the next best taking the place of the others.
    None: no cap."""

    @property
    def diversifies(self) -> bool:
        """True when it changes what a plain fused search returns (MMR or a cap per source)."""
        return self.lambda_mult is not None or self.max_per_source is not None

    @property
    def caps_sources(self) -> bool:
        """True when results are capped per source (choosing needs the candidates' sources)."""
        return self.max_per_source is not None

    @property
    def reads_vectors(self) -> bool:
        """True when choosing needs the candidates' vectors (MMR)."""
        return self.lambda_mult is not None

    @property
    def diversity_label(self) -> str:
        """The setting in a few words, as an evaluation report names its row (empty: no diversity)."""
        parts = [] if self.lambda_mult is None else [f"mmr lambda={self.lambda_mult:g}"]
        if self.max_per_source is not None:
            parts.append(f"max {self.max_per_source} per source")
        return ", ".join(parts)

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> DiversityOptions:
        """The diversity part of a mapping of options (the others ignored), each value checked."""
        return cls(**{name: value for name, value in options.items() if name in cls.model_fields})

    @classmethod
    def fields_of(cls, model: Any) -> DiversityOptions:
        """The diversity fields of a model that has them (a retriever), as set on it; none: no diversity."""
        found = getattr(type(model), "model_fields", {})
        return cls(**{name: getattr(model, name) for name in cls.model_fields if name in found})

    @classmethod
    def with_mmr(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with maximal marginal relevance on (``search_type="mmr"``): their weight, else the default."""
        if options.get("lambda_mult", DEFAULT_MMR_WEIGHT) is None:
            raise InvalidParameterError("search_type='mmr' needs a lambda_mult between 0 and 1; drop lambda_mult=None")
        return {"lambda_mult": DEFAULT_MMR_WEIGHT, **options}

    def over(self, base: DiversityOptions) -> DiversityOptions:
        """These options where they were given (even as None), ``base``'s elsewhere."""
        return base.model_copy(update={name: getattr(self, name) for name in self.model_fields_set})

    @classmethod
    def compared(cls, grids: Mapping[str, Sequence[Any]], given: Mapping[str, Any]) -> list[DiversityOptions]:
        """The settings to compare: one per value of each option's grid, then the given options (if they diversify).

        Each value is checked (an InvalidParameterError before any work).
        """
        settings = [cls(**{name: value}) for name, values in grids.items() for value in values]
        fixed = cls.of(given)
        return [*settings, fixed] if fixed.diversifies else settings

    def cap_groups(self, documents: Sequence[Document]) -> NDArray[np.int64] | None:
        """The source group of each candidate when results are capped per source (None: no cap)."""
        return None if self.max_per_source is None else source_groups(documents)

    def within_cap(self, documents: Sequence[Document], k: int) -> NDArray[np.int64]:
        """Positions of the first ``k`` documents (in order) within the cap per source."""
        return pick_in_order(len(documents), k, self.cap_groups(documents), self.max_per_source).positions

    def choose(
        self,
        relevance: NDArray[np.floating],
        vectors: NDArray[np.floating] | None,
        k: int,
        groups: NDArray[np.int64] | None,
        copies: NDArray[np.int64] | None = None,
    ) -> Picks:
        """Choose ``k`` of the candidates (best first, with their fused ``relevance``): by MMR, else in order.

        ``groups`` come from :meth:`cap_groups`; ``vectors`` are needed when :attr:`reads_vectors`.
        """
        if self.lambda_mult is None:
            return pick_in_order(relevance.size, k, groups, self.max_per_source, copies)
        if vectors is None:
            raise ValueError("maximal marginal relevance needs the candidates' vectors")
        return mmr_picks(relevance, vectors, k, self.lambda_mult, groups, self.max_per_source, copies)


def source_groups(documents: Sequence[Document]) -> NDArray[np.int64]:
    """A group number per document, equal for equal ``source`` metadata; -1 for documents without one."""
    seen: dict[Hashable, int] = {}
    groups = np.full(len(documents), -1, dtype=np.int64)
    for position, doc in enumerate(documents):
        source: Any = doc.metadata.get(keys.SOURCE)
        if source is None:
            continue
        key = source if isinstance(source, Hashable) else repr(source)
        groups[position] = seen.setdefault(key, len(seen))
    return groups


PASSED_OVER_DUPLICATE = "duplicate"
"""Why a selection passed over a candidate: it is a copy of a chosen one (see search.duplicates)."""
PASSED_OVER_CAPPED = "capped"
"""Why a selection passed over a candidate: ``max_per_source`` results already came from its source."""


@dataclass(frozen=True)
class Picks:
    """The candidates a selection chose, and those it passed over on the way, with why."""

    positions: NDArray[np.int64]
    """Positions of the chosen candidates, in result order."""
    passed_over: Mapping[int, str] = field(default_factory=dict)
    """Positions left out before the selection ended: :data:`PASSED_OVER_DUPLICATE` or :data:`PASSED_OVER_CAPPED`."""


def pick_in_order(
    count: int,
    k: int,
    groups: NDArray[np.int64] | None = None,
    max_per_group: int | None = None,
    copies: NDArray[np.int64] | None = None,
) -> Picks:
    """The first ``k`` of ``count`` candidates (in order), skipping copies of a chosen one and full groups.

    ``copies[i]`` names the candidate ``i`` is a copy of (itself if none; see
    :func:`~langchain_fusion.search.duplicates.duplicate_groups`): a candidate is skipped when
    one of its copies was chosen. ``groups`` (-1: no group) with ``max_per_group`` caps the
    choices per group; a capped candidate does not block its copies.
    """
    counts: dict[int, int] = {}
    chosen: list[int] = []
    taken: set[int] = set()
    passed_over: dict[int, str] = {}
    for position in range(count):
        if len(chosen) == k:
            break
        if copies is not None and int(copies[position]) in taken:
            passed_over[position] = PASSED_OVER_DUPLICATE
            continue
        group = -1 if groups is None or max_per_group is None else int(groups[position])
        if group >= 0:
            if counts.get(group, 0) >= max_per_group:  # type: ignore[operator]  # set with groups
                passed_over[position] = PASSED_OVER_CAPPED
                continue
            counts[group] = counts.get(group, 0) + 1
        chosen.append(position)
        if copies is not None:
            taken.add(int(copies[position]))
    return Picks(np.asarray(chosen, dtype=np.int64), passed_over)


def capped(groups: NDArray[np.int64], k: int, max_per_group: int) -> NDArray[np.int64]:
    """Positions of the first ``k`` items (in order) with at most ``max_per_group`` per group (-1: no group)."""
    return pick_in_order(groups.size, k, groups, max_per_group).positions


def maximal_marginal_relevance(
    relevance: NDArray[np.floating],
    vectors: NDArray[np.floating],
    k: int,
    lambda_mult: float,
    groups: NDArray[np.int64] | None = None,
    max_per_group: int | None = None,
) -> NDArray[np.int64]:
    """Positions of up to ``k`` candidates picked by MMR, in pick order (see :func:`mmr_picks`)."""
    return mmr_picks(relevance, vectors, k, lambda_mult, groups, max_per_group).positions


def mmr_picks(
    relevance: NDArray[np.floating],
    vectors: NDArray[np.floating],
    k: int,
    lambda_mult: float,
    groups: NDArray[np.int64] | None = None,
    max_per_group: int | None = None,
    copies: NDArray[np.int64] | None = None,
) -> Picks:
    """Up to ``k`` candidates picked by MMR, in pick order (see the module docstring).

    ``relevance`` is aligned with the rows of ``vectors`` (unit vectors) and is scaled to
    [0, 1] here; ``groups`` (-1: no group) with ``max_per_group`` caps the picks per group;
    ``copies`` (as for :func:`pick_in_order`) removes a pick's copies from the choice.
    """
    size = int(np.asarray(relevance).size)
    scaled = min_max(np.asarray(relevance, dtype=np.float64))
    closest = np.zeros(size, dtype=np.float64)  # largest similarity to a pick; no penalty before the first
    available = np.ones(size, dtype=bool)
    counts: dict[int, int] = {}
    picked: list[int] = []
    passed_over: dict[int, str] = {}
    while len(picked) < k and available.any():
        score = lambda_mult * scaled - (1.0 - lambda_mult) * closest if picked else scaled.copy()
        score[~available] = -np.inf
        choice = int(np.argmax(score))  # the first maximum: ties go to the better fused rank
        picked.append(choice)
        available[choice] = False
        if copies is not None:
            _pass_over(available, copies == copies[choice], PASSED_OVER_DUPLICATE, passed_over)
        if groups is not None and max_per_group is not None and groups[choice] >= 0:
            group = int(groups[choice])
            counts[group] = counts.get(group, 0) + 1
            if counts[group] >= max_per_group:
                _pass_over(available, groups == group, PASSED_OVER_CAPPED, passed_over)
        similarity = np.asarray(vectors @ vectors[choice], dtype=np.float64)
        closest = similarity if len(picked) == 1 else np.maximum(closest, similarity)
    return Picks(np.asarray(picked, dtype=np.int64), passed_over)


def _pass_over(available: NDArray[np.bool_], which: NDArray[np.bool_], why: str, passed_over: dict[int, str]) -> None:
    """Take ``which`` out of the ``available`` candidates, recording why for those still available."""
    for position in np.flatnonzero(available & which).tolist():
        passed_over[position] = why
    available &= ~which
