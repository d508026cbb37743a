"""The command line's defaults, argument types and option groups, shared by every subcommand module.

Argument types turn a string into a value or raise ``argparse.ArgumentTypeError`` with a
one-line reason, so argparse exits with status 2 and ``error: argument -k: expected ...``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from langchain_fusion._checks import (
    MAX_REWRITES,
    check_lambda_mult,
    check_max_per_source,
    check_min_bm25_score,
    check_min_vector_score,
    check_rewrites,
)
from langchain_fusion.cli.errors import UserError
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.retrievers.rerank_spec import RerankSpec, parse_rerank_spec
from langchain_fusion.search.options import SEARCH_DEFAULTS

EXIT_USER_ERROR = 2
# The retrieval defaults are the library's own (search.options), so the CLI can never drift from it.
DEFAULT_K: int = SEARCH_DEFAULTS.k
DEFAULT_ALPHA: float = SEARCH_DEFAULTS.alpha
DEFAULT_METHOD: str = SEARCH_DEFAULTS.method
DEFAULT_FETCH_K: int | None = SEARCH_DEFAULTS.fetch_k
DEFAULT_LAMBDA_MULT: float = SEARCH_DEFAULTS.mmr_lambda_mult
DEFAULT_RERANK_CANDIDATES = 20
DEFAULT_K_SUMMARIES = SEARCH_DEFAULTS.k_summaries
DEFAULT_SUMMARY_WEIGHT = SEARCH_DEFAULTS.summary_weight
DEFAULT_LLM_CONCURRENCY = 8
DEFAULT_LLM_TIMEOUT = 60.0
"""Seconds the CLI waits for one chat model answer (per try) before it counts as a failed, retried call."""
PROGRESS_BATCH = 32
"""Chunks embedded per call by the index command, so the progress bar moves often."""
# The serve defaults, the same as langchain_fusion.server's (not imported here: it needs the server extra).
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 8000
SERVE_MAX_K = 100
SERVE_MAX_QUERY_CHARS = 2000
SERVE_MAX_BATCH_SIZE = 32
INDEX_HELP = (
    "an index folder made by 'langchain-fusion index', or a Milvus collection: milvus://HOST:PORT/COLLECTION, "
    "milvus+https://HOST/COLLECTION or milvus+lite:FILE.db/COLLECTION (token from MILVUS_TOKEN)"
)


def parse_number(value: str, convert: Callable[[str], Any], valid: Callable[[Any], bool], expected: str) -> Any:
    """``convert(value)`` if ``valid``, else an ArgumentTypeError: "expected EXPECTED, got VALUE" (shortened)."""
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not valid(number):
        shown = value if len(value) <= 40 else value[:20] + "..." + value[-10:]  # one readable line
        raise argparse.ArgumentTypeError(f"expected {expected}, got {shown!r}")
    return number


def positive_int(value: str) -> int:
    """An integer of at least 1."""
    return int(parse_number(value, int, lambda n: n >= 1, "a positive integer"))


def alpha(value: str) -> float:
    """A number from 0 to 1 (NaN and infinities refused)."""
    return float(parse_number(value, float, lambda n: 0.0 <= n <= 1.0, "a number between 0 and 1"))


def seconds(value: str) -> float:
    """A positive, finite number of seconds."""
    return float(parse_number(value, float, lambda n: 0 < n < math.inf, "a positive number of seconds"))


def non_negative_int(value: str) -> int:
    """An integer of at least 0."""
    return int(parse_number(value, int, lambda n: n >= 0, "a non-negative integer"))


def port(value: str) -> int:
    """A TCP port, 0 for any free one."""
    return int(parse_number(value, int, lambda n: 0 <= n <= 65535, "a TCP port from 0 to 65535 (0: any free port)"))


def fetch_k(value: str) -> int | None:
    """A positive integer, or ``all``/``none`` (None: score the whole corpus)."""
    if value.lower() in {"all", "none"}:
        return None
    return int(parse_number(value, int, lambda n: n >= 1, "a positive integer or 'all'"))


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
    """An argument type: ``convert`` the string, then the library's own ``check`` (its message on failure)."""

    def parse(value: str) -> Any:
        try:
            number = convert(value)
        except ValueError:
            shown = value if len(value) <= 40 else value[:20] + "..." + value[-10:]
            raise argparse.ArgumentTypeError(f"expected {expected}, got {shown!r}") from None
        try:
            return check(number)
        except InvalidParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = check.__name__.removeprefix("check_")  # argparse names the type in some errors
    return parse


