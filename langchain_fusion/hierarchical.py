"""Hierarchical retrieval: page (or section) summaries first, then the best chunks of those pages.

:class:`PageSummarizer` has a chat model summarise every PDF page, and every section of a source
without pages (the whole text file, or consecutive chunks of about ``section_chars`` characters
when it is large). A page too long for one prompt is summarised map-reduce: its pieces first,
then the summaries of the pieces. Calls are bounded, retried and cached like contextual
enrichment's (:mod:`langchain_fusion.llm_calls`); a page whose summary fails gets its leading
text as a stand-in (so it stays reachable) and is reported.

:class:`HierarchicalIndex` keeps the summaries in a fusion index of their own, each linked to
the chunks it covers (:data:`~langchain_fusion.metadata.SUMMARY_CHUNK_IDS`), next to the chunk
index. :class:`HierarchicalRetriever` searches the summaries, then searches the chunks
**restricted to the rows of the selected pages** (a mask applied to both sides before ranking,
through a FAISS id selector on approximate indexes), so a selected page always yields up to
``k`` chunks, unlike a post-filter of a global top-n, which returns fewer or none. Each chunk's
score combines both levels::

    hierarchical_score = summary_weight * summary_score + (1 - summary_weight) * fusion_score

where ``summary_score`` is the fused score of the chunk's summary among the summary candidates
and ``fusion_score`` the chunk's fused score among the chunks of the selected pages (both with
the retriever's ``alpha`` and ``method``). Results are one global top ``k`` by that score.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun, Callbacks
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from langchain_text_splitters import RecursiveCharacterTextSplitter
from numpy.typing import NDArray
from pydantic import ConfigDict, Field, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.filters import MetadataFilter, as_predicate
from langchain_fusion.fusion import FusionMethod, check_alpha
from langchain_fusion.index import FIELD_SEPARATOR, FusionIndex, ProgressCallback
from langchain_fusion.ingest import merge_chunks
from langchain_fusion.llm_calls import (
    CHARS_PER_TOKEN,
    CallOutcome,
    LLMBatchSettings,
    LLMFailure,
    LLMReport,
    Prompt,
    _Runner,
    check_prompt,
    describe_error,
    prompt_version_of,
)
from langchain_fusion.retrievers import FusionRetriever, per_call_options
from langchain_fusion.search import Hit, fused_search, scored_copy
from langchain_fusion.vector import FloatMatrix

logger = logging.getLogger(__name__)

SUMMARY_PROMPT_VERSION = "summary-v1"
"""Version of the summary prompts, part of every cache key: change it with the prompts."""

DEFAULT_SUMMARY_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You summarise pages of documents for a search index."),
        (
            "human",
            '<text source="{source}" location="{location}">\n{text}\n</text>\n\n'
            "Summarise this text in 2-4 sentences. Name the specific topics, entities, numbers, codes and terms "
            "it covers, so that a search for any of them finds it. Answer only with the summary.",
        ),
    ]
)
"""The summary prompt (also the map step of long pages); variables ``source``, ``location``, ``text``."""

DEFAULT_REDUCE_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You summarise pages of documents for a search index."),
        (
            "human",
            '<summaries source="{source}" location="{location}">\n{text}\n</summaries>\n\n'
            "These are summaries of consecutive parts of one page or section of a document. Combine them into "
            "one summary of 2-4 sentences that names the specific topics, entities, numbers, codes and terms "
            "they cover. Answer only with the summary.",
        ),
    ]
)
"""The reduce step of long pages; variables ``source``, ``location`` and ``text`` (the part summaries)."""

DEFAULT_SECTION_CHARS = 4000
"""About how many characters of a source without pages go into one section (a PDF page is ~2-3k)."""

DEFAULT_PIECE_TOKEN_BUDGET = 2000
"""Tokens of text per summary prompt; a longer page is summarised map-reduce."""

_PROMPT_VARIABLES = {"source", "location", "text"}


def summary_id(source: str, page: Any, section: int | None) -> str:
    """The stable id of the summary of a page or section."""
    return hashlib.sha256(f"summary\x00{source}\x00{page}\x00{section}".encode()).hexdigest()[:32]


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class PageUnit:
    """A page of a PDF, or a section of a source without pages: what one summary covers."""

    source: str
    """The chunks' ``source``."""
    page: Any
    """The page, for paged sources (else None)."""
    section: int | None
    """1-based section number, for sources without pages (else None)."""
    sections: int
    """How many sections the source was cut into (1 for paged sources)."""
    chunks: list[Document] = field(default_factory=list)
    """The chunks covered, in reading order."""

    @property
    def id(self) -> str:
        """The summary's ``Document.id``."""
        return summary_id(self.source, self.page, self.section)

    @property
    def location(self) -> str:
        """``page 3``, ``section 2 of 3`` or ``the whole file``: where the unit is, for the prompt."""
        if self.page is not None:
            return f"page {self.page}"
        return "the whole file" if self.sections == 1 else f"section {self.section} of {self.sections}"

    @property
    def label(self) -> str:
        """Where the unit is, for people: ``data/report.pdf p. 3``, ``notes.md section 2/3``."""
        if self.page is not None:
            return f"{self.source} p. {self.page}"
        return self.source if self.sections == 1 else f"{self.source} section {self.section}/{self.sections}"

    @property
    def text(self) -> str:
        """The unit's original text: its chunks merged with the splitter's overlap removed."""
        located = all(
            _is_int(c.metadata.get(keys.START_INDEX)) and _is_int(c.metadata.get(keys.CHUNK_INDEX)) for c in self.chunks
        )
        if located:
            return merge_chunks(self.chunks)
        return FIELD_SEPARATOR.join(c.page_content for c in self.chunks)


