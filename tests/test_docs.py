"""Every code block of README.md and docs/*.md runs, so the documentation cannot rot.

Each page is a test. Its blocks run in document order, offline, in a fresh working folder that holds
a copy of ``data/`` (what the docs' relative paths name):

- ```` ```python ```` blocks share one namespace per page: a page is a tutorial.
- ```` ```bash ````, ```` ```sh ```` and ```` ```console ```` blocks: each ``langchain-fusion ...`` command
  runs in process through :func:`langchain_fusion.cli.app.main` and must exit with status 0. In a
  console block, lines starting with ``$ `` are commands and the lines after one are its output; an
  output line holding ``error:`` is expected verbatim on stderr, with exit status 2. Other lines
  are not run by rule, each rule with its reason (:data:`NOT_RUN`): installing packages (``pip``,
  ``python -m pip``, ``python -m venv``), the network (``git``, ``curl``), ``make`` (it installs and
  runs the whole suite), and servers that run until stopped (``serve``, ``mcp``, ``uvicorn``,
  ``jupyter``; the flags of ``serve`` and ``mcp`` are still parsed, so they are checked). Any
  other command fails the test: give its block a marker.
- ```` ```json ```` blocks must parse; ```` ```text ```` blocks are output and not run. A fence
  without a language fails.

Markers are HTML comments (invisible on GitHub) on the line right before a block:

- ``<!-- doc-test: skip (REASON) -->``: the block is not run. The reason is required; skips are
  for what truly needs a network, an API key, a server that blocks, or a package install.
- ``<!-- doc-test: fake-llm -->``: every chat model the block builds is :class:`DocsChatModel`, a
  fake that answers langchain-fusion's prompts by fixed rules: ``ChatOpenAI(...)``,
  ``default_chat_model()``, ``resolve_chat_model(...)`` and so ``--llm`` and the default model of
  the command line and the servers. No API key is ever set, so a block that builds a real chat
  model without this marker fails.

Hidden python blocks are comments of their own, run where they stand in the page's namespace:
``<!-- doc-test: setup`` prepares what a block assumes (the reader has it already), and
``<!-- doc-test: check`` asserts what the text says a block returns::

    <!-- doc-test: setup
    index.save("arden-index")
    -->

The docs hold at most eight skips in all (``test_blocks_are_marked_and_skips_give_reasons``).
Milvus Lite commands are left out only where milvus-lite does not install (Windows).

Embeddings are the bundled local model (offline). It is the slow part, so each distinct text is
embedded once per test run, whichever page, notebook or CLI test needs it first (the same model, the
same vectors; see ``tests/helpers/shared_vectors.py``), and each worker loads the model and its query encoder
once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shlex
import shutil
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_fusion.ingest.loading import SkippedFileWarning
from tests.helpers.paths import DATA, REPO
from tests.helpers.shared_vectors import each_text_embedded_once

pytestmark = pytest.mark.local_model

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PAGE_IDS = [page.relative_to(REPO).as_posix() for page in PAGES]
RUNS = [
    pytest.param(page, id=name, marks=[pytest.mark.milvus] if re.search(r"milvus\+lite:|MilvusStore\(", text) else [])
    for page, name in zip(PAGES, PAGE_IDS, strict=True)
    for text in [page.read_text(encoding="utf-8")]
]
"""Each page to run: a page with Milvus Lite in it starts its server, so it is a ``milvus`` test too."""

RUN_LANGUAGES = {"python", "bash", "sh", "console"}
OTHER_LANGUAGES = {"json", "text"}

NOT_RUN: dict[str, str] = {
    "pip": "installs packages",
    "python -m pip": "installs packages",
    "python -m venv": "creates a virtual environment to install packages into",
    "git": "uses the network",
    "curl": "talks to a running server or the network",
    "make": "installs packages and runs the whole test suite (make test is CI)",
    "uvicorn": "starts a server that runs until stopped",
    "jupyter": "starts a server that runs until stopped",
    "langchain-fusion serve": "starts a server that runs until stopped (its flags are parsed and checked)",
    "langchain-fusion mcp": "starts a server that runs until stopped (its flags are parsed and checked)",
}
"""Shell commands the test does not run, and why: every rule names the reason."""

MARKER = re.compile(r"^<!--\s*doc-test:\s*(?P<body>.*?)\s*-->$")
HIDDEN_START = re.compile(r"^<!--\s*doc-test:\s*(?P<kind>setup|check)\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^`\s]*)\s*$")
SKIP = re.compile(r"^skip \((?P<reason>.*\S.*)\)$")


# --- reading the pages ----------------------------------------------------------------------------


@dataclass
class Block:
    """One code block of a page (or a hidden setup or check comment), with its marker."""

    page: str
    line: int
    lang: str
    code: str
    marker: str | None = None
    hidden: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        match = SKIP.match(self.marker or "")
        return match["reason"] if match else None


@dataclass
class Page:
    """A page's blocks in document order, and the problems found reading it."""

    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_page(path: Path) -> Page:
    """The blocks of a markdown page, each with the marker on the line before it."""
    name = path.relative_to(REPO).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    page = Page()
    pending: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        hidden = HIDDEN_START.match(stripped)
        if hidden:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->"), None)
            if end is None:
                page.problems.append(f"{name}:{i + 1}: a hidden {hidden['kind']} block without its closing '-->'")
                break
            code = "\n".join(lines[i + 1 : end]) + "\n"
            page.blocks.append(Block(name, i + 1, "python", code, hidden["kind"], True))
            i = end + 1
            continue
        marker = MARKER.match(stripped)
        if marker:
            if pending is not None:
                page.problems.append(f"{name}:{pending[0]}: a marker that is not right before a code block")
            pending = (i + 1, marker["body"])
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            indent = fence["indent"]
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                page.problems.append(f"{name}:{i + 1}: an unclosed code block")
                break
            body = [text[len(indent) :] if text.startswith(indent) else text for text in lines[i + 1 : end]]
            block = Block(name, i + 1, fence["lang"], "\n".join(body) + "\n")
            if pending is not None and pending[0] == i:
                block.marker = pending[1]
                pending = None
            page.blocks.append(block)
            i = end + 1
            continue
        if pending is not None and stripped:
            page.problems.append(f"{name}:{pending[0]}: a marker that is not right before a code block")
            pending = None
        i += 1
    if pending is not None:
        page.problems.append(f"{name}:{pending[0]}: a marker that is not right before a code block")
    for block in page.blocks:
        page.problems += _marker_problems(block)
    return page


