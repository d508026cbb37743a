"""The composers: the RAG chain, and the pipeline a server wraps around its retriever.

:func:`build_rag_chain` returns an LCEL ``Runnable`` from a question to
``{"answer": str, "sources": [Document, ...]}``; ``stream`` / ``astream`` yield the sources
once they are retrieved, then the answer token by token. :func:`format_docs` numbers the
passages with their source and page, so answers can cite them as ``[1]``, ``[2]``...

:func:`build_retriever_pipeline` turns a server's rerank and multi-query options into a
:class:`RetrieverPipeline` (multi-query fusion, then a rerank step, around each configured
retriever), and :func:`check_selection` checks its relevance floor and diversity defaults: the
one way the LangServe app (:mod:`langchain_fusion.server`) and the MCP server
(:mod:`langchain_fusion.mcp`) build what they serve from these options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypedDict

from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel, RunnablePassthrough

from langchain_fusion import metadata as keys
from langchain_fusion._checks import check_positive_int, check_rewrites
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.models.guarded_model import GuardedModel
from langchain_fusion.models.llm_calls import RetryPolicy
from langchain_fusion.retrievers.fusion import OPTION_CHECKS
from langchain_fusion.retrievers.rerank import Prompt, RerankRetriever
from langchain_fusion.retrievers.windows import DEFAULT_WINDOW_MAX_CHARS, ContextWindowRetriever

DEFAULT_RAG_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "You answer questions using only the numbered passages you are given. After each statement, "
            "cite the passages it comes from as [1], [2], ... If the passages do not contain the answer, "
            "say that you do not know; do not make anything up.",
        ),
        ("human", "Passages:\n\n{context}\n\nQuestion: {question}"),
    ]
)
"""The answer prompt; variables ``context`` (from :func:`format_docs`) and ``question``."""


class RagOutput(TypedDict):
    """What the RAG chain returns."""

    answer: str
    """The model's answer, citing passages as ``[1]``, ``[2]``..."""
    sources: list[Document]
    """The passages the answer was given, in the order they were numbered (``[1]`` is first)."""


def source_label(doc: Document, *, short: bool = False) -> str:
    """Where a passage comes from: ``"report.pdf, p. 3"``, ``"... pp. 3-4"`` or just the source.

    Uses the window's page range when the passage spans several pages. ``short`` gives the
    file name instead of the full source path.
    """
    meta = doc.metadata
    source = str(meta.get(keys.SOURCE, "unknown source"))
    if short and source:
        source = PurePath(source).name or source
    pages = meta.get(keys.WINDOW_PAGES)
    if isinstance(pages, (list, tuple)) and len(pages) == 2 and pages[0] != pages[1]:
        return f"{source}, pp. {pages[0]}-{pages[1]}"
    page = meta.get(keys.PAGE)
    return source if page is None else f"{source}, p. {page}"


def format_docs(documents: Sequence[Document]) -> str:
    """The passages numbered from 1, each headed by its source and page, blank lines between.

    ``[1] (data/report.pdf, p. 3)`` then the text; the numbers are what answers cite.
    """
    return "\n\n".join(f"[{i}] ({source_label(doc)})\n{doc.page_content}" for i, doc in enumerate(documents, 1))


def _question(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("question"), str):
        return str(value["question"])
    raise FusionError(f'the RAG chain takes a question string (or {{"question": str}}); got {type(value).__name__}')


def _prompt_inputs(value: dict[str, Any]) -> dict[str, Any]:
    return {"context": format_docs(value["sources"]), "question": value["question"]}


