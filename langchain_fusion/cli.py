"""The ``langchain-fusion`` command: build an index from files and query it.

User mistakes (a missing folder, a bad option, a missing API key) end with one line on
stderr and exit status 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError
from langchain_fusion.fusion import FUSION_METHODS
from langchain_fusion.ingest import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, load_files, split_documents

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in how the command was called; printed as one line."""


def _parse(value: str, convert: Callable[[str], Any], valid: Callable[[Any], bool], expected: str) -> Any:
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not valid(number):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
    return number


def _positive_int(value: str) -> int:
    return int(_parse(value, int, lambda n: n >= 1, "a positive integer"))


def _alpha(value: str) -> float:
    return float(_parse(value, float, lambda n: 0.0 <= n <= 1.0, "a number between 0 and 1"))


def _fetch_k(value: str) -> int | None:
    if value.lower() in {"all", "none"}:
        return None
    return int(_parse(value, int, lambda n: n >= 1, "a positive integer or 'all'"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``langchain-fusion`` command."""
    from langchain_fusion.persistence import library_version

    parser = argparse.ArgumentParser(
        prog="langchain-fusion",
        description="Hybrid (FAISS vector + BM25 keyword) retrieval over your PDFs, text and markdown.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {library_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    embeddings_help = (
        "embedding model: 'local' (bundled all-MiniLM-L6-v2, offline), 'openai' or 'openai:MODEL' "
        "(needs OPENAI_API_KEY), or 'PROVIDER:MODEL' via LangChain's init_embeddings. "
        "Default: openai if OPENAI_API_KEY is set, else local"
    )
    index = commands.add_parser(
        "index",
        help="load files, split them into chunks and save a fusion index",
        description="Load PDFs, .txt and .md files (or whole folders), split them into chunks, embed them "
        "and save a fusion index folder. Unreadable files are reported and skipped.",
    )
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index (folders recursively)")
    index.add_argument("--out", "-o", required=True, metavar="DIR", help="folder to save the index to")
    index.add_argument("--embeddings", metavar="SPEC", help=embeddings_help)
    index.add_argument(
        "--chunk-size",
        type=_positive_int,
        default=DEFAULT_CHUNK_SIZE,
        help="characters per chunk (default: %(default)s)",
    )
    index.add_argument(
        "--chunk-overlap",
        type=int,
        default=DEFAULT_CHUNK_OVERLAP,
        help="characters shared by neighbouring chunks (default: %(default)s)",
    )
    index.add_argument(
        "--vector-index",
        default="Flat",
        metavar="FACTORY",
        help="FAISS factory string: 'Flat' is exact (default); e.g. 'HNSW32' is approximate and faster at scale",
    )
    index.add_argument(
        "--vector-search-params",
        metavar="PARAMS",
        help="FAISS search parameters for approximate indexes, e.g. 'efSearch=128' or 'nprobe=16'",
    )
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    query = commands.add_parser(
        "query",
        help="search a saved index",
        description="Search a saved index and print the best chunks with their fused and per-side scores.",
    )
    query.add_argument("index_dir", metavar="DIR", help="an index folder made by 'langchain-fusion index'")
    query.add_argument("question", help="the query text")
    query.add_argument("-k", type=_positive_int, default=4, help="number of results (default: %(default)s)")
    query.add_argument(
        "--alpha",
        type=_alpha,
        default=0.5,
        help="weight of the vector side, 1-alpha of BM25: 1 = vector only, 0 = BM25 only (default: %(default)s)",
    )
    query.add_argument(
        "--method", choices=FUSION_METHODS, default="weighted", help="fusion method (default: %(default)s)"
    )
    query.add_argument(
        "--fetch-k",
        type=_fetch_k,
        default=100,
        metavar="N",
        help="candidates per side before fusion, or 'all' to score the whole corpus (default: %(default)s)",
    )
    query.add_argument(
        "--embeddings",
        metavar="SPEC",
        help="embedding model; default: the one recorded in the index (must match it)",
    )
    query.add_argument("--json", action="store_true", help="print results as JSON (text, metadata and scores)")
    return parser


def _progress_bar(total: int, quiet: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="embedding chunks", unit="chunk", disable=quiet, file=sys.stderr)


def run_index(args: argparse.Namespace) -> int:
    """Build and save an index; print a summary."""
    import warnings

    from langchain_fusion.embeddings import LocalEmbeddings, resolve_embeddings
    from langchain_fusion.index import FusionIndex
    from langchain_fusion.ingest import SkippedFileWarning
    from langchain_fusion.persistence import check_save_target

    # Check everything that can be wrong before paying for embeddings.
    check_save_target(Path(args.out))
    embeddings = resolve_embeddings(args.embeddings)
    index = FusionIndex(embeddings, vector_index=args.vector_index, vector_search_params=args.vector_search_params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedFileWarning)  # reported in the summary instead
        loaded = load_files(args.paths)
    for skip in loaded.skipped:
        print(f"skipped {skip.path}: {skip.reason}", file=sys.stderr)
    if not loaded.documents:
        raise UserError(f"no readable documents in {' '.join(args.paths)} (PDF, .txt and .md files are indexed)")
    chunks = split_documents(loaded.documents, chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)
    if isinstance(embeddings, LocalEmbeddings):
        if not (args.quiet or args.json):
            print("loading the bundled embedding model...", file=sys.stderr)
        embeddings.load_model()
    with _progress_bar(len(chunks), args.quiet or args.json) as bar:
        index.add_documents(chunks, progress=bar.update)
    folder = index.save(args.out)
    pages = sum(1 for doc in loaded.documents if keys.PAGE in doc.metadata)
    summary = {
        "index": str(folder),
        "files": len(loaded.files),
        "pages": pages,
        "chunks": len(index),
        "skipped": [{"path": s.path, "reason": s.reason} for s in loaded.skipped],
        "embeddings": index.embeddings_id,
        "dimension": index.dimension,
        "vector_index": index.vector_factory,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"indexed {summary['files']} files ({pages} PDF pages) into {len(index)} chunks -> {folder}\n"
            f"embeddings: {index.embeddings_id} ({index.dimension} dimensions); vector index: {index.vector_factory}"
            + (f"\nskipped {len(loaded.skipped)} file(s); see above" if loaded.skipped else "")
        )
    return 0


def _snippet(text: str, width: int) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def run_query(args: argparse.Namespace) -> int:
    """Query a saved index and print the results."""
    from langchain_fusion.embeddings import resolve_embeddings
    from langchain_fusion.index import FusionIndex

    embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
    index = FusionIndex.load(args.index_dir, embeddings)
    retriever = index.as_retriever(k=args.k, alpha=args.alpha, method=args.method, fetch_k=args.fetch_k)
    docs = retriever.invoke(args.question)
    if args.json:
        payload = [
            {"rank": r, "id": d.id, "text": d.page_content, "metadata": d.metadata} for r, d in enumerate(docs, 1)
        ]
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    if not docs:
        print("no results")
        return 0
    header = f"{'rank':>4}  {'fused':>6}  {'vector':>6}  {'bm25':>6}  {'source':<28} {'page':>4}  text"
    print(header)
    print("-" * len(header.expandtabs()) + "-" * 40)
    for rank, doc in enumerate(docs, 1):
        meta = doc.metadata
        source = Path(str(meta.get(keys.SOURCE, ""))).name
        page = meta.get(keys.PAGE)
        print(
            f"{rank:>4}  {_fmt(meta.get(keys.FUSION_SCORE)):>6}  {_fmt(meta.get(keys.VECTOR_SCORE)):>6}  "
            f"{_fmt(meta.get(keys.BM25_SCORE), 2):>6}  {textwrap.shorten(source, 28, placeholder='...'):<28} "
            f"{'' if page is None else page:>4}  {_snippet(doc.page_content, 70)}"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = {"index": run_index, "query": run_query}[args.command]
    try:
        return handler(args)
    except (UserError, FusionError, ValidationError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"langchain-fusion: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("langchain-fusion: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
