"""A numpy forward pass for BERT-style sentence-transformers models, used to embed queries fast.

Importing sentence-transformers (with torch, transformers and scikit-learn) takes several
seconds, far longer than embedding a query. :class:`NumpySentenceEncoder` runs the same model
(the tokenizer from ``tokenizer.json``, the weights from ``model.safetensors``, BERT's encoder
layers, mean pooling and L2 normalisation) with numpy alone, so ``langchain-fusion query`` and
other short-lived processes answer in about a second. Its vectors equal sentence-transformers'
to float32 rounding (a test compares them); folders of any other shape are refused with
:class:`UnsupportedModelError` and the caller uses sentence-transformers instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from langchain_fusion.errors import FusionError
from langchain_fusion.threads import one_blas_thread, usable_cores

_SUPPORTED_MODULES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
)


class UnsupportedModelError(FusionError):
    """A model folder this encoder cannot run exactly (another architecture, pooling or file layout)."""


@dataclass(frozen=True)
class _Layer:
    """The weights of one encoder layer, matrices transposed for ``x @ w``."""

    qkv: np.ndarray
    qkv_bias: np.ndarray
    attention_out: np.ndarray
    attention_out_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: np.ndarray
    intermediate_bias: np.ndarray
    output: np.ndarray
    output_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{path}: cannot read ({exc})") from None


def _layer_norm(x: np.ndarray, norm: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=-1, keepdims=True)
    normed: np.ndarray = centred / np.sqrt(variance + eps) * norm[0] + norm[1]
    return normed


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7, float32 rounding), computed in float64.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    value: np.ndarray = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return value.astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact (erf) GELU."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class NumpySentenceEncoder:
    """Runs a BERT mean-pooling sentence-transformers model (e.g. all-MiniLM-L6-v2) with numpy.

    Build it with :meth:`from_folder`; :meth:`encode` returns float32 L2-normalised vectors,
    one row per text, equal to ``SentenceTransformer(folder).encode(texts, normalize_embeddings=True)``.
    """

    def __init__(
        self,
        tokenizer: Any,
        weights: dict[str, np.ndarray],
        config: dict[str, Any],
        normalize: bool,
    ) -> None:
        """Use :meth:`from_folder`; this takes the parts already checked."""
        self._tokenizer = tokenizer
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config["layer_norm_eps"])
        self._normalize = normalize
        self._word = weights["embeddings.word_embeddings.weight"]
        self._position = weights["embeddings.position_embeddings.weight"]
        self._token_type = weights["embeddings.token_type_embeddings.weight"][0]
        self._embedding_norm = (weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
        self._layers = [self._layer(weights, f"encoder.layer.{i}.") for i in range(int(config["num_hidden_layers"]))]

    @staticmethod
    def _layer(weights: dict[str, np.ndarray], prefix: str) -> _Layer:
        def w(name: str) -> np.ndarray:
            return weights[prefix + name]

        attention = prefix + "attention.self."
        return _Layer(
            qkv=np.ascontiguousarray(
                np.concatenate([weights[attention + part + ".weight"] for part in ("query", "key", "value")]).T
            ),
            qkv_bias=np.concatenate([weights[attention + part + ".bias"] for part in ("query", "key", "value")]),
            attention_out=np.ascontiguousarray(w("attention.output.dense.weight").T),
            attention_out_bias=w("attention.output.dense.bias"),
            attention_norm=(w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias")),
            intermediate=np.ascontiguousarray(w("intermediate.dense.weight").T),
            intermediate_bias=w("intermediate.dense.bias"),
            output=np.ascontiguousarray(w("output.dense.weight").T),
            output_bias=w("output.dense.bias"),
            output_norm=(w("output.LayerNorm.weight"), w("output.LayerNorm.bias")),
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> NumpySentenceEncoder:
        """Load a sentence-transformers folder, or raise :class:`UnsupportedModelError` if it has another shape."""
        root = Path(folder)
        modules = _read_json(root / "modules.json")
        types = tuple(module.get("type") for module in modules) if isinstance(modules, list) else ()
        if types not in (_SUPPORTED_MODULES, _SUPPORTED_MODULES[:2]):
            raise UnsupportedModelError(f"{root}: modules {types} are not Transformer, Pooling[, Normalize]")
        pooling = _read_json(root / modules[1]["path"] / "config.json")
        modes = {key for key, value in pooling.items() if key.startswith("pooling_mode") and value}
        if modes != {"pooling_mode_mean_tokens"}:
            raise UnsupportedModelError(f"{root}: pooling {sorted(modes)} is not mean pooling")
        config = _read_json(root / "config.json")
        expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
        for key, value in expected.items():
            if config.get(key, "absolute" if key == "position_embedding_type" else None) != value:
                raise UnsupportedModelError(f"{root}: config {key}={config.get(key)!r}, need {value!r}")
        max_length = int(_read_json(root / "sentence_bert_config.json").get("max_seq_length") or 512)
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise UnsupportedModelError(f"{exc.name} is not installed") from None
        try:
            weights = load_file(str(root / "model.safetensors"))
            tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as exc:  # any unreadable file means "use sentence-transformers"
            raise UnsupportedModelError(f"{root}: cannot load weights or tokenizer ({exc})") from None
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=min(max_length, int(config["max_position_embeddings"])))
        weights = {name.removeprefix("bert."): array for name, array in weights.items()}
        if any(array.dtype != np.float32 for name, array in weights.items() if name.endswith(("weight", "bias"))):
            raise UnsupportedModelError(f"{root}: weights are not float32")
        try:
            encoder = cls(tokenizer, weights, config, normalize=len(types) == 3)
        except KeyError as exc:
            raise UnsupportedModelError(f"{root}: weight {exc} is missing") from None
        if usable_cores() <= 2:
            one_blas_thread()
        return encoder

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Token states of a padded batch (``ids`` and ``mask`` of shape batch x length)."""
        batch, length = ids.shape
        hidden = self._word[ids] + self._position[:length] + self._token_type
        hidden = _layer_norm(hidden, self._embedding_norm, self._eps)
        width = hidden.shape[-1]
        head = width // self._heads
        # Padded keys get a large negative score, so they take no attention (as in transformers).
        key_bias = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        for layer in self._layers:
            qkv = hidden @ layer.qkv + layer.qkv_bias
            q, k, v = (
                qkv[..., i * width : (i + 1) * width].reshape(batch, length, self._heads, head).transpose(0, 2, 1, 3)
                for i in range(3)
            )
            scores = (q @ k.transpose(0, 1, 3, 2)) / np.float32(math.sqrt(head)) + key_bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, width)
            hidden = _layer_norm(
                context @ layer.attention_out + layer.attention_out_bias + hidden, layer.attention_norm, self._eps
            )
            inner = _gelu(hidden @ layer.intermediate + layer.intermediate_bias)
            hidden = _layer_norm(inner @ layer.output + layer.output_bias + hidden, layer.output_norm, self._eps)
        return hidden

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embed ``texts`` (float32, one row each), padding texts of similar length together.

        Safe to call from several threads at once. On a machine of at most two cores, loading
        the encoder limited BLAS to one thread for the process (:func:`~langchain_fusion.threads.one_blas_thread`).
        """
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(encodings), self._word.shape[1]), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            length = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, i in enumerate(chunk):
                tokens = encodings[i].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1.0
            states = self._forward(ids, mask)
            pooled = (states * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
            out[chunk] = pooled
        if self._normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
