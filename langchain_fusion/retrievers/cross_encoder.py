"""Local rerank with a cross-encoder: a model reads each (query, candidate) pair and scores it; best ``top_n`` kept.

:class:`CrossEncoderReranker` runs a sentence-transformers ``CrossEncoder`` (the ``local``
extra), e.g. ``cross-encoder/ms-marco-MiniLM-L6-v2``, on this machine: no API, no per-call cost,
and usually a large gain over the first-stage order for a few tens of candidates. It is one of
our rerankers (:class:`~langchain_fusion.retrievers.rerank_base.BaseReranker`): a
``BaseDocumentCompressor``, an LCEL step, and the rerank step of
:class:`~langchain_fusion.retrievers.rerank_retriever.RerankRetriever` and the RAG chain.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from pydantic import Field, PrivateAttr, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.retrievers.rerank_base import BaseReranker, descending, fusion_scores, reranked_copy


class CrossEncoderReranker(BaseReranker):
    """Rerank with a local cross-encoder: each distinct candidate text scored with the query; best ``top_n`` kept.

    The model loads on first use (or with :meth:`load_model`), once per reranker. Pairs are
    scored in batches of ``batch_size``; a pair longer than the model reads is truncated to
    ``max_length`` word pieces (default: the model's own limit, e.g. 512). Results are copies,
    ordered by ``rerank_score`` (the model's score; for the usual one-output rerank models a
    probability in [0, 1]), ties broken by fusion score, then by input order. Identical texts are
    scored once. The async methods run the model in a worker thread.
    """

    model: Any
    """The cross-encoder: a Hugging Face name (``"cross-encoder/ms-marco-MiniLM-L6-v2"``, from the local
    cache or downloaded when online), a folder holding a saved model, or a loaded sentence-transformers
    ``CrossEncoder``."""
    batch_size: int = Field(default=32, ge=1)
    """(query, text) pairs scored per forward pass."""
    device: str = "cpu"
    """Torch device the model runs on, when it is loaded by name or folder."""
    max_length: int | None = Field(default=None, ge=1)
    """Most word pieces of a (query, text) pair; longer pairs are truncated. None: the model's own limit.
    More than the model reads is refused."""

    _loaded: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @field_validator("model")
    @classmethod
    def _valid_model(cls, model: Any) -> Any:
        if isinstance(model, str):
            if not model.strip():
                raise InvalidParameterError("model must name a cross-encoder (a Hugging Face name or a folder)")
            return model
        if not callable(getattr(model, "predict", None)):
            raise InvalidParameterError(
                "model must be a Hugging Face name, a folder or a loaded sentence-transformers CrossEncoder; "
                f"got {type(model).__name__}"
            )
        return model

    @property
    def model_id(self) -> str:
        """The model's name or folder as given (its class name when a loaded model was given)."""
        if isinstance(self.model, str):
            return self.model
        name = getattr(getattr(self.model, "config", None), "_name_or_path", None)
        return name if isinstance(name, str) and name else type(self.model).__name__

    def load_model(self) -> Any:
        """Load the model now (otherwise on first use) and return it.

        Raises:
            MissingDependencyError: sentence-transformers is not installed (the ``local`` extra).
            ModelNotFoundError: no such folder, or a name neither cached nor downloadable.
            InvalidParameterError: ``max_length`` is more than the model reads.
        """
        with self._lock:
            if self._loaded is None:
                from langchain_fusion.models.cross_encoders import load_cross_encoder, set_max_length

                if isinstance(self.model, str):
                    self._loaded = load_cross_encoder(self.model, device=self.device, max_length=self.max_length)
                else:
                    set_max_length(self.model, self.model_id, self.max_length)
                    self._loaded = self.model
            return self._loaded

    def score(self, query: str, texts: list[str]) -> list[float | None]:
        """The model's score of each ``(query, text)`` pair (None where it is not a finite number)."""
        if not texts:
            return []
        model = self.load_model()
        raw = model.predict(
            [(query, text) for text in texts],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        values = np.asarray(raw, dtype=np.float64)
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        if values.shape != (len(texts),):
            raise InvalidParameterError(
                f"cross-encoder {self.model_id!r} gives {values.shape[-1] if values.ndim == 2 else values.shape} "
                "scores per pair; a rerank model gives one (e.g. cross-encoder/ms-marco-MiniLM-L6-v2)"
            )
        return [float(v) if math.isfinite(v) else None for v in values.tolist()]

    def _rerank(self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks) -> list[Document]:
        texts = list(dict.fromkeys(doc.page_content for doc in documents))
        score_of = dict(zip(texts, self.score(query, texts), strict=True))
        scores = [score_of[doc.page_content] for doc in documents]
        fusion = fusion_scores(documents)
        order = sorted(
            range(len(documents)),
            key=lambda p: (descending(scores[p]), descending(fusion[p]), p),  # no score (None) last
        )
        kept = order if top_n is None else order[:top_n]
        return [reranked_copy(documents[p], {keys.RERANK_SCORE: scores[p]}) for p in kept]

    async def _arerank(
        self, documents: list[Document], query: str, top_n: int | None, callbacks: Callbacks
    ) -> list[Document]:
        return await asyncio.to_thread(self._rerank, documents, query, top_n, callbacks)
