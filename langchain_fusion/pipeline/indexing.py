"""The write path, composed once: :func:`build_index` runs an :class:`~langchain_fusion.pipeline.index_spec.IndexSpec`.

One run, under the location's update lock (one run at a time; another waits): open the index
at the location (or make a new one with the spec's store settings), bring it in line with the
files (:func:`~langchain_fusion.index.sync.sync_files`: unchanged files cost nothing), enrich the
new chunks and summarise the pages when asked, and save it with the record of the files
indexed, so the next run embeds only what changed. Everything that can be wrong (the location,
the chat model's key, the chunking) is checked before any embedding is paid for.

Progress and notes go to an :class:`IndexProgress` (the command line draws bars; Python callers
get nothing unless they give one). The result is an :class:`IndexReport`: what was done, for
people (:meth:`IndexReport.lines`) and for scripts (:meth:`IndexReport.to_dict`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion import phases
from langchain_fusion.errors import EmbeddingsMismatchError, FusionError, InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import (
    HIERARCHY_INFO_KEY,
    HierarchicalIndex,
    load_chunks,
    new_entry,
    page_count,
    saved_relevance,
    stored_entry,
    summarize_pages,
)
from langchain_fusion.index.opening import hierarchical_folder, keeps_summaries, open_for_update
from langchain_fusion.index.sync import SYNC_INFO_KEY, Keep, SyncEvents, SyncReport, sync_files
from langchain_fusion.ingest.loading import SkippedFile, unsupported_note
from langchain_fusion.models import embeddings as models
from langchain_fusion.models.call_reports import LLMReport
from langchain_fusion.models.embeddings import LocalEmbeddings, bundled_model_of
from langchain_fusion.phases import phase
from langchain_fusion.pipeline.index_spec import IndexSpec
from langchain_fusion.search.relevance import saved_model
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.registry import NewStoreOptions, StoreEngine, SummaryStores, engine_for

logger = logging.getLogger(__name__)

EMBEDDING_BATCH = 64
"""Chunks embedded per call by an indexing run, so that its progress moves every second or two (and Ctrl-C is
answered as soon): the bundled model sorts each call's chunks by length into its batches."""


class ProgressBar(Protocol):
    """One phase's progress (tqdm's bars are ones)."""

    def update(self, n: int = 1) -> Any:
        """``n`` more units done."""
        ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> Any:
        """What is being worked on (a file's name)."""
        ...

    def close(self) -> Any:
        """The phase is over."""
        ...


class IndexProgress(Protocol):
    """Where an indexing run reports what it does: a line for people, and a bar per phase."""

    def status(self, message: str) -> None:
        """Where the run is, for people: waiting for another run on the location, loading the model."""
        ...

    def problem(self, message: str) -> None:
        """What went wrong without stopping the run: a file skipped, a chat model call that failed."""
        ...

    def bar(self, total: int, description: str, unit: str) -> ProgressBar:
        """A bar for one phase (``total`` 0: not known in advance)."""
        ...


class _Bar:
    def update(self, n: int = 1) -> None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def close(self) -> None:
        return None


class LoggedProgress:
    """The default :class:`IndexProgress`: status and problems go to this module's logger, bars nowhere."""

    def status(self, message: str) -> None:
        """Log ``message`` at INFO."""
        logger.info(message)

    def problem(self, message: str) -> None:
        """Log ``message`` as a warning."""
        logger.warning(message)

    def bar(self, total: int, description: str, unit: str) -> ProgressBar:
        """A bar that shows nothing."""
        return _Bar()


