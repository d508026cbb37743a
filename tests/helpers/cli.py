"""Running the ``langchain-fusion`` command in process, and checking what it prints."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from langchain_fusion.cli.app import main

ERROR_PREFIX = "langchain-fusion: error: "
"""How the command starts the one line of a user error."""
ANSWER = "The batteries sat on raised racks, so the flood never reached them [1]."
"""What :func:`rater_and_answerer` answers the RAG prompt with."""


class CliRun(NamedTuple):
    """One in-process run of the ``langchain-fusion`` command."""

    out: Path
    status: int
    stdout: str
    stderr: str


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def assert_one_line_error(status: int, out: str, err: str, *fragments: str) -> str:
    """A user error: exit status 2, nothing on stdout, one line on stderr (no traceback) holding each fragment.

    Returns that line.
    """
    assert status == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(ERROR_PREFIX)
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def use_chat_model(monkeypatch: pytest.MonkeyPatch, model: Any) -> list[str | None]:
    """Make the CLI's chat model ``model``; returns the --llm specs it was asked for."""
    specs: list[str | None] = []

    def resolve(spec: str | None) -> Any:
        specs.append(spec)
        return model

    monkeypatch.setattr("langchain_fusion.models.chat.resolve_chat_model", resolve)
    return specs


def rater_and_answerer() -> Any:
    """Rates passages that mention the flood 9 and others 3; answers the RAG prompt with :data:`ANSWER`."""
    from tests.helpers.fake_chat_models import RatingModel

    def rule(text: str) -> Any:
        if "You answer questions using only the numbered passages" in text:
            return ANSWER
        return 9 if "flood" in text.lower() else 3

    return RatingModel(rule=rule)
