"""The record kept beside a collection (e.g. which files an ``index`` run indexed), one entry per row.

The record is a JSON object. It lives in a side collection, ``<collection>_fusion_record``, as
one row per *entry*: each value at depth :data:`ENTRY_DEPTH` (``files`` -> ``by_path`` -> one
file), and each shallower value that is not an object. An entry is written on its own
(:meth:`InfoRecord.write_entry`, e.g. as each file's chunks are written, so a killed run keeps what
it finished), and :meth:`InfoRecord.write` writes only the entries that changed since this store
read the record: two writers never overwrite or delete each other's entries. A value longer than
:data:`INFO_PIECE_CHARS` spans several rows of one upsert; a reader that finds them torn skips
that entry with a warning.

Collections made by 0.3.0 or earlier kept the whole record as one JSON text split over the rows of
``<collection>_fusion_info``: it is still read, and moved to the new side collection (the old
one dropped) on the first write.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.milvus import reads
from langchain_fusion.stores.milvus.expressions import literal
from langchain_fusion.stores.milvus.schema import create_loaded_collection
from langchain_fusion.stores.milvus.writes import BATCH

if TYPE_CHECKING:
    from langchain_fusion.stores.milvus.store import MilvusStore

logger = logging.getLogger(__name__)

RECORD_SUFFIX = "_fusion_record"
"""The side collection ``<collection>_fusion_record`` keeps the record, one entry per row."""

INFO_SUFFIX = "_fusion_info"
"""The side collection of collections made by 0.3.0 or earlier (the record as one JSON text over rows)."""

INFO_PIECE_CHARS = 16000
"""Characters of an entry's JSON per row (a VARCHAR holds 65,535 bytes)."""

ENTRY_DEPTH = 3
"""How deep the record is split into entries (``files`` -> ``by_path`` -> a file is one entry)."""

Path = tuple[str, ...]
"""Where an entry sits in the record: its keys from the top."""


