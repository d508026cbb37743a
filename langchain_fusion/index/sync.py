"""Keeping a FusionIndex in sync with files on disk: unchanged files cost nothing.

:func:`sync_files` compares the files under the given paths with a record of what the index
holds (each file's sha256 and chunking, kept in the saved manifest's ``info``), and then:

- skips unchanged files without loading or embedding them;
- replaces the chunks of changed files (new chunks upserted, stale ones deleted);
- adds new files;
- removes the chunks of files that were indexed from under the given paths and no longer
  exist there (unless ``keep_missing``).

Work is done file by file and the record is updated after each file, so an interruption
(Ctrl-C) leaves a consistent index whose record says exactly which files are done: save it,
and a rerun resumes with the rest. A store that writes each change at once (Milvus) is also given
each file's entry as soon as its chunks are written (:meth:`SyncEvents.recorded`), so even a killed run keeps what
it finished.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.sync_spec import SyncSpec
from langchain_fusion.ingest.loading import (
    LoadResult,
    SkippedFile,
    SkippedFileWarning,
    find_files,
    load_files,
    source_name,
    split_into_chunks,
)
from langchain_fusion.models.embeddings import chunk_bound
from langchain_fusion.phases import phase
from langchain_fusion.stores.base import IdsBySource
from langchain_fusion.stores.local.checksums import sha256_file
from langchain_fusion.stores.local.manifest import saved_index_reason
from langchain_fusion.stores.tenants import scoped

SYNC_INFO_KEY = "files"
"""The key of the file record in a saved index's ``info``."""

GROUP_CHUNKS = 64
"""About how many chunks of consecutive files are indexed together (all or nothing, in one embedding call of an
``index`` run): small files then fill the model's batches. Ctrl-C loses the group being embedded, a second or two
of work on two free cores."""


Keep = Callable[[tuple[str, ...], Any], None]
"""Called with (where in the record, value) as soon as an entry changes: ``("by_path", source)`` with the
file's entry (None once its chunks are deleted), ``("chunking",)`` on a record that had none."""

Transform = Callable[[list[Document], list[Document]], list[Document]]
"""Called with (chunks, source pages) of the files about to be embedded; returns the chunks to
index (contextual enrichment hooks in here)."""


@dataclass
class SyncReport:
    """What :func:`sync_files` did."""

    files_added: list[str] = field(default_factory=list)
    """Files indexed for the first time."""
    files_updated: list[str] = field(default_factory=list)
    """Files whose content (or the chunking) changed: their chunks were replaced."""
    files_removed: list[str] = field(default_factory=list)
    """Files gone from under the given paths: their chunks were deleted."""
    files_unchanged: list[str] = field(default_factory=list)
    """Files skipped without loading or embedding."""
    skipped: list[SkippedFile] = field(default_factory=list)
    """Files that could not be read (reported, not fatal)."""
    unsupported: list[str] = field(default_factory=list)
    """Files in the folders whose type is not read (PDF, .txt and .md files are), by path."""
    chunks_embedded: int = 0
    """Chunks embedded in this run."""
    chunks_bounded: int = 0
    """Chunks of ``chunk_size`` characters longer than the model reads, split again by its tokens in this run."""
    chunks_removed: int = 0
    """Chunks deleted in this run (stale chunks of changed files and chunks of removed files)."""
    pages: int = 0
    """PDF pages read in this run."""
    interrupted: bool = False
    """True when the run stopped early (Ctrl-C); the record lists only the files that were done."""

    def to_dict(self) -> dict[str, Any]:
        """Counts for ``--json`` and logs."""
        return {
            "files_added": len(self.files_added),
            "files_updated": len(self.files_updated),
            "files_removed": len(self.files_removed),
            "files_unchanged": len(self.files_unchanged),
            "files_skipped": len(self.skipped),
            "files_unsupported": len(self.unsupported),
            "chunks_embedded": self.chunks_embedded,
            "chunks_bounded": self.chunks_bounded,
            "chunks_removed": self.chunks_removed,
            "interrupted": self.interrupted,
        }

    def summary(self) -> str:
        """One line for people."""
        counts = self.to_dict()
        return (
            f"{counts['files_added']} files added, {counts['files_updated']} updated, "
            f"{counts['files_removed']} removed, {counts['files_unchanged']} unchanged; "
            f"{self.chunks_embedded} chunks embedded, {self.chunks_removed} removed"
        )


