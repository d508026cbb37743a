"""langchain_fusion.testing: the store contract as a kit a third-party store runs (ours run it in test_store_*.py).

The suite can fail: a store that breaks the contract fails the check of what it breaks, with the values
compared in the message (its modules' asserts are rewritten, as a test file's).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import langchain_fusion.testing as kit
from langchain_fusion import Analyzer, BM25Params, LocalStore
from langchain_fusion.stores.base import FusionStore


def test_all_is_pinned() -> None:
    assert sorted(kit.__all__) == [
        "CJK",
        "HashingEmbeddings",
        "Language",
        "Reference",
        "StoreContract",
        "WORDS",
        "assert_same",
        "corpus",
        "results",
    ]
    for name in kit.__all__:
        assert getattr(kit, name).__doc__, name


class _Forgetful(LocalStore):
    """A store whose delete removes nothing (and says so)."""

    def delete(self, ids: Sequence[str]) -> int:
        return 0


class _OwnParameters(LocalStore):
    """A store that scores BM25 with parameters of its own, not those it is given."""

    def __init__(self, analyzer: Analyzer, bm25_params: BM25Params) -> None:
        super().__init__(analyzer, BM25Params(k1=2.0, b=0.9))


class _BrokenContract(kit.StoreContract):
    store: type[LocalStore] = _Forgetful

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        return self.store(analyzer, bm25_params)


class TestAStoreThatBreaksItFails:
    def test_deletes_that_delete_nothing(self) -> None:
        with pytest.raises(AssertionError) as failed:
            _BrokenContract().test_deleted_documents_are_gone_everywhere()
        assert "assert 40 == 30" in str(failed.value)  # rewritten: the values, not a bare AssertionError

    def test_bm25_with_other_parameters(self) -> None:
        wrong = _BrokenContract()
        wrong.store = _OwnParameters
        with pytest.raises(AssertionError, match="Not equal to tolerance"):
            wrong.test_fused_results_equal_the_reference("weighted")

    def test_a_store_that_is_right_passes_the_same_checks(self) -> None:
        right = _BrokenContract()
        right.store = LocalStore
        right.test_deleted_documents_are_gone_everywhere()
        right.test_fused_results_equal_the_reference("weighted")
