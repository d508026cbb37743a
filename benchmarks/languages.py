"""Languages and identifiers: recall on question -> passage sets, and identifiers found in any style.

Run on demand (the CJK and SciFact tables read development sets from ../shared/data, which the
repository does not ship)::

    .venv/bin/python benchmarks/languages.py                  # every table
    .venv/bin/python benchmarks/languages.py --no-vector      # BM25, speed and identifiers only (a minute)

Tables:

- Parallel sets (``benchmarks/parallel``, written for the repository): the same 40 passages, each with a
  question whose words are mostly other inflected forms of the passage's, in 20 languages. Per
  language: BM25 recall@10, its ratio to English's, and MRR@10, with the analysis of 0.4
  (``languages="configured"``: English stemming and stopwords on Latin-script words only), with
  ``languages="scripts"`` and with the default (``languages="detected"``); then recall@10 in one
  index of all 800 passages (a question's passage is the one in its language).
- Speed: the analyzer's cost at indexing (texts and tokens per second, each distinct word analysed for
  the first time; 5 runs of each, interleaved; medians, and the median of the per-run time ratios) and
  per query (its words analysed before; a new query, and one asked again whose detection is remembered),
  0.4's analysis against the default, on SciFact (English) and on the parallel passages and questions;
  the detector's one-off load in a fresh process.
- Question -> passage retrieval on JSQuAD v1.3 validation (Japanese) and CMRC 2018 trial (Chinese),
  CC BY-SA 4.0 (attribution in ../shared/data/cjk/README.md): every passage is a document; a
  question's one relevant document is the passage it was asked about. Recall@10 of BM25 with the
  analyzer of indexes saved before 0.2 (``Analyzer.LEGACY``, whole runs of characters), with 0.4's
  and with the default analyzer, and of the bundled model's vector side and default fusion.
- English: BEIR SciFact train (CC BY-NC 2.0, read from ../shared/data/scifact), nDCG@10 and
  recall@10 of BM25 and default fusion with the legacy, 0.4's and the default analyzer: the new
  default must leave English results unchanged within noise.
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
import subprocess
import sys
import time
from pathlib import Path

from langchain_core.documents import Document

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_fusion import Analyzer, BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion.stores.languages import forget_detections
from tests.helpers.benchmark_runs import chosen, run_header
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.question_sets import (
    CJK_DATA,
    PARALLEL_LANGUAGES,
    SETS,
    Pairs,
    read_cmrc,
    read_jsquad,
    read_parallel,
    recall,
)

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
TABLES = ("parallel", "speed", "cjk", "english", "identifiers")
ANALYSES = {
    "0.4": Analyzer(languages="configured"),
    "scripts": Analyzer(languages="scripts"),
    "default": Analyzer(),
}
"""The analyses compared: 0.4's (the configured language only), by script alone, and the default (detected)."""

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


def _ranks(index: FusionIndex, questions: Pairs) -> list[int | None]:
    """The rank (1-10) of each question's passage in the BM25 top 10 (None: not there)."""
    found = BM25Retriever(index=index, k=10).batch([q for q, _ in questions])
    ranks = [[d.id for d in docs] for docs in found]
    return [ids.index(gold) + 1 if gold in ids else None for ids, (_, gold) in zip(ranks, questions, strict=True)]


def _recall(ranks: list[int | None]) -> float:
    return sum(r is not None for r in ranks) / len(ranks)


def _mrr(ranks: list[int | None]) -> float:
    return sum(1 / r for r in ranks if r is not None) / len(ranks)


