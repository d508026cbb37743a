"""Context windows: each hit widened to its neighbouring chunks and merged into one passage.

For a hit at chunk ``i`` of a source, chunks ``i-n .. i+n`` of the same source are looked up in
the :class:`~langchain_fusion.index.fusion_index.FusionIndex` (O(1) each, by source and ``chunk_index``) and
joined into one passage. The splitter's overlap is removed exactly, using ``start_index``:
two chunks of the same page overlap by ``prev.start + len(prev) - next.start`` characters, so
the passage is the original page text, not a guess. Windows of different hits of the same
source that touch or overlap become one passage, with no text repeated.

A passage is a copy of its best hit (its id, metadata and scores) with the merged text and
three more keys: :data:`~langchain_fusion.metadata.WINDOW_SPAN`,
:data:`~langchain_fusion.metadata.WINDOW_HITS` and :data:`~langchain_fusion.metadata.WINDOW_PAGES`.
Passages come in the order of their best hit. Documents without ``source``, ``chunk_index``
and ``start_index`` (or that are not in the index) pass through unchanged.

Merging makes fewer passages than hits. :class:`ContextWindowRetriever` therefore fills to ``k``:
it returns the passages of the fewest best hits that give ``k`` passages, searching deeper (twice as
many hits each time, at most :data:`FILL_SEARCHES` searches) until it has them or the hits run out.
The :class:`ContextWindow` step works on the documents it is given and cannot search for more.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, model_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import CheckedModel, is_int
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.ingest.loading import merge_chunks
from langchain_fusion.retrievers.base import wrapped_chain
from langchain_fusion.search.options import DEFAULT_WINDOW_MAX_CHARS
from langchain_fusion.stores.base import StoreView
from langchain_fusion.stores.tenants import check_tenant


def _position(doc: Document) -> tuple[str, int, int] | None:
    """(source, chunk_index, start_index) of a chunk, or None if it lacks any of them."""
    meta = doc.metadata
    source, chunk_index, start = meta.get(keys.SOURCE), meta.get(keys.CHUNK_INDEX), meta.get(keys.START_INDEX)
    if source is None or not is_int(chunk_index) or not is_int(start):
        return None
    return str(source), chunk_index, start


def _check_n(n: Any) -> int:
    if not is_int(n) or n < 0:
        raise InvalidParameterError(
            f"n must be a non-negative integer (neighbouring chunks on each side of a hit); got {n!r}"
        )
    return int(n)


def _check_max_chars(max_chars: Any) -> int | None:
    if max_chars is None:
        return None
    if not is_int(max_chars) or max_chars < 1:
        raise InvalidParameterError(
            f"max_chars must be a positive integer (characters per passage) or None; got {max_chars!r}"
        )
    return int(max_chars)


@dataclass
class _Hit:
    rank: int
    doc: Document
    source: str
    chunk_index: int


def expand_windows(
    documents: Sequence[Document],
    index: FusionIndex,
    *,
    n: int = 1,
    max_chars: int | None = DEFAULT_WINDOW_MAX_CHARS,
) -> list[Document]:
    """Widen each hit to chunks ``i-n .. i+n`` of its source and merge them into passages.

    Windows of hits of the same source that touch or overlap become one passage. With
    ``max_chars``, neighbours are added ring by ring (distance 1 on both sides, then 2, ...)
    only while every passage stays within ``max_chars`` characters (default
    :data:`DEFAULT_WINDOW_MAX_CHARS`; None: no budget); hits are never trimmed, so a passage of
    hits alone may be longer. A window stops at the ends of its source and at
    a chunk missing from the index. See the module docstring for the passage metadata. The
    input documents are not modified; every returned document is a new copy.
    """
    n, max_chars = _check_n(n), _check_max_chars(max_chars)
    return _expand(documents, _Lookups(index), n, max_chars)


FILL_SEARCHES = 5
"""Searches a :class:`ContextWindowRetriever` makes at most to fill ``k`` passages (each for twice the hits)."""

Filling = Generator[dict[str, Any], Sequence[Document], list[Document]]
"""The filling of ``k`` passages: yields the keywords of the search it wants (``k``...), is sent its hits,
returns the passages."""


def fill_windows(k: int, index: FusionIndex, *, n: int, max_chars: int | None) -> Filling:
    """The passages of the fewest best hits that give ``k`` passages (see the module docstring).

    A generator, so that the sync and async retrievers share it: it yields the keywords of the search
    it wants (``k`` hits first, then twice as many as the last), is sent the search's hits, and returns
    the passages once it has ``k`` of them, the hits run out, or :data:`FILL_SEARCHES` searches were
    made. A deeper search is the same search: hits of multi-query fusion record their rewrites, which
    it searches again rather than asking the chat model for new ones.
    """
    lookup = _Lookups(index)
    wanted, passages, same = k, [], dict[str, Any]()
    for search in range(FILL_SEARCHES):
        hits = list((yield {"k": wanted, **same}))
        # Each hit adds at most one passage, so the fewest hits that give k passages are at least
        # ``used + (k - passages)``: try that many, and more while passages are missing.
        used = min(k, len(hits))
        while True:
            passages = _expand(hits[:used], lookup, n, max_chars)
            if len(passages) >= k or used >= len(hits):
                break
            used = min(used + k - len(passages), len(hits))
        if len(passages) >= k or len(hits) < wanted or search == FILL_SEARCHES - 1:
            return passages[:k]
        wanted *= 2
        rewrites = hits[0].metadata.get(keys.MULTI_QUERY_REWRITES) if hits else None
        if isinstance(rewrites, list):
            same = {"rewrites": rewrites}
    return passages[:k]  # pragma: no cover - the loop always returns


def _expand(documents: Sequence[Document], lookups: _Lookups, n: int, max_chars: int | None) -> list[Document]:
    """:func:`expand_windows` with neighbour lookups that may be reused (for the same documents' index)."""
    key = lookups.index.tenant_key
    if key is None:
        results = _expanded(list(enumerate(documents)), lookups.of(None), n, max_chars)
    else:  # a hit's neighbours are its own tenant's chunks: a source name may be another tenant's too
        by_tenant: dict[str | None, list[tuple[int, Document]]] = {}
        for ranked in enumerate(documents):
            by_tenant.setdefault(_tenant_of(ranked[1], key), []).append(ranked)
        results = []
        for tenant, ranked_docs in by_tenant.items():
            if tenant is None:
                results += [(rank, doc.model_copy(deep=True)) for rank, doc in ranked_docs]
            else:
                results += _expanded(ranked_docs, lookups.of(tenant), n, max_chars)
    results.sort(key=lambda item: item[0])
    return [doc for _, doc in results]


def _tenant_of(document: Document, tenant_key: str) -> str | None:
    try:
        return check_tenant(document.metadata.get(tenant_key))
    except InvalidParameterError:
        return None


def _expanded(
    documents: list[tuple[int, Document]], lookup: _NeighbourLookup, n: int, max_chars: int | None
) -> list[tuple[int, Document]]:
    """(rank, passage) of the ranked hits, windows read through ``lookup`` (see :func:`expand_windows`)."""
    results: list[tuple[int, Document]] = []
    hits_by_source: dict[str, list[_Hit]] = {}
    seen: set[tuple[str, int]] = set()
    for rank, doc in documents:
        position = _position(doc)
        if position is None or not lookup.holds(position[0], position[1], doc):
            results.append((rank, doc.model_copy(deep=True)))
            continue
        source, chunk_index, _ = position
        if (source, chunk_index) in seen:  # the same chunk returned twice: the first one counts
            continue
        seen.add((source, chunk_index))
        lookup.put(source, doc)
        hits_by_source.setdefault(source, []).append(_Hit(rank, doc, source, chunk_index))
    for source, hits in hits_by_source.items():
        for run in _passage_runs(hits, lookup, n, max_chars):
            results.append(_passage(run, hits, lookup, source))
    return results


class _Lookups:
    """The neighbour lookup of each tenant's view (of the whole index if not tenant-keyed), made on first use."""

    def __init__(self, index: FusionIndex) -> None:
        self.index = index
        self.by_tenant: dict[str | None, _NeighbourLookup] = {}

    def of(self, tenant: str | None) -> _NeighbourLookup:
        """The lookup of ``tenant``'s chunks (None: every chunk of an index that is not tenant-keyed)."""
        if tenant not in self.by_tenant:
            self.by_tenant[tenant] = _NeighbourLookup(self.index.view(tenant))
        return self.by_tenant[tenant]


class _NeighbourLookup:
    """Chunks of one view by (source, chunk_index), cached for one call."""

    def __init__(self, view: StoreView) -> None:
        self.view = view
        self.cache: dict[tuple[str, int], Document | None] = {}

    def get(self, source: str, chunk_index: int) -> Document | None:
        key = (source, chunk_index)
        if key not in self.cache:
            doc = self.view.neighbours(source, [chunk_index]).get(chunk_index) if chunk_index >= 0 else None
            self.cache[key] = doc if doc is not None and _position(doc) is not None else None
        return self.cache[key]

    def holds(self, source: str, chunk_index: int, doc: Document) -> bool:
        """Whether the index's chunk at this position is ``doc`` (same id, else same text)."""
        stored = self.get(source, chunk_index)
        if stored is None:
            return False
        if doc.id is not None and stored.id is not None:
            return doc.id == stored.id
        return doc.page_content == stored.page_content

    def put(self, source: str, doc: Document) -> None:
        """Use the hit's own copy for its position (its text is what the retriever returned)."""
        self.cache[(source, int(doc.metadata[keys.CHUNK_INDEX]))] = doc


def _passage_runs(hits: list[_Hit], lookup: _NeighbourLookup, n: int, max_chars: int | None) -> list[list[int]]:
    """Contiguous runs of chunk indexes, one per passage, for the hits of one source."""
    source = hits[0].source
    hit_indexes = sorted(h.chunk_index for h in hits)
    windows = []
    for i in hit_indexes:
        low = i
        while low > i - n and lookup.get(source, low - 1) is not None:
            low -= 1
        high = i
        while high < i + n and lookup.get(source, high + 1) is not None:
            high += 1
        windows.append((low, high))
    groups: list[list[int]] = []  # [low, high] of coalesced windows
    for low, high in windows:  # sorted by hit, hence by low
        if groups and low <= groups[-1][1] + 1:
            groups[-1][1] = max(groups[-1][1], high)
        else:
            groups.append([low, high])
    runs: list[list[int]] = []
    for low, high in groups:
        inside = [i for i in hit_indexes if low <= i <= high]
        included = set(inside)
        for distance in range(1, n + 1):
            ring = {
                j
                for i in inside
                for j in (i - distance, i + distance)
                if low <= j <= high and j not in included and min(abs(j - h) for h in inside) == distance
            }
            if not ring:
                continue
            if max_chars is not None and not _fits(included | ring, set(inside), source, lookup, max_chars):
                break
            included |= ring
        runs.extend(_contiguous(sorted(included)))
    return runs


def _contiguous(indexes: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indexes:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _fits(included: set[int], hits: set[int], source: str, lookup: _NeighbourLookup, max_chars: int) -> bool:
    for run in _contiguous(sorted(included)):
        if set(run) <= hits:
            continue  # hits alone are never trimmed
        text = merge_chunks([_known(lookup, source, i) for i in run])
        if len(text) > max_chars:
            return False
    return True


def _known(lookup: _NeighbourLookup, source: str, chunk_index: int) -> Document:
    doc = lookup.get(source, chunk_index)
    assert doc is not None, "windows only span chunks that were found"
    return doc


def _passage(run: list[int], hits: list[_Hit], lookup: _NeighbourLookup, source: str) -> tuple[int, Document]:
    chunks = [_known(lookup, source, i) for i in run]
    inside = sorted((h for h in hits if run[0] <= h.chunk_index <= run[-1]), key=lambda h: h.rank)
    best = inside[0]
    meta = copy.deepcopy(best.doc.metadata)
    meta[keys.WINDOW_SPAN] = [run[0], run[-1]]
    meta[keys.WINDOW_HITS] = [h.chunk_index for h in inside]
    pages = [c.metadata.get(keys.PAGE) for c in chunks]
    meta[keys.WINDOW_PAGES] = None if pages[0] is None or pages[-1] is None else [pages[0], pages[-1]]
    return best.rank, Document(id=best.doc.id, page_content=merge_chunks(chunks), metadata=meta)


def find_index(retriever: Any) -> FusionIndex | None:
    """The FusionIndex behind a retriever: its ``index``, or that of the retriever it wraps."""
    indexes = (getattr(inner, "index", None) for inner in wrapped_chain(retriever))
    return next((index for index in indexes if isinstance(index, FusionIndex)), None)


class ContextWindow(CheckedModel, BaseDocumentCompressor, RunnableSerializable[Sequence[Document], list[Document]]):
    """Context windows as a pipeline step: ``retriever | ContextWindow(index=index, n=1)``.

    A ``Runnable`` from retrieved documents to merged passages (see :func:`expand_windows`),
    and a ``BaseDocumentCompressor``, so it also works in LangChain's
    ``ContextualCompressionRetriever`` and ``DocumentCompressorPipeline``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: FusionIndex
    """The index the documents come from; neighbours are looked up in it."""
    n: int = Field(default=1, ge=0)
    """Neighbouring chunks taken on each side of a hit (0: the hits alone, adjacent ones merged)."""
    max_chars: int | None = Field(default=DEFAULT_WINDOW_MAX_CHARS, ge=1)
    """Character budget per passage: neighbours are trimmed (nearest kept) to fit; hits never are (None: no budget)."""

    def invoke(self, input: Sequence[Document], config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Merge the documents' windows into passages."""
        return self._call_with_config(self._expand, input, config)

    def _expand(self, documents: Sequence[Document]) -> list[Document]:
        return expand_windows(documents, self.index, n=self.n, max_chars=self.max_chars)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Merge the documents' windows into passages (the query is not needed)."""
        return self._expand(documents)


class ContextWindowRetriever(CheckedModel, BaseRetriever):
    """Wraps a retriever over a FusionIndex and returns each hit's context window as a passage.

    ``invoke(query, n=2, max_chars=3000)`` overrides the window per call; any other keyword
    goes to the wrapped retriever (``invoke(query, n=1, k=6)``). See :func:`expand_windows`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: BaseRetriever
    """The retriever whose hits are widened (a FusionRetriever, or a wrapper around one)."""
    index: FusionIndex | None = None
    """Where neighbours are looked up; by default the wrapped retriever's index."""
    n: int = Field(default=1, ge=0)
    """Neighbouring chunks taken on each side of a hit; override per call with ``n=``."""
    max_chars: int | None = Field(default=DEFAULT_WINDOW_MAX_CHARS, ge=1)
    """Character budget per passage (neighbours trimmed to fit, never hits; None: none); per call ``max_chars=``."""

    @model_validator(mode="after")
    def _resolve_index(self) -> ContextWindowRetriever:
        if self.index is None:
            self.index = find_index(self.retriever)
        if self.index is None:
            raise FusionError(
                f"ContextWindowRetriever needs the FusionIndex the hits come from, and "
                f"{type(self.retriever).__name__} has none: pass index=..."
            )
        return self

    def _filling(self, kwargs: dict[str, Any]) -> tuple[Filling, dict[str, Any]]:
        """How this call's passages are filled (to ``k`` when there is one), and the wrapped retriever's options."""
        rest = dict(kwargs)
        n = _check_n(rest.pop("n")) if "n" in rest else self.n
        max_chars = _check_max_chars(rest.pop("max_chars")) if "max_chars" in rest else self.max_chars
        k = rest.pop("k") if "k" in rest else getattr(self.retriever, "k", None)
        assert self.index is not None
        if not is_int(k) or k < 1:  # no k to fill (or a wrong one, which the wrapped retriever reports)
            if k is not None:
                rest["k"] = k
            return _expanding(self.index, n, max_chars), rest
        return fill_windows(k, self.index, n=n, max_chars=max_chars), rest

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        filling, rest = self._filling(kwargs)
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        wanted = next(filling)
        while True:
            hits = self.retriever.invoke(query, config=config, **rest, **wanted)
            done, value = _step(filling, hits)
            if done:
                return cast(list[Document], value)
            wanted = cast(dict[str, Any], value)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        filling, rest = self._filling(kwargs)
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        wanted = next(filling)
        while True:
            hits = await self.retriever.ainvoke(query, config=config, **rest, **wanted)
            # The first lookup builds the (source, chunk_index) table: keep it off the event loop.
            done, value = await run_in_executor(None, _step, filling, hits)
            if done:
                return cast(list[Document], value)
            wanted = cast(dict[str, Any], value)


def _expanding(index: FusionIndex, n: int, max_chars: int | None) -> Filling:
    """One search as the wrapped retriever makes it (no ``k`` asked), its hits' passages."""
    hits = yield {}
    return expand_windows(hits, index, n=n, max_chars=max_chars)


def _step(filling: Filling, hits: Sequence[Document]) -> tuple[bool, dict[str, Any] | list[Document]]:
    """Send ``hits`` to ``filling``: (False, the keywords of the search it wants next) or (True, the passages)."""
    try:
        return False, filling.send(hits)
    except StopIteration as done:
        return True, done.value
