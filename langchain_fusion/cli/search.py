"""The ``query`` and ``ask`` commands: search an index, or answer a question from it with a chat model."""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path
from typing import Any

from langchain_fusion import metadata as keys
from langchain_fusion.cli.arguments import (
    add_hierarchy_flags,
    add_model_flags,
    add_search_flags,
    add_step_flags,
    index_help,
    search_options,
    spec_from_args,
)
from langchain_fusion.cli.errors import UserError
from langchain_fusion.errors import FusionError

QUERY_DESCRIPTION = (
    "Search a saved index and print the best chunks with their fused and per-side scores. --hierarchical searches "
    "page summaries first, then the chunks of the best pages; --window merges each hit with its neighbouring chunks; "
    "--rerank has a chat model (or a local cross-encoder) rerank the candidates; --multi-query also searches a chat "
    "model's rewrites of the query."
)


def add_search_parsers(commands: Any) -> None:
    """Register ``query`` and ``ask``."""
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    query = commands.add_parser("query", help="search a saved index", description=QUERY_DESCRIPTION)
    _add_arguments(query, "the query text", "print results as JSON (text, metadata and scores)")
    ask = commands.add_parser(
        "ask",
        help="answer a question from a saved index with a chat model, citing numbered sources",
        description="Retrieve passages from a saved index (fusion, then optional --multi-query, --window and "
        "--rerank), ask a chat model to answer from them, and print the answer followed by its numbered sources. "
        f"The chat model is OpenAI {OPENAI_DEFAULT_CHAT_MODEL} (needs OPENAI_API_KEY) unless --llm says otherwise.",
    )
    _add_arguments(ask, "the question to answer", "print the answer and its sources as JSON")
    explain = commands.add_parser(
        "explain",
        help="say why a chunk is or is not a result of a query",
        description="Run the search 'query' runs with the same flags and say where one chunk (its id, as 'query "
        "--json' shows it) ended up: returned at which rank, or where it dropped out (filtered out, outside both "
        "candidate pools with its rank on each side, below a relevance floor, a duplicate of a returned chunk, "
        "capped per source, not picked by MMR, below k, below --min-relevance).",
    )
    explain.add_argument("index_dir", metavar="INDEX", help=index_help())
    explain.add_argument("question", help="the query text")
    explain.add_argument("doc_id", metavar="DOC_ID", help="the id of the chunk to explain")
    add_search_flags(explain)
    explain.add_argument("--embeddings", metavar="SPEC", help="embedding model; default: the one recorded in the index")
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON (verdict, ranks, scores)")


def _add_arguments(sub: argparse.ArgumentParser, question: str, json_help: str) -> None:
    from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL

    sub.add_argument("index_dir", metavar="INDEX", help=index_help())
    sub.add_argument("question", help=question)
    add_search_flags(sub)
    sub.add_argument(
        "--hierarchical",
        action="store_true",
        help="search the page summaries first (an index built with --summaries), then the chunks of the "
        "--k-summaries best pages only; chunks are ranked by summary-weight * summary score + "
        "(1 - summary-weight) * chunk score",
    )
    add_hierarchy_flags(sub, "with --hierarchical")
    add_step_flags(sub, served=False)
    add_model_flags(
        sub,
        llm_help="chat model: 'openai' or 'openai:MODEL' (needs OPENAI_API_KEY), or any 'PROVIDER:MODEL' that "
        "LangChain's init_chat_model knows (pip install 'langchain-fusion[llm]' and the provider's package). "
        f"Default: openai:{OPENAI_DEFAULT_CHAT_MODEL}",
        timeout_help="seconds to wait for each chat model answer before it counts as failed and is retried",
    )
    sub.add_argument("--json", action="store_true", help=json_help)


def _pipeline(args: argparse.Namespace, answer: str) -> Any:
    from langchain_fusion.pipeline import build

    if not args.question.strip():
        raise UserError("the query is empty: give the words or question to search for")
    return build(spec_from_args(args, answer))


def run_query(args: argparse.Namespace) -> int:
    """Query a saved index and print the results."""
    pipeline = _pipeline(args, "off")
    docs = pipeline.retriever.invoke(args.question)
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
        floors = pipeline.spec.search.has_floor or pipeline.spec.search.min_relevance is not None
        print("no results above the relevance floor" if floors else "no results")
        return 0
    _print_table(docs, args)
    return 0