def parallel() -> list[str]:
    """Per language of the parallel sets: BM25 recall@10 (and its ratio to English's) and MRR@10, per analysis."""
    sets = {code: read_parallel(code) for code in PARALLEL_LANGUAGES}
    ranks: dict[str, dict[str, list[int | None]]] = {name: {} for name in ANALYSES}
    pooled: dict[str, dict[str, list[int | None]]] = {name: {} for name in ANALYSES}
    for name, analyzer in ANALYSES.items():
        everything = []
        for code, (passages, questions) in sets.items():
            docs = [Document(id=i, page_content=text) for i, text in passages]
            everything += [Document(id=f"{code}:{i}", page_content=text) for i, text in passages]
            index = FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=analyzer)
            ranks[name][code] = _ranks(index, questions)
        index = FusionIndex.from_documents(everything, HashingEmbeddings(16), analyzer=analyzer)
        for code, (_, questions) in sets.items():
            pooled[name][code] = _ranks(index, [(q, f"{code}:{gold}") for q, gold in questions])
    rows = [
        "| language | recall@10, 0.4 | scripts | default | x English, 0.4 | default | MRR@10, 0.4 | scripts "
        "| default | one index of all: recall@10, 0.4 | default |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    english = {name: _recall(ranks[name]["en"]) for name in ANALYSES}
    ratios: dict[str, list[float]] = {name: [] for name in ANALYSES}
    for code, language in PARALLEL_LANGUAGES.items():
        recalls = {name: _recall(ranks[name][code]) for name in ANALYSES}
        for name in ANALYSES:
            ratios[name].append(recalls[name] / english[name])
        cells = [
            *(f"{recalls[name]:.3f}" for name in ANALYSES),
            *(f"{recalls[name] / english[name]:.3f}" for name in ("0.4", "default")),
            *(f"{_mrr(ranks[name][code]):.3f}" for name in ANALYSES),
            *(f"{_recall(pooled[name][code]):.3f}" for name in ("0.4", "default")),
        ]
        rows.append(f"| {language} ({code}) | " + " | ".join(cells) + " |")
    for name in ANALYSES:
        below = sum(r < 0.95 for r in ratios[name])
        rows.append(
            f"\n- {name}: lowest ratio to English {min(ratios[name]):.3f}; languages below 0.95x: {below} of "
            f"{len(ratios[name])}; mean MRR@10 {statistics.fmean(_mrr(r) for r in ranks[name].values()):.3f}"
        )
    return rows


def _costs(texts: list[str], repeat: int = 5) -> tuple[list[float], list[float], int, int]:
    """Seconds to turn ``texts`` into term ids with fresh copies of 0.4's and the default analysis.

    Every word is new to each copy; the two run interleaved ``repeat`` times, so a shared machine's load hits
    both alike. Also each one's token count.
    """
    from langchain_fusion.stores.local.tokens import text_token_ids

    times: dict[str, list[float]] = {"0.4": [], "default": []}
    tokens = {}
    for _ in range(repeat):
        for name, runs in times.items():
            fresh = Analyzer.model_validate(ANALYSES[name].model_dump())  # nothing analysed yet (a copy shares memos)
            started = time.perf_counter()
            _, lengths = text_token_ids(fresh, texts, {})
            runs.append(time.perf_counter() - started)
            tokens[name] = int(lengths.sum())
    return times["0.4"], times["default"], tokens["0.4"], tokens["default"]


def _query_cost(analyzer: Analyzer, queries: list[str], again: bool = False) -> float:
    """Median microseconds of ``tokenize`` per query, each query's words already analysed once.

    The query is new (its language not yet detected), or with ``again`` asked again (its detection remembered).
    """
    for query in queries:
        analyzer.tokenize(query)
    if not again:
        forget_detections()
    times = []
    for query in queries:
        started = time.perf_counter()
        analyzer.tokenize(query)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def _detector_load() -> float:
    """Seconds a fresh process takes to load the language detector and detect one text."""
    code = (
        "import time; from langchain_fusion.stores.languages import detect; t = time.perf_counter(); "
        "detect('the first text'); print(time.perf_counter() - t)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


def speed() -> list[str]:
    """The analyzer's cost at indexing and per query: 0.4's analysis against the default's."""
    sets = [read_parallel(code) for code in PARALLEL_LANGUAGES]
    corpora = {"parallel passages (20 languages)": [text for passages, _ in sets for _, text in passages]}
    queries = {"parallel questions": [q for _, questions in sets for q, _ in questions]}
    if SCIFACT.is_dir():
        from langchain_fusion.evaluation import load_beir

        dataset = load_beir(SCIFACT, split="train")
        corpora = {"SciFact abstracts (English)": [d.page_content for d in dataset.corpus], **corpora}
        queries = {"SciFact queries": list(dataset.queries.values()), **queries}
    rows = [
        "| indexing | texts | 0.4: texts/s | tokens/s | default: texts/s | tokens/s | default / 0.4 time (median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, texts in corpora.items():
        befores, afters, before_tokens, after_tokens = _costs(texts)
        before, after = statistics.median(befores), statistics.median(afters)
        ratio = statistics.median(a / b for a, b in zip(afters, befores, strict=True))
        rows.append(
            f"| {name} | {len(texts):,} | {len(texts) / before:,.0f} | {before_tokens / before:,.0f} | "
            f"{len(texts) / after:,.0f} | {after_tokens / after:,.0f} | {ratio:.2f} |"
        )
    if SCIFACT.is_dir():
        docs = [Document(id=d.id, page_content=d.page_content) for d in dataset.corpus]
        builds: dict[str, list[float]] = {"0.4": [], "default": []}
        for _ in range(3):
            for name, runs in builds.items():
                started = time.perf_counter()
                analyzer = Analyzer.model_validate(ANALYSES[name].model_dump())
                FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=analyzer)
                runs.append(time.perf_counter() - started)
        ratio = statistics.median(a / b for a, b in zip(builds["default"], builds["0.4"], strict=True))
        rows.append(
            f"| whole build, SciFact (`from_documents`, hashing embeddings: no model) | {len(docs):,} | "
            f"{len(docs) / statistics.median(builds['0.4']):,.0f} | - | "
            f"{len(docs) / statistics.median(builds['default']):,.0f} | - | {ratio:.2f} |"
        )
    rows += [
        "",
        "| per query | queries | 0.4: tokenize (µs, median) | default | default - 0.4 | default, asked again |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, texts in queries.items():
        before_us = _query_cost(ANALYSES["0.4"], texts)
        after_us = _query_cost(ANALYSES["default"], texts)
        again_us = _query_cost(ANALYSES["default"], texts, again=True)
        rows.append(
            f"| {name} | {len(texts):,} | {before_us:.0f} | {after_us:.0f} | {after_us - before_us:+.0f} | "
            f"{again_us:.0f} |"
        )
    rows.append(f"\nThe detector's load and first detection in a fresh process: {_detector_load():.2f} s (once).")
    return rows


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
    header = (
        "| set | passages | questions | BM25, legacy analyzer | BM25, 0.4 | BM25, default | vector | fusion (default) |"
    )
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, (passages, questions) in (("JSQuAD (ja)", jsquad()), ("CMRC 2018 (zh)", cmrc())):
        docs = [Document(id=i, page_content=text) for i, text in passages]
        legacy = FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=Analyzer(**Analyzer.LEGACY))
        index = FusionIndex.from_documents(docs, embeddings)
        before = FusionIndex.from_documents(docs, HashingEmbeddings(16), analyzer=ANALYSES["0.4"])
        cells = [
            recall(BM25Retriever(index=legacy, k=10), questions),
            recall(BM25Retriever(index=before, k=10), questions),
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
    analyzers = (
        ("legacy analyzer", Analyzer(**Analyzer.LEGACY)),
        ("0.4 analyzer", ANALYSES["0.4"]),
        ("default analyzer", Analyzer()),
    )
    for label, analyzer in analyzers:
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
    for label, analyzer in (("legacy", Analyzer(**Analyzer.LEGACY)), ("0.4", ANALYSES["0.4"]), ("default", Analyzer())):
        index = FusionIndex.from_documents(
            [Document(id=n, page_content=text) for n, text in docs.items()], HashingEmbeddings(16), analyzer=analyzer
        )
        bm25 = BM25Retriever(index=index, k=5)
        written, styled = recall(bm25, as_written), recall(bm25, other)
        rows.append(f"| {label} | {len(names):,} | {written:.3f} | {styled:.3f} | {len(other):,} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-vector", action="store_true", help="skip the bundled model (BM25, speed and identifiers only)"
    )
    parser.add_argument(
        "--tables", default=",".join(TABLES), help="comma-separated tables to print (default: %(default)s)"
    )
    args = parser.parse_args()
    tables = chosen(parser, args.tables, TABLES)
    print(run_header("benchmarks/languages.py"))
    started = time.perf_counter()
    if "parallel" in tables:
        print("\n".join(parallel()) + "\n")
    if "speed" in tables:
        print("\n".join(speed()) + "\n")
    if "cjk" in tables:
        print("\n".join(question_sets(not args.no_vector)) + "\n")
    if "english" in tables and not args.no_vector:
        print("\n".join(english()) + "\n")
    if "identifiers" in tables:
        print("\n".join(identifiers()))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
