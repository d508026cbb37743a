"""Which files an index is kept in line with, and how they become chunks: :class:`SyncSpec`.

The part of an indexing run that :func:`~langchain_fusion.index.sync.sync_files` reads:
the files, their chunking, whose they are (a tenant) and whether files gone are removed.
:class:`~langchain_fusion.pipeline.index_spec.IndexSpec` is a ``SyncSpec`` with a location,
the models and the store settings, so the command line and ``build_index`` hand their spec
down as it is. Import-light (pydantic, the chunking defaults and the tenant check)::

    sync_files(index, SyncSpec(paths=("manuals/",), chunk_size=800), record)
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, model_validator

from langchain_fusion._checks import CheckedModel, check_positive_int
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    check_chunking,
)
from langchain_fusion.stores.tenants import check_tenant


def _paths(value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidParameterError(f"paths must be one or more files or folders to index; got {value!r}")
    paths = []
    for path in value:
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidParameterError(f"paths must be files or folders (strings or paths); got {path!r}")
        paths.append(os.fspath(path))
    return tuple(paths)


def positive(name: str, meaning: str) -> BeforeValidator:
    """A field's check: a positive int (``meaning`` says what it counts, in the error)."""
    return BeforeValidator(lambda value: check_positive_int(value, name, meaning))


def _optional_positive(name: str, meaning: str) -> BeforeValidator:
    return BeforeValidator(lambda value: None if value is None else check_positive_int(value, name, meaning))


class SyncSpec(CheckedModel):
    """Files to index and how they are chunked: what :func:`~langchain_fusion.index.sync.sync_files` reads.

    Unchanged files cost nothing; changed files have their chunks replaced; files gone from
    under ``paths`` have theirs removed, unless ``keep_missing``. The chunking is recorded with
    the files, so a run with another chunking redoes every file.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, use_attribute_docstrings=True)

    paths: Annotated[tuple[str, ...], BeforeValidator(_paths)]
    """Files or folders to index (folders recursively): PDFs, .txt and .md files."""
    chunk_size: Annotated[int, positive("chunk_size", "characters per chunk")] = DEFAULT_CHUNK_SIZE
    """Characters per chunk."""
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    """Characters shared by neighbouring chunks."""
    max_chunk_tokens: Annotated[int | None, _optional_positive("max_chunk_tokens", "word pieces per chunk")] = None
    """Also bound each chunk to N tokens of the embedding model. By default: the model's own window when it declares
    one (the bundled model reads 254 word pieces, so every chunk is embedded whole; Chinese and Japanese have about
    one per character); chunks for a model that declares nothing are bounded by their size in characters only."""
    max_file_chars: Annotated[int, positive("max_file_chars", "characters one file may yield")] = DEFAULT_MAX_FILE_CHARS
    """Skip (and report) a file that yields more than N characters of text, e.g. a small PDF that expands to
    millions (the default is about 2,000 dense pages)."""
    tenant: Annotated[str | None, BeforeValidator(check_tenant)] = None
    """On a tenant-keyed index: the tenant these files are (each chunk gets it under the tenant key); the run
    touches that tenant's documents and file record only."""
    keep_missing: bool = False
    """Keep the chunks of files that were indexed from under the paths and no longer exist there (by default they
    are removed)."""

    @model_validator(mode="after")
    def _chunking(self) -> SyncSpec:
        check_chunking(self.chunk_size, self.chunk_overlap)
        return self
