"""Deterministic fake embeddings (no model, no network), and the CLI switched over to them."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_fusion.models import embeddings as embedding_models

_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=1 << 16)
def word_vector(model: str, size: int, word: str) -> np.ndarray:
    """The fixed random vector of ``word`` (seeded by a hash of the model and the word), read-only.

    Kept: seeding a generator per word was a fifth of the CPU of the tests that embed many texts.
    """
    seed = int.from_bytes(hashlib.sha256(f"{model}:{word}".encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(size)
    vector.flags.writeable = False
    return vector


class HashingEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings: each lowercased word adds a fixed random vector.

    Texts that share words get similar vectors, so retrieval results are meaningful, and the
    same text always gives the same vector (no model, no network).
    """

    def __init__(self, size: int = 64, model: str = "hashing-v1") -> None:
        self.size = size
        self.model = model

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.size)
        for word in _WORD.findall(text.lower()):
            vector += word_vector(self.model, self.size, word)
        if not vector.any():
            vector[0] = 1.0
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


class EnglishOnlyEmbeddings(HashingEmbeddings):
    """The fake embeddings, declaring that they read Latin script only, as the bundled model does."""

    scripts: ClassVar[frozenset[str]] = frozenset({"Latin"})


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
