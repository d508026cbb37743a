"""The metadata keys langchain-fusion reads and writes, defined once.

Chunk keys are written at ingestion and describe where a chunk comes from. Score keys are
written on the copies of documents that retrievers return; together they are the provenance
of a result: how each side scored it, how that score was normalised, and where it ranked.

The stable chunk id is not a metadata key: it is ``Document.id``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final, Literal, get_args

from langchain_core.documents import Document

from langchain_fusion.errors import InvalidParameterError

# --- chunk keys (written by ingestion) ---------------------------------------------------

SOURCE: Final = "source"
"""Where the chunk comes from: the file path as given to the loader, or a caller's id."""

PAGE: Final = "page"
"""1-based page number in a PDF (the number a reader sees); absent for text and markdown."""

CHUNK_INDEX: Final = "chunk_index"
"""0-based position of the chunk among all chunks of its source, in reading order."""

START_INDEX: Final = "start_index"
"""Character offset of the chunk in its page's cleaned text (in the whole file for text)."""

# --- score keys (written by retrievers on returned copies) --------------------------------

SCORE: Final = "score"
"""The score the results are ordered by: the fused score (or a single side's raw score); the key that
tracing tools such as OpenTelemetry's LangChain instrumentation read."""

RELEVANCE: Final = "relevance"
"""P(relevant), from the index's calibrated relevance model (:mod:`~langchain_fusion.search.relevance`): the same
scale on every query. Only on results of a calibrated index; never made up."""

FUSION_SCORE: Final = "fusion_score"
"""The fused score the results are ordered by (its scale depends on ``fusion_method``): ``alpha`` times the
normalised vector score plus ``1 - alpha`` times the normalised BM25 score (RRF: of their reciprocal-rank terms).
For a query the embedding model cannot read, the BM25 side has all the weight: it is ``bm25_score_normalized``."""

FUSION_METHOD: Final = "fusion_method"
"""The fusion method that produced ``fusion_score``: weighted, zscore or rrf."""

VECTOR_SCORE: Final = "vector_score"
"""Raw vector similarity (cosine for normalised embeddings; higher is better)."""

VECTOR_SCORE_NORMALIZED: Final = "vector_score_normalized"
"""The vector similarity after the method's normalisation (min-max, z-score or RRF term)."""

VECTOR_RANK: Final = "vector_rank"
"""1-based rank of the chunk among the candidates on the vector side."""

BM25_SCORE: Final = "bm25_score"
"""Raw BM25 score (0.0 when no query term occurs in the chunk)."""

BM25_SCORE_NORMALIZED: Final = "bm25_score_normalized"
"""The BM25 score after the method's normalisation (min-max, z-score or RRF term)."""

BM25_RANK: Final = "bm25_rank"
"""1-based rank among the candidates on the BM25 side; None when no query term matched."""

ALSO_IN: Final = "also_in"
"""The other copies of the result's text (the same passage under other files), best-ranked first: a list of
``{"id": ..., "source": ...}``. Only on a result that has copies among the candidates read (see
:mod:`~langchain_fusion.search.duplicates`)."""

CHUNK_KEYS: Final = (SOURCE, PAGE, CHUNK_INDEX, START_INDEX)
"""All chunk keys, in documentation order."""

SCORE_KEYS: Final = (
    SCORE,
    FUSION_SCORE,
    FUSION_METHOD,
    VECTOR_SCORE,
    VECTOR_SCORE_NORMALIZED,
    VECTOR_RANK,
    BM25_SCORE,
    BM25_SCORE_NORMALIZED,
    BM25_RANK,
)
"""All score keys every fused result carries, in documentation order (:data:`RELEVANCE` only with calibration)."""

# --- context window keys (written by ContextWindowRetriever on merged passages) -------------

WINDOW_SPAN: Final = "window_span"
"""``[first, last]``: the ``chunk_index`` of the first and last chunk merged into the passage."""

WINDOW_HITS: Final = "window_hits"
"""The ``chunk_index`` of every retrieved hit inside the passage, best hit first."""

WINDOW_PAGES: Final = "window_pages"
"""``[first, last]``: the pages the passage spans; None when its chunks have no page (text)."""

