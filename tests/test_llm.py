"""Chat model selection: the OpenAI default, --llm specs, and the errors users can cause."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_openai import ChatOpenAI

from langchain_fusion import FusionError, MissingCredentialsError, MissingDependencyError
from langchain_fusion.models.chat import OPENAI_DEFAULT_CHAT_MODEL, default_chat_model, resolve_chat_model


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No OPENAI_API_KEY, and no .env file that could supply one; restored afterwards."""
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")  # so that undo also removes a key loaded from .env
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def fake_langchain(monkeypatch: pytest.MonkeyPatch, init_chat_model: Any) -> None:
    package = types.ModuleType("langchain")
    module = types.ModuleType("langchain.chat_models")
    module.init_chat_model = init_chat_model  # type: ignore[attr-defined]
    package.chat_models = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langchain", package)
    monkeypatch.setitem(sys.modules, "langchain.chat_models", module)


class TestDefault:
    def test_default_is_gpt_4o_mini(self, fake_key: None) -> None:
        model = default_chat_model()
        assert isinstance(model, ChatOpenAI)
        assert model.model_name == OPENAI_DEFAULT_CHAT_MODEL == "gpt-4o-mini"

    @pytest.mark.parametrize("spec", [None, "auto", "openai"])
    def test_default_specs(self, fake_key: None, spec: str | None) -> None:
        model = resolve_chat_model(spec)
        assert isinstance(model, ChatOpenAI) and model.model_name == "gpt-4o-mini"

    def test_openai_model_needs_no_extra(self, fake_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "langchain", None)
        model = resolve_chat_model("openai:gpt-4.1-mini")
        assert isinstance(model, ChatOpenAI) and model.model_name == "gpt-4.1-mini"

    @pytest.mark.parametrize("spec", [None, "openai", "openai:gpt-4.1"])
    def test_missing_key(self, no_key: None, spec: str | None) -> None:
        with pytest.raises(MissingCredentialsError) as exc:
            resolve_chat_model(spec)
        message = str(exc.value)
        assert message.startswith("OPENAI_API_KEY is not set")
        assert "(llm='PROVIDER:MODEL')" in message
        assert "\n" not in message

    def test_key_from_dotenv(self, no_key: None, tmp_path: Path) -> None:
        (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n", encoding="utf-8")
        assert isinstance(default_chat_model(), ChatOpenAI)
        assert os.environ["OPENAI_API_KEY"] == "sk-from-dotenv"


class TestOtherProviders:
    def test_init_chat_model(self, monkeypatch: pytest.MonkeyPatch, no_key: None) -> None:
        calls: list[str] = []

        def init_chat_model(spec: str) -> BaseChatModel:
            calls.append(spec)
            return FakeListChatModel(responses=["hi"])

        fake_langchain(monkeypatch, init_chat_model)
        model = resolve_chat_model("anthropic:claude-sonnet-4-5")
        assert isinstance(model, FakeListChatModel)
        assert calls == ["anthropic:claude-sonnet-4-5"]

    def test_without_langchain(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "langchain", None)
        monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
        with pytest.raises(MissingDependencyError) as exc:
            resolve_chat_model("google_genai:gemini-2.5-flash")
        message = str(exc.value)
        assert "pip install 'langchain-fusion[llm]'" in message
        assert "langchain-google-genai" in message

    def test_missing_provider_package(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def init_chat_model(spec: str) -> BaseChatModel:
            raise ImportError("Initializing ChatAnthropic requires the langchain-anthropic package. Please install")

        fake_langchain(monkeypatch, init_chat_model)
        with pytest.raises(MissingDependencyError, match="chat model 'anthropic:x': Initializing ChatAnthropic"):
            resolve_chat_model("anthropic:x")

    def test_fallback_module_without_the_class(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # init_chat_model falls back to langchain_community for ollama, which may lack the class.
        def init_chat_model(spec: str) -> BaseChatModel:
            raise AttributeError("module langchain_community.chat_models has no attribute ChatOllama")

        fake_langchain(monkeypatch, init_chat_model)
        with pytest.raises(
            MissingDependencyError, match=r"ChatOllama\): install the integration package for 'ollama' "
        ):
            resolve_chat_model("ollama:llama3.1")

    def test_provider_errors_become_one_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def init_chat_model(spec: str) -> BaseChatModel:
            raise RuntimeError("ANTHROPIC_API_KEY\nis missing")

        fake_langchain(monkeypatch, init_chat_model)
        with pytest.raises(FusionError, match=r"could not be created: ANTHROPIC_API_KEY is missing$"):
            resolve_chat_model("anthropic:claude")

    def test_unknown_provider_or_invalid_settings(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def init_chat_model(spec: str) -> BaseChatModel:
            raise ValueError("Unsupported provider='nope'.\n\nSupported model providers are: openai, ...")

        fake_langchain(monkeypatch, init_chat_model)
        with pytest.raises(FusionError) as exc:
            resolve_chat_model("nope:model")
        assert str(exc.value) == (
            "chat model 'nope:model' could not be created: Unsupported provider='nope'. "
            "Supported model providers are: openai, ..."
        )

    @pytest.mark.parametrize("spec", ["bogus", ":model", "anthropic:"])
    def test_malformed_spec(self, spec: str) -> None:
        with pytest.raises(FusionError, match=f"unknown chat model {spec!r}"):
            resolve_chat_model(spec)


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
def test_default_model_answers() -> None:
    answer = default_chat_model().invoke("Reply with the single word: ready")
    assert "ready" in str(answer.content).lower()
