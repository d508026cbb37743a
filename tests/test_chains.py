"""The RAG chain: format_docs, invoke, streaming, windows and rerank inside, one trace."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from pydantic import Field

from langchain_fusion import FusionError, FusionIndex, LLMReranker, build_rag_chain, format_docs, split_documents
from langchain_fusion import metadata as keys
from langchain_fusion.chains import DEFAULT_RAG_PROMPT, source_label
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import RatingModel, keyword_rule

ANSWER = "Cats purr when content [1]; dogs bark [2]."


def fake_llm(*answers: str) -> GenericFakeChatModel:
    """Streams each answer token by token (words and the spaces between them)."""
    return GenericFakeChatModel(messages=iter(answers or [ANSWER] * 4))


class _Recording(GenericFakeChatModel):
    """Also records the messages it was given."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(messages)
        return super()._generate(messages, *args, **kwargs)


class TestFormatDocs:
    def test_numbered_with_source_and_page(self) -> None:
        docs = [
            Document(page_content="First text.", metadata={keys.SOURCE: "data/report.pdf", keys.PAGE: 3}),
            Document(page_content="Second text.", metadata={keys.SOURCE: "notes.md"}),
            Document(
                page_content="Third.",
                metadata={keys.SOURCE: "data/report.pdf", keys.PAGE: 4, keys.WINDOW_PAGES: [4, 5]},
            ),
            Document(page_content="Fourth.", metadata={keys.PAGE: 1, keys.WINDOW_PAGES: [1, 1]}),
        ]
        assert format_docs(docs) == (
            "[1] (data/report.pdf, p. 3)\nFirst text.\n\n"
            "[2] (notes.md)\nSecond text.\n\n"
            "[3] (data/report.pdf, pp. 4-5)\nThird.\n\n"
            "[4] (unknown source, p. 1)\nFourth."
        )

    def test_empty_and_short_labels(self) -> None:
        assert format_docs([]) == ""
        doc = Document(page_content="x", metadata={keys.SOURCE: "data/report.pdf", keys.PAGE: 2})
        assert source_label(doc, short=True) == "report.pdf, p. 2"


class TestRagChain:
    def test_invoke_returns_answer_and_sources(self, animal_index: FusionIndex) -> None:
        model = _Recording(messages=iter([ANSWER]))
        retriever = animal_index.as_retriever(k=2)
        result = build_rag_chain(retriever, model).invoke("cats purr")
        assert set(result) == {"answer", "sources"}
        assert result["answer"] == ANSWER
        assert result["sources"] == retriever.invoke("cats purr")
        [messages] = model.seen
        human = str(messages[-1].content)
        assert human == f"Passages:\n\n{format_docs(result['sources'])}\n\nQuestion: cats purr"
        assert "cite the passages" in str(messages[0].content)

    def test_stream_yields_sources_then_answer_tokens(self, animal_index: FusionIndex) -> None:
        chunks = list(build_rag_chain(animal_index.as_retriever(k=2), fake_llm()).stream("cats purr"))
        assert "sources" in chunks[0] and len(chunks[0]["sources"]) == 2
        tokens = [c["answer"] for c in chunks if "answer" in c]
        assert len(tokens) > 5  # token by token, not one piece
        assert "".join(tokens) == ANSWER
        assert tokens[:3] == ["Cats", " ", "purr"]
        assert all(set(c) <= {"answer", "sources"} for c in chunks)

    async def test_astream_and_ainvoke(self, animal_index: FusionIndex) -> None:
        chain = build_rag_chain(animal_index.as_retriever(k=2), fake_llm())
        tokens = [c["answer"] async for c in chain.astream("cats purr") if "answer" in c]
        assert "".join(tokens) == ANSWER and len(tokens) > 5
        result = await chain.ainvoke("dogs")
        assert result["answer"] == ANSWER
        assert result["sources"][0].page_content == "Dogs bark loudly at the postman every morning."

    def test_dict_input_and_bad_input(self, animal_index: FusionIndex) -> None:
        chain = build_rag_chain(animal_index.as_retriever(k=1), fake_llm())
        assert chain.invoke({"question": "dogs"})["answer"] == ANSWER  # type: ignore[arg-type]
        with pytest.raises(FusionError, match="takes a question string"):
            chain.invoke(42)  # type: ignore[arg-type]

    def test_any_runnable_as_retriever_and_model(self) -> None:
        docs = [Document(page_content="The sky is blue.", metadata={keys.SOURCE: "sky.txt"})]
        retriever = RunnableLambda(lambda q: docs)
        llm = RunnableLambda(lambda prompt: "Blue [1]." if "[1] (sky.txt)" in prompt.to_string() else "?")
        result = build_rag_chain(retriever, llm).invoke("What colour is the sky?")
        assert result == {"answer": "Blue [1].", "sources": docs}

    def test_custom_prompt(self, animal_index: FusionIndex) -> None:
        prompt = ChatPromptTemplate.from_template("Q: {question}\n{context}\nA:")
        seen: list[str] = []
        llm = RunnableLambda(lambda p: seen.append(p.to_string()) or "ok")
        build_rag_chain(animal_index.as_retriever(k=1), llm, prompt=prompt).invoke("parrots")
        assert seen[0].startswith("Human: Q: parrots\n[1] (doc6.txt)\nParrots")

    def test_window_and_rerank_inside(self) -> None:
        text = " ".join(f"Sentence {i} about the solar grid and batteries number {i}." for i in range(40))
        chunks = split_documents([Document(page_content=text, metadata={keys.SOURCE: "grid.txt"})], 200, 40)
        index = FusionIndex.from_documents(chunks, HashingEmbeddings())
        rater = RatingModel(rule=keyword_rule({"Sentence 20 ": 10}, default=2))
        chain = build_rag_chain(index.as_retriever(k=6), fake_llm(), window=1, reranker=LLMReranker(llm=rater, top_n=2))
        result = chain.invoke("batteries number 20")
        assert len(result["sources"]) <= 2
        best = result["sources"][0]
        assert "Sentence 20 " in best.page_content
        assert best.metadata[keys.RERANK_RATING] == 10
        assert keys.WINDOW_SPAN in best.metadata
        assert len(best.page_content) > max(len(c.page_content) for c in chunks)

    def test_invalid_options(self, animal_index: FusionIndex) -> None:
        retriever = animal_index.as_retriever()
        with pytest.raises(FusionError, match=r"exactly the variables \['context', 'question'\]; it takes \['q'\]"):
            build_rag_chain(retriever, fake_llm(), prompt=ChatPromptTemplate.from_template("{q}"))
        with pytest.raises(FusionError, match="need a BaseRetriever"):
            build_rag_chain(RunnableLambda(lambda q: []), fake_llm(), window=1)
        with pytest.raises(FusionError, match="give window=N too"):
            build_rag_chain(retriever, fake_llm(), max_chars=100)

    def test_default_prompt_variables(self) -> None:
        assert set(DEFAULT_RAG_PROMPT.input_variables) == {"context", "question"}


