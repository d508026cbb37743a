"""The ``langchain-fusion`` command: build an index from files, query it, ask questions of it, serve it.

User mistakes (a missing folder, a bad option, a missing API key) end with one line on
stderr and exit status 2; a traceback means a bug. Ctrl-C ends a command with one line and status
130, and SIGTERM (``kill``, ``docker stop``) as Ctrl-C does (``index`` saves the files done so far),
with status 143; output into a pipe whose reader has gone (``query --json | head``) ends quietly
with status 141, as a process killed by SIGPIPE. Each command lives in its own module
(:mod:`~langchain_fusion.cli.indexing`, :mod:`~langchain_fusion.cli.search`,
:mod:`~langchain_fusion.cli.evaluate`, :mod:`~langchain_fusion.cli.serving`); their flags are
derived from the option schemas (:mod:`~langchain_fusion.cli.arguments`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from langchain_fusion.cli.arguments import EXIT_USER_ERROR, add_store_flags, with_store_options
from langchain_fusion.cli.errors import UserError
from langchain_fusion.cli.wording import in_flags
from langchain_fusion.errors import FusionError, redact


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``langchain-fusion`` command.

    Given the ``command`` about to run (``argv[0]``), only its flags are built (``query``, ``ask`` and
    ``explain`` are built together): a run pays for one command's schema-generated flags, not for
    every command's. Any other first argument (``--help``, ``--version``, a misspelt command) gets
    every command, so that help and errors list them all.
    """
    from langchain_fusion import __version__

    parser = argparse.ArgumentParser(
        prog="langchain-fusion",
        description="Hybrid (FAISS vector + BM25 keyword) retrieval over your PDFs, text and markdown.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = _COMMAND_GROUPS.values() if command not in _COMMAND_GROUPS else [_COMMAND_GROUPS[command]]
    for group in dict.fromkeys(groups):  # once each, in order
        module, function = group.split(":")
        getattr(importlib.import_module(f"langchain_fusion.cli.{module}"), function)(commands)
    for sub in commands.choices.values():
        add_store_flags(sub)
    return parser


_COMMAND_GROUPS: dict[str, str] = {
    "index": "indexing:add_index_parser",
    "query": "search:add_search_parsers",
    "ask": "search:add_search_parsers",
    "explain": "search:add_search_parsers",
    "eval": "eval_arguments:add_eval_parser",
    "serve": "serving:add_serve_parser",
    "mcp": "serving:add_mcp_parser",
}
"""Each command -> the function (module:name in :mod:`langchain_fusion.cli`) that registers it, in help order."""


EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""
EXIT_TERMINATED = 128 + 15
"""Exit status after SIGTERM (128 + SIGTERM): the command stopped as after Ctrl-C."""
EXIT_BROKEN_PIPE = 128 + 13
"""Exit status when the reader of the output has gone (128 + SIGPIPE), as ``cat file | head`` ends ``cat``."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    termination = _Termination()
    try:
        with termination.as_interrupt(), _printable_output():
            status = _run(argv)
            sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("langchain-fusion: interrupted", file=sys.stderr)
        status = EXIT_INTERRUPTED
    return EXIT_TERMINATED if termination.received and status == EXIT_INTERRUPTED else status


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command; a user error is one line and :data:`EXIT_USER_ERROR`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
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
        return handler(with_store_options(args))
    except (UserError, FusionError, ValidationError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"langchain-fusion: error: {redact(in_flags(message))}", file=sys.stderr)
        return EXIT_USER_ERROR


class _Termination:
    """SIGTERM handled as Ctrl-C while a command runs: a KeyboardInterrupt in the main thread, remembered."""

    def __init__(self) -> None:
        self.received = False

    @contextlib.contextmanager
    def as_interrupt(self) -> Iterator[None]:
        """While open (in the main thread), SIGTERM raises KeyboardInterrupt; the previous handler comes back after."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
            yield
            return

        def interrupt(signum: int, frame: Any) -> None:
            self.received = True
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


def _discard_stdout() -> None:
    """Point stdout at the null device: what is still buffered for a closed pipe is dropped at exit, silently."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


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