WINDOW_KEYS: Final = (WINDOW_SPAN, WINDOW_HITS, WINDOW_PAGES)
"""All context window keys, in documentation order."""

# --- rerank keys (written by the rerank step on returned copies) ------------------------------

RERANK_RATING: Final = "rerank_rating"
"""The chat model's relevance rating, 1 (irrelevant) to 10; None when rating this candidate failed."""

RERANK_SCORE: Final = "rerank_score"
"""What reranked results are ordered by (higher is better). :class:`LLMReranker`: in [0, 1],
``w * (rating - 1) / 9 + (1 - w) * f``, where ``w`` is the reranker's ``rating_weight`` and ``f``
the min-max normalised fusion score among the candidates; None when rating this candidate failed
(it then keeps its fusion position). :class:`CrossEncoderReranker`: the cross-encoder's score of
the (query, text) pair (a probability in [0, 1] for the usual one-output rerank models). Any
other ``BaseDocumentCompressor`` in :class:`RerankRetriever`: the compressor's own
:data:`RELEVANCE_SCORE` when it writes one, else None."""

RERANK_RANK: Final = "rerank_rank"
"""1-based position the rerank step gave the candidate: the listwise reranker's model (None when it
left the candidate out), or, for any other ``BaseDocumentCompressor`` in :class:`RerankRetriever`,
the position in the compressor's output."""

RELEVANCE_SCORE: Final = "relevance_score"
"""Where LangChain's document compressors (Cohere, Jina, FlashRank...) write their own score; read,
never written, by :class:`RerankRetriever`, which copies it to :data:`RERANK_SCORE`."""

RERANK_KEYS: Final = (RERANK_RATING, RERANK_SCORE, RERANK_RANK)
"""All rerank keys, in documentation order."""

# --- multi-query fusion (written by MultiQueryFusionRetriever on returned copies) -----------

MULTI_QUERY_SCORE: Final = "multi_query_score"
"""What multi-query results are ordered by: the weighted reciprocal rank fusion of the result
lists, ``sum_i w_i / (60 + rank_i)`` over the lists that hold the document (``w`` is 1 for the
original query and the retriever's ``rewrite_weight`` for each rewrite)."""

MULTI_QUERY_REWRITES: Final = "multi_query_rewrites"
"""The rewrites of the query that the chat model wrote and that were searched, in its order
(``[]`` when it wrote none or failed: then only the original query was searched)."""

MULTI_QUERY_RANKS: Final = "multi_query_ranks"
"""The document's 1-based rank in each result list, aligned with ``[query, *multi_query_rewrites]``;
None where a list does not hold it."""

MULTI_QUERY_KEYS: Final = (MULTI_QUERY_SCORE, MULTI_QUERY_REWRITES, MULTI_QUERY_RANKS)
"""All multi-query fusion keys, in documentation order."""

# --- contextual enrichment (written by ContextualEnricher on the chunks it returns) ---------

CONTEXT: Final = "context"
"""1-3 sentences a chat model wrote to situate the chunk within its whole document. The
index embeds and BM25-indexes ``context`` + a blank line + ``page_content`` by default (see
``FusionIndex(embed_fields=..., bm25_fields=...)``); ``page_content`` stays the original text,
and is what results show. Absent when the chunk was not enriched or its enrichment failed."""

CONTEXT_KEYS: Final = (CONTEXT,)
"""All contextual enrichment keys, in documentation order."""

# --- page and section summaries (the documents of a HierarchicalIndex's summary index) ------

SECTION: Final = "section"
"""1-based number of a section of a source without pages (text, markdown): consecutive chunks
summarised together. Summaries of PDF pages carry ``page`` instead."""

SUMMARY_CHUNK_IDS: Final = "summary_chunk_ids"
"""The ``Document.id`` of every chunk the summary covers, in reading order: the link from a
summary to the chunk rows a hierarchical search is restricted to."""

SUMMARY_FALLBACK: Final = "summary_fallback"
"""True when the chat model failed to summarise the page or section and the summary is its
leading text instead (so the page stays reachable); False otherwise."""