class _Tree(BaseCallbackHandler):
    def __init__(self) -> None:
        self.parent: dict[UUID, UUID | None] = {}
        self.kind: dict[UUID, str] = {}
        self.names: dict[UUID, str] = {}
        self.tokens: list[str] = []

    def _record(self, kind: str, run_id: UUID, parent_run_id: UUID | None, name: Any = None) -> None:
        self.parent[run_id], self.kind[run_id], self.names[run_id] = parent_run_id, kind, str(name)

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: Any = None, **kw: Any
    ) -> None:
        self._record("chain", run_id, parent_run_id, kw.get("name"))

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: Any = None, **kw: Any
    ) -> None:
        self._record("retriever", run_id, parent_run_id)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: Any = None, **kw: Any
    ) -> None:
        self._record("chat_model", run_id, parent_run_id)

    def on_llm_new_token(self, token: str, **kw: Any) -> None:
        self.tokens.append(token)

    def ancestors(self, run_id: UUID) -> Iterator[UUID]:
        while (parent := self.parent.get(run_id)) is not None:
            yield parent
            run_id = parent  # fmt: skip


class TestOneTrace:
    def test_retriever_and_model_run_under_the_chain(self, animal_index: FusionIndex) -> None:
        tree = _Tree()
        chain = build_rag_chain(animal_index.as_retriever(k=2), fake_llm())
        list(chain.stream("cats", config={"callbacks": [tree]}))
        [root] = [r for r, p in tree.parent.items() if p is None]
        assert tree.names[root] == "rag_chain"
        retrievers = [r for r, k in tree.kind.items() if k == "retriever"]
        models = [r for r, k in tree.kind.items() if k == "chat_model"]
        assert len(retrievers) == 1 and len(models) == 1
        assert root in set(tree.ancestors(retrievers[0]))
        assert root in set(tree.ancestors(models[0]))
        assert "".join(tree.tokens) == ANSWER

    def test_rerank_runs_nest_too(self, animal_index: FusionIndex) -> None:
        tree = _Tree()
        rater = RatingModel(rule=lambda d: 5, structured=False)
        retriever = animal_index.as_retriever(k=3)
        chain = build_rag_chain(retriever, fake_llm(), reranker=LLMReranker(llm=rater, top_n=2))
        chain.invoke("cats", config={"callbacks": [tree]})
        [root] = [r for r, p in tree.parent.items() if p is None]
        models = [r for r, k in tree.kind.items() if k == "chat_model"]
        assert len(models) == 4  # three ratings and the answer
        assert all(root in set(tree.ancestors(m)) for m in models)


def test_async_stream_matches_invoke(animal_index: FusionIndex) -> None:
    chain = build_rag_chain(animal_index.as_retriever(k=2), fake_llm())

    async def collect() -> dict[str, Any]:
        merged: dict[str, Any] = {"answer": ""}
        async for chunk in chain.astream("parrots"):
            merged["answer"] += chunk.get("answer", "")
            merged.setdefault("sources", chunk.get("sources"))
        return merged

    streamed = asyncio.run(collect())
    assert streamed == chain.invoke("parrots")


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
def test_real_model_answers_with_citations(animal_index: FusionIndex) -> None:
    from langchain_fusion.models.chat import default_chat_model

    chain = build_rag_chain(animal_index.as_retriever(k=3), default_chat_model())
    result = chain.invoke("Which animal purrs when it is content?")
    assert "cat" in result["answer"].lower()
    assert "[" in result["answer"]
    tokens = [c["answer"] for c in chain.stream("What do parrots learn?") if "answer" in c]
    assert len(tokens) > 1
