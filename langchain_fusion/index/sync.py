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
each file's entry as soon as its chunks are written (``keep``), so even a killed run keeps what
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
from langchain_fusion._checks import check_positive_int
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.ingest.loading import (
    DEFAULT_MAX_FILE_CHARS,
    LoadResult,
    SkippedFile,
    SkippedFileWarning,
    find_files,
    load_files,
    source_name,
    split_documents,
)
from langchain_fusion.models.embeddings import chunk_token_counter
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.stores.base import IdsBySource
from langchain_fusion.stores.local.checksums import sha256_file
from langchain_fusion.stores.local.manifest import saved_index_reason
from langchain_fusion.stores.tenants import scoped

SYNC_INFO_KEY = "files"
"""The key of the file record in a saved index's ``info``."""

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
    chunks_embedded: int = 0
    """Chunks embedded in this run."""
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
            "chunks_embedded": self.chunks_embedded,
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


def sync_files(
    index: FusionIndex,
    paths: Sequence[str | Path],
    record: dict[str, Any],
    *,
    chunk_size: int,
    chunk_overlap: int,
    max_chunk_tokens: int | None = None,
    keep_missing: bool = False,
    transform: Transform | None = None,
    on_file: Callable[[str], None] | None = None,
    on_skip: Callable[[SkippedFile], None] | None = None,
    before_embedding: Callable[[], None] | None = None,
    progress: ProgressCallback | None = None,
    batch_size: int | None = None,
    max_file_chars: int = DEFAULT_MAX_FILE_CHARS,
    keep: Keep | None = None,
    tenant: str | None = None,
) -> SyncReport:
    """Bring ``index`` in line with the files under ``paths``; ``record`` is updated in place.

    ``record`` is the file record saved with the index (``{}`` for a new one): file -> its
    sha256, and the chunking that made the chunks (``max_chunk_tokens`` also bounds chunks in the
    model's tokens, see :func:`~langchain_fusion.ingest.loading.split_documents`). ``on_file`` is
    called after each file, ``on_skip`` for each unreadable file as it is found, ``before_embedding`` once before the
    first chunk is embedded (to load a model only when there is work), ``progress`` with the
    number of chunks just embedded. A file yielding more than ``max_file_chars`` characters is
    skipped (reported). ``keep`` is given each entry of the record as it changes (see :data:`Keep`):
    a store that writes as it goes keeps the record beside the rows it has. A ``KeyboardInterrupt``
    stops the run after the current file's all-or-nothing update, with ``report.interrupted`` set.

    ``tenant`` (a tenant-keyed index): the files are that tenant's; its chunks get
    ``metadata[tenant_key] = tenant``, and only its chunks are compared, replaced and removed
    (``record`` is then that tenant's record).
    """
    chunking = {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap}
    if max_chunk_tokens is not None:  # recorded only when set, so older records still match the default
        chunking["max_tokens"] = check_positive_int(max_chunk_tokens, "max_chunk_tokens")
    run = _Sync(index, record, chunking, transform, on_skip, before_embedding, progress, batch_size, tenant)
    run.keep = keep
    if keep is not None and record.get("chunking") is None:
        # A record that had none is new: its files are chunked this way (a changed chunking is kept at the
        # end only, so a run killed halfway redoes every file rather than skip those chunked the old way).
        keep(("chunking",), chunking)
    run.max_file_chars = check_positive_int(max_file_chars, "max_file_chars")
    found, unreadable = find_files(paths, skip_folder=saved_index_reason)
    for skipped in unreadable:
        run.skip(skipped)
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
        for source in todo:
            run.update(source, files[source], current[source])
            if on_file is not None:
                on_file(source)
        if not keep_missing:
            for source in sorted(set(run.indexed) - set(current)):
                if _under(source, paths):
                    run.remove(source)
    except KeyboardInterrupt:
        run.report.interrupted = True
    return run.report


