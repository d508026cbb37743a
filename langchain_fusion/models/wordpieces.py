"""The bundled model's tokenizer: all-MiniLM-L6-v2's word pieces, built from the vocabulary shipped here.

The model's weights come from another package (see :mod:`~langchain_fusion.models.bundled_encoder`),
which has no tokenizer: :func:`bundled_tokenizer` builds the one the model was trained with
(BERT's uncased normaliser and pre-tokeniser, WordPiece over ``all-MiniLM-L6-v2-vocab.txt``,
``[CLS] text [SEP]``) with the ``tokenizers`` package, without torch. A test checks that it gives
the ids of the model's own ``tokenizer.json``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from langchain_fusion.errors import MissingDependencyError

VOCABULARY = Path(__file__).with_name("all-MiniLM-L6-v2-vocab.txt")
"""The model's word-piece vocabulary (Apache-2.0; see the ``.NOTICE`` file beside it): line N is id N."""

MAX_SEQ_LENGTH = 256
"""Word pieces the model reads of a text, its two markers included (sentence-transformers' ``max_seq_length``)."""

MARKERS = 2
"""The special tokens the model adds around each text ([CLS] and [SEP])."""

_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

LOCAL_EXTRA_HINT = "pip install 'langchain-fusion[local]'"
"""How to install the bundled model."""


@functools.lru_cache(maxsize=1)
def bundled_tokenizer() -> Any:
    """The bundled model's tokenizer (a ``tokenizers.Tokenizer``, no truncation, no padding), made once.

    Encodings include the two markers; ``encode_batch(texts, add_special_tokens=False)`` counts word pieces alone;
    ``decode(ids)`` joins word pieces back into text.
    """
    try:
        from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
        from tokenizers.models import WordPiece
    except ImportError as exc:
        raise MissingDependencyError(
            f"the local embedding model needs the 'local' extra ({exc.name} is missing): {LOCAL_EXTRA_HINT}"
        ) from None
    with VOCABULARY.open(encoding="utf-8") as handle:
        vocabulary = {line.rstrip("\n"): number for number, line in enumerate(handle)}
    tokenizer = Tokenizer(WordPiece(vocabulary, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocabulary["[CLS]"], vocabulary["[SEP]"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tokenizer.add_special_tokens(list(_SPECIAL))
    return tokenizer


def count_word_pieces(texts: list[str]) -> list[int]:
    """The word pieces of each text as the bundled model splits it (its two markers not counted)."""
    return [len(encoding.ids) for encoding in bundled_tokenizer().encode_batch(texts, add_special_tokens=False)]
