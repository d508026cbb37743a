"""The ``search`` tool: its function, its input schema (built from the options per server) and its description."""

# No ``from __future__ import annotations``: FastMCP reads the search tool's annotations at run time,
# and they carry each server's own limits (the tool's signature is built per server).

import inspect
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.retrievers import BaseRetriever
from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from langchain_fusion.mcp.results import SearchResults, format_results, search_hit
from langchain_fusion.pipeline import Pipeline, ServeLimits
from langchain_fusion.search.options import SELECTION_OPTIONS, request_annotation

SEARCH_TOOL = "search"
"""The name of the search tool."""


def add_search_tool(
    server: FastMCP, pipeline: Pipeline, limits: ServeLimits, accepted: Sequence[str], what: str
) -> None:
    """Add the search tool of ``pipeline`` to ``server``: it takes ``accepted`` (the query first), within ``limits``.

    ``what``: what is searched, as the description says it (``"8 chunks of documents"``).
    """
    server.add_tool(
        _search_tool(pipeline, limits, accepted[1:]),
        name=SEARCH_TOOL,
        title="Search the documents",
        description=f"Hybrid search over {what}: meaning (vector) and keywords (BM25), fused. Returns the best "
        "chunks, best first, each with its source, page, chunk id, text and scores."
        + _options_text(pipeline, accepted),
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )


def _search_tool(pipeline: Pipeline, limits: ServeLimits, options: Sequence[str]) -> Any:
    """The search tool's function, its signature (what FastMCP reads as the input schema) built from the options."""

    async def search(query: str, **given: Any) -> Any:
        overrides = pipeline.request_options(given)
        searcher: BaseRetriever = pipeline.search
        if pipeline.steps.active:  # the call's k is what the pipeline keeps; its other options reach every search
            call_k = overrides.pop("k", None)
            searcher = pipeline.around(searcher if call_k is None else searcher.model_copy(update={"k": call_k}))
        docs = await searcher.ainvoke(query, **overrides)
        results = SearchResults(query=query, results=[search_hit(rank, doc) for rank, doc in enumerate(docs, 1)])
        return CallToolResult(
            content=[TextContent(type="text", text=format_results(results))],
            structuredContent=results.model_dump(mode="json"),
        )

    query = inspect.Parameter(
        "query",
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        annotation=Annotated[
            str,
            Field(
                description="What to search for: a question or keywords.",
                min_length=1,
                max_length=limits.max_query_chars,
            ),
        ],
    )
    parameters = [query] + [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=request_annotation(name, limits.max_k, nullable=True),
            default=None,
        )
        for name in options
    ]
    signature = inspect.Signature(parameters, return_annotation=Annotated[CallToolResult, SearchResults])
    setattr(search, "__signature__", signature)  # noqa: B010 - mypy: no such attribute
    return search


def _options_text(pipeline: Pipeline, accepted: Sequence[str]) -> str:
    """What the tool description adds about its options and the server's steps."""
    text = ""
    selection = [name for name in SELECTION_OPTIONS if name in accepted]
    if selection == ["min_relevance"]:  # hierarchical search: no raw-score floors, no diversity
        text += " An optional relevance floor (min_relevance) leaves out weak matches."
    elif selection:
        text += (
            f" Optional relevance floors and diversity ({', '.join(selection)}) leave out weak matches and make the "
            "results more varied."
        )
    steps = []
    if pipeline.steps.multi_query is not None:
        steps.append(f"also searches {pipeline.steps.multi_query.n} rewrites of the query")
    if pipeline.steps.window:
        steps.append(f"widens each hit to {pipeline.steps.window} neighbouring chunks on each side")
    if pipeline.steps.reranker is not None:
        steps.append("reranks the candidates")
    return text + (f" The server {' and '.join(steps)}." if steps else "")
