"""The BM25 side: scores against independent references, and alignment under add/delete."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from langchain_fusion.analyzer import Analyzer
from langchain_fusion.bm25 import BM25Index, BM25Params

CORPUS = [
    "solar panels charge the battery bank during the day",
    "the inverter converts battery power for the village grid",
    "monsoon floods damaged the battery room in july",
    "technicians replaced the inverter fan and cleaned the panels",
    "tariffs are lower at midday when solar output peaks",
    "the grain mill runs on solar power at midday",
    "a lightning strike tripped the surge protection",
    "training covered earthing surge protection and safe isolation",
]


def lucene_bm25(corpus_tokens: list[list[str]], query_tokens: list[str], k1: float, b: float) -> list[float]:
    """Textbook BM25 with Lucene's IDF, written out in plain Python as a reference."""
    n = len(corpus_tokens)
    avgdl = sum(len(d) for d in corpus_tokens) / n
    df = Counter(t for d in corpus_tokens for t in set(d))
    scores = []
    for doc in corpus_tokens:
        tf = Counter(doc)
        score = 0.0
        for term in query_tokens:
            if tf[term] == 0:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf[term] / (tf[term] + k1 * (1 - b + b * len(doc) / avgdl))
        scores.append(score)
    return scores


class TestBM25Index:
    @pytest.mark.parametrize("query", ["battery inverter", "solar midday", "surge protection earthing", "floods"])
    def test_matches_textbook_lucene_formula(self, query: str) -> None:
        analyzer = Analyzer()
        index = BM25Index(analyzer, BM25Params(k1=1.2, b=0.75))
        index.add(CORPUS)
        expected = lucene_bm25([analyzer.tokenize(t) for t in CORPUS], analyzer.tokenize(query), 1.2, 0.75)
        assert index.scores(query) == pytest.approx(expected, rel=1e-5)

    @pytest.mark.parametrize("query", ["inverter fan", "lightning surge", "grain mill midday", "monsoon july"])
    def test_robertson_agrees_with_rank_bm25(self, query: str) -> None:
        # rank_bm25's BM25Okapi uses Robertson's IDF and includes the (k1 + 1) factor that
        # bm25s leaves out; they agree wherever every query term occurs in under half the
        # documents (no negative IDF, so rank_bm25's epsilon floor never applies).
        analyzer = Analyzer.whitespace()
        tokens = [analyzer.tokenize(t) for t in CORPUS]
        query_tokens = analyzer.tokenize(query)
        assert all(sum(term in doc for doc in tokens) < len(CORPUS) / 2 for term in query_tokens)
        params = BM25Params(k1=1.5, b=0.75, method="robertson")
        index = BM25Index(analyzer, params)
        index.add(CORPUS)
        reference = BM25Okapi(tokens, k1=1.5, b=0.75).get_scores(query_tokens)
        assert index.scores(query) * (params.k1 + 1) == pytest.approx(reference, rel=1e-5)

    def test_unknown_terms_score_zero(self) -> None:
        index = BM25Index()
        index.add(CORPUS)
        assert not index.scores("zebra xylophone").any()
        assert not index.scores("").any()
        assert index.query_token_ids("the and") == []  # stopwords only

    def test_empty_index(self) -> None:
        index = BM25Index()
        index.add([])
        assert len(index) == 0
        assert index.scores("battery").shape == (0,)

    def test_documents_without_tokens(self) -> None:
        index = BM25Index()
        index.add(["", "the of and", "battery"])
        assert index.scores("battery").tolist()[:2] == [0.0, 0.0]
        assert index.scores("battery")[2] > 0

    def test_add_and_delete_equal_a_fresh_build(self) -> None:
        grown = BM25Index()
        grown.add(CORPUS[:3])
        grown.add(CORPUS[3:])
        grown.delete(np.array([1, 5]))
        expected_texts = [t for i, t in enumerate(CORPUS) if i not in (1, 5)]
        fresh = BM25Index()
        fresh.add(expected_texts)
        for query in ("battery inverter", "solar midday", "surge"):
            assert grown.scores(query) == pytest.approx(fresh.scores(query), rel=1e-6)

    def test_save_and_load(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        index = BM25Index(Analyzer(stemmer=None), BM25Params(k1=0.9, b=0.4))
        index.add(CORPUS)
        index.save(tmp_path / "bm25")
        loaded = BM25Index.load(tmp_path / "bm25", index.analyzer, index.params)
        assert loaded.scores("battery panels") == pytest.approx(index.scores("battery panels"))
        loaded.add(["battery battery battery"])
        assert int(np.argmax(loaded.scores("battery"))) == len(CORPUS)


class TestAnalyzer:
    def test_default_lowercases_splits_stems_and_drops_stopwords(self) -> None:
        assert Analyzer().tokenize("The Batteries were CHARGING: KV-3300!") == [
            "batteri",
            "were",
            "charg",
            "kv",
            "3300",
        ]

    def test_unicode(self) -> None:
        assert Analyzer(stemmer=None).tokenize("Über Café naïve") == ["über", "café", "naïve"]

    def test_whitespace_is_str_split(self) -> None:
        text = "The  quick, brown\tFox"
        assert Analyzer.whitespace().tokenize(text) == text.split()

    def test_switches(self) -> None:
        assert Analyzer(stopwords=None, stemmer=None).tokenize("the cats") == ["the", "cats"]
        assert Analyzer(min_token_length=3).tokenize("a kv unit") == ["unit"]

    def test_is_serialisable_config(self) -> None:
        analyzer = Analyzer(stemmer=None, min_token_length=2)
        assert Analyzer.model_validate_json(analyzer.model_dump_json()) == analyzer

    def test_rejects_unknown_options(self) -> None:
        with pytest.raises(ValueError):
            Analyzer(stemmer="klingon")  # type: ignore[arg-type]


class TestVectorisedBuild:
    """Our NumPy build of the weight matrix equals bm25s's own (Python-loop) build."""

    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    def test_same_matrix_as_bm25s(self, method: str) -> None:
        import bm25s

        params = BM25Params(k1=1.3, b=0.6, method=method)  # type: ignore[arg-type]
        index = BM25Index(Analyzer(), params)
        index.add(CORPUS * 3)
        reference = bm25s.BM25(k1=1.3, b=0.6, method=method)
        ids = [[index._vocab[t] for t in index.analyzer.tokenize(text)] for text in CORPUS * 3]
        reference.index((ids, dict(index._vocab)), create_empty_token=False, show_progress=False)
        ours = index._model.scores  # type: ignore[union-attr]
        np.testing.assert_array_equal(ours["indptr"], reference.scores["indptr"])
        np.testing.assert_array_equal(ours["indices"], reference.scores["indices"])
        np.testing.assert_allclose(ours["data"], reference.scores["data"], rtol=1e-6)
        for query in ("battery inverter", "surge midday"):
            expected = reference.get_scores(index.analyzer.tokenize(query))
            np.testing.assert_allclose(index.scores(query), expected, rtol=1e-6)

    def test_batches_are_equivalent_to_one_add(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import langchain_fusion.bm25 as module

        whole = BM25Index()
        whole.add(CORPUS)
        monkeypatch.setattr(module, "_ADD_BATCH", 3)
        batched = BM25Index()
        batched.add(CORPUS)
        np.testing.assert_allclose(batched.scores("battery solar surge"), whole.scores("battery solar surge"))
