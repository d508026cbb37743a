"""Question -> passage retrieval in Japanese and Chinese, on the development sets in ../shared/data/cjk.

The sets (JSQuAD v1.3 validation, CMRC 2018 trial; CC BY-SA 4.0) are not shipped with the repository:
the tests skip where they are absent. A slice of each keeps them fast; ``benchmarks/languages.py``
measures the whole sets with the bundled model.
"""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from langchain_fusion import Analyzer, BM25Retriever, FusionIndex, FusionRetriever
from tests.helpers.embeddings import EnglishOnlyEmbeddings, HashingEmbeddings
from tests.helpers.question_sets import CJK_DATA, SETS, recall

PASSAGES = 200
"""Passages of each set used here (the questions are those asked about them)."""

pytestmark = pytest.mark.slow  # recall over whole question sets: seconds each


@pytest.fixture(scope="module", params=list(SETS))
def question_set(request: pytest.FixtureRequest) -> tuple[list[Document], list[tuple[str, str]]]:
    name, read = SETS[request.param]
    path = CJK_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (the development sets are not shipped)")
    passages, questions = read(path)
    kept = passages[:PASSAGES]
    ids = {passage_id for passage_id, _ in kept}
    return [Document(id=i, page_content=text) for i, text in kept], [(q, g) for q, g in questions if g in ids]


def test_bm25_finds_the_passage_of_nine_questions_in_ten(question_set: tuple[list[Document], list]) -> None:
    docs, questions = question_set
    default = FusionIndex.from_documents(docs, HashingEmbeddings(16))
    legacy = FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=Analyzer(**Analyzer.LEGACY))
    assert recall(BM25Retriever(index=default, k=10), questions) >= 0.9
    assert recall(BM25Retriever(index=legacy, k=10), questions) < 0.5  # whole clauses as tokens, before 0.2


def test_fusion_is_as_good_as_bm25_with_a_model_that_cannot_read_the_questions(
    question_set: tuple[list[Document], list],
) -> None:
    docs, questions = question_set
    index = FusionIndex.from_documents(docs, EnglishOnlyEmbeddings())
    assert recall(FusionRetriever(index=index, k=10), questions) >= recall(BM25Retriever(index=index, k=10), questions)
