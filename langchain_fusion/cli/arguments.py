"""The command line's flags, derived from the option schemas, and the spec they make.

Search flags come from :class:`~langchain_fusion.search.options.SearchOptions` (and
:class:`~langchain_fusion.search.options.HierarchyOptions`): ``--min-bm25-score`` from
``min_bm25_score``, its type from the field's type, its check from the field's check, its help
from the field's description and default. Serving flags come from
:class:`~langchain_fusion.pipeline.spec.ServeLimits`. A new option is a field: its flag follows.
:func:`spec_from_args` turns the parsed flags into a :class:`~langchain_fusion.pipeline.spec.PipelineSpec`;
the spec checks what the flags mean together, so this module checks only how each is written.

Argument types turn a string into a value or raise ``argparse.ArgumentTypeError`` with a
one-line reason, so argparse exits with status 2 and ``error: argument -k: expected ...``.
"""

from __future__ import annotations

import argparse
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic.fields import FieldInfo

from langchain_fusion._checks import MAX_REWRITES, Switch, check_port, check_rewrites
from langchain_fusion.cli.errors import UserError
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT, DEFAULT_RERANK_CANDIDATES, PipelineSpec, ServeLimits
from langchain_fusion.retrievers.rerank_spec import RerankSpec, parse_rerank_spec
from langchain_fusion.search.options import (
    DEFAULT_WINDOW_MAX_CHARS,
    OPTION_CHECKS,
    SEARCH_DEFAULTS,
    FusionOptions,
    HierarchyOptions,
    SearchOptions,
    describe_option,
    option_field,
)
from langchain_fusion.stores.registry import location_help

