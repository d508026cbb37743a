"""Block-max bounds and presence bitmaps of the pruned BM25 top-k: bounds that hold, walks that miss no row,
and the same top-k as scoring every row where blocks and bitmaps matter (thousands of rows, a living index)."""

from __future__ import annotations

import copy
import itertools
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion.stores.local import block_max, pruning, snapshot
from langchain_fusion.stores.local.bitmaps import KeptPresence, TermPresence, held_in, presence_bits, reaching, rows_of
from langchain_fusion.stores.local.block_max import BlockMaxima, block_maxima, saturation
from langchain_fusion.stores.local.footprint import footprint
from langchain_fusion.stores.local.postings import build_postings
from langchain_fusion.stores.local.reaching import likely_mark
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.ranking import top_rows
from langchain_fusion.stores.settings import BM25Params
from tests.helpers.bm25 import blocks_of, weights_for, zipf_corpus


def small_blocks(monkeypatch: pytest.MonkeyPatch, shift: int) -> None:
    """Blocks of ``2**shift`` rows (bounds are kept per postings: these tests build their own)."""
    monkeypatch.setattr(block_max, "BLOCK_SHIFT", shift)
    monkeypatch.setattr(block_max, "BLOCK_ROWS", 1 << shift)


class TestBitmaps:
    @pytest.mark.parametrize("seed", range(5))
    def test_bits_hold_exactly_the_rows(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        rows = np.unique(rng.integers(0, 5000, int(rng.integers(1, 900)))).astype(np.int32)
        bits = presence_bits(rows)
        np.testing.assert_array_equal(rows_of(bits), rows)
        asked = np.arange(0, 5200, dtype=np.int64)
        np.testing.assert_array_equal(held_in(bits, asked), np.isin(asked, rows))
        assert presence_bits(rows, 200).size == 200

    @pytest.mark.parametrize("seed", range(12))
    def test_the_walk_finds_every_row_whose_held_bounds_reach_the_need(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        rows, terms = 700, int(rng.integers(1, 7))
        held = rng.random((terms, rows)) < rng.uniform(0.05, 0.9, (terms, 1))
        bounds = np.sort(rng.uniform(0.1, 3.0, terms))[::-1]
        need = float(rng.uniform(0.0, bounds.sum() * 1.1))
        words = (rows + 63) // 64
        bits = [presence_bits(np.flatnonzero(h).astype(np.int32)) for h in held]
        found = reaching(bits, bounds.tolist(), need, words)
        expected = np.flatnonzero(bounds @ held >= need)
        if found is None:
            assert need <= 0
        else:
            np.testing.assert_array_equal(rows_of(found), expected)

    def test_the_mark_counts_combinations_as_if_terms_were_independent(self) -> None:
        # Two terms, each in half the rows: a quarter holds both (3.0), a half one of them (2.0 or 1.0).
        bounds, shares = np.array([2.0, 1.0]), np.array([0.5, 0.5])
        assert likely_mark(bounds, shares, 1000, 200) == 3.0
        assert likely_mark(bounds, shares, 1000, 400) == 2.0
        assert likely_mark(bounds, shares, 1000, 10**6) == 0.0

    def test_kept_bitmaps_stay_within_the_budget(self) -> None:
        kept = KeptPresence(budget=3 * 1024)
        presences = [TermPresence.of(np.arange(0, 10_000, 7, dtype=np.int32)) for _ in range(4)]
        for term, presence in enumerate(presences):
            kept.keep(term, presence)
        assert kept.get(0) is presences[0] and kept.get(1) is None  # 2 KB of bits, charged 3 KB with its offsets
        assert not kept.has_room(presences[0].bits.nbytes)
        presences[0].find(np.arange(50, dtype=np.int32))  # offsets computed on use, within the charge
        assert kept.nbytes <= 3 * 1024


class TestBlockBounds:
    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
    @pytest.mark.parametrize("change", [0.5, 0.9, 1.0, 1.3, 2.0])
    def test_kept_bounds_hold_after_the_average_length_changes(self, method: str, change: float) -> None:
        # Kept once under one average, then read under another (rows added or deleted elsewhere).
        rng = np.random.default_rng(4)
        docs = zipf_corpus(rng, 2000, 60, duplicates=0)
        postings = build_postings(docs, 60)
        lengths = np.array([d.size for d in docs], dtype=np.float64)
        params = BM25Params(method=method, k1=1.2, b=0.75)  # type: ignore[arg-type]
        kept = BlockMaxima()
        blocks = block_max.block_count(len(docs))
        for average in (float(lengths.mean()), float(lengths.mean()) * change):
            relative = (lengths / average).astype(np.float32)
            for term in range(60):
                lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
                if hi == lo:
                    continue
                local, tf = postings.rows[lo:hi], postings.tf[lo:hi]
                steps, largest, _, unit = kept.bounds(term, params.k1, params.b, average, (local, tf, relative), blocks)
                true = block_maxima(local, saturation(tf, relative[local], params.k1, params.b), blocks)
                assert np.all(true <= steps * unit * (1 + 1e-6))
                assert largest == int(steps.max())
        assert kept.nbytes == sum(1 for term in range(60) if postings.term_count(term)) * blocks

    def test_the_budget_bounds_what_a_segment_keeps(self) -> None:
        docs = [np.arange(i % 7, 40) for i in range(3000)]
        postings = build_postings(docs, 40)
        relative = np.ones(3000, dtype=np.float32)
        kept = BlockMaxima(budget=5 * block_max.block_count(3000))
        for term in range(40):
            lo, hi = int(postings.indptr[term]), int(postings.indptr[term + 1])
            blocks = block_max.block_count(3000)
            kept.bounds(term, 1.2, 0.75, 1.0, (postings.rows[lo:hi], postings.tf[lo:hi], relative), blocks)
        assert kept.nbytes == 5 * block_max.block_count(3000)


class TestWhereBlocksMatter:
    """Thousands of rows in blocks of 16: kept bounds, per-block MaxScore, bitmaps, every path exact."""

    @pytest.mark.parametrize(("seed", "clustered"), list(itertools.product(range(6), [False, True])))
    def test_equals_scoring_every_row(self, seed: int, clustered: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        small_blocks(monkeypatch, 4)
        rng = np.random.default_rng(seed)
        size, vocabulary = 4000, 420
        docs = zipf_corpus(rng, size, 300, duplicates=200)
        if clustered:  # rows of one topic together, as the chunks of one document are: bounds differ per block
            topics = rng.integers(0, 40, size)
            for row in range(size):
                docs[row] = np.concatenate([docs[row], 300 + topics[row] + rng.integers(0, 3, 4) * 40])
            docs = [docs[row] for row in np.argsort(topics, kind="stable")]
        blocks = blocks_of(docs, vocabulary, sorted(rng.choice(np.arange(1, size), size=seed % 3, replace=False)))
        for blocks_from, bitmaps_from in ((0, 10**9), (10**9, 0), (None, None)):
            with pytest.MonkeyPatch.context() as patch:
                if blocks_from is not None:  # one way or the other, never scoring every row instead
                    patch.setattr(pruning, "BLOCKS_MIN_POSTINGS", blocks_from)
                    patch.setattr(pruning, "BLOCKS_MAX_FILL", 2.0)
                    patch.setattr(pruning, "BITMAPS_MIN_POSTINGS", bitmaps_from)
                    patch.setattr(pruning, "BITMAPS_MAX_SHARE", 100.0)
                    patch.setattr(pruning, "EVERY_ROW_COST", 0)
                    patch.setattr(pruning, "SEED_MAX_SHARE", 100.0)
                for _ in range(6):
                    source = docs[int(rng.integers(0, size))]
                    query = Counter(rng.choice(source, size=min(source.size, int(rng.integers(2, 9)))).tolist())
                    weights = weights_for(BM25Params(), docs, query)
                    allowed = rng.random(size) < 0.8 if rng.random() < 0.3 else None
                    for k in (1, 10, 100):
                        got = pruning.pruned_top(weights, size, blocks, k, allowed)
                        scores = weights.scores(size, blocks)
                        rows = top_rows(scores, k, allowed, above=0.0)
                        assert got is not None or blocks_from is None
                        if got is not None:
                            np.testing.assert_array_equal(got[0], rows)
                            assert got[1].tobytes() == scores[rows].tobytes()

    def test_a_living_index_equals_scoring_every_row_as_its_statistics_move(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Bounds kept by the first segment stay in use while rows are added and deleted around it.
        small_blocks(monkeypatch, 4)
        monkeypatch.setattr(snapshot, "PRUNED_TOP_MIN_POSTINGS", 0)
        monkeypatch.setattr(pruning, "BLOCKS_MAX_FILL", 2.0)
        rng = np.random.default_rng(9)
        words = [f"w{i}" for i in range(150)]
        p = 1.0 / np.arange(1, 151) ** 1.07
        p /= p.sum()

        def texts(count: int, lo: int, hi: int) -> list[str]:
            return [" ".join(rng.choice(words, int(rng.integers(lo, hi)), p=p)) for _ in range(count)]

        store = LocalStore()
        made = 0
        queries = [" ".join(rng.choice(words[:60], 5)) for _ in range(8)]
        for lo, hi in ((5, 15), (20, 60), (2, 6)):  # the average length moves both ways
            batch = texts(1500, lo, hi)
            vectors = np.ones((len(batch), 2), dtype=np.float32)
            documents = [Document(page_content=t, id=f"d{made + i}") for i, t in enumerate(batch)]
            store.upsert(documents, vectors, batch)
            made += len(batch)
            store.delete([f"d{i}" for i in rng.choice(made, 200, replace=False).tolist()])
            view = store.view()
            for query in queries:
                for k in (5, 50):
                    pruned = view.bm25(query).top(k)
                    scorer = view.bm25(query)
                    rows = top_rows(scorer.all_scores(), k, view.snapshot.allowed(None), above=0.0)
                    np.testing.assert_array_equal(pruned[0], rows)
                    assert pruned[1].tobytes() == scorer.all_scores()[rows].astype(np.float64).tobytes()


class TestFrequencies:
    def test_kept_in_a_byte_saved_in_the_formats_types(self, tmp_path: Path) -> None:
        texts = ["alpha " * 300 + "beta", "alpha beta gamma", "gamma " * 3]  # 300 repeats need more than a byte
        for kept, saved_as in ((texts[1:], np.uint16), (texts, np.uint16)):
            store = LocalStore()
            store.upsert(
                [Document(page_content=t, id=f"d{i}") for i, t in enumerate(kept)], np.ones((len(kept), 2)), kept
            )
            postings = store.view().snapshot.segments[0].postings
            assert postings.tf.dtype == (np.uint8 if len(kept) == 2 else np.uint16)
            folder = tmp_path / str(len(kept))
            store.save(folder)
            assert np.load(folder / "bm25" / "tf.npy").dtype == saved_as
            loaded = LocalStore.load(folder)[0]
            for query in ("alpha", "gamma beta"):
                a, b = store.view().bm25(query).top(3), loaded.view().bm25(query).top(3)
                np.testing.assert_array_equal(a[0], b[0])
                assert a[1].tobytes() == b[1].tobytes()


class TestCopies:
    def test_a_copied_store_derives_its_own_bounds_and_bitmaps(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(snapshot, "PRUNED_TOP_MIN_POSTINGS", 0)
        store = LocalStore()
        texts = [f"alpha beta{i % 9} gamma{i % 31} delta{i % 5}" for i in range(2000)]
        store.upsert([Document(page_content=t, id=f"d{i}") for i, t in enumerate(texts)], np.ones((2000, 2)), texts)
        query = "beta3 gamma7 delta1 alpha"
        before = store.view().bm25(query).top(30)
        postings = store.view().snapshot.segments[0].postings
        assert postings.block_maxima.nbytes or postings.presence.nbytes  # derived by the query
        for copied in (copy.deepcopy(store), pickle.loads(pickle.dumps(store))):
            kept = copied.view().snapshot.segments[0].postings
            assert kept.block_maxima.nbytes == 0 and kept.presence.nbytes == 0
            again = copied.view().bm25(query).top(30)
            np.testing.assert_array_equal(again[0], before[0])
            assert again[1].tobytes() == before[1].tobytes()


class TestFootprint:
    def test_counts_every_part_and_what_queries_keep(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(snapshot, "PRUNED_TOP_MIN_POSTINGS", 0)
        store = LocalStore()
        texts = [f"common word{i % 50} other{i % 7} shared" for i in range(3000)]
        documents = [
            Document(page_content=t, id=f"d{i}", metadata={"source": f"s{i % 3}"}) for i, t in enumerate(texts)
        ]
        store.upsert(documents, np.ones((3000, 8), dtype=np.float32), texts)
        before = footprint(store.view().snapshot)
        assert before["vectors"] == 3000 * 8 * 4
        assert before["bm25 postings"] > 0 and before["documents: texts and metadata"] > 0
        assert before["documents: ids"] > 3000 * 8 and before["id table"] == 0  # the lookup by id: built when used
        view = store.view()
        assert view.keys_of(["d7", "nope"]).tolist() == [7, -1]
        for query in ("common other3 word7", "shared other1", "word12 shared common"):
            view.bm25(query).top(20)
        segment = view.snapshot.segments[0]
        assert segment.postings.term_presence(view.snapshot.vocabulary["common"]) is not None  # kept for queries
        after = footprint(view.snapshot)
        assert after["bm25 presence bitmaps (kept)"] >= 3000 // 8
        assert after["id table"] == 3000 * (8 + 4)  # a hash and a row each
        assert list(after.values()) == sorted(after.values(), reverse=True)