SUMMARY_DOCUMENT_KEYS: Final = (SECTION, SUMMARY_CHUNK_IDS, SUMMARY_FALLBACK)
"""Keys of summary documents (besides ``source`` and ``page``), in documentation order."""

# --- hierarchical retrieval (written by HierarchicalRetriever on returned chunks) -----------

HIERARCHICAL_SCORE: Final = "hierarchical_score"
"""What hierarchical results are ordered by:
``summary_weight * summary_score + (1 - summary_weight) * fusion_score``, where ``fusion_score``
is the chunk's fused score among the chunks of the selected pages."""

SUMMARY_ID: Final = "summary_id"
"""``Document.id`` of the summary that led to the chunk (the best-ranked selected summary
covering it)."""

SUMMARY_SCORE: Final = "summary_score"
"""Fused score of that summary among the summary index's candidates (same method and alpha)."""

SUMMARY_RANK: Final = "summary_rank"
"""1-based rank of that summary in the summary search."""

HIERARCHICAL_KEYS: Final = (HIERARCHICAL_SCORE, SUMMARY_ID, SUMMARY_SCORE, SUMMARY_RANK)
"""All hierarchical retrieval keys, in documentation order."""


# --- text fields: what each index side sees of a chunk -------------------------------------

TextField = Literal["context", "content"]
"""A part of a chunk that can be indexed: ``context`` (the :data:`CONTEXT` metadata written by
contextual enrichment) or ``content`` (``page_content``, the original text)."""

MAX_ID_CHARS: Final = 512
"""The longest document id, in characters: Milvus's primary key holds 512, and every store refuses longer ids
alike, so an index can move between stores (ids made by the library are 32 to 64 characters)."""

MAX_METADATA_DEPTH: Final = 64
"""How deeply a document's metadata may nest mappings and lists (JSON itself is rarely nested past a
dozen levels); deeper, or a mapping that contains itself, is refused when the document is added."""

DEFAULT_TEXT_FIELDS: tuple[TextField, ...] = ("context", "content")
"""What both sides index by default: the context (when there is one), a blank line, the content."""

FIELD_SEPARATOR: Final = "\n\n"
"""What joins the indexed fields of a chunk."""


def check_text_fields(fields: Any, name: str = "text fields") -> tuple[TextField, ...]:
    """Validate a tuple of :data:`TextField` names (non-empty, known, no repeats)."""
    allowed = get_args(TextField)
    if isinstance(fields, str) or not isinstance(fields, (tuple, list)):
        raise InvalidParameterError(f"{name} must be a tuple drawn from {allowed}; got {fields!r}")
    values = tuple(fields)
    if not values or any(f not in allowed for f in values) or len(set(values)) != len(values):
        raise InvalidParameterError(
            f"{name} must be a non-empty tuple of distinct fields from {allowed}; got {values!r}"
        )
    return values


def indexed_text(doc: Document, fields: Sequence[TextField] = DEFAULT_TEXT_FIELDS) -> str:
    """The text an index side sees for ``doc``: the chosen fields joined by a blank line.

    A field that is missing or blank (a chunk without context) is left out, so a document
    without context is indexed as exactly its ``page_content``. If no chosen field has text
    (``("context",)`` on a chunk without context), the ``page_content`` is used instead, so
    a row is never indexed as empty text when it has content.
    """
    parts = []
    for field in fields:
        value: Any = doc.page_content if field == "content" else doc.metadata.get(CONTEXT)
        if isinstance(value, str) and value.strip():
            parts.append(value)
    return FIELD_SEPARATOR.join(parts) if parts else doc.page_content


def chunk_position(doc: Document) -> tuple[str, int] | None:
    """``(source, chunk_index)`` of a chunk, or None when it lacks either (or the index is not a whole number)."""
    source, index = doc.metadata.get(SOURCE), doc.metadata.get(CHUNK_INDEX)
    if source is None or not isinstance(index, int) or isinstance(index, bool):
        return None
    return str(source), index


def content_id(doc: Document) -> str:
    """A deterministic id for a document that has none: a hash of its text and metadata."""
    payload = json.dumps([doc.page_content, doc.metadata], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]
