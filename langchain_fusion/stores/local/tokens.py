"""Text to BM25 term ids with an analyzer: the default fast path, or a custom ``tokenize``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import chain, count, filterfalse

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.analyzer import Analyzer, WordMemo


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
) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
    """The texts' token ids end to end and each text's length in tokens.

    New tokens are added to ``vocabulary`` in order of first appearance (as one ``setdefault``
    per token would). Each distinct unit (word, identifier, bigram) is analysed once per analyzer;
    the loops over tokens run in C, so many small calls (a tenant's rows each) cost what one does.
    """
    if analyzer.has_custom_tokenize():
        per_text = [tokenize(analyzer, text) for text in texts]
    else:
        lookup, units = analyzer.unit_lookup, analyzer.units
        per_text = [list(chain.from_iterable(map(lookup, units(text)))) for text in texts]
    tokens = list(chain.from_iterable(per_text))
    new = dict.fromkeys(filterfalse(vocabulary.__contains__, tokens))
    vocabulary.update(zip(new, count(len(vocabulary))))
    ids = np.fromiter(map(vocabulary.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    lengths = np.fromiter(map(len, per_text), dtype=np.int32, count=len(per_text))
    return ids, lengths


def joined_tokens(analyzer: Analyzer, texts: Sequence[str]) -> list[str]:
    """Each text's tokens joined by single spaces (what Milvus's ``whitespace`` tokenizer splits back)."""
    if analyzer.has_custom_tokenize():
        return [" ".join(tokenize(analyzer, text)) for text in texts]
    # Each distinct unit is joined once; units without tokens are dropped so no space is doubled.
    tokens_of = analyzer.unit_tokens
    memo = WordMemo(lambda unit: " ".join(tokens_of(unit)))
    return [" ".join(filter(None, map(memo.__getitem__, analyzer.units(text)))) for text in texts]


def query_term_counts(analyzer: Analyzer, vocabulary: Mapping[str, int], query: str) -> Counter[int]:
    """Term ids of the query's tokens that the vocabulary knows, with their repeats."""
    return Counter(vocabulary[t] for t in tokenize(analyzer, query) if t in vocabulary)