def build_rag_chain(
    retriever: Runnable[str, list[Document]],
    llm: Runnable[Any, Any],
    *,
    prompt: Prompt | None = None,
    window: int | None = None,
    max_chars: int | None = None,
    reranker: BaseDocumentCompressor | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
) -> Runnable[str, RagOutput]:
    """An LCEL chain from a question to ``{"answer": ..., "sources": [...]}``.

    Args:
        retriever: finds the passages (e.g. ``index.as_retriever(k=4)``, or any Runnable from
            a string to documents).
        llm: the chat model that answers (any chat model, or a Runnable from a prompt).
        prompt: the answer prompt, taking ``context`` and ``question``; default
            :data:`DEFAULT_RAG_PROMPT`.
        window: if given, each hit is widened to ``window`` neighbouring chunks on each side
            (:class:`~langchain_fusion.retrievers.windows.ContextWindowRetriever`); needs a
            retriever over a FusionIndex.
        max_chars: character budget per passage for ``window`` (default
            :data:`~langchain_fusion.retrievers.windows.DEFAULT_WINDOW_MAX_CHARS`).
        reranker: if given, it reranks the (windowed) passages and keeps its ``top_n``: any
            ``BaseDocumentCompressor`` (:class:`~langchain_fusion.retrievers.rerank.LLMReranker`,
            :class:`~langchain_fusion.retrievers.cross_encoder.CrossEncoderReranker`, LangChain's
            own); give the retriever a larger ``k`` then.
        timeout: seconds to wait for the answer per try (when streaming: for each chunk); None
            leaves it to the model's own client.
        retry: retries of rate limits, timeouts and other transient errors (default
            :data:`~langchain_fusion.models.guarded_model.ANSWER_RETRY`: three tries in a few
            seconds; a stream is retried only before its first chunk).

    A model that fails for good raises :class:`~langchain_fusion.errors.ProviderError` with the
    provider's error on one line.

    ``invoke`` returns the answer and the sources; ``stream`` and ``astream`` yield
    ``{"sources": [...]}`` first, then ``{"answer": token}`` chunks as the model writes. The
    whole pipeline shows up as one trace (the retriever, reranker and model runs nested in it).
    """
    prompt = DEFAULT_RAG_PROMPT if prompt is None else prompt
    variables = set(prompt.input_variables)
    if variables != {"context", "question"}:
        raise FusionError(
            f"the RAG prompt must take exactly the variables ['context', 'question']; it takes {sorted(variables)}"
        )
    if (window is not None or reranker is not None) and not isinstance(retriever, BaseRetriever):
        raise FusionError(
            f"window and reranker need a BaseRetriever to wrap; got {type(retriever).__name__} "
            "(add ContextWindow and reranker steps to your own chain instead)"
        )
    if max_chars is not None and window is None:
        raise FusionError("max_chars is the character budget of context windows: give window=N too")
    if window is not None:
        assert isinstance(retriever, BaseRetriever)
        budget = DEFAULT_WINDOW_MAX_CHARS if max_chars is None else max_chars
        retriever = ContextWindowRetriever(retriever=retriever, n=window, max_chars=budget)
    if reranker is not None:
        assert isinstance(retriever, BaseRetriever)
        retriever = RerankRetriever(retriever=retriever, reranker=reranker)
    model = GuardedModel(llm, timeout=timeout, retry=retry)
    answer = RunnableLambda(_prompt_inputs, name="format_docs") | prompt | model | StrOutputParser()
    chain = (
        RunnableLambda(_question, name="question")
        | RunnableParallel(question=RunnablePassthrough(), sources=retriever)
        | RunnablePassthrough.assign(answer=answer)
    ).pick(["answer", "sources"])
    return chain.with_config(run_name="rag_chain")


# --- what a server wraps around its retriever ---------------------------------------------------

DEFAULT_RERANK_CANDIDATES = 20
"""Candidates retrieved per query for a served rerank step (at least the request's ``k``)."""
DEFAULT_LLM_TIMEOUT = 60.0
"""Seconds a server waits for one chat model answer (per try; for streams, per chunk)."""
SELECTION_OPTIONS = ("min_vector_score", "min_bm25_score", "lambda_mult", "max_per_source")
"""The relevance floor and diversity options of fused search (see :mod:`~langchain_fusion.search.floors`
and :mod:`~langchain_fusion.search.diversity`)."""


def check_selection(values: Mapping[str, Any]) -> dict[str, Any]:
    """The relevance floor and diversity options that are set (not None), checked by the retrievers' own validators.

    ``values`` maps names of :data:`SELECTION_OPTIONS` to values; ``lambda_mult`` set means MMR on.
    """
    unknown = sorted(set(values) - set(SELECTION_OPTIONS))
    if unknown:
        raise InvalidParameterError(f"unknown option(s) {unknown}; the options are {list(SELECTION_OPTIONS)}")
    checked = {name: OPTION_CHECKS[name](value) for name, value in values.items()}
    return {name: value for name, value in checked.items() if value is not None}


def refuse_selection_on_hierarchical(selection: Mapping[str, Any], hierarchical: bool) -> None:
    """An InvalidParameterError when relevance floor or diversity options are set for a hierarchical index."""
    if selection and hierarchical:
        raise InvalidParameterError(
            f"{', '.join(selection)} apply to fused search, not to a hierarchical index (saved with page summaries)"
        )