@dataclass
class IndexReport:
    """What one :func:`build_index` run did."""

    location: str
    """Where the index was saved, for people (a folder's path, or the store's location)."""
    files: int = 0
    """Files the index holds (its record's count)."""
    pages: int = 0
    """PDF pages the index holds."""
    chunks: int = 0
    """Chunks the index holds."""
    sync: SyncReport = field(default_factory=SyncReport)
    """What this run changed, file by file."""
    embeddings: str = ""
    """The embedding model's id."""
    dimension: int | None = None
    """The embedding dimension."""
    vector_index: str = "-"
    """The dense index (a FAISS factory string in process)."""
    truncated: tuple[int, int] = (0, 0)
    """(chunks longer than the bundled model reads, chunks it embedded) in this run; (0, 0) for other models."""
    model_reads: int = 0
    """Word pieces of a chunk the bundled model reads (0 for other models)."""
    chunk_tokens: int | None = None
    """The most tokens of the model a chunk may have (None: chunks are bounded in characters only)."""
    chunking_advice: str = ""
    """When chunks were truncated: the chunking that embeds them whole."""
    legacy_analyzer: bool = False
    """The index keeps the BM25 analysis it was built with before 0.2."""
    summaries: int | None = None
    """Page and section summaries saved beside the chunks (None: no summaries asked for)."""
    llm: dict[str, LLMReport] = field(default_factory=dict)
    """The chat model's work by step (``contextual``, ``summaries``)."""
    llm_cache: Path | None = None
    """Where the chat model's answers are cached (None: no chat model used)."""
    interrupted: bool = False
    """The run was stopped (Ctrl-C); :attr:`saved` says whether the files done so far were kept."""
    saved: bool = True
    """Whether this run's work was saved (an interrupted run into a folder with summaries keeps the previous index)."""
    seconds: float = 0.0
    """Wall time of the run, from opening the index to its save (waiting for another run's lock not counted)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Where that time went, in seconds by phase (see :data:`~langchain_fusion.phases.PHASES`: load, split, embed,
    bm25, vectors, save...); the rest (hashing files, opening the index) is not in any phase."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (what ``index --json`` prints)."""
        summary: dict[str, Any] = {
            "index": self.location,
            "files": self.files,
            "pages": self.pages,
            "chunks": self.chunks,
            **self.sync.to_dict(),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.sync.skipped],
            "unsupported": list(self.sync.unsupported),
            "embeddings": self.embeddings,
            "dimension": self.dimension,
            "vector_index": self.vector_index,
            "chunks_longer_than_the_model_reads": self.truncated[0],
            "chunk_tokens": self.chunk_tokens,
            "seconds": self.seconds,
            "phases": dict(self.phases),
        }
        if self.llm_cache is not None:
            summary["summaries"] = self.summaries
            summary["llm"] = {"cache": str(self.llm_cache), **{name: r.to_dict() for name, r in self.llm.items()}}
        return summary

    def lines(self) -> list[str]:
        """The report for people, one line each."""
        lines = [
            f"indexed {self.files} files ({self.pages} PDF pages) into {self.chunks} chunks"
            + (f" and {self.summaries} page and section summaries" if self.summaries is not None else "")
            + f" -> {self.location}",
            f"this run: {self.sync.summary()}",
            f"embeddings: {self.embeddings} ({self.dimension} dimensions); vector index: {self.vector_index}",
        ]
        if self.sync.chunks_bounded:
            lines.append(
                f"chunking: {self.sync.chunks_bounded} chunks had more than the {self.chunk_tokens} tokens each chunk "
                "may have, and were split to fit"
            )
        longer, embedded = self.truncated
        if longer:
            lines.append(
                f"note: {longer} of the {embedded} chunks embedded this run are longer than the "
                f"{self.model_reads} word pieces the local model reads; only their start is embedded (BM25 indexes "
                "all of it). " + self.chunking_advice
            )
        if self.legacy_analyzer:
            lines.append(
                "note: this index keeps the BM25 analysis it was built with before 0.2 (no bigrams for Chinese, "
                "Japanese and Korean, no identifier splits); index its files into a new location to use the current one"
            )
        lines.extend(report.summary() for report in self.llm.values())
        if self.llm_cache is not None:
            lines.append(f"chat model answers cached in {self.llm_cache}")
        if self.seconds:
            spent = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.phases.items())
            lines.append(f"time: {self.seconds:.1f} s" + (f" ({spent})" if spent else ""))
        if self.sync.skipped:
            lines.append(f"skipped {len(self.sync.skipped)} file(s); see above")
        if self.sync.unsupported:
            lines.append(unsupported_note(self.sync.unsupported) + " (the JSON report lists them all)")
        return lines


