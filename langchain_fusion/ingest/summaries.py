"""Page and section summaries: a chat model summarises every PDF page (or section of a text).

:class:`PageSummarizer` has a chat model summarise every PDF page, and every section of a source
without pages (the whole text file, or consecutive chunks of about ``section_chars`` characters
when it is large). A page too long for one prompt is summarised map-reduce: its pieces first,
then the summaries of the pieces. Calls are bounded, retried and cached like contextual
enrichment's (:mod:`langchain_fusion.models.llm_calls`); a page whose summary fails gets its
leading text as a stand-in (so it stays reachable) and is reported. The summaries are the
documents of a :class:`~langchain_fusion.index.hierarchical.HierarchicalIndex`'s summary index.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_text_splitters import RecursiveCharacterTextSplitter
from pydantic import Field, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import is_int
from langchain_fusion.errors import InvalidParameterError, describe_error
from langchain_fusion.ingest.loading import merge_chunks
from langchain_fusion.metadata import FIELD_SEPARATOR
from langchain_fusion.models.call_reports import CallOutcome, LLMFailure, LLMReport
from langchain_fusion.models.llm_calls import CallRunner, LLMBatchSettings
from langchain_fusion.models.prompts import CHARS_PER_TOKEN, Prompt, check_prompt, prompt_version_of
from langchain_fusion.progress import ProgressCallback

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
            is_int(c.metadata.get(keys.START_INDEX)) and is_int(c.metadata.get(keys.CHUNK_INDEX)) for c in self.chunks
        )
        if located:
            return merge_chunks(self.chunks)
        return FIELD_SEPARATOR.join(c.page_content for c in self.chunks)

    def summary_document(self, text: str, *, fallback: bool) -> Document:
        """The summary ``Document`` of this unit: ``text``, its location and its chunks' ids in metadata."""
        meta: dict[str, Any] = {keys.SOURCE: self.source}
        if self.page is not None:
            meta[keys.PAGE] = self.page
        else:
            meta[keys.SECTION] = self.section
        meta[keys.SUMMARY_CHUNK_IDS] = [c.id for c in self.chunks]
        meta[keys.SUMMARY_FALLBACK] = fallback
        return Document(id=self.id, page_content=text, metadata=meta)


def leading_text_summaries(
    chunks: Sequence[Document], chars: int = 600, section_chars: int = DEFAULT_SECTION_CHARS
) -> list[Document]:
    """A summary of each :func:`page_units` unit without a chat model: its first ``chars`` characters.

    Deterministic and free: for tests, measurements, or a first hierarchical index before paying
    for :class:`PageSummarizer` (give them to :meth:`HierarchicalIndex.from_summaries
    <langchain_fusion.index.hierarchical.HierarchicalIndex.from_summaries>`). Marked as fallbacks.
    """
    if chars < 1:
        raise InvalidParameterError(f"chars must be >= 1; got {chars}")
    return [unit.summary_document(unit.text[:chars], fallback=True) for unit in page_units(chunks, section_chars)]


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
        if all(is_int(c.metadata.get(keys.CHUNK_INDEX)) for c in members):
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
    :class:`~langchain_fusion.models.call_reports.LLMReport`. A unit longer than ``piece_token_budget``
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

    def fingerprint(self) -> dict[str, Any]:
        """What decides the summaries of given chunks besides them: model, prompt versions, section and piece sizes.

        An index that keeps its summaries beside its chunks records it, and summarises every page again
        when it changes (another model, other prompts), as a fresh build would.
        """
        return {
            "model": self.resolved_model_id(),
            "prompts": list(self._versions()),
            "section_chars": self.section_chars,
            "piece_token_budget": self.piece_token_budget,
        }

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

    def _rounds(self, states: list[_UnitState]) -> Iterator[tuple[CallRunner, list[_Request]]]:
        """The rounds of calls, each with its runner: the first prompts, then reduce rounds until every unit is done.

        Each round is planned when the loop asks for it, after the previous round's outcomes were accepted.
        """
        first_version, reduce_version = self._versions()
        first_runner = self.runner(self.prompt, "summaries", first_version)
        reduce_runner = self.runner(self.reduce_prompt, "summary reduce", reduce_version)
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
            text = state.summary if state.summary is not None else state.text[: self.piece_chars]
            documents.append(unit.summary_document(text, fallback=state.summary is None))
        report.warn_failures(logger, "their leading text stands in")
        return documents, report