def page_units(chunks: Sequence[Document], section_chars: int = DEFAULT_SECTION_CHARS) -> list[PageUnit]:
    """Group chunks into the pages and sections that get one summary each.

    Chunks with a ``page`` are grouped by (source, page). The other chunks of a source form its
    sections: all of them when their text is at most ``section_chars`` characters, else runs
    of consecutive chunks of about ``section_chars`` characters each. Order: sources as first
    seen, chunks by ``chunk_index``.
    """
    if section_chars < 1:
        raise InvalidParameterError(f"section_chars must be >= 1; got {section_chars}")
    groups: dict[str, list[Document]] = {}
    for chunk in chunks:
        groups.setdefault(str(chunk.metadata.get(keys.SOURCE, "")), []).append(chunk)
    units: list[PageUnit] = []
    for source, members in groups.items():
        if all(_is_int(c.metadata.get(keys.CHUNK_INDEX)) for c in members):
            members = sorted(members, key=lambda c: int(c.metadata[keys.CHUNK_INDEX]))
        pages: dict[Any, PageUnit] = {}
        unpaged = []
        for chunk in members:
            page = chunk.metadata.get(keys.PAGE)
            if page is None:
                unpaged.append(chunk)
            else:
                pages.setdefault(page, PageUnit(source, page, None, 1)).chunks.append(chunk)
        units.extend(pages.values())
        units.extend(_sections(source, unpaged, section_chars))
    return units


def _sections(source: str, chunks: list[Document], section_chars: int) -> list[PageUnit]:
    if not chunks:
        return []
    sizes = [len(c.page_content) for c in chunks]
    total = sum(sizes)
    count = max(1, min(len(chunks), math.ceil(total / section_chars)))
    target = total / count
    numbers = []
    before = 0
    for size in sizes:  # the section of a chunk is where its middle falls: contiguous, balanced
        numbers.append(min(count - 1, int((before + size / 2) / target)) if target else 0)
        before += size
    distinct = sorted(set(numbers))
    units = [PageUnit(source, None, i + 1, len(distinct)) for i in range(len(distinct))]
    position = {number: i for i, number in enumerate(distinct)}
    for chunk, number in zip(chunks, numbers, strict=True):
        units[position[number]].chunks.append(chunk)
    return units


