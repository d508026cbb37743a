"""The ``index`` command: build an index from files, or bring an existing one up to date, at any location.

The location (``--out``) is a folder or another engine's store (:mod:`langchain_fusion.stores.registry`):
the engine opens it (or makes a new one), and saves it with the record of the files indexed, so a
rerun embeds only new and changed files. Page summaries are kept in folders only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_fusion import metadata as keys
from langchain_fusion.cli.arguments import PROGRESS_BATCH, positive_int, seconds
from langchain_fusion.cli.errors import UserError
from langchain_fusion.cli.wording import in_flags
from langchain_fusion.errors import EmbeddingsMismatchError
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    split_documents,
)
from langchain_fusion.models.bounded_calls import DEFAULT_LLM_CONCURRENCY
from langchain_fusion.pipeline.spec import DEFAULT_LLM_TIMEOUT
from langchain_fusion.stores.registry import LLM_CACHE_SUFFIX, location_help


def add_index_parser(commands: Any) -> None:
    """Register ``index``."""
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
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index (folders recursively)")
    index.add_argument(
        "--out", "-o", required=True, metavar="INDEX", help=f"where to save the index: {location_help()}"
    )
    _add_embedding_arguments(index)
    _add_llm_arguments(index)
    index.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep the chunks of files that were indexed from under the given paths and no longer exist there "
        "(by default they are removed)",
    )
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def _stemmer_languages() -> list[str]:
    from typing import get_args

    from langchain_fusion.stores.analyzer import StemmerLanguage

    return list(get_args(StemmerLanguage))


def _add_embedding_arguments(index: argparse.ArgumentParser) -> None:
    from langchain_fusion.models.embeddings import EMBEDDINGS_ENV

    index.add_argument(
        "--embeddings",
        metavar="SPEC",
        help="embedding model: 'local' (bundled all-MiniLM-L6-v2, offline), 'openai' or 'openai:MODEL' (needs "
        "OPENAI_API_KEY and the openai extra), or 'PROVIDER:MODEL' via LangChain's init_embeddings. Default: the "
        f"{EMBEDDINGS_ENV} environment variable if set, else local (an API key alone never switches it)",
    )
    index.add_argument(
        "--chunk-size",
        type=positive_int,
        default=DEFAULT_CHUNK_SIZE,
        help="characters per chunk (default: %(default)s)",
    )
    index.add_argument(
        "--language",
        choices=_stemmer_languages(),
        metavar="LANG",
        help="BM25 stemming and stopwords of a new index in LANG, applied to words in its script only "
        "(default: english; the text of every language is indexed either way). One of: "
        + ", ".join(_stemmer_languages())
        + ". An existing index keeps its own",
    )
    index.add_argument(
        "--max-chunk-tokens",
        type=positive_int,
        metavar="N",
        help="also bound each chunk to N word pieces of the bundled model (254 embeds every chunk whole; "
        "Chinese and Japanese have about one per character). Default: chunks bounded by --chunk-size only",
    )
    index.add_argument(
        "--chunk-overlap",
        type=int,
        default=DEFAULT_CHUNK_OVERLAP,
        help="characters shared by neighbouring chunks (default: %(default)s)",
    )
    index.add_argument(
        "--max-file-chars",
        type=positive_int,
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


def _add_llm_arguments(index: argparse.ArgumentParser) -> None:
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

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
        f"any 'PROVIDER:MODEL' that LangChain's init_chat_model knows. Default: openai:{OPENAI_DEFAULT_CHAT_MODEL}",
    )
    index.add_argument(
        "--llm-cache",
        metavar="DIR",
        help=f"folder caching the chat model's answers, so a rerun pays only for new or changed chunks and pages "
        f"(default: the --out folder's name plus '{LLM_CACHE_SUFFIX}', next to it)",
    )
    index.add_argument(
        "--llm-concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"chat model calls at once for --contextual and --summaries (default: {DEFAULT_LLM_CONCURRENCY})",
    )
    index.add_argument(
        "--llm-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="seconds to wait for each chat model answer before it counts as failed and is retried "
        f"(default: {DEFAULT_LLM_TIMEOUT:g})",
    )


class _Target:
    """The location an ``index`` run reads its index from and saves it to."""

    def __init__(self, out: str, args: argparse.Namespace) -> None:
        from langchain_fusion.index.opening import hierarchical_folder, keeps_summaries
        from langchain_fusion.stores.analyzer import Analyzer
        from langchain_fusion.stores.registry import NewStoreOptions, engine_for

        self.out = out
        self.engine = engine_for(out)
        if args.summaries and not keeps_summaries(out):
            raise UserError(
                "page summaries (--summaries) are kept in index folders only: give --out a folder, or drop --summaries"
            )
        analyzer = Analyzer(language=args.language) if args.language else None
        self.options = NewStoreOptions(args.vector_index, args.vector_search_params, analyzer)
        self.engine.check_target(out, self.options)
        self.hierarchical = hierarchical_folder(out)
        if self.hierarchical is not None and not args.summaries:
            raise UserError(
                f"{out} holds page summaries too: add --summaries to keep them up to date, or choose a new --out"
            )
        if self.hierarchical is not None:  # a model that cannot be saved again fails now, not after the summaries
            from langchain_fusion.index.hierarchical import saved_relevance
            from langchain_fusion.search.relevance import saved_model

            data = saved_relevance(self.hierarchical)
            if data is not None:
                saved_model(data, str(self.hierarchical))

    def open(self, embeddings: Any) -> Any:
        """The index to update (a hierarchical folder's chunk index), or a new empty one."""
        from langchain_fusion.index.hierarchical import load_chunks
        from langchain_fusion.index.opening import open_for_update

        try:
            if self.hierarchical is not None:  # no probe embedding: a rerun with nothing new must not load the model
                return load_chunks(self.hierarchical, embeddings, check_dimension=False)
            return open_for_update(self.out, embeddings, self.options)
        except EmbeddingsMismatchError as exc:
            raise UserError(f"{exc}; to use other embeddings, choose a new --out") from None

    def updating(self, quiet: bool) -> Any:
        """The engine's update lock on the location, saying so on stderr when another run holds it."""

        def waiting() -> None:
            if not quiet:
                print(f"waiting for another index run on {self.out} to finish...", file=sys.stderr)

        return self.engine.updating(self.out, waiting)

    def save(self, index: Any, record: dict[str, Any], hierarchical: Any = None) -> str:
        """Persist ``index`` (or ``hierarchical``, built on it) with the file record; returns where, for people."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        if hierarchical is None and self.hierarchical is not None:
            raise AssertionError(f"{self.out} holds page summaries: saving its chunks alone would drop them")
        info = index.info_to_save({SYNC_INFO_KEY: record})  # a calibrated index keeps its relevance model
        if hierarchical is not None:
            if self.hierarchical is not None:  # and so does a calibrated hierarchical one
                from langchain_fusion.index.hierarchical import saved_relevance

                hierarchical.relevance_data = saved_relevance(self.hierarchical)
            return str(hierarchical.save(Path(self.out).expanduser(), info=info))
        return self.engine.save(self.out, index.store, info)

    def keeper(self, index: Any) -> Any:
        """Writes each entry of the file record as it changes, for an engine that keeps it so (None otherwise)."""
        from langchain_fusion.index.sync import SYNC_INFO_KEY

        write = self.engine.entry_writer(self.out, index.store) if self.hierarchical is None else None
        if write is None:
            return None
        return lambda path, value: write((SYNC_INFO_KEY, *path), value)

    def default_llm_cache(self) -> Path:
        """Where chat model answers are cached when ``--llm-cache`` is not given."""
        return self.engine.default_llm_cache(self.out)


def _check_llm_options(args: argparse.Namespace) -> bool:
    """Whether the run needs a chat model; UserError for chat model options without a use."""
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
    from langchain_fusion.models import chat
    from langchain_fusion.models.embeddings import resolve_embeddings

    # Check everything that can be wrong before paying for a chat model or embeddings.
    target = _Target(args.out, args)
    split_documents([], chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)  # checks the two
    uses_llm = _check_llm_options(args)
    chat_model = chat.resolve_chat_model(args.llm) if uses_llm else None  # a missing key fails before any work
    embeddings = resolve_embeddings(args.embeddings) if args.embeddings else None
    with target.updating(quiet=args.quiet or args.json):  # load -> update -> save: one run at a time
        return _update(target, embeddings, chat_model, uses_llm, args)


def _update(target: _Target, embeddings: Any, chat_model: Any, uses_llm: bool, args: argparse.Namespace) -> int:
    """Open the index, bring it up to date with the files, save it and print the summary (under the update lock)."""
    index = target.open(embeddings)
    quiet = args.quiet or args.json
    cache_dir = Path(args.llm_cache) if args.llm_cache else target.default_llm_cache()
    llm_options = {
        "llm": chat_model,
        "cache_dir": cache_dir,
        "max_concurrency": args.llm_concurrency or DEFAULT_LLM_CONCURRENCY,
        "timeout": args.llm_timeout or DEFAULT_LLM_TIMEOUT,
    }
    from langchain_fusion.index.sync import SYNC_INFO_KEY

    record = dict(index.saved_info.get(SYNC_INFO_KEY) or {})
    reports: dict[str, Any] = {}
    report = _sync(index, record, args, llm_options, reports, quiet, target.keeper(index))
    if report.interrupted:
        return _interrupted(target, index, record)
    if len(index) == 0:
        raise UserError(f"no readable documents in {' '.join(args.paths)} (PDF, .txt and .md files are indexed)")
    summaries = 0
    if args.summaries:
        hierarchical, reports["summaries"] = _summarize(index, llm_options, quiet)
        summaries = len(hierarchical.summaries)
        folder = target.save(index, record, hierarchical)
    else:
        folder = target.save(index, record)
    summary = _summary(index, folder, record, report, args, summaries)
    if uses_llm:
        summary["summaries"] = summaries if args.summaries else None
        summary["llm"] = {"cache": str(cache_dir), **{name: r.to_dict() for name, r in reports.items()}}
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print("\n".join(_summary_lines(summary, index, report, reports, args, cache_dir if uses_llm else None)))
    return 0


def _interrupted(target: _Target, index: Any, record: dict[str, Any]) -> int:
    """Ctrl-C while files were updated: save the files done so far, unless the folder keeps page summaries."""
    if target.hierarchical is not None:
        # Its summaries are saved with the chunks they cover, once every file is done: the chunks alone
        # would drop them (a plain save) or leave them stale, so the folder keeps its previous index.
        print(
            f"langchain-fusion: interrupted; nothing saved: {target.out} keeps its previous index (page summaries "
            "are saved once every file is indexed and summarised): run the same command again to finish",
            file=sys.stderr,
        )
        return 130
    folder = target.save(index, record)
    print(
        f"langchain-fusion: interrupted; saved the {len(record.get('by_path', {}))} files done so far to "
        f"{folder}: run the same command again to finish",
        file=sys.stderr,
    )
    return 130


def _sync(
    index: Any,
    record: dict[str, Any],
    args: argparse.Namespace,
    llm_options: dict[str, Any],
    reports: dict[str, Any],
    quiet: bool,
    keep: Any = None,
) -> Any:
    """Bring the index in line with the files (progress bar, skips and enrichment reported as they happen)."""
    from tqdm import tqdm

    from langchain_fusion.index.sync import sync_files
    from langchain_fusion.models.embeddings import LocalEmbeddings

    embeddings = index.embeddings

    def enrich(chunks: list[Any], pages: list[Any]) -> list[Any]:
        enriched, report = _enrich(chunks, pages, llm_options, quiet=True)
        reports["contextual"] = reports["contextual"].merged(report) if "contextual" in reports else report
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

    try:
        with quiet_logger("langchain_fusion.models.embeddings"):  # the summary says it once
            return sync_files(
                index,
                args.paths,
                record,
                chunk_size=args.chunk_size,
                chunk_overlap=args.chunk_overlap,
                max_chunk_tokens=args.max_chunk_tokens,
                keep_missing=args.keep_missing,
                transform=enrich if args.contextual else None,
                on_file=show_file,
                on_skip=lambda skipped: tqdm.write(
                    f"skipped {skipped.path}: {in_flags(skipped.reason)}", file=sys.stderr
                ),
                before_embedding=start_embedding,
                progress=lambda n: bars[0].update(n),
                batch_size=PROGRESS_BATCH,
                max_file_chars=args.max_file_chars,
                keep=keep,
            )
    finally:
        for bar in bars:
            bar.close()


def _summary(
    index: Any, folder: str, record: dict[str, Any], report: Any, args: argparse.Namespace, summaries: int
) -> dict[str, Any]:
    documents = index.documents
    pages = len({(d.metadata.get(keys.SOURCE), d.metadata[keys.PAGE]) for d in documents if keys.PAGE in d.metadata})
    truncating = _truncating_model(index.embeddings)
    return {
        "index": folder,
        "files": len(record.get("by_path", {})),
        "pages": pages,
        "chunks": len(index),
        **report.to_dict(),
        "skipped": [{"path": s.path, "reason": in_flags(s.reason)} for s in report.skipped],
        "embeddings": index.embeddings_id,
        "dimension": index.dimension,
        "vector_index": str(getattr(index.store, "vector_index", "-")),
        "chunks_longer_than_the_model_reads": truncating.truncated_texts[0] if truncating else 0,
    }


def _summary_lines(
    summary: dict[str, Any],
    index: Any,
    report: Any,
    reports: dict[str, Any],
    args: argparse.Namespace,
    cache: Path | None,
) -> list[str]:
    lines = [
        f"indexed {summary['files']} files ({summary['pages']} PDF pages) into {summary['chunks']} chunks"
        + (f" and {summary['summaries']} page and section summaries" if args.summaries else "")
        + f" -> {summary['index']}",
        f"this run: {report.summary()}",
        f"embeddings: {index.embeddings_id} ({index.dimension} dimensions); vector index: {summary['vector_index']}",
    ]
    model = _truncating_model(index.embeddings)
    if model is not None:
        longer, embedded = model.truncated_texts
        lines.append(
            f"note: {longer} of the {embedded} chunks embedded this run are longer than the {model.max_word_pieces} "
            f"word pieces the local model reads; only their start is embedded (BM25 indexes all of it). "
            + in_flags(model.chunking_advice())
        )
    if index.analyzer.is_legacy:
        lines.append(
            "note: this index keeps the BM25 analysis it was built with before 0.2 (no bigrams for Chinese, "
            "Japanese and Korean, no identifier splits); index its files into a new --out to use the current one"
        )
    lines.extend(r.summary() for r in reports.values())
    if cache is not None:
        lines.append(f"chat model answers cached in {cache}")
    if report.skipped:
        lines.append(f"skipped {len(report.skipped)} file(s); see above")
    return lines


def _progress_bar(total: int, quiet: bool, desc: str = "embedding chunks", unit: str = "chunk") -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, file=sys.stderr)


def _truncating_model(embeddings: Any) -> Any:
    """The bundled model behind ``embeddings`` when it embedded some chunks only in part this run, else None."""
    from langchain_fusion.models.embeddings import bundled_model_of

    model = bundled_model_of(embeddings)
    return model if model is not None and model.truncated_texts[0] else None


@contextlib.contextmanager
def quiet_logger(name: str) -> Iterator[None]:
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
        quiet_logger("langchain_fusion.ingest.enrichment"),
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
        quiet_logger("langchain_fusion.ingest.summaries"),
    ):
        documents, report = summarizer.summarize(index.documents, progress=bar.update)
    for failure in report.failed:
        print(f"summary failed for {failure.label}: {failure.error}; its leading text stands in", file=sys.stderr)
    with _progress_bar(len(documents), quiet, "embedding summaries", "summary") as bar:
        hierarchical = HierarchicalIndex.from_summaries(index, documents, progress=bar.update)
    return hierarchical, report