class SyncEvents:
    """What a :func:`sync_files` run tells its caller as it goes. Every method here does nothing: subclass to listen.

    The files to index are read and chunked first, then embedded, so both steps have a total.
    """

    batch_size: int | None = None
    """Chunks embedded per call to the model (None: the index's own batch size); smaller calls report
    :meth:`embedded` more often."""

    def reading(self, files: int) -> None:
        """``files`` new or changed files are about to be read and chunked (not called when there are none)."""

    def read(self, source: str) -> None:
        """One of them was read and chunked (or skipped: see :meth:`skipped`)."""

    def embedding(self, chunks: int) -> None:
        """``chunks`` chunks are about to be embedded (not called when there are none): load a model here."""

    def embedded(self, chunks: int) -> None:
        """``chunks`` more chunks were just embedded."""

    def indexed(self, source: str) -> None:
        """A file's chunks were written."""

    def skipped(self, file: SkippedFile) -> None:
        """A file that cannot be read (or yields too much text) was found; it is reported and left alone."""

    def recorded(self, where: tuple[str, ...], value: Any) -> None:
        """An entry of the file record changed (see :data:`Keep`).

        A store that writes each change at once keeps the record beside the rows it has, so that even a killed
        run keeps what it finished.
        """


def sync_files(
    index: FusionIndex,
    spec: SyncSpec,
    record: dict[str, Any],
    *,
    transform: Transform | None = None,
    events: SyncEvents | None = None,
) -> SyncReport:
    """Bring ``index`` in line with the files of ``spec``; ``record`` is updated in place.

    ``record`` is the file record saved with the index (``{}`` for a new one): file -> its
    sha256, and the chunking that made the chunks. Chunks are also bounded in the model's tokens:
    ``spec.max_chunk_tokens`` of them, or by default the model's own window when it declares one (see
    :func:`~langchain_fusion.models.embeddings.chunk_bound` and
    :func:`~langchain_fusion.ingest.loading.split_documents`). ``transform`` is given the chunks
    of the files about to be embedded (see :data:`Transform`); ``events`` is told what happens as
    it happens (see :class:`SyncEvents`). A file yielding more than ``spec.max_file_chars``
    characters is skipped (reported). A ``KeyboardInterrupt`` stops the run after the last
    all-or-nothing update of files (see :data:`GROUP_CHUNKS`; while reading: before any change),
    with ``report.interrupted`` set.

    ``spec.tenant`` (a tenant-keyed index): the files are that tenant's; its chunks get
    ``metadata[tenant_key] = tenant``, and only its chunks are compared, replaced and removed
    (``record`` is then that tenant's record).
    """
    events = events if events is not None else SyncEvents()
    chunking = {"chunk_size": spec.chunk_size, "chunk_overlap": spec.chunk_overlap}
    bound = chunk_bound(index.embeddings, spec.max_chunk_tokens)
    if bound is not None:  # recorded only when there is one, so records of models that declare nothing still match
        chunking["max_tokens"] = bound[0]
    if record.get("chunking") is None:
        # A record that had none is new: its files are chunked this way (a changed chunking is kept at the
        # end only, so a run killed halfway redoes every file rather than skip those chunked the old way).
        events.recorded(("chunking",), chunking)
    run = _Sync(index, spec, record, chunking, transform, events)
    run.count_tokens = bound[1] if bound is not None else None
    listed = find_files(spec.paths, skip_folder=saved_index_reason)
    found = listed.files
    for skipped in listed.skipped:
        run.skip(skipped)
    run.report.unsupported = listed.unsupported
    current: dict[str, str] = {}
    files: dict[str, Path] = {}  # source name -> the file (they differ for names that are not UTF-8)
    for path in found:
        source = source_name(path)
        try:
            current[source], files[source] = sha256_file(path), path
        except OSError as exc:
            run.skip(SkippedFile(source, f"cannot be read: {exc.strerror or exc}"))
    todo = [source for source, sha in current.items() if not run.unchanged(source, sha)]
    try:
        if todo:
            events.reading(len(todo))
        ready: list[_File] = []
        for source in todo:
            file = run.read(source, files[source], current[source])
            if file is not None:
                ready.append(file)
            events.read(source)
        total = sum(len(file.chunks) for file in ready)
        if total:
            events.embedding(total)
        for group in _groups(ready, GROUP_CHUNKS):
            run.update(group)
            for file in group:
                events.indexed(file.source)
        if not spec.keep_missing:
            for source in sorted(set(run.indexed) - set(current)):
                if _under(source, spec.paths):
                    run.remove(source)
    except KeyboardInterrupt:
        run.report.interrupted = True
    return run.report


