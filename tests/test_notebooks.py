"""Every tutorial notebook runs top to bottom in a clean kernel, offline, and is committed without outputs.

The kernel is this interpreter (a kernelspec written to a temporary folder), so the notebooks import
the same installed langchain-fusion as the tests, whatever other kernels the machine has. The chat
model is always the notebooks' fake (``LANGCHAIN_FUSION_FAKE_LLM=1``), even with an OpenAI key.
Deselect with ``-m "not notebook"``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.helpers.shared_vectors import model_service

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
KERNEL_NAME = "langchain-fusion-tests"
HANG_GUARD = 300
"""Seconds the kernel may take to start, and one cell to run: a hang guard only (how fast the notebooks
run is for benchmarks, not for these tests)."""


def test_the_five_tutorials_are_there() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_choosing_alpha.ipynb",
        "03_windows_and_rerank.ipynb",
        "04_enrichment_and_hierarchy.ipynb",
        "05_vectorstore_and_serving.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """A kernelspec running ipykernel on this interpreter."""
    folder = tmp_path_factory.mktemp("kernels") / KERNEL_NAME
    folder.mkdir()
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "langchain-fusion tests",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(folder.parent)])


@pytest.fixture(scope="module")
def model_address() -> Iterator[str]:
    """Where the kernels ask this worker to embed texts not yet cached (it loads the model once for all of them)."""
    with (
        tempfile.TemporaryDirectory(prefix="fusion-model-") as folder,  # short: a socket path has ~100 bytes
        model_service(Path(folder) / "model.sock") as address,
    ):
        yield address


def share_model_vectors(ipython_dir: Path, folder: Path, address: str) -> None:
    """A startup file for the kernel: the bundled model's vectors come from this run's shared cache.

    Each text of the sample is embedded by the real model once per run (tests/helpers/shared_vectors.py), not
    once per notebook, and by the worker's model (``address``), so the kernels do not load torch. The
    file leaves no name behind in the notebook's namespace.
    """
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    module = Path(__file__).parent / "helpers" / "shared_vectors.py"
    (startup / "00-shared-model-vectors.py").write_text(
        "import importlib.util as _util\n"
        f"_spec = _util.spec_from_file_location('tests_shared_vectors', {str(module)!r})\n"
        "_module = _util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_module)\n"
        f"_module.install({str(folder)!r}, {address!r})\n"
        "del _util, _spec, _module\n",
        encoding="utf-8",
    )


@pytest.mark.notebook
@pytest.mark.local_model
@pytest.mark.timeout(3 * HANG_GUARD)  # the kernel's start and each cell have HANG_GUARD; the whole notebook more
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_offline(
    path: Path,
    kernel_specs: KernelSpecManager,
    model_vectors: Path,
    model_address: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The kernel inherits this environment: the fake chat model, no provider key, no model downloads.
    monkeypatch.setenv("LANGCHAIN_FUSION_FAKE_LLM", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # no user startup files or history
    # The notebooks embed the same sample files: each text is embedded once for the whole run.
    share_model_vectors(tmp_path / "ipython", model_vectors, model_address)
    notebook = nbformat.read(path, as_version=4)
    manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_specs)
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=HANG_GUARD,
        startup_timeout=HANG_GUARD,
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},  # cwd: the notebooks use ../data
    )
    try:
        client.execute()  # raises CellExecutionError, with the cell and the traceback, if a cell fails
    finally:  # the client stops a kernel only if it made the kernel manager itself
        if client.kc is not None:
            client.kc.stop_channels()
        manager.shutdown_kernel(now=True)
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    printed = "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []))
    if "tutorial_chat_model" in "".join(cell.source for cell in notebook.cells):
        assert "Chat model: FAKE" in printed  # clearly labelled
