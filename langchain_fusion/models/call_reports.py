"""What became of indexing-time chat model calls: each prompt's outcome, each failed item, a batch's report.

A call that finally fails is returned as a failure (:class:`CallOutcome`), counted in an
:class:`LLMReport` and handled by the caller; nothing is raised.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CallOutcome:
    """What became of one prompt."""

    text: str | None = None
    """The answer, or None if the call finally failed."""
    error: BaseException | None = None
    """The last error, when the call failed."""
    cached: bool = False
    """True when no call was made: the answer came from the cache or from an identical prompt of the same run."""
    attempts: int = 0
    """Calls made for this prompt, retries included (0 when cached)."""

    @property
    def ok(self) -> bool:
        """True when there is an answer."""
        return self.text is not None


@dataclass
class LLMFailure:
    """An item whose chat model call finally failed."""

    item: str
    """The item's id (a chunk id, a summary id)."""
    label: str
    """Where the item is, for people: ``data/report.pdf p. 3, chunk 7``."""
    error: str
    """The last error, as ``Type: message``."""
    attempts: int
    """Calls made before giving up."""


@dataclass
class LLMReport:
    """What a batch of indexing-time chat model calls did: calls made, cached and failed."""

    task: str
    """What the calls were for (``contextual enrichment``, ``summaries``)."""
    model: str
    """The chat model's id (see :func:`~langchain_fusion.models.answer_cache.chat_model_id`)."""
    unit: str = "items"
    """What ``items`` counts (``chunks``, ``pages and sections``)."""
    items: int = 0
    """Items processed."""
    requests: int = 0
    """Prompts needed (one per item, more for map-reduce summaries)."""
    cached: int = 0
    """Prompts answered without a call: from the cache, or by an identical prompt of the same run."""
    calls: int = 0
    """Model calls made, retries included."""
    retries: int = 0
    """Of those calls, how many were retries."""
    failed: list[LLMFailure] = field(default_factory=list)
    """Items whose calls finally failed (they were indexed without the model's text)."""

    def add(self, outcome: CallOutcome) -> None:
        """Count one prompt's outcome."""
        self.requests += 1
        self.cached += outcome.cached
        self.calls += outcome.attempts
        self.retries += max(0, outcome.attempts - 1)

    def merged(self, other: LLMReport) -> LLMReport:
        """The sum of this report and ``other`` (the same task, another batch of items)."""
        return LLMReport(
            task=self.task,
            model=self.model,
            unit=self.unit,
            items=self.items + other.items,
            requests=self.requests + other.requests,
            cached=self.cached + other.cached,
            calls=self.calls + other.calls,
            retries=self.retries + other.retries,
            failed=[*self.failed, *other.failed],
        )

    def summary(self) -> str:
        """One line: task (model): items, model calls (retries), cached, failed."""
        return (
            f"{self.task} ({self.model}): {self.items} {self.unit}, {self.calls} model calls "
            f"({self.retries} retries), {self.cached} cached, {len(self.failed)} failed"
        )

    def warn_failures(self, log: logging.Logger, consequence: str) -> None:
        """If any item failed, warn on ``log``: ``<task> failed for F of N <unit>; <consequence> (<first error>)``."""
        if self.failed:
            log.warning(
                "%s failed for %d of %d %s; %s (%s)",
                self.task,
                len(self.failed),
                self.items,
                self.unit,
                consequence,
                self.failed[0].error,
            )

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "task": self.task,
            "model": self.model,
            "items": self.items,
            "requests": self.requests,
            "cached": self.cached,
            "calls": self.calls,
            "retries": self.retries,
            "failed": [asdict(failure) for failure in self.failed],
        }