def _print_table(docs: list[Any], args: argparse.Namespace) -> None:
    rated_by_llm = args.rerank is not None and args.rerank.uses_chat_model
    cross_encoded = args.rerank is not None and not rated_by_llm
    rating = f"  {'rating':>6}" if rated_by_llm else f"  {'rerank':>6}" if cross_encoded else ""
    hier = f"  {'hier':>6}  {'sum#':>4}" if args.hierarchical else ""
    calibrated = any(keys.RELEVANCE in doc.metadata for doc in docs)
    relevance = f"  {'P(rel)':>6}" if calibrated else ""
    scores = f"{'fused':>6}  {'vector':>6}  {'bm25':>6}{relevance}{rating}"
    header = f"{'rank':>4}{hier}  {scores}  {'source':<28} {'page':>4}  text"
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
        relevance = f"  {_fmt(meta.get(keys.RELEVANCE), 2):>6}" if calibrated else ""
        print(
            f"{rank:>4}{hier}  {_fmt(meta.get(keys.FUSION_SCORE)):>6}  {_fmt(meta.get(keys.VECTOR_SCORE)):>6}  "
            f"{_fmt(meta.get(keys.BM25_SCORE), 2):>6}{relevance}{rating}  "
            f"{_pad(_clip(source, 28, '...'), 28)} "
            f"{_pages(meta):>4}  {_snippet(doc.page_content, 70)}"
        )


def run_ask(args: argparse.Namespace) -> int:
    """Answer a question from a saved index with a chat model; print the answer and its sources."""
    from langchain_fusion.chains import pipeline_rag_chain, source_label

    if not args.question.strip():
        raise UserError("the question is empty")
    chain = pipeline_rag_chain(_pipeline(args, "required"))
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


def run_explain(args: argparse.Namespace) -> int:
    """Say where one chunk ended up in a search of a saved index, and why."""
    from langchain_fusion.pipeline import PipelineSpec, build
    from langchain_fusion.retrievers.fusion import FusionRetriever

    if not args.question.strip():
        raise UserError("the query is empty: give the words or question to search for")
    options = search_options(args)
    spec = PipelineSpec.of(args.index_dir, hierarchical=False, embeddings=args.embeddings, **options)
    search = build(spec).search
    if not isinstance(search, FusionRetriever):
        raise UserError(f"explain covers fused search over an index; {args.index_dir} serves a {type(search).__name__}")
    explanation = search.explain(args.question, args.doc_id)
    if args.json:
        print(json.dumps(explanation.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(explanation.message)
    return 0


def _pages(meta: dict[str, Any]) -> str:
    pages = meta.get(keys.WINDOW_PAGES)
    if isinstance(pages, list) and len(pages) == 2 and pages[0] != pages[1]:
        return f"{pages[0]}-{pages[1]}"
    page = meta.get(keys.PAGE)
    return "" if page is None else str(page)


def _snippet(text: str, width: int) -> str:
    """The start of ``text`` on one line, at most ``width`` columns, in any script (see :func:`_clip`)."""
    return _clip(" ".join(text.split()), width, " ...")


def _clip(text: str, width: int, placeholder: str) -> str:
    """``text`` cut to ``width`` terminal columns, ending in ``placeholder`` when cut.

    Cut at a space when one falls in the last quarter (words stay whole), else between characters:
    Chinese and Japanese have no spaces, and a row of them is not one unbreakable word.
    """
    if display_width(text) <= width:
        return text
    room, kept, used = width - display_width(placeholder), [], 0
    for char in text:
        used += _char_width(char)
        if used > room:
            break
        kept.append(char)
    cut = "".join(kept)
    space = cut.rfind(" ")
    if space >= 0 and display_width(cut[space:]) <= room // 4:
        cut = cut[:space]
    return cut.rstrip() + placeholder


def _pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` terminal columns (wide characters count twice)."""
    return text + " " * max(width - display_width(text), 0)


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: East Asian wide and full-width characters two, combining marks none."""
    return sum(_char_width(c) for c in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
