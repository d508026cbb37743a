"""HierarchicalIndex: a chunk index and a summary index, each summary linked to its chunks.

The summaries (see :mod:`langchain_fusion.ingest.summaries`) live in a fusion index of their
own, each linked to the chunks it covers (:data:`~langchain_fusion.metadata.SUMMARY_CHUNK_IDS`),
next to the chunk index. :class:`~langchain_fusion.retrievers.hierarchical.HierarchicalRetriever`
searches the summaries, then the chunks restricted to the selected pages.

Saved as one folder holding both indexes and a manifest of its own::

    manifest.json     format (langchain-fusion-hierarchical-index) and version, library
                      version, counts, the sha256 of each part's manifest, and the
                      hierarchical relevance model when calibrated (``relevance_model``)
    chunks/           the chunk index (a saved FusionIndex; its own flat relevance model,
                      if any, in its manifest's ``info``)
    summaries/        the page and section summaries (a saved FusionIndex)

Calibrated relevance (:meth:`HierarchicalIndex.calibrate`) is fitted on hierarchical results:
their ranks come from the combined summary and chunk score, so a model fitted on flat fused
ranks does not carry over. The two models live in different manifests and never stand in for
each other; a folder saved without a hierarchical model loads as before, uncalibrated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import metadata as keys
from langchain_fusion._checks import check_k
from langchain_fusion._version import library_version
from langchain_fusion.errors import IndexFormatError, InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.ingest.summaries import PageSummarizer, page_units
from langchain_fusion.models.call_reports import LLMReport
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.search.relevance import (
    RELEVANCE_INFO_KEY,
    LabelledQueries,
    RelevanceModel,
    SavedModel,
    calibrate_search,
    top_relevance,
)
from langchain_fusion.stores.local import folder as fmt
from langchain_fusion.stores.local import saving
from langchain_fusion.stores.local.checksums import check_checksum, sha256_file
from langchain_fusion.stores.local.manifest import check_format, now_iso, read_manifest, write_manifest
from langchain_fusion.stores.local.store import LocalStore

if TYPE_CHECKING:
    from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever

HIERARCHICAL_FORMAT_NAME = fmt.HIERARCHICAL_FORMAT_NAME
HIERARCHICAL_FORMAT_VERSION = 2
CHUNKS_DIR = "chunks"
SUMMARIES_DIR = "summaries"
HIERARCHICAL_KIND = "hierarchical index (fitted on its own results: a flat calibration of its chunks does not apply)"
"""How errors name the calibration hierarchical search needs."""


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
        self.relevance_data: dict[str, Any] | None = None
        """The hierarchical relevance model as JSON data (:meth:`calibrate`), saved in the folder's manifest."""
        self._relevance = SavedModel("this hierarchical index")

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
            analyzer=chunks.analyzer,
            bm25_params=chunks.bm25_params,
            embedding_batch_size=chunks.embedding_batch_size,
            tenant_key=chunks.tenant_key,  # each tenant's summaries are searched with its chunks alone
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
        documents, report = summarize_pages(chunks, summarizer, progress=summary_progress, callbacks=callbacks)
        built = cls.from_summaries(chunks, documents, progress=progress)
        built.summary_report = report
        return built

    # --- calibrated relevance ----------------------------------------------------------------

    @property
    def relevance_model(self) -> RelevanceModel | None:
        """The hierarchical relevance model (:meth:`calibrate`), saved with the index; None when not calibrated.

        Not the chunk index's own (``index.chunks.relevance_model``, fitted on flat fused ranks).
        """
        return self._relevance.of(self.relevance_data)

    def calibrate(self, dataset: LabelledQueries, *, k: int = 10, **options: Any) -> RelevanceModel:
        """Fit the relevance model of hierarchical search; every result then carries ``metadata["relevance"]``.

        As :meth:`FusionIndex.calibrate <langchain_fusion.index.fusion_index.FusionIndex.calibrate>`,
        on each labelled query's top ``k`` hierarchical results under the default options (or the
        ``options`` given: those of :meth:`as_retriever` you will query with, e.g. ``k_summaries``).
        It replaces any earlier hierarchical model; :meth:`save` keeps it in the folder's manifest.
        """
        k = check_k(k)
        model = calibrate_search(self.as_retriever(k=k, **options), dataset, k=k)
        self.relevance_data = model.model_dump(mode="json")
        return model

    def answerability(self, query: str, **options: Any) -> float:
        """How likely hierarchical search answers ``query``: the calibrated relevance of its best result (0.0 if none).

        ``options`` are those of :meth:`as_retriever`. Needs a hierarchical calibration (:meth:`calibrate`).
        """
        return top_relevance(self.as_retriever(k=1, **options), self.relevance_model, query, HIERARCHICAL_KIND)

    # --- persistence ------------------------------------------------------------------------

    def save(self, folder: str | Path, *, info: Mapping[str, Any] | None = None) -> Path:
        """Save both indexes to one folder atomically and crash-safely (both parts, then the manifest).

        ``info`` is kept in the chunk index's manifest (with the chunk index's own relevance model,
        as :meth:`FusionIndex.save` keeps it); the hierarchical relevance model goes into the
        folder's manifest.
        """
        stores = {CHUNKS_DIR: self.chunks.store, SUMMARIES_DIR: self.summaries.store}
        for name, store in stores.items():
            if not isinstance(store, LocalStore):
                raise IndexFormatError(f"the {name} live on {type(store).__name__}; only in-process stores are saved")
        chunk_info = self.chunks.info_to_save(info)
        writers = {
            name: store.writer({"info": chunk_info} if name == CHUNKS_DIR else {})
            for name, store in stores.items()
            if isinstance(store, LocalStore)
        }
        counts = {CHUNKS_DIR: len(self.chunks), SUMMARIES_DIR: len(self.summaries)}
        relevance = {RELEVANCE_INFO_KEY: self.relevance_data} if self.relevance_model is not None else {}

        def write(staging: Path) -> None:
            for name, part in writers.items():
                (staging / name).mkdir()
                part(staging / name)
            manifest = {
                "format": HIERARCHICAL_FORMAT_NAME,
                "format_version": HIERARCHICAL_FORMAT_VERSION,
                "library_version": library_version(),
                "created_at": now_iso(),
                "embeddings": {"id": self.chunks.embeddings_id, "dimension": self.chunks.dimension},
                "counts": counts,
                "parts": {
                    name: {"folder": name, "manifest_sha256": sha256_file(staging / name / fmt.MANIFEST)}
                    for name in writers
                },
                **relevance,
            }
            write_manifest(staging, manifest)

        return saving.save_folder(Path(folder), write)

    @classmethod
    def load(cls, folder: str | Path, embeddings: Embeddings | None = None) -> HierarchicalIndex:
        """Load a folder saved by :meth:`save`, verifying both indexes and the link between them."""
        folder = Path(folder).expanduser()
        saving.recover(folder)
        with saving.load_lock(folder):  # a save of the same folder waits until both parts are read
            manifest = read_hierarchical_manifest(folder)
            try:
                parts = {name: manifest["parts"][name] for name in (CHUNKS_DIR, SUMMARIES_DIR)}
                expected = {name: (part["folder"], part["manifest_sha256"]) for name, part in parts.items()}
                counts = manifest["counts"]
                if not isinstance(counts, dict):
                    raise TypeError("counts must be an object")
            except (KeyError, TypeError) as exc:
                raise IndexFormatError(
                    f"{folder / fmt.MANIFEST} is incomplete or invalid ({exc}); rebuild the index"
                ) from None
            for name, (sub, checksum) in expected.items():
                if sub != name:
                    raise IndexFormatError(f"{folder / fmt.MANIFEST} names an unexpected folder {sub!r} for the {name}")
                path = folder / sub / fmt.MANIFEST
                fmt.require_file(path)
                check_checksum(path, checksum)
            chunks = FusionIndex.load(folder / CHUNKS_DIR, embeddings, lock=False)
            summaries = FusionIndex.load(folder / SUMMARIES_DIR, chunks.embeddings, lock=False)
            for name, value in {CHUNKS_DIR: len(chunks), SUMMARIES_DIR: len(summaries)}.items():
                if counts.get(name) != value:
                    raise IndexFormatError(
                        f"{folder}: {value} {name} found but the manifest says {counts.get(name)}; rebuild the index"
                    )
        loaded = cls(chunks, summaries)
        loaded.relevance_data = manifest.get(RELEVANCE_INFO_KEY)  # absent from folders saved without calibration
        return loaded

    def as_retriever(self, **kwargs: Any) -> HierarchicalRetriever:
        """A :class:`HierarchicalRetriever` over this index; keyword arguments are its fields."""
        from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever

        return HierarchicalRetriever(index=self, **kwargs)