def entries(record: Mapping[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """``record`` as entries: each value at depth :data:`ENTRY_DEPTH`, and shallower ones that are no object.

    An empty object above that depth is an entry of its own (so ``{"files": {}}`` reads back).
    """
    out: dict[Path, Any] = {}
    for key, value in record.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value and len(path) < ENTRY_DEPTH:
            out.update(entries(value, path))
        else:
            out[path] = value
    return out


def nested(found: Mapping[Path, Any]) -> dict[str, Any]:
    """The record made of these entries (a deeper entry wins over a shallower one that is no object)."""
    out: dict[str, Any] = {}
    for path, value in sorted(found.items(), key=lambda item: len(item[0])):
        node = out
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        if not (value == {} and isinstance(node.get(path[-1]), dict)):
            node[path[-1]] = value
    return out


def _entry_id(path: Path) -> str:
    return hashlib.sha256(json.dumps(list(path)).encode("utf-8")).hexdigest()[:32]


def _rows(path: Path, value: Any) -> list[dict[str, Any]]:
    """The rows of one entry: its JSON in pieces, each row knowing how many there are."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FusionError(f"the info record must be JSON-serialisable ({exc})") from None
    pieces = [text[i : i + INFO_PIECE_CHARS] for i in range(0, len(text), INFO_PIECE_CHARS)]
    entry = _entry_id(path)
    where = json.dumps(list(path), ensure_ascii=False)
    return [
        {
            "id": f"{entry}:{n}",
            "entry": entry,
            "part": n,
            "parts": len(pieces),
            "path": where,
            "value": piece,
            "unused": [1.0, 0.0],
        }
        for n, piece in enumerate(pieces)
    ]


class InfoRecord:
    """The record of one store's collection; remembers what it last read or wrote, to write only changes."""

    def __init__(self, store: MilvusStore) -> None:
        """The record beside ``store``'s collection."""
        self.store = store
        self.known: dict[Path, Any] | None = None
        """The entries as this store last read or wrote them (None before it read them)."""

    @property
    def name(self) -> str:
        """The side collection."""
        return self.store.collection_name + RECORD_SUFFIX

    def _exists(self, name: str) -> bool:
        return bool(self.store.call("has_collection", collection_name=name))

    def read(self) -> dict[str, Any]:
        """The record (``{}`` if none; an unreadable entry is skipped with a warning)."""
        if self._exists(self.name):
            found = self._read_entries()
        elif self._exists(self.store.collection_name + INFO_SUFFIX):
            found = entries(self._read_before_entries())
        else:
            found = {}
        self.known = dict(found)
        return nested(found)

    def _read_entries(self) -> dict[Path, Any]:
        fields = ["entry", "part", "parts", "path", "value"]
        parts: dict[str, dict[int, Mapping[str, Any]]] = {}
        for page in reads.pages(self.store, "", fields, collection=self.name):
            for row in page:
                parts.setdefault(str(row["entry"]), {})[int(row["part"])] = row
        found: dict[Path, Any] = {}
        for entry, rows in parts.items():
            try:
                count = int(rows[0]["parts"])
                pieces = [rows[n] for n in range(count)]
                if any(int(row["parts"]) != count for row in pieces):
                    raise ValueError("pieces of two writes")
                found[tuple(json.loads(pieces[0]["path"]))] = json.loads("".join(row["value"] for row in pieces))
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("entry %s of the record %r is unreadable (%s); skipping it", entry, self.name, exc)
        return found

    def _read_before_entries(self) -> dict[str, Any]:
        """The record of a collection made by 0.3.0 or earlier: one JSON text over the rows of ``_fusion_info``."""
        name = self.store.collection_name + INFO_SUFFIX
        rows = [row for page in reads.pages(self.store, "", ["piece"], collection=name) for row in page]
        try:
            pieces = sorted((int(row["id"]), row["piece"]) for row in rows)
            if [n for n, _ in pieces] != list(range(len(pieces))):
                raise ValueError("missing pieces")
            record = json.loads("".join(piece for _, piece in pieces)) if pieces else {}
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("the info record of %r is unreadable (%s); starting from an empty one", name, exc)
            return {}
        return record

    def write(self, record: Mapping[str, Any]) -> None:
        """Make the record ``record``: the entries that changed since this store read it, and only those.

        An entry another writer added since is kept; one this store read and ``record`` lacks is deleted.
        """
        known = self._ready()
        wanted = entries(record)
        self._put({path: value for path, value in wanted.items() if path not in known or known[path] != value})
        self._drop([path for path in known if path not in wanted])

    def write_entry(self, path: Path, value: Any) -> None:
        """Write the entries at ``path`` now (``None``: delete them), whatever else the record holds."""
        known = self._ready()
        below = [p for p in known if p[: len(path)] == path]
        if value is None:
            self._drop(list(dict.fromkeys([path, *below])))  # also an entry another writer made since
            return
        nested_value = isinstance(value, Mapping) and value and len(path) < ENTRY_DEPTH
        new = entries(value, path) if nested_value else {path: value}
        self._put({p: v for p, v in new.items() if p not in known or known[p] != v})
        self._drop([p for p in below if p not in new])

    def _ready(self) -> dict[Path, Any]:
        """What this store knows of the record, the side collection made (and an older record moved) first."""
        if self.known is None:
            self.read()
        assert self.known is not None
        if not self._exists(self.name):
            self._create()
            before = dict(self.known)
            self.known = {}
            self._put(before)
            old = self.store.collection_name + INFO_SUFFIX
            if self._exists(old):
                self.store.call("drop_collection", collection_name=old)
        return self.known

    def _put(self, changed: Mapping[Path, Any]) -> None:
        assert self.known is not None
        rows = {path: _rows(path, value) for path, value in changed.items()}
        flat = [row for written in rows.values() for row in written]
        for start in range(0, len(flat), BATCH):
            self.store.call("upsert", collection_name=self.name, data=flat[start : start + BATCH])
        for path, value in changed.items():
            parts = len(rows[path])
            if path in self.known and len(_rows(path, self.known[path])) > parts:
                stale = f"entry == {literal(_entry_id(path))} and part >= {parts}"
                self.store.call("delete", collection_name=self.name, filter=stale)
            self.known[path] = value

    def _drop(self, paths: list[Path]) -> None:
        assert self.known is not None
        for chunk in reads.chunks([_entry_id(path) for path in paths]):
            self.store.call("delete", collection_name=self.name, filter=f"entry in [{','.join(map(literal, chunk))}]")
        for path in paths:
            self.known.pop(path, None)

    def _create(self) -> None:
        from pymilvus import DataType

        schema = self.store.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("entry", DataType.VARCHAR, max_length=64)
        schema.add_field("part", DataType.INT64)
        schema.add_field("parts", DataType.INT64)
        schema.add_field("path", DataType.VARCHAR, max_length=65535)
        schema.add_field("value", DataType.VARCHAR, max_length=65535)
        schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs a vector field
        index = self.store.client.prepare_index_params()
        index.add_index(field_name="unused", index_type="FLAT", metric_type="IP")
        create_loaded_collection(self.store.call, self.name, schema, index, self.store.timeout)


def side_collections(collection_name: str) -> list[str]:
    """The side collections a collection may have (dropped with it)."""
    return [collection_name + RECORD_SUFFIX, collection_name + INFO_SUFFIX]
