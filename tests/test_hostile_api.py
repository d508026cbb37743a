"""Hostile inputs through the Python API: misbehaving embeddings, wrong types, odd filters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import (
    BM25Retriever,
    FusionError,
    FusionIndex,
    FusionRetriever,
    InvalidParameterError,
    VectorRetriever,
)
from langchain_fusion.errors import ProviderError
from langchain_fusion.metadata import MAX_METADATA_DEPTH
from tests.helpers.embeddings import HashingEmbeddings


class Misbehaving(Embeddings):
    """Embeddings whose output is whatever ``make(texts)`` returns."""

    def __init__(self, make: Callable[[list[str]], Any]) -> None:
        self.make = make

    def embed_documents(self, texts: list[str]) -> Any:
        return self.make(texts)

    def embed_query(self, text: str) -> Any:
        return self.make([text])[0]


class TestMisbehavingEmbeddings:
    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda t: [[1.0, 2.0]] + [[1.0]] * (len(t) - 1), "vectors of different lengths"),
            (lambda t: [["a", "b"] for _ in t], "returned strings"),
            (lambda t: [[1 + 2j, 0j] for _ in t], "returned complex numbers"),
            (lambda t: [[True, False] for _ in t], "returned booleans"),
            (lambda t: [[float("nan"), 1.0] for _ in t], "NaN or infinite"),
            (lambda t: [[float("inf"), 1.0] for _ in t], "NaN or infinite"),
            (lambda t: [[1.0, 0.0]], "returned 1 vectors for 2 texts"),
            (lambda t: None, "returned NoneType, not a list of vectors"),
            (lambda t: [None for _ in t], "NoneType instead of a vector"),
            (lambda t: [[[1.0], [2.0]] for _ in t], "dimension"),
        ],
    )
    def test_one_line_errors_instead_of_numpy_ones(self, make: Any, message: str) -> None:
        with pytest.raises(FusionError, match=message) as caught:
            FusionIndex.from_texts(["a b", "c d"], Misbehaving(make))
        assert "\n" not in str(caught.value)

    def test_a_query_vector_of_another_kind_is_refused_and_the_index_keeps_working(self) -> None:
        index = FusionIndex.from_texts(["alpha beta", "gamma delta"], HashingEmbeddings())
        good = index.embeddings
        index._embedder.embeddings = Misbehaving(lambda t: [["x"] * 64 for _ in t])
        with pytest.raises(FusionError, match="returned strings"):
            index.as_retriever(k=1).invoke("alpha")
        index._embedder.embeddings = good
        assert index.as_retriever(k=1).invoke("alpha")[0].page_content == "alpha beta"


class TestWrongTypes:
    @pytest.fixture
    def index(self) -> FusionIndex:
        metadatas = [{"s": 1}, {"s": 2}]
        return FusionIndex.from_texts(["alpha beta", "gamma delta"], HashingEmbeddings(), metadatas=metadatas)

    @pytest.mark.parametrize("query", [5, None, b"alpha", ["alpha"], {"q": "alpha"}])
    def test_a_query_that_is_not_text(self, index: FusionIndex, query: Any) -> None:
        with pytest.raises(InvalidParameterError, match="query"):
            index.as_retriever().invoke(query)

    @pytest.mark.parametrize(
        "search_filter",
        [{"s": [[1]]}, {"source": [["s1"]]}, {"s": {"$gt": 1}}, {"s": object()}, {5: 1}, {"s": [1, [2]]}, "s=1"],
    )
    def test_filters_that_cannot_be_applied(self, index: FusionIndex, search_filter: Any) -> None:
        with pytest.raises(InvalidParameterError, match="filter"):
            index.as_retriever().invoke("alpha", filter=search_filter)
        with pytest.raises(InvalidParameterError, match=r"^FusionRetriever: filter: ") as caught:
            index.as_retriever(filter=search_filter)
        assert "\n" not in str(caught.value)

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), [1, float("nan")]])
    def test_a_non_finite_filter_value_is_refused(self, index: FusionIndex, value: Any) -> None:
        # NaN equals nothing: such a filter would silently match no row.
        with pytest.raises(InvalidParameterError, match="filter value for 's' must be a finite number"):
            index.as_retriever().invoke("alpha", filter={"s": value})

    def test_a_filter_value_nested_thousands_deep_is_one_clear_error(self, index: FusionIndex) -> None:
        value: list[Any] = []
        inner = value
        for _ in range(5000):
            inner.append([])
            inner = inner[0]
        with pytest.raises(InvalidParameterError, match="filter value for 's' must be a string") as caught:
            index.as_retriever().invoke("alpha", filter={"s": value})
        assert len(str(caught.value)) < 300

    @pytest.mark.parametrize("shape", ["deep", "itself", "deep list"])
    def test_metadata_nested_too_deep_is_refused_and_nothing_is_added(self, index: FusionIndex, shape: str) -> None:
        metadata: dict[str, Any] = {}
        if shape == "itself":
            metadata["me"] = metadata
        else:
            inner: Any = metadata
            for _ in range(5000):
                inner["a"] = {} if shape == "deep" else [{}]
                inner = inner["a"] if shape == "deep" else inner["a"][0]
        ok = Document(id="fine", page_content="fine", metadata={"nested": {"a": [{"b": 1}]}})
        bad = Document(id="bad", page_content="text", metadata=metadata)
        with pytest.raises(InvalidParameterError, match=r"^document 1 of this batch: its metadata nests") as caught:
            index.add_documents([ok, bad])
        assert f"more than {MAX_METADATA_DEPTH} levels deep (or contains itself)" in str(caught.value)
        assert len(index) == 2 and "fine" not in index  # all or nothing
        index.add_documents([ok])  # the index is unharmed

    @pytest.mark.parametrize(
        "options",
        [
            {"alpha": True},
            {"k": "3"},
            {"k": 2.0},
            {"alpha": "0.5"},
            {"fetch_k": False},
            {"method": 1},
            {"k": 0},
            {"k": -1},
            {"fetch_k": 0},
            {"alpha": float("nan")},
            {"alpha": -0.0001},
        ],
    )
    def test_constructor_and_per_call_options_are_equally_strict(self, index: FusionIndex, options: Any) -> None:
        field = next(iter(options))
        with pytest.raises(InvalidParameterError, match=rf"^FusionRetriever: {field}: ") as caught:
            index.as_retriever(**options)
        assert "\n" not in str(caught.value)  # one line naming the class and field, not a ValidationError
        with pytest.raises(InvalidParameterError, match=field):
            index.as_retriever().invoke("alpha", **options)

    @pytest.mark.parametrize("cls", [FusionRetriever, VectorRetriever, BM25Retriever])
    def test_a_misspelt_constructor_option_is_refused_not_ignored(self, index: FusionIndex, cls: type) -> None:
        with pytest.raises(InvalidParameterError, match=rf"^{cls.__name__}: alhpa: not an option of {cls.__name__}"):
            cls(index=index, alhpa=0.3)
        with pytest.raises(InvalidParameterError, match="alhpa"):
            cls(index=index).invoke("alpha", alhpa=0.3)  # as per call

    def test_fetch_k_below_k_still_gives_k_results(self) -> None:
        """The candidate pool is never smaller than ``k``: a small ``fetch_k`` cannot starve the results."""
        from tests.helpers.corpora import ANIMALS

        index = FusionIndex.from_texts(ANIMALS, HashingEmbeddings())
        docs = index.as_retriever(k=6, fetch_k=1).invoke("cat dog")
        assert len(docs) == 6
        assert docs == index.as_retriever(k=6, fetch_k=6).invoke("cat dog")


class Failing(Embeddings):
    """A provider that is down: every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise self.error

    def embed_query(self, text: str) -> list[float]:
        raise self.error


