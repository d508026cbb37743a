"""The documents of the in-process store, kept compactly: ids, texts and metadata as bytes.

A :class:`DocumentBlock` holds the documents of one segment of rows. Ids are packed UTF-8 with
an offset per row, and found by id through sorted hashes (:mod:`~langchain_fusion.stores.local.ids`).
Texts (UTF-8) and metadata (compact JSON) built in process are kept in zstd frames of consecutive
rows (:mod:`~langchain_fusion.stores.local.frames`: a chunk's text about 2x smaller, metadata
15x), so a million chunks cost a fraction of their bytes plus some 20 bytes of offsets each
instead of a Python ``Document`` apiece. A ``Document`` is materialised only for a row that is
returned (one frame decompressed, or found among the last few read). A block read from a saved
folder maps its plain text and metadata files when they are large (see
:mod:`~langchain_fusion.stores.local.mapped`), so loading keeps no second copy of their text;
blocks merged or compacted later are compressed.

Metadata filters need one key across every row: :meth:`DocumentBlock.column` parses the
block's metadata once per key and keeps each value as a small integer code, so a mapping
filter costs a vectorised comparison per query.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError, IndexFormatError
from langchain_fusion.stores.local import frames
from langchain_fusion.stores.local.frames import METADATA_FRAME_BYTES, TEXT_FRAME_BYTES, CompressedRows
from langchain_fusion.stores.local.ids import PackedIds
from langchain_fusion.stores.local.packed import StoredRows

MISSING = -1
"""Column code of a row whose metadata lacks the key."""
UNMATCHABLE = -2
"""Column code of a value no filter can equal (a list or an object)."""


def _json_default(value: Any) -> Any:
    """NumPy scalars become Python numbers; anything else is not metadata a folder can hold."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def encode_metadata(metadata: Mapping[str, Any], doc_id: str | None) -> bytes:
    """One row's metadata as compact UTF-8 JSON; a FusionError naming the document if it cannot be."""
    try:
        return json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), default=_json_default).encode()
    except (TypeError, ValueError) as exc:
        raise FusionError(
            f"document {doc_id!r} has metadata that is not JSON-serialisable ({exc}); convert it to strings, "
            "numbers, lists or dicts before indexing (e.g. dates with .isoformat())"
        ) from None


@dataclass(frozen=True, eq=False)
class Column:
    """One metadata key across the rows of a block: a code per row and the distinct values."""

    codes: NDArray[np.int32]
    """Per row: the position of its value in ``values``, or :data:`MISSING` / :data:`UNMATCHABLE`."""
    values: dict[Any, int]
    """Each distinct (hashable) value -> its code. Equal values share a code (``1 == 1.0``)."""

    def matching(self, wanted: Sequence[Any]) -> NDArray[np.bool_]:
        """Rows whose value equals one of ``wanted`` (scalars)."""
        codes = []
        for value in wanted:
            try:
                code = self.values.get(value)
            except TypeError:  # an unhashable filter value equals no stored scalar
                code = None
            if code is not None:
                codes.append(code)
        if not codes:
            return np.zeros(self.codes.size, dtype=bool)
        found: NDArray[np.bool_] = (
            self.codes == codes[0] if len(codes) == 1 else np.isin(self.codes, np.asarray(codes, dtype=np.int32))
        )
        return found


