"""The BM25 side: scores against independent references, and alignment under add/delete."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document
from numpy.typing import NDArray
from rank_bm25 import BM25Okapi

from langchain_fusion import BM25Retriever
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.languages import Language
from langchain_fusion.stores.local import bm25 as bm25_module
from langchain_fusion.stores.local import mutations as mutations_module
from langchain_fusion.stores.local import postings as postings_module
from langchain_fusion.stores.local.bm25 import BM25Corpus, QueryWeights
from langchain_fusion.stores.local.mutations import maintained
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.local.term_weights import BlockWeights, TermWeights
from langchain_fusion.stores.local.tokens import query_term_counts, text_token_ids
from langchain_fusion.stores.settings import BM25Params
from tests.helpers.bm25 import blocks_of, weights_for, zipf_corpus

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

Scorer = Callable[[str], NDArray[np.float32]]


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


def add_texts(store: LocalStore, texts: Sequence[str], first_id: int = 0) -> list[str]:
    """Add ``texts`` as rows of ``store`` (ids ``t<n>``, dummy unit vectors); returns the ids."""
    ids = [f"t{first_id + i}" for i in range(len(texts))]
    vectors = np.zeros((len(texts), 4), dtype=np.float32)
    vectors[:, 0] = 1.0
    store.upsert([Document(id=i, page_content=t) for i, t in zip(ids, texts, strict=True)], vectors, list(texts))
    return ids


def store_of(texts: Sequence[str], analyzer: Analyzer | None = None, params: BM25Params | None = None) -> LocalStore:
    store = LocalStore(analyzer, params)
    add_texts(store, texts)
    return store


def scorers(texts: Sequence[str], analyzer: Analyzer, params: BM25Params) -> list[Scorer]:
    """The two BM25 implementations under test: the store's postings and the standalone corpus."""
    store = store_of(texts, analyzer, params)
    return [store.snapshot.bm25_scores_all, BM25Corpus(texts, analyzer, params).scores]


def store_scores(store: LocalStore, ids: Sequence[str], query: str) -> NDArray[np.float64]:
    """BM25 scores of the rows with ``ids`` (in that order) through the store's read view."""
    view = store.view()
    keys = view.keys_of(list(ids))
    assert (keys >= 0).all()
    return view.bm25(query).scores(keys)


