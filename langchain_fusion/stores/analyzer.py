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
  stemming apply in their language: their text's detected language, else their script's (Latin: the
  configured language, English by default, :class:`Analyzer` ``language=`` for another; see
  :mod:`langchain_fusion.stores.languages`), never to a bigram.

Indexes keep the analyzer they were built with: the configuration is saved with them, and one
saved before these options existed is read back as it was built (:meth:`Analyzer.from_saved`).
"""

from __future__ import annotations

import itertools
import operator
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, ClassVar, Literal, NamedTuple

import regex
from pydantic import BaseModel, ConfigDict, Field, model_validator

from langchain_fusion.stores.languages import (
    SCRIPT_LANGUAGES,
    SCRIPT_OF_LANGUAGE,
    Detected,
    Language,
    StemmerLanguage,
    StopwordLanguage,
    detect,
    has_stopwords,
    in_scripts,
    script_of,
    stemmer_of,
    stopwords_of,
)

__all__ = ["UNSPACED_SCRIPTS", "Analyzer", "StemmerLanguage", "StopwordLanguage", "WordMemo"]

_WORD = re.compile(r"\w+")

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

    languages: Literal["configured", "scripts", "detected"] = "detected"
    """Whose stemmer and stopwords each word gets. ``configured``: the configured language's (``stemmer``,
    ``stopwords``), on words of its script only; other words are left as they are (indexes saved before this
    option). ``scripts``: also a word in a script that names its language gets that language's: Greek, Armenian,
    Tamil; Cyrillic: Russian; Arabic script: Arabic; Devanagari: Hindi. ``detected`` (the default): as
    ``scripts``, and each text's language is detected (fastText, offline), so the words of a Finnish text are
    stemmed in Finnish and those of a Persian one in Persian; a text whose language is not detected with
    confidence, or has no stemmer, keeps the configured language (Latin script) or its script's. ``stemmer=None``
    and ``stopwords=None`` still turn stemming and stopwords off for every language."""

    language: StemmerLanguage | None = Field(default=None, exclude=True, repr=False)
    """Shorthand for ``stemmer`` and ``stopwords`` together (stopwords where the language has a list); it sets
    them and is not kept itself (always None once constructed)."""

    LEGACY: ClassVar[dict[str, Any]] = {
        "scripts": "runs",
        "identifiers": False,
        "normalization": None,
        "casefold": False,
        "languages": "configured",
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
            data.setdefault("stopwords", language if has_stopwords(language) else None)
        return data

    @model_validator(mode="after")
    def _languages_need_current_analysis(self) -> Analyzer:
        """The analysis before 0.2 (word runs, no bigrams or identifier splits) knows only the configured language."""
        if self.is_legacy and self.languages != "configured":
            raise ValueError(
                f"languages={self.languages!r} needs the current analysis (scripts='bigrams', identifiers or "
                "normalization); the analysis of indexes saved before 0.2 takes languages='configured'"
            )
        return self

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
        return frozenset() if self.stopwords is None else stopwords_of(self.stopwords)

    @cached_property
    def _stem_word(self) -> Any:
        return None if self.stemmer is None else stemmer_of(self.stemmer)

    @cached_property
    def _configured_scripts(self) -> tuple[str, ...]:
        """The scripts of the stemmer's (else the stopwords') language."""
        return tuple(SCRIPT_OF_LANGUAGE.get(self.stemmer or self.stopwords or "", "Latin").split("|"))

    @cached_property
    def _in_language(self) -> Any:
        """Whether a word is written in the script of the stemmer's (else the stopwords') language."""
        return in_scripts(self._configured_scripts)

    def _effective(self, language: Language | None) -> tuple[str | None, str | None]:
        """The stemmer and stopwords ``language`` really applies here (``stemmer=None`` / ``stopwords=None`` win)."""
        if language is None:
            return None, None
        return (language.stemmer if self.stemmer else None, language.stopwords if self.stopwords else None)

    def _script_language(self, script: str) -> tuple[str | None, str | None]:
        """What a word of ``script`` gets when its text's language does not decide it."""
        if script in self._configured_scripts:
            return (self.stemmer, self.stopwords)
        return self._effective(SCRIPT_LANGUAGES.get(script)) if self.languages != "configured" else (None, None)

    def language_of(self, text: str) -> Detected | None:
        """The language detected for ``text``, whose stemmer and stopwords its words of that script get.

        None when nothing is detected (``languages`` other than ``detected``, a language without a stemmer)
        or when it would change nothing (English with the default configuration, Russian for Cyrillic
        words): then each word gets its script's language.
        """
        if self.languages != "detected" or not (self.stemmer or self.stopwords):
            return None
        found = detect(text)
        if found is None:
            return None
        redundant = self._redundant.get(found.language)
        if redundant is None:
            redundant = self._redundant[found.language] = all(
                self._script_language(script) == self._effective(found.language) for script in found.language.scripts
            )
        return None if redundant else found

    @cached_property
    def _redundant(self) -> dict[Language, bool]:
        """Per detected language, whether it analyses its script's words as they are analysed without it."""
        return {}

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

    def _rules(self, language: Language) -> _Rules:
        """How ``language`` analyses a word here (made once per language)."""
        rules = self._language_rules.get(language)
        if rules is None:
            stemmer, stopwords = self._effective(language)
            rules = self._language_rules[language] = _Rules(
                in_scripts(language.scripts),
                stopwords_of(stopwords) if stopwords is not None else frozenset(),
                stemmer_of(stemmer) if stemmer is not None else None,
            )
        return rules

    @cached_property
    def _language_rules(self) -> dict[Language, _Rules]:
        """Per language, its :class:`_Rules` here."""
        return {}

    def _normalize_in(self, word: str, language: Language) -> str | None:
        """The token of a word of ``language``'s script (None: a stopword or too short)."""
        return _normalized(word, self._rules(language), self.min_token_length)

    def _language_word(self, word: str, language: Language | None = None) -> str | None:
        """The token of a word (None: dropped).

        In its text's detected ``language`` if written in its script, else in the configured language if
        written in its script, else (``languages`` other than ``configured``) in its script's language;
        other words are only length-checked.
        """
        if language is not None and self._rules(language).written_in(word) is not None:
            return self._normalize_in(word, language)
        if self._in_language(word) is not None:
            return self.normalize_word(word)
        if self.languages != "configured":
            by_script = SCRIPT_LANGUAGES.get(script_of(word) or "")
            if by_script is not None and self._rules(by_script).written_in(word) is not None:
                return self._normalize_in(word, by_script)
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

    def piece_tokens(self, piece: str, language: Language | None = None) -> tuple[str, ...]:
        """The tokens of one piece: its parts, then the whole identifier if it has several.

        Stopwords are dropped and words stemmed in the language of their script (``language``: the text's).
        """
        return _planned(self._piece_plan(piece), lambda word: self._language_word(word, language))

    def _piece_plan(self, piece: str) -> list[str | tuple[str, ...]]:
        """What :meth:`piece_tokens` makes of a piece whatever its language (see :data:`Plan`)."""
        parts = [p for segment in _JOINERS.split(piece) for p in _PART.findall(segment)] if self.identifiers else []
        if not parts:
            parts = [piece]
        if self.lowercase:
            parts = [self._lower(p) for p in parts]
        plan: list[str | tuple[str, ...]] = list(parts)
        if len(parts) > 1:
            whole = "".join(parts)
            if len(whole) >= self.min_token_length:
                plan.append((whole,))
        return plan

    def _run_tokens(self, run: str, language: Language | None = None) -> tuple[str, ...]:
        """The tokens of a run of text without whitespace (pieces never span whitespace).

        Its plan (:meth:`_run_plan`: the same in every language, so it is kept once a text's language is
        detected) with each of its words analysed in ``language``. A subclass that overrides the per-piece
        rules gets them applied piece by piece instead.
        """
        if not self._plain_bigrams:
            return tuple(token for piece in self.pieces(run) for token in self.piece_tokens(piece, language))
        if run.isascii() and run.isalpha() and run.islower():  # a plain word is its own plan: (run,)
            token = self._language_word(run, language)
            return () if token is None else (sys.intern(token),)
        plan = self._plans[run] if self._memos else self._run_plan(run)  # kept once a language is detected
        return _planned(plan, lambda word: self._language_word(word, language))

    def _run_plan(self, run: str) -> Plan:
        """The plan of a run's tokens: each piece's (:meth:`_piece_plan`), bigrams of plain runs made at once.

        A run of Han, Kana or Hangul syllables alone (:data:`_PLAIN_BIGRAM_RUN`) has no case, parts,
        marks or stems: each of its bigrams is its own only token, made here at once rather than one
        piece at a time (an unbroken run of millions of characters took tens of seconds). The result is
        the same, as a test checks against the per-piece rules (no stemmer's language is written in them).
        """
        plan: list[str | tuple[str, ...]] = []
        for unspaced, word in _PIECE.findall(run):
            if len(unspaced) > 1 and _PLAIN_BIGRAM_RUN.fullmatch(unspaced):
                if self.min_token_length <= 2:
                    plan.append(tuple(map(operator.add, unspaced, unspaced[1:])))
                continue
            for piece in self.pieces(unspaced or word):
                plan.extend(self._piece_plan(piece))
        return tuple(plan)

    @cached_property
    def _plans(self) -> WordMemo:
        """Each run's plan (:meth:`_run_plan`), shared by every language its texts are detected in."""
        return WordMemo(self._run_plan)

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

    @cached_property
    def _memos(self) -> dict[Detected, WordMemo]:
        """Per detected language, its texts' units already analysed."""
        return {}

    def _memo_for(self, detected: Detected | None) -> WordMemo:
        if detected is None:
            return self._memo
        memo = self._memos.get(detected)
        if memo is None:
            if detected.sure:
                memo = WordMemo(self._unit_analysis(detected.language))
            else:  # both analyses: the detected language's tokens, then those it lacks of the script's language's
                sure = self._memo_for(detected._replace(sure=True))
                memo = WordMemo(lambda unit: _both(sure[unit], self._memo[unit]))
            self._memos[detected] = memo
        return memo

    def _unit_analysis(self, language: Language) -> Callable[[str], tuple[str, ...]]:
        """:meth:`_run_tokens` in ``language``, made for many units.

        A plain lower-case ASCII word of a Latin-script language (the most frequent unit, met once in each
        language a corpus's texts are detected in) is analysed at once, without the plan.
        """
        overridden = type(self)._normalize_in is not Analyzer._normalize_in
        if not self._plain_bigrams or overridden or "Latin" not in language.scripts:
            return lambda unit: self._run_tokens(unit, language)
        rules, min_length, run_tokens = self._rules(language), self.min_token_length, self._run_tokens

        def analysed(unit: str) -> tuple[str, ...]:
            if unit.isascii() and unit.isalpha() and unit.islower():  # written in Latin: its plan is (unit,)
                token = _normalized(unit, rules, min_length)
                return () if token is None else (sys.intern(token),)
            return run_tokens(unit, language)

        return analysed

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

    def unit_tokens(self, unit: str, language: Detected | None = None) -> tuple[str, ...]:
        """The tokens of one unit of a text in ``language`` (:meth:`language_of`), remembered.

        Each distinct unit is analysed once per analyzer and language.
        """
        tokens: tuple[str, ...] = self._memo_for(language)[unit]
        return tokens

    def unit_lookup(self, language: Detected | None = None) -> Callable[[str], tuple[str, ...]]:
        """:meth:`unit_tokens` as the memo's own lookup, a call in C for a unit seen before (for loops over many)."""
        return self._memo_for(language).__getitem__

    def has_custom_tokenize(self) -> bool:
        """True when a subclass overrides :meth:`tokenize` (then it is called for every text)."""
        return type(self).tokenize is not Analyzer.tokenize

    def tokenize(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order (duplicates kept: BM25 counts them).

        Override it in a subclass for languages or codes the default splits badly; the index
        then calls it for every document and query (and records the class in its manifest).
        """
        memo = self._memo_for(self.language_of(text))
        return [token for unit in self.units(text) for token in memo[unit]]


class _Rules(NamedTuple):
    """How one language analyses a word here."""

    written_in: Callable[[str], Any]
    """``fullmatch`` of a word written in the language's scripts (see :func:`in_scripts`)."""
    stopwords: frozenset[str]
    """The stopwords dropped (none when the analyzer's ``stopwords`` is None)."""
    stem: Callable[[str], str] | None
    """The stemmer's ``stemWord`` (None when the analyzer's ``stemmer`` is None)."""


def _normalized(word: str, rules: _Rules, min_length: int) -> str | None:
    """The token of a word written in the language of ``rules`` (None: a stopword or too short)."""
    if len(word) < min_length or word in rules.stopwords:
        return None
    return rules.stem(word) if rules.stem is not None else word


Plan = tuple[str | tuple[str, ...], ...]
"""A run's tokens before its language is known: a word (str) becomes its token in the text's language (or is
dropped); a tuple holds tokens as they are (the bigrams of a plain run, or a whole identifier)."""


def _planned(plan: Sequence[str | tuple[str, ...]], word: Callable[[str], str | None]) -> tuple[str, ...]:
    """The tokens of ``plan`` with ``word`` giving each word's token (None: dropped).

    A word's token is interned (one string for each token, whichever language's analysis made it: the
    vocabulary's look-ups then compare identities); bigrams are not (too many, each in one run).
    """
    tokens: list[str] = []
    for entry in plan:
        if isinstance(entry, str):
            token = word(entry)
            if token is not None:
                tokens.append(sys.intern(token))
        else:
            tokens.extend(entry)
    return tuple(tokens)


def _both(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    """``first``, then the tokens of ``second`` it does not have."""
    return first if first == second else first + tuple(token for token in second if token not in first)


_DERIVED = frozenset(
    {
        "_stopword_set",
        "_stem_word",
        "_configured_scripts",
        "_in_language",
        "_redundant",
        "_memo",
        "_memos",
        "_plans",
        "_language_rules",
        "_plain_bigrams",
    }
)
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
