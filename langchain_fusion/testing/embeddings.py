"""Deterministic fake embeddings for tests: no model, no network, the same vector for the same text.

:class:`HashingEmbeddings` is a bag of words: each lowercased word adds a fixed random vector,
so texts that share words get similar vectors and retrieval results mean something. The store
contract (:mod:`langchain_fusion.testing.store_contract`) embeds with it.
"""

from __future__ import annotations

import functools
import hashlib
import re

import numpy as np
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=1 << 16)
def word_vector(model: str, size: int, word: str) -> NDArray[np.float64]:
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
        """Vectors of ``size`` dimensions; ``model`` names the vectors (another name, other vectors)."""
        self.size = size
        """The dimension of the vectors."""
        self.model = model
        """The name of this model's vectors (part of its id in a saved index)."""

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.size)
        for word in _WORD.findall(text.lower()):
            vector += word_vector(self.model, self.size, word)
        if not vector.any():
            vector[0] = 1.0
        unit: list[float] = (vector / np.linalg.norm(vector)).tolist()
        return unit

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The unit vector of ``text`` (as a document of the same text)."""
        return self._embed(text)
