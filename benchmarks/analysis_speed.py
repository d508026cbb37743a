"""What each text's language detection costs the BM25 analysis: this checkout against a git revision.

    python benchmarks/analysis_speed.py                          # against the branch point, 40k zipf rows (~5 min)
    python benchmarks/analysis_speed.py --baseline 1be46c6 --zipf-rows 10000 --rounds 3

Two worker processes, one importing this checkout's ``langchain_fusion`` and one the package exported from
``--baseline`` (git archive, nothing built), take their measurements in turn, so both face the same machine load.
Each measurement is one fresh analyzer (nothing analysed yet) turning a whole corpus into term ids
(``text_token_ids``, what a BM25 build does), once with ``languages="configured"`` (no detection: the
reference) and once with the default ``languages="detected"``; ``--rounds`` rounds, medians of CPU time
(``time.process_time``, so time spent waiting for a busy core is left out). ``--build-rows`` adds whole BM25
builds (``BM25Corpus``: the term ids and the index made from them) of that many zipf rows.

Corpora: ``scale.py``'s synthetic ``zipf`` rows (made-up words of a 50,000-term Zipf vocabulary, issue 46's
regression), the first SciFact abstracts (English), JSQuAD (ja) and CMRC (zh) passages, and the 800 passages of
the parallel sets (20 languages); the real sets are read in place from ``../shared/data``. Per query, the median
``tokenize`` time of SciFact's and the parallel sets' questions with every word already analysed once, each
query new (its language not yet detected) and asked again.

It prints one markdown table: per corpus, each implementation's configured and detected seconds, the
detected / configured ratio, the current / baseline ratio of the detected time, and whether the two
implementations give the same tokens (a hash of every token of every text, in order).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "data"
KINDS = ("configured", "detected")


def worker() -> None:
    """Answer measurement requests (JSON lines on stdin) with whatever ``langchain_fusion`` this process imports."""
    from langchain_fusion import Analyzer
    from langchain_fusion.stores import languages
    from langchain_fusion.stores.local.tokens import text_token_ids

    corpora: dict[str, list[str]] = {}
    for line in sys.stdin:
        request = json.loads(line)
        texts = corpora.get(request["corpus"])
        if texts is None:
            texts = corpora[request["corpus"]] = json.loads(Path(request["path"]).read_text(encoding="utf-8"))
        analyzer = Analyzer(languages=request["kind"])
        if request["mode"] == "build":  # the whole BM25 side: term ids, then the index built from them
            from langchain_fusion.stores.local.bm25 import BM25Corpus
            from langchain_fusion.stores.settings import BM25Params

            started = time.process_time()
            bm25 = BM25Corpus(texts, analyzer, BM25Params())
            seconds = time.process_time() - started
            digest = hashlib.sha256("\x00".join(bm25.vocabulary).encode()).hexdigest()[:12]
            answer = {"seconds": seconds, "tokens": len(bm25.vocabulary), "digest": digest}
            del bm25
        elif request["mode"] == "index":
            started = time.process_time()
            vocabulary: dict[str, int] = {}
            ids, lengths = text_token_ids(analyzer, texts, vocabulary)
            seconds = time.process_time() - started
            words = list(vocabulary)
            digest = hashlib.sha256("\x00".join(words[i] for i in ids.tolist()).encode()).hexdigest()[:12]
            answer = {"seconds": seconds, "tokens": int(lengths.sum()), "digest": digest}
        else:
            for text in texts:  # every word analysed once: a query's words are mostly known
                analyzer.tokenize(text)
            forget = getattr(languages, "forget_detections", None)  # the baseline may remember nothing
            if request["mode"] == "query" and forget is not None:
                forget()  # a new query: its language not yet detected
            times = []
            for text in texts:
                started = time.process_time()
                analyzer.tokenize(text)
                times.append(time.process_time() - started)
            digest = hashlib.sha256("\x00".join(t for text in texts for t in analyzer.tokenize(text)).encode())
            answer = {"seconds": statistics.median(times), "tokens": 0, "digest": digest.hexdigest()[:12]}
        print(json.dumps(answer), flush=True)


def corpora(folder: Path, zipf_rows: int, scifact_docs: int, build_rows: int) -> dict[str, tuple[str, Path]]:
    """Each corpus's texts written as JSON under ``folder``: name -> (mode, path)."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    from scale import make_zipf_corpus

    from tests.helpers.question_sets import (
        CJK_DATA,
        PARALLEL_LANGUAGES,
        SETS,
        read_parallel,
    )

    texts: dict[str, tuple[str, list[str]]] = {}
    zipf = folder / "zipf"
    zipf.mkdir()
    make_zipf_corpus(zipf, zipf_rows, 8, 0, 10)
    rows = (zipf / "texts.txt").read_text(encoding="utf-8").splitlines()
    texts[f"zipf (synthetic words), {zipf_rows:,} rows"] = ("index", rows)
    if build_rows:
        built = folder / "built"
        built.mkdir()
        make_zipf_corpus(built, build_rows, 8, 0, 10)
        rows = (built / "texts.txt").read_text(encoding="utf-8").splitlines()
        texts[f"zipf, {build_rows:,} rows: whole BM25 build (`BM25Corpus`)"] = ("build", rows)
    scifact = SHARED / "scifact"
    if scifact.is_dir():
        from langchain_fusion.evaluation import load_beir

        dataset = load_beir(scifact, split="train")
        abstracts = [d.page_content for d in dataset.corpus[:scifact_docs]]
        texts[f"SciFact abstracts (en), {len(abstracts):,}"] = ("index", abstracts)
        queries = list(dataset.queries.values())
        texts[f"SciFact queries (en), {len(queries):,}: µs per new query"] = ("query", queries)
        texts[f"SciFact queries (en), {len(queries):,}: µs per query asked again"] = ("again", queries)
    if CJK_DATA.is_dir():
        for label, name in (("JSQuAD passages (ja)", "jsquad"), ("CMRC passages (zh)", "cmrc")):
            file, reader = SETS[name]
            passages, _ = reader(CJK_DATA / file)
            texts[f"{label}, {len(passages):,}"] = ("index", [text for _, text in passages])
    sets = [read_parallel(code) for code in PARALLEL_LANGUAGES]
    passages = [text for passages, _ in sets for _, text in passages]
    texts[f"parallel passages (20 languages), {len(passages):,}"] = ("index", passages)
    questions = [q for _, questions in sets for q, _ in questions]
    texts[f"parallel questions, {len(questions):,}: µs per new query"] = ("query", questions)
    texts[f"parallel questions, {len(questions):,}: µs per query asked again"] = ("again", questions)
    out = {}
    for number, (name, (mode, items)) in enumerate(texts.items()):
        path = folder / f"corpus{number}.json"
        path.write_text(json.dumps(items), encoding="utf-8")
        out[name] = (mode, path)
    return out


