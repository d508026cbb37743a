"""What to index, as data: :class:`IndexSpec`, the write-path twin of :class:`~.spec.PipelineSpec`.

Import-light (pydantic, the :class:`~langchain_fusion.index.sync_spec.SyncSpec` it extends and the analyzer's
languages): the command line builds a spec from its flags (generated from these fields) before anything heavy
loads, and :func:`~langchain_fusion.pipeline.indexing.build_index` turns it into an index at its location.
A Python user writes the same spec::

    build_index(IndexSpec(location="milvus://localhost:19530/docs", paths=("manuals/",), summaries=False))
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, ConfigDict, model_validator

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.sync_spec import SyncSpec, positive
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT, check_embeddings, check_llm
from langchain_fusion.stores.analyzer import StemmerLanguage
from langchain_fusion.stores.tenants import check_tenant_key


def _location(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(
            f"location must be a folder or a store location such as milvus://HOST:PORT/COLLECTION; got {value!r}"
        )
    return value


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


class IndexSpec(SyncSpec):
    """Files to index, where the index lives, and how it is built: one checked value for Python and the command line.

    :func:`~langchain_fusion.pipeline.indexing.build_index` runs it: it opens the index at
    ``location`` (a new one is made with the store settings here), brings it in line with the
    files (unchanged files cost nothing; changed files have their chunks replaced; files gone
    from under ``paths`` have theirs removed, unless ``keep_missing``), optionally enriches the
    chunks and summarises the pages with a chat model, and saves it, holding the location's
    update lock for the whole run.

    The fields of :class:`~langchain_fusion.index.sync_spec.SyncSpec` (``paths``, the chunking, ``tenant``,
    ``keep_missing``) are its own: a run hands the spec to the sync as it is.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, use_attribute_docstrings=True)

    location: Annotated[str, BeforeValidator(_location)]
    """Where the index is saved: a folder, or another engine's store such as milvus://HOST:PORT/COLLECTION. An
    existing index there is updated in place."""
    embeddings: Annotated[Any, BeforeValidator(check_embeddings)] = None
    """Embedding model: 'local' (the bundled all-MiniLM-L6-v2, offline), 'openai' or 'openai:MODEL' (needs
    OPENAI_API_KEY and the openai extra), 'PROVIDER:MODEL' via LangChain's init_embeddings, or (in Python) an
    Embeddings. By default: the model an existing index was built with, else the LANGCHAIN_FUSION_EMBEDDINGS
    environment variable if set, else local (an API key alone never switches it)."""
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
    llm_concurrency: Annotated[int, positive("llm_concurrency", "chat model calls at once")] = DEFAULT_LLM_CONCURRENCY
    """Chat model calls at once for contextual enrichment and summaries."""
    llm_timeout: Annotated[float | None, BeforeValidator(_seconds)] = DEFAULT_LLM_TIMEOUT
    """Seconds to wait for each chat model answer before it counts as failed and is retried."""
    tenant_key: Annotated[str | None, BeforeValidator(check_tenant_key)] = None
    """Make a new index tenant-keyed by this metadata key: each tenant's documents are searched as an index of
    their own (an existing index keeps its own key; this must match it)."""

    @model_validator(mode="after")
    def _consistent(self) -> IndexSpec:
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
