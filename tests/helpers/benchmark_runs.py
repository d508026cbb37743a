"""What the question-set benchmarks (``benchmarks/languages.py``, ``benchmarks/unread_queries.py``) share."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone


def chosen(parser: argparse.ArgumentParser, value: str, allowed: Sequence[str]) -> list[str]:
    """The comma-separated names in ``value``; a name not in ``allowed`` is the parser's error."""
    names = value.split(",")
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        parser.error(f"unknown names {unknown}; choose from {', '.join(allowed)}")
    return names


def run_header(script: str) -> str:
    """The lines a result file starts with: the command as run, the date, the load average at start."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = f"- command: `python {script} {' '.join(sys.argv[1:])}`".rstrip("` ") + "`"
    return f"{command}\n- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}; load average at start: {load}\n"
