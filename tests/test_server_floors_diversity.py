"""Relevance floors and diversity as server configuration (create_app): served results, health and errors."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langserve")

from fastapi.testclient import TestClient
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langchain_fusion import FusionIndex, HierarchicalIndex
from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.server import create_app
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.options import BAD_SELECTION_OPTIONS
from tests.helpers.paths import LOOPBACK_URL

OPTIONS = {"min_vector_score": 0.2, "min_bm25_score": 1.0, "lambda_mult": 0.6, "max_per_source": 1}


@pytest.fixture(scope="module")
def index() -> FusionIndex:
    docs = [Document(page_content=t, metadata={keys.SOURCE: f"doc{i % 3}.txt"}) for i, t in enumerate(ANIMALS)]
    return FusionIndex.from_documents(docs, HashingEmbeddings())


@pytest.fixture(autouse=True)
def fresh_stream_exit_event() -> None:
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit_event = None


def fake_llm() -> FakeListChatModel:
    return FakeListChatModel(responses=["An answer [1]."])


def test_served_results_equal_the_retriever(index: FusionIndex) -> None:
    with TestClient(create_app(index, llm=fake_llm(), k=3, **OPTIONS), base_url=LOOPBACK_URL) as client:
        health = client.get("/health").json()
        assert health["defaults"] == {"k": 3, "alpha": 0.5, "method": "weighted", "fetch_k": 100, **OPTIONS}
        for query in ("cat and dog", "zebra", "stock market"):
            expected = index.as_retriever(k=3, **OPTIONS).invoke(query)
            response = client.post("/retriever/invoke", json={"input": query})
            assert response.status_code == 200
            assert [d["id"] for d in response.json()["output"]] == [d.id for d in expected]
        batch = client.post("/retriever/batch", json={"inputs": ["cat and dog", "zebra"]}).json()["output"]
        assert [[d["id"] for d in docs] for docs in batch] == [
            [d.id for d in index.as_retriever(k=3, **OPTIONS).invoke(q)] for q in ("cat and dog", "zebra")
        ]
        rag = client.post("/rag/invoke", json={"input": "zebra"}).json()["output"]
        assert rag["sources"] == []  # nothing above the floor: the model is given no passage


def test_unset_options_are_not_in_the_defaults(index: FusionIndex) -> None:
    app = create_app(index, llm=fake_llm(), max_per_source=2)
    assert app.state.langchain_fusion["defaults"] == {
        "k": 4,
        "alpha": 0.5,
        "method": "weighted",
        "fetch_k": 100,
        "max_per_source": 2,
    }


def test_multi_query_caps_the_fused_results(index: FusionIndex) -> None:
    from langchain_fusion import MultiQueryFusionRetriever
    from tests.helpers.fake_chat_models import RatingModel

    rewrites = "photosynthesis\nsunlight energy\nchemical energy from sunlight"  # doc1's other chunk, thrice
    model = RatingModel(rule=lambda prompt: rewrites, structured=False)
    expected = MultiQueryFusionRetriever.from_llm(index.as_retriever(k=3, max_per_source=1), model, n=3, k=3)
    with TestClient(
        create_app(index, llm=model, k=3, max_per_source=1, multi_query=3), base_url=LOOPBACK_URL
    ) as client:
        docs = client.post("/retriever/invoke", json={"input": "cats"}).json()["output"]
    assert [d["id"] for d in docs] == [d.id for d in expected.invoke("cats")]
    assert sorted(d["metadata"][keys.SOURCE] for d in docs) == ["doc0.txt", "doc1.txt", "doc2.txt"]


@pytest.mark.parametrize(
    ("options", "message"),
    BAD_SELECTION_OPTIONS,
)
def test_invalid_values(index: FusionIndex, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message) as raised:
        create_app(index, llm=fake_llm(), **options)
    assert "\n" not in str(raised.value)


def test_a_hierarchical_index_refuses_them(index: FusionIndex) -> None:
    ids = [d.id for d in index.documents]
    summaries = [Document(page_content="Pets and science.", metadata={keys.SOURCE: "all", keys.SUMMARY_CHUNK_IDS: ids})]
    hierarchical = HierarchicalIndex.from_summaries(index, summaries)
    with pytest.raises(InvalidParameterError, match="lambda_mult apply to fused search, not to hierarchical search"):
        create_app(hierarchical, llm=fake_llm(), lambda_mult=0.5)
    create_app(hierarchical, llm=fake_llm())  # without them it serves
