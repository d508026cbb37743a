"""The ``langchain-fusion`` command line (``python -m langchain_fusion.cli`` works too)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see :func:`langchain_fusion.cli.app.main`).

    The command's modules take most of a second to import: Ctrl-C meanwhile is one line and status 130 too.
    """
    try:
        from langchain_fusion.cli.app import main as run
    except KeyboardInterrupt:
        print("langchain-fusion: interrupted", file=sys.stderr)
        return 130
    return run(argv)


__all__ = ["main"]
