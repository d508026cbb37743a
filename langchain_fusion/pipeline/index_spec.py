"""What to index, as data: :class:`IndexSpec`, the write-path twin of :class:`~.spec.PipelineSpec`.

Import-light (pydantic, the chunking defaults and the analyzer's languages): the command line
builds a spec from its flags (generated from these fields) before anything heavy loads, and
:func:`~langchain_fusion.pipeline.indexing.build_index` turns it into an index at its location.
A Python user writes the same spec::

    build_index(IndexSpec(location="milvus://localhost:19530/docs", paths=("manuals/",), summaries=False))
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, ConfigDict, model_validator

from langchain_fusion._checks import CheckedModel, check_positive_int
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    check_chunking,
)
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT, check_embeddings, check_llm
from langchain_fusion.stores.analyzer import StemmerLanguage
from langchain_fusion.stores.tenants import check_tenant, check_tenant_key


def _location(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(
            f"location must be a folder or a store location such as milvus://HOST:PORT/COLLECTION; got {value!r}"
        )
    return value


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


def _positive(name: str, meaning: str) -> BeforeValidator:
    return BeforeValidator(lambda value: check_positive_int(value, name, meaning))


def _optional_positive(name: str, meaning: str) -> BeforeValidator:
    return BeforeValidator(lambda value: None if value is None else check_positive_int(value, name, meaning))


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InvalidParameterError(f"llm_timeout must be a positive number of seconds; got {value!r}")
    return float(value)


def _cache(value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidParameterError(f"llm_cache must be a folder; got {value!r}")
    return Path(value).expanduser()


class IndexSpec(CheckedModel):
    """Files to index, where the index lives, and how it is built: one checked value for Python and the command line.

    :func:`~langchain_fusion.pipeline.indexing.build_index` runs it: it opens the index at
    ``location`` (a new one is made with the store settings here), brings it in line with the
    files (unchanged files cost nothing; changed files have their chunks replaced; files gone
    from under ``paths`` have theirs removed, unless ``keep_missing``), optionally enriches the
    chunks and summarises the pages with a chat model, and saves it, holding the location's
    update lock for the whole run.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, use_attribute_docstrings=True)

    location: Annotated[str, BeforeValidator(_location)]
    """Where the index is saved: a folder, or another engine's store such as milvus://HOST:PORT/COLLECTION. An
    existing index there is updated in place."""
    paths: Annotated[tuple[str, ...], BeforeValidator(_paths)]
    """Files or folders to index (folders recursively): PDFs, .txt and .md files."""
    embeddings: Annotated[Any, BeforeValidator(check_embeddings)] = None
    """Embedding model: 'local' (the bundled all-MiniLM-L6-v2, offline), 'openai' or 'openai:MODEL' (needs
    OPENAI_API_KEY and the openai extra), 'PROVIDER:MODEL' via LangChain's init_embeddings, or (in Python) an
    Embeddings. By default: the model an existing index was built with, else the LANGCHAIN_FUSION_EMBEDDINGS
    environment variable if set, else local (an API key alone never switches it)."""
    chunk_size: Annotated[int, _positive("chunk_size", "characters per chunk")] = DEFAULT_CHUNK_SIZE
    """Characters per chunk."""
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    """Characters shared by neighbouring chunks."""
    max_chunk_tokens: Annotated[int | None, _optional_positive("max_chunk_tokens", "word pieces per chunk")] = None
    """Also bound each chunk to N tokens of the embedding model. By default: the model's own window when it declares
    one (the bundled model reads 254 word pieces, so every chunk is embedded whole; Chinese and Japanese have about
    one per character); chunks for a model that declares nothing are bounded by their size in characters only."""
    max_file_chars: Annotated[int, _positive("max_file_chars", "characters one file may yield")] = (
        DEFAULT_MAX_FILE_CHARS
    )
    """Skip (and report) a file that yields more than N characters of text, e.g. a small PDF that expands to
    millions (the default is about 2,000 dense pages)."""
    language: StemmerLanguage | None = None
    """BM25 stemming and stopwords of a new index for words in this language's script whose text is not detected
    in another language (default: english; each text's language is detected, and every language is indexed
    either way). An existing index keeps its own."""
    vector_index: str | None = None
    """FAISS factory string of a new index: 'Flat' is exact (the default); e.g. 'HNSW32' is approximate and faster
    at scale. An existing index keeps its own."""
    vector_search_params: str | None = None
    """FAISS search parameters for approximate indexes, e.g. 'efSearch=128' or 'nprobe=16' (an HNSW graph also takes
    'efConstruction=N', how wide it is built; default 128)."""
    contextual: bool = False
    """Contextual enrichment: a chat model writes 1-3 sentences situating each chunk in its whole document; they are
    embedded and BM25-indexed with the chunk, while results show the original text."""
    summaries: bool = False
    """Have a chat model summarise every PDF page (or section of a text file) into a second index beside the chunks,
    for hierarchical search: in the same folder, or beside a Milvus collection (COLLECTION__summaries, kept in line
    with the chunks page by page)."""
    llm: Annotated[Any, BeforeValidator(check_llm)] = None
    """Chat model of contextual enrichment and summaries: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), any
    'PROVIDER:MODEL' that LangChain's init_chat_model knows, or (in Python) a chat model. By default OpenAI's
    default model."""
    llm_cache: Annotated[Path | None, BeforeValidator(_cache)] = None
    """Folder caching the chat model's answers, so a rerun pays only for new or changed chunks and pages (by default
    the index location's name plus '.llm-cache', next to it)."""
    llm_concurrency: Annotated[int, _positive("llm_concurrency", "chat model calls at once")] = DEFAULT_LLM_CONCURRENCY
    """Chat model calls at once for contextual enrichment and summaries."""
    llm_timeout: Annotated[float | None, BeforeValidator(_seconds)] = DEFAULT_LLM_TIMEOUT
    """Seconds to wait for each chat model answer before it counts as failed and is retried."""
    tenant_key: Annotated[str | None, BeforeValidator(check_tenant_key)] = None
    """Make a new index tenant-keyed by this metadata key: each tenant's documents are searched as an index of
    their own (an existing index keeps its own key; this must match it)."""
    tenant: Annotated[str | None, BeforeValidator(check_tenant)] = None
    """On a tenant-keyed index: the tenant these files are (each chunk gets it under the tenant key); the run
    touches that tenant's documents and file record only."""
    keep_missing: bool = False
    """Keep the chunks of files that were indexed from under the paths and no longer exist there (by default they
    are removed)."""

    @model_validator(mode="after")
    def _consistent(self) -> IndexSpec:
        check_chunking(self.chunk_size, self.chunk_overlap)
        if self.tenant_key is not None and self.tenant is None:
            raise InvalidParameterError("tenant_key makes the index tenant-keyed: name the tenant of these files too")
        if not self.uses_llm:
            given = [name for name in self.LLM_OPTIONS if name in self.model_fields_set]
            if given:
                raise InvalidParameterError(
                    f"indexing uses a chat model only for contextual=True and summaries=True: add one, or drop "
                    f"{given[0]}=..."
                )
        return self

    LLM_OPTIONS: ClassVar[tuple[str, ...]] = ("llm", "llm_cache", "llm_concurrency", "llm_timeout")
    """The options of the chat model, which only enrichment and summaries use."""

    @property
    def uses_llm(self) -> bool:
        """Whether the run needs a chat model (contextual enrichment or page summaries)."""
        return self.contextual or self.summaries