@dataclass
class _UnitState:
    unit: PageUnit
    text: str
    partials: list[str] = field(default_factory=list)
    summary: str | None = None
    failure: LLMFailure | None = None

    @property
    def done(self) -> bool:
        return self.summary is not None or self.failure is not None


@dataclass
class _Request:
    state: int
    inputs: dict[str, str]
    final: bool


class PageSummarizer(LLMBatchSettings):
    """Summarises every page (or section) of a chunked corpus with a chat model.

    ``summarize(chunks)`` returns one summary ``Document`` per :func:`page_units` unit (its
    ``source``, ``page`` or ``section``, the ids of its chunks in
    :data:`~langchain_fusion.metadata.SUMMARY_CHUNK_IDS`) and an
    :class:`~langchain_fusion.llm_calls.LLMReport`. A unit longer than ``piece_token_budget``
    tokens is summarised map-reduce: each piece, then the piece summaries (in rounds, if they are
    long too). A unit whose calls finally fail gets its leading text as summary
    (:data:`~langchain_fusion.metadata.SUMMARY_FALLBACK` True) and is listed in ``report.failed``.
    """

    section_chars: int = Field(default=DEFAULT_SECTION_CHARS, ge=1)
    """About how many characters of a source without pages go into one section."""
    piece_token_budget: int = Field(default=DEFAULT_PIECE_TOKEN_BUDGET, ge=1)
    """Tokens of text per prompt (estimated at four characters per token); longer units are map-reduced."""
    prompt: Prompt = DEFAULT_SUMMARY_PROMPT
    """The summary (and map) prompt; it must take ``source``, ``location`` and ``text``."""
    reduce_prompt: Prompt = DEFAULT_REDUCE_PROMPT
    """The reduce prompt; it must take ``source``, ``location`` and ``text`` (the part summaries)."""
    prompt_version: str | None = None
    """The prompts' version in cache keys; default :data:`SUMMARY_PROMPT_VERSION` for the default
    prompts and a hash of the prompt for others."""

    @field_validator("prompt", "reduce_prompt")
    @classmethod
    def _valid_prompt(cls, prompt: Prompt) -> Prompt:
        return check_prompt(prompt, _PROMPT_VARIABLES)

    @property
    def piece_chars(self) -> int:
        """``piece_token_budget`` in characters."""
        return self.piece_token_budget * CHARS_PER_TOKEN

    def _versions(self) -> tuple[str, str]:
        if self.prompt_version:
            return self.prompt_version, self.prompt_version
        return (
            prompt_version_of(self.prompt, DEFAULT_SUMMARY_PROMPT, SUMMARY_PROMPT_VERSION),
            prompt_version_of(self.reduce_prompt, DEFAULT_REDUCE_PROMPT, SUMMARY_PROMPT_VERSION),
        )

    def _pieces(self, text: str) -> list[str]:
        if len(text) <= self.piece_chars:
            return [text]
        splitter = RecursiveCharacterTextSplitter(chunk_size=self.piece_chars, chunk_overlap=0)
        return [piece for piece in splitter.split_text(text) if piece.strip()] or [text[: self.piece_chars]]

    def _batches(self, partials: list[str]) -> list[list[str]]:
        """Consecutive part summaries grouped to fit a prompt; at least two per group, so rounds shrink."""
        batches: list[list[str]] = []
        current: list[str] = []
        size = 0
        for partial in partials:
            if len(current) >= 2 and size + len(partial) > self.piece_chars:
                batches.append(current)
                current, size = [], 0
            current.append(partial)
            size += len(partial) + 2
        if len(current) == 1 and batches:
            batches[-1].append(current[0])
        elif current:
            batches.append(current)
        return batches

    def _plan(self, states: list[_UnitState], first: bool) -> list[_Request]:
        requests: list[_Request] = []
        for position, state in enumerate(states):
            if state.done:
                continue
            unit = state.unit
            if first:
                pieces = self._pieces(state.text)
                for number, piece in enumerate(pieces, 1):
                    where = unit.location if len(pieces) == 1 else f"{unit.location}, part {number} of {len(pieces)}"
                    inputs = {"source": unit.source, "location": where, "text": piece}
                    requests.append(_Request(position, inputs, final=len(pieces) == 1))
            else:
                batches = self._batches(state.partials)
                for batch in batches:
                    text = "\n\n".join(f"Part {i}: {partial}" for i, partial in enumerate(batch, 1))
                    inputs = {"source": unit.source, "location": unit.location, "text": text}
                    requests.append(_Request(position, inputs, final=len(batches) == 1))
        return requests

    @staticmethod
    def _accept(
        states: list[_UnitState],
        plan: list[_Request],
        outcomes: list[CallOutcome],
        report: LLMReport,
        progress: ProgressCallback | None,
    ) -> None:
        results: dict[int, list[tuple[_Request, CallOutcome]]] = {}
        for request, outcome in zip(plan, outcomes, strict=True):
            report.add(outcome)
            results.setdefault(request.state, []).append((request, outcome))
        for position, pairs in results.items():
            state = states[position]
            failed = next((o for _, o in pairs if o.text is None), None)
            if failed is not None:
                error = describe_error(failed.error) if failed.error is not None else "no answer"
                state.failure = LLMFailure(state.unit.id, state.unit.label, error, failed.attempts)
                if not pairs[0][0].final and progress is not None:
                    progress(1)  # a final request already counted when it finished
            elif pairs[0][0].final:
                state.summary = pairs[0][1].text
            else:
                state.partials = [o.text for _, o in pairs if o.text is not None]

    def _start(self, chunks: Sequence[Document]) -> tuple[list[_UnitState], LLMReport]:
        missing = [i for i, c in enumerate(chunks) if not c.id]
        if missing:
            raise InvalidParameterError(
                f"summaries link to chunks by Document.id, but chunk {missing[0]} has none: "
                "pass chunks that have ids (an index's documents always do)"
            )
        units = page_units(chunks, self.section_chars)
        report = LLMReport(task="summaries", model=self.resolved_model_id(), unit="pages and sections")
        report.items = len(units)
        return [_UnitState(unit, unit.text) for unit in units], report

    def _rounds(self, states: list[_UnitState]) -> Iterator[tuple[_Runner, list[_Request]]]:
        """The rounds of calls, each with its runner: the first prompts, then reduce rounds until every unit is done.

        Each round is planned when the loop asks for it, after the previous round's outcomes were accepted.
        """
        first_version, reduce_version = self._versions()
        first_runner = self._runner(self.prompt, "summaries", first_version)
        reduce_runner = self._runner(self.reduce_prompt, "summary reduce", reduce_version)
        first = True
        while plan := self._plan(states, first):
            yield (first_runner if first else reduce_runner), plan
            first = False

    @staticmethod
    def _on_done(plan: list[_Request], progress: ProgressCallback | None) -> Any:
        if progress is None:
            return None
        return lambda position: progress(1) if plan[position].final else None

    def summarize(
        self, chunks: Sequence[Document], *, progress: ProgressCallback | None = None, callbacks: Callbacks = None
    ) -> tuple[list[Document], LLMReport]:
        """One summary document per page or section, and a report; ``progress(n)`` counts finished units."""
        states, report = self._start(chunks)
        for runner, plan in self._rounds(states):
            outcomes = runner.run([r.inputs for r in plan], on_done=self._on_done(plan, progress), callbacks=callbacks)
            self._accept(states, plan, outcomes, report, progress)
        return self._documents(states, report)

    async def asummarize(
        self, chunks: Sequence[Document], *, progress: ProgressCallback | None = None, callbacks: Callbacks = None
    ) -> tuple[list[Document], LLMReport]:
        """Async twin of :meth:`summarize` (awaits the model's async API)."""
        states, report = self._start(chunks)
        for runner, plan in self._rounds(states):
            outcomes = await runner.arun(
                [r.inputs for r in plan], on_done=self._on_done(plan, progress), callbacks=callbacks
            )
            self._accept(states, plan, outcomes, report, progress)
        return self._documents(states, report)

    def _documents(self, states: list[_UnitState], report: LLMReport) -> tuple[list[Document], LLMReport]:
        documents = []
        for state in states:
            unit = state.unit
            if state.failure is not None:
                report.failed.append(state.failure)
            meta: dict[str, Any] = {keys.SOURCE: unit.source}
            if unit.page is not None:
                meta[keys.PAGE] = unit.page
            else:
                meta[keys.SECTION] = unit.section
            meta[keys.SUMMARY_CHUNK_IDS] = [c.id for c in unit.chunks]
            meta[keys.SUMMARY_FALLBACK] = state.summary is None
            text = state.summary if state.summary is not None else state.text[: self.piece_chars]
            documents.append(Document(id=unit.id, page_content=text, metadata=meta))
        report.warn_failures(logger, "their leading text stands in")
        return documents, report