def build_index(spec: IndexSpec, progress: IndexProgress | None = None) -> IndexReport:
    """Run ``spec``: the index at its location brought in line with its files, saved; see the module docstring.

    A KeyboardInterrupt while files are indexed stops after the current file: the files done so
    far are saved (a folder with page summaries keeps its previous index instead, as its
    summaries cover every file), and the report says ``interrupted``. Errors are
    :class:`~langchain_fusion.errors.FusionError` lines that name the spec's fields.
    """
    progress = progress if progress is not None else LoggedProgress()
    target = _Target(spec)  # everything that can be wrong is checked before a model is paid for
    chat_model = _chat_model(spec)
    embeddings = models.resolve_embeddings(spec.embeddings) if isinstance(spec.embeddings, str) else spec.embeddings
    waiting = f"waiting for another index run on {spec.location} to finish..."
    with target.engine.updating(spec.location, lambda: progress.status(waiting)):  # load -> update -> save
        with phases.timing() as clock:
            report = _Run(spec, target, progress, chat_model).run(target.open(embeddings))
        report.seconds, report.phases = round(clock.elapsed(), 3), clock.ordered()
        return report


def _check_tenancy(spec: IndexSpec, index: FusionIndex) -> None:
    """A run on a tenant-keyed index names the tenant its files are; a run on another index names none."""
    key = index.tenant_key
    if key is not None and spec.tenant is None:
        raise InvalidParameterError(
            f"{spec.location} is tenant-keyed (by {key!r}): name the tenant these files are (tenant=...)"
        )
    if key is None and spec.tenant is not None:
        raise InvalidParameterError(
            f"{spec.location} is not tenant-keyed: drop tenant=..., or index into a new location with tenant_key=..."
        )


def _chat_model(spec: IndexSpec) -> Any:
    """The chat model of enrichment and summaries (a missing key fails here, before any work), or None."""
    if not spec.uses_llm:
        return None
    if spec.llm is not None and not isinstance(spec.llm, str):
        return spec.llm
    from langchain_fusion.models.chat import resolve_chat_model

    return resolve_chat_model(spec.llm)