class Worker:
    """A worker process importing one implementation of the package."""

    def __init__(self, package: Path) -> None:
        env = {**os.environ, "PYTHONPATH": f"{package}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def measure(self, corpus: str, path: Path, mode: str, kind: str) -> dict[str, Any]:
        """One measurement, answered by the worker."""
        stdin: IO[str] = self.process.stdin  # type: ignore[assignment]
        stdout: IO[str] = self.process.stdout  # type: ignore[assignment]
        stdin.write(json.dumps({"corpus": corpus, "path": str(path), "mode": mode, "kind": kind}) + "\n")
        stdin.flush()
        return dict(json.loads(stdout.readline()))

    def close(self) -> None:
        """End the worker (it stops at the end of its input)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def main() -> None:
    """Measure both implementations in turn and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--baseline", default="", help="git revision to compare against (default: where this branch left main)"
    )
    parser.add_argument("--zipf-rows", type=int, default=40_000, help="rows of the zipf corpus (default 40,000)")
    parser.add_argument("--scifact-docs", type=int, default=2_000, help="SciFact abstracts (default 2,000)")
    parser.add_argument(
        "--build-rows", type=int, default=0, help="also time whole BM25 builds of this many zipf rows (default none)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each kind (default 5)")
    parser.add_argument("--only", default="", help="measure only the corpora whose name contains this text")
    parser.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._worker:
        worker()
        return
    sys.path.insert(0, str(HERE))
    from updates import export_baseline  # benchmarks/ is not a package: found by the path above

    from tests.helpers.benchmark_runs import run_header

    header = run_header("benchmarks/analysis_speed.py")
    if not args.baseline:
        args.baseline = subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True, capture_output=True, text=True
        ).stdout.strip()
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.baseline], check=True, capture_output=True, text=True
    ).stdout.strip()
    current = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    changed = ["git", "-C", str(REPO), "status", "--porcelain", "langchain_fusion"]
    if subprocess.run(changed, check=True, capture_output=True).stdout:
        current += " with uncommitted changes"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        made = corpora(folder, args.zipf_rows, args.scifact_docs, args.build_rows)
        sets = {name: corpus for name, corpus in made.items() if args.only in name}
        workers = {"baseline": Worker(export_baseline(args.baseline, folder / "baseline")), "current": Worker(REPO)}
        results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        started = time.perf_counter()
        for name, (mode, path) in sets.items():
            print(f"{name} ...", file=sys.stderr, flush=True)
            for round_ in range(args.rounds):
                order = list(workers.items())
                kinds = KINDS if round_ % 2 == 0 else KINDS[::-1]
                for implementation, worker_ in order if round_ % 2 == 0 else order[::-1]:
                    for kind in kinds:
                        result = worker_.measure(name, path, mode, kind)
                        results.setdefault((name, implementation, kind), []).append(result)
        for worker_ in workers.values():
            worker_.close()
    print("## BM25 analysis: what detecting each text's language costs\n")
    print(header)
    print(
        f"| corpus | baseline {revision}: configured (s) | detected (s) | detected / configured | "
        f"current ({current}): configured (s) | detected (s) | detected / configured | "
        "detected: current / baseline | same tokens (configured, detected) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, (mode, _) in sets.items():
        cells = [name]
        medians = {}
        for implementation in workers:
            runs = {kind: results[(name, implementation, kind)] for kind in KINDS}
            scale = 1e6 if mode in ("query", "again") else 1
            times = {kind: [r["seconds"] * scale for r in runs[kind]] for kind in KINDS}
            medians[implementation] = statistics.median(times["detected"])
            ratio = statistics.median(d / c for d, c in zip(times["detected"], times["configured"], strict=True))
            fmt = "{:.0f}" if mode in ("query", "again") else "{:.2f}"
            cells += [fmt.format(statistics.median(times[kind])) for kind in KINDS] + [f"{ratio:.2f}x"]
        cells.append(f"{medians['current'] / medians['baseline']:.2f}x")
        same = [
            "yes"
            if results[(name, "current", kind)][0]["digest"] == results[(name, "baseline", kind)][0]["digest"]
            else "no"
            for kind in KINDS
        ]
        cells.append(", ".join(same))
        print("| " + " | ".join(cells) + " |")
    print(
        f"\n{args.rounds} rounds, the implementations and the two kinds in turn (order reversed every other round); "
        "a fresh analyzer per measurement; ratios are medians of the per-round ratios. Query rows are the median µs "
        "of one `tokenize` with the query's words already analysed, its language not yet detected (new) or detected "
        f"before (asked again). Times are the worker's CPU time (`time.process_time`: on a "
        f"shared machine, waiting for a core is not counted). Total {time.perf_counter() - started:,.0f} s."
    )


if __name__ == "__main__":
    main()
