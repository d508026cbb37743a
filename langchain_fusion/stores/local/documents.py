"""The documents of the in-process store, kept compactly: ids, texts and metadata as byte arrays.

A :class:`DocumentBlock` holds the documents of one segment of rows. Texts are stored as their
UTF-8 bytes and metadata as compact JSON, each concatenated into one byte array with an offset
per row, so a million chunks cost their bytes plus 16 bytes of offsets each instead of a Python
``Document`` apiece. A ``Document`` is materialised only for a row that is returned. A block
read from a saved folder maps its files when they are large (see
:mod:`~langchain_fusion.stores.local.mapped`), so loading keeps no second copy of their text.

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

Bytes = NDArray[np.uint8]
Offsets = NDArray[np.int64]

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


def _packed(parts: Sequence[bytes]) -> tuple[Bytes, Offsets]:
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets


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

    ids: tuple[str, ...]
    """Document id of each row."""
    text_bytes: Bytes
    """UTF-8 bytes of every row's ``page_content``, concatenated."""
    text_offsets: Offsets
    """Row ``i``'s text is ``text_bytes[text_offsets[i]:text_offsets[i + 1]]``."""
    metadata_bytes: Bytes
    """Every row's metadata as compact JSON followed by a newline, concatenated."""
    metadata_offsets: Offsets
    """Row ``i``'s metadata is ``metadata_bytes[metadata_offsets[i]:metadata_offsets[i + 1]]``."""
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
        texts = [doc.page_content.encode("utf-8") for doc in documents]
        metadata = [encode_metadata(doc.metadata, doc.id) + b"\n" for doc in documents]
        text_bytes, text_offsets = _packed(texts)
        metadata_bytes, metadata_offsets = _packed(metadata)
        return cls(tuple(doc.id or "" for doc in documents), text_bytes, text_offsets, metadata_bytes, metadata_offsets)

    @classmethod
    def empty(cls) -> DocumentBlock:
        """A block of no rows."""
        return cls.from_documents([])

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Bytes of texts, metadata and offsets (the ids are Python strings beside them)."""
        arrays = (self.text_bytes, self.text_offsets, self.metadata_bytes, self.metadata_offsets)
        return int(sum(a.nbytes for a in arrays))

    def columns(self) -> list[Column]:
        """The metadata columns read so far (kept for filters)."""
        return list(self._columns.values())

    # --- reading ---------------------------------------------------------------------------

    def text(self, row: int) -> str:
        """The ``page_content`` of local row ``row``."""
        raw = self.text_bytes[self.text_offsets[row] : self.text_offsets[row + 1]].tobytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IndexFormatError(
                f"the text of document {self.ids[row]!r} is not valid UTF-8; rebuild the index"
            ) from None

    def metadata(self, row: int) -> dict[str, Any]:
        """A fresh dict of local row ``row``'s metadata."""
        raw = self.metadata_bytes[self.metadata_offsets[row] : self.metadata_offsets[row + 1]].tobytes()
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
        return (self.metadata(row) for row in range(len(self)))

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
        """One block holding the rows of ``blocks`` in order."""
        if len(blocks) == 1:
            return blocks[0]
        return cls(
            tuple(i for block in blocks for i in block.ids),
            *_concatenated([(b.text_bytes, b.text_offsets) for b in blocks]),
            *_concatenated([(b.metadata_bytes, b.metadata_offsets) for b in blocks]),
        )

    def kept(self, keep: NDArray[np.bool_]) -> DocumentBlock:
        """A block of the rows flagged in ``keep``, in order (their bytes copied, a run of rows at a time)."""
        if keep.all():
            return self
        return DocumentBlock(
            tuple(i for i, alive in zip(self.ids, keep.tolist(), strict=True) if alive),
            *_kept_ranges(self.text_bytes, self.text_offsets, keep),
            *_kept_ranges(self.metadata_bytes, self.metadata_offsets, keep),
        )


def _concatenated(parts: Sequence[tuple[Bytes, Offsets]]) -> tuple[Bytes, Offsets]:
    data = np.concatenate([np.asarray(b) for b, _ in parts]) if parts else np.zeros(0, np.uint8)
    shifts = np.cumsum([0] + [int(o[-1]) for _, o in parts[:-1]])
    offsets = np.concatenate([[0], *[np.asarray(o[1:]) + shift for (_, o), shift in zip(parts, shifts, strict=True)]])
    return data.astype(np.uint8, copy=False), offsets.astype(np.int64)


def _kept_ranges(data: Bytes, offsets: Offsets, keep: NDArray[np.bool_]) -> tuple[Bytes, Offsets]:
    """The bytes and new offsets of the kept rows: runs of consecutive kept rows are copied as one range."""
    lengths = np.diff(offsets)[keep]
    new_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], keep, [False])).astype(np.int8)))
    cursor = 0
    for first, stop in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        lo, hi = int(offsets[first]), int(offsets[stop])
        out[cursor : cursor + hi - lo] = data[lo:hi]
        cursor += hi - lo
    return out, new_offsets