class _Target:
    """The location a run reads its index from and saves it to, checked when made."""

    def __init__(self, spec: IndexSpec) -> None:
        self.location = spec.location
        self.engine: StoreEngine = engine_for(spec.location)
        if spec.summaries and not keeps_summaries(spec.location):
            raise InvalidParameterError(
                f"page summaries (summaries=True) are kept in index folders and beside Milvus collections, not in "
                f"{self.engine.name} stores: give another location, or drop summaries=True"
            )
        self.summaries = spec.summaries
        analyzer = Analyzer(language=spec.language) if spec.language else None
        self.options = NewStoreOptions(spec.vector_index, spec.vector_search_params, analyzer, spec.tenant_key)
        self.engine.check_target(spec.location, self.options)
        self.hierarchical = hierarchical_folder(spec.location)
        if self.hierarchical is not None and not spec.summaries:
            raise InvalidParameterError(
                f"{spec.location} holds page summaries too: add summaries=True to keep them up to date, or choose a "
                "new location"
            )
        if self.hierarchical is not None:  # a model that cannot be saved again fails now, not after the summaries
            data = saved_relevance(self.hierarchical)
            if data is not None:
                saved_model(data, str(self.hierarchical))

    def open(self, embeddings: Any) -> FusionIndex:
        """The index to update (a hierarchical folder's chunk index), or a new empty one."""
        try:
            if self.hierarchical is not None:  # no probe embedding: a rerun with nothing new must not load the model
                return load_chunks(self.hierarchical, embeddings, check_dimension=False)
            index = open_for_update(self.location, embeddings, self.options)
        except EmbeddingsMismatchError as exc:
            raise EmbeddingsMismatchError(f"{exc}; to use other embeddings, choose a new location") from None
        if stored_entry(index.saved_info, self.location) is not None and not self.summaries:
            raise InvalidParameterError(
                f"{self.location} keeps page summaries beside it: add summaries=True to keep them up to date, or "
                "choose a new location"
            )
        return index

    @property
    def beside(self) -> bool:
        """Whether this run keeps page summaries in a store beside the chunks' (not in a folder)."""
        return self.summaries and isinstance(self.engine, SummaryStores) and self.engine.folder(self.location) is None

    def save(self, index: FusionIndex, record: dict[str, Any], hierarchical: HierarchicalIndex | None = None) -> str:
        """Persist ``index`` (or ``hierarchical``, built on it) with the file record; returns where, for people."""
        with phase("save"):
            return self._save(index, record, hierarchical)

    def _save(self, index: FusionIndex, record: dict[str, Any], hierarchical: HierarchicalIndex | None) -> str:
        if hierarchical is None and self.hierarchical is not None:
            raise AssertionError(f"{self.location} holds page summaries: saving its chunks alone would drop them")
        info = index.info_to_save({SYNC_INFO_KEY: record})  # a calibrated index keeps its relevance model
        if HIERARCHY_INFO_KEY in index.saved_info:  # and a store its summaries beside it (see _Run._summarize_beside)
            info[HIERARCHY_INFO_KEY] = index.saved_info[HIERARCHY_INFO_KEY]
        if hierarchical is not None:
            if self.hierarchical is not None:  # and so does a calibrated hierarchical one
                hierarchical.relevance_data = saved_relevance(self.hierarchical)
            return str(hierarchical.save(Path(self.location).expanduser(), info=info))
        return self.engine.save(self.location, index.store, info)

    def keeper(self, index: FusionIndex, within: tuple[str, ...]) -> Keep | None:
        """Writes each entry of the file record (at ``within`` in it) as it changes, for an engine that keeps it so."""
        write = self.engine.entry_writer(self.location, index.store) if self.hierarchical is None else None
        if write is None:
            return None
        return lambda path, value: write((SYNC_INFO_KEY, *within, *path), value)


class _SyncBars(SyncEvents):
    """A run's sync events on its :class:`IndexProgress`: a bar for reading, one for embedding, problems noted."""

    batch_size = EMBEDDING_BATCH

    def __init__(self, progress: IndexProgress, embeddings: Any, keep: Keep | None) -> None:
        self.progress, self.embeddings, self.keep = progress, embeddings, keep
        self.bars: dict[str, ProgressBar] = {}

    def reading(self, files: int) -> None:
        self.bars["read"] = self.progress.bar(files, "reading files", "file")

    def read(self, source: str) -> None:
        self.bars["read"].update(1)

    def embedding(self, chunks: int) -> None:
        if "read" in self.bars:
            self.bars.pop("read").close()
        if isinstance(self.embeddings, LocalEmbeddings):  # loaded only when some file needs it
            self.progress.status("loading the bundled embedding model...")
            self.embeddings.load_model()
        self.bars["embed"] = self.progress.bar(chunks, "embedding chunks", "chunk")

    def embedded(self, chunks: int) -> None:
        self.bars["embed"].update(chunks)

    def indexed(self, source: str) -> None:
        if "embed" in self.bars:
            self.bars["embed"].set_postfix_str(Path(source).name, refresh=False)

    def skipped(self, file: SkippedFile) -> None:
        self.progress.problem(f"skipped {file.path}: {file.reason}")

    def recorded(self, where: tuple[str, ...], value: Any) -> None:
        if self.keep is not None:
            self.keep(where, value)

    def close(self) -> None:
        """Close the bars still open."""
        for bar in self.bars.values():
            bar.close()


