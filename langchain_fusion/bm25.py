"""The BM25 side: a bm25s index over one row space, kept aligned under add and delete."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import bm25s
import bm25s.scoring as bm25s_scoring
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from langchain_fusion.analyzer import Analyzer, _WordMemo

logger = logging.getLogger(__name__)

_ADD_BATCH = 8192  # texts tokenized per step, bounding the temporary arrays
_VOCAB_FILE = "vocabulary.json"
_WEIGHTS_DIR = "weights"


class BM25Params(BaseModel):
    """BM25 scoring parameters (plain data, recorded in the index manifest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k1: float = Field(default=0.9, gt=0)
    """Term-frequency saturation: higher lets repeated terms count for more (0.9: Anserini's BEIR default)."""
    b: float = Field(default=0.4, ge=0, le=1)
    """Length normalisation: 0 ignores chunk length, 1 normalises fully (0.4: Anserini's BEIR default)."""
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    """The bm25s scoring variant. ``lucene`` (the default) never gives negative IDF."""
    delta: float = Field(default=0.5, ge=0)
    """The delta of the bm25l and bm25+ variants; ignored by the others."""


class BM25Index:
    """BM25 over rows 0..n-1, scored by bm25s from precomputed sparse term weights.

    A query costs one sparse row sum per query term, not a loop over documents. Each row's
    term counts are kept as CSR arrays, so :meth:`add` and :meth:`delete` can recompute the
    weights (which depend on corpus-wide IDF and average length) in the same row order as
    the other indexes. The weight matrix is built with vectorised NumPy using bm25s's own
    formulas and layout (identical to ``bm25s.BM25.index``, which loops in Python), then
    handed to a ``bm25s.BM25`` for scoring and saving.
    """

    def __init__(self, analyzer: Analyzer | None = None, params: BM25Params | None = None) -> None:
        """Create an empty index that will tokenize with ``analyzer`` and score with ``params``."""
        self.analyzer = analyzer or Analyzer()
        self.params = params or BM25Params()
        self._vocab: dict[str, int] = {}
        # Term counts per row, CSR: row r holds terms[indptr[r]:indptr[r+1]] with counts tf[...].
        self._indptr = np.zeros(1, dtype=np.int64)
        self._terms = np.zeros(0, dtype=np.int32)
        self._tf = np.zeros(0, dtype=np.int32)
        self._lengths = np.zeros(0, dtype=np.int32)  # tokens per row, repeats included
        self._model: bm25s.BM25 | None = None
        self._word_ids = _WordMemo(self._word_to_id)

    def _word_to_id(self, word: str) -> int:
        """Vocabulary id of a raw word's token (new tokens get new ids); -1 if it is dropped."""
        token = self.analyzer.normalize_word(word)
        return -1 if token is None else self._vocab.setdefault(token, len(self._vocab))

    def __len__(self) -> int:
        return int(self._lengths.size)

    @property
    def vocabulary_size(self) -> int:
        """Number of distinct tokens seen in the indexed rows."""
        return len(self._vocab)

    def add(self, texts: Sequence[str]) -> None:
        """Append one row per text and re-weight the whole index."""
        for start in range(0, len(texts), _ADD_BATCH):
            self._append_rows(texts[start : start + _ADD_BATCH])
        self._rebuild()

    def _append_rows(self, texts: Sequence[str]) -> None:
        vocab, analyzer = self._vocab, self.analyzer
        word_ids = self._word_ids
        parts: list[NDArray[np.int64]] = []
        lengths = np.empty(len(texts), dtype=np.int32)
        for row, text in enumerate(texts):
            ids = np.fromiter(map(word_ids.__getitem__, analyzer.split_words(text)), dtype=np.int64)
            ids = ids[ids >= 0]  # -1 marks dropped words
            lengths[row] = ids.size
            parts.append(ids)
        ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        # Count (row, term) pairs: sort combined keys, then run-length encode them.
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        keys = rows * max(len(vocab), 1) + ids
        keys.sort()
        if keys.size:
            starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
            counts = np.diff(np.append(starts, keys.size)).astype(np.int32)
            pairs = keys[starts]
        else:
            counts, pairs = np.zeros(0, np.int32), np.zeros(0, np.int64)
        pair_rows = pairs // max(len(vocab), 1)
        per_row = np.bincount(pair_rows, minlength=len(texts))
        self._indptr = np.concatenate((self._indptr, self._indptr[-1] + np.cumsum(per_row)))
        self._terms = np.concatenate((self._terms, (pairs % max(len(vocab), 1)).astype(np.int32)))
        self._tf = np.concatenate((self._tf, counts))
        self._lengths = np.concatenate((self._lengths, lengths))

    def delete(self, rows: NDArray[np.int64]) -> None:
        """Remove the given rows; the remaining rows keep their relative order."""
        keep_rows = np.ones(len(self), dtype=bool)
        keep_rows[np.asarray(rows, dtype=np.int64)] = False
        per_row = np.diff(self._indptr)
        keep_entries = np.repeat(keep_rows, per_row)
        self._terms, self._tf = self._terms[keep_entries], self._tf[keep_entries]
        self._indptr = np.concatenate(([0], np.cumsum(per_row[keep_rows]))).astype(np.int64)
        self._lengths = self._lengths[keep_rows]
        self._rebuild()

    def _rebuild(self) -> None:
        n, vocab_size = len(self), len(self._vocab)
        if n == 0 or self._terms.size == 0:
            self._model = None
            return
        p = self.params
        model = bm25s.BM25(k1=p.k1, b=p.b, delta=p.delta, method=p.method)
        doc_freq = np.bincount(self._terms, minlength=vocab_size)
        frequencies = {term: int(df) for term, df in enumerate(doc_freq)}
        avg_len = float(self._lengths.mean())
        idf = bm25s_scoring._build_idf_array(
            frequencies, n, bm25s_scoring._select_idf_scorer(model.idf_method), dtype="float32"
        )
        # Go straight to bm25s's layout, a CSC matrix (rows = documents, columns = terms):
        # entries sorted by term, each holding its document row and its weight.
        order = np.argsort(self._terms, kind="stable")
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(self._indptr))[order]
        tf = self._tf[order].astype(np.float32)
        del order
        terms = np.repeat(np.arange(vocab_size, dtype=np.int32), doc_freq)
        weights = bm25s_scoring._select_tfc_scorer(p.method)(
            tf_array=tf, l_d=self._lengths[rows].astype(np.float32), l_avg=avg_len, k1=p.k1, b=p.b, delta=p.delta
        ).astype(np.float32, copy=False)
        del tf
        weights *= idf[terms]
        if p.method in model.methods_requiring_nonoccurrence:
            model.nonoccurrence_array = bm25s_scoring._build_nonoccurrence_array(
                frequencies,
                n,
                bm25s_scoring._select_idf_scorer(model.idf_method),
                bm25s_scoring._select_tfc_scorer(p.method),
                l_d=avg_len,
                l_avg=avg_len,
                k1=p.k1,
                b=p.b,
                delta=p.delta,
                dtype="float32",
            )
            weights -= model.nonoccurrence_array[terms]
        else:
            model.nonoccurrence_array = None
        del terms
        model.scores = {
            "data": weights,
            "indices": rows,
            "indptr": np.concatenate(([0], np.cumsum(doc_freq))).astype(np.int64),
            "num_docs": n,
        }
        model.vocab_dict = dict(self._vocab)
        model.unique_token_ids_set = set(self._vocab.values())
        self._model = model

    def query_token_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's tokens; tokens never seen in the corpus are dropped."""
        vocab = self._vocab
        return [vocab[t] for t in self.analyzer.tokenize(query) if t in vocab]

    def scores(self, query: str) -> NDArray[np.float32]:
        """BM25 score of every row for ``query`` (zeros when no query token is known)."""
        token_ids = self.query_token_ids(query)
        if self._model is None or not token_ids:
            return np.zeros(len(self), dtype=np.float32)
        return np.asarray(self._model.get_scores_from_ids(token_ids), dtype=np.float32)

    # --- persistence (arrays and JSON only) -------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write the term-count arrays, vocabulary and bm25s weights into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, array in self._arrays().items():
            np.save(folder / f"{name}.npy", array, allow_pickle=False)
        vocab_list = sorted(self._vocab, key=self._vocab.__getitem__)
        (folder / _VOCAB_FILE).write_text(json.dumps(vocab_list, ensure_ascii=False), encoding="utf-8")
        if self._model is not None:
            self._model.save(str(folder / _WEIGHTS_DIR), show_progress=False)

    def _arrays(self) -> dict[str, NDArray[np.int64] | NDArray[np.int32]]:
        return {"row_indptr": self._indptr, "row_terms": self._terms, "row_tf": self._tf, "row_lengths": self._lengths}

    @classmethod
    def load(cls, folder: Path, analyzer: Analyzer, params: BM25Params) -> BM25Index:
        """Read an index written by :meth:`save` (weights are loaded, not recomputed)."""
        index = cls(analyzer, params)
        arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in index._arrays()}
        index._indptr, index._terms = arrays["row_indptr"], arrays["row_terms"]
        index._tf, index._lengths = arrays["row_tf"], arrays["row_lengths"]
        if index._indptr.size != index._lengths.size + 1 or index._terms.size != index._tf.size:
            raise ValueError("BM25 term-count arrays have inconsistent sizes")
        vocab_list = json.loads((folder / _VOCAB_FILE).read_text(encoding="utf-8"))
        index._vocab = {tok: i for i, tok in enumerate(vocab_list)}
        if (folder / _WEIGHTS_DIR).is_dir():
            index._model = bm25s.BM25.load(str(folder / _WEIGHTS_DIR), show_progress=False, verbosity=0)
        return index
