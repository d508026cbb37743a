"""The BM25 analyzer: how text becomes tokens, as serialisable configuration.

The default serves any language and any identifier without configuration:

- the text is NFKC-normalised (full-width letters and digits, ligatures and other compatibility
  forms fold to their plain forms);
- words are runs of Unicode letters, combining marks and digits (so a Devanagari or Thai word
  is not cut at its vowel signs), and hyphen-joined runs stay together as one identifier;
- runs of the scripts written without spaces (Han, Hiragana, Katakana, Hangul, Thai, Lao, Khmer,
  Myanmar) become overlapping character bigrams, a single character where a run has one (what
  search engines call CJK bigram analysis: no dictionary, good recall);
- identifiers are split at case, underscore, hyphen and letter/digit boundaries, and the whole
  identifier is kept as a token too, so ``getLogger``, ``get_logger``, ``get-logger`` and "get
  logger" meet, and an exact match stays the strongest;
- words are case-folded (``str.casefold``: ``Straße`` and ``strasse`` meet); stopwords and Snowball
  stemming apply in their language (English by
  default, :class:`Analyzer` ``language=`` for another) and only to words of that language's
  script, never to a bigram or a word of another script.

Indexes keep the analyzer they were built with: the configuration is saved with them, and one
saved before these options existed is read back as it was built (:meth:`Analyzer.from_saved`).
"""

from __future__ import annotations

import itertools
import operator
import re
import unicodedata
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar, Literal, get_args

import regex
from pydantic import BaseModel, ConfigDict, Field, model_validator

_WORD = re.compile(r"\w+")

StemmerLanguage = Literal[
    "arabic",
    "armenian",
    "basque",
    "catalan",
    "czech",
    "danish",
    "dutch",
    "english",
    "esperanto",
    "estonian",
    "finnish",
    "french",
    "german",
    "greek",
    "hindi",
    "hungarian",
    "indonesian",
    "irish",
    "italian",
    "lithuanian",
    "nepali",
    "norwegian",
    "persian",
    "polish",
    "portuguese",
    "romanian",
    "russian",
    "serbian",
    "spanish",
    "swedish",
    "tamil",
    "turkish",
    "yiddish",
]
"""The languages of PyStemmer's Snowball stemmers."""

StopwordLanguage = Literal[
    "danish",
    "dutch",
    "english",
    "french",
    "german",
    "italian",
    "norwegian",
    "portuguese",
    "russian",
    "spanish",
    "swedish",
    "turkish",
]
"""The languages with a stopword list (bm25s's lists)."""

_STOPWORD_LISTS = {language: f"STOPWORDS_{language.upper()}" for language in get_args(StopwordLanguage)} | {
    "english": "STOPWORDS_EN"
}

_SCRIPT_OF_LANGUAGE = {
    "arabic": "Arabic",
    "persian": "Arabic",
    "armenian": "Armenian",
    "greek": "Greek",
    "hindi": "Devanagari",
    "nepali": "Devanagari",
    "russian": "Cyrillic",
    "serbian": "Cyrillic|Latin",
    "tamil": "Tamil",
    "yiddish": "Hebrew",
}
"""The script a language's words are written in (Latin when not listed)."""

UNSPACED_SCRIPTS = ("Han", "Hiragana", "Katakana", "Hangul", "Thai", "Lao", "Khmer", "Myanmar")
"""Scripts written without spaces between words: their runs become character bigrams."""

