"""Why not: index.explain(query, doc_id) agrees with what the search returns, and says why the rest are not there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex, InvalidParameterError, UnknownDocumentError
from langchain_fusion import metadata as keys
from langchain_fusion.search.explain import Explanation
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY, FitQuality, RelevanceModel
from langchain_fusion.testing import WORDS, corpus
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings

QUERIES = WORDS.queries[:4]

OPTIONS: list[dict[str, Any]] = [
    {},
    {"k": 3},
    {"k": 6, "fetch_k": 4},
    {"k": 5, "fetch_k": None},
    {"k": 5, "alpha": 0.0},
    {"k": 5, "alpha": 1.0, "fetch_k": 8},
    {"k": 5, "method": "rrf", "fetch_k": 10},
    {"k": 5, "method": "zscore"},
    {"k": 6, "filter": {"bucket": 1}},
    {"k": 6, "filter": {"source": ["s1.txt", "s2.txt"]}, "fetch_k": 6},
    {"k": 8, "min_vector_score": 0.3, "min_bm25_score": 2.0},
    {"k": 8, "min_bm25_score": 0.0, "alpha": 0.7},
    {"k": 6, "max_per_source": 1},
    {"k": 6, "max_per_source": 2, "fetch_k": 12},
    {"k": 5, "lambda_mult": 0.3},
    {"k": 5, "lambda_mult": 0.5, "max_per_source": 1, "fetch_k": 15},
    {"k": 6, "duplicates": "keep"},
    {"k": 6, "duplicates": "near", "near_duplicate_similarity": 0.8},
    {"k": 6, "min_relevance": 0.5},
    {"k": 6, "min_relevance": 0.5, "max_per_source": 1, "min_bm25_score": 0.5},
]
"""Every kind of option alone and a few together (min_relevance: on the calibrated index below)."""


def _docs() -> list[Document]:
    """The store contract's random corpus, with a few texts copied under other sources (and ids)."""
    docs = corpus(21, 80)
    for i in (0, 3, 7, 11, 30):
        source = docs[i].metadata
        docs.append(
            Document(id=f"copy-{i}", page_content=docs[i].page_content, metadata={**source, "source": f"c{i}.txt"})
        )
    return docs


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    built = FusionIndex.from_documents(_docs(), HashingEmbeddings())
    # A relevance model made by hand (rank-heavy), so that min_relevance cuts within the top k.
    model = RelevanceModel(
        mean=[0.0, 0.0, 0.0],
        scale=[1.0, 1.0, 1.0],
        weights=[2.0, 0.5, -2.0],
        bias=1.0,
        k=10,
        dataset="hand-made",
        quality=FitQuality(queries=1, results=10, relevant=5, expected_calibration_error=0.0, brier_score=0.0),
    )
    built.saved_info = {RELEVANCE_INFO_KEY: model.model_dump(mode="json")}
    return built


def _checked(index: FusionIndex, results: list[Document], options: dict[str, Any], explanation: Explanation) -> None:
    """What each verdict claims holds in ``results``, the search's for the explained query with ``options``."""
    ids = [d.id for d in results]
    doc_id = explanation.doc_id
    if explanation.verdict == "returned":
        assert explanation.rank is not None and ids[explanation.rank - 1] == doc_id
        return
    assert doc_id not in ids, (options, explanation)
    verdict = explanation.verdict
    if verdict == "filtered":
        (doc,) = index.get_by_ids([doc_id])
        assert all(doc.metadata.get(k) not in (v if isinstance(v, list) else [v]) for k, v in options["filter"].items())
    elif verdict == "below_floor":
        assert "min_vector_score" in options or "min_bm25_score" in options
    elif verdict == "duplicate":
        if explanation.kept_copy in ids:
            kept = results[ids.index(explanation.kept_copy)]
            assert doc_id in [c["id"] for c in kept.metadata[keys.ALSO_IN]]
        else:  # the copy chosen in its place fell below min_relevance, and says so
            assert "min_relevance" in options and "then left out below min_relevance" in explanation.message
    elif verdict == "capped":
        sources = [d.metadata["source"] for d in index.get_by_ids(explanation.capped_by)]
        assert len(sources) == options["max_per_source"] and len(set(sources)) == 1
        dropped = [i for i in explanation.capped_by if i not in ids]  # chosen, then below min_relevance
        assert not dropped or "min_relevance" in options
    elif verdict == "not_picked_by_mmr":
        assert options.get("lambda_mult") is not None
    elif verdict == "below_min_relevance":
        assert explanation.relevance is not None and explanation.relevance < options["min_relevance"]
    elif verdict == "outside_pool":
        assert options.get("fetch_k", 100) is not None or options.get("alpha") == 0.0 or "filter" in options
    else:
        assert verdict == "below_k", explanation


