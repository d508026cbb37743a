"""Top-k searches on one field of the collection: the dense vector (cosine) and the BM25 sparse field."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.stores.base import FloatMatrix, Keys, Scores, Where
from langchain_fusion.stores.local.tokens import tokenize
from langchain_fusion.stores.local.vectors import exact_products
from langchain_fusion.stores.milvus import reads
from langchain_fusion.stores.milvus.expressions import filter_expression, id_filter

if TYPE_CHECKING:
    from langchain_fusion.stores.milvus.view import MilvusView

OUTPUT = ["id", "text", "metadata"]
"""The fields a search or read returns to make documents."""


class _MilvusScorer(ABC):
    """Top-k on one field of the collection; subclasses say which field, metric and query data."""

    field = ""
    metric = ""

    def __init__(self, view: MilvusView) -> None:
        self.view = view

    @abstractmethod
    def _data(self) -> Any:
        """The search data for this scorer's query (a vector, or the query's tokens)."""

    def _scale(self, scores: list[float]) -> list[float]:
        return scores

    def _params(self, limit: int) -> dict[str, Any]:
        """The index's search parameters for a search of ``limit`` rows."""
        return {}

    def _fields(self) -> list[str]:
        """The fields a top-k search returns."""
        return OUTPUT

    def _scores(self, hits: list[dict[str, Any]]) -> list[float]:
        """The scores of the hits of a top-k search."""
        return self._scale([float(h["distance"]) for h in hits])

    def search(self, limit: int, expression: str, fields: list[str]) -> list[dict[str, Any]]:
        store = self.view.store
        if not store.exists or limit <= 0:
            return []
        result = store.call(
            "search",
            collection_name=store.collection_name,
            data=[self._data()],
            anns_field=self.field,
            limit=limit,
            filter=expression,
            search_params={"metric_type": self.metric, "params": self._params(limit)},
            consistency_level=store.consistency,
            output_fields=fields,
        )
        return list(result[0]) if result else []

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` best rows allowed by ``where`` (``k=None`` is refused on Milvus)."""
        if k is None:
            raise InvalidParameterError(
                "fetch_k=None scores the whole corpus, which on Milvus would ship every row: use a bounded fetch_k"
            )
        if self.empty():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        window = reads.RESULT_WINDOW
        if k > window:
            rows = len(self.view)
            if rows > window:
                raise InvalidParameterError(
                    f"Milvus returns at most {window:,} rows per search and this collection holds {rows:,}: "
                    f"a pool of {k:,} candidates per side (the larger of fetch_k and k) would be cut; "
                    f"use fetch_k and k of at most {window:,}"
                )
            k = window  # the whole collection fits in one search: nothing is cut
        hits = self.search(k, filter_expression(where, self.view.store.null_keys), self._fields())
        self.view.remember(hits)
        pairs = sorted(
            ((self.view.key(str(h["id"])), s) for h, s in zip(hits, self._scores(hits), strict=True)),
            key=lambda p: (-p[1], p[0]),
        )
        return np.asarray([p[0] for p in pairs], dtype=np.int64), np.asarray([p[1] for p in pairs], dtype=np.float64)

    def empty(self) -> bool:
        """True when no row can score (only a BM25 query without tokens)."""
        return False


class MilvusVectorScorer(_MilvusScorer):
    """Cosine similarity on the dense field; completion by the stored vectors."""

    field, metric = "vector", "IP"

    def __init__(self, view: MilvusView, query_vector: FloatMatrix) -> None:
        super().__init__(view)
        self.query_vector = np.asarray(query_vector[0], dtype=np.float32)

    def _data(self) -> Any:
        return self.query_vector.tolist()

    def _params(self, limit: int) -> dict[str, Any]:
        search = dict(self.view.store.dense.search)
        if "ef" in search:
            search["ef"] = max(search["ef"], limit)  # Milvus refuses an HNSW search narrower than its top-k
        return search

    def _fields(self) -> list[str]:
        # An approximate index only proposes candidates: their scores come from the stored vectors, as in process.
        return OUTPUT if self.view.store.dense.exact else [*OUTPUT, "vector"]

    def _scores(self, hits: list[dict[str, Any]]) -> list[float]:
        if self.view.store.dense.exact:
            return super()._scores(hits)
        for hit in hits:
            self.view.vectors_seen[str(hit["id"])] = hit.get("entity", hit)["vector"]
        keys = np.fromiter((self.view.key(str(h["id"])) for h in hits), dtype=np.int64, count=len(hits))
        return [float(score) for score in self.scores(keys)]

    def scores(self, keys: Keys) -> Scores:
        """Exact similarities of ``keys`` (float64 dot products of the stored vectors, as in process)."""
        if keys.size == 0:
            return np.zeros(0, dtype=np.float64)
        return exact_products(self.view.vectors(keys), self.query_vector)


class MilvusBM25Scorer(_MilvusScorer):
    """Milvus's BM25 over our analyzer's tokens, divided by ``k1 + 1`` (the in-process scale)."""

    field, metric = "sparse", "BM25"

    def __init__(self, view: MilvusView, query: str) -> None:
        super().__init__(view)
        self.tokens = " ".join(tokenize(view.settings.analyzer, query))
        self.factor = 1.0 + view.settings.bm25_params.k1

    def _data(self) -> Any:
        return self.tokens

    def empty(self) -> bool:
        """True when the query has no token: no row can score."""
        return not self.tokens

    def _scale(self, scores: list[float]) -> list[float]:
        return [s / self.factor for s in scores]

    def scores(self, keys: Keys) -> Scores:
        """BM25 of ``keys`` with the collection's statistics (0 for rows without a query term)."""
        out = np.zeros(keys.size, dtype=np.float64)
        if keys.size == 0 or self.empty():
            return out
        ids = self.view.ids(keys)
        position = {doc_id: i for i, doc_id in enumerate(ids)}
        for chunk in reads.chunks(ids):
            hits = self.search(len(chunk), id_filter(chunk), ["id"])
            for hit in hits:
                out[position[str(hit["id"])]] = float(hit["distance"]) / self.factor
        return out
