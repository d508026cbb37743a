"""Indexes: FusionIndex (rows on both sides in one store) and HierarchicalIndex (summaries -> chunks)."""

from langchain_fusion.index.fusion_index import FusionIndex

__all__ = ["FusionIndex"]
