"""Contextual enrichment: a chat model situates each chunk within its whole document.

At ingestion, :class:`ContextualEnricher` asks a chat model for 1-3 sentences that situate each
chunk in the document it comes from ("contextual retrieval"). The context is stored in the
chunk's :data:`~langchain_fusion.metadata.CONTEXT` metadata; ``page_content`` stays the original
text. A :class:`~langchain_fusion.index.fusion_index.FusionIndex` then embeds and BM25-indexes the context, a
blank line and the text (its ``embed_fields`` / ``bm25_fields`` choose), while results show the
original text.

Cost control:

- The prompt starts with the document and only then gives the chunk, and the document part is
  identical for every chunk of a document, so provider prompt caching (automatic on OpenAI for
  long prefixes) applies to the repeated part.
- A document longer than ``document_token_budget`` tokens (estimated at
  :data:`CHARS_PER_TOKEN` characters per token) is cut to a window of that size around the
  chunk. Windows are snapped to a grid of half-budget steps, so neighbouring chunks still share
  an identical document part.
- Answers are cached on disk by (model, prompt version, hash of the document part, hash of the
  chunk) (see :mod:`langchain_fusion.models.llm_calls`), so re-indexing pays only for new or changed
  chunks.

Calls run concurrently with a bound and are retried on rate-limit and transient errors; a chunk
whose enrichment finally fails is returned without a context and listed in the report.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_core.prompts import ChatPromptTemplate
from pydantic import Field, PrivateAttr, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import is_int
from langchain_fusion.errors import describe_error
from langchain_fusion.ingest.loading import PAGE_BREAK, merge_chunks
from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, FIELD_SEPARATOR, TextField, check_text_fields, indexed_text
from langchain_fusion.models.call_reports import CallOutcome, LLMFailure, LLMReport
from langchain_fusion.models.llm_calls import CallRunner, LLMBatchSettings
from langchain_fusion.models.prompts import CHARS_PER_TOKEN, Prompt, check_prompt, prompt_version_of
from langchain_fusion.progress import ProgressCallback

logger = logging.getLogger(__name__)

CONTEXT_PROMPT_VERSION = "contextual-v1"
"""Version of :data:`DEFAULT_CONTEXT_PROMPT`, part of every cache key: change it with the prompt."""

DEFAULT_CONTEXT_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "You write short contexts that situate a chunk of a document within the whole document, "
            "to improve search retrieval of the chunk.",
        ),
        (
            "human",
            "<document>\n{document}\n</document>\n\n"
            "Here is the chunk we want to situate within the whole document:\n"
            "<chunk>\n{chunk}\n</chunk>\n\n"
            "Please give a short, succinct context (1-3 sentences) to situate this chunk within the overall "
            "document for the purposes of improving search retrieval of the chunk. Answer only with the "
            "succinct context and nothing else.",
        ),
    ]
)
"""The enrichment prompt (after Anthropic's contextual retrieval prompt): the document first,
then the chunk. Variables ``document`` and ``chunk``."""

DEFAULT_DOCUMENT_TOKEN_BUDGET = 8000
"""Tokens of a document given with each chunk; longer documents are cut around the chunk."""

TRUNCATION_MARK = "[...]"
"""Marks where a long document was cut."""


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``, estimated as characters / :data:`CHARS_PER_TOKEN`, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def window_start(length: int, start: int, end: int, budget: int) -> int:
    """Where a ``budget``-character window of a ``length``-character text starts for span ``start:end``.

    Candidate windows start at multiples of ``budget // 2`` (and at ``length - budget``); the one
    holding the span with its centre nearest the span's centre wins. Spans near each other thus
    get the same window.
    """
    if length <= budget:
        return 0
    step = max(1, budget // 2)
    last = length - budget
    starts = [*range(0, last, step), last]
    centre = (start + end) / 2

    def rank(s: int) -> tuple[bool, float, int]:
        holds = s <= start and end <= s + budget
        return (not holds, abs(s + budget / 2 - centre), s)

    return int(min(starts, key=rank))


def document_part(text: str, start: int, end: int, budget_chars: int) -> str:
    """The document as given with the chunk at ``start:end``: all of it, or a window with cut marks."""
    if len(text) <= budget_chars:
        return text
    s = window_start(len(text), start, end, budget_chars)
    head = f"{TRUNCATION_MARK}\n" if s > 0 else ""
    tail = f"\n{TRUNCATION_MARK}" if s + budget_chars < len(text) else ""
    return head + text[s : s + budget_chars] + tail


@dataclass
class _Source:
    """The whole text of one source and where each of its pages starts in it."""

    text: str = ""
    offsets: dict[Any, int] = field(default_factory=dict)
    """Page (None for text files) -> offset to add to a chunk's ``start_index``."""


def _source_of(doc: Document) -> str:
    return str(doc.metadata.get(keys.SOURCE, ""))


def _sources_from_documents(documents: Sequence[Document]) -> dict[str, _Source]:
    groups: dict[str, list[Document]] = {}
    for doc in documents:
        groups.setdefault(_source_of(doc), []).append(doc)
    sources = {}
    for name, pages in groups.items():
        if all(is_int(p.metadata.get(keys.PAGE)) for p in pages):
            pages = sorted(pages, key=lambda p: int(p.metadata[keys.PAGE]))
        source = _Source()
        parts = []
        position = 0
        for page in pages:
            source.offsets.setdefault(page.metadata.get(keys.PAGE), position)
            parts.append(page.page_content)
            position += len(page.page_content) + len(PAGE_BREAK)
        source.text = PAGE_BREAK.join(parts)
        sources[name] = source
    return sources


def _sources_from_chunks(chunks: Sequence[Document]) -> dict[str, _Source]:
    """Each source's text rebuilt from its chunks (overlap removed when offsets are known)."""
    groups: dict[str, list[Document]] = {}
    for chunk in chunks:
        groups.setdefault(_source_of(chunk), []).append(chunk)
    sources = {}
    for name, members in groups.items():
        if all(is_int(c.metadata.get(keys.CHUNK_INDEX)) for c in members):
            members = sorted(members, key=lambda c: int(c.metadata[keys.CHUNK_INDEX]))
        pages: dict[Any, list[Document]] = {}
        for chunk in members:
            pages.setdefault(chunk.metadata.get(keys.PAGE), []).append(chunk)
        source = _Source()
        parts = []
        position = 0
        for page, page_chunks in pages.items():
            located = all(
                is_int(c.metadata.get(keys.START_INDEX)) and is_int(c.metadata.get(keys.CHUNK_INDEX))
                for c in page_chunks
            )
            first_start = page_chunks[0].metadata.get(keys.START_INDEX)
            if located and isinstance(first_start, int):
                text = merge_chunks(page_chunks)
                source.offsets[page] = position - first_start
            else:
                text = FIELD_SEPARATOR.join(c.page_content for c in page_chunks)
            parts.append(text)
            position += len(text) + len(PAGE_BREAK)
        source.text = PAGE_BREAK.join(parts)
        sources[name] = source
    return sources


def _locate(source: _Source, chunk: Document) -> tuple[int, int]:
    """Where ``chunk`` lies in its source's text: by its offsets, else by search, else the start."""
    content = chunk.page_content
    page, start = chunk.metadata.get(keys.PAGE), chunk.metadata.get(keys.START_INDEX)
    if is_int(start) and page in source.offsets:
        position = source.offsets[page] + start
        if source.text[position : position + len(content)] == content:
            return position, position + len(content)
    position = source.text.find(content)
    if position >= 0:
        return position, position + len(content)
    return 0, min(len(content), len(source.text))


def chunk_label(chunk: Document) -> str:
    """Where a chunk is, for people: ``data/report.pdf p. 3, chunk 7``."""
    meta = chunk.metadata
    label = str(meta.get(keys.SOURCE, "(no source)"))
    if meta.get(keys.PAGE) is not None:
        label += f" p. {meta[keys.PAGE]}"
    if meta.get(keys.CHUNK_INDEX) is not None:
        label += f", chunk {meta[keys.CHUNK_INDEX]}"
    return label


class ContextualEnricher(LLMBatchSettings, BaseDocumentTransformer):
    """Adds a chat model's 1-3 sentence context to each chunk (Anthropic's "contextual retrieval").

    ``enrich(chunks, documents)`` returns enriched copies (the context in
    :data:`~langchain_fusion.metadata.CONTEXT`, ``page_content`` unchanged) and an
    :class:`~langchain_fusion.models.call_reports.LLMReport`. ``documents`` are the whole pages or files
    the chunks were split from (``load_files(...).documents``); the pages of one source are
    joined into one document. Without them, each source is rebuilt from its chunks.

    Calls run at most ``max_concurrency`` at a time, are retried on rate-limit and transient
    errors (``retry``), and are cached in ``cache_dir``. A chunk whose enrichment fails is
    returned without a context and listed in ``report.failed``; nothing is raised.
    """

    document_token_budget: int = Field(default=DEFAULT_DOCUMENT_TOKEN_BUDGET, ge=1)
    """Tokens of the document given with each chunk (estimated at :data:`CHARS_PER_TOKEN` characters
    per token); a longer document is cut to a window of this size around the chunk."""
    prompt: Prompt = DEFAULT_CONTEXT_PROMPT
    """The prompt; it must take ``document`` and ``chunk``. Keep the document first and the same
    for every chunk of a document, so provider prompt caching applies."""
    prompt_version: str | None = None
    """The prompt's version in cache keys; default :data:`CONTEXT_PROMPT_VERSION` for the default
    prompt and a hash of the prompt for another one."""

    _last_report: LLMReport | None = PrivateAttr(default=None)

    @field_validator("prompt")
    @classmethod
    def _valid_prompt(cls, prompt: Prompt) -> Prompt:
        return check_prompt(prompt, {"document", "chunk"})

    @property
    def last_report(self) -> LLMReport | None:
        """The report of the latest :meth:`enrich` / :meth:`transform_documents` run."""
        return self._last_report

    def _version(self) -> str:
        return self.prompt_version or prompt_version_of(self.prompt, DEFAULT_CONTEXT_PROMPT, CONTEXT_PROMPT_VERSION)

    def prompt_inputs(
        self, chunks: Sequence[Document], documents: Sequence[Document] | None = None
    ) -> list[dict[str, str] | None]:
        """The prompt inputs (``document``, ``chunk``) for each chunk; None for a blank chunk."""
        sources = _sources_from_documents(documents) if documents else {}
        missing = [c for c in chunks if _source_of(c) not in sources]
        if missing:
            sources.update(_sources_from_chunks(missing))
        budget = self.document_token_budget * CHARS_PER_TOKEN
        inputs: list[dict[str, str] | None] = []
        for chunk in chunks:
            if not chunk.page_content.strip():
                inputs.append(None)
                continue
            source = sources[_source_of(chunk)]
            start, end = _locate(source, chunk)
            inputs.append({"document": document_part(source.text, start, end, budget), "chunk": chunk.page_content})
        return inputs

    def enrich(
        self,
        chunks: Sequence[Document],
        documents: Sequence[Document] | None = None,
        *,
        progress: ProgressCallback | None = None,
        callbacks: Callbacks = None,
    ) -> tuple[list[Document], LLMReport]:
        """Enriched copies of ``chunks`` (same order) and a report; ``progress(n)`` counts finished chunks."""
        asked, requests, runner, on_done = self._prepare(chunks, documents, progress)
        return self._results(chunks, asked, runner.run(requests, on_done=on_done, callbacks=callbacks))

    async def aenrich(
        self,
        chunks: Sequence[Document],
        documents: Sequence[Document] | None = None,
        *,
        progress: ProgressCallback | None = None,
        callbacks: Callbacks = None,
    ) -> tuple[list[Document], LLMReport]:
        """Async twin of :meth:`enrich` (awaits the model's async API)."""
        asked, requests, runner, on_done = self._prepare(chunks, documents, progress)
        return self._results(chunks, asked, await runner.arun(requests, on_done=on_done, callbacks=callbacks))

    def _prepare(
        self, chunks: Sequence[Document], documents: Sequence[Document] | None, progress: ProgressCallback | None
    ) -> tuple[list[int], list[dict[str, str]], CallRunner, Callable[[int], None] | None]:
        """Positions of the chunks to ask about, their prompt inputs, the runner and its ``on_done``.

        Blank chunks are not asked about; ``progress`` counts them as finished at once.
        """
        asked, requests = [], []
        for position, inputs in enumerate(self.prompt_inputs(chunks, documents)):
            if inputs is not None:
                asked.append(position)
                requests.append(inputs)
        runner = self.runner(self.prompt, "contextual enrichment", self._version())
        skipped = len(chunks) - len(asked)
        if skipped and progress is not None:
            progress(skipped)
        return asked, requests, runner, None if progress is None else lambda _: progress(1)

    def _results(
        self, chunks: Sequence[Document], asked: list[int], outcomes: list[CallOutcome]
    ) -> tuple[list[Document], LLMReport]:
        report = LLMReport(task="contextual enrichment", model=self.resolved_model_id(), unit="chunks")
        report.items = len(chunks)
        enriched = [chunk.model_copy(deep=True) for chunk in chunks]
        for doc in enriched:
            doc.metadata.pop(keys.CONTEXT, None)  # a stale context never survives a failed rerun
        for position, outcome in zip(asked, outcomes, strict=True):
            report.add(outcome)
            if outcome.text is not None:
                enriched[position].metadata[keys.CONTEXT] = outcome.text
            else:
                chunk = chunks[position]
                error = describe_error(outcome.error) if outcome.error is not None else "no answer"
                report.failed.append(LLMFailure(str(chunk.id), chunk_label(chunk), error, outcome.attempts))
        report.warn_failures(logger, "they are indexed without context")
        self._last_report = report
        return enriched, report

    # --- the LangChain document transformer interface -------------------------------------------

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """Enrich chunks (``BaseDocumentTransformer``); pass the whole documents as ``sources=``.

        The report is in :attr:`last_report`.
        """
        return self.enrich(documents, kwargs.get("sources"), callbacks=kwargs.get("callbacks"))[0]

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """Async twin of :meth:`transform_documents`."""
        return (await self.aenrich(documents, kwargs.get("sources"), callbacks=kwargs.get("callbacks")))[0]


def with_context(documents: Sequence[Document], fields: Sequence[TextField] = DEFAULT_TEXT_FIELDS) -> list[Document]:
    """Copies whose ``page_content`` is what the index saw: by default the context, a blank line, the text.

    Use it to *show* the enriched text (e.g. ``retriever | with_context`` in LCEL); documents
    without a context are returned unchanged (as copies).
    """
    chosen = check_text_fields(fields, "fields")
    return [
        Document(id=doc.id, page_content=indexed_text(doc, chosen), metadata=copy.deepcopy(doc.metadata))
        for doc in documents
    ]
