"""Rerank steps named by a string, the one way the CLI and the server choose one.

``"llm"``: :class:`~langchain_fusion.retrievers.rerank.LLMReranker` (a chat model rates each
candidate). ``"cross-encoder:MODEL"``: :class:`~langchain_fusion.retrievers.cross_encoder.CrossEncoderReranker`
with ``MODEL`` a Hugging Face name (``cross-encoder/ms-marco-MiniLM-L6-v2``) or a folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_fusion.errors import InvalidParameterError

if TYPE_CHECKING:  # the command line parses specs without importing LangChain
    from langchain_core.runnables import Runnable

    from langchain_fusion.retrievers.rerank_base import BaseReranker

RerankKind = Literal["llm", "cross-encoder"]
"""The kinds of rerank step a spec can name."""

CROSS_ENCODER_PREFIX = "cross-encoder:"
"""What starts a cross-encoder spec."""


@dataclass(frozen=True)
class RerankSpec:
    """A parsed rerank spec."""

    kind: RerankKind
    """``llm`` or ``cross-encoder``."""
    model: str | None = None
    """The cross-encoder's Hugging Face name or folder (None for ``llm``: the chat model is chosen apart)."""

    @property
    def uses_chat_model(self) -> bool:
        """Whether the step needs a chat model."""
        return self.kind == "llm"

    def __str__(self) -> str:
        return "llm" if self.model is None else f"{CROSS_ENCODER_PREFIX}{self.model}"


def parse_rerank_spec(spec: Any) -> RerankSpec:
    """``"llm"`` or ``"cross-encoder:MODEL"`` as a :class:`RerankSpec`; InvalidParameterError otherwise."""
    if isinstance(spec, RerankSpec):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text == "llm":
            return RerankSpec("llm")
        if text.startswith(CROSS_ENCODER_PREFIX) and text[len(CROSS_ENCODER_PREFIX) :].strip():
            return RerankSpec("cross-encoder", text[len(CROSS_ENCODER_PREFIX) :].strip())
    shown = spec if not isinstance(spec, str) or len(spec) <= 60 else spec[:40] + "..."
    raise InvalidParameterError(
        "rerank must be 'llm' (a chat model rates each candidate) or 'cross-encoder:MODEL' (MODEL a Hugging "
        f"Face name such as cross-encoder/ms-marco-MiniLM-L6-v2, or a folder); got {shown!r}"
    )


def build_reranker(
    spec: str | RerankSpec,
    *,
    llm: Runnable[Any, Any] | None = None,
    top_n: int | None = 4,
    timeout: float | None = None,
) -> BaseReranker:
    """The rerank step ``spec`` names, keeping ``top_n``; ``llm`` and ``timeout`` are the chat model's, for ``llm``.

    The ``llm`` step fails when it could rate no candidate (``require_a_rating``): a rerank that was asked
    for and did not happen is an error on every face, not fusion results under a rerank header.
    A cross-encoder is not loaded here: call its ``load_model()`` to fail before the first query.
    """
    parsed = parse_rerank_spec(spec)
    if parsed.kind == "llm":
        from langchain_fusion.retrievers.rerank import LLMReranker

        if llm is None:
            raise InvalidParameterError("rerank 'llm' needs a chat model to rate the candidates")
        return LLMReranker(llm=llm, top_n=top_n, timeout=timeout, require_a_rating=True)
    from langchain_fusion.retrievers.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(model=parsed.model, top_n=top_n)