@dataclass(frozen=True, eq=False)
class DocumentBlock:
    """The documents of consecutive rows (see the module docstring); immutable once built."""

    ids: PackedIds
    """Document id of each row."""
    texts: StoredRows
    """UTF-8 bytes of each row's ``page_content`` (compressed in memory, or a loaded folder's mapped file)."""
    metadata_rows: StoredRows
    """Each row's metadata as compact JSON followed by a newline."""
    _columns: dict[str, Column] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """The block for ``pickle`` and ``copy.deepcopy``: its rows, without the columns read from them or the lock."""
        return {name: value for name, value in self.__dict__.items() if name not in ("_columns", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _columns={}, _lock=threading.Lock())

    @classmethod
    def from_documents(cls, documents: Sequence[Document]) -> DocumentBlock:
        """A block of ``documents`` (each must have an id); FusionError for metadata JSON cannot hold."""
        texts = CompressedRows.of((doc.page_content.encode("utf-8") for doc in documents), TEXT_FRAME_BYTES)
        metadata = CompressedRows.of(
            (encode_metadata(doc.metadata, doc.id) + b"\n" for doc in documents), METADATA_FRAME_BYTES
        )
        return cls(PackedIds.of([doc.id or "" for doc in documents]), texts, metadata)

    @classmethod
    def empty(cls) -> DocumentBlock:
        """A block of no rows."""
        return cls.from_documents([])

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Bytes of texts, metadata and their offsets (the ids are counted apart: :attr:`PackedIds.nbytes`)."""
        return int(self.texts.nbytes + self.metadata_rows.nbytes)

    def columns(self) -> list[Column]:
        """The metadata columns read so far (kept for filters)."""
        return list(self._columns.values())

    # --- reading ---------------------------------------------------------------------------

    def text(self, row: int) -> str:
        """The ``page_content`` of local row ``row``."""
        raw = self.texts.row(row)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IndexFormatError(
                f"the text of document {self.ids[row]!r} is not valid UTF-8; rebuild the index"
            ) from None

    def metadata(self, row: int) -> dict[str, Any]:
        """A fresh dict of local row ``row``'s metadata."""
        return self._parsed(self.metadata_rows.row(row), row)

    def _parsed(self, raw: bytes, row: int) -> dict[str, Any]:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            raise IndexFormatError(
                f"the metadata of document {self.ids[row]!r} is not a JSON object; rebuild the index"
            )
        return value

    def document(self, row: int) -> Document:
        """A new ``Document`` for local row ``row``."""
        return Document(id=self.ids[row], page_content=self.text(row), metadata=self.metadata(row))

    def iter_metadata(self) -> Iterator[dict[str, Any]]:
        """Every row's metadata, in row order."""
        return (self._parsed(raw, row) for row, raw in enumerate(self.metadata_rows))

    def column(self, key: str) -> Column:
        """The values of metadata ``key`` across the rows, parsed once per block and kept."""
        found = self._columns.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._columns.get(key)
            if found is None:
                found = self._columns[key] = self._build_column(key)
        return found

    def _build_column(self, key: str) -> Column:
        codes = np.empty(len(self), dtype=np.int32)
        values: dict[Any, int] = {}
        for row, metadata in enumerate(self.iter_metadata()):
            if key not in metadata:
                codes[row] = MISSING
                continue
            value = metadata[key]
            try:
                codes[row] = values.setdefault(value, len(values))
            except TypeError:  # lists and objects are unhashable, and equal no filter value
                codes[row] = UNMATCHABLE
        return Column(codes=codes, values=values)

    # --- building new blocks -----------------------------------------------------------------

    @classmethod
    def concatenated(cls, blocks: Sequence[DocumentBlock]) -> DocumentBlock:
        """One block holding the rows of ``blocks`` in order (texts and metadata compressed)."""
        if len(blocks) <= 1:
            return blocks[0] if blocks else cls.empty()
        return cls(
            blocks[0].ids.concatenated([b.ids for b in blocks[1:]]),
            frames.joined([b.texts for b in blocks], TEXT_FRAME_BYTES),
            frames.joined([b.metadata_rows for b in blocks], METADATA_FRAME_BYTES),
        )

    def kept(self, keep: NDArray[np.bool_]) -> DocumentBlock:
        """A block of the rows flagged in ``keep``, in order (texts and metadata compressed)."""
        if keep.all():
            return self
        return DocumentBlock(
            self.ids.kept(keep),
            frames.kept(self.texts, keep, TEXT_FRAME_BYTES),
            frames.kept(self.metadata_rows, keep, METADATA_FRAME_BYTES),
        )
