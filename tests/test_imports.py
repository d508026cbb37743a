"""The public API: ``langchain_fusion.__all__`` is pinned, every name in it imports, ``__version__`` is pyproject's.

A name added to or removed from ``__all__`` changes what users may rely on: this list changes with it,
on purpose, in the same commit.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import pytest

import langchain_fusion
from tests.helpers.paths import REPO

EXPECTED_ALL = [
    "Analyzer",
    "BM25Params",
    "BM25Retriever",
    "ContextWindow",
    "ContextWindowRetriever",
    "ContextualEnricher",
    "CrossEncoderReranker",
    "EmbeddingsMismatchError",
    "Explanation",
    "FusionError",
    "FusionIndex",
    "FusionMethod",
    "FusionRetriever",
    "FusionStore",
    "HierarchicalIndex",
    "HierarchicalRetriever",
    "HierarchyOptions",
    "IndexFormatError",
    "IndexReport",
    "IndexSpec",
    "InvalidParameterError",
    "LLMListwiseReranker",
    "LLMReport",
    "LLMReranker",
    "LoadResult",
    "LocalEmbeddings",
    "LocalStore",
    "MetadataFilter",
    "MissingCredentialsError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "MultiQueryFusionRetriever",
    "PageSummarizer",
    "PipelineSpec",
    "RerankRetriever",
    "RetryPolicy",
    "SearchOptions",
    "ServeLimits",
    "SkippedFile",
    "SkippedFileWarning",
    "StoreSettings",
    "StoreView",
    "TenantIndex",
    "UnknownDocumentError",
    "VectorRetriever",
    "VectorStoreFusionRetriever",
    "Where",
    "__version__",
    "build_index",
    "build_pipeline",
    "build_rag_chain",
    "default_chat_model",
    "default_embeddings",
    "expand_windows",
    "format_docs",
    "fuse",
    "load_files",
    "resolve_chat_model",
    "resolve_embeddings",
    "split_documents",
    "with_context",
]
"""``langchain_fusion.__all__``, sorted."""


def test_all_is_pinned() -> None:
    assert sorted(langchain_fusion.__all__) == EXPECTED_ALL
    assert len(set(langchain_fusion.__all__)) == len(langchain_fusion.__all__)  # no name twice


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_public_name_imports(name: str) -> None:
    value = getattr(langchain_fusion, name)
    assert value is not None
    if inspect.isclass(value) or inspect.isfunction(value):  # not the type aliases (FusionMethod, MetadataFilter)
        assert value.__module__.startswith("langchain_fusion."), value
    assert name in dir(langchain_fusion)


def test_star_import_binds_every_public_name() -> None:
    namespace: dict[str, Any] = {}
    exec("from langchain_fusion import *", namespace)
    assert set(EXPECTED_ALL) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        langchain_fusion.NoSuchThing  # noqa: B018


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from Python 3.11")
def test_version_is_pyprojects() -> None:
    import tomllib

    with (REPO / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert langchain_fusion.__version__ == project["version"]
