"""Copies of one text (the same passage under several files): one result, the other copies in ``also_in``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import ContextWindowRetriever, FusionIndex, HierarchicalIndex, InvalidParameterError
from langchain_fusion import metadata as keys
from langchain_fusion.cli.app import main
from langchain_fusion.search.diversity import pick_in_order
from langchain_fusion.search.duplicates import duplicate_groups
from langchain_fusion.search.options import SearchOptions
from tests.helpers.cli import run_cli
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings, fake_cli_embeddings

SHARED = "The cat sat on the warm mat by the fire."
"""The text every copy holds (ANIMALS[0])."""


def _corpus() -> list[Document]:
    """The animals, one per source, and three copies of the first under other files (one with other spacing)."""
    docs = [
        Document(id=f"a{i}", page_content=t, metadata={keys.SOURCE: f"doc{i}.txt", keys.CHUNK_INDEX: 0})
        for i, t in enumerate(ANIMALS)
    ]
    docs += [
        Document(id="copy1", page_content=SHARED, metadata={keys.SOURCE: "copy1.txt", keys.CHUNK_INDEX: 0}),
        Document(id="copy2", page_content=SHARED.replace(" ", "  "), metadata={keys.SOURCE: "copy2.txt"}),
        Document(id="copy3", page_content=SHARED, metadata={keys.SOURCE: "doc2.txt", keys.CHUNK_INDEX: 1}),
    ]
    return docs


COPIES = {"a0", "copy1", "copy2", "copy3"}


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    return FusionIndex.from_documents(_corpus(), HashingEmbeddings())


def _ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


class TestExactCopies:
    def test_one_result_lists_the_other_copies(self, index: FusionIndex) -> None:
        every = index.as_retriever(k=len(index), duplicates="keep").invoke("cat on the mat")
        assert set(_ids(every[:4])) == COPIES  # identical texts score alike: they come first, together
        found = index.as_retriever(k=4).invoke("cat on the mat")
        assert found[0].id == every[0].id  # the best-ranked copy is kept, with its own scores
        assert {k: v for k, v in found[0].metadata.items() if k != keys.ALSO_IN} == every[0].metadata
        also_in = found[0].metadata[keys.ALSO_IN]
        assert [c["id"] for c in also_in] == _ids(every[1:4])  # best-ranked first
        assert all(c[keys.SOURCE] == d.metadata[keys.SOURCE] for c, d in zip(also_in, every[1:4], strict=True))
        # k results still come back: the copies' places go to the next texts, in fused order
        assert _ids(found[1:]) == [d.id for d in every if d.id not in COPIES][:3]
        assert all(keys.ALSO_IN not in d.metadata for d in found[1:])
        assert len({d.page_content for d in found}) == 4

    def test_keep_returns_every_copy(self, index: FusionIndex) -> None:
        kept = index.as_retriever(k=4, duplicates="keep").invoke("cat on the mat")
        assert set(_ids(kept)) == COPIES and all(keys.ALSO_IN not in d.metadata for d in kept)
        assert _ids(index.as_retriever(k=4).invoke("cat on the mat", duplicates="keep")) == _ids(kept)

    def test_collapsing_happens_before_the_floors_fill_k(self, index: FusionIndex) -> None:
        found = index.as_retriever(k=8, min_bm25_score=0.0).invoke("cat on the mat")
        every = index.as_retriever(k=8, min_bm25_score=0.0, duplicates="keep").invoke("cat on the mat")
        assert _ids(found) == [every[0].id, *[d.id for d in every if d.id not in COPIES][: len(found) - 1]]

    def test_the_cap_per_source_skips_a_full_source_not_the_text(self, index: FusionIndex) -> None:
        # copy3 is in doc2.txt; with one result per source, a doc2.txt chunk ranked above it would fill it first
        every = index.as_retriever(k=len(index), duplicates="keep").invoke("cat dog friends mat")
        found = index.as_retriever(k=5, max_per_source=1).invoke("cat dog friends mat")
        sources = [d.metadata[keys.SOURCE] for d in found]
        assert len(set(sources)) == len(sources) == 5
        assert sum(d.id in COPIES for d in found) == 1
        shared = next(d for d in found if d.id in COPIES)
        assert shared.id == next(d.id for d in every if d.id in COPIES)

    def test_mmr_picks_one_copy(self, index: FusionIndex) -> None:
        found = index.as_retriever(k=5, lambda_mult=0.9).invoke("cat on the mat")
        assert sum(d.id in COPIES for d in found) == 1 and len(found) == 5
        kept = index.as_retriever(k=5, lambda_mult=1.0, duplicates="keep").invoke("cat on the mat")
        assert sum(d.id in COPIES for d in kept) == 4  # lambda_mult=1 is the fused order: every copy

    def test_windows_keep_the_copies_of_their_hit(self, index: FusionIndex) -> None:
        windows = ContextWindowRetriever(retriever=index.as_retriever(k=2), n=1).invoke("cat on the mat")
        assert keys.ALSO_IN in windows[0].metadata

    def test_hierarchical_search_collapses_too(self, index: FusionIndex) -> None:
        everything = [d.id for d in index.documents]
        summary = Document(page_content="pets", metadata={keys.SOURCE: "all", keys.SUMMARY_CHUNK_IDS: everything})
        hierarchical = HierarchicalIndex.from_summaries(index, [summary])
        found = hierarchical.as_retriever(k=4).invoke("cat on the mat")
        kept = hierarchical.as_retriever(k=4, duplicates="keep").invoke("cat on the mat")
        assert set(_ids(kept)) == COPIES
        assert found[0].id == kept[0].id and len(found[0].metadata[keys.ALSO_IN]) == 3
        assert sum(d.id in COPIES for d in found) == 1 and len(found) == 4


class TestNearCopies:
    def test_near_copies_collapse_only_when_asked(self) -> None:
        text = "solar panel output drops when dust covers the glass of the clinic roof panels at noon"
        docs = [
            Document(id="original", page_content=text, metadata={keys.SOURCE: "a.txt"}),
            Document(id="edited", page_content=text + " today", metadata={keys.SOURCE: "b.txt"}),
            Document(id="other", page_content="battery cabinets store energy", metadata={keys.SOURCE: "c.txt"}),
        ]
        index = FusionIndex.from_documents(docs, HashingEmbeddings())
        similarity = float(np.dot(*index.view().vectors(index.view().keys_of(["original", "edited"]))))
        assert 0.9 < similarity < 1.0
        plain = _ids(index.as_retriever(k=2).invoke("solar panel dust"))
        assert set(plain) == {"original", "edited"}
        near = index.as_retriever(k=2, duplicates="near", near_duplicate_similarity=0.9).invoke("solar panel dust")
        assert _ids(near) == [plain[0], "other"] and near[0].metadata[keys.ALSO_IN][0]["id"] == plain[1]
        strict = index.as_retriever(k=2, duplicates="near", near_duplicate_similarity=similarity + 1e-6)
        assert _ids(strict.invoke("solar panel dust")) == plain

    def test_groups_follow_the_first_member(self) -> None:
        docs = ["a", "b", "a ", "", "", "c"]
        vectors = np.eye(6)
        vectors[5] = vectors[1]  # "c" has "b"'s vector
        assert duplicate_groups(docs).tolist() == [0, 1, 0, 3, 4, 5]  # empty texts are never copies
        assert duplicate_groups(docs, vectors, 0.98).tolist() == [0, 1, 0, 3, 4, 1]

    def test_groups_equal_comparing_every_normalised_text(self) -> None:
        """Only texts sharing a first and last word are normalised: the groups are those of comparing them all."""
        rng = np.random.default_rng(7)
        words = ["a", "b", "ab", "ba", "é", "日本"]
        spaces = [" ", "  ", "\n", "\t ", "\u3000"]
        for _ in range(300):
            texts = []
            for _ in range(int(rng.integers(1, 12))):
                chosen = [words[int(i)] for i in rng.integers(0, len(words), int(rng.integers(0, 4)))]
                gaps = [spaces[int(i)] for i in rng.integers(0, len(spaces), len(chosen) + 1)]
                texts.append(gaps[0] + "".join(w + g for w, g in zip(chosen, gaps[1:], strict=True)))
            first: dict[str, int] = {}
            expected = [
                i if not " ".join(t.split()) else first.setdefault(" ".join(t.split()), i) for i, t in enumerate(texts)
            ]
            assert duplicate_groups(texts).tolist() == expected, texts

    def test_picking_in_order(self) -> None:
        copies = np.array([0, 1, 0, 3])
        sources = np.array([0, 0, 1, 1])
        picks = pick_in_order(4, 3, sources, 1, copies)
        assert picks.positions.tolist() == [0, 3] and picks.passed_over == {1: "capped", 2: "duplicate"}
        # a capped copy does not block its other copy
        assert pick_in_order(3, 2, np.array([0, 0, 1]), 1, np.array([0, 1, 1])).positions.tolist() == [0, 2]


class TestOptions:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"duplicates": "collapse"}, "duplicates must be one of exact, near, keep"),
            ({"duplicates": True}, "duplicates must be one of"),
            ({"near_duplicate_similarity": -0.1}, "near_duplicate_similarity must be a cosine similarity between 0"),
            ({"near_duplicate_similarity": 1.5}, "near_duplicate_similarity must be"),
        ],
    )
    def test_bad_values(self, index: FusionIndex, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            index.as_retriever(**options)
        with pytest.raises(InvalidParameterError, match=message):
            index.as_retriever().invoke("cat", **options)

    def test_the_default_is_exact(self) -> None:
        assert SearchOptions().duplicates == "exact" and SearchOptions().near_duplicate_similarity == 0.95

    def test_cli(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        for name in ("a.md", "b.md"):
            (tmp_path / name).write_text(SHARED + "\n\nDogs bark at the postman.", encoding="utf-8")
        (tmp_path / "c.md").write_text("Cats purr on a mat when content.", encoding="utf-8")
        out = tmp_path / "idx"
        with fake_cli_embeddings():
            assert run_cli(["index", str(tmp_path), "--out", str(out), "-q"])[0] == 0
            status, text, err = run_cli(["query", str(out), "cat on the mat", "-k", "3", "--json"])
            assert status == 0, err
            found = json.loads(text)
            kept = json.loads(
                run_cli(["query", str(out), "cat on the mat", "-k", "3", "--json", "--duplicates", "keep"])[1]
            )
        with pytest.raises(SystemExit):
            main(["query", "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert len(found) == 2 and found[0]["metadata"][keys.ALSO_IN]  # two distinct chunks, copied twice each
        assert len(kept) == 3
        assert "--duplicates {exact,near,keep}" in help_text and "--near-duplicate-similarity" in help_text

    def test_server_and_mcp_take_the_option(self, index: FusionIndex) -> None:
        pytest.importorskip("langserve")
        from fastapi.testclient import TestClient

        from langchain_fusion.mcp import build_mcp_server
        from langchain_fusion.server import create_app
        from tests.helpers.paths import LOOPBACK_URL

        with TestClient(create_app(index, k=4), base_url=LOOPBACK_URL) as client:
            config = {"configurable": {"duplicates": "keep"}}
            kept = client.post("/retriever/invoke", json={"input": "cat on the mat", "config": config}).json()
            found = client.post("/retriever/invoke", json={"input": "cat on the mat"}).json()
        assert {d["id"] for d in kept["output"]} == COPIES
        assert sum(d["id"] in COPIES for d in found["output"]) == 1
        tool = next(iter(build_mcp_server(index)._tool_manager.list_tools()))
        assert tool.parameters["properties"]["duplicates"]["anyOf"][0]["enum"] == ["exact", "near", "keep"]

    async def test_mcp_text_names_the_other_copies(self, index: FusionIndex) -> None:
        from langchain_fusion.mcp import build_mcp_server
        from tests.helpers.mcp import call_search, connected, text_of

        async with connected(build_mcp_server(index, k=2, log_level="WARNING")) as session:
            text = text_of(await call_search(session, query="cat on the mat"))
            kept = text_of(await call_search(session, query="cat on the mat", duplicates="keep"))
        assert "[1] doc0.txt; also in copy1.txt, copy2.txt, doc2.txt (id a0;" in text
        assert "also in" not in kept
