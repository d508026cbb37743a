"""Duplicates: the same passage under several files returned once, with the other copies listed.

A corpus often holds one text several times: a page copied into two reports, a file saved
under two names, a boilerplate paragraph. Each copy is its own chunk (its own id and source),
so a search would return the same text several times and push other results out of the ``k``.
The ``duplicates`` search option (:class:`DuplicateOptions`) collapses them:

- ``"exact"`` (the default): chunks whose text (``page_content``, whitespace runs counted as one
  space) is identical are copies. Chunks with no text are never copies.
- ``"near"``: also a chunk whose stored vector has a cosine similarity of at least
  ``near_duplicate_similarity`` (0.95 by default) with the vector of an earlier, better-ranked
  candidate that is not itself a copy. Measured on the bundled model over the sample handbook's
  long paragraphs (``benchmarks/near_duplicates.py``): a copy with one word changed scores
  0.959-0.997 with its original, one with its last tenth cut 0.967-0.996, one with three words
  changed 0.873-0.969 (62% above 0.95), and two different paragraphs at most 0.467. Models whose
  cosines crowd near 1 (some hosted models) may want a higher threshold.
- ``"keep"``: every copy is a result of its own.

Collapsing is a choice among the fused candidates, best first, made before the ``k`` results are
counted (so ``k`` results still come back when the candidates hold ``k`` distinct texts): the
best-ranked copy that may be returned (that clears the relevance floors and, under a cap
per source, whose source is not full) is the result, with its own scores, and
``metadata["also_in"]`` lists the other copies among the candidates read (at least the best
``2 * k``; with maximal marginal relevance, its candidates), best first (see :func:`copies_entry`).
With maximal marginal relevance, picking a copy removes its other copies from the choice.

Single-side retrievers (``VectorRetriever``, ``BM25Retriever``) and LangChain's ``VectorStore``
searches return every copy; so ``alpha=1`` (or 0) equals the single side exactly with
``duplicates="keep"``, or when no text repeats.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any, Literal, cast, get_args

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray
from pydantic import BeforeValidator, Field

from langchain_fusion import metadata as keys
from langchain_fusion._checks import OptionGroup, is_real_number
from langchain_fusion.errors import InvalidParameterError

DuplicateMode = Literal["exact", "near", "keep"]
"""``exact``: collapse identical texts (the default); ``near``: also near-identical vectors; ``keep``: every copy."""

DUPLICATE_MODES: tuple[str, ...] = get_args(DuplicateMode)
"""The accepted values of the ``duplicates`` option."""

DEFAULT_NEAR_DUPLICATE_SIMILARITY = 0.95
"""The cosine similarity from which ``duplicates="near"`` counts two chunks as copies (see the module docstring)."""


def check_duplicates(value: Any) -> DuplicateMode:
    """How copies are returned: one of :data:`DUPLICATE_MODES`."""
    if not isinstance(value, str) or value not in DUPLICATE_MODES:
        raise InvalidParameterError(
            f"duplicates must be one of {', '.join(DUPLICATE_MODES)} (exact: identical texts are returned once; "
            f"near: near-identical ones too; keep: every copy); got {value!r}"
        )
    return cast(DuplicateMode, value)


def check_near_duplicate_similarity(value: Any) -> float:
    """The cosine similarity that makes two chunks near duplicates: a number in [0, 1]."""
    if not is_real_number(value) or not 0.0 <= float(value) <= 1.0:
        raise InvalidParameterError(
            f"near_duplicate_similarity must be a cosine similarity between 0 and 1 (0.95: near-identical texts); "
            f"got {value!r}"
        )
    return float(value)


class DuplicateOptions(OptionGroup):
    """How copies of one text (the same passage under several files) are returned; see the module docstring."""

    duplicates: Annotated[DuplicateMode, BeforeValidator(check_duplicates)] = "exact"
    """Copies of one passage: exact returns chunks with identical text once (the best-ranked copy, whose
    metadata also_in lists the others); near also collapses chunks whose vectors have a cosine similarity of at least
    near_duplicate_similarity; keep returns every copy. Collapsed before k is counted."""
    near_duplicate_similarity: Annotated[
        float, BeforeValidator(check_near_duplicate_similarity), Field(ge=0.0, le=1.0)
    ] = DEFAULT_NEAR_DUPLICATE_SIMILARITY
    """With duplicates=near: the cosine similarity of two chunks' vectors from which they are copies (0.95:
    near-identical texts)."""

    @property
    def collapses_copies(self) -> bool:
        """True when copies are collapsed (not ``keep``)."""
        return self.duplicates != "keep"

    @property
    def copies_by_vector(self) -> bool:
        """True when the stored vectors decide too (``near``)."""
        return self.duplicates == "near"


def text_key(text: str) -> str:
    """What two copies have in common: the text with its whitespace runs as single spaces."""
    return " ".join(text.split())


def duplicate_groups(
    texts: Sequence[str], vectors: NDArray[np.floating] | None = None, similarity: float = 1.0
) -> NDArray[np.int64]:
    """For candidates given best first (their texts), the position of the first candidate each is a copy of.

    A candidate that is no copy gets its own position. Copies by text (see :func:`text_key`);
    with ``vectors`` (unit vectors aligned with ``texts``), also a candidate whose cosine
    similarity with the first member of an earlier group is at least ``similarity``: the
    closest such group, the better-ranked on a tie.
    """
    groups = np.arange(len(texts), dtype=np.int64)
    first_of: dict[str, int] = {}
    leaders: list[int] = []
    matrix = None if vectors is None else np.asarray(vectors, dtype=np.float64)
    for position, key in enumerate(_keys_of_possible_copies(texts)):
        found = first_of.get(key) if key else None
        if found is None and matrix is not None and leaders:
            closeness = matrix[leaders] @ matrix[position]
            best = int(np.argmax(closeness))
            if closeness[best] >= similarity:
                found = leaders[best]
        if found is not None:
            groups[position] = found
            continue
        leaders.append(position)
        if key:
            first_of[key] = position
    return groups


def _keys_of_possible_copies(texts: Sequence[str]) -> list[str | None]:
    """The :func:`text_key` of each text that may be a copy of another; None for the rest.

    Copies share their first and last words, which are found without reading a whole text: only
    texts that share both with another one are normalised (a search's candidates rarely repeat).
    """
    ends = [_first_and_last_word(text) for text in texts]
    shared = Counter(end for end in ends if end is not None)
    return [None if end is None or shared[end] < 2 else text_key(text) for text, end in zip(texts, ends, strict=True)]


def _first_and_last_word(text: str) -> tuple[str, str] | None:
    """The first and last words of ``text`` (None when it has none): equal for texts with one :func:`text_key`."""
    first = text.split(None, 1)
    return None if not first else (first[0], text.rsplit(None, 1)[-1])


def copies_entry(document: Document) -> dict[str, Any]:
    """How a copy is listed in ``metadata["also_in"]``: its id and its source (None when it has none)."""
    return {"id": document.id, keys.SOURCE: document.metadata.get(keys.SOURCE)}


def copies_of(groups: NDArray[np.int64], chosen: NDArray[np.int64]) -> list[list[int]]:
    """For each chosen position, the other positions of its group (from :func:`duplicate_groups`), in order."""
    return [[int(i) for i in np.flatnonzero(groups == groups[c]).tolist() if i != c] for c in chosen.tolist()]