class TestAgreesWithTheSearch:
    @pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
    def test_returned_at_rank_r_exactly_when_the_search_returns_it_there(
        self, index: FusionIndex, options: dict[str, Any]
    ) -> None:
        rng = np.random.default_rng(len(str(options)))
        all_ids = [d.id or "" for d in index.documents]
        verdicts = set()
        for query in QUERIES:
            results = index.as_retriever(**options).invoke(query)  # searched once: the search is deterministic
            returned = [d.id for d in results]
            sample = set(returned) | set(rng.choice(all_ids, size=25, replace=False).tolist())
            for doc_id in sorted(sample):
                explanation = index.explain(query, doc_id, **options)
                if doc_id in returned:
                    assert explanation.verdict == "returned" and explanation.rank == returned.index(doc_id) + 1
                else:
                    assert (explanation.verdict != "returned" and explanation.rank is None) or (
                        explanation.verdict == "below_min_relevance"
                    )
                _checked(index, results, options, explanation)
                verdicts.add(explanation.verdict)
            assert [d.id for d in index.as_retriever(**options).invoke(query)] == returned  # explaining changed nothing
        assert "returned" in verdicts and len(verdicts) >= 2, verdicts

    def test_every_verdict_occurs_in_the_grid(self, index: FusionIndex) -> None:
        """The grid above reaches every verdict, so each is checked against the search somewhere."""
        seen = set()
        for options in OPTIONS:
            for doc_id in [d.id or "" for d in index.documents][::3]:
                seen.add(index.explain(QUERIES[0], doc_id, **options).verdict)
        assert seen == {
            "returned",
            "filtered",
            "outside_pool",
            "below_floor",
            "duplicate",
            "capped",
            "not_picked_by_mmr",
            "below_k",
            "below_min_relevance",
        }


class TestWhatItSays:
    def test_outside_the_pool_gives_the_rank_on_each_side(self, index: FusionIndex) -> None:
        query = QUERIES[0]
        view = index.view()
        rows = np.arange(len(index))
        cosine = view.vectors(rows).astype(np.float64) @ index.embed_query(query)[0].astype(np.float64)
        bm25 = view.bm25(query).scores(rows)
        vector_order = np.lexsort((rows, -cosine)).tolist()
        matched = rows[bm25 > 0]
        bm25_order = matched[np.lexsort((matched, -bm25[matched]))].tolist()
        outside = [
            e
            for d in index.documents
            if (e := index.explain(query, d.id or "", k=3, fetch_k=3)).verdict == "outside_pool"
        ]
        assert len(outside) > len(index) // 2
        for explanation in outside:
            row = int(view.keys_of([explanation.doc_id])[0])
            assert explanation.vector_rank == vector_order.index(row) + 1 > 3
            if bm25[row] > 0:
                assert explanation.bm25_rank == bm25_order.index(row) + 1 > 3
            else:
                assert explanation.bm25_rank is None and "no query term" in explanation.message
            assert explanation.pool_size == 3 and "fetch_k=3" in explanation.message

    def test_messages_and_data(self, index: FusionIndex) -> None:
        query = QUERIES[0]
        top = index.as_retriever(k=2).invoke(query)[0]
        explanation = index.explain(query, top.id or "", k=2)
        assert (
            str(explanation)
            == explanation.message
            == f"{top.id} is returned at rank 1 of 2 "
            + (
                f"(fused score {top.metadata[keys.FUSION_SCORE]:.3f}: vector {top.metadata[keys.VECTOR_SCORE]:.3f}, "
                f"BM25 {top.metadata[keys.BM25_SCORE]:.2f})"
            )
        )
        data = explanation.to_dict()
        assert json.loads(json.dumps(data)) == data and data["verdict"] == "returned" and data["fused_rank"] == 1
        assert index.explain(query, top, k=2) == explanation  # a Document works too

    def test_a_readable_repr(self, index: FusionIndex) -> None:
        # What Jupyter shows for the last expression: the verdict and the message, not 17 fields.
        query = QUERIES[0]
        last = index.as_retriever(k=8).invoke(query)[-1]
        explanation = index.explain(query, last.id or "", k=3)
        shown = repr(explanation)
        assert shown == f"<Explanation {explanation.verdict}: {explanation.message}>"
        assert "ranks_searched" not in shown and "\n" not in shown
        pretty: list[str] = []

        class Printer:
            def text(self, value: str) -> None:
                pretty.append(value)

        explanation._repr_pretty_(Printer(), cycle=False)
        assert pretty == [shown]

    def test_a_duplicate_names_the_copy_returned(self, index: FusionIndex) -> None:
        original = index.get_by_ids(["d21-0"])[0]
        found = index.as_retriever(k=3).invoke(original.page_content)
        kept = found[0].id
        other = "copy-0" if kept == "d21-0" else "d21-0"
        explanation = index.explain(original.page_content, other, k=3)
        assert explanation.verdict == "duplicate" and explanation.kept_copy == kept
        assert index.explain(original.page_content, other, k=3, duplicates="keep").verdict == "returned"

    def test_unknown_ids_and_bad_input(self, index: FusionIndex) -> None:
        with pytest.raises(UnknownDocumentError, match="no document with id 'nope' in the index"):
            index.explain("w1", "nope")
        with pytest.raises(UnknownDocumentError, match=r"it is a source: give the id of one of its chunks \(such as"):
            index.explain("w1", "s1.txt")
        with pytest.raises(InvalidParameterError, match="the query is empty"):
            index.explain("  ", "d21-0")
        with pytest.raises(InvalidParameterError, match="unknown retriever option"):
            index.explain("w1", "d21-0", kk=3)
        with pytest.raises(InvalidParameterError, match="max_per_source must be"):
            index.explain("w1", "d21-0", max_per_source=0)


