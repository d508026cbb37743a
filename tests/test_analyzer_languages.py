"""Stemming and stopwords per language: by a word's script, or by its text's detected language.

Each case is a passage and a question of ``benchmarks/parallel`` (or alike) in which the same word
comes in two inflected forms: with the language's analysis they share a token, with the configured
English one (indexes saved before ``languages``) they do not.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import Analyzer, BM25Retriever, FusionIndex
from langchain_fusion.stores import languages
from langchain_fusion.stores.languages import Detected, Language, detect
from langchain_fusion.stores.local.tokens import joined_tokens, text_token_ids
from tests.helpers.embeddings import HashingEmbeddings

INFLECTED = [
    # (language, passage, question, the token the two share)
    (
        "german",
        "Ingenieure sperrten die Eisenbahnbrücke, um die rostigen Träger zu ersetzen.",
        "Wann wurden die rostige Eisenbahnbrücken gesperrt?",
        "rostig",
    ),
    (
        "finnish",
        "Lampaat laiduntavat vuoristolaitumilla toukokuusta syyskuuhun.",
        "Milloin paimenet ajavat laumansa alas vuoristolaitumilta?",
        "vuoristolaitum",
    ),
    (
        "polish",
        "Owce pasą się na górskich pastwiskach od maja do września.",
        "Kiedy pasterze sprowadzają swoje stada z górskich pastwisk?",
        "pastwisk",
    ),
    (
        "hungarian",
        "A völgy gazdái almát és körtét termesztenek a teraszokon minden évben.",
        "Ki segít a gazdáknak az almaszedésben ősszel?",
        "gazda",
    ),
    (
        "turkish",
        "Vadideki çiftçiler teraslarda elma ve armut yetiştiriyor.",
        "Güneydeki çiftçiler hayvanlarını neden sattılar?",
        "çiftçi",
    ),
    (
        "russian",
        "Местные каменщики построили старый каменный мост в 1820 году.",
        "Когда наводнение разрушило среднюю арку старого моста?",
        "мост",
    ),
    (
        "greek",
        "Ντόπιοι χτίστες έχτισαν την παλιά πέτρινη γέφυρα το 1820.",
        "Πότε κατέστρεψε η πλημμύρα τη μεσαία καμάρα της παλιάς γέφυρας;",
        "γεφυρ",
    ),
    (
        "arabic",
        "بنى البناؤون المحليون الجسر الحجري القديم عام 1820.",
        "متى دمر الفيضان القوس الأوسط للجسر القديم؟",
        "جسر",
    ),
]


@pytest.mark.parametrize(("language", "passage", "question", "shared"), INFLECTED, ids=[c[0] for c in INFLECTED])
def test_inflected_forms_meet_in_their_language(language: str, passage: str, question: str, shared: str) -> None:
    analyzer = Analyzer()
    assert shared in analyzer.tokenize(passage) and shared in analyzer.tokenize(question)
    configured = Analyzer(languages="configured")  # English only, on Latin words: the forms stay apart
    assert shared not in set(configured.tokenize(passage)) & set(configured.tokenize(question))


def test_the_text_language_is_detected_and_pooled_by_stemmer() -> None:
    finnish = detect("Milloin tulva tuhosi vanhan sillan keskimmäisen kaaren?")
    assert finnish == Detected(Language("finnish", None), sure=True)
    assert detect("Коли повінь зруйнувала середню арку старого мосту?") == Detected(Language("russian", None), True)
    assert detect("Wann zerstörte die Flut den Mittelbogen der alten Brücke?").language == Language("german", "german")
    assert not detect("Kuka maalaa kaiteen?").sure  # fewer than MIN_WORDS words: never sure
    assert detect("get_logger KV-3300 os.path.join 2024") is None  # identifiers, codes, numbers: no language
    assert detect("") is None


def test_a_text_unsure_of_its_language_gets_both_analyses() -> None:
    analyzer = Analyzer()
    text = "Kuka maalaa kävelysillan kaiteen?"  # four Finnish words: Finnish, unsure
    assert analyzer.language_of(text) == Detected(Language("finnish", None), sure=False)
    assert analyzer.tokenize(text) == ["kuka", "maala", "maalaa", "kävelysil", "kävelysillan", "kaite", "kaiteen"]
    # Finnish stems, then the configured (English) analysis's tokens: it meets either kind of document
    assert analyzer.tokenize("get_logger") == ["get", "logger", "getlogger"]  # no language: English, as before


def test_english_and_cjk_are_analysed_as_before() -> None:
    texts = [
        "The Batteries were CHARGING: KV-3300! getLogger writes the inverter's log.",
        "Regular exercise lowers blood pressure and improves sleep, doctors say.",
        "東京は日本の首都 and 北京是中国的首都",
        "서울은 한국의 수도입니다",
    ]
    for text in texts:
        assert Analyzer().tokenize(text) == Analyzer(languages="configured").tokenize(text), text


def test_scripts_alone_stem_without_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_detection(text: str) -> Any:
        raise AssertionError("languages='scripts' does not detect")

    monkeypatch.setattr("langchain_fusion.stores.analyzer.detect", no_detection)
    analyzer = Analyzer(languages="scripts")
    assert analyzer.tokenize("Москвы γέφυρας الجسر running Brücken") == ["москв", "γεφυρ", "جسر", "run", "brücken"]
    assert Analyzer(languages="scripts").tokenize("גשרים") == ["גשרים"]  # Hebrew: no stemmer of its own


def test_switches_and_the_configured_language_hold_for_every_language() -> None:
    text = "Когда наводнение разрушило среднюю арку старого моста и мосты?"
    assert Analyzer(stemmer=None, stopwords=None).tokenize(text) == Analyzer(
        stemmer=None, stopwords=None, languages="configured"
    ).tokenize(text)
    german = Analyzer(language="german")  # Latin text not detected otherwise: German
    assert german.languages == "detected" and german.tokenize("Brücken Häuser") == ["bruck", "haus"]


def test_the_fast_paths_agree_with_tokenize() -> None:
    analyzer = Analyzer()
    texts = (
        [case[1] for case in INFLECTED] + [case[2] for case in INFLECTED] + ["get_logger 東京", "Kuka maalaa kaiteen?"]
    )
    vocabulary: dict[str, int] = {}
    ids, lengths = text_token_ids(analyzer, texts, vocabulary)
    words = {i: t for t, i in vocabulary.items()}
    rows = np.split(ids, np.cumsum(lengths)[:-1])  # the texts' ids end to end
    assert [[words[i] for i in row] for row in rows] == [analyzer.tokenize(t) for t in texts]
    assert lengths.tolist() == [len(analyzer.tokenize(t)) for t in texts]
    assert joined_tokens(analyzer, texts) == [" ".join(analyzer.tokenize(t)) for t in texts]  # what Milvus indexes


def test_an_index_finds_the_passage_of_an_inflected_question() -> None:
    docs = [Document(id=case[0], page_content=case[1]) for case in INFLECTED]
    index = FusionIndex.from_documents(docs, HashingEmbeddings(16))
    bm25 = BM25Retriever(index=index, k=1)
    assert [bm25.invoke(case[2])[0].id for case in INFLECTED] == [case[0] for case in INFLECTED]


class TestConfiguration:
    """``languages`` is a saved option: older configurations read back as they were built."""

    def test_a_configuration_saved_before_languages_reads_back_configured(self) -> None:
        saved = Analyzer(languages="configured").model_dump(mode="json")
        del saved["languages"]  # what langchain-fusion 0.4 saved
        restored = Analyzer.model_validate(Analyzer.from_saved(saved))
        assert restored == Analyzer(languages="configured") and not restored.is_legacy
        assert restored.tokenize("Москвы running") == ["москвы", "run"]

    def test_a_new_configuration_records_languages(self) -> None:
        assert Analyzer().model_dump(mode="json")["languages"] == "detected"
        assert Analyzer.model_validate(Analyzer().model_dump(mode="json")) == Analyzer()

    def test_the_analysis_before_0_2_knows_only_the_configured_language(self) -> None:
        assert Analyzer(**Analyzer.LEGACY).languages == "configured"
        with pytest.raises(ValueError, match="languages='detected' needs the current analysis"):
            Analyzer(**{**Analyzer.LEGACY, "languages": "detected"})

    def test_the_detector_is_the_bundled_model_loaded_once(self) -> None:
        assert languages.model_path().is_file()
        assert languages._model() is languages._model()


class TestFastPaths:
    """The shortcuts taken for speed give what the general rules give."""

    class General(Analyzer):
        """The per-piece rules for every unit: an override of ``piece_tokens`` turns the shortcuts off."""

        def piece_tokens(self, piece: str, language: Language | None = None) -> tuple[str, ...]:
            return super().piece_tokens(piece, language)

    UNITS: ClassVar[list[str]] = [
        "bridge", "bridges", "the", "und", "Brücken", "brücken", "kävelysillan", "getLogger", "HTTPStatus",
        "get_logger", "KV-3300", "(bridges),", "x", "ab", "東京都", "Москвы", "γέφυρας", "الجسر", "ﬁne", "naïve",
    ]  # fmt: skip

    @pytest.mark.parametrize("seed", range(3))
    def test_every_language_and_confidence_analyses_a_unit_as_the_per_piece_rules(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        letters = [*"abcdeéñßz", "TH", "-", "_", "'", ".", "1"]
        units = self.UNITS + ["".join(rng.choice(letters, size=int(rng.integers(1, 9)))) for _ in range(60)]
        stemmers = ["german", "finnish", "polish", "english", "russian", "greek", "arabic", "serbian", "turkish"]
        for options in ({}, {"min_token_length": 3}, {"language": "german"}):
            fast, general = Analyzer(**options), self.General(**options)
            for stemmer in stemmers:
                language = languages._own(stemmer)  # type: ignore[arg-type]
                for sure in (True, False):
                    detected = Detected(language, sure)
                    for unit in units:
                        expected = general.unit_tokens(unit, detected)
                        assert fast.unit_tokens(unit, detected) == expected, (options, detected, unit)

    def test_the_words_of_a_sample_are_those_the_regex_finds(self) -> None:
        rng = np.random.default_rng(0)
        alphabet = [chr(c) for c in range(128)] + list("aaabbbEEZ      '''---") + ["\u2019", "é", "東"]
        words = ["Hello", "don't", "rock-n-roll", "HTTPStatus", "getLogger", "x1", "_a", "(yes)", "a--b", "U.S."]
        samples = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(3000)]
        samples += [" ".join(rng.choice(words, size=int(rng.integers(0, 8)))) for _ in range(1000)]
        samples += ["lower case words only", "Ünïcode text, straße", "tab\tand\x1cfile separators"]
        for sample in samples:
            assert languages.natural_words(sample) == languages._NATURAL.findall(sample), repr(sample)

    def test_a_repeated_text_is_detected_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = []
        model = languages._model()

        class Counting:
            def predict(self, text: str, k: int) -> Any:
                calls.append(text)
                return model.predict(text, k=k)

        monkeypatch.setattr(languages, "_detector", Counting())
        languages.forget_detections()
        text = "Wann zerstörte die Flut den Mittelbogen der alten Brücke?"
        assert detect(text) == detect(text) == Detected(Language("german", "german"), True)
        assert len(calls) == 1
        languages.forget_detections()  # nothing detected by the counting model stays
