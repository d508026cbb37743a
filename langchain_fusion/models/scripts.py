"""Which writing systems an embedding model reads, and whether it can read a query.

A model trained on English text embeds a Chinese or Japanese question as little more than noise:
on question -> passage sets the bundled model finds the right passage in its top 10 for 36-48% of
them, where BM25 finds 97-99%. Fusing that noise with equal weight costs the keyword side part of
its lead. A query whose letters are mostly in scripts the model does not read is therefore one the
fused search gives no vector weight (:meth:`ScriptReader.unread`). What a model reads is known two ways:

- **Declared**: a model may declare the scripts it was trained on (``scripts``, a set of Unicode
  script names such as ``{"Latin"}``, as the bundled model does). That declaration is taken as it is.
- **Probed**: a model that declares nothing is probed the first time a query mostly in another
  probed script than Latin needs it (:func:`probe_scripts`), once per script. Each of ten languages in
  ten scripts (:data:`~langchain_fusion.models.probe_texts.PROBES`) has twelve statements and the
  twelve questions they answer, worded without a shared content word; the *separation* of a script is
  how far each question's similarity to its own statement stands above its similarities to the other
  eleven, in units of the spread of those unrelated similarities. A model that reads a language
  separates its pairs by several units (all-MiniLM-L6-v2 on English: 6.8; multilingual-e5-small on
  all ten languages: 1.8-3.9); one that does not, by noise (all-MiniLM-L6-v2 on the nine others: at
  most 0.7; with twelve pairs chance gives about 0.3). A script separated by less than
  :data:`READ_SEPARATION` is one the model does not read.

English is the reference: a model that does not separate the English pairs either (a bag-of-words
model, one the probe does not suit) gets no verdict and is taken to read every script. So is Latin
for every model that declares nothing (an English query never runs a probe), and any script without
a probe. Each script's verdict depends on the model alone, not on the queries seen before: the same
model gives the same results in process and on Milvus, and a query costs a count of its letters.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import regex

from langchain_fusion.errors import FusionError
from langchain_fusion.models.embeddings import model_behind
from langchain_fusion.models.probe_texts import PROBES, ProbeSet
from langchain_fusion.threads import CopiesWithoutLock

_LETTER = regex.compile(r"\p{L}")


def _letters_of(scripts: Iterable[str]) -> Any:
    """A pattern matching one letter of any of ``scripts`` (their marks and punctuation are not letters)."""
    return regex.compile("(?V1)[[" + "".join(rf"\p{{{name}}}" for name in scripts) + r"]&&\p{L}]")


READ_SEPARATION = 1.0
"""The separation (see the module docstring) from which a probed model reads a script: about three times what
twelve pairs of a script the model does not read reach by chance."""

ASSUMED_READ = "Latin"
"""The script every model that declares nothing is taken to read without a probe; its probe (English) is the
reference of every verdict."""

PROBED_SCRIPTS: tuple[str, ...] = tuple(script for probe in PROBES for script in probe.scripts)
"""The scripts a probe tests, Latin first."""

_PROBE_OF = {script: probe for probe in PROBES for script in probe.scripts}
_SCRIPT_OF = regex.compile("(?V1)" + "|".join(rf"(?P<{name}>[\p{{{name}}}&&\p{{L}}])" for name in PROBED_SCRIPTS))
_OTHER_PROBED = _letters_of(name for name in PROBED_SCRIPTS if name != ASSUMED_READ)


def declared_scripts(embeddings: Any) -> frozenset[str] | None:
    """The scripts ``embeddings`` (or the model in :class:`CachedEmbeddings`) declares it reads; None: none declared."""
    scripts = getattr(model_behind(embeddings), "scripts", None)
    return frozenset(scripts) if scripts is not None else None


@lru_cache(maxsize=16)
def _letters_in(scripts: frozenset[str]) -> Any:
    return _letters_of(sorted(scripts))


def reads(scripts: Iterable[str] | None, text: str) -> bool:
    """Whether a model reading ``scripts`` can read ``text``: at least half its letters are in them.

    Text without letters (numbers, codes of digits) is read by any model; ``scripts`` None reads all.
    """
    if scripts is None:
        return True
    letters = len(_LETTER.findall(text))
    if letters == 0:
        return True
    return 2 * len(_letters_in(frozenset(scripts)).findall(text)) >= letters


def letters_by_script(text: str) -> Counter[str]:
    """How many of ``text``'s letters are in each probed script (letters of other scripts are not counted)."""
    return Counter(match.lastgroup for match in _SCRIPT_OF.finditer(text) if match.lastgroup)


@dataclass(frozen=True)
class Unread:
    """Why the embedding model cannot read one query: the query's scripts it does not read, and how that is known."""

    scripts: tuple[str, ...]
    """The query's scripts the model does not read, those with the most letters first."""
    source: Literal["declared", "probed"]
    """``declared``: the model's own ``scripts``; ``probed``: :func:`probe_scripts` found it."""

    def __str__(self) -> str:
        how = "as it declares" if self.source == "declared" else "as a probe of it found"
        return f"the embedding model does not read {', '.join(self.scripts)} ({how})"


