"""Small corpora with known answers, shared by several test modules (each builds them afresh: no shared state)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import FusionIndex, HierarchicalIndex
from langchain_fusion import metadata as keys
from langchain_fusion.evaluation.datasets import EvalDataset

ANIMALS = [
    "The cat sat on the warm mat by the fire.",
    "Dogs bark loudly at the postman every morning.",
    "A cat and a dog can become good friends.",
    "Quantum physics describes particles and waves.",
    "Cats purr when they are content and relaxed.",
    "The stock market fell sharply on Tuesday.",
    "Parrots can learn to imitate human speech.",
    "Photosynthesis turns sunlight into chemical energy.",
]
"""Eight one-line sentences, four on cats and dogs and four on other things: the suite's smallest corpus."""


def paged_animal_docs() -> list[Document]:
    """:data:`ANIMALS` as documents ``doc{i}.txt``, two to a page (pages 1 to 4)."""
    return [
        Document(page_content=text, metadata={keys.SOURCE: f"doc{i}.txt", keys.PAGE: i // 2 + 1})
        for i, text in enumerate(ANIMALS)
    ]


def hierarchical_animals(embeddings: Embeddings) -> HierarchicalIndex:
    """Eight animal, science and money chunks of ``a.pdf`` (ids ``c0``..``c7``, four a page) under two page summaries
    (``s1``, ``s2``)."""
    chunks = FusionIndex.from_documents(
        [
            Document(id=f"c{i}", page_content=text, metadata={"source": "a.pdf", "page": 1 + i // 4, "chunk_index": i})
            for i, text in enumerate(
                [
                    "The cat sat on the warm mat.",
                    "Dogs bark at the postman.",
                    "A cat and a dog are friends.",
                    "Cats purr when content.",
                    "Quantum physics describes waves.",
                    "The stock market fell sharply.",
                    "Parrots imitate human speech.",
                    "Photosynthesis turns sunlight into energy.",
                ]
            )
        ],
        embeddings,
    )
    summaries = [
        Document(id="s1", page_content="cats and dogs", metadata={"source": "a.pdf", "page": 1,
                 "summary_chunk_ids": ["c0", "c1", "c2", "c3"], "summary_fallback": False}),
        Document(id="s2", page_content="science, money and birds", metadata={"source": "a.pdf", "page": 2,
                 "summary_chunk_ids": ["c4", "c5", "c6", "c7"], "summary_fallback": False}),
    ]  # fmt: skip
    return HierarchicalIndex.from_summaries(chunks, summaries)


TOPICS = ["battery flood", "inverter rating", "solar panel", "wind turbine", "grid outage", "diesel backup"]
"""The six topics of :func:`report_corpus`."""
FILLER = ["alpha", "beta", "gamma", "delta", "site", "team", "north", "south"]
"""The words that pad each report of :func:`report_corpus` (shared by all topics)."""


def report_corpus() -> tuple[list[str], list[str]]:
    """Twenty numbered reports per topic of :data:`TOPICS`, padded with :data:`FILLER`: (texts, ids ``{t}-{j}``)."""
    rng = random.Random(0)
    texts, ids = [], []
    for t, topic in enumerate(TOPICS):
        for j in range(20):
            texts.append(f"{topic} report {j} " + " ".join(rng.choice(FILLER) for _ in range(20)))
            ids.append(f"{t}-{j}")
    return texts, ids


def report_dataset(step: int = 2) -> EvalDataset:
    """Each query names one report (its topic and number): that report is the one relevant result."""
    queries = {f"q{t}-{j}": f"{topic} report {j}" for t, topic in enumerate(TOPICS) for j in range(0, 20, step)}
    qrels = {f"q{t}-{j}": {f"{t}-{j}": 1} for t, topic in enumerate(TOPICS) for j in range(0, 20, step)}
    return EvalDataset(name="reports", queries=queries, qrels=qrels)


BEIR_CORPUS = [
    {"_id": "d1", "title": "Solar batteries", "text": "Lithium iron phosphate batteries store solar energy."},
    {"_id": "d2", "title": "Floods", "text": "The river flooded the village in July."},
    {"_id": "d3", "title": "", "text": "Inverters convert direct current to alternating current."},
    {"_id": "d4", "title": "Training", "text": "Technicians learned to isolate circuits safely."},
]
"""The corpus of :func:`write_beir`'s dataset (one document without a title)."""
BEIR_QUERIES = [
    {"_id": "q1", "text": "which batteries store solar energy"},
    {"_id": "q2", "text": "river flood in july"},
    {"_id": "q3", "text": "a query without judgements"},
]
"""The queries of :func:`write_beir`'s dataset (q3 has no judgements)."""


def write_beir(folder: Path) -> Path:
    """A BEIR dataset in ``folder`` (created): :data:`BEIR_CORPUS`, :data:`BEIR_QUERIES` and a ``test`` split of
    qrels (q1 -> d1 graded 2; q2 -> d2 graded 1, d4 graded 0; q3 unjudged)."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in BEIR_CORPUS) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in BEIR_QUERIES) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td2\t1\nq2\td4\t0\n")
    return folder
