"""A tiny, randomly initialised BERT cross-encoder built on the spot: no download, a few hundred kilobytes.

The vocabulary holds the words of the test corpora, so different texts get different word
pieces (and different scores); the weights are random but seeded, so every build scores alike.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.corpora import ANIMALS

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EXTRA_WORDS = ["flood", "battery", "batteries", "inverter", "storm", "rain", "july", "kitten", "feline", "puppy"]
MAX_POSITIONS = 64
"""The positions of the tiny model: the most word pieces a (query, text) pair can have."""


def build_cross_encoder(folder: Path, num_labels: int = 1, seed: int = 0) -> Path:
    """Save a tiny random BERT sequence classifier and its tokenizer to ``folder``; returns it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = sorted({w for text in ANIMALS for w in re.findall(r"\w+", text.lower())} | set(EXTRA_WORDS))
    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + words + [f"w{i}" for i in range(10)]) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast.from_pretrained(str(folder), model_max_length=MAX_POSITIONS)  # reads vocab.txt
    config = BertConfig(
        vocab_size=len(SPECIAL) + len(words) + 10,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=MAX_POSITIONS,
        num_labels=num_labels,
        initializer_range=0.2,  # spread the random scores apart
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
