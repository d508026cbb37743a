"""An on-disk cache of embeddings, keyed by model and text hash.

Re-indexing the same texts with the same model (evaluation reruns, rebuilding an index with
other BM25 settings) then costs no embedding calls. The cache is a folder per model holding
NumPy shards and a JSON list of text hashes; nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_fusion.models.embeddings import embed_queries, embeddings_id


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedEmbeddings(Embeddings):
    """Wraps an ``Embeddings`` model; documents already embedded are read from ``cache_dir``.

    The cache lives in ``cache_dir/<hash of the model id>/``. Queries are not cached (they
    are cheap and rarely repeat). The model id recorded in index manifests is the wrapped
    model's, via ``underlying_embeddings`` (the attribute LangChain's own cache uses too).
    """

    def __init__(self, underlying_embeddings: Embeddings, cache_dir: str | Path) -> None:
        """Cache ``underlying_embeddings``'s document vectors under ``cache_dir``."""
        self.underlying_embeddings = underlying_embeddings
        model_id = embeddings_id(underlying_embeddings)
        self.folder = Path(cache_dir) / hashlib.sha256(model_id.encode()).hexdigest()[:16]
        self._vectors: dict[str, np.ndarray] = {}
        self.hits = 0
        """Texts served from the cache since creation."""
        self.misses = 0
        """Texts that had to be embedded since creation."""
        self._load(model_id)

    def _load(self, model_id: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        info = self.folder / "model.json"
        if not info.exists():
            info.write_text(json.dumps({"model": model_id}) + "\n", encoding="utf-8")
        for keys_file in sorted(self.folder.glob("shard-*.json")):
            vectors_file = keys_file.with_suffix(".npy")
            try:
                keys = json.loads(keys_file.read_text(encoding="utf-8"))
                vectors = np.load(vectors_file, allow_pickle=False)
            except (OSError, ValueError):
                continue  # an incomplete shard is ignored; its texts are embedded again
            if len(keys) == len(vectors):
                self._vectors.update(zip(keys, vectors, strict=True))

    def _store(self, keys: list[str], vectors: np.ndarray) -> None:
        # Write vectors first and the key list last, each atomically, so a reader never
        # sees keys without their vectors.
        fd, tmp_name = tempfile.mkstemp(prefix="shard-", suffix=".tmp", dir=self.folder)
        os.close(fd)
        stem = Path(tmp_name).stem
        tmp_vectors = self.folder / f"{stem}.npy.tmp"
        with tmp_vectors.open("wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
        os.replace(tmp_vectors, self.folder / f"{stem}.npy")
        Path(tmp_name).write_text(json.dumps(keys), encoding="utf-8")
        os.replace(tmp_name, self.folder / f"{stem}.json")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts, reading cached vectors and embedding (and caching) only the rest."""
        keys = [_text_key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            new_keys = list(missing)
            vectors = np.asarray(self.underlying_embeddings.embed_documents(list(missing.values())), dtype=np.float32)
            self._store(new_keys, vectors)
            self._vectors.update(zip(new_keys, vectors, strict=True))
        return [self._vectors[k].tolist() for k in keys]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the wrapped model (not cached)."""
        return self.underlying_embeddings.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several queries with the wrapped model (not cached), in one call where it can."""
        return embed_queries(self.underlying_embeddings, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query`."""
        return await self.underlying_embeddings.aembed_query(text)
