"""The BM25 analyzer: how text becomes tokens, as serialisable configuration."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_WORD = re.compile(r"\w+")


class Analyzer(BaseModel):
    """Turns text into BM25 tokens; plain data, so it can be saved in an index manifest.

    The default lowercases (Unicode-aware), splits on non-word characters, drops English
    stopwords and applies the Snowball English stemmer (PyStemmer). :meth:`whitespace` gives
    the tutorial's ``str.split()`` behaviour, kept only for parity comparisons.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    def _stem_words(self) -> Any:
        if self.stemmer is None:
            return None
        import Stemmer

        return Stemmer.Stemmer(self.stemmer).stemWords

    def tokenize(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order (duplicates kept: BM25 counts them)."""
        if self.lowercase:
            text = text.lower()
        tokens = text.split() if self.split == "whitespace" else _WORD.findall(text)
        stop = self._stopword_set
        if stop or self.min_token_length > 1:
            tokens = [t for t in tokens if len(t) >= self.min_token_length and t not in stop]
        stem = self._stem_words
        if stem is not None and tokens:
            tokens = stem(tokens)
        return tokens
