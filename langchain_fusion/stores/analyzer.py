"""The BM25 analyzer: how text becomes tokens, as serialisable configuration."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_WORD = re.compile(r"\w+")


class Analyzer(BaseModel):
    """Turns text into BM25 tokens; plain data, so it can be saved in an index manifest.

    A subclass may override :meth:`tokenize` (or :meth:`split_words` and :meth:`normalize_word`).
    The default lowercases (Unicode-aware), splits on non-word characters, drops English
    stopwords and applies the Snowball English stemmer (PyStemmer). :meth:`whitespace` gives
    the tutorial's ``str.split()`` behaviour, kept only for parity comparisons.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    split: Literal["words", "whitespace"] = "words"
    """``words`` splits on runs of non-word characters; ``whitespace`` is ``str.split()``."""

    lowercase: bool = True
    """Lowercase (``str.lower``, Unicode-aware) before splitting."""

    stopwords: Literal["english"] | None = "english"
    """Stopword list to drop (bm25s's English list), or None to keep every token."""

    stemmer: Literal["english"] | None = "english"
    """Snowball stemmer language (PyStemmer), or None for no stemming."""

    min_token_length: int = Field(default=1, ge=1)
    """Tokens shorter than this many characters are dropped."""

    @classmethod
    def whitespace(cls) -> Analyzer:
        """The tutorial's analyzer: ``text.split()``, case kept, no stopwords, no stemming."""
        return cls(split="whitespace", lowercase=False, stopwords=None, stemmer=None)

    @cached_property
    def _stopword_set(self) -> frozenset[str]:
        if self.stopwords is None:
            return frozenset()
        from bm25s.stopwords import STOPWORDS_EN

        return frozenset(STOPWORDS_EN)

    @cached_property
    def _stem_word(self) -> Any:
        if self.stemmer is None:
            return None
        import Stemmer

        return Stemmer.Stemmer(self.stemmer).stemWord

    def split_words(self, text: str) -> list[str]:
        """The raw words of ``text`` (lowercased if configured), before stopwords and stemming."""
        if self.lowercase:
            text = text.lower()
        return text.split() if self.split == "whitespace" else _WORD.findall(text)

    def normalize_word(self, word: str) -> str | None:
        """The token a raw word becomes, or None if it is dropped (stopword or too short)."""
        if len(word) < self.min_token_length or word in self._stopword_set:
            return None
        stem = self._stem_word
        return stem(word) if stem is not None else word

    @cached_property
    def _memo(self) -> WordMemo:
        return WordMemo(self.normalize_word)

    def token_of(self, word: str) -> str | None:
        """:meth:`normalize_word`, remembered: each distinct word is analysed once per analyzer."""
        token: str | None = self._memo[word]
        return token

    def has_custom_tokenize(self) -> bool:
        """True when a subclass overrides :meth:`tokenize` (then it is called for every text)."""
        return type(self).tokenize is not Analyzer.tokenize

    def tokenize(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order (duplicates kept: BM25 counts them).

        Override it in a subclass for languages or codes the default splits badly; the index
        then calls it for every document and query (and records the class in its manifest).
        """
        return [t for t in map(self._memo.__getitem__, self.split_words(text)) if t is not None]


class WordMemo(dict[str, Any]):
    """Caches a per-word function: each distinct word is analysed once, then looked up in C."""

    MAX_SIZE = 2_000_000

    def __init__(self, compute: Any) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, word: str) -> Any:
        if len(self) >= self.MAX_SIZE:
            self.clear()
        value = self[word] = self.compute(word)
        return value