@pytest.fixture(scope="module")
def saved(index: FusionIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("explain") / "idx"
    index.save(folder)
    return folder


class TestCommandLine:
    def test_the_flags_of_query(self, index: FusionIndex, saved: Path) -> None:
        query = QUERIES[1]
        with fake_cli_embeddings():
            found = json.loads(run_cli(["query", str(saved), query, "-k", "3", "--max-per-source", "1", "--json"])[1])
            for doc_id in [found[1]["id"], "d21-5", "copy-3"]:
                status, out, err = run_cli(["explain", str(saved), query, doc_id, "-k", "3", "--max-per-source", "1"])
                assert status == 0, err
                expected = index.explain(query, doc_id, k=3, max_per_source=1)
                assert out.strip() == expected.message
                status, out, _ = run_cli(
                    ["explain", str(saved), query, doc_id, "-k", "3", "--max-per-source=1", "--json"]
                )
                assert json.loads(out) == expected.to_dict()
        assert expected.verdict != "returned" or expected.rank is not None
        assert index.explain(query, found[1]["id"], k=3, max_per_source=1).rank == 2

    def test_errors_are_one_line(self, saved: Path) -> None:
        with fake_cli_embeddings():
            assert_one_line_error(*run_cli(["explain", str(saved), "w1", "nope"]), "no document with id 'nope'")
            assert_one_line_error(*run_cli(["explain", str(saved), " ", "d21-0"]), "the query is empty")


def _chains() -> list[Document]:
    """Near-duplicate chains: each text one word away from the last, so copies collapse into a few groups."""
    rng = np.random.default_rng(45)
    words = [f"w{i}" for i in range(40)]
    docs = []
    for chain in range(3):
        text = list(rng.choice(words, 12))
        for step in range(5 if chain < 2 else 3):
            text[int(rng.integers(12))] = str(rng.choice(words))
            docs.append(
                Document(id=f"c{chain}-{step}", page_content=" ".join(text), metadata={"source": f"s{step}.txt"})
            )
    return docs  # 13 chunks


class TestCopiesAgreeWithAlsoIn:
    """Every copy a result lists in also_in is explained as a duplicate of that result, whatever its rank."""

    @pytest.mark.parametrize("similarity", [0.6, 0.75, 0.9])
    def test_also_in_means_duplicate(self, similarity: float) -> None:
        index = FusionIndex.from_documents(_chains(), HashingEmbeddings())
        options = {"duplicates": "near", "near_duplicate_similarity": similarity}
        checked = 0
        for query in ["w1 w2 w3", "w5 w9", "w10 w11 w12 w13", "w20 w30", "w7"]:
            for k in (1, 2, 3, 4):
                results = index.as_retriever(k=k, **options).invoke(query)
                for result in results:
                    for copy_ in result.metadata.get(keys.ALSO_IN, []):
                        explanation = index.explain(query, copy_["id"], k=k, **options)
                        assert (explanation.verdict, explanation.kept_copy) == ("duplicate", result.id), explanation
                        checked += 1
        assert checked > 10

    def test_also_in_means_duplicate_for_exact_copies(self, index: FusionIndex) -> None:
        checked = 0
        for original in index.get_by_ids([f"d21-{i}" for i in (0, 3, 7, 11, 30)]):
            query = " ".join(original.page_content.split()[:4])
            for k in (1, 2, 3, 5):
                for result in index.as_retriever(k=k).invoke(query):
                    for copy_ in result.metadata.get(keys.ALSO_IN, []):
                        explanation = index.explain(query, copy_["id"], k=k)
                        assert (explanation.verdict, explanation.kept_copy) == ("duplicate", result.id), explanation
                        checked += 1
        assert checked >= 5
