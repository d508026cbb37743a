"""`langchain-fusion serve` under concurrent clients: throughput, latency, server CPU per request.

Serves an index of ``data/`` (the bundled model; indexed into a temporary folder unless
``--index`` is given) and, for each number of clients, keeps that many clients posting the
sample questions to ``/retriever/invoke`` for ``--seconds``. Each client is a thread with its
own keep-alive connection. Reported per row: requests/s, p50/p99 latency, errors, and the
server's CPU time per request (user + system of the server process, all its threads, from
``/proc``), next to the baseline measured in the same conditions: the CPU of one
``retriever.invoke`` on the main thread of a plain process (the same pipeline the server builds).

With ``--neighbour`` (the default runs both) a CPU-bound process spins beside the server for the
whole run, as on a shared machine. Needs Linux (``/proc``) and the ``local`` and ``serve`` extras.

    python benchmarks/serve_load.py                        # 1, 16 and 64 clients, 20 s each, quiet and busy
    python benchmarks/serve_load.py --clients 16 --seconds 10 --conditions quiet
    python benchmarks/serve_load.py --server-env OPENBLAS_NUM_THREADS=1   # compare an environment
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
LOCAL = ("--embeddings", "local")

# One process, the pipeline `serve INDEX --embeddings local` builds, queried on its main thread.
BASELINE = r"""
import json, sys, time
from langchain_fusion.pipeline import PipelineSpec, build
from langchain_fusion.models.embeddings import resolve_embeddings
queries = json.loads(sys.argv[2])
retriever = build(PipelineSpec(index=sys.argv[1], embeddings=resolve_embeddings("local"))).retriever
for query in queries[:20]:
    retriever.invoke(query)
cpu, wall, n = time.process_time(), time.perf_counter(), 0
while n < len(queries) * 4 or time.perf_counter() - wall < 5:
    retriever.invoke(queries[n % len(queries)])
    n += 1
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_ms": cpu * 1000 / n, "wall_ms": wall * 1000 / n}))
"""


def _questions() -> list[str]:
    data = json.loads((REPO / "data" / "queries.json").read_text(encoding="utf-8"))
    items = data if isinstance(data, list) else data.get("queries", [])
    questions = [item["query"] if isinstance(item, dict) else str(item) for item in items]
    return [q for q in questions if q]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15 of stat(5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _neighbour(on: bool) -> Iterator[None]:
    """A CPU-bound process beside the server while inside, when ``on``."""
    if not on:
        yield
        return
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


@contextlib.contextmanager
def _server(index: Path, env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """A running ``langchain-fusion serve``: (pid, port)."""
    port = _free_port()
    command = [sys.executable, "-m", "langchain_fusion.cli", "serve", str(index), *LOCAL, "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise SystemExit(f"serve exited with {process.returncode}: {process.stderr.read()[-2000:]}")
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("serve did not answer /health within 180 s")
            time.sleep(0.5)
        yield process.pid, port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _load(port: int, clients: int, seconds: float, questions: list[str]) -> dict[str, float]:
    """``clients`` threads posting questions for ``seconds``: latencies and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        n = offset
        while time.monotonic() < stop:
            body = json.dumps({"input": questions[n % len(questions)]})
            n += clients
            start = time.perf_counter()
            try:
                connection.request("POST", "/retriever/invoke", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = response.read()
                ok = response.status == 200 and bool(json.loads(payload)["output"])
            except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
                ok, payload = False, repr(exc).encode()
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            elapsed = time.perf_counter() - start
            with lock:
                if ok:
                    latencies.append(elapsed)
                else:
                    errors.append(payload[:200].decode(errors="replace"))
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    done = len(latencies)
    return {
        "requests": done,
        "errors": len(errors),
        "rps": done / seconds,
        "p50_ms": statistics.median(latencies) * 1000 if done else float("nan"),
        "p99_ms": latencies[min(done - 1, int(done * 0.99))] * 1000 if done else float("nan"),
        "first_error": errors[0] if errors else "",
    }


def _baseline(index: Path, questions: list[str], env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", BASELINE, str(index), json.dumps(questions)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, help="an index folder (default: index data/ into a temporary folder)")
    parser.add_argument("--clients", default="1,16,64", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="load per client count")
    parser.add_argument("--conditions", default="quiet,neighbour", help="quiet, neighbour, or both (comma-separated)")
    parser.add_argument("--server-env", action="append", default=[], help="KEY=VALUE for the server and baseline")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.update(dict(item.split("=", 1) for item in args.server_env))
    questions = _questions()
    clients = [int(c) for c in args.clients.split(",")]
    conditions = [c.strip() for c in args.conditions.split(",")]

    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        index = args.index
        if index is None:
            index = Path(tmp) / "index"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "langchain_fusion.cli",
                    "index",
                    str(REPO / "data"),
                    "--out",
                    str(index),
                    *LOCAL,
                ],
                env=env,
                check=True,
                capture_output=True,
            )
        rows = []
        for condition in conditions:
            with _neighbour(condition == "neighbour"):
                base = _baseline(index, questions, env)
                with _server(index, env) as (pid, port):
                    _load(port, 4, 3, questions)  # warm-up: first requests load lazily
                    for count in clients:
                        cpu = _cpu_seconds(pid)
                        result = _load(port, count, args.seconds, questions)
                        server_ms = (_cpu_seconds(pid) - cpu) * 1000 / max(result["requests"], 1)
                        rows.append((condition, count, result, server_ms, base))
                        print(f"{condition} {count} clients: {result['rps']:.1f} req/s", file=sys.stderr)

    load = os.getloadavg()
    print(f"`serve` on data/ (bundled model), {args.seconds:g} s per row, {os.cpu_count()} cores")
    print(f"load average at the end {load[0]:.1f}; server env: {' '.join(args.server_env) or 'default'}\n")
    print(
        "| condition | clients | requests/s | p50 ms | p99 ms | errors | server CPU ms/request | "
        "plain invoke CPU ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for condition, count, result, server_ms, base in rows:
        print(
            f"| {condition} | {count} | {result['rps']:.1f} | {result['p50_ms']:.0f} | {result['p99_ms']:.0f} | "
            f"{result['errors']} | {server_ms:.1f} | {base['cpu_ms']:.1f} | {server_ms / base['cpu_ms']:.2f}x |"
        )
    failures = [r for r in rows if r[2]["errors"]]
    for condition, count, result, _, _ in failures:
        print(f"\n{condition}, {count} clients, first error: {result['first_error']}")


if __name__ == "__main__":
    main()
