"""The ``index`` command, a face of :func:`~langchain_fusion.pipeline.indexing.build_index`.

Flags -> spec, report -> output.

Its flags are the fields of :class:`~langchain_fusion.pipeline.index_spec.IndexSpec` (``--chunk-size``
from ``chunk_size``, help from the field's description and default; the location is ``--out``);
the run draws a bar per phase on stderr and prints the report, or ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any

from langchain_fusion.cli.arguments import flag_of, positive_int, seconds
from langchain_fusion.cli.wording import in_flags
from langchain_fusion.pipeline.index_spec import IndexSpec
from langchain_fusion.stores.registry import location_help

_FLAGS: Mapping[str, tuple[str, ...]] = {"location": ("--out", "-o")}
"""Fields whose flag is not ``--NAME``."""

_READ: Mapping[str, tuple[Callable[[str], Any], str]] = {
    "chunk_size": (positive_int, "N"),
    "chunk_overlap": (int, "N"),  # the spec says what a valid overlap is
    "max_chunk_tokens": (positive_int, "N"),
    "max_file_chars": (positive_int, "N"),
    "llm_concurrency": (positive_int, "N"),
    "llm_timeout": (seconds, "SECONDS"),
    "embeddings": (str, "SPEC"),
    "vector_index": (str, "FACTORY"),
    "vector_search_params": (str, "PARAMS"),
    "llm": (str, "PROVIDER:MODEL"),
    "llm_cache": (str, "DIR"),
    "tenant_key": (str, "NAME"),
    "tenant": (str, "TENANT"),
}
"""How a field's flag is read (each value is then checked by the spec) and its metavar."""

_DEST = "spec:"
"""What the parsed attribute of a spec flag is named with (a flag not given leaves none)."""


def add_index_parser(commands: Any) -> None:
    """Register ``index``: a flag per field of the spec, ``--json`` and ``--quiet``."""
    index = commands.add_parser(
        "index",
        help="load files, split them into chunks and save a fusion index",
        description="Load PDFs, .txt and .md files (or whole folders), split them into chunks, embed them "
        "and save a fusion index. Unreadable files are reported and skipped, and so are saved indexes found in the "
        "folders. On an existing index (--out), the index is updated in place: unchanged files are skipped without "
        "embedding (by content hash), changed files have their chunks replaced, and files that no longer exist under "
        "the given paths have their chunks removed (--keep-missing keeps them). Ctrl-C saves the files done so far "
        "(a folder with page summaries keeps its previous index instead); run again to finish.",
    )
    fields = IndexSpec.model_fields
    for name in sorted(fields, key=lambda name: name != "location"):  # --out first, then the fields in order
        field = fields[name]
        help_text = " ".join((field.description or "").split()).replace("%", "%%")
        if name == "paths":
            index.add_argument("paths", nargs="+", metavar="PATH", help=help_text)
            continue
        flags = _FLAGS.get(name, (flag_of(name),))
        kwargs: dict[str, Any] = {"dest": _DEST + name, "default": argparse.SUPPRESS}
        if name == "location":  # dest "out": where --store-timeout finds a location (cli.arguments)
            kwargs.update(dest="out", required=True, metavar="INDEX", help=f"{help_text} One of: {location_help()}")
        elif field.annotation is bool:
            kwargs.update(action="store_true", help=help_text)
        elif name == "language":
            languages = list(typing.get_args(typing.get_args(field.annotation)[0]))
            kwargs.update(choices=languages, metavar="LANG", help=f"{help_text} One of: {', '.join(languages)}")
        else:
            read, metavar = _READ[name]
            shown = "" if field.default is None else f" (default: {field.default:g})".replace("%", "%%")
            kwargs.update(type=read, metavar=metavar, help=in_flags(help_text) + shown)
        index.add_argument(*flags, **kwargs)
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def spec_from_args(args: argparse.Namespace) -> IndexSpec:
    """The spec the flags ask for (only the flags given: the others keep the spec's defaults)."""
    given = {name[len(_DEST) :]: value for name, value in vars(args).items() if name.startswith(_DEST)}
    return IndexSpec(location=args.out, paths=tuple(args.paths), **given)


class _TerminalProgress:
    """Bars on stderr (tqdm) and notes printed above them; nothing but notes when quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def status(self, message: str) -> None:
        if not self.quiet:
            self.problem(message)

    def problem(self, message: str) -> None:
        from tqdm import tqdm

        tqdm.write(in_flags(message), file=sys.stderr)

    def bar(self, total: int, description: str, unit: str) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=description, unit=unit, disable=self.quiet, file=sys.stderr)


def run_index(args: argparse.Namespace) -> int:
    """Build an index, or bring an existing one up to date with the files; save it; print a summary."""
    from langchain_fusion.pipeline.indexing import build_index

    report = build_index(spec_from_args(args), _TerminalProgress(quiet=args.quiet or args.json))
    if report.interrupted:
        if report.saved:
            done = f"saved the {report.files} files done so far to {report.location}"
        else:
            done = (
                f"nothing saved: {report.location} keeps its previous index (page summaries are saved once every "
                "file is indexed and summarised)"
            )
        print(f"langchain-fusion: interrupted; {done}: run the same command again to finish", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print("\n".join(in_flags(line) for line in report.lines()))
    return 0
