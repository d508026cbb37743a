"""Library messages as a command-line user reads them: each Python parameter written as the flag that sets it.

The library's errors and notes speak of Python parameters (``window_max_chars``, ``multi_query=N``,
``load_files(max_chars=...)``); the command shows them through :func:`in_flags`, which writes each as
its flag (``--max-chars``, ``--multi-query N``, ``--max-file-chars N``). Only the spellings listed in
:data:`SPELLINGS` are rewritten, so no other word of a message (a path, a value, ``embeddings=`` in a
Python call the message suggests) is touched.
"""

from __future__ import annotations

import re

from langchain_fusion.cli.arguments import flag_of
from langchain_fusion.pipeline.index_spec import IndexSpec
from langchain_fusion.search.options import HierarchyOptions

SPELLINGS: tuple[tuple[str, str], ...] = (
    (r"\bwindow_max_chars\b", "--max-chars"),
    (r"\bwindow=N\b", "--window N"),
    (r"\bhierarchical=True\b", "--hierarchical"),
    (r"\(llm\)", "(--llm)"),
    (r"\bllm='PROVIDER:MODEL'", "--llm PROVIDER:MODEL"),
    (r"\breranker='llm'", "--rerank llm"),
    (r"\bmulti_query=N\b", "--multi-query N"),
    (r"\bembeddings='local'", "--embeddings local"),
    (r"\bchunk_size=(\d+|N)\b", r"--chunk-size \1"),
    (r"\bmax_chunk_tokens=(\d+|N)\b", r"--max-chunk-tokens \1"),
    (r"\bmax_chunk_tokens\b", "--max-chunk-tokens"),
    (r"\bload_files\(max_chars=\.\.\.\)", "--max-file-chars N"),
    (r"\bwithout vector_index\b", "without --vector-index"),
    (r"\bwithout analyzer\b", "without --language"),
    *((rf"\b{name}\b", flag_of(name)) for name in HierarchyOptions.model_fields),
    (r"\bcontextual=True\b", "--contextual"),
    (r"\bsummaries=True\b", "--summaries"),
    *((rf"\b{name}=\.\.\.", flag_of(name)) for name in IndexSpec.LLM_OPTIONS),
    (r"\btenant=\.\.\.", "--tenant T"),
    (r"\btenant_key=\.\.\.", "--tenant-key NAME"),
    (r"\btenant_header=\.\.\.", "--tenant-header NAME"),
    (r"\ba new location\b", "a new --out"),
    (r"\bas the location\b", "as --out"),
)
"""How the library writes a parameter (a regular expression) -> how the command line writes it."""

_COMPILED = tuple((re.compile(pattern), flag) for pattern, flag in SPELLINGS)


def in_flags(message: str) -> str:
    """``message`` with each Python parameter of :data:`SPELLINGS` written as its command-line flag."""
    for pattern, flag in _COMPILED:
        message = pattern.sub(flag, message)
    return message
