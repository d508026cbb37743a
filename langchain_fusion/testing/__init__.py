"""Test kits for code built on langchain-fusion, as langchain-tests is for LangChain integrations.

- :class:`StoreContract`: the suite every :class:`~langchain_fusion.stores.base.FusionStore`
  passes (the in-process store and Milvus do, in langchain-fusion's own tests). A third-party
  store proves itself by subclassing it::

      from langchain_fusion.testing import StoreContract

      class TestMyStore(StoreContract):
          def make_store(self, analyzer, bm25_params):
              return MyStore(analyzer=analyzer, bm25_params=bm25_params)

- :class:`HashingEmbeddings`: deterministic fake embeddings (no model, no network).
- :class:`Reference`, :func:`corpus`, :func:`results`, :func:`assert_same`: the brute-force
  search and random corpora the contract checks against, for tests of one's own.

Needs pytest (``pip install "langchain-fusion[testing]"``).
"""

from __future__ import annotations

from langchain_fusion.errors import MissingDependencyError

try:
    import pytest
except ImportError:  # pragma: no cover - the testing extra brings it
    raise MissingDependencyError(
        'langchain_fusion.testing needs pytest: pip install "langchain-fusion[testing]"'
    ) from None

# A failed check shows the values compared, as in a test file (imported after this, the modules are rewritten).
pytest.register_assert_rewrite("langchain_fusion.testing.reference", "langchain_fusion.testing.store_contract")

from langchain_fusion.testing.embeddings import HashingEmbeddings  # noqa: E402
from langchain_fusion.testing.reference import (  # noqa: E402
    CJK,
    WORDS,
    Language,
    Reference,
    assert_same,
    corpus,
    results,
)
from langchain_fusion.testing.store_contract import StoreContract  # noqa: E402

__all__ = [
    "CJK",
    "WORDS",
    "HashingEmbeddings",
    "Language",
    "Reference",
    "StoreContract",
    "assert_same",
    "corpus",
    "results",
]
