"""The local cross-encoder reranker, on a tiny random BERT built in the test: scores, order, limits, errors."""

from __future__ import annotations

import contextlib
import copy
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnablePassthrough

from langchain_fusion import (
    CrossEncoderReranker,
    FusionIndex,
    InvalidParameterError,
    MissingDependencyError,
    ModelNotFoundError,
    RerankRetriever,
    build_rag_chain,
)
from langchain_fusion import metadata as keys
from langchain_fusion.models.cross_encoders import load_cross_encoder, model_limit
from langchain_fusion.retrievers.rerank_spec import RerankSpec, build_reranker, parse_rerank_spec
from tests.helpers.corpora import ANIMALS
from tests.helpers.tiny_models import MAX_POSITIONS, build_cross_encoder

MS_MARCO = "cross-encoder/ms-marco-MiniLM-L6-v2"
CLOSED_PORT = "http://127.0.0.1:9"
"""A Hub that cannot be reached: nothing listens on the discard port of this machine."""


def candidates(texts: list[str]) -> list[Document]:
    """Documents with descending fusion scores, as a retriever returns them."""
    return [
        Document(id=f"d{i}", page_content=t, metadata={keys.SOURCE: f"doc{i}.txt", keys.FUSION_SCORE: 1.0 - i / 10})
        for i, t in enumerate(texts)
    ]


@pytest.fixture(scope="module")
def reference(tiny_cross_encoder: Path) -> Any:
    """The same folder loaded by sentence-transformers directly: the scores to match."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(tiny_cross_encoder), device="cpu")


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(model=str(tiny_cross_encoder), top_n=3)


HubSwitch = Callable[[str], None]
"""Points the Hugging Face client at the Hub at a URL (the ``hub`` fixture)."""


@pytest.fixture
def empty_hub_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty Hugging Face cache and online mode, in the environment and in the client's settings (read on import)."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # make test sets it
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return cache


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> HubSwitch:
    import huggingface_hub.constants

    def at(url: str) -> None:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)

    return at


@contextlib.contextmanager
def _hanging_up_hub() -> Iterator[tuple[str, list[int]]]:
    """A Hub on a loopback port that hangs up on every connection; yields its URL and [connections so far]."""
    connections = [0]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.1)
        done = threading.Event()

        def serve() -> None:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    connection, _ = listener.accept()
                    connections[0] += 1
                    connection.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
        finally:
            done.set()
            thread.join(timeout=10)


class ScoringSpy:
    """A stand-in model: scores a pair by the number of query words in the text; records each predict call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, str]], int]] = []

    def predict(self, pairs: list[tuple[str, str]], batch_size: int = 32, **_: Any) -> np.ndarray:
        self.calls.append((list(pairs), batch_size))
        return np.array([float(sum(w in t.lower() for w in q.lower().split())) for q, t in pairs])


