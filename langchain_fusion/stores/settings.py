"""What a store records about how its rows were indexed: plain data, saved with the rows.

A store (in process or distributed) keeps one :class:`StoreSettings`: the embedding model and
dimension of the vector side, the analyzer and BM25 parameters of the keyword side, and which
text fields each side indexed. Reopening a store with another model is refused by the index.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, TextField
from langchain_fusion.stores.analyzer import Analyzer

MAX_DIMENSION = 1 << 16
"""The largest embedding dimension an index records (models today use a few thousand at most)."""

BM25Method = Literal["lucene", "robertson", "atire", "bm25l", "bm25+"]
"""The BM25 variants (Kamphuis et al., ECIR 2020), named as bm25s names them."""


class BM25Params(BaseModel):
    """BM25 scoring parameters (plain data, recorded in the index manifest)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    k1: float = Field(default=0.9, gt=0, allow_inf_nan=False)
    """Term-frequency saturation: higher lets repeated terms count for more (0.9: Anserini's BEIR default)."""
    b: float = Field(default=0.4, ge=0, le=1)
    """Length normalisation: 0 ignores chunk length, 1 normalises fully (0.4: Anserini's BEIR default)."""
    method: BM25Method = "lucene"
    """The scoring variant. ``lucene`` (the default) never gives negative IDF."""
    delta: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    """The delta of the bm25l and bm25+ variants; ignored by the others."""


class StoreSettings(BaseModel):
    """How the rows of a store were indexed; the description every store gives of itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embeddings_id: str | None = None
    """Identifier of the embedding model that made the vectors (None until the first row)."""
    dimension: int | None = Field(default=None, ge=1, le=MAX_DIMENSION)
    """Embedding dimension (None until the first row)."""
    analyzer: Analyzer = Field(default_factory=Analyzer)
    """How the BM25 side tokenizes text."""
    bm25_params: BM25Params = Field(default_factory=BM25Params)
    """BM25 parameters of the keyword side."""
    embed_fields: tuple[TextField, ...] = DEFAULT_TEXT_FIELDS
    """What was embedded for each document (see :func:`~langchain_fusion.metadata.indexed_text`)."""
    bm25_fields: tuple[TextField, ...] = DEFAULT_TEXT_FIELDS
    """What BM25 indexed for each document."""
    tenant_key: str | None = None
    """The metadata key that holds each document's tenant in a tenant-keyed store (see
    :mod:`~langchain_fusion.stores.tenants`); None: one corpus."""
