"""Multi-query fusion (RAG-Fusion): a chat model rewrites the query, each version is searched, the lists are fused.

:class:`MultiQueryFusionRetriever` asks a chat model once for ``n`` rewrites of the query,
searches the original query and every rewrite with the wrapped retriever (one ``batch``: for
our retrievers one embedding call and one scoring pass, at most ``max_concurrency`` searches at
once), and fuses the result lists with weighted reciprocal rank fusion, the original query
weighted highest. The model call is bounded like every query-time model call here (a per-try
``timeout``, light retries); a model that fails, hangs or writes nothing usable leaves the
original query's search, and a rewrite whose search fails is left out, each with a logged
warning: a failed rewrite never fails the query.

Diversity (see :mod:`~langchain_fusion.search.diversity`): the cap on results per source (given
per call, else the wrapped retriever's own) caps every search *and* the fused list, which is read
in order past the candidates over the cap. Each search holds ``k_per_query`` results (at least
``k``) within the cap, so the fused list fills ``k`` whenever the query's own search would.
Maximal marginal relevance is passed on to every search like any other option: each list is
diversified among its own candidates, and the fused list is not re-ranked by MMR (the wrapped
retriever's results carry no vectors to compare).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from langchain_fusion import metadata as keys
from langchain_fusion._checks import MAX_REWRITES, check_k, check_positive_int, check_rewrites, is_real_number
from langchain_fusion.errors import InvalidParameterError, describe_error
from langchain_fusion.models.bounded_calls import CallBounds, ainvoke_bounded, invoke_bounded
from langchain_fusion.models.prompts import Prompt, answer_text, check_prompt
from langchain_fusion.models.retries import RetryPolicy
from langchain_fusion.retrievers.base import wrapped_chain
from langchain_fusion.retrievers.rerank import RERANK_RETRY
from langchain_fusion.search.diversity import capped, check_max_per_source, source_groups
from langchain_fusion.search.fusion import weighted_rrf
from langchain_fusion.search.options import ResultsOption

logger = logging.getLogger(__name__)

DEFAULT_REWRITES = 3
"""Rewrites asked for by default."""
DEFAULT_K_PER_QUERY = 20
"""Results fetched per query (the original and each rewrite) before fusion."""
DEFAULT_REWRITE_WEIGHT = 0.5
"""Weight of each rewrite's list in the fusion; the original query's is 1."""
DEFAULT_REWRITE_TIMEOUT = 30.0
"""Seconds to wait for the rewrites (per try) before searching the query alone."""
REWRITE_RETRY = RERANK_RETRY
"""The rerankers' policy: one more try after at most a quarter second (a query is waiting)."""

DEFAULT_REWRITE_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You help a search engine find documents by rewriting a user's question as search queries."),
        (
            "human",
            "Write {n} different search queries that ask for the same information as the question below, "
            "in other words: use synonyms, spell out abbreviations, or name the specific things the question "
            "implies. Write one query per line, with no numbering and nothing else.\n\nQuestion: {question}",
        ),
    ]
)
"""The rewrite prompt; variables ``question`` and ``n``."""


_MARKER = re.compile(
    r"""^\s*(?:
        [-*\u2022]+                                  # - bullet, * bullet
      | \(?\d{1,2}\s*[.):\]]                         # 1.  1)  (1)  1:  1]
      | (?:q(?:uery)?|rewrite|version)\s*\d{0,2}\s*[:.)-]   # Query 1:  Q2)  Rewrite 3 -
    )\s*""",
    re.IGNORECASE | re.VERBOSE,
)
_QUOTES = "\"'`\u201c\u201d\u2018\u2019"


def _key(text: str) -> str:
    """What makes two queries the same: their words, case and punctuation aside."""
    return " ".join(re.findall(r"\w+", text.casefold()))