class TestScores:
    def test_scores_and_order_match_sentence_transformers(self, reranker: CrossEncoderReranker, reference: Any) -> None:
        query = "cat purr"
        docs = candidates(ANIMALS)
        expected = reference.predict([(query, t) for t in ANIMALS])
        assert len(set(np.round(expected, 6))) == len(ANIMALS)  # the random model tells them apart
        result = reranker.invoke({"query": query, "documents": docs})
        best = sorted(range(len(ANIMALS)), key=lambda i: -expected[i])[:3]
        assert [d.page_content for d in result] == [ANIMALS[i] for i in best]
        for doc, i in zip(result, best, strict=True):
            assert doc.metadata[keys.RERANK_SCORE] == pytest.approx(float(expected[i]), abs=1e-6)
            assert 0.0 <= doc.metadata[keys.RERANK_SCORE] <= 1.0  # a one-output model: sigmoid
            assert doc.metadata[keys.FUSION_SCORE] == docs[i].metadata[keys.FUSION_SCORE]  # provenance kept
            assert doc.id == docs[i].id

    def test_inputs_are_not_modified(self, reranker: CrossEncoderReranker) -> None:
        docs = candidates(ANIMALS[:4])
        before = copy.deepcopy(docs)
        result = reranker.rerank(docs, "dogs")
        assert docs == before
        assert all(keys.RERANK_SCORE not in d.metadata for d in docs)
        assert all(r is not d for r in result for d in docs)

    def test_top_n_per_call_none_and_empty(self, reranker: CrossEncoderReranker) -> None:
        docs = candidates(ANIMALS)
        assert len(reranker.rerank(docs, "cat", top_n=5)) == 5
        assert len(reranker.rerank(docs, "cat", top_n=None)) == len(ANIMALS)
        assert reranker.rerank([], "cat") == []
        with pytest.raises(InvalidParameterError, match="top_n"):
            reranker.rerank(docs, "cat", top_n=True)

    async def test_async_twin(self, reranker: CrossEncoderReranker) -> None:
        docs = candidates(ANIMALS)
        assert await reranker.arerank(docs, "parrots speech") == reranker.rerank(docs, "parrots speech")
        assert await reranker.ainvoke({"query": "cat", "documents": docs}) == reranker.invoke(
            {"query": "cat", "documents": docs}
        )

    def test_loads_lazily_and_once(self, tiny_cross_encoder: Path) -> None:
        fresh = CrossEncoderReranker(model=str(tiny_cross_encoder))
        assert fresh._loaded is None
        fresh.rerank(candidates(ANIMALS[:2]), "cat")
        assert fresh._loaded is not None
        assert fresh.load_model() is fresh.load_model()

    def test_batches_and_identical_texts_scored_once(self) -> None:
        spy = ScoringSpy()
        reranker = CrossEncoderReranker(model=spy, batch_size=2, top_n=None)
        docs = candidates(["a cat", "a dog", "a cat", "cat and dog"])
        result = reranker.rerank(docs, "cat dog")
        (pairs, batch_size), *others = spy.calls
        assert not others and batch_size == 2
        assert pairs == [("cat dog", "a cat"), ("cat dog", "a dog"), ("cat dog", "cat and dog")]
        assert [d.id for d in result] == ["d3", "d0", "d1", "d2"]  # 2, then ties (1) by fusion score

    def test_ties_break_by_fusion_score_then_input_order(self) -> None:
        docs = candidates(["x one", "x two", "x three"])
        docs[2].metadata[keys.FUSION_SCORE] = 5.0
        result = CrossEncoderReranker(model=ScoringSpy(), top_n=None).rerank(docs, "x")
        assert [d.id for d in result] == ["d2", "d0", "d1"]

    def test_non_finite_scores_go_last(self) -> None:
        class NaNModel(ScoringSpy):
            def predict(self, pairs: list[tuple[str, str]], batch_size: int = 32, **_: Any) -> np.ndarray:
                return np.array([np.nan if "bad" in t else 1.0 for _, t in pairs])

        result = CrossEncoderReranker(model=NaNModel(), top_n=None).rerank(candidates(["bad", "good"]), "q")
        assert [d.page_content for d in result] == ["good", "bad"]
        assert result[1].metadata[keys.RERANK_SCORE] is None


class TestLength:
    def test_model_limit_is_the_tiny_models_positions(self, reranker: CrossEncoderReranker) -> None:
        assert model_limit(reranker.load_model()) == MAX_POSITIONS

    def test_a_long_text_is_truncated_not_an_error(self, reranker: CrossEncoderReranker) -> None:
        long_text = " ".join(["cat dog parrot"] * 200)  # 600 word pieces, ten times the positions
        result = reranker.rerank(candidates([long_text, "a cat"]), "cat")
        assert len(result) == 2
        assert all(isinstance(d.metadata[keys.RERANK_SCORE], float) for d in result)

    def test_max_length_truncates_pairs(self, tiny_cross_encoder: Path) -> None:
        short = CrossEncoderReranker(model=str(tiny_cross_encoder), max_length=8, top_n=None)
        base = "the cat sat on the warm mat by the fire"
        scores = short.score("cat", [base, base + " and dogs bark loudly"])
        assert scores[0] == pytest.approx(scores[1])  # both cut to the same first 8 word pieces
        full = CrossEncoderReranker(model=str(tiny_cross_encoder), top_n=None)
        assert full.score("cat", [base])[0] != pytest.approx(full.score("cat", [base + " and dogs bark"])[0])

    def test_more_than_the_model_reads_is_refused(self, tiny_cross_encoder: Path) -> None:
        too_long = CrossEncoderReranker(model=str(tiny_cross_encoder), max_length=MAX_POSITIONS + 1)
        with pytest.raises(InvalidParameterError, match=f"more than the {MAX_POSITIONS} word pieces"):
            too_long.load_model()