def _marker_problems(block: Block) -> list[str]:
    if not block.lang:
        return [f"{block.where}: a code block without a language (python, bash, console, json, text...)"]
    if block.lang not in RUN_LANGUAGES | OTHER_LANGUAGES:
        return [f"{block.where}: unknown code block language {block.lang!r}"]
    if block.marker is None or block.hidden:
        return []
    if block.marker.startswith("skip"):
        if block.skip_reason is None or not block.skip_reason.strip():
            return [f"{block.where}: a skip must give its reason: <!-- doc-test: skip (REASON) -->"]
        return []
    if block.marker == "fake-llm":
        return [] if block.lang in RUN_LANGUAGES else [f"{block.where}: fake-llm on a block that is not run"]
    return [f"{block.where}: unknown marker {block.marker!r} (skip (REASON), fake-llm; setup and check are comments)"]


# --- a fake chat model ----------------------------------------------------------------------------


def fake_answer(prompt: str) -> str:
    """What the fake says to each of langchain-fusion's prompts."""
    if "Relevance rating" in prompt:
        return "7"
    if "Document numbers, most relevant first" in prompt:
        return "2, 1"
    if "search queries" in prompt and "Question:" in prompt:
        return "battery cabinet flood damage\nwhy the batteries survived the July storm"
    if "<chunk>" in prompt:
        return "[fake context] A passage of the document."
    if "<text source=" in prompt or "<summaries source=" in prompt:
        text = prompt.partition('">\n')[2].partition("\n</")[0]
        return "[fake summary] " + " ".join(text.split()[:60])
    return "[fake answer] The passages say so [1]."


class DocsChatModel(BaseChatModel):
    """A fake chat model: fixed answers to the rating, rewrite, context, summary and answer prompts."""

    @property
    def _llm_type(self) -> str:
        return "docs-fake-chat"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = fake_answer("\n".join(str(message.content) for message in messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])


