"""The ``langchain-fusion`` command: build an index from files, query it, ask questions of it, serve it.

User mistakes (a missing folder, a bad option, a missing API key) end with one line on
stderr and exit status 2; a traceback means a bug. Each command lives in its own module
(:mod:`~langchain_fusion.cli.indexing`, :mod:`~langchain_fusion.cli.search`,
:mod:`~langchain_fusion.cli.evaluate`, :mod:`~langchain_fusion.cli.serving`); their flags are
derived from the option schemas (:mod:`~langchain_fusion.cli.arguments`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Iterator, Sequence

from pydantic import ValidationError

from langchain_fusion.cli.arguments import EXIT_USER_ERROR, add_store_flags, with_store_options
from langchain_fusion.cli.errors import UserError
from langchain_fusion.cli.wording import in_flags
from langchain_fusion.errors import FusionError, redact


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``langchain-fusion`` command."""
    from langchain_fusion import __version__
    from langchain_fusion.cli.eval_arguments import add_eval_parser
    from langchain_fusion.cli.indexing import add_index_parser
    from langchain_fusion.cli.search import add_search_parsers
    from langchain_fusion.cli.serving import add_mcp_parser, add_serve_parser

    parser = argparse.ArgumentParser(
        prog="langchain-fusion",
        description="Hybrid (FAISS vector + BM25 keyword) retrieval over your PDFs, text and markdown.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_index_parser(commands)
    add_search_parsers(commands)
    add_eval_parser(commands)
    add_serve_parser(commands)
    add_mcp_parser(commands)
    for sub in commands.choices.values():
        add_store_flags(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from langchain_fusion.cli.evaluate import run_eval
    from langchain_fusion.cli.indexing import run_index
    from langchain_fusion.cli.search import run_ask, run_explain, run_query
    from langchain_fusion.cli.serving import run_mcp_command, run_serve

    handler = {
        "index": run_index,
        "query": run_query,
        "ask": run_ask,
        "explain": run_explain,
        "eval": run_eval,
        "serve": run_serve,
        "mcp": run_mcp_command,
    }[args.command]
    try:
        with _printable_output():
            return handler(with_store_options(args))
    except (UserError, FusionError, ValidationError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"langchain-fusion: error: {redact(in_flags(message))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("langchain-fusion: interrupted", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _printable_output() -> Iterator[None]:
    """Print what the terminal's encoding cannot (a path that is not UTF-8) as a backslash escape.

    On Linux such a path arrives in ``argv`` with lone surrogates; a strict UTF-8 stdout would turn
    the summary of a finished run into a traceback. Streams are restored afterwards.
    """
    changed = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
            changed.append(stream)
    try:
        yield
    finally:
        for stream in changed:
            stream.reconfigure(errors="strict")
