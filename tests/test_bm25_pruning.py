"""The pruned BM25 top-k (MaxScore) returns exactly the exhaustive top-k: same rows, order and score bits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local import block_max
from langchain_fusion.stores.local import postings as postings_module
from langchain_fusion.stores.local import pruning as pruning_module
from langchain_fusion.stores.local import snapshot as snapshot_module
from langchain_fusion.stores.local.bm25 import QueryWeights
from langchain_fusion.stores.local.postings import Postings, build_postings
from langchain_fusion.stores.local.pruning import pruned_top
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.ranking import top_rows
from langchain_fusion.stores.settings import BM25Params
from tests.helpers.bm25 import Blocks, blocks_of, weights_for, zipf_corpus


def exhaustive(
    weights: QueryWeights, blocks: Blocks, size: int, k: int, allowed: NDArray[np.bool_] | None
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """The reference: every row scored, then the top k above 0 (ties by row)."""
    scores = weights.scores(size, blocks)
    rows = top_rows(scores, k, allowed, above=0.0)
    return rows, scores[rows]


@pytest.fixture(autouse=True)
def always_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let pruning run on small corpora (it otherwise gives up when the rare terms' postings are many)."""
    monkeypatch.setattr(pruning_module, "SEED_MAX_SHARE", 100.0)
    monkeypatch.setattr(pruning_module, "BITMAPS_MAX_SHARE", 100.0)
    monkeypatch.setattr(pruning_module, "EVERY_ROW_COST", 0)


def small_blocks(monkeypatch: pytest.MonkeyPatch, shift: int) -> None:
    """Blocks of ``2**shift`` rows (block-max bounds are kept per postings: these tests build their own)."""
    monkeypatch.setattr(block_max, "BLOCK_SHIFT", shift)
    monkeypatch.setattr(block_max, "BLOCK_ROWS", 1 << shift)


