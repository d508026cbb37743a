"""Reads through a Milvus store: a view names rows by keys assigned on first sight, and keeps what searches return."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document

from langchain_fusion import metadata as keys_
from langchain_fusion.errors import FusionError
from langchain_fusion.stores.base import FloatMatrix, Keys, Scores, SideScorer, StoreView, Where
from langchain_fusion.stores.milvus import reads
from langchain_fusion.stores.milvus.expressions import filter_expression, id_filter, literal
from langchain_fusion.stores.milvus.search import OUTPUT, MilvusBM25Scorer, MilvusVectorScorer
from langchain_fusion.stores.settings import StoreSettings

if TYPE_CHECKING:
    from langchain_fusion.stores.milvus.store import MilvusStore


class MilvusView(StoreView):
    """Reads through one store; keys are handles assigned to ids on first sight in this view."""

    def __init__(self, store: MilvusStore) -> None:
        """A view of ``store``."""
        self.store = store
        self._ids: list[str] = []
        self._keys: dict[str, int] = {}
        self._rows: dict[str, Mapping[str, Any]] = {}
        self._documents: dict[str, Document] = {}
        self.vectors_seen: dict[str, Any] = {}
        self._length: int | None = None

    @property
    def settings(self) -> StoreSettings:
        """How the rows were indexed."""
        return self.store.settings

    def mask_capable(self) -> bool:
        """Callables cannot be sent to a server."""
        return False

    def known_empty(self) -> bool:
        """True only before the collection exists: an existing one is searched without counting it first."""
        return not self.store.exists

    def sides_in_parallel(self, where: Where | None) -> bool:
        """Both searches are in flight at once: a query waits for the slower, not for the sum."""
        return True

    def complete_both(
        self, vector: SideScorer, vector_keys: Keys, bm25: SideScorer, bm25_keys: Keys
    ) -> tuple[Scores, Scores]:
        """Both sides' missing scores from one id-restricted BM25 search that also returns the stored vectors.

        The rows missing a vector score were found by BM25, so they match a query term and that
        search returns them with their vectors; one it does not return (deleted by another
        client since) has its vector asked for on its own, and scores 0 if it is gone.
        """
        if not (isinstance(vector, MilvusVectorScorer) and isinstance(bm25, MilvusBM25Scorer)) or bm25.empty():
            return vector.scores(vector_keys), bm25.scores(bm25_keys)
        ids = list(dict.fromkeys([*self.ids(vector_keys), *self.ids(bm25_keys)]))
        found: dict[str, float] = {}
        for chunk in reads.chunks(ids):
            for hit in bm25.search(len(chunk), id_filter(chunk), ["id", "vector"]):
                entity = hit.get("entity", hit)
                found[str(hit["id"])] = float(hit["distance"]) / bm25.factor
                self.vectors_seen[str(hit["id"])] = entity["vector"]
        bm25_scores = np.fromiter((found.get(i, 0.0) for i in self.ids(bm25_keys)), dtype=np.float64)
        return vector.scores(vector_keys), bm25_scores

    def __len__(self) -> int:
        if self._length is None:
            self._length = self.store.count()
        return self._length

    def key(self, doc_id: str) -> int:
        """The key of ``doc_id`` in this view (assigned on first sight)."""
        found = self._keys.get(doc_id)
        if found is None:
            found = self._keys[doc_id] = len(self._ids)
            self._ids.append(doc_id)
        return found

    def ids(self, keys: Keys) -> list[str]:
        """The ids of ``keys``."""
        return [self._ids[int(k)] for k in keys]

    def remember(self, hits: Sequence[Mapping[str, Any]]) -> None:
        """Keep the rows that searches return, so results need no second round trip (documents made when asked)."""
        for hit in hits:
            entity = hit.get("entity", hit)
            if "text" in entity:
                self._rows.setdefault(str(hit.get("id", entity.get("id"))), entity)

    def _document(self, doc_id: str) -> Document:
        found = self._documents.get(doc_id)
        if found is None:
            entity = self._rows[doc_id]
            found = self._documents[doc_id] = Document(
                id=doc_id, page_content=entity["text"], metadata=dict(entity.get("metadata") or {})
            )
        return found

    def _query(self, expression: str, fields: list[str], **paging: int) -> list[dict[str, Any]]:
        if not self.store.exists:
            return []
        return list(
            self.store.call(
                "query",
                collection_name=self.store.collection_name,
                filter=expression,
                output_fields=fields,
                consistency_level=self.store.consistency,
                **paging,
            )
        )

    def _by_ids(self, ids: Sequence[str], fields: list[str]) -> list[dict[str, Any]]:
        """The rows of these ids that exist, :data:`~reads.PAGE` ids per query."""
        distinct = list(dict.fromkeys(ids))
        rows: list[dict[str, Any]] = []
        for chunk in reads.chunks(distinct):
            rows.extend(self._query(id_filter(chunk), fields, limit=len(chunk)))
        return rows

    def vector(self, query_vector: FloatMatrix) -> MilvusVectorScorer:
        """The vector side for one query."""
        return MilvusVectorScorer(self, query_vector)

    def bm25(self, query: str) -> MilvusBM25Scorer:
        """The BM25 side for one query."""
        return MilvusBM25Scorer(self, query)

    def documents(self, keys: Keys) -> list[Document]:
        """The documents of ``keys`` (fetched once per view)."""
        ids = self.ids(keys)
        wanted = list(dict.fromkeys(i for i in ids if i not in self._rows))
        if wanted:
            self.remember(self._by_ids(wanted, OUTPUT))
            gone = [i for i in wanted if i not in self._rows]
            if gone:
                raise FusionError(
                    f"expected {len(wanted):,} documents from {self.store.collection_name!r}, read "
                    f"{len(wanted) - len(gone):,} ({gone[0]!r} is gone: deleted by another client?): try again"
                )
        return [self._document(i) for i in ids]

    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored vectors of ``keys`` (those a search of this view returned are not asked for again)."""
        ids = self.ids(keys)
        wanted = [i for i in ids if i not in self.vectors_seen]
        found = {row["id"]: row["vector"] for row in self._by_ids(wanted, ["id", "vector"])} if wanted else {}
        found.update((i, self.vectors_seen[i]) for i in ids if i in self.vectors_seen)
        dimension = self.settings.dimension or 0
        out = np.zeros((len(ids), dimension), dtype=np.float32)
        for position, doc_id in enumerate(ids):
            # A row another client deleted since this view saw it has no vector: it scores 0.
            if doc_id in found:
                out[position] = found[doc_id]
        return out

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """Keys of the ids that exist (-1 for the others)."""
        rows = self._by_ids([i for i in ids if "\n" not in i and "\r" not in i], OUTPUT)
        self.remember(rows)
        present = {row["id"] for row in rows}
        return np.fromiter((self.key(i) if i in present else -1 for i in ids), dtype=np.int64, count=len(ids))

    def select(self, where: Where) -> Keys:
        """Keys of every row allowed by ``where``."""
        rows = self.store.read_all(filter_expression(where, self.store.null_keys), ["id"])
        return np.asarray(sorted(self.key(row["id"]) for row in rows), dtype=np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """Chunks of ``source`` at these positions."""
        wanted = list(dict.fromkeys(int(i) for i in chunk_indexes))
        rows: list[dict[str, Any]] = []
        for start in range(0, len(wanted), reads.PAGE):
            rows += self._neighbour_rows(source, wanted[start : start + reads.PAGE])
        self.remember(rows)
        out: dict[int, Document] = {}
        for row in rows:
            doc = self._document(row["id"])
            out.setdefault(int(doc.metadata[keys_.CHUNK_INDEX]), doc)
        return out

    def _neighbour_rows(self, source: str, chunk_indexes: list[int]) -> list[dict[str, Any]]:
        """Rows of ``source`` at these positions: one bounded query, or a cursor read when a position repeats."""
        expression = (
            f"metadata[{literal(keys_.SOURCE)}] == {literal(source)} and "
            f"metadata[{literal(keys_.CHUNK_INDEX)}] in [{','.join(map(str, chunk_indexes))}]"
        )
        rows = self._query(expression, OUTPUT, limit=len(chunk_indexes) + 1)
        if len(rows) <= len(chunk_indexes):
            return rows
        # More rows than positions (a source whose chunk indexes repeat): read them all, in id order.
        return [row for page in reads.pages(self.store, expression, OUTPUT) for row in page]

    def ids_by_source(self) -> dict[str, set[str]]:
        """Every row's id under its source, reading ids and metadata only (no text, no vector)."""
        table: dict[str, set[str]] = {}
        for row in self.store.read_all("", ["metadata"]):
            table.setdefault(str((row.get("metadata") or {}).get(keys_.SOURCE, "")), set()).add(str(row["id"]))
        return table

    def iter_documents(self) -> Iterator[Document]:
        """Every document, in id order."""
        rows = self.store.read_all("", OUTPUT)
        self.remember(rows)
        return iter([self._document(row["id"]) for row in rows])