class TestBM25Scores:
    @pytest.mark.parametrize("query", ["battery inverter", "solar midday", "surge protection earthing", "floods"])
    def test_matches_textbook_lucene_formula(self, query: str) -> None:
        analyzer = Analyzer()
        expected = lucene_bm25([analyzer.tokenize(t) for t in CORPUS], analyzer.tokenize(query), 1.2, 0.75)
        for scores in scorers(CORPUS, analyzer, BM25Params(k1=1.2, b=0.75)):
            assert scores(query) == pytest.approx(expected, rel=1e-5)

    def test_default_params_are_lucene_k1_0_9_b_0_4(self) -> None:
        analyzer = Analyzer()
        assert BM25Params() == BM25Params(k1=0.9, b=0.4, method="lucene")
        expected = lucene_bm25([analyzer.tokenize(t) for t in CORPUS], analyzer.tokenize("battery solar"), 0.9, 0.4)
        for scores in scorers(CORPUS, analyzer, BM25Params()):
            assert scores("battery solar") == pytest.approx(expected, rel=1e-5)

    @pytest.mark.parametrize("query", ["inverter fan", "lightning surge", "grain mill midday", "monsoon july"])
    def test_robertson_agrees_with_rank_bm25(self, query: str) -> None:
        # rank_bm25's BM25Okapi uses Robertson's IDF and includes the (k1 + 1) factor that
        # bm25s (and so this library) leaves out; they agree wherever every query term occurs
        # in under half the documents (no negative IDF, so rank_bm25's epsilon floor never applies).
        analyzer = Analyzer.whitespace()
        tokens = [analyzer.tokenize(t) for t in CORPUS]
        query_tokens = analyzer.tokenize(query)
        assert all(sum(term in doc for doc in tokens) < len(CORPUS) / 2 for term in query_tokens)
        params = BM25Params(k1=1.5, b=0.75, method="robertson")
        reference = BM25Okapi(tokens, k1=1.5, b=0.75).get_scores(query_tokens)
        for scores in scorers(CORPUS, analyzer, params):
            assert scores(query) * (params.k1 + 1) == pytest.approx(reference, rel=1e-5)

    def test_unknown_terms_score_zero(self) -> None:
        for scores in scorers(CORPUS, Analyzer(), BM25Params()):
            assert not scores("zebra xylophone").any()
            assert not scores("").any()
            assert not scores("the and").any()
        snap = store_of(CORPUS).snapshot
        assert query_term_counts(snap.settings.analyzer, snap.vocabulary, "the and") == Counter()  # stopwords only

    def test_empty_index(self) -> None:
        assert BM25Corpus([], Analyzer(), BM25Params()).scores("battery").shape == (0,)
        store = store_of([])
        assert len(store.view()) == 0
        assert store.snapshot.bm25_scores_all("battery").shape == (0,)
        assert store.view().bm25("battery").top(5)[0].size == 0

    def test_documents_without_tokens(self) -> None:
        for scores in scorers(["", "the of and", "battery"], Analyzer(), BM25Params()):
            assert scores("battery").tolist()[:2] == [0.0, 0.0]
            assert scores("battery")[2] > 0

    @pytest.mark.parametrize("compact", [True, False], ids=["compacted", "tombstones"])
    def test_add_and_delete_equal_a_fresh_build(self, compact: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        if not compact:  # keep the deleted rows as tombstones: statistics must still ignore them
            monkeypatch.setattr(mutations_module, "COMPACT_DEAD_RATIO", 2.0)
        grown = LocalStore()
        ids = add_texts(grown, CORPUS[:3])
        ids += add_texts(grown, CORPUS[3:], first_id=3)
        assert grown.delete([ids[1], ids[5]]) == 2
        assert (grown.snapshot.dead_count > 0) is not compact
        kept = [i for i in range(len(CORPUS)) if i not in (1, 5)]
        fresh = store_of([CORPUS[i] for i in kept])
        for query in ("battery inverter", "solar midday", "surge"):
            expected = fresh.snapshot.bm25_scores_all(query)
            assert store_scores(grown, [ids[i] for i in kept], query) == pytest.approx(expected, rel=1e-6)
            found, _ = grown.view().bm25(query).top(None)
            assert not {ids[1], ids[5]} & {d.id for d in grown.view().documents(found)}

    def test_save_and_load(self, tmp_path: Path) -> None:
        analyzer, params = Analyzer(stemmer=None), BM25Params(k1=0.9, b=0.4)
        store = store_of(CORPUS, analyzer, params)
        store.save(tmp_path / "bm25")
        loaded, _ = LocalStore.load(tmp_path / "bm25", analyzer)
        assert (loaded.settings.analyzer, loaded.settings.bm25_params) == (analyzer, params)
        np.testing.assert_allclose(
            loaded.snapshot.bm25_scores_all("battery panels"), store.snapshot.bm25_scores_all("battery panels")
        )
        add_texts(loaded, ["battery battery battery"], first_id=len(CORPUS))
        assert int(np.argmax(loaded.snapshot.bm25_scores_all("battery"))) == len(CORPUS)


class TestAnalyzer:
    def test_default_lowercases_splits_stems_and_drops_stopwords(self) -> None:
        assert Analyzer().tokenize("The Batteries were CHARGING: KV-3300!") == [
            "batteri",
            "were",
            "charg",
            "kv",
            "3300",
            "kv3300",
        ]

    def test_indexes_saved_before_keep_their_analysis(self) -> None:
        legacy = Analyzer.model_validate(Analyzer.from_saved({"stemmer": "english", "stopwords": "english"}))
        assert legacy.is_legacy and not Analyzer().is_legacy
        assert legacy.tokenize("The Batteries were CHARGING: KV-3300! 東京は日本") == [
            "batteri",
            "were",
            "charg",
            "kv",
            "3300",
            "東京は日本",
        ]

    @pytest.mark.parametrize(
        ("forms", "tokens"),
        [
            (["getLogger", "get_logger", "get-logger", "GetLogger"], ["get", "logger", "getlogger"]),
            (["HTTPStatus", "http_status", "HTTP-Status"], ["http", "status", "httpstatus"]),
            (["KV3300", "KV-3300", "kv_3300"], ["kv", "3300", "kv3300"]),
            (["parseJSON2XML"], ["pars", "json", "2", "xml", "parsejson2xml"]),
        ],
    )
    def test_identifiers_meet_whatever_their_style(self, forms: list[str], tokens: list[str]) -> None:
        for form in forms:
            assert Analyzer().tokenize(form) == tokens, form
        assert Analyzer().tokenize("get logger") == ["get", "logger"]  # the words meet the parts
        assert Analyzer(identifiers=False).tokenize("getLogger get_logger") == ["getlogg", "get_logg"]

    def test_unspaced_scripts_become_bigrams(self) -> None:
        assert Analyzer().tokenize("東京は日本の首都") == ["東京", "京は", "は日", "日本", "本の", "の首", "首都"]
        assert Analyzer().tokenize("北京") == ["北京"] and Analyzer().tokenize("京") == ["京"]
        assert Analyzer().tokenize("서울은 한국의 수도") == ["서울", "울은", "한국", "국의", "수도"]
        assert Analyzer().tokenize("ภาษาไทย") == ["ภา", "าษ", "ษา", "าไ", "ไท", "ทย"]
        assert Analyzer().tokenize("iPhone15は便利") == ["i", "phone", "15", "iphone15", "は便", "便利"]
        assert Analyzer(scripts="runs").tokenize("東京は日本") == ["東京は日本"]

    def test_words_keep_their_marks_and_compatibility_forms_fold(self) -> None:
        # vowel signs stay inside the word
        assert Analyzer(languages="configured").tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
        assert Analyzer().tokenize("Ｆｕｌｌ ｗｉｄｔｈ ２０２４") == ["full", "width", "2024"]
        assert Analyzer().tokenize("ﬁnance") == Analyzer().tokenize("finance")

    def test_stemming_and_stopwords_only_in_their_script(self) -> None:
        assert Analyzer(languages="configured").tokenize("Москва running") == ["москва", "run"]
        assert Analyzer().tokenize("Москва running") == ["москв", "run"]  # Cyrillic words: Russian's stemmer
        russian = Analyzer(language="russian")
        assert (russian.stemmer, russian.stopwords) == ("russian", "russian")
        assert russian.tokenize("Москва и Россия running") == ["москв", "росс", "running"]
        assert Analyzer(language="greek").stopwords is None  # no list for Greek: stemming only
        with pytest.raises(ValueError):
            Analyzer(language="klingon")

    def test_unicode(self) -> None:
        assert Analyzer(stemmer=None).tokenize("Über Café naïve") == ["über", "café", "naïve"]

    def test_case_folding(self) -> None:
        # str.casefold, not str.lower: Straße and strasse meet, so do the two Greek sigmas.
        german = Analyzer(language="german")
        assert german.tokenize("Straße STRASSE strasse") == german.tokenize("strasse") * 3
        assert Analyzer(stemmer=None).tokenize("ΣΟΦΟΣ σοφος σοφοσ") == ["σοφοσ"] * 3
        assert Analyzer(casefold=False, stemmer=None).tokenize("Straße") == ["straße"]  # lower-casing only
        assert Analyzer(lowercase=False, stemmer=None).tokenize("Straße") == ["Straße"]

    def test_indexes_saved_before_case_folding_keep_lower_casing(self, tmp_path: Path) -> None:
        from langchain_fusion import FusionIndex
        from langchain_fusion.stores.local.manifest import CHECKSUM, manifest_checksum
        from tests.helpers.embeddings import HashingEmbeddings

        saved = Analyzer.from_saved({**Analyzer().model_dump(mode="json"), "casefold": None})
        saved.pop("casefold")
        assert Analyzer.model_validate(Analyzer.from_saved(saved)).casefold is False
        docs = [Document(id="s", page_content="Straße 9")]
        index = FusionIndex.from_documents(docs, HashingEmbeddings(), analyzer=Analyzer(casefold=False))
        folder = index.save(tmp_path / "idx")  # analysed as before the option: lower-cased
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        assert manifest["bm25"]["analyzer"].pop("casefold") is False  # now as a save before it looked
        manifest[CHECKSUM] = manifest_checksum(manifest)
        path.write_text(json.dumps(manifest), encoding="utf-8")
        loaded = FusionIndex.load(folder, HashingEmbeddings())
        assert loaded.analyzer.casefold is False  # it keeps analysing as it was built: straße, not strasse
        assert BM25Retriever(index=loaded).invoke("strasse") == []
        assert [d.id for d in BM25Retriever(index=loaded).invoke("Straße")] == ["s"]
        folded = FusionIndex.from_documents(docs, HashingEmbeddings())  # a new index folds case
        assert [d.id for d in BM25Retriever(index=folded).invoke("strasse")] == ["s"]

    def test_a_long_unbroken_run_of_han_skips_the_per_piece_analysis(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # 5 M characters of Chinese without a space took ~35 s: each bigram went through the identifier rules.
        text = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))
        expected = [text[i : i + 2] for i in range(len(text) - 1)]
        pieces: list[str] = []
        real = Analyzer.piece_tokens

        def counted(self: Analyzer, piece: str, language: Language | None = None) -> tuple[str, ...]:
            pieces.append(piece)
            return real(self, piece, language)

        monkeypatch.setattr(Analyzer, "piece_tokens", counted)
        assert Analyzer().tokenize(text) == expected
        assert pieces == []

    @pytest.mark.parametrize("seed", range(6))
    def test_the_fast_bigrams_equal_the_general_rules(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        letters = list("東京日本の首都は〇々ゝカタカナひらがなー한국어서울ㄱ가가각")
        alphabet = [*letters, "\u3099", "ｶ", "Ａ", "1", "x", "-", "_", " "]  # a mark, compatibility forms, words
        for min_length in (1, 2, 3):
            analyzer = Analyzer(min_token_length=min_length)

            class General(Analyzer):
                def piece_tokens(self, piece: str, language: Language | None = None) -> tuple[str, ...]:
                    return super().piece_tokens(piece, language)  # overridden: the fast path stands aside

            general = General(min_token_length=min_length)
            for _ in range(40):
                text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 30))))
                assert analyzer.tokenize(text) == general.tokenize(text), repr(text)

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


