"""Exceptions raised by langchain-fusion.

Every error a user can cause derives from :class:`FusionError`, so applications (and the CLI)
can tell a user mistake from a bug with one ``except`` clause. The messages say what was wrong
and what to do about it.
"""

from __future__ import annotations

import os

SECRET_NAME_ENDINGS = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY")
"""Environment variables whose names end so hold secrets (``OPENAI_API_KEY``, ``MILVUS_TOKEN``...)."""

_SHORTEST_SECRET = 8  # shorter values ("1", "true") are settings, and replacing them would garble messages


def redact(text: str) -> str:
    """``text`` with the value of every secret in the environment (see :data:`SECRET_NAME_ENDINGS`) as ``***``.

    A provider or proxy may echo the key it was sent in its error; the library relays those messages
    (the CLI's error line, warnings, a server's 502 and log) only through this.
    """
    for name, value in os.environ.items():
        if len(value) >= _SHORTEST_SECRET and name.upper().endswith(SECRET_NAME_ENDINGS) and value in text:
            text = text.replace(value, "***")
    return text


def describe_error(exc: BaseException) -> str:
    """``Type: message`` on one line (a provider's multi-line message folded), with secrets redacted."""
    message = redact(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class FusionError(Exception):
    """Base class of every error langchain-fusion raises on bad input or bad state."""


class IndexFormatError(FusionError):
    """A saved index folder is missing, incomplete, altered or of an unknown format."""


class EmbeddingsMismatchError(FusionError):
    """The embeddings given to a saved index are not the ones that built it."""


class MissingDependencyError(FusionError, ImportError):
    """An optional extra needed for the requested feature is not installed."""


class MissingCredentialsError(FusionError):
    """A provider was requested but its API key is not set."""


class InvalidParameterError(FusionError, ValueError):
    """A parameter is out of range or of the wrong kind (also a ValueError, as is conventional)."""


class UnknownDocumentError(FusionError, KeyError):
    """A document id is not in the index."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ProviderError(FusionError):
    """A model provider's call failed for good (bad key, no network, rate limit, timeout), after any retries.

    The message names the step and the provider's error on one line; the original exception is
    the ``__cause__``.
    """


class ModelNotFoundError(FusionError):
    """A model named by the user (a Hugging Face name or a folder) cannot be found or read."""
