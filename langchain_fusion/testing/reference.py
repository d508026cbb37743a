"""What the store contract checks against: random corpora and a brute-force fused search in plain Python and NumPy.

:class:`Reference` scores every document on both sides from first principles (the textbook BM25
formula over the default analyzer's tokens, cosine over the fake embeddings' vectors) and fuses
them as the library documents; :func:`results` and :func:`assert_same` compare a store's fused
results with it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.settings import BM25Params
from langchain_fusion.testing.embeddings import HashingEmbeddings

Vector = NDArray[np.float64]
"""A score per document (or per candidate)."""


@dataclass(frozen=True)
class Language:
    """The words documents are written in, how they are joined, and the queries asked of them."""

    vocabulary: list[str]
    """Words, most frequent first (drawn from a Zipf distribution)."""
    queries: list[str]
    """Queries the suite asks (one of them matches nothing)."""
    separator: str = " "
    """What joins words: a space, or nothing for scripts written without spaces."""


WORDS = Language(
    vocabulary=[f"w{i}" for i in range(50)],
    queries=["w0 w3", "w7", "w1 w1 w12 w30", "w49 w48", "nothing known here", "w2 w5 w9 w11"],
)
"""Plain space-separated words: one token each."""

# fmt: off
CJK = Language(
    vocabulary=[
        "の", "は", "東京", "日本", "首都", "が", "を", "电池", "洪水", "中", "完好", "无损", "机架", "安装", "高处",
        "検索", "データ", "서울", "무사히", "도착", "getLogger", "get_logger", "KV-3300", "KV3300", "HTTPStatus",
        "http_status", "它们", "因为", "被", "上", "文書", "全文", "索引", "形態素", "ひらがな", "カタカナ", "漢字",
        "简体", "繁體", "한국어", "문장", "v2", "GC-9", "富士山", "大阪", "北京", "上海", "深圳", "인천",
    ],
    queries=["東京の首都", "电池", "get logger", "KV3300データ検索", "nothing known here", "서울 무사히"],
    separator="",
)
"""Chinese, Japanese and Korean written without spaces, with identifiers in several styles among them:
every token comes from the default analyzer's bigrams and identifier splits."""
# fmt: on


def corpus(seed: int, size: int, prefix: str = "d", language: Language = WORDS) -> list[Document]:
    """``size`` random documents over a Zipf vocabulary, with a ``bucket`` and a ``source`` for filters.

    Ids are ``{prefix}{seed}-{i}``; the same seed gives the same documents.
    """
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(language.vocabulary) + 1)
    weights /= weights.sum()
    docs = []
    for i in range(size):
        words = rng.choice(language.vocabulary, size=int(rng.integers(3, 30)), p=weights)
        docs.append(
            Document(
                id=f"{prefix}{seed}-{i}",
                page_content=language.separator.join(words),
                metadata={"bucket": int(i % 3), "source": f"s{i % 5}.txt", "chunk_index": i // 5},
            )
        )
    return docs


class Reference:
    """Brute-force fused search over a list of documents (the live rows in row order)."""

    def __init__(self, docs: list[Document], embeddings: HashingEmbeddings, params: BM25Params) -> None:
        """Score ``docs`` with ``embeddings`` (normalised vectors) and BM25 with ``params`` (Okapi)."""
        self.docs = docs
        """The documents, in row order."""
        self.analyzer = Analyzer()
        """The default analyzer, whose tokens BM25 counts."""
        self.params = params
        """The BM25 parameters (``k1``, ``b``)."""
        self.tokens = [self.analyzer.tokenize(d.page_content) for d in docs]
        """Each document's tokens."""
        vectors = np.array(embeddings.embed_documents([d.page_content for d in docs]), dtype=np.float64)
        self.vectors: Vector = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        """Each document's unit vector (one row each)."""
        self.embeddings = embeddings
        """The embeddings of the queries."""

    def bm25(self, query: str) -> Vector:
        """The Okapi BM25 score of every document for ``query`` (Lucene's idf), one term at a time."""
        n = len(self.tokens)
        avg = sum(map(len, self.tokens)) / n
        df = Counter(t for doc in self.tokens for t in set(doc))
        k1, b = self.params.k1, self.params.b
        scores = []
        for doc in self.tokens:
            tf = Counter(doc)
            scores.append(
                sum(
                    math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    * tf[t]
                    / (tf[t] + k1 * (1 - b + b * len(doc) / avg))
                    for t in self.analyzer.tokenize(query)
                    if tf[t]
                )
            )
        return np.array(scores, dtype=np.float64)

    def cosine(self, query: str) -> Vector:
        """The cosine similarity of every document with ``query``."""
        q = np.array(self.embeddings.embed_query(query), dtype=np.float64)
        return np.asarray(self.vectors @ (q / np.linalg.norm(q)), dtype=np.float64)

    def search(
        self, query: str, *, k: int, alpha: float, method: str, allowed: NDArray[np.bool_] | None = None
    ) -> list[tuple[str, float]]:
        """(id, fused score) of the best ``k`` ``allowed`` rows, fused over the whole corpus (``fetch_k=None``)."""
        cosine, bm25 = self.cosine(query), self.bm25(query)
        rows = np.arange(len(self.docs)) if allowed is None else np.flatnonzero(allowed)
        if alpha == 0:
            rows = rows[bm25[rows] > 0]
        if rows.size == 0:
            return []
        v, s = cosine[rows], bm25[rows]
        if method == "weighted":
            vn, bn = _min_max(v), _min_max(s)
        elif method == "zscore":
            vn, bn = _z(v), _z(s)
        else:
            vr, br = _ranks(v), _ranks(s)
            vn = 1.0 / (60 + vr)
            bn = np.where(s > 0, 1.0 / (60 + br), 0.0)
        fused = alpha * vn + (1 - alpha) * bn
        heavier = v if alpha >= 0.5 else s
        order = np.lexsort((rows, -heavier, -fused))[:k]
        return [(self.docs[rows[i]].id or "", float(fused[i])) for i in order]


def _min_max(x: Vector) -> Vector:
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.full_like(x, 1.0 if hi > 0 else 0.0)


def _z(x: Vector) -> Vector:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def _ranks(x: Vector) -> Vector:
    """1 + the number of scores above (tied scores share a rank); BM25 ranks count matching rows only."""
    valid = x > 0
    above = np.array([np.count_nonzero(x > v) for v in x], dtype=np.float64)
    above_matched = np.array([np.count_nonzero(x[valid] > v) for v in x], dtype=np.float64)
    return 1 + (np.where(valid, above_matched, above) if (~valid).any() else above)


def results(index: FusionIndex, query: str, **options: Any) -> list[tuple[str, float]]:
    """(id, fused score) of a fused search of ``index`` with these retriever ``options``."""
    docs = index.as_retriever(**options).invoke(query)
    return [(d.id or "", d.metadata[keys.FUSION_SCORE]) for d in docs]


def assert_same(got: list[tuple[str, float]], expected: list[tuple[str, float]], tolerance: float = 1e-5) -> None:
    """Same ids and fused scores, in order; documents with exactly equal scores may come in either order.

    Ties (within float noise) are broken by row key, which is insertion order in process and first-sight order
    on a remote store, so only their order may differ (the scores may not).
    """
    assert len(got) == len(expected), (got, expected)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=tolerance)
    for position, ((got_id, score), (expected_id, _)) in enumerate(zip(got, expected, strict=True)):
        if got_id != expected_id:
            tied = [i for i, (_, other) in enumerate(expected) if abs(other - score) <= 1e-6]
            assert tied and (position in tied or position == len(expected) - 1), (got, expected)
