"""The RAG chain: a question in, an answer citing numbered sources out.

:func:`build_rag_chain` returns an LCEL ``Runnable`` from a question to
``{"answer": str, "sources": [Document, ...]}``; ``stream`` / ``astream`` yield the sources
once they are retrieved, then the answer token by token. :func:`format_docs` numbers the
passages with their source and page, so answers can cite them as ``[1]``, ``[2]``...
The retriever pipelines the command line and the servers answer from are composed by
:func:`langchain_fusion.pipeline.build`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypedDict

from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableBranch, RunnableLambda, RunnableParallel, RunnablePassthrough

from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.models.guarded_model import GuardedModel
from langchain_fusion.models.prompts import Prompt
from langchain_fusion.models.retries import RetryPolicy
from langchain_fusion.retrievers.rerank_retriever import RerankRetriever
from langchain_fusion.retrievers.windows import ContextWindowRetriever
from langchain_fusion.search.options import DEFAULT_WINDOW_MAX_CHARS

if TYPE_CHECKING:
    from langchain_fusion.pipeline.composer import Pipeline

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


NO_SOURCES_ANSWER = "The documents do not cover this question: no passage was relevant enough to answer from."
"""What the RAG chain answers, without calling the model, when the retriever returns nothing (relevance floors)."""


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


def pipeline_rag_chain(pipeline: Pipeline, retriever: Runnable[str, Any] | None = None) -> Runnable[str, RagOutput]:
    """The RAG chain of a built pipeline: its retriever (or ``retriever``), its chat model, its timeout.

    Raises InvalidParameterError, with the reason, when the pipeline has no chat model.
    """
    if pipeline.chat_model is None:
        raise InvalidParameterError(f"answers need a chat model: {pipeline.no_chat_reason or 'none was given'}")
    chosen = pipeline.retriever if retriever is None else retriever
    return build_rag_chain(chosen, pipeline.chat_model, timeout=pipeline.spec.llm_timeout)


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
    no_sources_answer: str | None = NO_SOURCES_ANSWER,
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
        no_sources_answer: the answer when the retriever returns no passage (a relevance floor
            such as ``min_relevance`` left everything out), given without calling the model;
            None asks the model anyway.

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
    answer: Runnable[Any, str] = RunnableLambda(_prompt_inputs, name="format_docs") | prompt | model | StrOutputParser()
    if no_sources_answer is not None:
        answer = RunnableBranch(
            (lambda value: not value["sources"], RunnableLambda(lambda _: no_sources_answer)), answer
        )
    chain = (
        RunnableLambda(_question, name="question")
        | RunnableParallel(question=RunnablePassthrough(), sources=retriever)
        | RunnablePassthrough.assign(answer=answer)
    ).pick(["answer", "sources"])
    return chain.with_config(run_name="rag_chain")