@dataclass(frozen=True)
class RetrieverPipeline:
    """What a served retriever adds around the fused search: multi-query fusion, then a rerank step."""

    multi_query: Any = None
    """A MultiQueryFusionRetriever template (its ``retriever`` and ``k`` are set per request), or None."""
    reranker: BaseDocumentCompressor | None = None
    """The rerank step, or None."""
    candidates: int = DEFAULT_RERANK_CANDIDATES
    """Candidates reranked per query (at least the request's ``k``)."""

    @property
    def active(self) -> bool:
        """Whether there is anything to add (a rerank step or multi-query fusion)."""
        return self.reranker is not None or self.multi_query is not None

    def __call__(self, base: BaseRetriever) -> Runnable[str, list[Document]]:
        """The pipeline around ``base``, a configured fusion or hierarchical retriever; the result keeps its ``k``.

        Keywords given to the result's ``invoke`` (``alpha``, ``filter``, ...) reach every search of ``base``.
        """
        k = int(getattr(base, "k"))  # noqa: B009 - every served retriever has one, mypy does not know it
        depth = max(self.candidates, k) if self.reranker is not None else k
        retriever: BaseRetriever = base
        if self.multi_query is not None:
            per_query = max(depth, self.multi_query.k_per_query)
            retriever = self.multi_query.model_copy(update={"retriever": base, "k": depth, "k_per_query": per_query})
        elif depth != k:
            retriever = base.model_copy(update={"k": depth})
        if self.reranker is None:
            return retriever
        return RerankRetriever(retriever=retriever, reranker=self.reranker).bind(top_n=k)

    def describe(self) -> dict[str, Any]:
        """The rerank step (its class, model and candidates) and the number of rewrites, or None for each."""
        rerank = None
        if self.reranker is not None:
            model = getattr(self.reranker, "model_id", None)
            rerank = {"step": type(self.reranker).__name__, "model": model, "candidates": self.candidates}
        rewrites = None if self.multi_query is None else self.multi_query.n
        return {"rerank": rerank, "multi_query": rewrites}


def uses_chat_model(reranker: BaseDocumentCompressor | str | None, multi_query: int | None) -> bool:
    """Whether a pipeline with these options needs a chat model (an ``llm`` rerank spec, or multi-query fusion)."""
    from langchain_fusion.retrievers.rerank_spec import parse_rerank_spec

    llm_rerank = reranker is not None and not isinstance(reranker, BaseDocumentCompressor)
    return (llm_rerank and parse_rerank_spec(reranker).uses_chat_model) or multi_query is not None


def build_retriever_pipeline(
    reranker: BaseDocumentCompressor | str | None,
    *,
    rerank_candidates: int = DEFAULT_RERANK_CANDIDATES,
    multi_query: int | None = None,
    chat_model: Runnable[Any, Any] | None = None,
    no_chat_reason: str | None = None,
    llm_timeout: float | None = DEFAULT_LLM_TIMEOUT,
) -> RetrieverPipeline:
    """A server's pipeline from its options, checked (a cross-encoder is loaded now, so a missing one fails first).

    Args:
        reranker: ``"llm"`` (``chat_model`` rates each candidate), ``"cross-encoder:MODEL"``, any
            ``BaseDocumentCompressor``, or None for no rerank step.
        rerank_candidates: candidates retrieved per query for the rerank step (at least the request's ``k``).
        multi_query: the number of rewrites ``chat_model`` writes of each query (1 to 10), or None.
        chat_model: the chat model of an ``llm`` rerank and of the rewrites.
        no_chat_reason: why there is no chat model, for the error when one is needed.
        llm_timeout: seconds to wait for each chat model answer per try (None: the client's own limit).
    """
    from langchain_fusion.retrievers.cross_encoder import CrossEncoderReranker
    from langchain_fusion.retrievers.multi_query import MultiQueryFusionRetriever
    from langchain_fusion.retrievers.rerank_spec import build_reranker, parse_rerank_spec

    candidates = check_positive_int(rerank_candidates, "rerank_candidates", "candidates reranked per query")
    why = f": {no_chat_reason}" if no_chat_reason else ""
    step: BaseDocumentCompressor | None
    if reranker is None or isinstance(reranker, BaseDocumentCompressor):
        step = reranker
    else:
        spec = parse_rerank_spec(reranker)
        if spec.uses_chat_model and chat_model is None:
            raise InvalidParameterError(f"rerank 'llm' needs a chat model (llm=...){why}")
        step = build_reranker(spec, llm=chat_model, top_n=None, timeout=llm_timeout)
    if isinstance(step, CrossEncoderReranker):
        step.load_model()  # a missing model fails at start-up, not on the first request
    template = None
    if multi_query is not None:
        n = check_rewrites(multi_query)
        if chat_model is None:
            raise InvalidParameterError(f"multi_query needs a chat model to write the rewrites (llm=...){why}")
        template = MultiQueryFusionRetriever(retriever=_NoRetriever(), llm=chat_model, n=n, timeout=llm_timeout)
    return RetrieverPipeline(template, step, candidates)


class _NoRetriever(BaseRetriever):
    """The placeholder in the multi-query template; each request sets the configured retriever."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        raise RuntimeError("the multi-query template is never searched")