class TestPrunedTopK:
    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
    @pytest.mark.parametrize("seed", range(8))
    @pytest.mark.parametrize(
        ("shift", "blocks_from", "reaching_from", "bitmaps"),
        [(7, None, None, False), (2, 0, 10**9, False), (4, 0, 10**9, False), (3, 0, 10**9, True), (2, 10**9, 0, True)],
        ids=["", "blocks4", "blocks16", "lookups", "reaching"],
    )
    def test_equals_exhaustive_on_random_corpora(
        self,
        method: str,
        seed: int,
        shift: int,
        blocks_from: int | None,
        reaching_from: int | None,
        bitmaps: bool,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Blocks of 128 rows (one or a few per segment here) and of 4 or 16 (many) whatever the postings to read,
        # bounds over every row only, candidates from the common terms' bitmaps always or never, the common terms'
        # rows looked up by binary search or in bitmaps: every way exact.
        small_blocks(monkeypatch, shift)
        if blocks_from is not None:
            monkeypatch.setattr(pruning_module, "BLOCKS_MIN_POSTINGS", blocks_from)
        if reaching_from is not None:
            monkeypatch.setattr(pruning_module, "BITMAPS_MIN_POSTINGS", reaching_from)
        if bitmaps:  # every term that rows are looked up in has a bitmap, however few the rows
            monkeypatch.setattr(postings_module, "PRESENCE_MIN_LOOKUPS", 0)
            monkeypatch.setattr(postings_module, "PRESENCE_BUILD_MIN_LOOKUPS", 0)
            monkeypatch.setattr(postings_module, "PRESENCE_MIN_SHARE", 10**9)
        rng = np.random.default_rng(seed)
        size, vocabulary = int(rng.integers(50, 600)), int(rng.integers(20, 400))
        docs = zipf_corpus(rng, size, vocabulary, duplicates=size // 5)
        blocks = blocks_of(docs, vocabulary, sorted(rng.choice(np.arange(1, size), size=seed % 3, replace=False)))
        params = BM25Params(method=method, k1=float(rng.uniform(0.5, 2.0)), b=float(rng.uniform(0.0, 1.0)))
        pruned_somewhere = False
        for _ in range(15):
            source = docs[int(rng.integers(0, size))]
            query = Counter(rng.choice(source, size=min(source.size, int(rng.integers(1, 8)))).tolist())
            weights = weights_for(params, docs, query)
            allowed = rng.random(size) < 0.7 if rng.random() < 0.3 else None
            for k in (1, 3, 10, 40, size + 5):
                got = pruned_top(weights, size, blocks, k, allowed)
                assert got is not None
                rows, scores = exhaustive(weights, blocks, size, k, allowed)
                np.testing.assert_array_equal(got[0], rows)
                assert got[1].tobytes() == scores.tobytes()  # the same float32 bits, not merely close
                pruned_somewhere |= got[0].size == k and k < size
        assert pruned_somewhere

    def test_ties_at_the_kth_score_break_by_row(self) -> None:
        docs = [np.array([0, 1, 2]), np.array([0, 3]), *[np.array([0, 1, 5]) for _ in range(20)], np.array([4, 0])]
        blocks = blocks_of(docs, 6, [7])
        weights = weights_for(BM25Params(), docs, Counter([0, 1, 4]))
        for k in range(1, len(docs) + 2):
            got = pruned_top(weights, len(docs), blocks, k, None)
            assert got is not None
            rows, scores = exhaustive(weights, blocks, len(docs), k, None)
            np.testing.assert_array_equal(got[0], rows)
            assert got[1].tobytes() == scores.tobytes()

    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    def test_row_scores_are_the_same_bits_as_every_row_scored(self, method: str) -> None:
        # All the query's terms are weighed in one pass: each weight in the float32 steps of weighing its term alone.
        rng = np.random.default_rng(7)
        docs = zipf_corpus(rng, 400, 120, duplicates=40)
        blocks = blocks_of(docs, 120, [100, 101, 350])
        params = BM25Params(method=method, k1=1.3, b=0.75)  # type: ignore[arg-type]
        weights = weights_for(params, docs, Counter([0, 0, 5, 17, 90, 119, 500]))  # 500: in no row
        every = weights.scores(len(docs), blocks)
        for rows in (np.unique(rng.integers(0, len(docs), 150)), np.arange(len(docs)), np.array([7]), np.zeros(0)):
            rows = rows.astype(np.int64)
            assert weights.row_scores(rows, blocks).tobytes() == every[rows].tobytes()

    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
    @pytest.mark.parametrize("shift", [2, 4, 7])
    def test_block_bounds_hold_every_weight(self, method: str, shift: int, monkeypatch: pytest.MonkeyPatch) -> None:
        # Kept bounds (common terms) and bounds weighed per query (rare ones), in blocks of 4, 16 and 128 rows.
        small_blocks(monkeypatch, shift)
        rng = np.random.default_rng(3)
        docs = zipf_corpus(rng, 300, 80, duplicates=10)
        blocks = blocks_of(docs, 80, [120])
        weights = weights_for(BM25Params(method=method, b=0.9), docs, Counter(range(80)))
        plan = pruning_module.PrunedTop(weights, len(docs), blocks)
        for number, (term, _, term_idf) in enumerate(weights.terms):
            bound = np.zeros(plan.block_bounds().shape[1])
            for postings, start in blocks:
                rows, found = weights.term_weights(postings, start, term, term_idf)
                np.maximum.at(bound, plan.block_of(rows), found.astype(np.float64))
            kept = plan.block_bounds()[number]
            assert np.all(bound <= kept * (1 + pruning_module.ROUNDING))
            assert np.all((bound > 0) == (kept > 0))  # 0 exactly where the term is absent
            assert np.all(kept <= bound * 1.5 + 0.02 * term_idf)
            assert plan.bounds[number, 0] == kept.max()  # over every row until per-block bounds pay

    @pytest.mark.parametrize("method", ["bm25l", "bm25+"])
    def test_variants_crediting_absent_terms_are_not_pruned(self, method: str) -> None:
        docs = [np.array([0, 1]), np.array([1, 2]), np.array([2, 3])]
        blocks = blocks_of(docs, 4, [])
        weights = weights_for(BM25Params(method=method), docs, Counter([1]))
        assert pruned_top(weights, 3, blocks, 1, None) is None

    def test_terms_without_postings_here_find_nothing(self) -> None:
        # Counted in the statistics (another segment held them) but absent from these blocks.
        docs = [np.array([0, 1]), np.array([1, 2]), np.array([2])]
        blocks = blocks_of(docs, 3, [])
        frequency = np.array([1, 2, 2, 1, 1, 1])
        weights = QueryWeights(BM25Params(), Counter([4, 5]), frequency, 3, np.ones(3, dtype=np.float32))
        got = pruned_top(weights, 3, blocks, 2, None)
        assert got is not None and got[0].size == 0 and got[1].size == 0

    @pytest.mark.parametrize("seed", range(6))
    def test_a_bitmap_finds_what_the_binary_search_finds(self, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
        rng = np.random.default_rng(seed)
        span = int(rng.integers(1, 5000))
        held = np.flatnonzero(rng.random(span) < rng.uniform(0.05, 1.0)).astype(np.int32)
        if held.size == 0:
            held = np.array([span - 1], dtype=np.int32)
        edges = np.array([0, 63, 64, 65, 127, 128, held[-1], held[-1] + 1, held[-1] + 64, held[-1] + 200])
        local = np.unique(np.concatenate([rng.integers(0, span + 300, 700), edges])).astype(np.int32)
        holds = set(held.tolist())
        postings = build_postings([np.array([1 if row in holds else 0]) for row in range(span)], 2)
        searched = postings_module.matching_postings(postings, 1, local)
        monkeypatch.setattr(postings_module, "PRESENCE_MIN_LOOKUPS", 0)
        monkeypatch.setattr(postings_module, "PRESENCE_BUILD_MIN_LOOKUPS", 0)
        monkeypatch.setattr(postings_module, "PRESENCE_MIN_SHARE", 10**9)
        found = postings_module.matching_postings(postings, 1, local)
        assert postings.term_presence(1) is not None
        for a, b in zip(found, searched, strict=True):
            np.testing.assert_array_equal(a, b)

    def test_a_few_rows_use_a_bitmap_built_by_many_but_build_none(self) -> None:
        docs = [np.array([0, 1]) if row % 3 else np.array([1]) for row in range(2000)]
        postings = build_postings(docs, 2)
        few = np.arange(0, 2000, 41, dtype=np.int32)  # 49 rows
        searched = postings_module.matching_postings(postings, 0, few)
        assert postings_module.PRESENCE_MIN_LOOKUPS <= few.size < postings_module.PRESENCE_BUILD_MIN_LOOKUPS
        assert postings.term_presence(0, build=False) is None  # a few rows build no bitmap
        postings_module.matching_postings(postings, 0, np.arange(0, 2000, 3, dtype=np.int32))  # 667 rows build one
        assert postings.term_presence(0, build=False) is not None
        found = postings_module.matching_postings(postings, 0, few)  # now read from the bitmap
        for a, b in zip(found, searched, strict=True):
            np.testing.assert_array_equal(a, b)

    def test_only_common_terms_get_a_bitmap(self) -> None:
        docs = [[0, 1, 2] if row % 100 == 0 else [0, 2] if row % 50 == 0 else [0] for row in range(1000)]
        postings = build_postings([np.array(doc) for doc in docs], 3)
        assert postings.term_presence(0) is not None  # in every row
        assert postings.term_presence(2) is not None  # in 1 of 50
        assert postings.term_presence(1) is None  # in 1 of 100
        assert postings.term_presence(5) is None  # not in the block

    def test_a_term_in_every_row_is_not_read_for_rows_without_the_rare_term(self) -> None:
        # 1000 rows hold the common term; 3 also hold the rare one: the k=2 best are found among those 3.
        docs = [np.array([0, 0, 1]) if row % 300 == 0 else np.array([0, 2, 3]) for row in range(1000)]
        blocks = blocks_of(docs, 4, [])
        weights = weights_for(BM25Params(), docs, Counter([0, 1]))
        looked_up: list[int] = []
        weighed: list[int] = []
        original_at, original_weights = weights.weights_at, weights.term_weights

        def counting_at(rows: NDArray[np.int64], *args: Any) -> Any:
            looked_up.append(int(rows.size))
            return original_at(rows, *args)

        def counting_weights(postings: Postings, first_row: int, term: int, term_idf: float) -> Any:
            weighed.append(term)
            return original_weights(postings, first_row, term, term_idf)

        weights.weights_at = counting_at  # type: ignore[method-assign]
        weights.term_weights = counting_weights  # type: ignore[method-assign]
        got = pruned_top(weights, 1000, blocks, 2, None)
        assert max(looked_up) <= 4 and 0 not in weighed  # the common term: looked up in 4 rows at most, never read
        assert got is not None
        rows, _ = exhaustive(weights, blocks, 1000, 2, None)
        np.testing.assert_array_equal(got[0], rows)


CJK_TEXTS = [
    "東京都の天気は晴れです",
    "京都の天気は雨です",
    "東京の電車は混雑しています",
    "大阪の天気と東京の天気",
    "天気予報によると明日は晴れ",
    "電車の天気予報アプリ",
    "서울의 날씨는 맑음",
    "서울 지하철은 혼잡합니다",
    "北京天气晴朗",
    "上海天气多云，北京天气晴",
]


class TestThroughTheStore:
    """The in-process store's BM25 side with pruning switched on for a tiny index: the same results."""

    def _store(self, texts: Sequence[str], repeat: int) -> LocalStore:
        store = LocalStore()
        rows = [texts[i % len(texts)] + " " + texts[(i * 7) % len(texts)] for i in range(len(texts) * repeat)]
        for lo in range(0, len(rows), 37):  # several segments and tombstones
            chunk = rows[lo : lo + 37]
            ids = [f"d{lo + i}" for i in range(len(chunk))]
            vectors = np.zeros((len(chunk), 4), dtype=np.float32)
            vectors[:, 0] = 1.0
            store.upsert([Document(page_content=t, id=i) for t, i in zip(chunk, ids, strict=True)], vectors, chunk)
        store.delete([f"d{i}" for i in range(0, len(rows), 11)])
        return store

    @pytest.mark.parametrize("query", ["東京の天気", "天気予報 電車", "서울 날씨", "北京天气", "晴れ 雨 天気", "大阪"])
    def test_cjk_bigrams_equal_the_exhaustive_top_k(self, query: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(snapshot_module, "PRUNED_TOP_MIN_POSTINGS", 0)
        pruned_tops: list[int] = []
        original = snapshot_module.pruned_top

        def recording(*args: object, **kwargs: object) -> object:
            found = original(*args, **kwargs)  # type: ignore[arg-type]
            pruned_tops.append(-1 if found is None else int(found[0].size))
            return found

        monkeypatch.setattr(snapshot_module, "pruned_top", recording)
        store = self._store(CJK_TEXTS, repeat=20)
        assert Analyzer().tokenize("東京の天気")[:2] == ["東京", "京の"]  # bigram-ish tokens
        view = store.view()
        for k in (1, 5, 30, 500):
            pruned = view.bm25(query).top(k)
            scorer = view.bm25(query)
            rows = top_rows(scorer.all_scores(), k, view.snapshot.allowed(None), above=0.0)
            np.testing.assert_array_equal(pruned[0], rows)
            np.testing.assert_array_equal(pruned[1], scorer.all_scores()[rows].astype(np.float64))
            keys = np.array([3, 0, 41, 3, 160], dtype=np.int64)
            assert view.bm25(query).scores(keys).tobytes() == scorer.scores(keys).tobytes()
        assert pruned_tops and -1 not in pruned_tops  # the pruned path answered every top-k