_UNSPACED = "".join(rf"\p{{{script}}}" for script in UNSPACED_SCRIPTS)
# A piece is a run of an unspaced script, or a word (letters, marks, digits, underscores; hyphens inside).
_PIECE = regex.compile(rf"([{_UNSPACED}]+)|((?:[\w--[{_UNSPACED}]])+(?:-(?:[\w--[{_UNSPACED}]])+)*)", regex.V1)
# The parts of an identifier: ``HTTPStatus`` -> HTTP, Status; ``getLogger2`` -> get, Logger, 2.
_PART = regex.compile(
    r"\p{Lu}[\p{Lu}\p{M}]*(?=\p{Lu}\p{Ll})|\p{Lu}?[\p{Ll}\p{M}]+|[\p{Lu}\p{M}]+|\p{N}+|[\p{L}\p{M}]+", regex.V1
)
_JOINERS = regex.compile(r"[-_]+")
_GRAPHEME = regex.compile(r"\X")
# Runs whose every character is a letter of its own (no marks, no numerals, no case: Han, Kana, Hangul syllables):
# each bigram of such a run is its only token, so the per-piece rules are skipped (see Analyzer._run_tokens).
_PLAIN_BIGRAM_RUN = regex.compile(
    r"[[\p{Han}\p{Hiragana}\p{Katakana}\uAC00-\uD7A3]--[\p{N}\p{M}\p{Lu}\p{Ll}\p{Lt}]]+", regex.V1
)


