"""What to serve, run or index, as data, and the composers that build it.

- :class:`PipelineSpec` (and :class:`ServeLimits`) -> :func:`build`: the read path (a retriever pipeline).
- :class:`IndexSpec` -> :func:`build_index`: the write path (an index brought in line with files).

The specs are import-light (no index, model or server code), so the command line can check its
flags before anything loads; the composers open indexes and models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_fusion.pipeline.index_spec import IndexSpec
from langchain_fusion.pipeline.spec import AnswerMode, PipelineSpec, ServeLimits

if TYPE_CHECKING:
    from langchain_fusion.pipeline.composer import Pipeline, Steps, build, build_steps
    from langchain_fusion.pipeline.indexing import IndexProgress, IndexReport, build_index

__all__ = [
    "AnswerMode",
    "IndexProgress",
    "IndexReport",
    "IndexSpec",
    "Pipeline",
    "PipelineSpec",
    "ServeLimits",
    "Steps",
    "build",
    "build_index",
    "build_steps",
]

_LAZY = {
    "Pipeline": "composer",
    "Steps": "composer",
    "build": "composer",
    "build_steps": "composer",
    "IndexProgress": "indexing",
    "IndexReport": "indexing",
    "build_index": "indexing",
}
"""Names imported on first use, by module (the composers load the index and retriever code)."""


def __getattr__(name: str) -> Any:
    """Import a composer on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"langchain_fusion.pipeline.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'langchain_fusion.pipeline' has no attribute {name!r}")
