"""The ``langchain-fusion`` command: build an index from files, query it, ask questions of it.

User mistakes (a missing folder, a bad option, a missing API key) end with one line on
stderr and exit status 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from langchain_fusion import metadata as keys
from langchain_fusion.cli.arguments import (
    DEFAULT_ALPHA,
    DEFAULT_FETCH_K,
    DEFAULT_K,
    DEFAULT_K_SUMMARIES,
    DEFAULT_LLM_CONCURRENCY,
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_METHOD,
    DEFAULT_RERANK_CANDIDATES,
    DEFAULT_SUMMARY_WEIGHT,
    EXIT_USER_ERROR,
    INDEX_HELP,
    PROGRESS_BATCH,
    SERVE_HOST,
    SERVE_MAX_BATCH_SIZE,
    SERVE_MAX_K,
    SERVE_MAX_QUERY_CHARS,
    SERVE_PORT,
    add_pipeline_options,
    add_selection_options,
    selection_options,
)
from langchain_fusion.cli.arguments import alpha as _alpha
from langchain_fusion.cli.arguments import fetch_k as _fetch_k
from langchain_fusion.cli.arguments import non_negative_int as _non_negative_int
from langchain_fusion.cli.arguments import port as _port
from langchain_fusion.cli.arguments import positive_int as _positive_int
from langchain_fusion.cli.arguments import rerank_spec as _rerank_spec
from langchain_fusion.cli.arguments import rewrites as _rewrites
from langchain_fusion.cli.arguments import seconds as _seconds
from langchain_fusion.cli.errors import UserError
from langchain_fusion.cli.targets import LLM_CACHE_SUFFIX, index_target
from langchain_fusion.errors import FusionError
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    split_documents,
)
from langchain_fusion.search.fusion import FUSION_METHODS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``langchain-fusion`` command."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL
    from langchain_fusion.models.embeddings import EMBEDDINGS_ENV
    from langchain_fusion.stores.local.folder import library_version

    parser = argparse.ArgumentParser(
        prog="langchain-fusion",
        description="Hybrid (FAISS vector + BM25 keyword) retrieval over your PDFs, text and markdown.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {library_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    embeddings_help = (
        "embedding model: 'local' (bundled all-MiniLM-L6-v2, offline), 'openai' or 'openai:MODEL' "
        "(needs OPENAI_API_KEY and the openai extra), or 'PROVIDER:MODEL' via LangChain's init_embeddings. "
        f"Default: the {EMBEDDINGS_ENV} environment variable if set, else local (an API key alone never "
        "switches it)"
    )
    index = commands.add_parser(
        "index",
        help="load files, split them into chunks and save a fusion index",
        description="Load PDFs, .txt and .md files (or whole folders), split them into chunks, embed them "
        "and save a fusion index folder. Unreadable files are reported and skipped. On an existing index (--out), "
        "the index is updated in place: unchanged files are skipped without embedding (by content hash), changed "
        "files have their chunks replaced, and files that no longer exist under the given paths have their chunks "
        "removed (--keep-missing keeps them). Ctrl-C saves the files done so far; run again to finish.",
    )
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index (folders recursively)")
    index.add_argument(
        "--out",
        "-o",
        required=True,
        metavar="INDEX",
        help="folder to save the index to, or a Milvus collection to write it into: milvus://HOST:PORT/COLLECTION, "
        "milvus+https://HOST/COLLECTION or milvus+lite:FILE.db/COLLECTION (token from MILVUS_TOKEN)",
    )
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
        "--max-file-chars",
        type=_positive_int,
        default=DEFAULT_MAX_FILE_CHARS,
        metavar="N",
        help="skip (and report) a file that yields more than N characters of text, e.g. a small PDF that "
        "expands to millions (default: %(default)s, about 2,000 dense pages)",
    )
    index.add_argument(
        "--vector-index",
        default=None,
        metavar="FACTORY",
        help="FAISS factory string: 'Flat' is exact (default); e.g. 'HNSW32' is approximate and faster at scale "
        "(a new index only: an existing one keeps its own)",
    )
    index.add_argument(
        "--vector-search-params",
        metavar="PARAMS",
        help="FAISS search parameters for approximate indexes, e.g. 'efSearch=128' or 'nprobe=16' "
        "(an HNSW graph also takes 'efConstruction=N', how wide it is built; default 128)",
    )
    index.add_argument(
        "--contextual",
        action="store_true",
        help="contextual enrichment: a chat model writes 1-3 sentences situating each chunk in its whole "
        "document; they are embedded and BM25-indexed with the chunk, while results show the original text",
    )
    index.add_argument(
        "--summaries",
        action="store_true",
        help="have a chat model summarise every PDF page (or section of a text file) into a second index "
        "saved in the same folder, for 'query --hierarchical'",
    )
    index.add_argument(
        "--llm",
        metavar="PROVIDER:MODEL",
        help="chat model for --contextual and --summaries: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), or "
        "any 'PROVIDER:MODEL' that LangChain's init_chat_model knows. "
        f"Default: openai:{OPENAI_DEFAULT_CHAT_MODEL}",
    )
    index.add_argument(
        "--llm-cache",
        metavar="DIR",
        help=f"folder caching the chat model's answers, so a rerun pays only for new or changed chunks and pages "
        f"(default: the --out folder's name plus '{LLM_CACHE_SUFFIX}', next to it)",
    )
    index.add_argument(
        "--llm-concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"chat model calls at once for --contextual and --summaries (default: {DEFAULT_LLM_CONCURRENCY})",
    )
    index.add_argument(
        "--llm-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds to wait for each chat model answer before it counts as failed and is retried "
        f"(default: {DEFAULT_LLM_TIMEOUT:g})",
    )
    index.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep the chunks of files that were indexed from under the given paths and no longer exist there "
        "(by default they are removed)",
    )
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    query = commands.add_parser(
        "query",
        help="search a saved index",
        description="Search a saved index and print the best chunks with their fused and per-side scores. "
        "--hierarchical searches page summaries first, then the chunks of the best pages; "
        "--window merges each hit with its neighbouring chunks; --rerank has a chat model (or a local cross-encoder) "
        "rerank the candidates; --multi-query also searches a chat model's rewrites of the query.",
    )
    query.add_argument("index_dir", metavar="INDEX", help=INDEX_HELP)
    query.add_argument("question", help="the query text")
    _add_search_options(query, results="results")
    query.add_argument("--json", action="store_true", help="print results as JSON (text, metadata and scores)")

    ask = commands.add_parser(
        "ask",
        help="answer a question from a saved index with a chat model, citing numbered sources",
        description="Retrieve passages from a saved index (fusion, then optional --multi-query, --window and "
        "--rerank), ask a chat model to answer from them, and print the answer followed by its numbered sources. "
        f"The chat model is OpenAI {OPENAI_DEFAULT_CHAT_MODEL} (needs OPENAI_API_KEY) unless --llm says otherwise.",
    )
    ask.add_argument("index_dir", metavar="INDEX", help=INDEX_HELP)
    ask.add_argument("question", help="the question to answer")
    _add_search_options(ask, results="passages given to the model")
    ask.add_argument("--json", action="store_true", help="print the answer and its sources as JSON")
    from langchain_fusion.cli.evaluate import add_eval_parser

    add_eval_parser(commands, _fetch_k)
    _add_serve_parser(commands)
    from langchain_fusion.cli.mcp_command import add_mcp_parser

    add_mcp_parser(commands)
    return parser


def _add_serve_parser(commands: Any) -> None:
    """The ``serve`` subcommand (its defaults mirror ``langchain_fusion.server``, which needs the server extra)."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    serve = commands.add_parser(
        "serve",
        help="serve a saved index over HTTP with LangServe: the retriever, the RAG chain and a playground",
        description="Load a saved index once and serve it with LangServe and uvicorn: the fusion retriever at "
        "/retriever (invoke, batch, stream, playground), the RAG chain at /rag when a chat model is available, "
        "and GET /health with the index manifest. Requests may set k, alpha and method through LangServe's "
        "configurable fields, within the limits below. There is no authentication: keep the default host "
        "unless the network in front of it is trusted. Needs the server extra: "
        "pip install 'langchain-fusion[server]'. Stop it with Ctrl-C.",
    )
    serve.add_argument("index_dir", metavar="INDEX", help=INDEX_HELP)
    serve.add_argument(
        "--host",
        default=SERVE_HOST,
        help="address to listen on (default: %(default)s, this machine only; 0.0.0.0 exposes the server to the "
        "network)",
    )
    serve.add_argument(
        "--port", type=_port, default=SERVE_PORT, help="TCP port (default: %(default)s; 0 picks a free port)"
    )
    serve.add_argument(
        "--llm",
        metavar="PROVIDER:MODEL",
        help="chat model of /rag: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), or any 'PROVIDER:MODEL' "
        f"that LangChain's init_chat_model knows. Default: openai:{OPENAI_DEFAULT_CHAT_MODEL} when "
        "OPENAI_API_KEY is set; otherwise only /retriever is served",
    )
    serve.add_argument(
        "--embeddings",
        metavar="SPEC",
        help="embedding model; default: the one recorded in the index (must match it)",
    )
    serve.add_argument(
        "-k",
        type=_positive_int,
        default=DEFAULT_K,
        help="documents per query unless a request sets k (default: %(default)s)",
    )
    serve.add_argument(
        "--alpha",
        type=_alpha,
        default=DEFAULT_ALPHA,
        help="default weight of the vector side, 1-alpha of BM25 (default: %(default)s)",
    )
    serve.add_argument(
        "--method", choices=FUSION_METHODS, default=DEFAULT_METHOD, help="default fusion method (default: %(default)s)"
    )
    serve.add_argument(
        "--fetch-k",
        type=_fetch_k,
        default=DEFAULT_FETCH_K,
        metavar="N",
        help="candidates per side before fusion, or 'all' (default: %(default)s; not settable per request)",
    )
    add_selection_options(serve, "not settable per request")
    serve.add_argument(
        "--max-k",
        type=_positive_int,
        default=SERVE_MAX_K,
        metavar="N",
        help="largest k a request may ask for (default: %(default)s)",
    )
    serve.add_argument(
        "--max-query-chars",
        type=_positive_int,
        default=SERVE_MAX_QUERY_CHARS,
        metavar="N",
        help="longest query or question accepted, in characters (default: %(default)s)",
    )
    serve.add_argument(
        "--max-batch-size",
        type=_positive_int,
        default=SERVE_MAX_BATCH_SIZE,
        metavar="N",
        help="most inputs in one /batch request (default: %(default)s)",
    )
    serve.add_argument(
        "--llm-timeout",
        type=_seconds,
        default=DEFAULT_LLM_TIMEOUT,
        metavar="SECONDS",
        help="seconds /rag waits for each chat model answer before it counts as failed and is retried "
        "(default: %(default)g); a model that keeps failing answers 502",
    )
    add_pipeline_options(serve)
    serve.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="uvicorn's log level (default: %(default)s)",
    )