class TestTokenIds:
    """Texts to term ids: the same ids, in the same order, as one ``setdefault`` per token."""

    class Upper(Analyzer):
        def tokenize(self, text: str) -> list[str]:
            return text.upper().split()

    @pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer.whitespace(), Upper()], ids=["default", "ws", "custom"])
    def test_ids_are_assigned_in_order_of_first_appearance(self, analyzer: Analyzer) -> None:
        texts = ["getLogger reads the running logs", "", "logs, logs and more logs", "Überprüfung 東京都 x1"]
        vocabulary = {"logs": 0, "unused": 1}
        expected_vocabulary = dict(vocabulary)
        expected = [
            [expected_vocabulary.setdefault(token, len(expected_vocabulary)) for token in analyzer.tokenize(text)]
            for text in texts
        ]
        ids, lengths = text_token_ids(analyzer, texts, vocabulary)
        assert vocabulary == expected_vocabulary and list(vocabulary) == list(expected_vocabulary)
        assert lengths.tolist() == [len(row) for row in expected]
        assert ids.tolist() == [term for row in expected for term in row]


class TestBatchTermWeights:
    """A batch weighs each term once and shares it (dense over a block where the term is common)."""

    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    @pytest.mark.parametrize("dense_share", [0, bm25_module.DENSE_TERM_SHARE, 10**9], ids=["sparse", "", "dense"])
    def test_shared_weights_give_the_bits_of_each_query_alone(
        self, method: str, dense_share: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(bm25_module, "DENSE_TERM_SHARE", dense_share)
        rng = np.random.default_rng(11)
        docs = zipf_corpus(rng, 500, 90, duplicates=30)
        blocks = blocks_of(docs, 90, [130, 131, 400])  # a one-row segment among them
        params = BM25Params(method=method, k1=1.4, b=0.6)
        shared = TermWeights()
        for _ in range(25):  # queries share terms, so later ones add weights another query computed
            source = docs[int(rng.integers(0, len(docs)))]
            query = Counter(rng.choice(source, size=min(source.size, int(rng.integers(1, 9)))).tolist())
            weights = weights_for(params, docs, query)
            batched = np.zeros(len(docs), dtype=np.float32)
            weights.add_scores(batched, blocks, shared)
            assert batched.tobytes() == weights.scores(len(docs), blocks).tobytes()
        dense = [key for key, part in shared.parts() if part.rows is None]
        assert bool(dense) == (dense_share > 0)  # the commonest term is in over a third of every block
        assert len(dense) < len(shared.parts()) or dense_share == 10**9

    def test_weights_past_the_budget_are_weighed_again_not_kept(self) -> None:
        rng = np.random.default_rng(5)
        docs = zipf_corpus(rng, 400, 60, duplicates=10)
        blocks = blocks_of(docs, 60, [150])
        shared = TermWeights(budget=4000)
        for _ in range(20):
            source = docs[int(rng.integers(0, len(docs)))]
            weights = weights_for(BM25Params(), docs, Counter(source[:6].tolist()))
            batched = np.zeros(len(docs), dtype=np.float32)
            weights.add_scores(batched, blocks, shared)
            assert batched.tobytes() == weights.scores(len(docs), blocks).tobytes()
        kept = sum(part.nbytes for _, part in shared.parts())
        assert 0 < kept <= 4000


class TestCommonTermWeights:
    """An index snapshot keeps its common terms' weights for every query; a batch's store reads and fills it first."""

    @staticmethod
    def run_queries(docs: list[NDArray[np.int64]], blocks: list, shared: TermWeights, method: str) -> None:
        rng = np.random.default_rng(3)
        params = BM25Params(method=method, k1=1.4, b=0.6)  # type: ignore[arg-type]
        for _ in range(20):
            source = docs[int(rng.integers(0, len(docs)))]
            weights = weights_for(params, docs, Counter(rng.choice(source, size=min(source.size, 6)).tolist()))
            kept = np.zeros(len(docs), dtype=np.float32)
            weights.add_scores(kept, blocks, shared)
            assert kept.tobytes() == weights.scores(len(docs), blocks).tobytes()

    @pytest.mark.parametrize("method", ["lucene", "bm25l", "bm25+"])
    def test_a_common_only_store_keeps_dense_weights_only_with_the_same_bits(self, method: str) -> None:
        docs = zipf_corpus(np.random.default_rng(11), 500, 90, duplicates=30)
        common = TermWeights(common_only=True)
        self.run_queries(docs, blocks_of(docs, 90, [130, 400]), common, method)
        assert common.parts() and all(part.rows is None for _, part in common.parts())

    def test_a_batch_store_gives_common_terms_to_its_parent_while_it_has_room(self) -> None:
        docs = zipf_corpus(np.random.default_rng(12), 500, 90, duplicates=30)
        blocks = blocks_of(docs, 90, [250])
        parent = TermWeights(common_only=True)
        batch = TermWeights(parent=parent)
        self.run_queries(docs, blocks, batch, "lucene")
        assert parent.parts() and all(part.rows is None for _, part in parent.parts())
        assert batch.parts() and all(part.rows is not None for _, part in batch.parts())
        assert all(batch.get(*key) is part for key, part in parent.parts())  # read through to the parent
        full = TermWeights(parent=TermWeights(0, common_only=True))
        self.run_queries(docs, blocks, full, "lucene")
        assert any(part.rows is None for _, part in full.parts())  # no room above: kept in the batch's own

    def test_a_store_with_no_room_keeps_nothing(self) -> None:
        docs = zipf_corpus(np.random.default_rng(13), 300, 60, duplicates=10)
        empty = TermWeights(0, common_only=True)
        self.run_queries(docs, blocks_of(docs, 60, []), empty, "lucene")
        assert not empty.parts()

    def test_a_snapshot_keeps_them_across_queries_and_a_change_starts_afresh(self) -> None:
        store = store_of(CORPUS)
        before = store.snapshot
        first = before.bm25_scores_all("battery inverter")
        common = before.common_term_weights()
        assert common.parts() and common is before.common_term_weights()
        assert before.bm25_scores_all("battery inverter").tobytes() == first.tobytes()
        add_texts(store, ["battery battery storage", "a quiet day"], first_id=len(CORPUS))
        after = store.snapshot
        assert after.common_term_weights() is not common  # new statistics, new weights
        fresh = after.bm25_weights("battery inverter")
        assert fresh is not None
        expected = fresh.scores(after.size, after.bm25_blocks())
        assert after.bm25_scores_all("battery inverter").tobytes() == expected.tobytes()
        assert after.bm25_scores_all("battery inverter").tobytes() == expected.tobytes()  # from its kept weights

    def test_weights_kept_per_segment_are_dropped_when_segments_merge(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(mutations_module, "MERGE_FACTOR", 0)  # every add stays a segment of its own
        store = store_of(CORPUS)
        add_texts(store, CORPUS[:4], first_id=len(CORPUS))
        split = store.snapshot
        assert len(split.segments) == 2
        split.bm25_scores_all("battery inverter")
        assert split.common_term_weights().parts()
        monkeypatch.setattr(mutations_module, "MERGE_FACTOR", 4)
        merged = maintained(split)
        assert len(merged.segments) == 1
        assert merged.common_term_weights() is not split.common_term_weights()
        merged.bm25_scores_all("battery inverter")
        assert maintained(merged).common_term_weights() is merged.common_term_weights()  # nothing merged: kept
        fresh = merged.bm25_weights("battery inverter")
        assert fresh is not None
        expected = fresh.scores(merged.size, merged.bm25_blocks())
        assert merged.bm25_scores_all("battery inverter").tobytes() == expected.tobytes()

    def test_keeping_never_waits_for_another_thread(self) -> None:
        """A store whose lock is held (another thread keeping, or a fork taken then) skips keeping instead."""
        store = TermWeights(common_only=True)
        dense = BlockWeights(None, np.ones(8, dtype=np.float32))
        store._lock.acquire()
        try:
            keeper = threading.Thread(target=store.keep, args=(1, 0, dense))
            keeper.start()
            keeper.join(10)
            assert not keeper.is_alive()
        finally:
            store._lock.release()
        assert store.get(1, 0) is None
        store.keep(1, 0, dense)
        assert store.get(1, 0) is dense


class TestAgainstBm25s:
    """Our postings, weighted at query time, equal bm25s's precomputed weight matrix."""

    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    def test_same_matrix_as_bm25s(self, method: str) -> None:
        import bm25s

        params = BM25Params(k1=1.3, b=0.6, method=method)  # type: ignore[arg-type]
        texts = CORPUS * 3
        analyzer = Analyzer()
        store = store_of(texts, analyzer, params)
        snapshot = store.snapshot
        (segment,) = snapshot.segments
        postings = segment.postings
        vocabulary = dict(snapshot.vocabulary)
        reference = bm25s.BM25(k1=1.3, b=0.6, method=method)
        ids = [[vocabulary[t] for t in analyzer.tokenize(text)] for text in texts]
        reference.index((ids, vocabulary), create_empty_token=False, show_progress=False)
        matrix = reference.scores
        np.testing.assert_array_equal(postings.indptr, matrix["indptr"])
        np.testing.assert_array_equal(postings.rows, matrix["indices"])
        # The weight of each posting, as a one-term query computes it, is bm25s's stored weight.
        for term in range(len(vocabulary)):
            weights = QueryWeights(
                params,
                Counter({term: 1}),
                snapshot.document_frequency,
                snapshot.live_count,
                snapshot.relative_lengths(),
            )
            # bm25s stores each weight minus what a row lacking the term gets (bm25l, bm25+).
            out = weights.scores(snapshot.size, [(postings, 0)]) - weights.nonoccurrence
            lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
            np.testing.assert_allclose(out[postings.rows[lo:hi]], matrix["data"][lo:hi], rtol=1e-6)
        for query in ("battery inverter", "surge midday", "battery battery panels"):
            expected = reference.get_scores(analyzer.tokenize(query))
            np.testing.assert_allclose(snapshot.bm25_scores_all(query), expected, rtol=1e-6)
            np.testing.assert_allclose(BM25Corpus(texts, analyzer, params).scores(query), expected, rtol=1e-6)

    def test_batches_are_equivalent_to_one_add(self, monkeypatch: pytest.MonkeyPatch) -> None:
        whole = store_of(CORPUS)
        monkeypatch.setattr(postings_module, "TOKENIZE_BATCH", 3)  # three postings blocks, merged
        batched = store_of(CORPUS)
        (a,), (b,) = whole.snapshot.segments, batched.snapshot.segments
        np.testing.assert_array_equal(a.postings.indptr, b.postings.indptr)
        np.testing.assert_array_equal(a.postings.rows, b.postings.rows)
        np.testing.assert_array_equal(a.postings.tf, b.postings.tf)
        np.testing.assert_allclose(
            batched.snapshot.bm25_scores_all("battery solar surge"),
            whole.snapshot.bm25_scores_all("battery solar surge"),
        )
