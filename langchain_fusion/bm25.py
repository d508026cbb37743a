"""The BM25 side: a bm25s index over one row space, kept aligned under add and delete."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import bm25s
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from langchain_fusion.analyzer import Analyzer

logger = logging.getLogger(__name__)

_TOKENS_FILE = "tokens.npy"
_OFFSETS_FILE = "token_offsets.npy"
_VOCAB_FILE = "vocabulary.json"
_WEIGHTS_DIR = "weights"


class BM25Params(BaseModel):
    """BM25 scoring parameters (plain data, recorded in the index manifest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k1: float = Field(default=1.5, gt=0)
    """Term-frequency saturation: higher lets repeated terms count for more."""
    b: float = Field(default=0.75, ge=0, le=1)
    """Length normalisation: 0 ignores chunk length, 1 normalises fully."""
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    """The bm25s scoring variant. ``lucene`` (the default) never gives negative IDF."""
    delta: float = Field(default=0.5, ge=0)
    """The delta of the bm25l and bm25+ variants; ignored by the others."""


class BM25Index:
    """BM25 over rows 0..n-1, built with bm25s (precomputed sparse term weights).

    A query costs one sparse row sum per query term, not a loop over documents. Token ids
    of every row are kept (as arrays) so that :meth:`add` and :meth:`delete` can rebuild the
    weights, which depend on corpus-wide statistics (IDF, average length), in the same row
    order as the other indexes.
    """

    def __init__(self, analyzer: Analyzer | None = None, params: BM25Params | None = None) -> None:
        """Create an empty index that will tokenize with ``analyzer`` and score with ``params``."""
        self.analyzer = analyzer or Analyzer()
        self.params = params or BM25Params()
        self._vocab: dict[str, int] = {}
        self._row_tokens: list[NDArray[np.int32]] = []
        self._model: bm25s.BM25 | None = None

    def __len__(self) -> int:
        return len(self._row_tokens)

    @property
    def vocabulary_size(self) -> int:
        """Number of distinct tokens seen in the indexed rows."""
        return len(self._vocab)

    def add(self, texts: Sequence[str]) -> None:
        """Append one row per text and re-weight the whole index."""
        for text in texts:
            ids = [self._vocab.setdefault(tok, len(self._vocab)) for tok in self.analyzer.tokenize(text)]
            self._row_tokens.append(np.asarray(ids, dtype=np.int32))
        self._rebuild()

    def delete(self, rows: NDArray[np.int64]) -> None:
        """Remove the given rows; the remaining rows keep their relative order."""
        drop = set(int(r) for r in rows)
        self._row_tokens = [t for i, t in enumerate(self._row_tokens) if i not in drop]
        self._rebuild()

    def _rebuild(self) -> None:
        if not self._row_tokens or not self._vocab or not any(t.size for t in self._row_tokens):
            self._model = None
            return
        model = bm25s.BM25(k1=self.params.k1, b=self.params.b, delta=self.params.delta, method=self.params.method)
        corpus_ids = [t.tolist() for t in self._row_tokens]
        model.index((corpus_ids, dict(self._vocab)), create_empty_token=False, show_progress=False)
        self._model = model

    def query_token_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's tokens; tokens never seen in the corpus are dropped."""
        vocab = self._vocab
        return [vocab[t] for t in self.analyzer.tokenize(query) if t in vocab]

    def scores(self, query: str) -> NDArray[np.float32]:
        """BM25 score of every row for ``query`` (zeros when no query token is known)."""
        n = len(self._row_tokens)
        token_ids = self.query_token_ids(query)
        if self._model is None or not token_ids:
            return np.zeros(n, dtype=np.float32)
        return np.asarray(self._model.get_scores_from_ids(token_ids), dtype=np.float32)

    # --- persistence (arrays and JSON only) -------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write the token arrays, vocabulary and bm25s weights into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        lengths = np.fromiter((t.size for t in self._row_tokens), dtype=np.int64, count=len(self))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate(self._row_tokens) if self._row_tokens else np.zeros(0, np.int32)
        np.save(folder / _TOKENS_FILE, flat.astype(np.int32), allow_pickle=False)
        np.save(folder / _OFFSETS_FILE, offsets, allow_pickle=False)
        vocab_list = sorted(self._vocab, key=self._vocab.__getitem__)
        (folder / _VOCAB_FILE).write_text(json.dumps(vocab_list, ensure_ascii=False), encoding="utf-8")
        if self._model is not None:
            self._model.save(str(folder / _WEIGHTS_DIR), show_progress=False)

    @classmethod
    def load(cls, folder: Path, analyzer: Analyzer, params: BM25Params) -> BM25Index:
        """Read an index written by :meth:`save` (weights are loaded, not recomputed)."""
        index = cls(analyzer, params)
        flat = np.load(folder / _TOKENS_FILE, allow_pickle=False)
        offsets = np.load(folder / _OFFSETS_FILE, allow_pickle=False)
        vocab_list = json.loads((folder / _VOCAB_FILE).read_text(encoding="utf-8"))
        index._vocab = {tok: i for i, tok in enumerate(vocab_list)}
        index._row_tokens = [flat[offsets[i] : offsets[i + 1]] for i in range(offsets.size - 1)]
        if (folder / _WEIGHTS_DIR).is_dir():
            index._model = bm25s.BM25.load(str(folder / _WEIGHTS_DIR), show_progress=False, verbosity=0)
        return index