# --- the index --------------------------------------------------------------------------------

Rows = NDArray[np.int64]


class HierarchicalIndex:
    """A chunk index and a summary index, each summary linked to the chunk rows it covers.

    Build one with :meth:`build` (summarises the chunk index's pages with a
    :class:`PageSummarizer`) or :meth:`from_summaries`; query it with :meth:`as_retriever`;
    persist it with :meth:`save` and :meth:`load` (one folder holding both indexes). Both
    indexes use the same embedding model, so a query is embedded once.
    """

    def __init__(self, chunks: FusionIndex, summaries: FusionIndex) -> None:
        """Pair a chunk index with a summary index over it (same embedding model)."""
        if chunks.embeddings_id != summaries.embeddings_id:
            raise InvalidParameterError(
                f"the summary index uses embeddings {summaries.embeddings_id!r} but the chunk index "
                f"{chunks.embeddings_id!r}; both must use the same model"
            )
        for doc in summaries.documents:
            ids = doc.metadata.get(keys.SUMMARY_CHUNK_IDS)
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise InvalidParameterError(
                    f"summary {doc.id!r} has no list of chunk ids in its {keys.SUMMARY_CHUNK_IDS!r} metadata"
                )
        self.chunks = chunks
        """The chunk index (searched within the selected pages)."""
        self.summaries = summaries
        """The summary index (one row per page or section)."""
        self.summary_report: LLMReport | None = None
        """The summarizer's report when built by :meth:`build` (None after :meth:`load`)."""
        self._links: tuple[tuple[int, int], list[Rows]] | None = None

    @classmethod
    def from_summaries(
        cls, chunks: FusionIndex, summaries: Sequence[Document], *, progress: ProgressCallback | None = None
    ) -> HierarchicalIndex:
        """Index summary documents (e.g. from :meth:`PageSummarizer.summarize`) next to ``chunks``.

        The summary index uses the chunk index's embeddings, analyzer and BM25 parameters, and
        an exact (flat) vector index: there are far fewer summaries than chunks.
        """
        index = FusionIndex(
            chunks.embeddings,
            analyzer=chunks.bm25.analyzer,
            bm25_params=chunks.bm25.params,
            embedding_batch_size=chunks.embedding_batch_size,
        )
        index.add_documents(summaries, progress=progress)
        return cls(chunks, index)

    @classmethod
    def build(
        cls,
        chunks: FusionIndex,
        summarizer: PageSummarizer,
        *,
        progress: ProgressCallback | None = None,
        summary_progress: ProgressCallback | None = None,
        callbacks: Callbacks = None,
    ) -> HierarchicalIndex:
        """Summarise the pages of ``chunks`` with ``summarizer`` and index the summaries.

        ``summary_progress`` counts summarised pages, ``progress`` embedded summaries. The
        summarizer's report is kept in :attr:`summary_report`.
        """
        documents, report = summarizer.summarize(chunks.documents, progress=summary_progress, callbacks=callbacks)
        built = cls.from_summaries(chunks, documents, progress=progress)
        built.summary_report = report
        return built

    def links(self) -> list[Rows]:
        """For each summary row, the chunk rows it covers (ids no longer in the chunk index are skipped)."""
        stamp = (self.chunks.revision, self.summaries.revision)
        if self._links is None or self._links[0] != stamp:
            table = []
            for doc in self.summaries.documents:
                rows = [self.chunks.row_of(i) for i in doc.metadata[keys.SUMMARY_CHUNK_IDS]]
                table.append(np.asarray(sorted({r for r in rows if r is not None}), dtype=np.int64))
            self._links = (stamp, table)
        return self._links[1]

    def save(self, folder: str | Path) -> Path:
        """Save both indexes to one folder atomically (see :mod:`langchain_fusion.persistence`)."""
        from langchain_fusion.persistence import save_hierarchical

        return save_hierarchical(self, Path(folder))

    @classmethod
    def load(cls, folder: str | Path, embeddings: Embeddings | None = None) -> HierarchicalIndex:
        """Load a folder saved by :meth:`save`, verifying both indexes and the link between them."""
        from langchain_fusion.persistence import load_hierarchical

        return load_hierarchical(Path(folder), embeddings)

    def as_retriever(self, **kwargs: Any) -> HierarchicalRetriever:
        """A :class:`HierarchicalRetriever` over this index; keyword arguments are its fields."""
        return HierarchicalRetriever(index=self, **kwargs)


