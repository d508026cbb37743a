"""Evaluation datasets, harness, alpha sweep, plot, embedding cache and the eval command."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from langchain_fusion import (
    BM25Retriever,
    FusionError,
    FusionIndex,
    FusionRetriever,
    MultiQueryFusionRetriever,
    RerankRetriever,
    VectorRetriever,
)
from langchain_fusion.cli.app import main
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.evaluation import (
    SIDES,
    EvalDataset,
    MethodResult,
    Report,
    alpha_grid,
    evaluate_retrievers,
    evaluate_sides,
    load_beir,
    load_labelled,
    plot_alpha_sweep,
    sweep_alpha,
)
from langchain_fusion.ingest.loading import load_files, split_documents
from langchain_fusion.models.embeddings import CachedEmbeddings, embeddings_id
from tests.helpers.corpora import BEIR_CORPUS, BEIR_QUERIES, write_beir
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings
from tests.helpers.paths import DATA, SAMPLE_QUERIES


@pytest.fixture(scope="module")
def sample_index() -> FusionIndex:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = split_documents(load_files([DATA]).documents)
    return FusionIndex.from_documents(chunks, HashingEmbeddings())


class TestLoadBeir:
    def test_corpus_queries_and_qrels(self, tmp_path: Path) -> None:
        dataset = load_beir(write_beir(tmp_path), "test")
        assert [d.id for d in dataset.corpus] == ["d1", "d2", "d3", "d4"]
        assert (
            dataset.corpus[0].page_content == "Solar batteries\n\nLithium iron phosphate batteries store solar energy."
        )
        assert dataset.corpus[2].page_content == BEIR_CORPUS[2]["text"]  # no title, no blank line
        assert dataset.corpus[0].metadata == {"source": "d1", "title": "Solar batteries"}
        assert dataset.queries == {"q1": BEIR_QUERIES[0]["text"], "q2": BEIR_QUERIES[1]["text"]}
        assert dataset.qrels == {"q1": {"d1": 2}, "q2": {"d2": 1, "d4": 0}}

    def test_without_title(self, tmp_path: Path) -> None:
        dataset = load_beir(write_beir(tmp_path), "test", include_title=False)
        assert dataset.corpus[0].page_content == BEIR_CORPUS[0]["text"]

    def test_missing_split_names_the_available_ones(self, tmp_path: Path) -> None:
        with pytest.raises(FusionError, match="splits available: test"):
            load_beir(write_beir(tmp_path), "train")

    def test_missing_corpus(self, tmp_path: Path) -> None:
        folder = write_beir(tmp_path)
        (folder / "corpus.jsonl").unlink()
        with pytest.raises(FusionError, match=r"corpus\.jsonl is missing"):
            load_beir(folder, "test")

    def test_bad_json_line(self, tmp_path: Path) -> None:
        folder = write_beir(tmp_path)
        (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "ok"}\n{oops\n')
        with pytest.raises(FusionError, match="line 2: not valid JSON"):
            load_beir(folder, "test")


class TestLoadLabelled:
    def test_sample_queries_resolve_to_chunks(self, sample_index: FusionIndex) -> None:
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        assert len(dataset.queries) == 54
        assert dataset.kinds["q01"] == "keyword" and dataset.kinds["q09"] == "paraphrase"
        assert set(dataset.kinds) == set(dataset.queries)
        for query_id, relevant in dataset.qrels.items():
            assert relevant, query_id
            for doc_id in relevant:
                assert doc_id in sample_index
        # q01 is labelled with page 4 of the report and one parts sheet: exactly the chunks of those.
        places = {
            d.id
            for d in sample_index.documents
            if d.metadata.get("page") == 4 or Path(d.metadata["source"]).name == "sp-1002.md"
        }
        assert set(dataset.qrels["q01"]) == places

    def test_answer_matching_and_chunk_ids(self, tmp_path: Path, sample_index: FusionIndex) -> None:
        target = sample_index.documents[5]
        labels = [
            {"query": "by answer", "answer": " ".join(target.page_content.split()[:6]), "match_answer": True},
            {"id": "byid", "query": "by id", "relevant": [{"id": target.id}]},
        ]
        path = tmp_path / "labels.json"
        path.write_text(json.dumps(labels))
        dataset = load_labelled(path, sample_index.documents)
        assert target.id in dataset.qrels["q1"]
        assert dataset.qrels["byid"] == {target.id: 1}

    def test_csv(self, tmp_path: Path, sample_index: FusionIndex) -> None:
        path = tmp_path / "labels.csv"
        path.write_text(
            "id,query,source,page\n"
            "a,KV-5500 rating,arden-microgrids-report.pdf,4\n"
            "a,KV-5500 rating,maintenance-handbook.md,\n"
        )
        dataset = load_labelled(path, sample_index.documents)
        labelled = sample_index.get_by_ids(list(dataset.qrels["a"]))
        assert len(labelled) == len(dataset.qrels["a"])
        pages = {doc.metadata.get("page") for doc in labelled}
        assert pages == {4, None}

    def test_kinds_from_json_and_csv(self, tmp_path: Path, sample_index: FusionIndex) -> None:
        labels = [
            {"id": "a", "kind": " keyword ", "query": "KV-5500", "relevant": [{"source": "maintenance-handbook.md"}]},
            {"id": "b", "query": "no kind", "relevant": [{"source": "maintenance-handbook.md"}]},
            {"id": "c", "kind": "keyword", "query": "lost", "relevant": [{"source": "nowhere.md"}]},
        ]
        path = tmp_path / "labels.json"
        path.write_text(json.dumps(labels))
        with pytest.warns(UserWarning, match="1 queries match no indexed chunk"):
            dataset = load_labelled(path, sample_index.documents)
        assert dataset.kinds == {"a": "keyword"}  # trimmed; no kind, no entry; left-out queries dropped
        csv_path = tmp_path / "labels.csv"
        csv_path.write_text(
            "id,kind,query,source,page\n"
            "a,mixed,KV-5500 rating,arden-microgrids-report.pdf,4\n"
            "a,mixed,KV-5500 rating,maintenance-handbook.md,\n"
            "b,,torque,maintenance-handbook.md,\n"
        )
        assert load_labelled(csv_path, sample_index.documents).kinds == {"a": "mixed"}

    def test_unmatched_labels_warn_and_all_unmatched_fails(self, tmp_path: Path, sample_index: FusionIndex) -> None:
        path = tmp_path / "labels.json"
        path.write_text(
            json.dumps(
                [
                    {"query": "a", "relevant": [{"source": "nowhere.pdf"}]},
                    {"query": "b", "relevant": [{"source": "maintenance-handbook.md"}]},
                ]
            )
        )
        with pytest.warns(UserWarning, match="1 queries match no indexed chunk"):
            assert list(load_labelled(path, sample_index.documents).queries) == ["q2"]
        path.write_text(json.dumps([{"query": "a", "relevant": [{"source": "nowhere.pdf"}]}]))
        with pytest.raises(FusionError, match="no label matches a chunk of this index"):
            load_labelled(path, sample_index.documents)

    @pytest.mark.parametrize(
        "content,message",
        [
            ("{", "not valid JSON"),
            ('{"a": 1}', "expected a JSON list"),
            ('[{"relevant": []}]', "has no 'query'"),
            ('[{"query": "x"}]', "neither 'relevant'"),
            ('[{"query": "x", "kind": 1, "relevant": [{"id": "a"}]}]', "record 1 has 'kind' 1; expected a non-empty"),
            ('[{"query": "x", "kind": true, "relevant": [{"id": "a"}]}]', "'kind' True; expected"),
            ('[{"query": "x", "kind": " ", "relevant": [{"id": "a"}]}]', "'kind' ' '; expected"),
            # the shapes a hand-written file gets wrong: one line naming the record, never an AttributeError
            ('[{"query": "x", "relevant": ["report.pdf"]}]', "record 1 has the relevant place 'report.pdf'"),
            ('[{"query": "x", "relevant": {"id": "a"}}]', "'relevant' {'id': 'a'}; expected a list of places"),
            ('[{"query": "x", "relevant": [{"source": "a.pdf", "page": 2.0}]}]', "'page' is 2.0; expected a whole"),
            ('[{"query": ["x"], "relevant": [{"id": "a"}]}]', "record 1 has no 'query'"),
            ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
            ('[{"query": "x", "id": ' + "9" * 5000 + "}]", r"not valid JSON \(a number of more than 4300 digits\)"),
        ],
    )
    def test_invalid_files(self, tmp_path: Path, sample_index: FusionIndex, content: str, message: str) -> None:
        path = tmp_path / "labels.json"
        path.write_text(content)
        with pytest.raises(FusionError, match=message) as error:
            load_labelled(path, sample_index.documents)
        assert "\n" not in str(error.value)

    @pytest.mark.parametrize("suffix", [".json", ".csv", ".txt"])
    def test_readers_are_bounded_and_read_regular_files_only(
        self, tmp_path: Path, sample_index: FusionIndex, monkeypatch: pytest.MonkeyPatch, suffix: str
    ) -> None:
        from langchain_fusion.evaluation import files
        from langchain_fusion.evaluation.datasets import load_queries

        path = tmp_path / f"labels{suffix}"
        path.write_text('[{"query": "x", "relevant": [{"id": "a"}]}]' if suffix == ".json" else "id,query\nq,x\n")
        monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
        read = load_queries if suffix == ".txt" else lambda p: load_labelled(p, sample_index.documents)
        with pytest.raises(FusionError, match=r"labels\.\w+: \d+ bytes, more than the 10 a (labelled|query) file"):
            read(path)
        fifo = tmp_path / f"fifo{suffix}"
        if hasattr(os, "mkfifo"):
            os.mkfifo(fifo)  # reading a pipe nobody writes to would wait forever
            with pytest.raises(FusionError, match="not a regular file"):
                read(fifo)


class TestHarness:
    def test_retrievers_table(self, sample_index: FusionIndex) -> None:
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        retrievers = {"vector": VectorRetriever(index=sample_index), "bm25": BM25Retriever(index=sample_index)}
        report = evaluate_retrievers(retrievers, dataset, ["ndcg@10", "hit_rate@5"], progress=False, batch_size=1)
        rows = report.rows()
        assert [r["method"] for r in rows] == ["vector", "bm25"]
        for row in rows:
            assert 0.0 <= row["ndcg@10"] <= 1.0 and row["p50_ms"] <= row["p95_ms"]  # type: ignore[operator]
        assert report.to_markdown().splitlines()[0] == "| method | ndcg@10 | hit_rate@5 | p50_ms | p95_ms |"
        comparison = report.compare("vector", "bm25", "ndcg@10")
        assert comparison["wins"] + comparison["losses"] + comparison["ties"] == len(dataset.queries)
        # In batches (the default): the same scores, and throughput instead of latency.
        batched = evaluate_retrievers(retrievers, dataset, ["ndcg@10", "hit_rate@5"], progress=False, batch_size=5)
        for one, many in zip(report.results, batched.results, strict=True):
            assert one.means == pytest.approx(many.means)
            assert many.ms_per_query is not None and many.ms_per_query > 0 and not many.latencies_ms
        assert batched.to_markdown().splitlines()[0] == "| method | ndcg@10 | hit_rate@5 | ms_per_query |"

    def test_evaluate_sides(self, sample_index: FusionIndex) -> None:
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        report = evaluate_sides(sample_index, dataset, ["ndcg@10"], progress=False)
        assert [r.name for r in report.results] == list(SIDES) == ["vector", "bm25", "fusion (defaults)"]
        fused = evaluate_retrievers({"f": FusionRetriever(index=sample_index)}, dataset, ["ndcg@10"], progress=False)
        assert report.result("fusion (defaults)").per_query == fused.result("f").per_query

    @pytest.mark.parametrize("batch_size", [0, True, 2.0])
    def test_bad_batch_size(self, sample_index: FusionIndex, batch_size: object) -> None:
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        with pytest.raises(FusionError, match="batch_size must be a positive whole number"):
            evaluate_retrievers({}, dataset, batch_size=batch_size)  # type: ignore[arg-type]

    def test_sweep_endpoints_equal_single_sides(self, sample_index: FusionIndex) -> None:
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        metrics = ["ndcg@10", "mrr@10"]
        sweep = sweep_alpha(sample_index, dataset, [0.0, 0.5, 1.0], ["weighted", "rrf"], metrics, progress=False)
        sides = evaluate_retrievers(
            {
                "vector": VectorRetriever(index=sample_index),
                "bm25": BM25Retriever(index=sample_index),
                "fusion": FusionRetriever(index=sample_index, alpha=0.5),
            },
            dataset,
            metrics,
            progress=False,
        )
        for method in ("weighted", "rrf"):
            assert sweep.result(f"{method}@1").means == pytest.approx(sides.result("vector").means)
            assert sweep.result(f"{method}@0").means == pytest.approx(sides.result("bm25").means)
        assert sweep.result("weighted@0.5").means == pytest.approx(sides.result("fusion").means)

    def test_the_sweep_searches_as_fusion_defaults_do_on_a_corpus_with_copies(self) -> None:
        # The same passage under several files (man pages and pydoc, say): fusion (defaults) returns it once.
        from langchain_fusion.testing import corpus

        docs = corpus(7, 60)
        docs += [
            Document(id=f"copy-{i}", page_content=docs[i].page_content, metadata={"source": f"copy{i}.txt"})
            for i in range(0, 60, 3)
        ]
        index = FusionIndex.from_documents(docs, HashingEmbeddings())
        queries = {f"q{i}": " ".join(docs[i].page_content.split()[:3]) for i in range(1, 60, 2)}
        qrels = {f"q{i}": {docs[i + 1].id or "": 1, f"copy-{(i + 1) // 3 * 3}": 1} for i in range(1, 59, 2)}
        dataset = EvalDataset(name="copies", queries=queries, qrels=qrels, corpus=docs)
        metrics = ["ndcg@10", "recall@5"]
        sweep = sweep_alpha(index, dataset, [0.5], ["weighted"], metrics, progress=False)
        rows = evaluate_retrievers(
            {
                "fusion (defaults)": FusionRetriever(index=index),
                "keep": FusionRetriever(index=index, duplicates="keep"),
            },
            dataset,
            metrics,
            progress=False,
        )
        assert sweep.result("weighted@0.5").per_query == rows.result("fusion (defaults)").per_query
        assert rows.result("keep").per_query != rows.result("fusion (defaults)").per_query  # copies matter here

    def test_any_langchain_retriever_is_scored(self, sample_index: FusionIndex) -> None:
        """A store with its own ids (InMemoryVectorStore) and a retriever without a k field are matched by position."""
        from langchain_core.callbacks import CallbackManagerForRetrieverRun
        from langchain_core.retrievers import BaseRetriever
        from langchain_core.vectorstores import InMemoryVectorStore

        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        chunks = list(sample_index.documents)
        store = InMemoryVectorStore(sample_index.embeddings)
        store.add_documents([Document(page_content=d.page_content, metadata=d.metadata) for d in chunks])

        class Anonymous(BaseRetriever):
            """Returns the fused results with their ids stripped (as many LangChain retrievers do)."""

            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun
            ) -> list[Document]:
                docs = FusionRetriever(index=sample_index, k=10).invoke(query)
                return [Document(page_content=d.page_content, metadata=d.metadata) for d in docs]

        metrics = ["ndcg@10"]
        report = evaluate_retrievers(
            {
                "fusion": FusionRetriever(index=sample_index),
                "anonymous": Anonymous(),
                "in-memory": store.as_retriever(),
                "vector": VectorRetriever(index=sample_index),
            },
            dataset,
            metrics,
            documents=chunks,
            progress=False,
        )
        assert report.result("anonymous").means == pytest.approx(report.result("fusion").means)
        assert report.result("in-memory").means["ndcg@10"] == pytest.approx(
            report.result("vector").means["ndcg@10"], abs=0.02
        )
        assert report.result("in-memory").means["ndcg@10"] > 0.3

    def test_unmatchable_results_are_warned_about(
        self, sample_index: FusionIndex, caplog: pytest.LogCaptureFixture
    ) -> None:
        from langchain_core.callbacks import CallbackManagerForRetrieverRun
        from langchain_core.retrievers import BaseRetriever

        class Nameless(BaseRetriever):
            def _get_relevant_documents(
                self, query: str, *, run_manager: CallbackManagerForRetrieverRun
            ) -> list[Document]:
                return [Document(page_content="no id, no position")]

        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        report = evaluate_retrievers(
            {"nameless": Nameless()}, dataset, ["ndcg@10"], documents=list(sample_index.documents), progress=False
        )
        assert report.result("nameless").means["ndcg@10"] == 0.0
        assert "nameless: none of its" in caplog.text

    def test_a_retriever_over_another_index_is_warned_about(
        self, sample_index: FusionIndex, caplog: pytest.LogCaptureFixture
    ) -> None:
        # Labels resolved against one index, a retriever over the same files chunked otherwise: no id can match.
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other = FusionIndex.from_documents(
                split_documents(load_files([DATA]).documents, chunk_size=300, chunk_overlap=0), HashingEmbeddings()
            )
        report = evaluate_retrievers(
            {"same": sample_index.as_retriever(), "other": other.as_retriever()}, dataset, ["ndcg@10"], progress=False
        )
        assert report.result("other").means["ndcg@10"] == 0.0
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 1 and warned[0].startswith("other: ")
        assert "are not among the documents the labels were resolved against" in warned[0] and "\n" not in warned[0]

    def test_rerank_retrievers_are_scored_at_the_metrics_depth(self, sample_index: FusionIndex) -> None:
        from langchain_fusion.evaluation.harness import _at_depth

        class Identity(BaseDocumentCompressor):
            top_n: int | None = 3

            def compress_documents(
                self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
            ) -> Sequence[Document]:
                return list(documents)[: self.top_n]

        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        fusion = FusionRetriever(index=sample_index)
        reranked = RerankRetriever(retriever=FusionRetriever(index=sample_index, k=4), reranker=Identity())
        assert len(_at_depth(reranked, 10).invoke("flood")) == 10
        assert len(reranked.invoke("flood")) == 3  # the caller's retriever is left as it was
        report = evaluate_retrievers({"fusion": fusion, "identity rerank": reranked}, dataset, progress=False)
        assert report.result("identity rerank").per_query == report.result("fusion").per_query

    def test_multi_query_rows(self, sample_index: FusionIndex) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        fusion = FusionRetriever(index=sample_index)
        failing = RatingModel(rule=lambda prompt: ValueError("no model here"))
        writing = RatingModel(rule=lambda prompt: "flood damage\nbattery racks")
        retrievers = {
            "fusion": fusion,
            "multi-query, failing model": MultiQueryFusionRetriever(retriever=fusion, llm=failing),
            "multi-query": MultiQueryFusionRetriever(retriever=fusion, llm=writing, n=2),
        }
        report = evaluate_retrievers(retrievers, dataset, progress=False)
        fallback = report.result("multi-query, failing model").per_query
        for query, scores in report.result("fusion").per_query.items():  # the original query's search alone
            assert fallback[query] == pytest.approx(scores)
        assert 0.0 < report.result("multi-query").means["ndcg@10"] <= 1.0
        assert len(writing.calls) == len(dataset.queries)

    def test_plot(self, sample_index: FusionIndex, tmp_path: Path) -> None:
        pytest.importorskip("matplotlib")
        dataset = load_labelled(SAMPLE_QUERIES, sample_index.documents)
        sweep = sweep_alpha(sample_index, dataset, [0.0, 0.5, 1.0], ["weighted"], ["ndcg@10"], progress=False)
        path = plot_alpha_sweep(sweep, "ndcg@10", tmp_path / "plots" / "alpha.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_alpha_grid(self) -> None:
        assert alpha_grid("0:1:0.25") == [0.0, 0.25, 0.5, 0.75, 1.0]
        assert alpha_grid("0.3,0.7") == [0.3, 0.7]
        assert len(alpha_grid("0:1:0.1")) == 11
        for bad in ("0:2:0.5", "a:b", "0:1:0", ""):
            with pytest.raises(InvalidParameterError):
                alpha_grid(bad)


class TestCachedEmbeddings:
    def test_second_run_makes_no_calls(self, tmp_path: Path) -> None:
        calls: list[int] = []

        class Counting(HashingEmbeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                calls.append(len(texts))
                return super().embed_documents(texts)

        texts = ["alpha text", "beta text", "alpha text"]
        first = CachedEmbeddings(Counting(), tmp_path).embed_documents(texts)
        assert calls == [2]  # the repeated text is embedded once
        again = CachedEmbeddings(Counting(), tmp_path)
        assert np.allclose(again.embed_documents(texts), first)
        assert calls == [2] and again.hits == 3 and again.misses == 0
        again.embed_documents(["gamma"])
        assert calls == [2, 1]

    def test_model_id_is_the_wrapped_model(self, tmp_path: Path) -> None:
        inner = HashingEmbeddings()
        assert embeddings_id(CachedEmbeddings(inner, tmp_path)) == embeddings_id(inner)
        other = CachedEmbeddings(HashingEmbeddings(model="other"), tmp_path)
        assert other.folder != CachedEmbeddings(inner, tmp_path).folder

    def test_damaged_shard_is_ignored(self, tmp_path: Path) -> None:
        cache = CachedEmbeddings(HashingEmbeddings(), tmp_path)
        cache.embed_documents(["one", "two"])
        for shard in cache.folder.glob("shard-*.npy"):
            shard.write_bytes(b"garbage")
        fresh = CachedEmbeddings(HashingEmbeddings(), tmp_path)
        assert np.allclose(fresh.embed_documents(["one"]), HashingEmbeddings().embed_documents(["one"]), atol=1e-6)
        assert fresh.misses == 1

    def test_index_built_through_the_cache_loads_with_the_plain_model(self, tmp_path: Path) -> None:
        docs = [Document(page_content=r["text"]) for r in BEIR_CORPUS]
        index = FusionIndex.from_documents(docs, CachedEmbeddings(HashingEmbeddings(), tmp_path / "cache"))
        loaded = FusionIndex.load(index.save(tmp_path / "index"), HashingEmbeddings())
        assert len(loaded) == 4


TOY_PER_QUERY = {
    "vector": {"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 0.25},
    "bm25": {"q1": 0.0, "q2": 1.0, "q3": 0.5, "q4": 0.75},
}
TOY_KINDS = {"q2": "paraphrase", "q1": "keyword", "q3": "keyword", "q9": "mixed"}  # q4 has none, q9 is not run


class TestByKind:
    """The per-kind breakdown, on a report written by hand so every mean can be checked."""

    def report(self) -> Report:
        results = [
            MethodResult(name, {q: {"ndcg@10": v, "mrr@10": v / 2} for q, v in values.items()}, latencies_ms=[1.0] * 4)
            for name, values in TOY_PER_QUERY.items()
        ]
        return Report("toy", ["ndcg@10", "mrr@10"], results)

    def test_by_kind(self) -> None:
        by_kind = self.report().by_kind(TOY_KINDS)
        assert list(by_kind) == ["keyword", "paraphrase"]  # in query order; q4 (no kind) and q9 (not run) left out
        keyword = by_kind["keyword"]
        assert keyword.dataset == "toy (keyword)" and keyword.metrics == ["ndcg@10", "mrr@10"]
        assert keyword.result("vector").means == {"ndcg@10": 0.75, "mrr@10": 0.375}
        assert keyword.result("bm25").means == {"ndcg@10": 0.25, "mrr@10": 0.125}
        assert by_kind["paraphrase"].result("bm25").per_query == {"q2": {"ndcg@10": 1.0, "mrr@10": 0.5}}
        assert all(not r.latencies_ms for r in keyword.results)  # timings belong to all queries together
        assert self.report().by_kind({}) == {}

    def test_kind_table(self) -> None:
        assert self.report().kind_table(TOY_KINDS, "ndcg@10").splitlines() == [
            "| ndcg@10 | vector | bm25 |",
            "| --- | --- | --- |",
            "| keyword (2) | 0.7500 | 0.2500 |",
            "| paraphrase (1) | 0.0000 | 1.0000 |",
            "| all (4) | 0.4375 | 0.5625 |",
        ]
        assert self.report().kind_table({}, "mrr@10").splitlines()[2:] == ["| all (4) | 0.2188 | 0.2812 |"]

    def test_kind_table_unknown_metric(self) -> None:
        with pytest.raises(InvalidParameterError, match="metric 'recall@10' is not in this report; it has ndcg@10"):
            self.report().kind_table(TOY_KINDS, "recall@10")


class TestEvalCommand:
    """The eval command; ``--embeddings local`` is the deterministic fake here (see ``fake_cli_embeddings``)."""

    @pytest.fixture(autouse=True)
    def fake_models(self) -> Iterator[None]:
        with fake_cli_embeddings():
            yield

    def test_beir_folder(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = write_beir(tmp_path / "beir")
        plot = tmp_path / "alpha.png"
        argv = ["eval", "--beir", str(folder), "--embeddings", "local", "--cache", str(tmp_path / "cache")]
        status = main([*argv, "--alpha", "0:1:0.5", "--plot", str(plot), "--json", "-q"])
        assert status == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["queries"] == 2
        assert [r["method"] for r in payload["retrievers"]] == ["vector", "bm25", "fusion (defaults)"]
        assert len(payload["sweep"]) == 9 and plot.exists()
        assert all(0 <= r["ndcg@10"] <= 1 for r in payload["sweep"])
        # A rerun is served from the embedding cache.
        cached = list((tmp_path / "cache").rglob("shard-*.npy"))
        assert main([*argv, "--alpha", "0.5", "-q"]) == 0
        assert list((tmp_path / "cache").rglob("shard-*.npy")) == cached
        assert "alpha sweep (ndcg@10" in capsys.readouterr().out

    def test_the_sweep_says_why_its_ends_differ_from_the_single_sides(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        folder = write_beir(tmp_path / "beir")
        copy_ = {**BEIR_CORPUS[0], "_id": "d1copy"}  # the same passage under another id
        with (folder / "corpus.jsonl").open("a") as corpus_file:
            corpus_file.write(json.dumps(copy_) + "\n")
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td1copy\t2\nq2\td2\t1\n")
        argv = ["eval", "--beir", str(folder), "--embeddings", "local", "--cache", str(tmp_path / "cache")]
        assert main([*argv, "--alpha", "0:1:0.5", "-q"]) == 0
        out = capsys.readouterr().out
        assert (
            "note: the sweep searches as fusion (defaults) does, returning the copies of one text once "
            "(duplicates=exact); the vector and bm25 rows return every copy, so alpha 1 and 0 differ from them here"
        ) in out
        plain = [*argv[:2], str(write_beir(tmp_path / "plain")), *argv[3:]]
        assert main([*plain, "--alpha", "0:1:0.5", "-q"]) == 0
        assert "note: the sweep" not in capsys.readouterr().out  # no copies, nothing to explain

    def test_batch_size_chooses_throughput_or_latency(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = write_beir(tmp_path / "beir")
        argv = ["eval", "--beir", str(folder), "--embeddings", "local", "--cache", str(tmp_path / "cache")]
        for size, columns in (("8", ["ms_per_query"]), ("1", ["p50_ms", "p95_ms"])):
            assert main([*argv, "--alpha", "0.5", "--json", "-q", "--batch-size", size]) == 0
            rows = json.loads(capsys.readouterr().out)["retrievers"]
            assert all(set(columns) <= set(row) for row in rows)
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--batch-size", "0"])
        assert exit_info.value.code == 2
        assert "--batch-size: expected a positive integer, got '0'" in capsys.readouterr().err

    def test_rerank_and_multi_query_rows(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        tiny_cross_encoder: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        from tests.helpers.fake_chat_models import RatingModel

        model = RatingModel(rule=lambda prompt: "solar energy storage\nriver flooding")
        monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", lambda spec: model)
        folder = write_beir(tmp_path / "beir")
        argv = ["eval", "--beir", str(folder), "--embeddings", "local", "--cache", str(tmp_path / "cache")]
        extra = ["--rerank", f"cross-encoder:{tiny_cross_encoder}", "--multi-query", "2", "--alpha", "0.5"]
        assert main([*argv, *extra, "--json", "-q"]) == 0
        payload = json.loads(capsys.readouterr().out)
        rows = [r["method"] for r in payload["retrievers"]]
        assert rows[3:] == [f"fusion + rerank (cross-encoder:{tiny_cross_encoder})", "fusion + multi-query (n=2)"]
        assert all(0 <= r["ndcg@10"] <= 1 for r in payload["retrievers"])
        assert [c["method"] for c in payload["per_query"]][2:] == rows[3:]
        assert len(model.calls) == 2  # one rewrite call per judged query
        assert main([*argv, "--alpha", "0.5", "--rerank", "cross-encoder:./no-such-model"]) == 2
        assert "cross-encoder folder './no-such-model' does not exist" in capsys.readouterr().err

    def test_calibrate_writes_the_model_into_the_index(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "sample-index"
        assert main(["index", str(DATA), "--out", str(out), "--embeddings", "local", "-q"]) == 0
        argv = [
            "eval",
            "--index",
            str(out),
            "--labels",
            str(SAMPLE_QUERIES),
            "--alpha",
            "0.5",
            "--methods",
            "weighted",
            "-q",
        ]
        sweep = ["--relevance-floors", "0.3,0.5", "--no-answer", str(DATA / "no-answer.json")]
        assert main([*argv, "--calibrate", *sweep]) == 0
        text = capsys.readouterr().out
        assert "calibrated relevance saved into the index: fitted on 54 queries" in text
        assert "relevance floors (min_relevance; 54 answerable and 16 no-answer queries)" in text
        assert "| relevance>=0.3 |" in text and "| relevance>=0.5 |" in text
        model = FusionIndex.load(out, HashingEmbeddings()).relevance_model
        assert model is not None and model.quality.queries == 54
        assert main(["query", str(out), "recipe for banana bread", "--min-relevance", "0.99", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []
        assert main(["query", str(out), "KV-5500 inverter rating kVA", "-k", "2"]) == 0
        assert "P(rel)" in capsys.readouterr().out.splitlines()[0]  # the table shows each result's relevance
        assert main(["query", str(out), "recipe for banana bread", "--min-relevance", "0.99"]) == 0
        assert capsys.readouterr().out.strip() == "no results above the relevance floor"
        # An index rerun keeps the model (and embeds nothing new).
        assert main(["index", str(DATA), "--out", str(out), "--embeddings", "local", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["chunks_embedded"] == 0
        assert FusionIndex.load(out, HashingEmbeddings()).relevance_model == model

    def test_relevance_floors_are_probabilities(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = write_beir(tmp_path / "beir")
        assert main(["eval", "--beir", str(folder), "--relevance-floors", "0.3,1.5"]) == 2
        assert "min_relevance must be a probability between 0 and 1" in capsys.readouterr().err

    def test_calibrate_needs_a_saved_index(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = write_beir(tmp_path / "beir")
        assert main(["eval", "--beir", str(folder), "--calibrate", "--embeddings", "local"]) == 2
        assert "--calibrate writes the relevance model into a saved index" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "argv,message",
        [
            (["eval", "--beir", "x", "--llm", "openai"], "eval uses a chat model only for --rerank llm"),
            (["eval", "--index", "x"], "give a saved index and its labelled queries"),
            (["eval", "--beir", "x", "--index", "y", "--labels", "z"], "either --beir FOLDER"),
            (["eval", "--beir", "x", "--metrics", "ndcg"], "unknown metric 'ndcg'"),
            (["eval", "--beir", "x", "--alpha", "2"], "alpha must be a number between 0 and 1"),
            (["eval", "--beir", "x", "--methods", "sum"], "method must be one of"),
        ],
    )
    def test_user_errors(self, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("langchain-fusion: error:") and message in err and len(err.strip().splitlines()) == 1


class TestEvalCommandDefaults:
    def test_batch_size_matches_the_harness(self) -> None:
        from langchain_fusion.cli import eval_arguments as command
        from langchain_fusion.evaluation import harness

        assert command.DEFAULT_BATCH_SIZE == harness.DEFAULT_BATCH_SIZE