def summarize_pages(
    chunks: FusionIndex,
    summarizer: PageSummarizer,
    *,
    progress: ProgressCallback | None = None,
    callbacks: Callbacks = None,
) -> tuple[list[Document], LLMReport]:
    """The page and section summaries of ``chunks`` with their report; on a tenant-keyed index, each tenant's own.

    A tenant's pages are summarised from its chunks alone (two tenants' files of one name stay
    apart), and each summary carries its tenant in ``metadata[tenant_key]``.
    """
    key = chunks.tenant_key
    if key is None:
        return summarizer.summarize(chunks.documents, progress=progress, callbacks=callbacks)
    documents: list[Document] = []
    report: LLMReport | None = None
    for tenant in chunks.tenants():
        own = list(chunks.view(tenant).iter_documents())
        summaries, part = summarizer.summarize(own, progress=progress, callbacks=callbacks)
        documents += [s.model_copy(update={"metadata": {**s.metadata, key: tenant}}) for s in summaries]
        report = part if report is None else report.merged(part)
    return documents, report if report is not None else summarizer.summarize([])[1]


def page_count(chunks: FusionIndex, section_chars: int) -> int:
    """How many pages and sections :func:`summarize_pages` summarises (each tenant's own, on a tenant-keyed index)."""
    if chunks.tenant_key is None:
        return len(page_units(chunks.documents, section_chars))
    return sum(len(page_units(list(chunks.view(t).iter_documents()), section_chars)) for t in chunks.tenants())