class Analyzer(BaseModel):
    """Turns text into BM25 tokens; plain data, so it can be saved with an index.

    The default works for any language without configuration (see the module docstring).
    ``Analyzer(language="german")`` stems and drops stopwords in German instead of English (the
    languages of :data:`StemmerLanguage`; stopwords where bm25s has a list). A subclass may override
    :meth:`tokenize`. :meth:`whitespace` gives the tutorial's ``str.split()`` behaviour, kept only
    for parity comparisons.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    split: Literal["words", "whitespace"] = "words"
    """``words`` splits text into Unicode words; ``whitespace`` is ``str.split()`` (the tutorial's)."""

    lowercase: bool = True
    """Lowercase each token (Unicode-aware; see ``casefold``)."""

    casefold: bool = True
    """With ``lowercase``: fold case with ``str.casefold`` (``Straße`` and ``strasse`` meet, as do the two
    Greek lower-case sigmas) rather than ``str.lower``. Indexes saved before this option keep ``str.lower`` (see
    :data:`LEGACY`)."""

    stopwords: StopwordLanguage | None = "english"
    """Stopword list to drop, for words of that language's script; None keeps every token."""

    stemmer: StemmerLanguage | None = "english"
    """Snowball stemmer language (PyStemmer), for words of that language's script; None: no stemming."""

    min_token_length: int = Field(default=1, ge=1, le=1000)
    """Tokens shorter than this many characters are dropped (1 to 1000)."""

    scripts: Literal["bigrams", "runs"] = "bigrams"
    """Runs of scripts written without spaces (Han, Kana, Hangul, Thai, Lao, Khmer, Myanmar): overlapping
    character ``bigrams``; ``runs`` keeps a whole run as one token (how indexes saved before 0.2 were built)."""

    identifiers: bool = True
    """Split identifiers at case, underscore, hyphen and letter/digit boundaries, keeping the whole identifier
    as a token too (``getLogger`` -> get, logger, getlogger)."""

    normalization: Literal["NFKC"] | None = "NFKC"
    """Unicode normalisation of the text before it is split (None: none)."""

    language: StemmerLanguage | None = Field(default=None, exclude=True, repr=False)
    """Shorthand for ``stemmer`` and ``stopwords`` together (stopwords where the language has a list); it sets
    them and is not kept itself (always None once constructed)."""

    LEGACY: ClassVar[dict[str, Any]] = {
        "scripts": "runs",
        "identifiers": False,
        "normalization": None,
        "casefold": False,
    }
    """What an analyzer saved before each of these options existed did: a saved configuration without one of them
    is read back with this value, so the index keeps analysing as it was built."""

    @model_validator(mode="before")
    @classmethod
    def _language(cls, data: Any) -> Any:
        """``language=`` sets the stemmer and the stopwords (where the language has a list) together."""
        if isinstance(data, dict) and "language" in data:
            data = dict(data)
            language = data.pop("language")
            data.setdefault("stemmer", language)
            data.setdefault("stopwords", language if language in _STOPWORD_LISTS else None)
        return data

    def __getstate__(self) -> dict[Any, Any]:
        """The analyzer for ``pickle`` and ``copy.deepcopy``: its settings, without what it computes from them."""
        state = super().__getstate__()
        return {**state, "__dict__": {k: v for k, v in state["__dict__"].items() if k not in _DERIVED}}

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Analyzer:
        """The analyzer itself: it is immutable, and what it computes from its settings may be shared."""
        return self

    @classmethod
    def whitespace(cls) -> Analyzer:
        """The tutorial's analyzer: ``text.split()``, case kept, no stopwords, no stemming."""
        return cls(split="whitespace", lowercase=False, stopwords=None, stemmer=None, **cls.LEGACY)

    @classmethod
    def from_saved(cls, config: dict[str, Any]) -> dict[str, Any]:
        """A saved configuration completed with :data:`LEGACY` for the options it predates (then validated)."""
        return {**cls.LEGACY, **config} if isinstance(config, dict) else config

    @property
    def is_legacy(self) -> bool:
        """True for the analysis of indexes saved before 0.2: regex word runs, no bigrams, no identifier splits."""
        return self.scripts == "runs" and not self.identifiers and self.normalization is None

    # --- per word ---------------------------------------------------------------------------------

    @cached_property
    def _stopword_set(self) -> frozenset[str]:
        if self.stopwords is None:
            return frozenset()
        import bm25s.stopwords

        return frozenset(getattr(bm25s.stopwords, _STOPWORD_LISTS[self.stopwords]))

    @cached_property
    def _stem_word(self) -> Any:
        if self.stemmer is None:
            return None
        import Stemmer

        return Stemmer.Stemmer(self.stemmer).stemWord

    @cached_property
    def _in_language(self) -> Any:
        """Whether a word is written in the script of the stemmer's (else the stopwords') language."""
        language = self.stemmer or self.stopwords
        script = _SCRIPT_OF_LANGUAGE.get(language or "", "Latin")
        letters = "".join(rf"\p{{{name}}}" for name in script.split("|"))
        return regex.compile(rf"[\p{{M}}\p{{N}}_]*[{letters}][{letters}\p{{M}}\p{{N}}_]*", regex.V1).fullmatch

    def split_words(self, text: str) -> list[str]:
        """The raw words of ``text`` (lowercased if configured), before stopwords and stemming (legacy analysis)."""
        if self.lowercase:
            text = self._lower(text)
        return text.split() if self.split == "whitespace" else _WORD.findall(text)

    def _lower(self, text: str) -> str:
        """``text`` case-folded (``casefold``) or lower-cased."""
        return text.casefold() if self.casefold else text.lower()

    def normalize_word(self, word: str) -> str | None:
        """The token a raw word becomes, or None if it is dropped (stopword or too short)."""
        if len(word) < self.min_token_length or word in self._stopword_set:
            return None
        stem = self._stem_word
        return stem(word) if stem is not None else word

    def _language_word(self, word: str) -> str | None:
        """:meth:`normalize_word` for a word of the language's script; other words are only length-checked."""
        if self._in_language(word) is not None:
            return self.normalize_word(word)
        return word if len(word) >= self.min_token_length else None

    # --- per piece (a word, an identifier, or a bigram) -----------------------------------------

    def pieces(self, text: str) -> list[str]:
        """The pieces of ``text`` (already normalised) that :meth:`piece_tokens` maps to tokens.

        Words and identifiers, and the character bigrams of runs of unspaced scripts.
        """
        if self.split == "whitespace":
            return text.split()
        out: list[str] = []
        for unspaced, word in _PIECE.findall(text):
            if not unspaced:
                out.append(word)
            elif self.scripts == "runs" or len(unspaced) == 1:
                out.append(unspaced)
            else:  # bigrams of user-perceived characters: a Thai or Khmer vowel sign stays with its letter
                chars = _GRAPHEME.findall(unspaced)
                out.extend(chars if len(chars) == 1 else [a + b for a, b in itertools.pairwise(chars)])
        return out

    def piece_tokens(self, piece: str) -> tuple[str, ...]:
        """The tokens of one piece: its parts, then the whole identifier if it has several.

        Stopwords are dropped and words stemmed only in the language's script.
        """
        parts = [p for segment in _JOINERS.split(piece) for p in _PART.findall(segment)] if self.identifiers else []
        if not parts:
            parts = [piece]
        if self.lowercase:
            parts = [self._lower(p) for p in parts]
        tokens = [t for t in map(self._language_word, parts) if t is not None]
        if len(parts) > 1:
            whole = "".join(parts)
            if len(whole) >= self.min_token_length:
                tokens.append(whole)
        return tuple(tokens)

    def _run_tokens(self, run: str) -> tuple[str, ...]:
        """The tokens of a run of text without whitespace (pieces never span whitespace).

        A run of Han, Kana or Hangul syllables alone (:data:`_PLAIN_BIGRAM_RUN`) has no case, parts,
        marks or stems: each of its bigrams is its own only token, made here at once rather than one
        piece at a time (an unbroken run of millions of characters took tens of seconds). The result is
        the same, as a test checks against the per-piece rules.
        """
        if not self._plain_bigrams:
            return tuple(token for piece in self.pieces(run) for token in self.piece_tokens(piece))
        tokens: list[str] = []
        for unspaced, word in _PIECE.findall(run):
            if len(unspaced) > 1 and _PLAIN_BIGRAM_RUN.fullmatch(unspaced):
                if self.min_token_length <= 2:
                    tokens.extend(map(operator.add, unspaced, unspaced[1:]))
                continue
            for piece in self.pieces(unspaced or word):
                tokens.extend(self.piece_tokens(piece))
        return tuple(tokens)

    @cached_property
    def _plain_bigrams(self) -> bool:
        """Whether plain runs may skip the per-piece rules: bigram analysis, and those rules not overridden."""
        cls = type(self)
        return (
            self.split == "words"
            and self.scripts == "bigrams"
            and cls.piece_tokens is Analyzer.piece_tokens
            and cls._language_word is Analyzer._language_word
            and cls.pieces is Analyzer.pieces
        )

    @cached_property
    def _memo(self) -> WordMemo:
        if self.is_legacy:
            return WordMemo(lambda word: (token,) if (token := self.normalize_word(word)) is not None else ())
        return WordMemo(self._run_tokens)

    def units(self, text: str) -> list[str]:
        """The units of ``text`` that :meth:`unit_tokens` maps to tokens.

        Legacy analysis: its words. Otherwise the text's runs without whitespace (normalised): English
        repeats them enough that each distinct one is analysed once.
        """
        if self.is_legacy:
            return self.split_words(text)
        if self.normalization is not None and not text.isascii():
            text = unicodedata.normalize(self.normalization, text)
        return text.split()

    def unit_tokens(self, unit: str) -> tuple[str, ...]:
        """The tokens of one unit, remembered: each distinct unit is analysed once per analyzer."""
        tokens: tuple[str, ...] = self._memo[unit]
        return tokens

    @property
    def unit_lookup(self) -> Callable[[str], tuple[str, ...]]:
        """:meth:`unit_tokens` as the memo's own lookup, a call in C for a unit seen before (for loops over many)."""
        return self._memo.__getitem__

    def has_custom_tokenize(self) -> bool:
        """True when a subclass overrides :meth:`tokenize` (then it is called for every text)."""
        return type(self).tokenize is not Analyzer.tokenize

    def tokenize(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order (duplicates kept: BM25 counts them).

        Override it in a subclass for languages or codes the default splits badly; the index
        then calls it for every document and query (and records the class in its manifest).
        """
        memo = self._memo
        return [token for unit in self.units(text) for token in memo[unit]]


_DERIVED = frozenset({"_stopword_set", "_stem_word", "_in_language", "_memo", "_plain_bigrams"})
"""What an :class:`Analyzer` computes from its settings on first use (left out of its pickled state)."""


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
