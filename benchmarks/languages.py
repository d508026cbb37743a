"""Languages and identifiers: recall on question -> passage sets, and identifiers found in any style.

Run on demand (it reads the development sets from ../shared/data, which the repository does not ship)::

    .venv/bin/python benchmarks/languages.py                  # every table
    .venv/bin/python benchmarks/languages.py --no-vector      # BM25 and identifiers only (seconds)

Tables:

- Question -> passage retrieval on JSQuAD v1.3 validation (Japanese) and CMRC 2018 trial (Chinese),
  CC BY-SA 4.0 (attribution in ../shared/data/cjk/README.md): every passage is a document; a
  question's one relevant document is the passage it was asked about. Recall@10 of BM25 with the
  analyzer of indexes saved before 0.2 (``Analyzer.LEGACY``, whole runs of characters) and with
  the default analyzer (character bigrams), and of the bundled model's vector side and default
  fusion over the default analyzer.
- English: BEIR SciFact train (CC BY-NC 2.0, read from ../shared/data/scifact), nDCG@10 and
  recall@10 of BM25 and default fusion with the legacy and the default analyzer: the new default
  must leave English results unchanged within noise.
- Identifiers: the public functions and classes of 60 standard-library modules, one document each
  (its qualified name and the first paragraph of its docstring). A name asked as written, and in
  the other style (``get_logger`` for ``getLogger``, ``http_status`` for ``HTTPStatus``, camelCase
  for snake_case): is its document in the BM25 top 5?

The sets were used to develop the analyzer, not to tune it: other splits and languages are held
out for evaluation.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from langchain_core.documents import Document

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_fusion import Analyzer, BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.question_sets import CJK_DATA, SETS, Pairs, read_cmrc, read_jsquad, recall

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
TABLES = ("cjk", "english", "identifiers")

MODULES = [
    "os",
    "os.path",
    "json",
    "re",
    "logging",
    "http",
    "http.client",
    "urllib.parse",
    "collections",
    "itertools",
    "functools",
    "pathlib",
    "shutil",
    "subprocess",
    "threading",
    "asyncio",
    "socket",
    "ssl",
    "datetime",
    "time",
    "random",
    "math",
    "statistics",
    "string",
    "textwrap",
    "unicodedata",
    "csv",
    "sqlite3",
    "zipfile",
    "tarfile",
    "gzip",
    "hashlib",
    "hmac",
    "secrets",
    "base64",
    "binascii",
    "struct",
    "array",
    "heapq",
    "bisect",
    "copy",
    "pickle",
    "shelve",
    "io",
    "tempfile",
    "glob",
    "fnmatch",
    "argparse",
    "getpass",
    "platform",
    "sys",
    "traceback",
    "inspect",
    "ast",
    "dis",
    "types",
    "typing",
    "enum",
]


def jsquad() -> tuple[Pairs, Pairs]:
    """(passage id, text) and (question, passage id) of JSQuAD v1.3 validation (answerable questions)."""
    return read_jsquad(CJK_DATA / SETS["jsquad"][0])


def cmrc() -> tuple[Pairs, Pairs]:
    """(passage id, text) and (question, passage id) of CMRC 2018 trial."""
    return read_cmrc(CJK_DATA / SETS["cmrc"][0])


def question_sets(with_vector: bool) -> list[str]:
    from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings

    embeddings = (
        CachedEmbeddings(LocalEmbeddings(), Path.home() / ".cache" / "langchain-fusion" / "embeddings")
        if with_vector
        else HashingEmbeddings(16)
    )
    header = "| set | passages | questions | BM25, legacy analyzer | BM25, default | vector | fusion (default) |"
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|"]
    for name, (passages, questions) in (("JSQuAD (ja)", jsquad()), ("CMRC 2018 (zh)", cmrc())):
        docs = [Document(id=i, page_content=text) for i, text in passages]
        legacy = FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=Analyzer(**Analyzer.LEGACY))
        index = FusionIndex.from_documents(docs, embeddings)
        cells = [
            recall(BM25Retriever(index=legacy, k=10), questions),
            recall(BM25Retriever(index=index, k=10), questions),
        ]
        if with_vector:
            cells += [
                recall(VectorRetriever(index=index, k=10), questions),
                recall(FusionRetriever(index=index, k=10), questions),
            ]
        shown = " | ".join(f"{c:.3f}" for c in cells) + (" | - | -" if not with_vector else "")
        rows.append(f"| {name} | {len(passages):,} | {len(questions):,} | {shown} |")
    return rows


def _ndcg10(ranked: list[str], relevance: dict[str, int]) -> float:
    gains = sum(relevance.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:10]))
    ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(sorted(relevance.values(), reverse=True)[:10]))
    return gains / ideal


def english() -> list[str]:
    """SciFact train: BM25 and default fusion, legacy against default analyzer (bundled model, cached vectors)."""
    from langchain_fusion.evaluation import load_beir
    from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings

    dataset = load_beir(SCIFACT, split="train")
    embeddings = CachedEmbeddings(LocalEmbeddings(), Path.home() / ".cache" / "langchain-fusion" / "embeddings")
    ids = list(dataset.queries)
    rows = [
        "| SciFact train (en) | BM25 nDCG@10 | BM25 recall@10 | fusion nDCG@10 | fusion recall@10 |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, analyzer in (("legacy analyzer", Analyzer(**Analyzer.LEGACY)), ("default analyzer", Analyzer())):
        index = FusionIndex.from_documents(dataset.corpus, embeddings, analyzer=analyzer)
        cells = []
        for retriever in (BM25Retriever(index=index, k=10), FusionRetriever(index=index, k=10)):
            found = retriever.batch([dataset.queries[q] for q in ids])
            relevant = [{d for d, g in dataset.qrels[q].items() if g > 0} for q in ids]
            ndcg = statistics.fmean(
                _ndcg10([d.id or "" for d in f], dataset.qrels[q]) for f, q in zip(found, ids, strict=True)
            )
            hits = statistics.fmean(len(r & {d.id for d in f}) / len(r) for f, r in zip(found, relevant, strict=True))
            cells += [ndcg, hits]
        rows.append(f"| {label} ({len(ids)} queries) | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    return rows


def _words(name: str) -> list[str]:
    parts = [
        p
        for segment in name.split("_")
        if segment
        for p in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", segment)
    ]
    return [p.lower() for p in parts]


def other_style(name: str) -> str | None:
    """``getLogger`` -> ``get_logger``, ``get_logger`` -> ``getLogger``; None for a one-word name."""
    words = _words(name)
    if len(words) < 2:
        return None
    if "_" in name or name.islower():
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return "_".join(words)


def identifier_documents() -> dict[str, str]:
    """Qualified name -> its document (the name, then the first paragraph of its docstring)."""
    docs: dict[str, str] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for attr in getattr(module, "__all__", None) or [a for a in dir(module) if not a.startswith("_")]:
            obj = getattr(module, attr, None)
            if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj):
                doc = (inspect.getdoc(obj) or "").split("\n\n")[0]
                docs.setdefault(f"{module_name}.{attr}", f"{module_name}.{attr}\n{attr}: {doc}")
    return docs


def identifiers() -> list[str]:
    docs = identifier_documents()
    names = list(docs)
    as_written = [(n.rsplit(".", 1)[1], n) for n in names]
    other = [(q, n) for q, n in ((other_style(n.rsplit(".", 1)[1]), n) for n in names) if q]
    rows = [
        "| analyzer | names | found as written (top 5) | in the other style | other-style names |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, analyzer in (("legacy", Analyzer(**Analyzer.LEGACY)), ("default", Analyzer())):
        index = FusionIndex.from_documents(
            [Document(id=n, page_content=text) for n, text in docs.items()], HashingEmbeddings(16), analyzer=analyzer
        )
        bm25 = BM25Retriever(index=index, k=5)
        written, styled = recall(bm25, as_written), recall(bm25, other)
        rows.append(f"| {label} | {len(names):,} | {written:.3f} | {styled:.3f} | {len(other):,} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-vector", action="store_true", help="skip the bundled model (BM25 and identifiers only)")
    parser.add_argument(
        "--tables", default=",".join(TABLES), help="comma-separated tables to print (default: %(default)s)"
    )
    args = parser.parse_args()
    tables = args.tables.split(",")
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        parser.error(f"unknown tables {unknown}; choose from {', '.join(TABLES)}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"- command: `python benchmarks/languages.py {' '.join(sys.argv[1:])}`".rstrip("` ") + "`")
    print(f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}; load average at start: {load}\n")
    started = time.perf_counter()
    if "cjk" in tables:
        print("\n".join(question_sets(not args.no_vector)) + "\n")
    if "english" in tables and not args.no_vector:
        print("\n".join(english()) + "\n")
    if "identifiers" in tables:
        print("\n".join(identifiers()))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
