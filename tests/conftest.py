"""Shared fixtures: deterministic embeddings, small corpora and the sample data."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import FusionIndex

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
SAMPLE_PDF = DATA / "arden-microgrids-report.pdf"
SAMPLE_MD = DATA / "maintenance-handbook.md"
SAMPLE_QUERIES = DATA / "queries.json"

_WORD = re.compile(r"\w+")


class HashingEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings: each lowercased word adds a fixed random vector.

    Texts that share words get similar vectors, so retrieval results are meaningful, and the
    same text always gives the same vector (no model, no network).
    """

    def __init__(self, size: int = 64, model: str = "hashing-v1") -> None:
        self.size = size
        self.model = model

    def _word_vector(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(f"{self.model}:{word}".encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.size)

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.size)
        for word in _WORD.findall(text.lower()):
            vector += self._word_vector(word)
        if not vector.any():
            vector[0] = 1.0
        return (vector / np.linalg.norm(vector)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


BAD_SELECTION_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"min_vector_score": 2.0}, "min_vector_score must be a cosine similarity between -1 and 1"),
    ({"min_vector_score": True}, "min_vector_score must be"),
    ({"min_bm25_score": -0.5}, "min_bm25_score must be a BM25 score of 0 or more"),
    ({"lambda_mult": float("nan")}, "lambda_mult must be a number between 0"),
    ({"max_per_source": 0}, "max_per_source must be a positive whole number"),
    ({"max_per_source": False}, "max_per_source must be"),
]
"""Floor and diversity options with bad values, and the start of the message that refuses each
(the same on every surface: constructor, per call, server and MCP)."""


ANIMALS = [
    "The cat sat on the warm mat by the fire.",
    "Dogs bark loudly at the postman every morning.",
    "A cat and a dog can become good friends.",
    "Quantum physics describes particles and waves.",
    "Cats purr when they are content and relaxed.",
    "The stock market fell sharply on Tuesday.",
    "Parrots can learn to imitate human speech.",
    "Photosynthesis turns sunlight into chemical energy.",
]


@pytest.fixture
def embeddings() -> HashingEmbeddings:
    return HashingEmbeddings()


@pytest.fixture
def animal_docs() -> list[Document]:
    return [
        Document(page_content=text, metadata={"source": f"doc{i}.txt", "group": "even" if i % 2 == 0 else "odd"})
        for i, text in enumerate(ANIMALS)
    ]


@pytest.fixture
def animal_index(animal_docs: list[Document], embeddings: HashingEmbeddings) -> FusionIndex:
    return FusionIndex.from_documents(animal_docs, embeddings)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a tiny random BERT cross-encoder (see tests/tiny_models.py), built once per session."""
    from tests.tiny_models import build_cross_encoder

    return build_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "tiny")