class _Run:
    """One run of :func:`build_index` on an opened index, under the update lock."""

    def __init__(self, spec: IndexSpec, target: _Target, progress: IndexProgress, chat_model: Any) -> None:
        self.spec, self.target, self.progress = spec, target, progress
        self.llm_options: dict[str, Any] = {}
        if chat_model is not None:
            self.llm_options = {
                "llm": chat_model,
                "cache_dir": spec.llm_cache or target.engine.default_llm_cache(spec.location),
                "max_concurrency": spec.llm_concurrency,
                "timeout": spec.llm_timeout,
            }
        self.reports: dict[str, LLMReport] = {}

    def run(self, index: FusionIndex) -> IndexReport:
        spec, target = self.spec, self.target
        _check_tenancy(spec, index)
        record = dict(index.saved_info.get(SYNC_INFO_KEY) or {})
        within: tuple[str, ...] = () if spec.tenant is None else ("by_tenant", spec.tenant)
        own = record  # the record of this run's files: a tenant's own on a tenant-keyed index
        for key in within:
            own = own.setdefault(key, {})
        synced = self._sync(index, own, within)
        if synced.interrupted:
            saved = target.hierarchical is None  # summaries are saved with every file they cover, or not at all
            location = target.save(index, record) if saved else spec.location
            files = len(own.get("by_path", {}))
            return IndexReport(location, files=files, sync=synced, interrupted=True, saved=saved)
        if len(index.view(spec.tenant)) == 0:
            raise FusionError(f"no readable documents in {' '.join(spec.paths)} (PDF, .txt and .md files are indexed)")
        summaries = None
        if target.beside:
            summaries = self._summarize_beside(index)
            location = target.save(index, record)
        elif spec.summaries:
            hierarchical = self._summarize(index)
            summaries = len(hierarchical.summaries.view(spec.tenant))
            location = target.save(index, record, hierarchical)
        else:
            location = target.save(index, record)
        return self._report(index, location, own, synced, summaries)

    def _sync(self, index: FusionIndex, record: dict[str, Any], within: tuple[str, ...]) -> SyncReport:
        """Bring the index in line with the files (progress, skips and enrichment reported as they happen)."""
        events = _SyncBars(self.progress, index.embeddings, self.target.keeper(index, within))
        try:
            with _quiet_logger("langchain_fusion.models.embeddings"):  # the report says it once
                return sync_files(
                    index, self.spec, record, transform=self._enrich if self.spec.contextual else None, events=events
                )
        finally:
            events.close()

    def _enrich(self, chunks: list[Document], pages: list[Document]) -> list[Document]:
        """Contextual enrichment of one file's chunks; failures are noted, the chunks indexed without context."""
        from langchain_fusion.ingest.enrichment import ContextualEnricher

        enricher = ContextualEnricher(**self.llm_options)
        bar = self.progress.bar(len(chunks), "enriching chunks", "chunk")
        try:
            with _quiet_logger("langchain_fusion.ingest.enrichment"), phase("enrich"):
                enriched, report = enricher.enrich(chunks, pages, progress=bar.update)
        finally:
            bar.close()
        for failure in report.failed:
            self.progress.problem(f"enrichment failed for {failure.label}: {failure.error}; indexed without context")
        before = self.reports.get("contextual")
        self.reports["contextual"] = report if before is None else before.merged(report)
        return enriched

    def _summarize(self, index: FusionIndex) -> HierarchicalIndex:
        """Page and section summaries of the index, embedded into a hierarchical index."""
        from langchain_fusion.ingest.summaries import PageSummarizer

        summarizer = PageSummarizer(**self.llm_options)
        bar = self.progress.bar(page_count(index, summarizer.section_chars), "summarising pages", "page")
        try:
            with _quiet_logger("langchain_fusion.ingest.summaries"), phase("summaries"):
                documents, report = summarize_pages(index, summarizer, progress=bar.update)
        finally:
            bar.close()
        for failure in report.failed:
            self.progress.problem(f"summary failed for {failure.label}: {failure.error}; its leading text stands in")
        self.reports["summaries"] = report
        bar = self.progress.bar(len(documents), "embedding summaries", "summary")
        try:
            return HierarchicalIndex.from_summaries(index, documents, progress=bar.update)
        finally:
            bar.close()

    def _summarize_beside(self, index: FusionIndex) -> int:
        """Bring the summaries in the store beside the chunks in line with them (see :mod:`.summary_sync`); how many.

        The record's hierarchical entry (kept by :meth:`_Target.save`) then says which summarizer made them.
        """
        from langchain_fusion.index.summary_sync import (
            plan_summaries,
            recorded_summarizer,
            sync_summaries,
            with_summarizer,
        )
        from langchain_fusion.ingest.summaries import PageSummarizer

        spec, engine = self.spec, self.target.engine
        assert isinstance(engine, SummaryStores)
        summarizer = PageSummarizer(**self.llm_options)
        beside = FusionIndex(index.embeddings, store=engine.summaries_store(spec.location, index.store))
        entry = stored_entry(index.saved_info, spec.location) or new_entry()
        fingerprint = summarizer.fingerprint()
        recorded = recorded_summarizer(entry, spec.tenant)
        plan = plan_summaries(index, beside, summarizer, spec.tenant, everything=recorded not in (None, fingerprint))
        phases = [] if plan.nothing_to_do else [("summarising pages", "page"), ("embedding summaries", "summary")]
        bars = [self.progress.bar(plan.pages, description, unit) for description, unit in phases]
        try:
            with _quiet_logger("langchain_fusion.ingest.summaries"):
                report = sync_summaries(
                    index,
                    beside,
                    summarizer,
                    plan,
                    spec.tenant,
                    summary_progress=bars[0].update if bars else None,
                    progress=bars[1].update if bars else None,
                )
        finally:
            for bar in bars:
                bar.close()
        for failure in report.failed:
            self.progress.problem(f"summary failed for {failure.label}: {failure.error}; its leading text stands in")
        self.reports["summaries"] = report
        index.saved_info = {**index.saved_info, HIERARCHY_INFO_KEY: with_summarizer(entry, spec.tenant, fingerprint)}
        return len(beside.view(spec.tenant))

    def _report(
        self, index: FusionIndex, location: str, record: dict[str, Any], synced: SyncReport, summaries: int | None
    ) -> IndexReport:
        view = index.view(self.spec.tenant)  # a tenant's run reports that tenant's index
        documents = list(view.iter_documents())
        pages = {(d.metadata.get(keys.SOURCE), d.metadata[keys.PAGE]) for d in documents if keys.PAGE in d.metadata}
        model = bundled_model_of(index.embeddings)
        truncated = model.truncated_texts if model is not None else (0, 0)
        return IndexReport(
            location,
            files=len(record.get("by_path", {})),
            pages=len(pages),
            chunks=len(view),
            sync=synced,
            embeddings=index.embeddings_id,
            dimension=index.dimension,
            vector_index=str(getattr(index.store, "vector_index", "-")),
            truncated=truncated,
            model_reads=model.max_word_pieces if model is not None else 0,
            chunk_tokens=(record.get("chunking") or {}).get("max_tokens"),
            chunking_advice=model.chunking_advice() if model is not None and truncated[0] else "",
            legacy_analyzer=index.analyzer.is_legacy,
            summaries=summaries,
            llm=self.reports,
            llm_cache=self.llm_options.get("cache_dir"),
        )


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Silence a library logger whose warnings the run reports itself (they would appear twice)."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)
