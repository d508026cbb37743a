"""What an LLM reranker asks and how it reads the answer: the prompts, the structured output schemas, the parsers.

:func:`parse_rating` reads a pointwise answer (a 1-10 rating), :func:`parse_ranking` a listwise one
(document numbers, most relevant first), from structured output or from text; an answer with no
usable rating raises :class:`RatingError`, which the rerankers log and never raise to callers.
"""

from __future__ import annotations

import math
import re
from typing import Any

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, Field

from langchain_fusion.models.prompts import answer_text

DEFAULT_RATING_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You judge how relevant a document is to a search query."),
        (
            "human",
            "Rate the relevance of the following document to the query on a scale from 1 to 10. "
            "Consider the specific context and intent of the query, not just keyword matches: "
            "1 means unrelated, 10 means the document answers the query directly.\n\n"
            "Query: {query}\n\nDocument:\n{document}\n\n"
            "Relevance rating (a whole number from 1 to 10):",
        ),
    ]
)
"""The pointwise prompt (after the well-known rerank tutorial); variables ``query``, ``document``."""

DEFAULT_RANKING_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You rank documents by how relevant they are to a search query."),
        (
            "human",
            "Rank the numbered documents below by their relevance to the query, most relevant first. "
            "Consider the specific context and intent of the query, not just keyword matches. Use each "
            "document number at most once; leave out documents that are unrelated.\n\n"
            "Query: {query}\n\n{documents}\n\nDocument numbers, most relevant first:",
        ),
    ]
)
"""The listwise prompt; variables ``query`` and ``documents`` (numbered ``[1] ...`` passages)."""


class RelevanceRating(BaseModel):
    """How relevant a document is to a search query."""

    rating: int = Field(description="Relevance from 1 (unrelated) to 10 (answers the query directly).")
    reason: str | None = Field(default=None, description="One short sentence explaining the rating.")


class Ranking(BaseModel):
    """Document numbers ordered by relevance to the query, most relevant first."""

    ids: list[int] = Field(description="Document numbers, most relevant first; each at most once.")


class RatingError(ValueError):
    """A model's answer held no usable rating or ranking (logged; never raised to callers)."""


def _text_of(output: Any) -> str:
    """The text of a model answer (see :func:`~langchain_fusion.models.prompts.answer_text`), or a RatingError."""
    try:
        return answer_text(output)
    except ValueError:
        raise RatingError(f"expected a rating, got {type(output).__name__}: {output!r:.80}") from None


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")


def parse_rating(output: Any) -> int:
    """A 1-10 rating from a model's answer: a RelevanceRating, a dict, a number or text.

    Text gives its first number (rounded to the nearest whole number). Raises
    :class:`RatingError` when there is none or it is outside 1-10.
    """
    if isinstance(output, RelevanceRating):
        value: Any = output.rating
    elif isinstance(output, dict) and "rating" in output:
        value = output["rating"]
    elif isinstance(output, (int, float)) and not isinstance(output, bool):
        value = output
    else:
        text = _text_of(output)
        match = _NUMBER.search(text)
        if match is None:
            raise RatingError(f"no number in the answer {text.strip()[:80]!r}")
        value = float(match.group(1))
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise RatingError(f"the rating {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RatingError(f"the rating {value!r} is not a number")
    if not 1 <= value <= 10:  # before rounding: 10.4 and 0.6 are out of range, not 10 and 1
        raise RatingError(f"the rating {value!r} is outside 1-10")
    return math.floor(value + 0.5)


def parse_ranking(output: Any, count: int) -> tuple[list[int], list[str]]:
    """The valid 1-based ids of a listwise answer, and what was wrong with the others.

    Accepts a :class:`Ranking`, a dict with ``ids``, a list of ids, or text (its numbers in
    order). Ids that are not whole numbers, out of ``1..count`` or repeated are dropped.
    """
    if isinstance(output, Ranking):
        raw: list[Any] = list(output.ids)
    elif isinstance(output, dict) and "ids" in output:
        raw = list(output["ids"])
    elif isinstance(output, (list, tuple)):
        raw = list(output)
    else:
        raw = [float(m) for m in _NUMBER.findall(_text_of(output))]
    valid: list[int] = []
    problems: list[str] = []
    for item in raw:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item.strip())
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int):
            problems.append(f"{item!r} is not a document number")
        elif not 1 <= item <= count:
            problems.append(f"{item} is out of range 1-{count}")
        elif item in valid:
            problems.append(f"{item} is repeated")
        else:
            valid.append(item)
    return valid, problems