class _Sync:
    """One run of :func:`sync_files`: the index, its file record and what was done."""

    def __init__(
        self,
        index: FusionIndex,
        spec: SyncSpec,
        record: dict[str, Any],
        chunking: dict[str, int],
        transform: Transform | None,
        events: SyncEvents,
    ) -> None:
        self.index, self.report, self.tenant = index, SyncReport(), spec.tenant
        self.max_file_chars = spec.max_file_chars
        """Files yielding more characters are skipped."""
        self.chunking = chunking
        self.count_tokens: Callable[[Sequence[str]], list[int]] | None = None
        """The model's token counter, when chunks are bounded in its tokens."""
        self.transform, self.events = transform, events
        self.rechunk = record.get("chunking") not in (None, chunking)
        record["chunking"] = chunking
        self.files: dict[str, Any] = record.setdefault("by_path", {})
        self.indexed = chunk_ids_by_source(index, spec.tenant)

    def skip(self, skipped: SkippedFile) -> None:
        self.report.skipped.append(skipped)
        self.events.skipped(skipped)

    def unchanged(self, source: str, sha: str) -> bool:
        same = not self.rechunk and source in self.indexed and self.files.get(source, {}).get("sha256") == sha
        if same:
            self.report.files_unchanged.append(source)
        return same

    def read(self, source: str, path: Path, sha: str) -> _File | None:
        """Load and chunk one new or changed file (None, and reported, if it cannot be read)."""
        with phase("load"):
            loaded = _load_quietly(path, self.max_file_chars)
        if loaded.skipped:
            for skipped in loaded.skipped:
                self.skip(skipped)
            return None
        with phase("split"):
            split = split_into_chunks(
                loaded.documents,
                chunk_size=self.chunking["chunk_size"],
                chunk_overlap=self.chunking["chunk_overlap"],
                max_tokens=self.chunking.get("max_tokens"),
                count_tokens=self.count_tokens,
            )
        self.report.chunks_bounded += split.bounded
        return _File(source, sha, loaded.documents, split.chunks)

    def update(self, group: list[_File]) -> None:
        """Index files read, all or nothing: their new chunks upserted together, then their stale chunks deleted.

        Embedding the chunks of several small files in one call lets the model batch them by length.
        """
        chunks_of: list[list[Document]] = []
        for file in group:
            chunks = file.chunks
            if self.transform is not None and chunks:
                chunks = self.transform(chunks, file.pages)
            chunks_of.append(self._tenants(chunks))
        every = [chunk for chunks in chunks_of for chunk in chunks]
        if every:
            self.index.add_documents(every, progress=self.events.embedded, batch_size=self.events.batch_size)
            self.report.chunks_embedded += len(every)
        for file, chunks in zip(group, chunks_of, strict=True):
            source = file.source
            self.report.pages += sum(1 for doc in file.pages if keys.PAGE in doc.metadata)
            stale = sorted(self.indexed.get(source, set()) - {chunk.id or "" for chunk in chunks})
            if stale:
                self.report.chunks_removed += self._delete(stale)
            self.files[source] = {"sha256": file.sha256, "chunks": len(chunks)}
            self.events.recorded(("by_path", source), self.files[source])
            (self.report.files_updated if source in self.indexed else self.report.files_added).append(source)
            self.indexed[source] = {chunk.id or "" for chunk in chunks}

    def _tenants(self, chunks: list[Document]) -> list[Document]:
        """The chunks with the run's tenant in ``metadata[tenant_key]`` (a tenant-keyed index), else as they are."""
        key = self.index.tenant_key
        if self.tenant is None or key is None:
            return chunks
        return [chunk.model_copy(update={"metadata": {**chunk.metadata, key: self.tenant}}) for chunk in chunks]

    def _delete(self, ids: list[str]) -> int:
        """Delete these chunks (the tenant's, on a tenant-keyed index); how many went."""
        if self.tenant is None:
            return self.index.store.delete(ids)
        return scoped(self.index.store, self.tenant).delete_in(self.tenant, ids)

    def remove(self, source: str) -> None:
        """Delete the chunks of a file that is gone."""
        self.report.chunks_removed += self._delete(sorted(self.indexed.pop(source)))
        self.files.pop(source, None)
        self.events.recorded(("by_path", source), None)
        self.report.files_removed.append(source)


def _groups(files: list[_File], chunks: int) -> list[list[_File]]:
    """``files`` in order, in groups of about ``chunks`` chunks (a file with more is a group of its own)."""
    groups: list[list[_File]] = []
    size = 0
    for file in files:
        if not groups or size + len(file.chunks) > chunks:
            groups.append([])
            size = 0
        groups[-1].append(file)
        size += len(file.chunks)
    return groups


@dataclass
class _File:
    """One new or changed file, read and chunked, waiting to be indexed."""

    source: str
    sha256: str
    pages: list[Document]
    chunks: list[Document]


def _load_quietly(path: Path, max_chars: int) -> LoadResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedFileWarning)  # the report lists them
        return load_files([path], max_chars=max_chars)


def chunk_ids_by_source(index: FusionIndex, tenant: str | None) -> dict[str, set[str]]:
    """The ids of the chunks of each source (``str`` of its source metadata), of ``tenant``'s alone when given."""
    view = index.view(tenant)
    if isinstance(view, IdsBySource):  # a remote store reads ids and sources only
        return view.ids_by_source()
    table: dict[str, set[str]] = {}
    for doc in view.iter_documents():
        table.setdefault(str(doc.metadata.get(keys.SOURCE, "")), set()).add(doc.id or "")
    return table


def _under(source: str, paths: Sequence[str | Path]) -> bool:
    """Whether ``source`` is one of ``paths`` or inside one of them (as the loader names files)."""
    candidate = Path(source)
    for raw in paths:
        root = Path(source_name(raw))
        if candidate == root or root in candidate.parents:
            return True
    return False