def _add_search_options(sub: argparse.ArgumentParser, results: str) -> None:
    """The retrieval options shared by ``query`` and ``ask``."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    sub.add_argument(
        "-k",
        type=_positive_int,
        default=None,
        help=f"number of {results} (default: {DEFAULT_K}); with --rerank, the number of candidates reranked "
        f"(default: {DEFAULT_RERANK_CANDIDATES})",
    )
    sub.add_argument(
        "--alpha",
        type=_alpha,
        default=DEFAULT_ALPHA,
        help="weight of the vector side, 1-alpha of BM25: 1 = vector only, 0 = BM25 only (default: %(default)s)",
    )
    sub.add_argument(
        "--method", choices=FUSION_METHODS, default=DEFAULT_METHOD, help="fusion method (default: %(default)s)"
    )
    sub.add_argument(
        "--fetch-k",
        type=_fetch_k,
        default=DEFAULT_FETCH_K,
        metavar="N",
        help="candidates per side before fusion, or 'all' to score the whole corpus (default: %(default)s)",
    )
    add_selection_options(sub)
    sub.add_argument(
        "--embeddings",
        metavar="SPEC",
        help="embedding model; default: the one recorded in the index (must match it)",
    )
    sub.add_argument(
        "--hierarchical",
        action="store_true",
        help="search the page summaries first (an index built with --summaries), then the chunks of the "
        "--k-summaries best pages only; chunks are ranked by summary-weight * summary score + "
        "(1 - summary-weight) * chunk score",
    )
    sub.add_argument(
        "--k-summaries",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"with --hierarchical, how many summaries (pages or sections) to select (default: {DEFAULT_K_SUMMARIES})",
    )
    sub.add_argument(
        "--summary-weight",
        type=_alpha,
        default=None,
        metavar="W",
        help="with --hierarchical, the weight of the summary's score in a chunk's score, between 0 and 1 "
        f"(default: {DEFAULT_SUMMARY_WEIGHT})",
    )
    sub.add_argument(
        "--window",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="merge each hit with N neighbouring chunks on each side into one passage, overlap removed; "
        "hits whose windows touch become one passage (default: %(default)s, no window)",
    )
    sub.add_argument(
        "--max-chars",
        type=_positive_int,
        default=None,
        metavar="N",
        help="character budget per --window passage: farther neighbours are dropped to fit, hits never are "
        "(default: 4000)",
    )
    sub.add_argument(
        "--rerank",
        nargs="?",
        const="llm",
        default=None,
        type=_rerank_spec,
        metavar="SPEC",
        help="rerank the candidates and keep the best --top-n. SPEC 'llm' (the default when SPEC is left out): a "
        "chat model rates each candidate 1-10; 'cross-encoder:MODEL': a local cross-encoder scores each one, MODEL "
        "a Hugging Face name (e.g. cross-encoder/ms-marco-MiniLM-L6-v2, from the local cache or downloaded) or a "
        "folder with a saved model (needs the local extra)",
    )
    sub.add_argument(
        "--top-n",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"with --rerank, how many of the reranked candidates to keep (default: {DEFAULT_K})",
    )
    sub.add_argument(
        "--multi-query",
        type=_rewrites,
        default=None,
        metavar="N",
        help="multi-query fusion: a chat model writes N rewrites of the question (1-10), each is searched too, and "
        "the result lists are fused (weighted reciprocal rank fusion, the question itself weighted highest); if the "
        "model fails, the question is searched alone",
    )
    sub.add_argument(
        "--llm",
        metavar="PROVIDER:MODEL",
        help="chat model: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), or any 'PROVIDER:MODEL' that "
        "LangChain's init_chat_model knows (pip install 'langchain-fusion[llm]' and the provider's package). "
        f"Default: openai:{OPENAI_DEFAULT_CHAT_MODEL}",
    )
    sub.add_argument(
        "--llm-timeout",
        type=_seconds,
        default=DEFAULT_LLM_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for each chat model answer before it counts as failed and is retried "
        "(default: %(default)g)",
    )


def _progress_bar(total: int, quiet: bool, desc: str = "embedding chunks", unit: str = "chunk") -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, file=sys.stderr)


def _check_index_options(args: argparse.Namespace) -> bool:
    """Whether the index command needs a chat model; UserError for LLM options without a use."""
    uses_llm = bool(args.contextual or args.summaries)
    if not uses_llm:
        options = {
            "--llm": args.llm,
            "--llm-cache": args.llm_cache,
            "--llm-concurrency": args.llm_concurrency,
            "--llm-timeout": args.llm_timeout,
        }
        given = [flag for flag, value in options.items() if value is not None]
        if given:
            raise UserError(
                f"index uses a chat model only for --contextual and --summaries: add one, or drop {given[0]}"
            )
    return uses_llm


def run_index(args: argparse.Namespace) -> int:
    """Build an index, or bring an existing one up to date with the files; save it; print a summary."""
    from langchain_fusion.index.sync import sync_files
    from langchain_fusion.models.embeddings import LocalEmbeddings

    # Check everything that can be wrong before paying for a chat model or embeddings.
    target = index_target(args.out)
    target.check_options(args)
    split_documents([], chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)  # checks the two
    uses_llm = _check_index_options(args)
    chat_model = _chat_model(args) if uses_llm else None  # a missing key fails before any work
    index = target.open(args)
    embeddings = index.embeddings
    quiet = args.quiet or args.json
    cache_dir = Path(args.llm_cache) if args.llm_cache else target.default_llm_cache()
    llm_options = {
        "llm": chat_model,
        "cache_dir": cache_dir,
        "max_concurrency": args.llm_concurrency or DEFAULT_LLM_CONCURRENCY,
        "timeout": args.llm_timeout or DEFAULT_LLM_TIMEOUT,
    }
    reports: dict[str, Any] = {}

    def enrich(chunks: list[Any], pages: list[Any]) -> list[Any]:
        enriched, report = _enrich(chunks, pages, llm_options, quiet=True)
        if "contextual" in reports:
            reports["contextual"] = reports["contextual"].merged(report)
        else:
            reports["contextual"] = report
        return enriched

    bars: list[Any] = []

    def start_embedding() -> None:  # only when some file needs it: a rerun with nothing new loads no model
        if isinstance(embeddings, LocalEmbeddings):
            if not quiet:
                print("loading the bundled embedding model...", file=sys.stderr)
            embeddings.load_model()
        bars.append(_progress_bar(0, quiet, "embedding chunks", "chunk"))

    def show_file(source: str) -> None:
        if bars:
            bars[0].set_postfix_str(Path(source).name, refresh=False)

    def report_skip(skipped: Any) -> None:
        from tqdm import tqdm

        tqdm.write(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)

    record = target.record(index)
    try:
        with _quiet_logger("langchain_fusion.models.embeddings"):  # the summary below says it once
            report = sync_files(
                index,
                args.paths,
                record,
                chunk_size=args.chunk_size,
                chunk_overlap=args.chunk_overlap,
                keep_missing=args.keep_missing,
                transform=enrich if args.contextual else None,
                on_file=show_file,
                on_skip=report_skip,
                before_embedding=start_embedding,
                progress=lambda n: bars[0].update(n),
                batch_size=PROGRESS_BATCH,
                max_file_chars=args.max_file_chars,
            )
    finally:
        for bar in bars:
            bar.close()
    if report.interrupted:
        folder = target.save(index, record)
        print(
            f"langchain-fusion: interrupted; saved the {len(record.get('by_path', {}))} files done so far to "
            f"{folder}: run the same command again to finish",
            file=sys.stderr,
        )
        return 130
    if len(index) == 0:
        raise UserError(f"no readable documents in {' '.join(args.paths)} (PDF, .txt and .md files are indexed)")
    summaries = 0
    if args.summaries:
        hierarchical, reports["summaries"] = _summarize(index, llm_options, quiet)
        summaries = len(hierarchical.summaries)
        folder = target.save(index, record, hierarchical)
    else:
        folder = target.save(index, record)
    documents = index.documents
    pages = len({(d.metadata.get(keys.SOURCE), d.metadata[keys.PAGE]) for d in documents if keys.PAGE in d.metadata})
    files = len(record.get("by_path", {}))
    summary = {
        "index": str(folder),
        "files": files,
        "pages": pages,
        "chunks": len(index),
        **report.to_dict(),
        "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped],
        "embeddings": index.embeddings_id,
        "dimension": index.dimension,
        "vector_index": _vector_index(index),
        "chunks_longer_than_the_model_reads": _truncated(embeddings)[0],
    }
    if uses_llm:
        summary["summaries"] = summaries if args.summaries else None
        summary["llm"] = {"cache": str(cache_dir), **{name: r.to_dict() for name, r in reports.items()}}
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        lines = [
            f"indexed {files} files ({pages} PDF pages) into {len(index)} chunks"
            + (f" and {summaries} page and section summaries" if args.summaries else "")
            + f" -> {folder}",
            f"this run: {report.summary()}",
            f"embeddings: {index.embeddings_id} ({index.dimension} dimensions); vector index: {_vector_index(index)}",
        ]
        longer, embedded, limit = _truncated(embeddings)
        if longer:
            lines.append(
                f"note: {longer} of the {embedded} chunks embedded this run are longer than the {limit} word pieces "
                "the local model reads; only their start is embedded (BM25 indexes all of it); a smaller "
                "--chunk-size (e.g. 800) embeds each whole"
            )
        lines.extend(r.summary() for r in reports.values())
        if uses_llm:
            lines.append(f"chat model answers cached in {cache_dir}")
        if report.skipped:
            lines.append(f"skipped {len(report.skipped)} file(s); see above")
        print("\n".join(lines))
    return 0


def _truncated(embeddings: Any) -> tuple[int, int, int]:
    """Chunks the bundled model embedded only in part this run, chunks it embedded, and its limit (zeros otherwise)."""
    from langchain_fusion.models.embeddings import LocalEmbeddings

    if not isinstance(embeddings, LocalEmbeddings) or not embeddings.truncated_texts[1]:
        return 0, 0, 0
    return (*embeddings.truncated_texts, embeddings.max_word_pieces)


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Silence a library logger whose warnings the command prints itself (they would appear twice)."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _enrich(chunks: list[Any], documents: list[Any], llm_options: dict[str, Any], quiet: bool) -> tuple[list[Any], Any]:
    """Contextual enrichment of the chunks, with a progress bar; failures are listed on stderr."""
    from langchain_fusion.ingest.enrichment import ContextualEnricher

    enricher = ContextualEnricher(**llm_options)
    with (
        _progress_bar(len(chunks), quiet, "enriching chunks") as bar,
        _quiet_logger("langchain_fusion.ingest.enrichment"),
    ):
        enriched, report = enricher.enrich(chunks, documents, progress=bar.update)
    for failure in report.failed:
        print(f"enrichment failed for {failure.label}: {failure.error}; indexed without context", file=sys.stderr)
    return enriched, report


def _summarize(index: Any, llm_options: dict[str, Any], quiet: bool) -> tuple[Any, Any]:
    """Page and section summaries of the index, embedded into a hierarchical index, with progress bars."""
    from langchain_fusion.index.hierarchical import HierarchicalIndex
    from langchain_fusion.ingest.summaries import PageSummarizer, page_units

    summarizer = PageSummarizer(**llm_options)
    units = len(page_units(index.documents, summarizer.section_chars))
    with (
        _progress_bar(units, quiet, "summarising pages", "page") as bar,
        _quiet_logger("langchain_fusion.ingest.summaries"),
    ):
        documents, report = summarizer.summarize(index.documents, progress=bar.update)
    for failure in report.failed:
        print(f"summary failed for {failure.label}: {failure.error}; its leading text stands in", file=sys.stderr)
    with _progress_bar(len(documents), quiet, "embedding summaries", "summary") as bar:
        hierarchical = HierarchicalIndex.from_summaries(index, documents, progress=bar.update)
    return hierarchical, report


def _snippet(text: str, width: int) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _uses_chat_model(args: argparse.Namespace, command: str) -> bool:
    """Whether the command needs a chat model: ``ask`` always; ``query`` for an LLM rerank or multi-query."""
    llm_rerank = args.rerank is not None and args.rerank.uses_chat_model
    return command == "ask" or llm_rerank or args.multi_query is not None


def _check_combinations(args: argparse.Namespace, command: str) -> None:
    if args.top_n is not None and args.rerank is None:
        raise UserError("--top-n is the number of reranked results to keep: add --rerank")
    if args.max_chars is not None and not args.window:
        raise UserError("--max-chars is the character budget of context windows: add --window N")
    if command == "query" and args.llm is not None and not _uses_chat_model(args, command):
        raise UserError(
            "query uses a chat model only to rerank (--rerank llm) or to rewrite the query (--multi-query N): "
            "add one, or drop --llm"
        )
    for flag, value in (("--k-summaries", args.k_summaries), ("--summary-weight", args.summary_weight)):
        if value is not None and not args.hierarchical:
            raise UserError(f"{flag} is an option of hierarchical search: add --hierarchical")


def _chat_model(args: argparse.Namespace) -> Any:
    from langchain_fusion.models import chat as llm

    return llm.resolve_chat_model(args.llm)


def _retriever(args: argparse.Namespace, chat_model: Any) -> Any:
    """The fused retriever, wrapped by multi-query fusion, a context window and a reranker as the options ask."""
    from langchain_fusion.index.hierarchical import HierarchicalIndex
    from langchain_fusion.index.opening import open_index
    from langchain_fusion.models.embeddings import resolve_embeddings
    from langchain_fusion.retrievers.cross_encoder import CrossEncoderReranker
    from langchain_fusion.retrievers.multi_query import MultiQueryFusionRetriever
    from langchain_fusion.retrievers.rerank import RerankRetriever
    from langchain_fusion.retrievers.rerank_spec import build_reranker
    from langchain_fusion.retrievers.windows import DEFAULT_WINDOW_MAX_CHARS, ContextWindowRetriever
    from langchain_fusion.stores.locations import is_store_location

    selection = selection_options(args)
    if args.hierarchical and selection:  # checked before anything loads
        raise UserError(
            "--min-vector-score, --min-bm25-score, --mmr and --max-per-source apply to fused search, "
            "not to --hierarchical: drop them or --hierarchical"
        )
    reranker = None
    if args.rerank is not None:  # a cross-encoder loads before the search: a missing model fails first
        top_n = args.top_n if args.top_n is not None else DEFAULT_K
        reranker = build_reranker(args.rerank, llm=chat_model, top_n=top_n, timeout=args.llm_timeout)
        if isinstance(reranker, CrossEncoderReranker):
            reranker.load_model()
    embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
    k = args.k if args.k is not None else DEFAULT_RERANK_CANDIDATES if reranker is not None else DEFAULT_K
    options = {"k": k, "alpha": args.alpha, "method": args.method, "fetch_k": args.fetch_k}
    retriever: Any
    if args.hierarchical:
        if is_store_location(args.index_dir):
            raise UserError(
                "--hierarchical needs page summaries, which are kept in index folders only "
                "(langchain-fusion index PATH... --summaries --out DIR)"
            )
        hierarchical = HierarchicalIndex.load(args.index_dir, embeddings)
        index = hierarchical.chunks
        retriever = hierarchical.as_retriever(
            k_summaries=args.k_summaries or DEFAULT_K_SUMMARIES,
            summary_weight=DEFAULT_SUMMARY_WEIGHT if args.summary_weight is None else args.summary_weight,
            **options,
        )
    else:
        opened = open_index(args.index_dir, embeddings)
        # A hierarchical folder also answers plain searches: its chunk index.
        index = opened.chunks if isinstance(opened, HierarchicalIndex) else opened
        retriever = index.as_retriever(**options, **selection)
    if args.multi_query is not None:
        retriever = MultiQueryFusionRetriever(
            retriever=retriever,
            llm=chat_model,
            n=args.multi_query,
            k=k,
            timeout=args.llm_timeout,
        )
    if args.window:
        budget = DEFAULT_WINDOW_MAX_CHARS if args.max_chars is None else args.max_chars
        retriever = ContextWindowRetriever(retriever=retriever, index=index, n=args.window, max_chars=budget)
    if reranker is not None:
        retriever = RerankRetriever(retriever=retriever, reranker=reranker)
    return retriever


def _pages(meta: dict[str, Any]) -> str:
    pages = meta.get(keys.WINDOW_PAGES)
    if isinstance(pages, list) and len(pages) == 2 and pages[0] != pages[1]:
        return f"{pages[0]}-{pages[1]}"
    page = meta.get(keys.PAGE)
    return "" if page is None else str(page)


def run_query(args: argparse.Namespace) -> int:
    """Query a saved index and print the results."""
    _check_combinations(args, "query")
    if not args.question.strip():
        raise UserError("the query is empty: give the words or question to search for")
    chat_model = _chat_model(args) if _uses_chat_model(args, "query") else None  # a missing key fails first
    docs = _retriever(args, chat_model).invoke(args.question)
    if args.json:
        payload = [
            {"rank": r, "id": d.id, "text": d.page_content, "metadata": d.metadata} for r, d in enumerate(docs, 1)
        ]
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    if args.multi_query is not None and docs:
        rewrites = docs[0].metadata.get(keys.MULTI_QUERY_REWRITES) or []
        print("also searched: " + ("; ".join(rewrites) if rewrites else "nothing (no usable rewrites)"))
    if not docs:
        floors = args.min_vector_score is not None or args.min_bm25_score is not None
        print("no results above the relevance floor" if floors else "no results")
        return 0
    rated_by_llm = args.rerank is not None and args.rerank.uses_chat_model
    cross_encoded = args.rerank is not None and not rated_by_llm
    rating = f"  {'rating':>6}" if rated_by_llm else f"  {'rerank':>6}" if cross_encoded else ""
    hier = f"  {'hier':>6}  {'sum#':>4}" if args.hierarchical else ""
    header = f"{'rank':>4}{hier}  {'fused':>6}  {'vector':>6}  {'bm25':>6}{rating}  {'source':<28} {'page':>4}  text"
    print(header)
    print("-" * len(header.expandtabs()) + "-" * 40)
    for rank, doc in enumerate(docs, 1):
        meta = doc.metadata
        source = Path(str(meta.get(keys.SOURCE, ""))).name
        rated = meta.get(keys.RERANK_RATING)
        if rated_by_llm:
            rating = f"  {'-' if rated is None else rated:>6}"
        else:
            rating = f"  {_fmt(meta.get(keys.RERANK_SCORE)):>6}" if cross_encoded else ""
        summary_rank = meta.get(keys.SUMMARY_RANK)
        hier = (
            f"  {_fmt(meta.get(keys.HIERARCHICAL_SCORE)):>6}  {'-' if summary_rank is None else summary_rank:>4}"
            if args.hierarchical
            else ""
        )
        print(
            f"{rank:>4}{hier}  {_fmt(meta.get(keys.FUSION_SCORE)):>6}  {_fmt(meta.get(keys.VECTOR_SCORE)):>6}  "
            f"{_fmt(meta.get(keys.BM25_SCORE), 2):>6}{rating}  {textwrap.shorten(source, 28, placeholder='...'):<28} "
            f"{_pages(meta):>4}  {_snippet(doc.page_content, 70)}"
        )
    return 0


def run_ask(args: argparse.Namespace) -> int:
    """Answer a question from a saved index with a chat model; print the answer and its sources."""
    from langchain_fusion.chains import build_rag_chain, source_label

    _check_combinations(args, "ask")
    if not args.question.strip():
        raise UserError("the question is empty")
    chat_model = _chat_model(args)  # a missing key fails before any work
    chain = build_rag_chain(_retriever(args, chat_model), chat_model, timeout=args.llm_timeout)
    answer: list[str] = []
    sources: list[Any] = []
    try:
        if args.json:
            result = chain.invoke(args.question)
            answer, sources = [result["answer"]], result["sources"]
        else:
            for chunk in chain.stream(args.question):
                sources = chunk.get("sources", sources)
                if chunk.get("answer"):
                    answer.append(chunk["answer"])
                    print(chunk["answer"], end="", flush=True)
    except (FusionError, UserError):  # the chat model's failures are ProviderErrors, already one line
        if answer:
            print(flush=True)
        raise
    if args.json:
        payload = {
            "question": args.question,
            "answer": answer[0],
            "sources": [
                {"n": n, "id": d.id, "label": source_label(d), "text": d.page_content, "metadata": d.metadata}
                for n, d in enumerate(sources, 1)
            ],
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    print("\n\nSources:" if answer else "Sources:")
    for n, doc in enumerate(sources, 1):
        print(f"[{n}] {source_label(doc)}")
    if not sources:
        print("(none found)")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serve a saved index with LangServe and uvicorn until interrupted."""
    from langchain_fusion import server  # MissingDependencyError without the server extra
    from langchain_fusion.models.embeddings import resolve_embeddings

    if args.k > args.max_k:
        raise UserError(f"-k {args.k} is more than --max-k {args.max_k}: raise --max-k or lower -k")
    selection = selection_options(args)
    try:  # the port first: a busy one fails in a second, not after loading the index
        sock = server.bind_socket(args.host, args.port)
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    try:
        embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
        with _quiet_logger("langchain_fusion.server"):  # its start-up lines are printed below instead
            app = server.create_app(
                args.index_dir,
                embeddings=embeddings,
                llm=args.llm,
                k=args.k,
                alpha=args.alpha,
                method=args.method,
                fetch_k=args.fetch_k,
                **selection,
                k_summaries=min(DEFAULT_K_SUMMARIES, args.max_k),  # used by hierarchical folders
                max_k=args.max_k,
                max_query_chars=args.max_query_chars,
                max_batch_size=args.max_batch_size,
                llm_timeout=args.llm_timeout,
                reranker=None if args.rerank is None else str(args.rerank),
                rerank_candidates=args.rerank_candidates,
                multi_query=args.multi_query,
            )
        status = app.state.langchain_fusion
        index, rag, url = status["index"], status["rag"], server.url_of(sock)
        what = f"{index['documents']} chunks" + (
            f" and {index['summaries']} summaries" if index["kind"] == "hierarchical" else ""
        )
        lines = [
            f"serving {args.index_dir} ({what}, {index['embeddings']}) at {url}",
            f"retriever: {url}{server.RETRIEVER_PATH}/ (playground: {url}{server.RETRIEVER_PATH}/playground/); "
            f"health: {url}{server.HEALTH_PATH}",
        ]
        pipeline = status["pipeline"]
        if pipeline["multi_query"]:
            lines.append(f"multi-query fusion: {pipeline['multi_query']} rewrites per query")
        if pipeline["rerank"]:
            step = pipeline["rerank"]
            lines.append(f"rerank: {args.rerank} ({step['candidates']} candidates per query)")
        if rag["enabled"]:
            lines.append(f"RAG chain with {rag['chat_model']}: {url}{server.RAG_PATH}/")
        else:
            lines.append(f"no chat model, so /rag is not served: {rag['reason']}")
        if not server.is_loopback(args.host):
            lines.append(
                f"warning: listening on {args.host} makes the server reachable from other machines; "
                "it has no authentication"
            )
        for line in lines:
            print(f"langchain-fusion: {line}", file=sys.stderr, flush=True)
        # After a Ctrl-C uvicorn shuts down cleanly and re-raises it, or returns (see mcp_command).
        with contextlib.suppress(KeyboardInterrupt):
            server.serve(app, sock=sock, log_level=args.log_level)
        print("langchain-fusion: stopped", file=sys.stderr)
    finally:
        sock.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from langchain_fusion.cli.evaluate import run_eval
    from langchain_fusion.cli.mcp_command import run_mcp_command

    handler = {
        "index": run_index,
        "query": run_query,
        "ask": run_ask,
        "eval": run_eval,
        "serve": run_serve,
        "mcp": run_mcp_command,
    }[args.command]
    try:
        with _printable_output():
            return handler(args)
    except (UserError, FusionError, ValidationError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"langchain-fusion: error: {message}", file=sys.stderr)
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


def _vector_index(index: Any) -> str:
    """The FAISS factory string of an in-process index's store (``-`` for other stores)."""
    return str(getattr(index.store, "vector_index", "-"))
