"""How long a one-shot ``langchain-fusion query`` takes, and where the time goes.

Runs the command in fresh processes (as a user does), with the bundled model (its int8 weights on
OpenVINO, no torch), and prints the median wall time of each phase over ``--runs`` runs. Needs the
``local`` extra.

    python benchmarks/cli_startup.py [--index FOLDER] [--runs 5]

Without ``--index`` it indexes ``data/`` into a temporary folder first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERY = "Why did the batteries come through the flood without harm?"

# One process = one CLI call; phases are timed inside it with perf_counter.
PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
from langchain_fusion.index.opening import open_index
from langchain_fusion.models.embeddings import resolve_embeddings
t1 = time.perf_counter()
index = open_index(sys.argv[1], resolve_embeddings(None))
t2 = time.perf_counter()
retriever = index.as_retriever(k=4)
docs = retriever.invoke(sys.argv[3])
t3 = time.perf_counter()
docs = retriever.invoke(sys.argv[3] + " again")
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "open index (+ model)": t2 - t1, "first query": t3 - t2, "next query": t4 - t3}))
"""

# The whole command, as `langchain-fusion query INDEX QUERY -k 4` runs it.
WHOLE = r"""
import sys
from langchain_fusion.cli.app import main
sys.exit(main(["query", sys.argv[1], sys.argv[3], "-k", "4"]))
"""


def _seconds(script: str, *args: str) -> tuple[float, str]:
    """Wall time of one fresh process running ``script`` and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    return time.perf_counter() - start, done.stdout


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, help="a saved index made with the local model (default: index data/)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index
        if index is None:
            index = Path(tmp) / "index"
            cli = [sys.executable, "-m", "langchain_fusion.cli"]
            subprocess.run([*cli, "index", str(REPO / "data"), "--out", str(index), "--quiet"], check=True)
        phases = [json.loads(_seconds(PROBE, str(index), "bundled", QUERY)[1]) for _ in range(args.runs)]
        whole = statistics.median(_seconds(WHOLE, str(index), "bundled", QUERY)[0] for _ in range(args.runs))
    median = {key: statistics.median(p[key] for p in phases) for key in phases[0]}
    print(f"median of {args.runs} fresh processes, seconds")
    print("| query embedding | " + " | ".join(median) + " | whole `langchain-fusion query` |")
    print("|---|" + "---:|" * (len(median) + 1))
    print("| bundled model (OpenVINO, now) | " + " | ".join(f"{v:.2f}" for v in median.values()) + f" | {whole:.2f} |")


if __name__ == "__main__":
    main()