@dataclass(frozen=True)
class ProbeResult:
    """What a probe of one model found: each probed script's separation, and the scripts it does not read."""

    separations: Mapping[str, float]
    """Each probed script's separation (see the module docstring); 0 where the model gives every text one vector."""
    unread: frozenset[str] | None
    """The probed scripts the model does not read; None when it does not read English either (no verdict)."""


def probe_for(script: str) -> ProbeSet | None:
    """The probe that tests ``script`` (None for a script without one)."""
    return _PROBE_OF.get(script)


def probe_scripts(embeddings: Any, scripts: Iterable[str] | None = None) -> ProbeResult:
    """Probe whether ``embeddings`` reads ``scripts`` (default: every probed script) and English, in one call.

    The texts of each probe are embedded with one ``embed_documents`` call; see the module docstring for
    the separation and the verdict.
    """
    wanted = PROBED_SCRIPTS if scripts is None else (ASSUMED_READ, *scripts)
    probes = list(dict.fromkeys(probe for probe in map(probe_for, wanted) if probe is not None))
    texts = [text for probe in probes for pair in probe.pairs for text in pair]
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise FusionError(f"the embedding model returned {len(vectors)} vectors for {len(texts)} probe texts")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    separations: dict[str, float] = {}
    start = 0
    for probe in probes:
        block = vectors[start : start + 2 * len(probe.pairs)]
        start += block.shape[0]
        separations.update(dict.fromkeys(probe.scripts, _separation(block[0::2], block[1::2])))
    return ProbeResult(separations, _verdict(separations))


def _verdict(separations: Mapping[str, float]) -> frozenset[str] | None:
    """The probed scripts not read, or None when English is not read either (the probe cannot tell)."""
    if separations[ASSUMED_READ] < READ_SEPARATION:
        return None
    return frozenset(script for script, value in separations.items() if value < READ_SEPARATION)


def _separation(statements: np.ndarray, questions: np.ndarray) -> float:
    """How far each question's similarity to its own statement stands above those to the others, in their spreads."""
    similarity = questions @ statements.T
    others = similarity[~np.eye(similarity.shape[0], dtype=bool)]
    spread = float(others.std())
    if not np.isfinite(spread) or spread < 1e-6:  # one vector for every text: nothing told apart
        return 0.0
    return float((np.diag(similarity).mean() - others.mean()) / spread)


class ScriptReader(CopiesWithoutLock):
    """Which queries one model reads: its declaration, or probes of it, each script probed once when a query needs it.

    Thread-safe: queries arriving together wait for one probe.
    """

    def __init__(self, embeddings: Any) -> None:
        self.embeddings = embeddings
        """The model (a cache wrapper is looked through for its declaration, and probed as it is)."""
        self.declared = declared_scripts(embeddings)
        """The scripts the model declares it reads; None: none declared (it is probed when needed)."""
        self._separations: dict[str, float] = {}
        self._lock = threading.Lock()

    def separations(self, scripts: Iterable[str]) -> dict[str, float]:
        """The separation of English and of each of ``scripts`` that has a probe, probing those not probed yet."""
        wanted = {ASSUMED_READ, *(script for script in scripts if probe_for(script) is not None)}
        if not wanted <= self._separations.keys():
            with self._lock:
                missing = wanted - self._separations.keys()
                if missing:
                    self._separations.update(probe_scripts(self.embeddings, sorted(missing)).separations)
        return {script: self._separations[script] for script in wanted}

    def unread(self, query: str, *, probe: bool = True) -> Unread | None:
        """Why the model cannot read ``query``, or None when it reads it.

        A model that declares scripts reads a query when at least half its letters are in them. One that
        declares nothing reads it unless more than half its letters are in scripts a probe finds it does not
        read; the probe runs only for a query mostly in probed scripts other than Latin, and not at all when
        ``probe`` is False (then every query is read).
        """
        declared = self.declared
        if declared is not None:
            if reads(declared, query):
                return None
            return Unread(_most_letters(query, lambda script: script not in declared), "declared")
        if not probe or not _OTHER_PROBED.search(query):
            return None
        letters = len(_LETTER.findall(query))
        counts = letters_by_script(query)
        if 2 * (sum(counts.values()) - counts[ASSUMED_READ]) <= letters:  # read whatever a probe finds
            return None
        unread = _verdict(self.separations(counts))
        if unread is None or 2 * sum(counts[script] for script in unread) <= letters:
            return None
        return Unread(_most_letters(query, lambda script: script in unread), "probed")


def _most_letters(query: str, unread: Any) -> tuple[str, ...]:
    """The scripts of ``query``'s letters for which ``unread(script)`` holds, most letters first.

    Letters of scripts no probe covers are counted together, as ``other scripts``.
    """
    counts = letters_by_script(query)
    others = len(_LETTER.findall(query)) - sum(counts.values())
    if others > 0:
        counts[OTHER_SCRIPTS] = others
    return tuple(script for script, _ in counts.most_common() if unread(script))


OTHER_SCRIPTS = "other scripts"
"""How :class:`Unread` names the letters of scripts no probe covers."""