# --- the retriever ----------------------------------------------------------------------------


def _fusion_default(name: str) -> Any:
    return FusionRetriever.model_fields[name].default


def _check_positive(name: str) -> Any:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidParameterError(f"{name} must be a positive integer; got {value!r}")
        return int(value)

    return check


def _check_weight(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError(f"summary_weight must be a number between 0 and 1; got {value!r}")
    return float(value)


class HierarchicalRetriever(BaseRetriever):
    """Summaries first, then the best chunks of the selected pages; one global top ``k``.

    For a query: the ``k_summaries`` best summaries by fused score; a mask of the chunk rows of
    their pages; a fused search of the chunks restricted to that mask (both sides, before
    ranking); each chunk scored ``summary_weight * summary_score + (1 - summary_weight) *
    fusion_score``; the ``k`` best. A chunk covered by several selected summaries counts once,
    under the best-ranked one. Returned chunks carry the usual score provenance plus
    :data:`~langchain_fusion.metadata.HIERARCHICAL_KEYS`. ``alpha``, ``fetch_k`` and ``method``
    apply to both searches and default to :class:`~langchain_fusion.retrievers.FusionRetriever`'s;
    every field can be overridden per call (``invoke(q, k=3, k_summaries=1)``).

    With ``alpha=0`` (BM25 only), only chunks containing a query term are candidates, as with
    the BM25 retriever. ``filter`` restricts the chunks, and the summaries to those covering a
    matching chunk.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: HierarchicalIndex
    """The summary and chunk indexes."""
    k: int = Field(default=4, ge=1)
    """How many chunks to return."""
    k_summaries: int = Field(default=3, ge=1)
    """How many summaries (pages or sections) to select."""
    summary_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    """Weight of the summary's score in ``hierarchical_score``; ``1 - summary_weight`` goes to the chunk's."""
    alpha: float = _fusion_default("alpha")
    """Weight of the vector side in both searches; ``1 - alpha`` is the weight of BM25."""
    fetch_k: int | None = Field(default=_fusion_default("fetch_k"), ge=1)
    """Candidates per side in the summary search (None: all). The chunk search always considers every
    chunk of the selected pages."""
    method: FusionMethod = _fusion_default("method")
    """``weighted``, ``zscore`` or ``rrf``, for both searches."""
    filter: MetadataFilter | None = None
    """Restrict results to chunks whose metadata matches (applied before ranking)."""

    _per_call_options = ("k", "k_summaries", "summary_weight", "alpha", "fetch_k", "method", "filter")

    @field_validator("alpha")
    @classmethod
    def _valid_alpha(cls, value: float) -> float:
        return check_alpha(value)

    def _options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        options = per_call_options(self, self._per_call_options, overrides)
        if "k_summaries" in overrides:
            options["k_summaries"] = _check_positive("k_summaries")(options["k_summaries"])
        if "summary_weight" in overrides:
            options["summary_weight"] = _check_weight(options["summary_weight"])
        return options

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or len(self.index.chunks) == 0 or len(self.index.summaries) == 0:
            return []
        return self._search(query, self.index.chunks.embed_query(query), options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or len(self.index.chunks) == 0 or len(self.index.summaries) == 0:
            return []
        query_vector = await self.index.chunks.aembed_query(query)
        return await run_in_executor(None, self._search, query, query_vector, options)

    def _search(self, query: str, query_vector: FloatMatrix, options: dict[str, Any]) -> list[Document]:
        index = self.index
        links = index.links()
        chunk_filter = None
        summary_mask = None
        if options["filter"] is not None:
            chunk_filter = index.chunks.row_mask(as_predicate(options["filter"]))
            summary_mask = np.fromiter((bool(chunk_filter[rows].any()) for rows in links), bool, count=len(links))
        method, alpha = options["method"], options["alpha"]
        summary_hits = fused_search(
            index.summaries,
            query,
            query_vector,
            k=options["k_summaries"],
            alpha=alpha,
            fetch_k=options["fetch_k"],
            method=method,
            mask=summary_mask,
        )
        mask = np.zeros(len(index.chunks), dtype=bool)
        leader: dict[int, tuple[int, Hit]] = {}
        for rank, summary in enumerate(summary_hits, 1):
            rows = links[summary.row]
            if chunk_filter is not None:
                rows = rows[chunk_filter[rows]]
            for row in rows.tolist():
                leader.setdefault(row, (rank, summary))  # the best-ranked summary leads
            mask[rows] = True
        allowed = int(mask.sum())
        if allowed == 0:
            return []
        # k and fetch_k = every allowed row: the pool is every chunk of the selected pages (on the vector
        # side; with alpha=0, those containing a query term), found inside FAISS with an id selector on
        # approximate indexes, and only those rows are scored.
        chunk_hits = fused_search(
            index.chunks, query, query_vector, k=allowed, alpha=alpha, fetch_k=allowed, method=method, mask=mask
        )
        weight = options["summary_weight"]
        scored = []
        for hit in chunk_hits:
            rank, summary = leader[hit.row]
            combined = weight * float(summary.fused or 0.0) + (1 - weight) * float(hit.fused or 0.0)
            scored.append((combined, rank, summary, hit))
        scored.sort(key=lambda s: (-s[0], s[1], -(s[3].fused or 0.0), s[3].row))
        results = []
        for combined, rank, summary, hit in scored[: options["k"]]:
            doc = scored_copy(index.chunks.document(hit.row), hit, method)
            doc.metadata[keys.HIERARCHICAL_SCORE] = combined
            doc.metadata[keys.SUMMARY_ID] = index.summaries.document(summary.row).id
            doc.metadata[keys.SUMMARY_SCORE] = summary.fused
            doc.metadata[keys.SUMMARY_RANK] = rank
            results.append(doc)
        return results
