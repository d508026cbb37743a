"""BLAS runs on one thread per process, set once: a query costs the same CPU on any thread, under any load.

Changing BLAS's thread limit around each query (0.2 and earlier) made a query embedded on a
server's worker thread cost ten times its CPU on a main thread (benchmarks/serve_load.py). The
policy is now set once: when the bundled model loads or a batch first scores on a small machine, and when a
server is made.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from langchain_fusion import threads
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.models import bundled_encoder
from langchain_fusion.models.bundled_encoder import BundledEncoder
from langchain_fusion.threads import one_blas_thread

threadpoolctl = pytest.importorskip("threadpoolctl")
if importlib.util.find_spec("openvino") is None:  # found, not imported: the fast tier runs no test that loads it
    pytest.skip("could not find openvino: the local extra is not installed", allow_module_level=True)
QUERIES = [f"query {i}: why did the batteries at site {i} survive the flood?" for i in range(24)]


def blas_threads() -> set[int]:
    """The thread counts of the process-wide BLAS pools (an OpenMP-threaded BLAS, FAISS's, counts per thread)."""
    return {
        info["num_threads"]
        for info in threadpoolctl.threadpool_info()
        if info["user_api"] == "blas" and info.get("threading_layer") != "openmp"
    }


def _release_control() -> None:
    """Let this thread set OpenBLAS's limit (threadpoolctl 3.8+ lets only one thread do it)."""
    release = getattr(threadpoolctl.OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


@pytest.fixture
def blas_at_two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """BLAS at two threads and the policy not applied yet; both as they were afterwards. Yields the controllers."""
    controllers = [c for c in threadpoolctl.ThreadpoolController().lib_controllers if c.user_api == "blas"]
    if not controllers:
        pytest.skip("no BLAS library that threadpoolctl can control is loaded")
    before = [c.num_threads for c in controllers]
    _release_control()
    for controller in controllers:
        controller.set_num_threads(2)
    _release_control()
    if blas_threads() != {2}:
        pytest.skip("BLAS's thread count cannot be set in this process")
    monkeypatch.setattr(threads._BlasPolicy, "limited", False)
    yield controllers
    _release_control()
    for controller, count in zip(controllers, before, strict=True):
        controller.set_num_threads(count)
    _release_control()


@pytest.fixture
def limit_calls(blas_at_two_threads: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every BLAS thread limit set from now on (its count), by anyone."""
    calls: list[int] = []
    for kind in {type(c) for c in blas_at_two_threads}:
        original = kind.set_num_threads

        def spy(self: Any, num_threads: int, original: Any = original) -> Any:
            calls.append(num_threads)
            return original(self, num_threads)

        monkeypatch.setattr(kind, "set_num_threads", spy)
    return calls


@pytest.mark.local_model
class TestBundledModel:
    def test_on_a_small_machine_loading_limits_blas_once(
        self, blas_at_two_threads: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(bundled_encoder, "usable_cores", lambda: 2)
        BundledEncoder.load()
        assert blas_threads() == {1}

    def test_on_a_larger_machine_loading_leaves_blas_alone(
        self, blas_at_two_threads: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(bundled_encoder, "usable_cores", lambda: 8)
        BundledEncoder.load().encode(QUERIES[:2])
        assert blas_threads() == {2}

    @pytest.mark.parametrize("cores", [2, 8])
    def test_queries_on_many_threads_never_change_the_limit(
        self, cores: int, limit_calls: list[int], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(bundled_encoder, "usable_cores", lambda: cores)
        encoder = BundledEncoder.load()
        limit_calls.clear()  # what loading did is the policy; queries must not touch it
        expected = blas_threads()
        seen: list[set[int]] = []

        def query(text: str) -> np.ndarray:
            seen.append(blas_threads())
            return encoder.encode([text])[0]

        with ThreadPoolExecutor(8) as pool:
            vectors = list(pool.map(query, QUERIES))
        assert limit_calls == []
        assert all(observed == expected for observed in seen)
        np.testing.assert_allclose(np.stack(vectors), encoder.encode(QUERIES), atol=1e-5)


class TestPolicy:
    def test_set_once(self, limit_calls: list[int]) -> None:
        assert one_blas_thread() is True
        assert blas_threads() == {1}
        first = len(limit_calls)
        assert first > 0
        assert one_blas_thread() is True
        assert len(limit_calls) == first

    def test_set_from_a_worker_thread_leaves_the_limit_settable(self, blas_at_two_threads: list[Any]) -> None:
        done, finish = threading.Event(), threading.Event()

        def worker() -> None:
            one_blas_thread()
            done.set()
            finish.wait(10)  # still alive while the main thread sets a limit

        thread = threading.Thread(target=worker)
        thread.start()
        try:
            done.wait(10)
            assert blas_threads() == {1}
            with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
                assert blas_threads() == {2}
        finally:
            finish.set()
            thread.join()

    def test_without_threadpoolctl_nothing_changes(
        self, blas_at_two_threads: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(__import__("sys").modules, "threadpoolctl", None)
        assert one_blas_thread() is False
        assert blas_threads() == {2}


class TestServers:
    """A server's parallelism is its clients: making one limits BLAS to one thread, on any machine."""

    @pytest.fixture
    def index(self, animal_index: FusionIndex) -> FusionIndex:
        return animal_index

    def test_langserve_app(self, blas_at_two_threads: list[Any], index: FusionIndex) -> None:
        pytest.importorskip("langserve")
        from langchain_fusion.server import create_app

        create_app(index)
        assert blas_threads() == {1}

    def test_mcp_server(self, blas_at_two_threads: list[Any], index: FusionIndex) -> None:
        pytest.importorskip("mcp")
        from langchain_fusion.mcp import build_mcp_server

        build_mcp_server(index, log_level="WARNING")
        assert blas_threads() == {1}


class TestBatchPass:
    """A batch's pass multiplies every query with every vector: on two cores it runs BLAS on one thread."""

    def _batch(self, index: FusionIndex) -> list[list[str]]:
        retriever = index.as_retriever(k=2, fetch_k=4)
        return [[doc.id or "" for doc in docs] for docs in retriever.batch(["cat mat", "dog bone", "fish"])]

    def test_on_a_small_machine_the_first_pass_limits_blas(
        self, blas_at_two_threads: list[Any], animal_index: FusionIndex, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(threads, "usable_cores", lambda: 2)
        found = self._batch(animal_index)
        assert blas_threads() == {1}
        assert self._batch(animal_index) == found  # the blocks shared among threads: the same results

    def test_on_a_larger_machine_the_pass_leaves_blas_alone(
        self, blas_at_two_threads: list[Any], animal_index: FusionIndex, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(threads, "usable_cores", lambda: 8)
        self._batch(animal_index)
        assert blas_threads() == {2}
