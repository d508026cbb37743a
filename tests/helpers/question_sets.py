"""The Japanese and Chinese question -> passage development sets, read for the tests and the benchmark.

JSQuAD v1.3 validation and CMRC 2018 trial (CC BY-SA 4.0, attribution in ../shared/data/cjk/README.md)
are not shipped with the repository; they are read where they lie, beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.helpers.paths import REPO

CJK_DATA = REPO.parent / "shared" / "data" / "cjk"
"""Where the development sets are (absent on a machine without ../shared)."""

Pairs = list[tuple[str, str]]
"""(passage id, text) or (question, passage id) pairs."""


def read_jsquad(path: Path) -> tuple[Pairs, Pairs]:
    """Passages and the answerable questions asked about them, from a JSQuAD (SQuAD-format) file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    passages: Pairs = []
    questions: Pairs = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            passage_id = f"p{len(passages)}"
            passages.append((passage_id, paragraph["context"]))
            questions += [(qa["question"], passage_id) for qa in paragraph["qas"] if not qa.get("is_impossible")]
    return passages, questions


def read_cmrc(path: Path) -> tuple[Pairs, Pairs]:
    """Passages and the questions asked about them, from a CMRC 2018 file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    passages = [(item["context_id"], item["context_text"]) for item in data]
    questions = [(qa["query_text"], item["context_id"]) for item in data for qa in item["qas"]]
    return passages, questions


SETS: dict[str, tuple[str, Callable[[Path], tuple[Pairs, Pairs]]]] = {
    "jsquad": ("jsquad-v1.3-valid.json", read_jsquad),
    "cmrc": ("cmrc2018-trial.json", read_cmrc),
}
"""Each set's file in :data:`CJK_DATA` and its reader."""


def recall(retriever: object, questions: Pairs) -> float:
    """Share of questions whose passage is among the retriever's results (one ``batch`` call)."""
    found = retriever.batch([q for q, _ in questions])  # type: ignore[attr-defined]
    hits = sum(any(d.id == gold for d in docs) for docs, (_, gold) in zip(found, questions, strict=True))
    return hits / len(questions)