@contextlib.contextmanager
def fake_llm() -> Iterator[None]:
    """Every chat model langchain-fusion, LangChain's OpenAI class or the command line builds is the fake."""
    import langchain_openai

    import langchain_fusion
    from langchain_fusion.models import chat

    def default() -> DocsChatModel:
        return DocsChatModel()

    def resolve(spec: Any = None) -> DocsChatModel:
        return DocsChatModel()

    def factory(*args: Any, **kwargs: Any) -> DocsChatModel:
        return DocsChatModel()

    with pytest.MonkeyPatch.context() as patch:
        # The package's own names first: reading one imports and keeps the real function, which the undo restores.
        patch.setattr(langchain_fusion, "default_chat_model", default)
        patch.setattr(langchain_fusion, "resolve_chat_model", resolve)
        patch.setattr(chat, "default_chat_model", default)
        patch.setattr(chat, "resolve_chat_model", resolve)
        patch.setattr(chat, "openai_chat_model", factory)
        patch.setattr(langchain_openai, "ChatOpenAI", factory)
        yield


# --- running a page -------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def embed_each_text_once(model_vectors: Path) -> Iterator[None]:
    """Each distinct text embedded once for the whole run (see shared_vectors), each query once; one loaded model."""
    with each_text_embedded_once(model_vectors):
        yield


class Runner:
    """Runs the blocks of one page in its working folder and namespace."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.namespace: dict[str, Any] = {"__name__": "__doc_test__"}

    def run(self, block: Block) -> None:
        if block.skip_reason is not None or block.lang not in RUN_LANGUAGES:
            if block.lang == "json" and block.skip_reason is None:
                json.loads(block.code)
            return
        with fake_llm() if block.marker == "fake-llm" else contextlib.nullcontext():
            if block.lang == "python":
                self._python(block)
            else:
                self._shell(block)

    def _python(self, block: Block) -> None:
        out = io.StringIO()
        try:
            code = compile(block.code, block.where, "exec")
            with contextlib.redirect_stdout(out), warnings.catch_warnings():
                # The sample folder holds its labelled queries as .json: a folder's files of other types are
                # reported (a SkippedFileWarning, as the pages say), not an error of the page.
                warnings.filterwarnings(
                    "ignore", r"\d+ file\(s\) not indexed: their type is not read", SkippedFileWarning
                )
                exec(code, self.namespace)
        except Exception:
            kind = f"hidden {block.marker} block" if block.hidden else "python block"
            pytest.fail(
                f"{block.where}: the {kind} failed:\n{block.code}\n--- output ---\n{out.getvalue()}"
                f"\n--- error ---\n{traceback.format_exc(limit=-8)}",
                pytrace=False,
            )

    def _shell(self, block: Block) -> None:
        for number, command, expected in shell_commands(block):
            where = f"{block.page}:{block.line + number}"
            argv = shlex.split(command, comments=True)
            if not argv:
                continue
            reason = not_run_reason(argv)
            if reason is not None:
                if argv[0].endswith("langchain-fusion"):
                    parse_only(argv, where)
                continue
            env, argv = split_assignments(argv)
            if any("milvus+lite:" in arg for arg in argv) and importlib.util.find_spec("milvus_lite") is None:
                continue  # Milvus Lite exists for Linux and macOS only
            if not argv[0].endswith("langchain-fusion"):
                pytest.fail(
                    f"{where}: {argv[0]!r} is not a langchain-fusion command nor one of the commands not run "
                    f"({', '.join(NOT_RUN)}); mark the block <!-- doc-test: skip (REASON) -->",
                    pytrace=False,
                )
            run_cli(argv[1:], env, expected, where)


def shell_commands(block: Block) -> Iterator[tuple[int, str, list[str]]]:
    """(line offset, command, output lines shown) of a shell block; continuation lines joined."""
    lines = block.code.splitlines()
    console = block.lang == "console"
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        if console:
            if not text.startswith("$ "):
                i += 1
                continue
            text = text[2:]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        output: list[str] = []
        while console and i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        if text.strip() and not text.strip().startswith("#"):
            yield start + 1, text, output


def _commands(argv: list[str]) -> list[list[str]]:
    """The commands of a line: split at &&, || and ;, without leading VAR=value assignments."""
    commands: list[list[str]] = [[]]
    for token in argv:
        if token in ("&&", "||", ";", "|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [split_assignments(command)[1] for command in commands if command]


def not_run_reason(argv: list[str]) -> str | None:
    """Why a shell line is not run (a rule of :data:`NOT_RUN` matches one of its commands), or None."""
    for command in _commands(argv):
        if not command:
            continue
        name = Path(command[0]).name
        words = [re.sub(r"^python3?(\.\d+)?$", "python", name), *command[1:3]]
        for rule, reason in NOT_RUN.items():
            if words[: len(rule.split())] == rule.split():
                return reason
    return None


def split_assignments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``NAME=value`` words (an environment for the command) and the command."""
    env: dict[str, str] = {}
    while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
        name, _, value = argv[0].partition("=")
        env[name] = value
        argv = argv[1:]
    return env, argv


