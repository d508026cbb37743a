"""Deterministic fake embeddings (no model, no network), and the CLI switched over to them.

:class:`HashingEmbeddings` is the library's own (:mod:`langchain_fusion.testing`); the variants here declare
scripts or carry no signal for some, as models do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
import regex

from langchain_fusion.models import embeddings as embedding_models
from langchain_fusion.models.probe_texts import PROBES
from langchain_fusion.testing.embeddings import HashingEmbeddings, word_vector

__all__ = [
    "CJK_SCRIPTS",
    "FAKE_DIMENSION",
    "FAKE_ID",
    "EnglishOnlyEmbeddings",
    "HashingEmbeddings",
    "ScriptBlindEmbeddings",
    "fake_cli_embeddings",
    "word_vector",
]

_LETTER = regex.compile(r"\p{L}")


class EnglishOnlyEmbeddings(HashingEmbeddings):
    """The fake embeddings, declaring that they read Latin script only, as the bundled model does."""

    scripts: ClassVar[frozenset[str]] = frozenset({"Latin"})


CJK_SCRIPTS = frozenset({"Han", "Hiragana", "Katakana", "Hangul"})
"""The scripts :class:`ScriptBlindEmbeddings` cannot read by default."""


class ScriptBlindEmbeddings(HashingEmbeddings):
    """A model that declares nothing and carries no signal for text mostly in ``blind`` scripts.

    Such text becomes one fixed vector plus a small perturbation seeded by the text (what an English-only
    model gives a Chinese question: the same region, told apart by noise). The other scripts it reads as a
    reading model reads the probe of :mod:`langchain_fusion.models.scripts` (each statement and its question
    on one topic vector); any other text is embedded as :class:`HashingEmbeddings` embeds it. Counts its
    ``embed_documents`` calls (``document_calls``) and the texts of them (``documents``).
    """

    def __init__(self, blind: frozenset[str] = CJK_SCRIPTS, size: int = 64) -> None:
        super().__init__(size, model="script-blind-v1")
        self.blind = blind
        self.document_calls = 0
        self.documents = 0
        self._blind = regex.compile("[" + "".join(rf"\p{{{name}}}" for name in sorted(blind)) + "]")
        self._topics = {text: i for probe in PROBES for i, pair in enumerate(probe.pairs) for text in pair}

    def _embed(self, text: str) -> list[float]:
        letters = len(_LETTER.findall(text))
        if letters and 2 * len(self._blind.findall(text)) > letters:
            vector = word_vector(self.model, self.size, "<blind>") + 0.05 * word_vector(self.model, self.size, text)
        elif text in self._topics:
            topic = word_vector(self.model, self.size, f"<topic {self._topics[text]}>")
            vector = topic + 0.3 * word_vector(self.model, self.size, text)
        else:
            return super()._embed(text)
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        self.documents += len(texts)
        return super().embed_documents(texts)


FAKE_ID = embedding_models.embeddings_id(HashingEmbeddings())
"""The id a saved index records for :class:`HashingEmbeddings`."""
FAKE_DIMENSION = HashingEmbeddings().size
"""The dimension of :class:`HashingEmbeddings` vectors."""


@contextlib.contextmanager
def fake_cli_embeddings() -> Iterator[None]:
    """While open, every embedding model the CLI builds or reloads is a :class:`HashingEmbeddings`.

    The default model, the bundled model's spec (``--embeddings local``) and a saved index's recorded
    fake id give the fake; any other spec or id resolves as usual (``openai`` still needs its key,
    ``bogus`` is still refused). The bundled model refuses to load meanwhile, so a test that slips
    back to it fails instead of quietly taking seconds. Usable around module-scoped fixtures.
    """
    real_resolve, real_from_id = embedding_models.resolve_embeddings, embedding_models.embeddings_from_id
    local_specs = {None, "auto", "local", f"local:{embedding_models.LOCAL_MODEL_NAME}"}

    def resolve(spec: str | None) -> Any:
        return HashingEmbeddings() if spec in local_specs else real_resolve(spec)

    def from_id(model_id: str) -> Any:
        return HashingEmbeddings() if model_id == FAKE_ID else real_from_id(model_id)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the bundled model was used under fake_cli_embeddings()")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedding_models, "default_embeddings", HashingEmbeddings)
        patch.setattr("langchain_fusion.index.fusion_index.default_embeddings", HashingEmbeddings)
        patch.setattr("langchain_fusion.index.embedding.default_embeddings", HashingEmbeddings)
        patch.setattr(embedding_models, "resolve_embeddings", resolve)
        patch.setattr("langchain_fusion.index.embedding.embeddings_from_id", from_id)
        patch.setattr(embedding_models.LocalEmbeddings, "load_model", refuse)
        patch.setattr(embedding_models.LocalEmbeddings, "embed_queries", refuse)
        yield