class _Sync:
    """One run of :func:`sync_files`: the index, its file record and what was done."""

    def __init__(
        self,
        index: FusionIndex,
        record: dict[str, Any],
        chunking: dict[str, int],
        transform: Transform | None,
        on_skip: Callable[[SkippedFile], None] | None,
        before_embedding: Callable[[], None] | None,
        progress: ProgressCallback | None,
        batch_size: int | None,
        tenant: str | None,
    ) -> None:
        self.index, self.report, self.tenant = index, SyncReport(), tenant
        self.chunking = chunking
        self.count_tokens = chunk_token_counter(index.embeddings) if "max_tokens" in chunking else None
        self.transform, self.on_skip, self.before_embedding = transform, on_skip, before_embedding
        self.progress, self.batch_size = progress, batch_size
        self.rechunk = record.get("chunking") not in (None, chunking)
        record["chunking"] = chunking
        self.files: dict[str, Any] = record.setdefault("by_path", {})
        self.indexed = chunk_ids_by_source(index, tenant)
        self.embedding_started = False
        self.max_file_chars = DEFAULT_MAX_FILE_CHARS
        """Files yielding more characters are skipped."""
        self.keep: Keep | None = None
        """Given each entry of the record as it changes."""

    def skip(self, skipped: SkippedFile) -> None:
        self.report.skipped.append(skipped)
        if self.on_skip is not None:
            self.on_skip(skipped)

    def unchanged(self, source: str, sha: str) -> bool:
        same = not self.rechunk and source in self.indexed and self.files.get(source, {}).get("sha256") == sha
        if same:
            self.report.files_unchanged.append(source)
        return same

    def update(self, source: str, path: Path, sha: str) -> None:
        """Index one new or changed file: its new chunks upserted, then its stale chunks deleted."""
        loaded = _load_quietly(path, self.max_file_chars)
        if loaded.skipped:
            for skipped in loaded.skipped:
                self.skip(skipped)
            return
        chunks = split_documents(
            loaded.documents,
            chunk_size=self.chunking["chunk_size"],
            chunk_overlap=self.chunking["chunk_overlap"],
            max_tokens=self.chunking.get("max_tokens"),
            count_tokens=self.count_tokens,
        )
        if chunks and not self.embedding_started:
            self.embedding_started = True
            if self.before_embedding is not None:
                self.before_embedding()
        if self.transform is not None and chunks:
            chunks = self.transform(chunks, loaded.documents)
        if self.tenant is not None and self.index.tenant_key is not None:
            key, tenant = self.index.tenant_key, self.tenant
            chunks = [chunk.model_copy(update={"metadata": {**chunk.metadata, key: tenant}}) for chunk in chunks]
        self.report.pages += sum(1 for doc in loaded.documents if keys.PAGE in doc.metadata)
        old = self.indexed.get(source, set())
        if chunks:
            self.index.add_documents(chunks, progress=self.progress, batch_size=self.batch_size)
            self.report.chunks_embedded += len(chunks)
        stale = sorted(old - {chunk.id or "" for chunk in chunks})
        if stale:
            self.report.chunks_removed += self._delete(stale)
        self.files[source] = {"sha256": sha, "chunks": len(chunks)}
        if self.keep is not None:
            self.keep(("by_path", source), self.files[source])
        (self.report.files_updated if source in self.indexed else self.report.files_added).append(source)
        self.indexed[source] = {chunk.id or "" for chunk in chunks}

    def _delete(self, ids: list[str]) -> int:
        """Delete these chunks (the tenant's, on a tenant-keyed index); how many went."""
        if self.tenant is None:
            return self.index.store.delete(ids)
        return scoped(self.index.store, self.tenant).delete_in(self.tenant, ids)

    def remove(self, source: str) -> None:
        """Delete the chunks of a file that is gone."""
        self.report.chunks_removed += self._delete(sorted(self.indexed.pop(source)))
        self.files.pop(source, None)
        if self.keep is not None:
            self.keep(("by_path", source), None)
        self.report.files_removed.append(source)


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
