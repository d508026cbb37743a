"""The chat model of the tutorials: OpenAI when a key is set, otherwise a clearly labelled fake.

``tutorial_chat_model()`` returns OpenAI's ``gpt-4o-mini`` when ``OPENAI_API_KEY`` is set (in the
environment or a ``.env`` file), and otherwise :class:`FakeTutorialChatModel`, so that every cell
of the notebooks runs offline. Set ``LANGCHAIN_FUSION_FAKE_LLM=1`` to use the fake even with a
key (the tests that execute the notebooks do).

The fake is **not a language model**. It recognises the prompts of langchain-fusion and answers
each with a fixed, deterministic rule built from the words of the prompt:

- rerank ratings: 1 + 9 x the share of the query's words found in the document;
- contextual enrichment: the document's title and the chunk's most distinctive words;
- page summaries: the first 600 characters of the page (an extract, not a summary);
- RAG answers: the sentence of passage [1] sharing most words with the question, cited as [1].

Everything it writes starts with ``[fake ...]``, so its output is never mistaken for a model's.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from langchain_fusion import Analyzer, default_chat_model
from langchain_fusion.models.embeddings import load_env

FORCE_FAKE = "LANGCHAIN_FUSION_FAKE_LLM"
"""Set to 1 to use the fake model even when ``OPENAI_API_KEY`` is set."""

_ANALYZER = Analyzer()
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def tutorial_chat_model() -> BaseChatModel:
    """OpenAI ``gpt-4o-mini`` if ``OPENAI_API_KEY`` is set (and the fake is not forced), else the fake."""
    load_env()
    if os.environ.get("OPENAI_API_KEY") and os.environ.get(FORCE_FAKE, "") in ("", "0"):
        print("Chat model: OpenAI gpt-4o-mini (OPENAI_API_KEY is set).")
        return default_chat_model()
    reason = f"{FORCE_FAKE} is set" if os.environ.get(FORCE_FAKE, "") not in ("", "0") else "no OPENAI_API_KEY"
    print(
        f"Chat model: FAKE ({reason}). It is not a language model: it answers with fixed rules "
        "built from the prompt's words, so the cells run offline. Set OPENAI_API_KEY for real answers."
    )
    return FakeTutorialChatModel()


def _words(text: str) -> list[str]:
    return _ANALYZER.tokenize(text)


def _content_words(text: str) -> list[str]:
    return [w for w in _ANALYZER.split_words(text) if len(w) > 3 and w.isalpha() and _ANALYZER.normalize_word(w)]


def _keywords(text: str, within: str = "", count: int = 5) -> list[str]:
    """The words of ``text`` that are most frequent in it and rarest in ``within`` (ties: first seen first)."""
    counts, background = Counter(_content_words(text)), Counter(_content_words(within))
    order = {word: position for position, word in enumerate(counts)}
    ranked = sorted(counts, key=lambda w: (-counts[w] / (1 + background[w]), -counts[w], order[w]))
    return ranked[:count]


def _title(document: str) -> str:
    """A PDF's running header (a line on every page), else the document's first whole line."""
    lines = [line.strip("# ").strip() for line in document.splitlines()]
    if lines and lines[0].startswith("[...]"):  # a window of a long document starts mid-line
        lines = lines[1:]
    lines = [line for line in lines if len(line) > 3 and line != "[...]"]
    header, repeats = Counter(lines).most_common(1)[0] if lines else ("the document", 0)
    return header if repeats > 1 else (lines[0] if lines else "the document")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def _lead(text: str, chars: int = 600) -> str:
    """The start of a page on one line, without a running header ("Report title" then "Page N")."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 2 and re.fullmatch(r"Page \d+", lines[1].strip()):
        lines = lines[2:]
    lead = " ".join(" ".join(lines).split())
    return lead if len(lead) <= chars else lead[:chars].rsplit(" ", 1)[0] + " ..."


def _between(text: str, start: str, end: str) -> str:
    _, found, tail = text.partition(start)
    return tail.partition(end)[0] if found else ""


class FakeTutorialChatModel(BaseChatModel):
    """Deterministic, offline stand-in for a chat model in the tutorials (see the module docstring)."""

    @property
    def _llm_type(self) -> str:
        return "fake-tutorial-chat"

    def _answer(self, prompt: str) -> str:
        if "Relevance rating" in prompt:
            query = set(_words(_between(prompt, "Query: ", "\n\nDocument:")))
            document = set(_words(_between(prompt, "Document:\n", "\n\nRelevance rating")))
            share = len(query & document) / len(query) if query else 0.0
            return str(1 + round(9 * share))
        if "<chunk>" in prompt:
            document = _between(prompt, "<document>\n", "\n</document>")
            chunk = _between(prompt, "<chunk>\n", "\n</chunk>")
            topics = ", ".join(_keywords(chunk, within=document))
            return f"[fake context] From {_title(document)}: a passage about {topics}."
        if "<text source=" in prompt or "<summaries source=" in prompt:
            text = _between(prompt, '">\n', "\n</").replace("[fake summary] ", "")
            return f"[fake summary] {_lead(text)}"
        if "Passages:" in prompt and "Question:" in prompt:
            passages = _between(prompt, "Passages:\n\n", "\n\nQuestion:")
            question = set(_words(prompt.rpartition("Question:")[2]))
            first = _between(passages + "\n\n[2]", "\n", "\n\n[2]")
            candidates = _sentences(first) or ["(no passage was retrieved)"]
            best = max(candidates, key=lambda s: len(question & set(_words(s))))
            return f'[fake answer, not a model] Passage [1] says: "{best}" [1]'
        return "[fake model] I only answer the prompts of langchain-fusion's tutorials."

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = self._answer("\n".join(str(m.content) for m in messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        answer = self._answer("\n".join(str(m.content) for m in messages))
        for token in re.findall(r"\S+\s*", answer):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
            if run_manager is not None:
                run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk
