"""A living index: all-or-nothing mutations, readers next to a writer, custom analyzers, BM25 that grows."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import Analyzer, BM25Params, FusionError, FusionIndex, IndexFormatError
from langchain_fusion import metadata as keys
from langchain_fusion.stores.local import mutations as mutations_module
from langchain_fusion.stores.local import postings as postings_module
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.testing import WORDS, assert_same, corpus, results
from tests.helpers.embeddings import HashingEmbeddings


def state(index: FusionIndex) -> tuple[Any, ...]:
    """Everything a reader can observe: documents, and results on every side for a few queries."""
    observed: list[Any] = [tuple((d.id, d.page_content) for d in index.documents), len(index)]
    for query in WORDS.queries[:3]:
        for alpha in (0.0, 0.5, 1.0):
            observed.append(tuple(results(index, query, k=10, alpha=alpha, fetch_k=None)))
    return tuple(observed)


@pytest.fixture
def index() -> FusionIndex:
    built = FusionIndex(HashingEmbeddings())
    built.add_documents(corpus(1, 80))
    built.add_documents(corpus(2, 15, prefix="b"))
    built.delete([f"d1-{i}" for i in range(5)])
    return built


class Boom(Exception):
    pass


FAILURES: list[type[BaseException]] = [Boom, KeyboardInterrupt, MemoryError]


def _raiser(error: type[BaseException]) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error("injected")

    return fail


class TestAllOrNothing:
    """A failure at any point between the sides leaves the index exactly as it was."""

    POINTS: ClassVar[list[tuple[Any, str]]] = [
        (postings_module, "text_token_ids"),  # the BM25 side, before anything else
        (postings_module, "postings_of_ids"),
        (postings_module, "merge_postings"),  # merging new postings (many blocks)
        (mutations_module, "merge_postings"),  # merging segments
        (mutations_module, "_read_only"),  # the vector side
        (mutations_module, "_padded"),  # the statistics
    ]

    @pytest.mark.parametrize("error", FAILURES)
    @pytest.mark.parametrize(("module", "name"), POINTS)
    def test_add_documents(
        self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch, module: Any, name: str, error: type[BaseException]
    ) -> None:
        before = state(index)
        snapshot = index.store.snapshot  # type: ignore[attr-defined]
        monkeypatch.setattr(postings_module, "TOKENIZE_BATCH", 4)  # several blocks, so merges run
        monkeypatch.setattr(module, name, _raiser(error))
        with pytest.raises(error):
            index.add_documents(corpus(3, 20, prefix="new"))
        monkeypatch.undo()
        assert index.store.snapshot is snapshot  # type: ignore[attr-defined]
        assert state(index) == before
        index.add_documents(corpus(3, 20, prefix="new"))  # and the index still works
        assert len(index) == 110

    @pytest.mark.parametrize("error", FAILURES)
    def test_upsert(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> None:
        before = state(index)
        monkeypatch.setattr(postings_module, "postings_of_ids", _raiser(error))
        with pytest.raises(error):
            index.upsert_documents([Document(id="d1-10", page_content="replaced text")])
        monkeypatch.undo()
        assert state(index) == before

    @pytest.mark.parametrize("error", FAILURES)
    def test_delete(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> None:
        before = state(index)
        monkeypatch.setattr(postings_module.Postings, "terms_of_rows", _raiser(error))
        with pytest.raises(error):
            index.delete(["d1-20", "b2-3"])
        monkeypatch.undo()
        assert state(index) == before

    @pytest.mark.parametrize("error", FAILURES)
    def test_compaction(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> None:
        before = state(index)
        monkeypatch.setattr(mutations_module, "COMPACT_DEAD_RATIO", 0.0)
        monkeypatch.setattr(mutations_module, "compacted", _raiser(error))
        with pytest.raises(error):
            index.delete(["d1-20"])
        monkeypatch.undo()
        assert state(index) == before

    def test_failing_custom_analyzer(self, monkeypatch: pytest.MonkeyPatch) -> None:
        index = FusionIndex(HashingEmbeddings(), analyzer=Picky())
        index.add_documents(corpus(4, 30))
        before = state(index)
        with pytest.raises(ValueError, match="refuses"):
            index.add_documents([*corpus(5, 10, prefix="x"), Document(id="bad", page_content="w1 FORBIDDEN")])
        assert state(index) == before

    def test_failing_embeddings(self, index: FusionIndex, monkeypatch: pytest.MonkeyPatch) -> None:
        before = state(index)
        monkeypatch.setattr(HashingEmbeddings, "embed_documents", _raiser(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            index.add_documents(corpus(6, 5, prefix="e"))
        monkeypatch.undo()
        assert state(index) == before

    def test_a_failed_mutation_then_save_writes_the_good_index(
        self, index: FusionIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(mutations_module, "_read_only", _raiser(MemoryError))
        with pytest.raises(MemoryError):
            index.add_documents(corpus(7, 5, prefix="m"))
        monkeypatch.undo()
        loaded = FusionIndex.load(index.save(tmp_path / "idx"), HashingEmbeddings())
        assert state(loaded) == state(index)

    def test_save_refuses_parts_that_disagree(self, index: FusionIndex, tmp_path: Path) -> None:
        from dataclasses import replace

        store = index.store
        assert isinstance(store, LocalStore)
        good = store.snapshot
        store._snapshot = replace(good, lengths=good.lengths[:-1])  # one BM25 row short
        with pytest.raises(FusionError, match="not aligned"):
            index.save(tmp_path / "idx")
        assert not (tmp_path / "idx").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx.saving")]


class Picky(Analyzer):
    """A custom analyzer that refuses one word (to inject a failure inside tokenisation)."""

    def tokenize(self, text: str) -> list[str]:
        if "FORBIDDEN" in text:
            raise ValueError("this analyzer refuses FORBIDDEN")
        return text.lower().split()


class PartNumbers(Analyzer):
    """Keeps part numbers such as ``AB-1234`` whole, as codes-heavy corpora need."""

    def tokenize(self, text: str) -> list[str]:
        return [t.lower() for t in re.findall(r"[A-Za-z]+-\d+|\w+", text)]


class TestCustomAnalyzer:
    DOCS: ClassVar[list[Document]] = [
        Document(id="p1", page_content="Replace valve AB-1234 before winter."),
        Document(id="p2", page_content="Valve AB and valve 1234 are different parts."),
        Document(id="p3", page_content="The pump CD-77 needs oil."),
    ]

    def test_honoured_for_documents_and_queries(self) -> None:
        index = FusionIndex.from_documents(self.DOCS, HashingEmbeddings(), analyzer=PartNumbers())
        found = index.as_retriever(k=3, alpha=0.0).invoke("AB-1234")
        assert [d.id for d in found] == ["p1"]  # the default analyzer would also match p2 on "ab" and "1234"
        default = FusionIndex.from_documents(self.DOCS, HashingEmbeddings())
        assert {d.id for d in default.as_retriever(k=3, alpha=0.0).invoke("AB-1234")} == {"p1", "p2"}

    def test_load_needs_the_analyzer_and_accepts_it(self, tmp_path: Path) -> None:
        index = FusionIndex.from_documents(self.DOCS, HashingEmbeddings(), analyzer=PartNumbers())
        folder = index.save(tmp_path / "idx")
        with pytest.raises(IndexFormatError, match=r"custom analyzer .*PartNumbers"):
            FusionIndex.load(folder, HashingEmbeddings())
        with pytest.raises(IndexFormatError, match="analyzer that built it"):
            FusionIndex.load(folder, HashingEmbeddings(), analyzer=Picky())
        loaded = FusionIndex.load(folder, HashingEmbeddings(), analyzer=PartNumbers())
        assert [d.id for d in loaded.as_retriever(k=3, alpha=0.0).invoke("AB-1234")] == ["p1"]
        loaded.add_documents([Document(id="p4", page_content="AB-1234 spare in stock")])
        assert {d.id for d in loaded.as_retriever(k=3, alpha=0.0).invoke("AB-1234")} == {"p1", "p4"}

    def test_a_tokenize_that_returns_garbage_is_a_clear_error(self) -> None:
        class Broken(Analyzer):
            def tokenize(self, text: str) -> list[str]:
                return text  # type: ignore[return-value]

        with pytest.raises(FusionError, match="must return a list of strings"):
            FusionIndex.from_documents(self.DOCS, HashingEmbeddings(), analyzer=Broken())


class TestBM25ThatGrows:
    @pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
    def test_every_variant_equals_a_fresh_build_after_updates(self, method: str) -> None:
        params = BM25Params(method=method)  # type: ignore[arg-type]
        index = FusionIndex(HashingEmbeddings(), bm25_params=params)
        index.add_documents(corpus(10, 50))
        index.add_documents(corpus(11, 20, prefix="x"))
        index.delete([f"d10-{i}" for i in range(0, 50, 3)])
        index.upsert_documents([Document(id="x11-2", page_content="w1 w1 w2 brand new")])
        fresh = FusionIndex.from_documents(list(index.documents), HashingEmbeddings(), bm25_params=params)
        for query in WORDS.queries:
            got = index.store.snapshot  # type: ignore[attr-defined]
            live = np.flatnonzero(got.live_mask()) if got.dead is not None else np.arange(got.size)
            np.testing.assert_allclose(
                got.bm25_scores_all(query)[live],
                fresh.store.snapshot.bm25_scores_all(query),
                rtol=1e-6,
                atol=1e-6,  # type: ignore[attr-defined]
            )
            assert_same(results(index, query, k=10, alpha=0.3), results(fresh, query, k=10, alpha=0.3))

    def test_adding_does_not_rewrite_existing_postings(self) -> None:
        index = FusionIndex.from_documents(corpus(12, 200), HashingEmbeddings())
        first = index.store.snapshot.segments[0]  # type: ignore[attr-defined]
        index.add_documents(corpus(13, 3, prefix="n"))
        assert index.store.snapshot.segments[0] is first  # type: ignore[attr-defined]

    def test_deleting_marks_tombstones_until_compaction(self) -> None:
        index = FusionIndex.from_documents(corpus(14, 100), HashingEmbeddings())
        first = index.store.snapshot.segments[0]  # type: ignore[attr-defined]
        index.delete(["d14-1", "d14-2"])
        snap = index.store.snapshot  # type: ignore[attr-defined]
        assert snap.segments[0] is first and snap.dead_count == 2
        index.delete([f"d14-{i}" for i in range(3, 40)])  # past the compaction threshold
        snap = index.store.snapshot  # type: ignore[attr-defined]
        assert snap.dead is None and snap.size == len(index) == 61


class TestReadersAndWriter:
    """4 readers (sync, async, batch) and 1 writer (adds, deletes, upserts, saves): 0 errors, 0 wrong chunks."""

    GROUP = 12

    @staticmethod
    def group_docs(group: int, version: int = 0) -> list[Document]:
        # Every chunk's text is derived from its id, so a wrong chunk is detectable.
        return [
            Document(id=f"g{group}-{i}", page_content=f"grp{group} item{i} v{version} w{i % 7} w{(i * 3) % 11}")
            for i in range(TestReadersAndWriter.GROUP)
        ]

    def test_stress(self, tmp_path: Path) -> None:
        # "grp7" stays one token, so BM25 for it returns exactly group 7's chunks (split, "grp" would match all).
        index = FusionIndex(HashingEmbeddings(), analyzer=Analyzer(identifiers=False))
        for group in range(40):
            index.add_documents(self.group_docs(group))
        stop = threading.Event()
        errors: list[BaseException] = []
        wrong: list[str] = []
        partial: list[str] = []
        checked = [0]

        def verify(docs: list[Document], group: int | None = None) -> None:
            for doc in docs:
                match = re.fullmatch(r"g(\d+)-(\d+)", doc.id or "")
                if not match or not doc.page_content.startswith(f"grp{match[1]} item{match[2]} "):
                    wrong.append(f"{doc.id}: {doc.page_content}")
            if group is not None and len(docs) not in (0, self.GROUP):
                partial.append(f"group {group}: {len(docs)} of {self.GROUP}")
            checked[0] += 1

        def reader(kind: str) -> None:
            rng = np.random.default_rng(hash(kind) % 2**32)
            retriever = index.as_retriever(k=self.GROUP + 4)
            try:
                while not stop.is_set():
                    group = int(rng.integers(0, 60))
                    query = f"grp{group}"
                    if kind == "sync":
                        verify(retriever.invoke(query, alpha=0.0), group)  # BM25: exactly the group's chunks
                    elif kind == "fused":
                        verify(retriever.invoke(f"{query} w3", fetch_k=None))
                    elif kind == "async":
                        verify(asyncio.run(retriever.ainvoke(query, alpha=0.0)), group)
                    else:
                        for docs in retriever.batch([query, "w1 w2", "item3"], config={"max_concurrency": 2}):
                            verify(docs)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(kind,)) for kind in ("sync", "fused", "async", "batch")]
        for thread in threads:
            thread.start()
        try:
            for step in range(30):
                group = 40 + step
                index.add_documents(self.group_docs(group))  # a whole group appears at once
                index.delete([d.id or "" for d in self.group_docs(step)])  # and another disappears at once
                index.upsert_documents(self.group_docs(group, version=1))
                if step % 10 == 9:
                    index.save(tmp_path / "live")
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        assert not errors, errors[:3]
        assert not wrong, wrong[:3]
        assert not partial, partial[:3]
        assert checked[0] > 50
        loaded = FusionIndex.load(tmp_path / "live", HashingEmbeddings())
        assert len(loaded) == 40 * self.GROUP
        for doc in loaded.as_retriever(k=3).invoke("grp69"):
            assert doc.id and doc.id.startswith("g69-")
            assert doc.metadata[keys.FUSION_SCORE] > 0


class TestStoreGuards:
    def test_the_store_refuses_repeated_or_missing_ids(self) -> None:
        import numpy as np

        store = LocalStore()
        vectors = np.eye(2, dtype=np.float32)
        for ids in (["a", "a"], ["a", None]):
            docs = [Document(id=i, page_content="cat") for i in ids]
            with pytest.raises(FusionError, match="distinct, non-empty string id"):
                store.upsert(docs, vectors, ["cat", "cat"])
        assert len(store.view()) == 0

    def test_many_filters_from_many_threads(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        index = FusionIndex.from_documents(corpus(30, 120), HashingEmbeddings())
        retriever = index.as_retriever(k=3)

        def search(i: int) -> list[Document]:
            return retriever.invoke("w1 w2", filter={"bucket": i % 3, "source": f"s{i % 5}.txt", "n": i % 40})

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(search, range(400)))  # more distinct filters than the cache holds: no error

    def test_filters_of_different_types_do_not_share_a_cache_entry(self) -> None:
        index = FusionIndex.from_documents(
            [
                Document(id="a", page_content="w1", metadata={"tag": 1}),
                Document(id="b", page_content="w1", metadata={"tag": "{1}"}),
            ],
            HashingEmbeddings(),
        )
        assert [d.id for d in index.as_retriever(filter={"tag": [1]}).invoke("w1")] == ["a"]
        assert [d.id for d in index.as_retriever(filter={"tag": "{1}"}).invoke("w1")] == ["b"]
