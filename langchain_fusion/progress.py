"""Progress reports of long work (embedding, chat model calls): the one callback type every step takes."""

from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[int], None]
"""Called with the number of items just finished (texts embedded, prompts answered...), for progress bars."""