def load_chunks(folder: Path, embeddings: Embeddings | None = None, *, check_dimension: bool = True) -> FusionIndex:
    """The chunk index of the hierarchical index saved in ``folder``, read under the folder's lock.

    As :meth:`HierarchicalIndex.load` reads it: a save of the folder waits, and no lock file of the
    part is left inside the folder.
    """
    folder = folder.expanduser()
    saving.recover(folder)
    with saving.load_lock(folder):
        return FusionIndex.load(folder / CHUNKS_DIR, embeddings, lock=False, check_dimension=check_dimension)


def calibration_kind(index: FusionIndex | HierarchicalIndex) -> str:
    """How an error names the calibration ``index`` needs (hierarchical search needs its own)."""
    return HIERARCHICAL_KIND if isinstance(index, HierarchicalIndex) else "index"


def read_hierarchical_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a saved hierarchical index, checked for format and version."""
    manifest = read_manifest(folder)
    if isinstance(manifest, dict) and manifest.get("format") == "langchain-fusion-index":
        raise IndexFormatError(
            f"{folder} is a plain index without page summaries: rebuild it with summaries "
            "(langchain-fusion index --summaries, or HierarchicalIndex.build)"
        )
    return check_format(folder, manifest, HIERARCHICAL_FORMAT_NAME, HIERARCHICAL_FORMAT_VERSION, "hierarchical index")


def saved_relevance(folder: Path) -> dict[str, Any] | None:
    """The hierarchical relevance model saved in ``folder`` (its JSON data), or None when not calibrated."""
    data = read_hierarchical_manifest(folder.expanduser()).get(RELEVANCE_INFO_KEY)
    return data if isinstance(data, dict) else None


def is_hierarchical(folder: Path) -> bool:
    """True when ``folder`` holds a saved hierarchical index (by its manifest's format name)."""
    manifest = read_manifest(folder.expanduser())
    return isinstance(manifest, dict) and manifest.get("format") == HIERARCHICAL_FORMAT_NAME