min_vector_score = checked(check_min_vector_score, float, "a cosine similarity between -1 and 1")
"""A relevance floor on the vector side (the library's check)."""
min_bm25_score = checked(check_min_bm25_score, float, "a BM25 score of 0 or more")
"""A relevance floor on the BM25 side."""
lambda_mult = checked(check_lambda_mult, float, "a number between 0 and 1")
"""The relevance weight of maximal marginal relevance."""
max_per_source = checked(check_max_per_source, int, "a positive integer")
"""The most results from one source."""


def add_selection_options(sub: argparse.ArgumentParser, note: str = "") -> None:
    """Relevance floors and diversity: which fused candidates are returned (query, ask, serve and mcp)."""
    also = f"; {note}" if note else ""
    sub.add_argument(
        "--min-vector-score",
        type=min_vector_score,
        default=None,
        metavar="S",
        help="relevance floor on the raw cosine similarity (-1 to 1): a result must clear this floor or "
        f"--min-bm25-score's, so a query with no good answer returns nothing (default: no floor{also})",
    )
    sub.add_argument(
        "--min-bm25-score",
        type=min_bm25_score,
        default=None,
        metavar="S",
        help="relevance floor on the raw BM25 score (0 or more; 0 means 'contains a query term'); a result "
        f"must clear this floor or --min-vector-score's (default: no floor{also})",
    )
    sub.add_argument(
        "--mmr",
        action="store_true",
        help="re-rank the best --fetch-k fused candidates by maximal marginal relevance, so that near-copies "
        "of one passage do not fill the results",
    )
    sub.add_argument(
        "--lambda-mult",
        type=lambda_mult,
        default=None,
        metavar="L",
        help=f"with --mmr, the weight of relevance against diversity, 0 to 1 (1: the fused order; default: "
        f"{DEFAULT_LAMBDA_MULT})",
    )
    sub.add_argument(
        "--max-per-source",
        type=max_per_source,
        default=None,
        metavar="N",
        help="at most N results from one source file, the next candidates taking the place of the others "
        f"(default: no cap{also})",
    )


def selection_options(args: argparse.Namespace) -> dict[str, Any]:
    """The retriever options of the floor and diversity flags that were given."""
    if args.lambda_mult is not None and not args.mmr:
        raise UserError("--lambda-mult is the weight of maximal marginal relevance: add --mmr")
    options = {
        "min_vector_score": args.min_vector_score,
        "min_bm25_score": args.min_bm25_score,
        "lambda_mult": (DEFAULT_LAMBDA_MULT if args.lambda_mult is None else args.lambda_mult) if args.mmr else None,
        "max_per_source": args.max_per_source,
    }
    return {name: value for name, value in options.items() if value is not None}


def add_pipeline_options(sub: argparse.ArgumentParser) -> None:
    """A rerank step and multi-query fusion around every served search (serve and mcp)."""
    sub.add_argument(
        "--rerank",
        nargs="?",
        const="llm",
        default=None,
        type=rerank_spec,
        metavar="SPEC",
        help="rerank the candidates of every query and keep the request's k: 'llm' (the default when SPEC is left "
        "out: the chat model of --llm rates each) or 'cross-encoder:MODEL' (a local cross-encoder, MODEL a Hugging "
        "Face name or a folder, loaded at start-up; needs the local extra)",
    )
    sub.add_argument(
        "--rerank-candidates",
        type=positive_int,
        default=DEFAULT_RERANK_CANDIDATES,
        metavar="N",
        help="with --rerank, candidates retrieved per query, at least the request's k (default: %(default)s)",
    )
    sub.add_argument(
        "--multi-query",
        type=rewrites,
        default=None,
        metavar="N",
        help="multi-query fusion: the chat model writes N rewrites of every query (1-10), each is searched too and "
        "the lists are fused (needs a chat model)",
    )
