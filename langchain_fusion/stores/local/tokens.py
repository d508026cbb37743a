"""Text to BM25 term ids with an analyzer: the default fast path, or a custom ``tokenize``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.analyzer import Analyzer, WordMemo
from langchain_fusion.stores.languages import Detected


def tokenize(analyzer: Analyzer, text: str) -> list[str]:
    """``analyzer.tokenize(text)``, checked: a custom analyzer must return a list of strings."""
    tokens = analyzer.tokenize(text)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise FusionError(
            f"{type(analyzer).__name__}.tokenize must return a list of strings; got {type(tokens).__name__} "
            f"for {text[:40]!r}"
        )
    return tokens


def text_token_ids(
    analyzer: Analyzer, texts: Sequence[str], vocabulary: dict[str, int]
) -> tuple[list[NDArray[np.int64]], NDArray[np.int32]]:
    """Each text's token ids (new tokens are added to ``vocabulary``) and its length in tokens."""
    out: list[NDArray[np.int64]] = []
    if analyzer.has_custom_tokenize():
        for text in texts:
            tokens = tokenize(analyzer, text)
            out.append(np.fromiter((vocabulary.setdefault(t, len(vocabulary)) for t in tokens), dtype=np.int64))
    else:
        # Each distinct unit (word, identifier, bigram) is analysed once per analyzer and text language, and
        # looked up in C per call.
        tokens_of = analyzer.unit_tokens
        memos: dict[object, WordMemo] = {}
        for text in texts:
            language = analyzer.language_of(text)
            memo = memos.get(language)
            if memo is None:

                def unit_ids(unit: str, language: Detected | None = language) -> tuple[int, ...]:
                    return tuple(vocabulary.setdefault(token, len(vocabulary)) for token in tokens_of(unit, language))

                memo = memos[language] = WordMemo(unit_ids)
            out.append(np.fromiter(chain.from_iterable(map(memo.__getitem__, analyzer.units(text))), dtype=np.int64))
    lengths = np.fromiter((ids.size for ids in out), dtype=np.int32, count=len(out))
    return out, lengths


def joined_tokens(analyzer: Analyzer, texts: Sequence[str]) -> list[str]:
    """Each text's tokens joined by single spaces (what Milvus's ``whitespace`` tokenizer splits back)."""
    if analyzer.has_custom_tokenize():
        return [" ".join(tokenize(analyzer, text)) for text in texts]
    # Each distinct unit is joined once per text language; units without tokens are dropped so no space is doubled.
    tokens_of = analyzer.unit_tokens
    memos: dict[object, WordMemo] = {}
    joined = []
    for text in texts:
        language = analyzer.language_of(text)
        memo = memos.get(language)
        if memo is None:
            memo = memos[language] = WordMemo(lambda unit, language=language: " ".join(tokens_of(unit, language)))
        joined.append(" ".join(filter(None, map(memo.__getitem__, analyzer.units(text)))))
    return joined


def query_term_counts(analyzer: Analyzer, vocabulary: Mapping[str, int], query: str) -> Counter[int]:
    """Term ids of the query's tokens that the vocabulary knows, with their repeats."""
    return Counter(vocabulary[t] for t in tokenize(analyzer, query) if t in vocabulary)