@pytest.mark.slow  # loading a cross-encoder imports sentence-transformers (torch) first
class TestErrors:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"model": ""}, "model"),
            ({"model": 42}, "model"),
            ({"model": "m", "batch_size": 0}, "batch_size"),
            ({"model": "m", "batch_size": True}, "batch_size"),
            ({"model": "m", "max_length": 0}, "max_length"),
            ({"model": "m", "top_n": 0}, "top_n"),
            ({"model": "m", "top_n": 2.0}, "top_n"),
        ],
    )
    def test_invalid_fields(self, options: dict[str, Any], message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            CrossEncoderReranker(**options)

    def test_missing_folder(self, tmp_path: Path) -> None:
        with pytest.raises(ModelNotFoundError, match="does not exist"):
            load_cross_encoder("./no-such-model-folder")
        with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
            load_cross_encoder(str(tmp_path))

    def test_name_not_in_the_cache_offline(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        import huggingface_hub.constants

        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
        with pytest.raises(ModelNotFoundError) as error:
            CrossEncoderReranker(model="nobody/no-such-cross-encoder").load_model()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith("cross-encoder 'nobody/no-such-cross-encoder' could not be loaded")
        assert "HF_HUB_OFFLINE is set: download it where the Hub is reachable (hf download " in message

    def test_name_not_in_the_cache_hub_unreachable(self, empty_hub_cache: Path, hub: HubSwitch) -> None:
        hub(CLOSED_PORT)
        with pytest.raises(ModelNotFoundError) as error:
            CrossEncoderReranker(model="nobody/no-such-cross-encoder").load_model()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith(
            f"cross-encoder 'nobody/no-such-cross-encoder' could not be loaded: it is not in the Hugging Face cache "
            f"({empty_hub_cache}) and the Hub ({CLOSED_PORT}) cannot be reached (ConnectError: "
        )
        assert message.endswith(
            "download it where the Hub is reachable (hf download nobody/no-such-cross-encoder), "
            "or give a folder saved with save_pretrained"
        )

    def test_an_unreachable_hub_is_asked_once(self, empty_hub_cache: Path, hub: HubSwitch) -> None:
        """One request decides: the Hub client's retries (about 20 s for each file) never start."""
        with _hanging_up_hub() as (url, connections):
            hub(url)
            with pytest.raises(ModelNotFoundError, match=r"the Hub \(http://127\.0\.0\.1:\d+\) cannot be reached"):
                load_cross_encoder("nobody/no-such-cross-encoder")
        assert connections == [1]

    def test_a_cached_name_loads_without_the_hub(
        self, empty_hub_cache: Path, hub: HubSwitch, tiny_cross_encoder: Path, reference: Any
    ) -> None:
        revision = "0" * 40
        repo = empty_hub_cache / "models--nobody--tiny-cross-encoder"
        shutil.copytree(tiny_cross_encoder, repo / "snapshots" / revision)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
        with _hanging_up_hub() as (url, connections):
            hub(url)
            reranker = CrossEncoderReranker(model="nobody/tiny-cross-encoder", top_n=None)
            scores = reranker.score("cat", ANIMALS[:3])
        assert connections == [0]
        assert scores == pytest.approx([float(s) for s in reference.predict([("cat", t) for t in ANIMALS[:3]])])

    def test_not_a_hub_name(self) -> None:
        with pytest.raises(ModelNotFoundError, match="'bad name!' is neither a folder nor a Hugging Face model name"):
            load_cross_encoder("bad name!")

    def test_without_its_extra(self, monkeypatch: pytest.MonkeyPatch, tiny_cross_encoder: Path) -> None:
        monkeypatch.setitem(sys.modules, "sentence_transformers", None)
        with pytest.raises(
            MissingDependencyError,
            match=r"needs the 'sentence-transformers' extra .*pip install 'langchain-fusion\[sentence-transformers\]'",
        ):
            CrossEncoderReranker(model=str(tiny_cross_encoder)).load_model()

    def test_a_classifier_with_several_outputs_is_refused(self, tmp_path: Path) -> None:
        folder = build_cross_encoder(tmp_path / "three-labels", num_labels=3)
        with pytest.raises(InvalidParameterError, match="a rerank model gives one"):
            CrossEncoderReranker(model=str(folder)).rerank(candidates(["a cat"]), "cat")


class TestSpecs:
    @pytest.mark.parametrize(
        ("spec", "expected"),
        [
            ("llm", RerankSpec("llm")),
            (f"cross-encoder:{MS_MARCO}", RerankSpec("cross-encoder", MS_MARCO)),
            ("cross-encoder:./models/my-ce", RerankSpec("cross-encoder", "./models/my-ce")),
        ],
    )  # fmt: skip
    def test_parsed(self, spec: str, expected: RerankSpec) -> None:
        assert parse_rerank_spec(spec) == expected
        assert str(expected) == spec

    @pytest.mark.parametrize("spec", ["", "cross-encoder:", "cross-encoder", "cohere", "LLM", 1, None, True])
    def test_refused(self, spec: Any) -> None:
        with pytest.raises(InvalidParameterError, match=r"'llm'.*'cross-encoder:MODEL'"):
            parse_rerank_spec(spec)

    def test_built(self, tiny_cross_encoder: Path) -> None:
        reranker = build_reranker(f"cross-encoder:{tiny_cross_encoder}", top_n=2)
        assert isinstance(reranker, CrossEncoderReranker)
        assert reranker.top_n == 2 and reranker.model == str(tiny_cross_encoder)
        with pytest.raises(InvalidParameterError, match="needs a chat model"):
            build_reranker("llm")


class TestInPipelines:
    def test_rerank_retriever(self, animal_index: FusionIndex, reranker: CrossEncoderReranker) -> None:
        retriever = RerankRetriever(retriever=animal_index.as_retriever(k=8), reranker=reranker)
        docs = retriever.invoke("cat and dog")
        assert len(docs) == 3
        scores = [d.metadata[keys.RERANK_SCORE] for d in docs]
        assert scores == sorted(scores, reverse=True)
        assert all(keys.VECTOR_SCORE in d.metadata for d in docs)
        assert len(retriever.invoke("cat and dog", top_n=1, k=4)) == 1

    def test_as_an_lcel_step(self, animal_index: FusionIndex, reranker: CrossEncoderReranker) -> None:
        chain = {"query": RunnablePassthrough(), "documents": animal_index.as_retriever(k=6)} | reranker
        assert [d.id for d in chain.invoke("purr")] == [
            d.id for d in reranker.rerank(animal_index.as_retriever(k=6).invoke("purr"), "purr")
        ]

    def test_rag_chain(self, animal_index: FusionIndex, reranker: CrossEncoderReranker) -> None:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        chain = build_rag_chain(
            animal_index.as_retriever(k=8), FakeListChatModel(responses=["Cats purr [1]."]), reranker=reranker
        )
        result = chain.invoke("why do cats purr?")
        assert result["answer"] == "Cats purr [1]."
        assert len(result["sources"]) == 3
        assert all(keys.RERANK_SCORE in d.metadata for d in result["sources"])
