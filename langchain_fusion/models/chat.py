"""Choosing the chat model that reranks and answers.

The default is OpenAI's ``gpt-4o-mini`` (``OPENAI_API_KEY`` must be set; it is also read from
a ``.env`` file). ``openai:MODEL`` picks another OpenAI model; any other ``PROVIDER:MODEL``
goes through LangChain's ``init_chat_model``, which needs the ``llm`` extra and the
provider's integration package.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from langchain_fusion.errors import FusionError, MissingCredentialsError, MissingDependencyError
from langchain_fusion.models.embeddings import OPENAI_EXTRA_HINT, load_env

OPENAI_DEFAULT_CHAT_MODEL = "gpt-4o-mini"
"""The OpenAI chat model used when no other is chosen."""

_LLM_EXTRA_HINT = "pip install 'langchain-fusion[llm]'"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def openai_chat_model(model: str = OPENAI_DEFAULT_CHAT_MODEL) -> BaseChatModel:
    """An OpenAI chat model, or a MissingCredentialsError naming ``OPENAI_API_KEY``."""
    load_env()
    if not os.environ.get("OPENAI_API_KEY"):
        raise MissingCredentialsError(
            "OPENAI_API_KEY is not set (neither in the environment nor in a .env file): set it to use "
            f"OpenAI's {model}, or choose another chat model (llm='PROVIDER:MODEL')"
        )
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise MissingDependencyError(f"OpenAI chat models need the 'openai' extra: {OPENAI_EXTRA_HINT}") from None

    return ChatOpenAI(model=model)


def default_chat_model() -> BaseChatModel:
    """OpenAI ``gpt-4o-mini``; raises MissingCredentialsError without ``OPENAI_API_KEY``."""
    return openai_chat_model()


def resolve_chat_model(spec: str | None) -> BaseChatModel:
    """Build a chat model from a CLI-style spec.

    ``None``, ``"auto"`` or ``"openai"``: :func:`default_chat_model`. ``"openai:MODEL"``: that
    OpenAI model (no extra needed). ``"PROVIDER:MODEL"`` (e.g. ``anthropic:claude-sonnet-4-5``,
    ``ollama:llama3.1``): LangChain's ``init_chat_model``, which needs the ``llm`` extra and
    the provider's integration package.
    """
    if spec is None or spec in {"auto", "openai"}:
        return default_chat_model()
    provider, _, model = spec.partition(":")
    if provider == "openai" and model:
        return openai_chat_model(model)
    if not provider or not model:
        raise FusionError(f"unknown chat model {spec!r}: use 'openai', 'openai:MODEL' or 'PROVIDER:MODEL'")
    load_env()
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise MissingDependencyError(
            f"chat model {spec!r} needs LangChain's init_chat_model: {_LLM_EXTRA_HINT} "
            f"and the integration package for {provider!r} (e.g. {_package_hint(provider)})"
        ) from None
    try:
        chat_model: BaseChatModel = init_chat_model(spec)
    except ImportError as exc:
        raise MissingDependencyError(f"chat model {spec!r}: {_one_line(exc)}") from None
    except AttributeError as exc:  # e.g. a fallback module that lacks the provider's class
        raise MissingDependencyError(
            f"chat model {spec!r} could not be created ({_one_line(exc)}): install the integration package "
            f"for {provider!r} (e.g. {_package_hint(provider)})"
        ) from None
    except Exception as exc:  # an unknown provider, or the provider's own checks (e.g. a missing API key)
        raise FusionError(f"chat model {spec!r} could not be created: {_one_line(exc)}") from None
    return chat_model


def chat_model_or_reason(llm: Runnable[Any, Any] | str | None) -> tuple[Runnable[Any, Any] | None, str | None]:
    """The chat model ``llm`` names, or (None, the reason there is none) for the default without credentials.

    A model or a spec (see :func:`resolve_chat_model`) is asked for explicitly: any failure to
    build it is raised. None means :func:`default_chat_model` when its credentials are set.
    """
    if isinstance(llm, str):
        return resolve_chat_model(llm), None
    if llm is not None:
        return llm, None
    try:
        return default_chat_model(), None
    except MissingCredentialsError as exc:
        return None, str(exc)


def _package_hint(provider: str) -> str:
    return f"langchain-{provider.replace('_', '-')}"
