"""The store seam on Milvus: the same fused search over a distributed engine (``milvus`` extra).

One collection per index: a VARCHAR primary key (our document id), the text, our analyzer's
tokens joined by spaces (analysed by Milvus's ``whitespace`` tokenizer, so both stores see the
same terms) feeding a BM25 function into a sparse field with our ``k1`` and ``b``, the unit
vector (inner product), and the metadata as JSON. The store's settings (embedding model,
dimension, analyzer, BM25 parameters, text fields) are the collection's description.

Differences from the in-process store, all deliberate:

- **Score scale.** Milvus computes Okapi BM25 with the ``(k1 + 1)`` factor; scores are divided
  by it here, so BM25 scores are on the in-process (``lucene``) scale. Only the ``lucene``
  variant exists on Milvus.
- **Consistency.** Queries use ``Strong`` consistency by default (a writer reads its own
  writes); ``consistency=`` picks a weaker level (:data:`CONSISTENCY_LEVELS`) for searches and
  reads by id. Bulk reads checked against a count, and the checks of deletes, stay ``Strong``.
  A query is two rounds of calls, so a concurrent writer on another client may land between
  them (there is no snapshot across calls, unlike the in-process store): a candidate deleted in
  between scores 0 on the side being completed. Upserts of more than one batch are not atomic
  across batches.
- **Filters.** Mapping filters become Milvus expressions on the JSON metadata and apply to both
  searches and the completion calls; Python callables cannot run on a server and are refused.
- **Whole corpus.** ``fetch_k=None`` is refused: it would ship every row; use a bounded ``fetch_k``.
- **Result window.** Milvus returns at most 16,384 rows per search or query (offset included).
  Bulk reads (every document, ``MilvusView.select``, the file record) page with a cursor on
  the primary key instead of an offset, id lists go in chunks of 4,096, and each bulk read or
  delete checks its count: a short read is an error, never a silent loss. A candidate pool
  (``fetch_k``, or ``k`` if larger) above the window is refused on a collection larger than it,
  not cut: Milvus's search iterators page by score ranges, which is not an exact top-k.

Fusion stays in the library: each candidate's missing side is completed with an id-restricted
search (BM25) or the stored vector (dot product), never given 0 or a rank as engines' hybrid
rankers do.

Modules, one concept each: :mod:`.connection` (connecting, timeouts, consistency levels),
:mod:`.expressions` (filters as Milvus expressions), :mod:`.schema` (the collection's fields,
indexes and the description that records how it was built), :mod:`.reads` (cursor reads and
counts), :mod:`.writes` (upserts and checked deletes), :mod:`.info` (the record kept beside the
collection, one entry per row), :mod:`.search` and :mod:`.view` (the read side of the seam), :mod:`.store`
(:class:`MilvusStore`) and :mod:`.engine` (``milvus://`` locations).
"""

from __future__ import annotations

from langchain_fusion.stores.milvus.connection import CONNECT_TIMEOUT, CONSISTENCY_LEVELS, consistency_level
from langchain_fusion.stores.milvus.expressions import filter_expression
from langchain_fusion.stores.milvus.info import INFO_PIECE_CHARS, INFO_SUFFIX, RECORD_SUFFIX
from langchain_fusion.stores.milvus.reads import PAGE, RESULT_WINDOW
from langchain_fusion.stores.milvus.schema import EF_CONSTRUCTION, EF_SEARCH, FORMAT_VERSION, LITE_INDEXES, DenseIndex
from langchain_fusion.stores.milvus.search import MilvusBM25Scorer, MilvusVectorScorer
from langchain_fusion.stores.milvus.store import MilvusStore
from langchain_fusion.stores.milvus.view import MilvusView
from langchain_fusion.stores.milvus.writes import BATCH

__all__ = [
    "BATCH",
    "CONNECT_TIMEOUT",
    "CONSISTENCY_LEVELS",
    "EF_CONSTRUCTION",
    "EF_SEARCH",
    "FORMAT_VERSION",
    "INFO_PIECE_CHARS",
    "INFO_SUFFIX",
    "LITE_INDEXES",
    "PAGE",
    "RECORD_SUFFIX",
    "RESULT_WINDOW",
    "DenseIndex",
    "MilvusBM25Scorer",
    "MilvusStore",
    "MilvusVectorScorer",
    "MilvusView",
    "consistency_level",
    "filter_expression",
]
