"""Shared fixtures (deterministic embeddings, small corpora, the sample indexed) and the suite's hooks.

Test modules import helpers from :mod:`tests.helpers`, never from here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex
from langchain_fusion.models import embeddings as embedding_models
from tests.helpers import tiers
from tests.helpers.cli import CliRun
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.paths import DATA, SAMPLE_MD
from tests.helpers.shared_vectors import locked, run_folder, shared_model_vectors


@pytest.hookimpl(tryfirst=True)  # before the -m expression deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The markers that follow from fixtures (see tests/helpers/tiers.py), then the notebooks first.

    The notebooks first: each runs a tutorial in a fresh kernel, the longest tests of the suite.

    pytest-xdist hands out tests in runs of neighbours as workers free up; at their place in the
    collection the notebooks came last to one worker while the other had nothing left. First, they
    run while the short tests fill the other workers, and the end of the run stays even. The rest
    keep their order (the sort is stable).
    """
    tiers.mark_by_fixtures(items)
    items.sort(key=lambda item: item.get_closest_marker("notebook") is None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Each test runs (setup, call, teardown) under :func:`tiers.tier_guards`: no bundled model or subprocess
    unless it is marked for them."""
    with tiers.tier_guards(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A test that used the bundled model or a subprocess without its marker fails, even if the error was caught."""
    report = yield
    tiers.fail_on_violations(item, report)
    return report


class _QuickPolls:
    """The ``time`` module, but for sleeps capped at :data:`POLL_SECONDS` (see :func:`quick_milvus_polls`)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def sleep(self, seconds: float) -> None:
        self._real.sleep(min(seconds, POLL_SECONDS))


POLL_SECONDS = 0.02


@pytest.fixture(autouse=True, scope="session")
def quick_milvus_polls() -> Iterator[None]:
    """pymilvus's client polls Milvus every 20 ms instead of sleeping 0.2-0.5 s before each look.

    It waits that long for each index it builds (two per collection), each load and each flush: with a
    new collection per store-contract test, most of the Milvus tests' time. It still waits until Milvus
    says the index is built (the collection loaded, the data flushed): only the pauses between its looks
    are shorter.
    """
    try:
        from pymilvus.client import grpc_handler
    except ImportError:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grpc_handler, "time", _QuickPolls(grpc_handler.time))
        yield


def _no_fsync(fd: int) -> None:
    """``os.fsync`` in tests: the file (or folder) is written; only the wait for the disk is skipped."""


@pytest.fixture(autouse=True, scope="session")
def no_fsync() -> Iterator[None]:
    """Saves skip the wait for the disk (``os.fsync``), as git's test suite does (``GIT_TEST_FSYNC=0``).

    What an fsync buys shows only after a power cut, which no test makes: a killed process loses
    nothing in the page cache. Every save still writes its staging folder, locks, swaps and cleans
    up as it does for users. On this machine's disk the fast tier made about 9,000 fsyncs, 10 to 40 s
    of waiting. That a save fsyncs each file and folder before the swap, and the folder holding it
    after, is tested on its own (``TestDurability`` in tests/test_crash_safety.py).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", _no_fsync)
        yield


class _OwnHome:
    """``subprocess`` for milvus_lite.server: each Milvus Lite server it starts gets a HOME of its own."""

    def __init__(self, real: Any, homes: pytest.TempPathFactory) -> None:
        self._real = real
        self._homes = homes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Popen(self, *args: Any, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
        env = dict(os.environ if env is None else env)
        env["HOME"] = str(self._homes.mktemp("milvus-home"))
        return self._real.Popen(*args, env=env, **kwargs)


@pytest.fixture(autouse=True, scope="session")
def milvus_lite_servers_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each Milvus Lite server keeps its mmap folder under a HOME of its own.

    Milvus Lite 2.5.1 empties ``$HOME/.cache/milvus`` when a server starts and again when it
    stops: a server starting while another starts or stops (two xdist workers) can fail its
    first collection with "Mmap manager has not been init" (pymilvus issue 2981).
    """
    try:
        from milvus_lite import server  # its pkg_resources warning is ignored by name (pyproject's filterwarnings)
    except ImportError:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server, "subprocess", _OwnHome(server.subprocess, tmp_path_factory))
        yield


def pytest_configure(config: pytest.Config) -> None:
    """On a whole-suite run, the second xdist worker imports the bundled model's stack before it collects.

    In a new virtual environment the first import of a module compiles it: both workers collect
    the same test modules at once (compiling their imports twice, side by side) and both later
    import torch for their model tests. Importing torch first on the second worker while the first
    collects shares the compiling out (about 15 s of CPU each): each then finds the other's bytecode.
    Every worker of a whole-suite run imports torch anyway.
    """
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS and not (
        config.option.keyword or config.option.markexpr
    )
    if whole_suite and os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
        with contextlib.suppress(ImportError):
            import sentence_transformers  # noqa: F401


@pytest.fixture
def embeddings() -> HashingEmbeddings:
    return HashingEmbeddings()


@pytest.fixture
def animal_docs() -> list[Document]:
    return [
        Document(page_content=text, metadata={"source": f"doc{i}.txt", "group": "even" if i % 2 == 0 else "odd"})
        for i, text in enumerate(ANIMALS)
    ]


@pytest.fixture
def animal_index(animal_docs: list[Document], embeddings: HashingEmbeddings) -> FusionIndex:
    return FusionIndex.from_documents(animal_docs, embeddings)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a tiny random BERT cross-encoder (see tests/helpers/tiny_models.py), built once per session."""
    from tests.helpers.tiny_models import build_cross_encoder

    return build_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "tiny")


@pytest.fixture(scope="session")
def model_vectors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this run's shared cache of the bundled model's document vectors (helpers/shared_vectors.py)."""
    return run_folder(tmp_path_factory.getbasetemp()) / "model-vectors"


@pytest.fixture(scope="session")
def handbook_index(tmp_path_factory: pytest.TempPathFactory, model_vectors: Path) -> Path:
    """The maintenance handbook indexed with the bundled model and saved (a model the CLI and servers reload)."""
    folder = tmp_path_factory.mktemp("handbook")
    with shared_model_vectors(model_vectors):
        index = FusionIndex.from_files([SAMPLE_MD], embedding_models.LocalEmbeddings())
    return index.save(folder / "handbook")


@pytest.fixture(scope="session")
def bundled_sample_index(tmp_path_factory: pytest.TempPathFactory, model_vectors: Path) -> CliRun:
    """``langchain-fusion index data --out DIR --embeddings local`` with the bundled model, text output.

    It is run once per test run and shared by the CLI smoke test of the bundled model and the sample-data
    results. Under pytest-xdist the first worker to need it builds it in the run's shared temporary folder
    while the others wait for the lock, then each reads the same index (and the command's recorded output).
    The real model's vectors of the sample are shared with the docs and notebooks (:func:`model_vectors`):
    it embeds each text here or in whichever test needed it first.
    """
    from langchain_fusion.cli.app import main

    shared = run_folder(tmp_path_factory.getbasetemp())
    with locked(shared / "bundled-sample.lock") as is_locked:
        folder = shared / "bundled-sample" if is_locked else tmp_path_factory.mktemp("bundled-sample")
        record = folder / "run.json"
        if not record.is_file():
            folder.mkdir(exist_ok=True)
            stdout, stderr = io.StringIO(), io.StringIO()
            with (
                shared_model_vectors(model_vectors),
                contextlib.redirect_stdout(stdout),
                contextlib.redirect_stderr(stderr),
            ):
                status = main(["index", str(DATA), "--out", str(folder / "arden-index"), "--embeddings", "local"])
            run = {"status": status, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
            record.write_text(json.dumps(run), encoding="utf-8")
        run = json.loads(record.read_text(encoding="utf-8"))
    return CliRun(folder / "arden-index", run["status"], run["stdout"], run["stderr"])