class TestProviderFailures:
    """A provider failure (bad key, no network, quota) is one ProviderError line, not a deep traceback."""

    @pytest.mark.parametrize(
        "error",
        [
            ConnectionError("[Errno 111] Connection refused"),
            PermissionError("Error code: 401 - {'error': {'message': 'Incorrect API key provided'}}"),
            RuntimeError("Rate limit reached\nfor requests"),
        ],
    )
    def test_building_an_index(self, error: Exception) -> None:
        with pytest.raises(ProviderError, match=r"^the embedding model .*Failing failed: ") as caught:
            FusionIndex.from_texts(["alpha beta"], Failing(error))
        assert "\n" not in str(caught.value) and caught.value.__cause__ is error

    async def test_a_query(self) -> None:
        index = FusionIndex.from_texts(["alpha beta", "gamma"], HashingEmbeddings())
        index._embedder.embeddings = Failing(ConnectionError("offline"))
        with pytest.raises(ProviderError, match="ConnectionError: offline"):
            index.as_retriever().invoke("alpha")
        with pytest.raises(ProviderError, match="ConnectionError: offline"):
            await index.as_retriever().ainvoke("alpha")
        assert BM25Retriever(index=index).invoke("alpha")[0].page_content == "alpha beta"  # needs no model

    @pytest.mark.local_model  # the CLI bounds chunks with the bundled model's tokenizer
    def test_a_cli_index_run(self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
        from langchain_fusion.cli.app import main
        from langchain_fusion.models.embeddings import LocalEmbeddings

        def down(self: Any, texts: list[str]) -> list[list[float]]:
            raise ConnectionError("Failed to establish a new connection: [Errno -3] Temporary failure")

        monkeypatch.setattr(LocalEmbeddings, "embed_documents", down)
        (tmp_path / "a.txt").write_text("some text to index", encoding="utf-8")
        status = main(["index", str(tmp_path / "a.txt"), "--out", str(tmp_path / "idx"), "-q"])
        err = capsys.readouterr().err
        assert status == 2
        assert err.splitlines() == [
            "langchain-fusion: error: the embedding model local:sentence-transformers/all-MiniLM-L6-v2 failed: "
            "ConnectionError: Failed to establish a new connection: [Errno -3] Temporary failure"
        ]
        assert not (tmp_path / "idx").exists()
