"""The ``langchain-fusion`` command line (``python -m langchain_fusion.cli`` works too)."""

from langchain_fusion.cli.app import main

__all__ = ["main"]
