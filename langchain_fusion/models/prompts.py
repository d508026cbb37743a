"""Prompts and answers of the library's chat model steps: the prompt type, its checks, its version, an answer's text."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.prompts import BasePromptTemplate

from langchain_fusion.errors import InvalidParameterError

if TYPE_CHECKING:
    Prompt = BasePromptTemplate[Any]
else:  # pydantic validates fields against the plain class (a parametrised one rejects subclasses)
    Prompt = BasePromptTemplate


CHARS_PER_TOKEN = 4
"""The token estimate of prompt budgets: about four characters per token for English text (no tokenizer,
so nothing to download)."""


def prompt_version_of(prompt: Prompt, default: Prompt, default_version: str) -> str:
    """The version of a prompt in cache keys: ``default_version`` for the default, else a hash of the prompt."""
    if prompt == default:
        return default_version
    return "custom-" + hashlib.sha256(repr(prompt).encode("utf-8")).hexdigest()[:16]


def check_prompt(prompt: Prompt, needed: set[str]) -> Prompt:
    """Return ``prompt`` if it takes exactly the variables ``needed``, else raise InvalidParameterError."""
    variables = set(prompt.input_variables)
    if variables != needed:
        raise InvalidParameterError(
            f"the prompt must take exactly the variables {sorted(needed)}; it takes {sorted(variables)}"
        )
    return prompt


def answer_text(output: Any) -> str:
    """The text of a model's answer (a string, a message, or a message's content blocks), stripped.

    Raises ValueError for an empty answer or one with no text.
    """
    content = output.content if isinstance(output, BaseMessage) else output
    if isinstance(content, list):  # content blocks: keep the text ones (not reasoning, tool calls...)
        content = "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type", "text") == "text")
        )
    if not isinstance(content, str):
        raise ValueError(f"expected text from the model, got {type(output).__name__}")
    text = content.strip()
    if not text:
        raise ValueError("the model gave an empty answer")
    return text