def parse_rewrites(answer: Any, question: str, n: int) -> list[str]:
    """At most ``n`` distinct rewrites from a model's answer: one per line, or a list of strings.

    Numbering and bullets (``1.``, ``2)``, ``-``, ``Query 3:``), surrounding quotes, blank lines,
    heading lines ending with a colon (``Here are 3 queries:``), repeats and the question itself
    (case and punctuation aside) are dropped. Raises ValueError for an answer with no text.
    """
    if isinstance(answer, (list, tuple)) and all(isinstance(item, str) for item in answer):
        lines: list[str] = [line for item in answer for line in item.splitlines()]
    else:
        lines = answer_text(answer).splitlines()
    seen = {_key(question)}
    rewrites: list[str] = []
    for line in lines:
        text = _MARKER.sub("", line, count=1).strip().strip(_QUOTES).strip()
        text = " ".join(text.split())
        key = _key(text)
        if not key or text.endswith(":") or key in seen:
            continue
        seen.add(key)
        rewrites.append(text)
        if len(rewrites) == n:
            break
    return rewrites


def _own_cap(retriever: BaseRetriever) -> int | None:
    """The cap per source of ``retriever``, or of the retriever it wraps (and so on); None if none has one."""
    for inner in wrapped_chain(retriever):  # ours, or any retriever with such a field
        if "max_per_source" in type(inner).model_fields:
            return check_max_per_source(inner.max_per_source)
    return None


def _doc_key(doc: Document) -> Any:
    """The identity of a result across lists: its id, or its text and place when it has none."""
    if doc.id is not None:
        return ("id", doc.id)
    return ("text", doc.page_content, keys.chunk_position(doc))


class MultiQueryFusionRetriever(ResultsOption, BaseRetriever):
    """RAG-Fusion: the query and ``n`` rewrites by a chat model are searched; the lists are fused (weighted RRF).

    ``MultiQueryFusionRetriever.from_llm(index.as_retriever(), llm, n=3)``. Each result is a copy
    of the document as the wrapped retriever returned it (its fusion scores from the first list
    holding it, the original query's first) plus :data:`~langchain_fusion.metadata.MULTI_QUERY_KEYS`:
    the fused score ``sum_i w_i / (60 + rank_i)`` (``w`` 1 for the original query,
    ``rewrite_weight`` for each rewrite), the rewrites searched, and the document's rank in each
    list. Ties go to the better rank for the original query, then to first appearance.

    ``invoke(query, k=5, n=2)`` overrides ``k`` and ``n`` per call; any other keyword goes to
    every search of the wrapped retriever (``invoke(query, alpha=0.3)``). The cap per source
    (per call, else the wrapped retriever's field) also caps the fused list; maximal marginal
    relevance diversifies each search only (see the module docstring). The rewrite call and the searches
    are child runs of this retriever's run.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: BaseRetriever
    """The retriever that searches the query and each rewrite (e.g. ``index.as_retriever()``)."""
    llm: Runnable[Any, Any]
    """The chat model that writes the rewrites (or any Runnable from a prompt to text)."""
    n: int = DEFAULT_REWRITES
    """How many rewrites to ask for (1 to 10); override per call with ``invoke(query, n=...)``."""
    k_per_query: int = DEFAULT_K_PER_QUERY
    """Results fetched per query before fusion (at least ``k``), passed to the wrapped retriever as ``k``."""
    rewrite_weight: float = DEFAULT_REWRITE_WEIGHT
    """Weight of each rewrite's list in the fusion, in (0, 1]; the original query's weight is 1."""
    prompt: Prompt = DEFAULT_REWRITE_PROMPT
    """The rewrite prompt; it must take ``question`` and ``n``."""
    timeout: float | None = Field(default=DEFAULT_REWRITE_TIMEOUT, gt=0)
    """Seconds to wait for the rewrites per try before the query is searched alone (None: no limit)."""
    retry: RetryPolicy = Field(default_factory=lambda: REWRITE_RETRY)
    """Retries of rate limits, timeouts and other transient errors of the rewrite call."""
    max_concurrency: int = Field(default=4, ge=1)
    """Most searches in flight at once; also the most rewrite calls given up on (timed out) that may
    still hold a thread."""

    _slots: threading.Semaphore = PrivateAttr()

    @field_validator("n")
    @classmethod
    def _valid_n(cls, value: Any) -> int:
        return check_rewrites(value)

    @field_validator("k_per_query")
    @classmethod
    def _valid_k_per_query(cls, value: Any) -> int:
        return check_positive_int(value, "k_per_query", "results fetched per query before fusion")

    @field_validator("rewrite_weight")
    @classmethod
    def _valid_weight(cls, value: Any) -> float:
        if not is_real_number(value) or not 0.0 < float(value) <= 1.0:
            raise InvalidParameterError(
                "rewrite_weight must be a number in (0, 1] (the original query weighs 1, so it stays "
                f"the heaviest); got {value!r}"
            )
        return float(value)

    @field_validator("prompt")
    @classmethod
    def _valid_prompt(cls, prompt: Prompt) -> Prompt:
        return check_prompt(prompt, {"question", "n"})

    def model_post_init(self, context: Any, /) -> None:
        """Make the call slots shared by every query of this retriever."""
        super().model_post_init(context)
        self._slots = threading.Semaphore(self.max_concurrency)

    @classmethod
    def from_llm(
        cls, retriever: BaseRetriever, llm: Runnable[Any, Any], n: int = DEFAULT_REWRITES, **kwargs: Any
    ) -> MultiQueryFusionRetriever:
        """Wrap ``retriever`` with rewrites by ``llm``; ``kwargs`` set the other fields (``k``, ``timeout``...)."""
        return cls(retriever=retriever, llm=llm, n=n, **kwargs)

    # --- options ------------------------------------------------------------------------------

    def _options(self, kwargs: dict[str, Any]) -> tuple[int, int, list[str] | None, dict[str, Any]]:
        """The call's ``k``, ``n``, given ``rewrites`` (None: ask the model) and the searches' options."""
        rest = dict(kwargs)
        k = check_k(rest.pop("k")) if "k" in rest else self.k
        n = check_rewrites(rest.pop("n")) if "n" in rest else self.n
        rewrites = _check_given_rewrites(rest.pop("rewrites")) if "rewrites" in rest else None
        return k, n, rewrites, rest

    def _cap(self, rest: dict[str, Any]) -> int | None:
        """The cap per source of the fused list: the call's (passed on too), else the searches'."""
        if "max_per_source" in rest:
            return check_max_per_source(rest["max_per_source"])
        return _own_cap(self.retriever)

    def _search_config(self, callbacks: Callbacks) -> RunnableConfig:
        return {"callbacks": callbacks, "max_concurrency": self.max_concurrency}

    # --- the rewrites -------------------------------------------------------------------------

    def _bounds(self) -> CallBounds:
        """How the rewrite call is bounded: per-try ``timeout``, ``retry``, the retriever's call slots."""
        return CallBounds(retry=self.retry, task="multi-query rewrite", slots=self._slots, timeout=self.timeout)

    def _rewrites_from(self, answer: Any, error: Exception | None, query: str, n: int) -> list[str]:
        if error is not None:
            logger.warning("multi-query: no rewrites (%s); searching the query alone", describe_error(error))
            return []
        try:
            rewrites = parse_rewrites(answer, query, n)
        except ValueError as exc:
            logger.warning("multi-query: no usable rewrites (%s); searching the query alone", exc)
            return []
        if not rewrites:
            logger.warning("multi-query: the model wrote no new query; searching the query alone")
        return rewrites

    def _rewrite_call(
        self, query: str, count: int, callbacks: Callbacks
    ) -> tuple[Runnable[dict[str, Any], Any], dict[str, Any], RunnableConfig]:
        """The chain, inputs and config of one rewrite request, shared by the sync and async paths."""
        config: RunnableConfig = {"callbacks": callbacks, "run_name": "rewrite_query"}
        return self.prompt | self.llm, {"question": query, "n": count}, config

    def rewrite(self, query: str, n: int | None = None, callbacks: Callbacks = None) -> list[str]:
        """The model's rewrites of ``query`` (at most ``n``, default the field); ``[]`` if it failed (logged)."""
        count = self.n if n is None else check_rewrites(n)
        if not query.strip():
            return []
        chain, inputs, config = self._rewrite_call(query, count, callbacks)
        answer, error, _ = invoke_bounded(chain, inputs, config, self._bounds())
        return self._rewrites_from(answer, error, query, count)

    async def arewrite(self, query: str, n: int | None = None, callbacks: Callbacks = None) -> list[str]:
        """Async twin of :meth:`rewrite` (a timed-out call is cancelled)."""
        count = self.n if n is None else check_rewrites(n)
        if not query.strip():
            return []
        chain, inputs, config = self._rewrite_call(query, count, callbacks)
        answer, error, _ = await ainvoke_bounded(chain, inputs, config, self._bounds())
        return self._rewrites_from(answer, error, query, count)

    # --- search and fusion --------------------------------------------------------------------

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, n, given, rest = self._options(kwargs)
        cap = self._cap(rest)
        rewrites = given if given is not None else self.rewrite(query, n, run_manager.get_child())
        queries = [query, *rewrites]
        depth = max(self.k_per_query, k)
        lists = self.retriever.batch(
            queries, self._search_config(run_manager.get_child()), return_exceptions=True, k=depth, **rest
        )
        return self._fuse(queries, lists, k, cap)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, n, given, rest = self._options(kwargs)
        cap = self._cap(rest)
        rewrites = given if given is not None else await self.arewrite(query, n, run_manager.get_child())
        queries = [query, *rewrites]
        depth = max(self.k_per_query, k)
        lists = await self.retriever.abatch(
            queries, self._search_config(run_manager.get_child()), return_exceptions=True, k=depth, **rest
        )
        return self._fuse(queries, lists, k, cap)

    def _fuse(self, queries: list[str], lists: Sequence[Any], k: int, cap: int | None) -> list[Document]:
        """Weighted RRF of the lists that came back, the best ``k`` within ``cap`` per source (None: no cap).

        The original query's failure is the query's.
        """
        if isinstance(lists[0], BaseException):
            raise lists[0]
        searched: list[list[Document]] = [list(lists[0])]
        rewrites: list[str] = []
        for text, result in zip(queries[1:], lists[1:], strict=True):
            if isinstance(result, BaseException):
                logger.warning(
                    "multi-query: the search for rewrite %r failed (%s); left out", text, describe_error(result)
                )
                continue
            rewrites.append(text)
            searched.append(list(result))
        first: dict[Any, Document] = {}
        for docs in searched:
            for doc in docs:
                first.setdefault(_doc_key(doc), doc)
        order = list(first)
        column = {key: j for j, key in enumerate(order)}
        ranks = np.zeros((len(searched), len(order)), dtype=np.int64)
        for i, docs in enumerate(searched):
            for rank, doc in enumerate(docs, 1):
                j = column[_doc_key(doc)]
                if ranks[i, j] == 0:  # a list that repeats a document counts its best rank
                    ranks[i, j] = rank
        weights = np.array([1.0] + [self.rewrite_weight] * len(rewrites))
        fused = weighted_rrf(ranks, weights)
        original = np.where(ranks[0] > 0, ranks[0], np.iinfo(np.int64).max)
        ranking = np.lexsort((np.arange(len(order)), original, -fused))
        if cap is None:
            best = ranking[:k]
        else:
            best = ranking[capped(source_groups([first[order[j]] for j in ranking.tolist()]), k, cap)]
        results = []
        for j in best.tolist():
            doc = first[order[j]].model_copy(deep=True)
            doc.metadata[keys.MULTI_QUERY_SCORE] = float(fused[j])
            doc.metadata[keys.MULTI_QUERY_REWRITES] = list(rewrites)
            doc.metadata[keys.MULTI_QUERY_RANKS] = [int(r) if r > 0 else None for r in ranks[:, j].tolist()]
            results.append(doc)
        return results


def _check_given_rewrites(rewrites: Any) -> list[str]:
    """Rewrites given per call (a search deeper into the same rewrites): at most ten non-empty strings."""
    if (
        not isinstance(rewrites, (list, tuple))
        or len(rewrites) > MAX_REWRITES
        or not all(isinstance(r, str) and r.strip() for r in rewrites)
    ):
        raise InvalidParameterError(
            f"rewrites must be a list of at most {MAX_REWRITES} non-empty queries (searched instead of asking the "
            f"chat model); got {rewrites!r}"
        )
    return list(rewrites)
