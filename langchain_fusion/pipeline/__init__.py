"""What to serve or run (:class:`PipelineSpec`, :class:`ServeLimits`) and the one composer (:func:`build`).

``spec`` is import-light (no index, model or server code), so the command line can check its
flags before anything loads; ``build`` opens the index and composes the retriever pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_fusion.pipeline.spec import AnswerMode, PipelineSpec, ServeLimits

if TYPE_CHECKING:
    from langchain_fusion.pipeline.composer import Pipeline, Steps, build, build_steps

__all__ = ["AnswerMode", "Pipeline", "PipelineSpec", "ServeLimits", "Steps", "build", "build_steps"]


def __getattr__(name: str) -> Any:
    """Import the composer on first use (it loads the index and retriever code)."""
    if name in {"Pipeline", "Steps", "build", "build_steps"}:
        from langchain_fusion.pipeline import composer

        return getattr(composer, name)
    raise AttributeError(f"module 'langchain_fusion.pipeline' has no attribute {name!r}")
