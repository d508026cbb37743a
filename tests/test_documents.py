"""The compact document store of the in-process engine: bytes in, the same Documents out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionIndex
from langchain_fusion.errors import FusionError
from langchain_fusion.stores.local.documents import MISSING, UNMATCHABLE, DocumentBlock
from tests.helpers.embeddings import HashingEmbeddings

DOCS = [
    Document(id="a", page_content="plain text", metadata={"source": "a.pdf", "page": 1}),
    Document(id="b", page_content="", metadata={}),
    Document(id="c", page_content="ünïcödé — 数据 🙂\nsecond line\u2028", metadata={"tags": ["x", "y"], "n": {"k": 1}}),
    Document(id="d", page_content="x" * 5000, metadata={"source": "a.pdf", "page": 2.0, "flag": True}),
    Document(id="e\nf", page_content="id with a line break", metadata={"source": None, "page": "1"}),
]


def same(got: list[Document], expected: list[Document]) -> None:
    assert [(d.id, d.page_content, d.metadata) for d in got] == [(d.id, d.page_content, d.metadata) for d in expected]


class TestBlock:
    def test_round_trip(self) -> None:
        block = DocumentBlock.from_documents(DOCS)
        assert len(block) == 5 and tuple(block.ids) == ("a", "b", "c", "d", "e\nf")
        same([block.document(i) for i in range(5)], DOCS)
        assert block.nbytes < 6000 + 16 * 6 * 2

    def test_documents_are_fresh_copies(self) -> None:
        block = DocumentBlock.from_documents(DOCS)
        first = block.document(0)
        first.metadata["source"] = "changed"
        assert block.document(0).metadata["source"] == "a.pdf"
        assert DOCS[0].metadata["source"] == "a.pdf"

    @pytest.mark.parametrize(
        "keep", [[True] * 5, [False] * 5, [True, False, True, False, True], [False, True, True, False, False]]
    )
    def test_kept_rows(self, keep: list[bool]) -> None:
        block = DocumentBlock.from_documents(DOCS).kept(np.array(keep))
        same([block.document(i) for i in range(len(block))], [d for d, k in zip(DOCS, keep, strict=True) if k])

    def test_concatenated(self) -> None:
        block = DocumentBlock.concatenated(
            [DocumentBlock.from_documents(DOCS[:2]), DocumentBlock.empty(), DocumentBlock.from_documents(DOCS[2:])]
        )
        same([block.document(i) for i in range(len(block))], DOCS)

    def test_unserialisable_metadata(self) -> None:
        with pytest.raises(FusionError, match=r"document 'x' has metadata that is not JSON-serialisable \(object"):
            DocumentBlock.from_documents([Document(id="x", page_content="t", metadata={"o": object()})])


class TestColumns:
    def test_codes(self) -> None:
        column = DocumentBlock.from_documents(DOCS).column("page")
        assert column.codes.tolist() == [0, MISSING, MISSING, 1, 2]
        assert column.values == {1: 0, 2.0: 1, "1": 2}

    def test_equal_values_share_a_code_as_python_compares_them(self) -> None:
        docs = [Document(id=str(i), page_content="t", metadata={"v": v}) for i, v in enumerate([1, 1.0, True, "1"])]
        column = DocumentBlock.from_documents(docs).column("v")
        assert column.codes.tolist() == [0, 0, 0, 1]  # 1 == 1.0 == True, as a metadata filter compares them
        assert column.matching([1.0]).tolist() == [True, True, True, False]

    def test_unhashable_values_match_nothing(self) -> None:
        column = DocumentBlock.from_documents(DOCS).column("tags")
        assert column.codes.tolist()[2] == UNMATCHABLE
        assert not column.matching(["x"]).any()

    def test_built_once(self) -> None:
        block = DocumentBlock.from_documents(DOCS)
        assert block.column("source") is block.column("source")


def reference(spec: dict[str, Any], metadata: dict[str, Any]) -> bool:
    """The filter semantics the README documents: every key present and equal (a list: any of)."""
    for key, value in spec.items():
        if key not in metadata:
            return False
        actual = metadata[key]
        if isinstance(value, (list, tuple, set, frozenset)):
            try:
                if actual not in frozenset(value):
                    return False
            except TypeError:
                return False
        elif actual != value:
            return False
    return True


VALUES: list[Any] = [0, 1, 1.0, 2, True, False, None, "1", "a", "b", "", -3.5, [1], {"k": 1}]


class TestFiltersMatchTheReference:
    @pytest.mark.parametrize("seed", range(4))
    def test_random_metadata_and_filters(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        docs = []
        for i in range(300):
            metadata = {key: VALUES[int(rng.integers(len(VALUES)))] for key in ("x", "y") if rng.random() < 0.8}
            docs.append(Document(id=f"d{i}", page_content=f"text {i}", metadata=metadata))
        index = FusionIndex.from_documents(docs, HashingEmbeddings(8))
        index.delete([f"d{i}" for i in range(0, 300, 7)])
        index.add_documents(docs[:20])  # a second segment, and rows that came back
        live = {d.id: d.metadata for d in index.documents}
        scalars = [v for v in VALUES if not isinstance(v, (list, dict))]
        specs: list[dict[str, Any]] = [{"x": v} for v in scalars] + [
            {"x": [scalars[int(a)], scalars[int(b)]], "y": scalars[int(c)]}
            for a, b, c in rng.integers(len(scalars), size=(30, 3))
        ]
        for spec in specs:
            expected = sorted(doc_id for doc_id, metadata in live.items() if reference(spec, metadata))
            found = index.view().documents(index.view().select(_where(spec)))
            assert sorted(d.id for d in found) == expected, spec  # type: ignore[type-var]

    def test_callable_filters_see_each_rows_metadata(self) -> None:
        index = FusionIndex.from_documents(DOCS, HashingEmbeddings(8))
        found = index.view().documents(index.view().select(_where(lambda m: m.get("source") == "a.pdf")))
        assert [d.id for d in found] == ["a", "d"]


def _where(spec: Any) -> Any:
    from langchain_fusion.stores.base import Where

    return Where(metadata=spec)