def parse_only(argv: list[str], where: str) -> None:
    """Parse a server command's flags without running it: a flag that does not exist fails here."""
    from langchain_fusion.cli.app import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(split_assignments(argv)[1][1:])
    except SystemExit as exc:
        pytest.fail(
            f"{where}: `{shlex.join(argv)}` does not parse (status {exc.code}):\n{err.getvalue()}", pytrace=False
        )


def run_cli(argv: list[str], env: dict[str, str], expected: list[str], where: str) -> None:
    """Run ``langchain-fusion ARGV`` in process; status 0, or 2 with the error lines shown in the docs."""
    from langchain_fusion.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse refused the flags
                status = exc.code if isinstance(exc.code, int) else 1
    errors = [line.strip() for line in expected if "error:" in line]
    shown = f"`langchain-fusion {shlex.join(argv)}`"
    if errors:
        assert status == 2, f"{where}: {shown} should fail with status 2, got {status}\n{err.getvalue()}"
        printed = [line.strip() for line in err.getvalue().splitlines()]
        for line in errors:
            assert line in printed, f"{where}: {shown} should print {line!r}; it printed:\n{err.getvalue()}"
    elif status != 0:
        pytest.fail(f"{where}: {shown} exited with status {status}:\n{err.getvalue()}{out.getvalue()}", pytrace=False)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, without keys or tracing."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("OPENAI_API_KEY", "LANGCHAIN_FUSION_EMBEDDINGS", "MILVUS_URI", "MILVUS_TOKEN", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("LANGCHAIN_TRACING_V2", "false")


@contextlib.contextmanager
def page_folder(folder: Path) -> Iterator[Path]:
    """``folder``, new, holding a copy of data/, as the working folder; store engines a page registers are dropped."""
    from langchain_fusion.stores import registry

    shutil.copytree(DATA, folder / "data")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(registry, "ENGINES", list(registry.ENGINES))
        yield folder


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("path", RUNS)
def test_page_runs(path: Path, tmp_path: Path) -> None:
    page = read_page(path)
    assert page.problems == []
    if path.name == "milvus.md":
        pytest.importorskip("milvus_lite")
    runner = Runner(path.relative_to(REPO).as_posix())
    with page_folder(tmp_path):
        for block in page.blocks:
            runner.run(block)


def test_blocks_are_marked_and_skips_give_reasons() -> None:
    problems = [problem for path in PAGES for problem in read_page(path).problems]
    assert problems == []
    skipped = [(b.where, b.skip_reason) for path in PAGES for b in read_page(path).blocks if b.skip_reason]
    assert len(skipped) <= 8, f"keep skips few: {skipped}"


@pytest.mark.usefixtures("offline")
def test_unmarked_blocks_must_run(tmp_path: Path) -> None:
    """The runner fails a block that cannot run: a chat model without fake-llm, an unknown command, a wrong flag."""
    runner = Runner("example.md")
    failing = [
        Block("example.md", 1, "python", "from langchain_fusion import default_chat_model\ndefault_chat_model()\n"),
        Block("example.md", 1, "bash", "python benchmarks/latency.py\n"),
        Block("example.md", 1, "bash", "langchain-fusion serve arden-index --no-such-flag\n"),
        Block("example.md", 1, "console", "$ langchain-fusion query nowhere x\nlangchain-fusion: error: not this\n"),
    ]
    with page_folder(tmp_path):
        for block in failing:
            with pytest.raises((pytest.fail.Exception, AssertionError)):
                runner.run(block)
    with fake_llm():
        from langchain_fusion import default_chat_model

        assert default_chat_model().invoke("Relevance rating (a whole number from 1 to 10):").content == "7"
    import langchain_fusion

    with pytest.raises(langchain_fusion.MissingCredentialsError):  # and the real one is back afterwards
        langchain_fusion.default_chat_model()


def test_readme_links_every_docs_page_and_keeps_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    contents = readme.partition("\n## Contents\n")[2].partition("\n## ")[0]
    for path in PAGES[1:]:
        assert f"(docs/{path.name})" in contents, f"the README's contents should link docs/{path.name}"
    assert "make demo" in readme and "make test" in readme


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("path", PAGES, ids=PAGE_IDS)
def test_links_resolve(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for match in LINK.finditer(text):
        target = match["target"]
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert broken == []