EXIT_USER_ERROR = 2
PROGRESS_BATCH = 32
"""Chunks embedded per call by the index command, so the progress bar moves often."""
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""The log levels a server command takes."""


def index_help() -> str:
    """The help of an INDEX argument: every kind of location the registry knows."""
    return location_help()


def flag_of(name: str) -> str:
    """The command-line flag of option ``name``: ``--min-vector-score``, and ``-k`` for ``k``."""
    return "-k" if name == "k" else "--" + name.replace("_", "-")


# --- argument types ---------------------------------------------------------------------------------


def parse_number(value: str, convert: Callable[[str], Any], valid: Callable[[Any], bool], expected: str) -> Any:
    """``convert(value)`` if ``valid``, else an ArgumentTypeError: "expected EXPECTED, got VALUE" (shortened)."""
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not valid(number):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(value)!r}")
    return number


def _shown(value: str) -> str:
    return value if len(value) <= 40 else value[:20] + "..." + value[-10:]  # one readable line


def positive_int(value: str) -> int:
    """An integer of at least 1."""
    return int(parse_number(value, int, lambda n: n >= 1, "a positive integer"))


def non_negative_int(value: str) -> int:
    """An integer of at least 0."""
    return int(parse_number(value, int, lambda n: n >= 0, "a non-negative integer"))


def seconds(value: str) -> float:
    """A positive, finite number of seconds."""
    return float(parse_number(value, float, lambda n: 0 < n < math.inf, "a positive number of seconds"))


def rewrites(value: str) -> int:
    """A number of multi-query rewrites, 1 to :data:`~langchain_fusion._checks.MAX_REWRITES`."""
    return int(parse_number(value, int, lambda n: _passes(check_rewrites, n), f"1 to {MAX_REWRITES} rewrites"))


def _passes(check: Callable[[Any], Any], value: Any) -> bool:
    try:
        check(value)
    except InvalidParameterError:
        return False
    return True


def rerank_spec(value: str) -> RerankSpec:
    """``llm`` or ``cross-encoder:MODEL`` (the library's own parser)."""
    try:
        return parse_rerank_spec(value)
    except InvalidParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def checked(check: Callable[[Any], Any], convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
    """An argument type: ``convert`` the string, then the library's own ``check``.

    Either failure says, on one line, what was expected and what was given.
    """

    def parse(value: str) -> Any:
        try:
            return check(convert(value))
        except (ValueError, InvalidParameterError):  # InvalidParameterError is a ValueError too
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(value)!r}") from None

    parse.__name__ = check.__name__.removeprefix("check_")  # argparse names the type in some errors
    return parse


port = checked(check_port, int, "a TCP port from 0 to 65535 (0: any free port)")
"""A TCP port, 0 for any free one (the library's own check)."""


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _whole_corpus_or_int(text: str) -> int | None:
    return None if text.lower() in {"all", "none"} else int(text)


_DEST = "option:"
"""What the parsed attribute of an option flag is named with (a flag not given leaves none)."""

_WRITTEN: Mapping[str, tuple[Callable[[str], Any], str]] = {
    "fetch_k": (_whole_corpus_or_int, "a positive integer or 'all'"),
    "filter": (_json_object, 'a JSON object such as \'{"source": "report.pdf"}\''),
    "tenant": (str, "a tenant's name"),
}
"""How options whose type says too little are written on the command line."""


def _converter(name: str, field: FieldInfo) -> tuple[Callable[[str], Any], str]:
    """How a flag's string becomes the option's type (the field's int or float, or a special form), and in words."""
    if name in _WRITTEN:
        return _WRITTEN[name]
    kind, bounds = _number_schema(field)
    low, high = bounds.get("ge"), bounds.get("le")
    noun = "integer" if kind is int else "number"
    if low is not None and high is not None:
        return kind, f"a {noun} between {low:g} and {high:g}"
    if low == 1 and kind is int:
        return kind, "a positive integer"
    if low is not None:
        return kind, f"a {noun} of {low:g} or more"
    return kind, f"a{'n' if kind is int else ''} {noun}"


def _number_schema(field: FieldInfo) -> tuple[type, dict[str, Any]]:
    """A numeric field's kind (int or float) and its bounds, read from its type and constraints."""
    bounds: dict[str, Any] = {}
    kinds: set[Any] = set()
    pending: list[Any] = [field.annotation, *field.metadata]
    while pending:
        item = pending.pop()
        if typing.get_origin(item) is typing.Annotated:
            pending.extend([item.__origin__, *item.__metadata__])
        elif typing.get_origin(item) in (typing.Union, types.UnionType):
            pending.extend(typing.get_args(item))
        elif isinstance(item, FieldInfo):
            pending.extend(item.metadata)
        elif item in (int, float):
            kinds.add(item)
        for bound in ("ge", "le"):
            value = getattr(item, bound, None)
            if isinstance(value, (int, float)) and not isinstance(item, type):
                bounds[bound] = value
    return (int if int in kinds else float), bounds


def option_type(name: str) -> Callable[[str], Any]:
    """The argument type of option ``name``: converted as its field's type, then checked by its own check."""
    fields = {**SearchOptions.model_fields, **HierarchyOptions.model_fields}
    convert, expected = _converter(name, fields[name])
    return checked(OPTION_CHECKS[name], convert, expected)


def _choices(field: FieldInfo) -> tuple[str, ...] | None:
    annotation = field.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(typing.get_args(annotation))
    return None


def _default_text(name: str, field: FieldInfo, note: str) -> str:
    default = field.default
    if name == "fetch_k" and default is None:
        shown = "all"
    else:
        shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else str(default)
    return f" (default: {shown}{'; ' + note if note else ''})"


# --- flags from the schemas -----------------------------------------------------------------------


def add_option_flag(sub: argparse.ArgumentParser, name: str, note: str = "", help_text: str | None = None) -> None:
    """The flag of one search option: its type, check, choices, help and default from the schema.

    A flag not given leaves no attribute on the parsed arguments (so ``--fetch-k all``, which is
    None, differs from no ``--fetch-k``): read them with :func:`given_options`.
    """
    fields = {**SearchOptions.model_fields, **HierarchyOptions.model_fields}
    field = fields[name]
    choices = _choices(field)
    text = (help_text or describe_option(name)) + _default_text(name, field, note)
    metavar = None if choices else name.upper().replace("_", "-") if name != "k" else "K"
    kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": text.replace("%", "%%"), "dest": _DEST + name}
    if choices:
        kwargs["choices"] = choices
    else:
        kwargs.update(type=option_type(name), metavar=metavar)
    sub.add_argument(flag_of(name), **kwargs)


def switch_of(name: str) -> Switch | None:
    """The switch that turns option ``name`` on (``--mmr`` for maximal marginal relevance), if its schema has one."""
    return next((item for item in option_field(name).metadata if isinstance(item, Switch)), None)


def add_search_flags(sub: argparse.ArgumentParser, note: str = "", remote_note: str = "") -> None:
    """A flag per search option (``-k``, ``--alpha``, ... ``--max-per-source``), and a flag per switch (``--mmr``).

    ``note`` is added to every default; ``remote_note`` to the options a request may also set. An
    option with a switch comes after the others, beside its switch.
    """
    switched = [name for name in SearchOptions.model_fields if switch_of(name) is not None]
    for name in SearchOptions.model_fields:
        if name not in switched:
            local = name in FusionOptions.LOCAL_ONLY
            add_option_flag(sub, name, note if local or not remote_note else remote_note)
    for name in switched:
        switch = switch_of(name)
        assert switch is not None
        sub.add_argument(flag_of(switch.name), action="store_true", help=switch.help)
        add_option_flag(sub, name, help_text=switch.option_help)


def add_hierarchy_flags(sub: argparse.ArgumentParser, note: str = "") -> None:
    """A flag per hierarchical search option (``--k-summaries``, ``--summary-weight``)."""
    for name in HierarchyOptions.model_fields:
        add_option_flag(sub, name, note)


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search and hierarchy options given on the command line (by the flags of :func:`add_option_flag`), by name."""
    return {name[len(_DEST) :]: value for name, value in vars(args).items() if name.startswith(_DEST)}


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search options given on the command line; a switch (``--mmr``) sets its option's value unless given."""
    given = {name: value for name, value in given_options(args).items() if name in SearchOptions.model_fields}
    for name in SearchOptions.model_fields:
        switch = switch_of(name)
        if switch is None:
            continue
        on = getattr(args, switch.name, False)
        if name in given and not on:
            raise UserError(f"{flag_of(name)} is {switch.meaning}: add {flag_of(switch.name)}")
        if on:
            given.setdefault(name, switch.value)
    return given


def add_limit_flags(sub: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """A flag per serving limit (``--host``, ``--port``, ``--max-k``...), help and default from the schema."""
    for name in names:
        field = ServeLimits.model_fields[name]
        if name == "allowed_hosts":  # names, comma-separated: the field splits them
            text = " ".join((field.description or "").split())
            sub.add_argument(flag_of(name), type=str, default="", metavar="HOSTS", help=f"{text} (default: none)")
            continue
        if name == "tenant_header":
            text = " ".join((field.description or "").split()).replace("None: ", "Default: none; ")
            sub.add_argument(flag_of(name), type=str, default=None, metavar="NAME", help=text)
            continue
        text = f"{' '.join((field.description or '').split())} (default: %(default)s)"
        kind: Callable[[str], Any] = port if name == "port" else str if name == "host" else positive_int
        metavar = None if name in ("host", "port") else "N"
        sub.add_argument(flag_of(name), type=kind, default=field.default, metavar=metavar, help=text)


def limits_from_args(args: argparse.Namespace) -> ServeLimits:
    """The serving limits the flags give (the others at their defaults)."""
    return ServeLimits(**{name: getattr(args, name) for name in ServeLimits.model_fields if hasattr(args, name)})


def add_model_flags(sub: argparse.ArgumentParser, llm_help: str, timeout_help: str) -> None:
    """``--embeddings``, ``--llm`` and ``--llm-timeout``."""
    sub.add_argument(
        "--embeddings", metavar="SPEC", help="embedding model; default: the one recorded in the index (must match it)"
    )
    sub.add_argument("--llm", metavar="PROVIDER:MODEL", help=llm_help)
    sub.add_argument(
        "--llm-timeout",
        type=seconds,
        default=DEFAULT_LLM_TIMEOUT,
        metavar="SECONDS",
        help=timeout_help + " (default: %(default)g)",
    )


def add_step_flags(sub: argparse.ArgumentParser, *, served: bool) -> None:
    """Multi-query fusion, context windows and a rerank step (``served``: around every request's search)."""
    around = "every query" if served else "the question"
    sub.add_argument(
        "--multi-query",
        type=rewrites,
        default=None,
        metavar="N",
        help=f"multi-query fusion: a chat model writes N rewrites of {around} (1-{MAX_REWRITES}), each is searched "
        "too, and the result lists are fused (weighted reciprocal rank fusion, the query itself weighted highest); if "
        "the model fails, the query is searched alone",
    )
    sub.add_argument(
        "--window",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="merge each hit with N neighbouring chunks on each side into one passage, overlap removed; hits whose "
        "windows touch become one passage (default: no window)",
    )
    sub.add_argument(
        "--max-chars",
        type=positive_int,
        default=None,
        metavar="N",
        help="character budget per --window passage: farther neighbours are dropped to fit, hits never are "
        f"(default: {DEFAULT_WINDOW_MAX_CHARS})",
    )
    sub.add_argument(
        "--rerank",
        nargs="?",
        const="llm",
        default=None,
        type=rerank_spec,
        metavar="SPEC",
        help="rerank the candidates and keep the best. SPEC 'llm' (the default when SPEC is left out): the chat model "
        "rates each candidate 1-10; 'cross-encoder:MODEL': a local cross-encoder scores each one, MODEL a Hugging "
        "Face name (e.g. cross-encoder/ms-marco-MiniLM-L6-v2, from the local cache or downloaded) or a folder with a "
        "saved model (needs the local extra; loaded before the first search)",
    )
    if served:
        sub.add_argument(
            "--rerank-candidates",
            type=positive_int,
            default=DEFAULT_RERANK_CANDIDATES,
            metavar="N",
            help="with --rerank, candidates retrieved per query, at least the request's k (default: %(default)s)",
        )
    else:
        sub.add_argument(
            "--top-n",
            type=positive_int,
            default=None,
            metavar="N",
            help=f"with --rerank, how many of the reranked candidates to keep (default: {SEARCH_DEFAULTS.k}); -k is "
            f"then the number of candidates (default: {DEFAULT_RERANK_CANDIDATES})",
        )


def spec_from_args(args: argparse.Namespace, answer: str = "off", *, served: bool = False) -> PipelineSpec:
    """The pipeline the flags ask for (checked by the spec: combinations, ranges, what needs a chat model)."""
    options = search_options(args)
    if not served:
        if args.top_n is not None and args.rerank is None:
            raise UserError("--top-n is the number of reranked results to keep: add --rerank")
        if args.rerank is not None:  # -k is then the candidates, --top-n what is kept (no more than them)
            candidates = options.pop("k", DEFAULT_RERANK_CANDIDATES)
            kept = SEARCH_DEFAULTS.k if args.top_n is None else args.top_n
            options.update(k=min(kept, candidates), rerank_candidates=candidates)
    hierarchical = getattr(args, "hierarchical", None)
    hierarchy = {name: value for name, value in given_options(args).items() if name in HierarchyOptions.model_fields}
    steps = {
        "multi_query": args.multi_query,
        "window": args.window,
        "window_max_chars": args.max_chars,
        "reranker": None if args.rerank is None else str(args.rerank),
        "llm": args.llm,
        "llm_timeout": args.llm_timeout,
        "embeddings": args.embeddings,
        **({"rerank_candidates": args.rerank_candidates} if served else {}),
    }
    given = {name: value for name, value in steps.items() if value is not None}
    return PipelineSpec.of(args.index_dir, answer=answer, hierarchical=hierarchical, **given, **hierarchy, **options)


__all__ = [
    "EXIT_USER_ERROR",
    "add_hierarchy_flags",
    "add_limit_flags",
    "add_model_flags",
    "add_option_flag",
    "add_search_flags",
    "add_step_flags",
    "checked",
    "flag_of",
    "index_help",
    "limits_from_args",
    "non_negative_int",
    "option_type",
    "port",
    "positive_int",
    "rerank_spec",
    "rewrites",
    "search_options",
    "seconds",
    "spec_from_args",
]


LOCATION_ARGUMENTS = ("index_dir", "out", "index")
"""The parsed arguments that hold an index location, whichever command it is."""


def add_store_flags(sub: argparse.ArgumentParser) -> None:
    """``--store-timeout``: a store location option (``?timeout=``) given as a flag."""
    sub.add_argument(
        "--store-timeout",
        type=seconds,
        metavar="SECONDS",
        help="how long each call to a store server may take (a Milvus location's ?timeout=SECONDS; default 60)",
    )


def with_store_options(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--store-timeout`` written into its location as that engine's option (UserError on a folder)."""
    from langchain_fusion.stores.registry import engine_for

    timeout = getattr(args, "store_timeout", None)
    if timeout is None:
        return args
    names = [name for name in LOCATION_ARGUMENTS if getattr(args, name, None)]
    if not names:
        raise UserError("--store-timeout applies to an index location (e.g. --index milvus://HOST:PORT/COLLECTION)")
    for name in names:
        location = getattr(args, name)
        try:
            setattr(args, name, engine_for(location).with_options(location, {"timeout": f"{timeout:g}"}))
        except InvalidParameterError as exc:
            raise UserError(f"--store-timeout: {exc}") from None
    return args
