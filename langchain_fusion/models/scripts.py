"""Which writing systems an embedding model reads, and whether it can read a query.

A model trained on English text embeds a Chinese or Japanese question as little more than noise:
on question -> passage sets the bundled model finds the right passage in its top 10 for 36-48% of
them, where BM25 finds 97-99%. Fusing that noise with equal weight costs the keyword side part of
its lead. A model may therefore declare the scripts it was trained on (``scripts``, a set of
Unicode script names such as ``{"Latin"}``); a query whose letters are mostly in other scripts is
one the model cannot read, and the fused search gives its vector side no weight for that query
(:func:`reads`). A model that declares nothing is taken to read every script.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import regex

from langchain_fusion.models.embeddings import model_behind

_LETTER = regex.compile(r"\p{L}")


def declared_scripts(embeddings: Any) -> frozenset[str] | None:
    """The scripts ``embeddings`` (or the model inside :class:`CachedEmbeddings`) reads; None: any script."""
    scripts = getattr(model_behind(embeddings), "scripts", None)
    return frozenset(scripts) if scripts is not None else None


@lru_cache(maxsize=16)
def _letters_in(scripts: frozenset[str]) -> Any:
    return regex.compile("[" + "".join(rf"\p{{{name}}}" for name in sorted(scripts)) + "]")


def reads(scripts: Iterable[str] | None, text: str) -> bool:
    """Whether a model reading ``scripts`` can read ``text``: at least half its letters are in them.

    Text without letters (numbers, codes of digits) is read by any model; ``scripts`` None reads all.
    """
    if scripts is None:
        return True
    letters = len(_LETTER.findall(text))
    if letters == 0:
        return True
    return 2 * len(_letters_in(frozenset(scripts)).findall(text)) >= letters
