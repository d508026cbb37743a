"""The bundled model's document vectors, computed once per test run and shared by all its processes.

The README, the docs, the notebooks and the CLI's bundled-model test all embed the same sample files
with the real model: seconds of CPU each time (the forward passes). Under
:func:`shared_model_vectors` (or :func:`install`, in a notebook's kernel) :meth:`LocalEmbeddings.encode`
reads the vectors of texts already embedded in this run from a folder shared by every xdist worker
and kernel, and runs the real model on the rest only, under a file lock, so that two processes never
embed the same text. The vectors are the model's own: each distinct text is embedded by the real
model once per run, whichever test needs it first. Everything around ``encode`` (truncation counts
and warnings, chunking advice, queries) runs as usual.

A notebook's kernel does not load the model itself: :func:`model_service` runs it in the pytest
worker (which loads the model once for all the notebooks it runs) and the kernel sends it the texts
that are not cached yet.

This module is loaded by file path in the notebooks' kernels (see ``tests/test_notebooks.py``), so it
imports only the package, numpy and the standard library.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_fusion.models.embeddings import LOCAL_MODEL_NAME, CachedEmbeddings, LocalEmbeddings

REAL_ENCODE = LocalEmbeddings.encode
REAL_LOAD_MODEL = LocalEmbeddings.load_model


@contextlib.contextmanager
def locked(path: Path) -> Iterator[bool]:
    """Hold an exclusive lock on the file ``path`` while open; yields False where there is no fcntl."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield False
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_folder(own_basetemp: Path) -> Path:
    """The temporary folder of this whole test run: under pytest-xdist, the parent of the worker's own."""
    return own_basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else own_basetemp


def _real_vectors(texts: list[str]) -> np.ndarray:
    """The bundled model's vectors of ``texts``, with the model this process loaded once."""
    local = LocalEmbeddings()
    if "model" not in _loaded:
        _loaded["model"] = REAL_LOAD_MODEL(local)
    local._encoder = _loaded["model"]
    return np.asarray(REAL_ENCODE(local, texts), dtype=np.float32)


_loaded: dict[str, Any] = {}
"""The model this process loaded (loading it again for each instance would take a second)."""


class _RealModel(Embeddings):
    """What the cache wraps: the real model, here or in the process serving it at ``address``."""

    model_name = LOCAL_MODEL_NAME

    def __init__(self, address: str | None) -> None:
        self.address = address

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.address is None:
            return _real_vectors(texts).tolist()
        with contextlib.closing(Client(self.address, family="AF_UNIX")) as connection:
            connection.send_bytes(json.dumps(texts).encode("utf-8"))
            answer = connection.recv_bytes()
        return np.load(io.BytesIO(answer), allow_pickle=False).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def deferred_load(self: LocalEmbeddings) -> Any:
    """:meth:`LocalEmbeddings.load_model` that loads nothing: the model loads when a text is not in the cache.

    The command line loads the model before its progress bar; with every vector cached, that would
    load it for nothing (about half a second of CPU per process).
    """
    return self._encoder


def cached_encode(folder: Path, address: str | None = None) -> Any:
    """A stand-in for :meth:`LocalEmbeddings.encode` reading and filling the vector cache in ``folder``.

    Texts not cached are embedded in this process, or by the :func:`model_service` at ``address``.
    """
    folder.mkdir(parents=True, exist_ok=True)

    def encode(self: LocalEmbeddings, texts: Sequence[str]) -> np.ndarray:
        with locked(folder / "encode.lock"):
            cache = CachedEmbeddings(_RealModel(address), folder)  # reads what other processes added meanwhile
            return np.asarray(cache.embed_documents(list(texts)), dtype=np.float32)

    return encode


@contextlib.contextmanager
def shared_model_vectors(folder: Path) -> Iterator[None]:
    """While open, the bundled model embeds each text once for every process sharing ``folder``."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalEmbeddings, "encode", cached_encode(folder))
        patch.setattr(LocalEmbeddings, "load_model", deferred_load)
        yield


@contextlib.contextmanager
def each_text_embedded_once(folder: Path) -> Iterator[None]:
    """:func:`shared_model_vectors`, and in this process each query embedded once, with one loaded model.

    For tests that run many searches with the bundled model over the same questions (the docs'
    pages, the sample's measured tables): a query's vector is the model's, computed the first time.
    """
    import pytest

    shared: dict[str, Any] = {}
    bundled = LocalEmbeddings._bundled
    embed_queries = LocalEmbeddings.embed_queries
    queries: dict[str, list[float]] = {}

    def encoder_once(self: LocalEmbeddings) -> Any:
        if "encoder" not in shared:
            shared["encoder"] = bundled(self)
        return shared["encoder"]

    def embed_queries_once(self: LocalEmbeddings, texts: list[str]) -> list[list[float]]:
        missing = [text for text in dict.fromkeys(texts) if text not in queries]
        if missing:
            queries.update(zip(missing, embed_queries(self, missing), strict=True))
        return [list(queries[text]) for text in texts]

    with shared_model_vectors(folder), pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalEmbeddings, "_bundled", encoder_once)
        patch.setattr(LocalEmbeddings, "embed_queries", embed_queries_once)
        yield


def install(folder: str, address: str | None = None) -> None:
    """For good, in this process (a notebook's kernel): the bundled model's vectors come from ``folder``."""
    LocalEmbeddings.encode = cached_encode(Path(folder), address)
    LocalEmbeddings.load_model = deferred_load


def _serve(listener: Listener, stop: threading.Event) -> None:
    while True:
        connection: Connection = listener.accept()
        with contextlib.closing(connection):
            if stop.is_set():
                return
            texts = json.loads(connection.recv_bytes())
            buffer = io.BytesIO()
            np.save(buffer, _real_vectors(texts), allow_pickle=False)
            connection.send_bytes(buffer.getvalue())


@contextlib.contextmanager
def model_service(address: Path) -> Iterator[str]:
    """While open, a thread of this process embeds texts with the real model for other processes (a Unix socket)."""
    stop = threading.Event()
    with contextlib.closing(Listener(str(address), family="AF_UNIX")) as listener:
        thread = threading.Thread(target=_serve, args=(listener, stop), name="model-service", daemon=True)
        thread.start()
        try:
            yield str(address)
        finally:
            stop.set()
            Client(str(address), family="AF_UNIX").close()  # wakes the thread's accept()
            thread.join(timeout=60)
