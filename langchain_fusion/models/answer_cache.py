"""The on-disk cache of chat model answers: one JSON file per key, written atomically, no pickle.

Each answer is stored under a key that hashes the task, the model id, the prompt version and every
prompt input (:func:`cache_key`), so a rerun pays only for prompts it has never sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class ResultCache:
    """Answers stored on disk, one small JSON file per key: ``folder/<key[:2]>/<key>.json``.

    Each file is written to a temporary name and renamed into place, so a crash or a
    concurrent run never leaves a half-written entry; an unreadable entry counts as a miss.
    Nothing is pickled. Safe to share between threads and between processes.
    """

    def __init__(self, folder: str | Path) -> None:
        """Use (and create on first write) the cache folder ``folder``."""
        self.folder = Path(folder).expanduser()

    def _path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise ValueError(f"cache keys are sha256 hex digests; got {key!r}")
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The cached answer for ``key``, or None."""
        path = self._path(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.debug("ignoring unreadable cache entry %s (%s)", path, exc)
            return None
        text = record.get("text") if isinstance(record, dict) and record.get("key") == key else None
        return text if isinstance(text, str) else None

    def put(self, key: str, text: str, about: dict[str, Any] | None = None) -> None:
        """Store ``text`` under ``key`` atomically; ``about`` is kept alongside for people reading the cache."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "text": text, "about": about or {}}
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle, ensure_ascii=False)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob("??/*.json")) if self.folder.is_dir() else 0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(task: str, model_id: str, prompt_version: str, inputs: dict[str, str]) -> str:
    """The cache key of one prompt: sha256 of the task, model, prompt version and each input's hash.

    For contextual enrichment the inputs are the document part and the chunk, so the key is
    (model, prompt version, document hash, chunk hash).
    """
    payload = [task, model_id, prompt_version, sorted((name, _digest(value)) for name, value in inputs.items())]
    return _digest(json.dumps(payload, ensure_ascii=False))


def chat_model_id(llm: Any) -> str:
    """A name for a chat model, used in cache keys: its type and model name (e.g. ``openai-chat:gpt-4o-mini``)."""
    name = None
    for attribute in ("model_name", "model", "model_id", "deployment_name"):
        try:
            value = getattr(llm, attribute, None)
        except Exception:  # a RunnableBinding can delegate attribute access and fail
            value = None
        if isinstance(value, str) and value:
            name = value
            break
    try:
        kind = getattr(llm, "_llm_type", None)
    except Exception:
        kind = None
    kind = kind if isinstance(kind, str) and kind else type(llm).__name__
    return f"{kind}:{name}" if name else kind
