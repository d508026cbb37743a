"""Loading a sentence-transformers ``CrossEncoder``: a Hugging Face name or a local folder, with clear errors.

Needs the ``local`` extra (sentence-transformers). A name in the Hugging Face cache loads from
there without asking the Hub (``hf download NAME`` updates it); a name not in the cache is
downloaded, after one short request has found the Hub reachable; otherwise the error comes at once,
naming the model and how to fetch it, where the Hub's own retries would take a minute or more. A
folder is a model saved with ``save_pretrained`` (``config.json``, the weights and the tokenizer).
Whatever goes wrong comes back as one line: a
:class:`~langchain_fusion.errors.MissingDependencyError` without the extra, a
:class:`~langchain_fusion.errors.ModelNotFoundError` for a model that cannot be found or read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_fusion.errors import InvalidParameterError, MissingDependencyError, ModelNotFoundError, describe_error

_EXTRA_HINT = "pip install 'langchain-fusion[sentence-transformers]'"
_UNBOUNDED = 1_000_000
"""Tokenizers without a saved limit report a huge ``model_max_length``; anything above this is no limit."""
_PATH_LIKE = re.compile(r"^(?:\.{1,2}[\\/]|[\\/]|~|[A-Za-z]:[\\/])")
HUB_PROBE_TIMEOUT = 5.0
"""Seconds the one request asking whether the Hugging Face Hub is reachable may take (``HF_HUB_ETAG_TIMEOUT``
overrides it), before a model that is not in the cache is downloaded."""


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide the libraries' warnings and progress bars while loading (their failures are reported as one line)."""
    loggers = [logging.getLogger(name) for name in ("sentence_transformers", "transformers", "huggingface_hub")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - sentence-transformers brings transformers
        pass
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def model_limit(model: Any) -> int | None:
    """The most word pieces a (query, text) pair may have for ``model``: what it truncates to.

    The model's own setting (``max_seq_length`` / ``max_length``) when it has one, else its
    tokenizer's ``model_max_length``, else the positions of its transformer; None if none is known.
    """
    candidates: list[Any] = [getattr(model, _length_attribute(model), None)]
    candidates.append(getattr(getattr(model, "tokenizer", None), "model_max_length", None))
    config = getattr(model, "config", None)
    if config is None:
        config = getattr(getattr(model, "model", None), "config", None)
    candidates.append(getattr(config, "max_position_embeddings", None))
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _UNBOUNDED:
            return value
    return None


def load_cross_encoder(model: str, *, device: str = "cpu", max_length: int | None = None) -> Any:
    """A sentence-transformers ``CrossEncoder`` from a Hugging Face name or a local folder.

    ``max_length`` caps the word pieces of a (query, text) pair (longer pairs are truncated); it
    may not exceed what the model reads (:func:`model_limit`), and None keeps the model's own.
    """
    if not isinstance(model, str) or not model.strip():
        raise InvalidParameterError(f"a cross-encoder model is a Hugging Face name or a folder; got {model!r}")
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise MissingDependencyError(
            f"the cross-encoder reranker needs the 'sentence-transformers' extra ({exc.name} is missing): {_EXTRA_HINT}"
        ) from None
    folder = Path(model).expanduser()
    if folder.exists():
        if not (folder / "config.json").is_file():
            raise ModelNotFoundError(
                f"cross-encoder {model!r} is not a saved model: the folder has no config.json "
                "(save one with CrossEncoder.save_pretrained, or give a Hugging Face name)"
            )
        source, local, where = str(folder), True, "the folder"
    elif _PATH_LIKE.match(model):
        raise ModelNotFoundError(f"cross-encoder folder {model!r} does not exist")
    else:
        local = _in_hub_cache(model)
        source, where = model, ("the Hugging Face cache" if local else "the Hub")
    try:
        with _quiet_loading():
            loaded = CrossEncoder(source, device=device, local_files_only=local)
    except Exception as exc:
        raise ModelNotFoundError(
            f"cross-encoder {model!r} could not be loaded from {where}: {describe_error(exc)}"
        ) from None
    set_max_length(loaded, model, max_length)
    return loaded


def _in_hub_cache(model: str) -> bool:
    """Whether the Hugging Face name ``model`` is in the cache; if not, ModelNotFoundError unless the Hub is reachable.

    The Hub's client retries an unreachable Hub for about 20 seconds per file, and a model has
    several files: one request without retries decides instead.
    """
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import RepositoryNotFoundError

    cache = os.environ.get("SENTENCE_TRANSFORMERS_HOME") or constants.HF_HUB_CACHE  # where sentence-transformers looks
    try:
        if isinstance(try_to_load_from_cache(model, "config.json", cache_dir=cache), str):
            return True
    except ValueError as exc:  # the Hub's check of a repository name
        raise ModelNotFoundError(
            f"cross-encoder {model!r} is neither a folder nor a Hugging Face model name: {describe_error(exc)}"
        ) from None
    fetch = f"hf download {model}" + (f" --cache-dir {cache}" if cache != constants.HF_HUB_CACHE else "")
    missing = f"cross-encoder {model!r} could not be loaded: it is not in the Hugging Face cache ({cache}) and"
    advice = f"download it where the Hub is reachable ({fetch}), or give a folder saved with save_pretrained"
    if constants.HF_HUB_OFFLINE:
        raise ModelNotFoundError(f"{missing} HF_HUB_OFFLINE is set: {advice}")
    timeout = constants.HF_HUB_ETAG_TIMEOUT if "HF_HUB_ETAG_TIMEOUT" in os.environ else HUB_PROBE_TIMEOUT
    try:
        HfApi().model_info(model, timeout=timeout)
    except RepositoryNotFoundError:
        raise ModelNotFoundError(
            f"{missing} the Hub ({constants.ENDPOINT}) has no model by that name (a private or gated model needs "
            "a login: hf auth login)"
        ) from None
    except Exception as exc:
        raise ModelNotFoundError(
            f"{missing} the Hub ({constants.ENDPOINT}) cannot be reached ({describe_error(exc)}): {advice}"
        ) from None
    return False


def set_max_length(loaded: Any, model: str, max_length: int | None) -> None:
    """Truncate pairs to ``max_length`` (checked against the model), or to the model's own limit."""
    limit = model_limit(loaded)
    if max_length is not None and limit is not None and max_length > limit:
        raise InvalidParameterError(
            f"max_length {max_length} is more than the {limit} word pieces cross-encoder {model!r} reads"
        )
    length = max_length if max_length is not None else limit
    if length is None:
        return
    setattr(loaded, _length_attribute(loaded), length)


def _length_attribute(model: Any) -> str:
    """The name of a CrossEncoder's length limit: ``max_seq_length`` (sentence-transformers 6), else ``max_length``."""
    return "max_seq_length" if hasattr(type(model), "max_seq_length") else "max_length"
