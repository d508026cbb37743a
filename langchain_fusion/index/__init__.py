"""Indexes: FusionIndex (rows on both sides in one store) and HierarchicalIndex (summaries -> chunks).

:class:`FusionIndex` is imported on first use (PEP 562), so that the import-light modules of this
package (:mod:`.sync_spec`, which the command line reads its flags from) do not load the index code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_fusion.index.fusion_index import FusionIndex

__all__ = ["FusionIndex"]


def __getattr__(name: str) -> Any:
    """Import :class:`FusionIndex` on first use."""
    if name == "FusionIndex":
        from langchain_fusion.index.fusion_index import FusionIndex

        return FusionIndex
    raise AttributeError(f"module 'langchain_fusion.index' has no attribute {name!r}")
