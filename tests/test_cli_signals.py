"""The command line as a process: a closed pipe, Ctrl-C at start-up and SIGTERM end it in one line, no traceback.

Each test runs the command in a child process (what a shell runs), with the fake embeddings; the signal
or the interruption comes at a chosen point of the child's own run, so nothing depends on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langchain_fusion import FusionIndex
from langchain_fusion.index.sync import GROUP_CHUNKS
from langchain_fusion.testing import corpus
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.paths import REPO

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes"), pytest.mark.subprocess]

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    {before}
    from tests.helpers.embeddings import fake_cli_embeddings
    from langchain_fusion.cli import main
    with fake_cli_embeddings():
        sys.exit(main(sys.argv[1:]))
    """
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return env


def _child(tmp_path: Path, before: str = "") -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO), before=textwrap.dedent(before).strip()), encoding="utf-8")
    return [sys.executable, str(script)]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return FusionIndex.from_documents(corpus(3, 200), HashingEmbeddings()).save(tmp_path / "idx")


def test_a_closed_pipe_ends_quietly(tmp_path: Path, index: Path) -> None:
    # query --json | head: the reader is gone before the output is written.
    with subprocess.Popen(
        [*_child(tmp_path), "query", str(index), "w1 w2 w3", "-k", "100", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=120) == 141, err  # as a process killed by SIGPIPE: 128 + 13
    assert err == ""


def test_ctrl_c_while_starting_is_one_line(tmp_path: Path) -> None:
    # Ctrl-C in the first second lands while the command imports its modules.
    before = """
    import importlib.abc
    class CtrlC(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "langchain_fusion.cli.arguments":
                raise KeyboardInterrupt
            return None
    sys.meta_path.insert(0, CtrlC())
    """
    done = subprocess.run(
        [*_child(tmp_path, before), "query", "idx", "q"], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, "langchain-fusion: interrupted\n", "")


def test_sigterm_during_index_saves_the_work_done(tmp_path: Path) -> None:
    # As Ctrl-C does: the files done so far are saved, and a rerun finishes.
    docs = tmp_path / "docs"
    docs.mkdir()
    # Each file longer than a group of chunks (GROUP_CHUNKS), so that each is one all-or-nothing update.
    repeats = 40 * (GROUP_CHUNKS + 1)
    for name, text in {
        "a.txt": "gc-9 controller reboots. " * repeats,
        "b.txt": "batteries stay dry. " * repeats,
    }.items():
        (docs / name).write_text(text, encoding="utf-8")
    before = """
    from langchain_fusion import FusionIndex
    real, calls = FusionIndex.add_documents, [0]
    def add(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID`, systemd or docker stop sends
        return real(self, *args, **kwargs)
    FusionIndex.add_documents = add
    """
    out = tmp_path / "idx"
    argv = [*_child(tmp_path, before), "index", str(docs), "--out", str(out), "--embeddings", "local", "-q"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines() == [
        f"langchain-fusion: interrupted; saved the 1 files done so far to {out}: run the same command again to finish"
    ]
    assert {d.metadata["source"].rsplit("/", 1)[-1] for d in FusionIndex.load(out, HashingEmbeddings()).documents} == {
        "a.txt"
    }
