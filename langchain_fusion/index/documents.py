"""Documents as given -> documents to index: copies with ids, checked to be savable, ids unique in the batch."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.metadata import MAX_ID_CHARS, MAX_METADATA_DEPTH, content_id


def prepared_documents(
    documents: Iterable[Document], ids: Sequence[str] | None = None, tenant_key: str | None = None
) -> list[Document]:
    """Copies with ids (given, own, or content hashes); FusionError on ids repeated in the batch or too long.

    With ``tenant_key`` (a tenant-keyed index) ids are scoped by tenant: one id may appear once per tenant.
    The copies are shallow: their metadata is the caller's, which stores only read (and
    serialise) and never change.
    """
    new_docs = [doc.model_copy() for doc in documents]
    if ids is not None:
        if isinstance(ids, str) or len(ids) != len(new_docs):
            raise InvalidParameterError(f"give one id per document: {len(new_docs)} documents, ids={ids!r}")
        for doc, doc_id in zip(new_docs, ids, strict=True):
            if not isinstance(doc_id, str) or not doc_id:
                raise InvalidParameterError(f"ids must be non-empty strings; got {doc_id!r}")
            doc.id = doc_id
    seen: dict[tuple[Any, str], int] = {}
    for position, doc in enumerate(new_docs):
        for where, value in (("id", doc.id), ("page_content", doc.page_content), ("metadata", doc.metadata)):
            try:
                bad = lone_surrogate(value)
            except NestedTooDeep:
                raise InvalidParameterError(
                    f"document {position} of this batch: its {where} nests mappings or lists more than "
                    f"{MAX_METADATA_DEPTH} levels deep (or contains itself), which cannot be saved; flatten it"
                ) from None
            if bad is not None:
                raise InvalidParameterError(
                    f"document {position} of this batch: its {where} holds a lone surrogate ({bad!r}), which is "
                    "not valid Unicode and cannot be saved; clean the text first (e.g. with "
                    "langchain_fusion.ingest.loading.valid_unicode)"
                )
        if doc.id is None:
            doc.id = content_id(doc)
        if len(doc.id) > MAX_ID_CHARS:
            raise InvalidParameterError(
                f"document {position} of this batch: its id has {len(doc.id):,} characters; ids are at most "
                f"{MAX_ID_CHARS} (Milvus's limit, kept on every store): give it a shorter id, e.g. a hash of this one"
            )
        scope = (repr(doc.metadata.get(tenant_key)) if tenant_key is not None else None, doc.id)
        if scope in seen:
            raise FusionError(
                f"duplicate document id {doc.id!r} (document {position} of this batch; also document "
                f"{seen[scope]}). Ids must be unique: give documents distinct ids or drop the duplicates."
            )
        seen[scope] = position
    return new_docs


class NestedTooDeep(Exception):
    """A value nests deeper than :data:`~langchain_fusion.metadata.MAX_METADATA_DEPTH` (or contains itself)."""


def lone_surrogate(value: Any, depth: int = 0) -> str | None:
    """The first lone surrogate in a string or in the strings of a nested mapping or sequence, if any.

    Raises :class:`NestedTooDeep` past :data:`~langchain_fusion.metadata.MAX_METADATA_DEPTH` levels, which
    is also where a mapping that contains itself ends up.
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return value[exc.start]
        return None
    if isinstance(value, Mapping):
        items: Iterable[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return None
    if depth >= MAX_METADATA_DEPTH:
        raise NestedTooDeep
    for item in items:
        found = lone_surrogate(item, depth + 1)
        if found is not None:
            return found
    return None


def plain_copy(doc: Document, without: str | None = None) -> Document:
    """A deep copy of ``doc`` without any score metadata added (what LangChain's vector-store searches return).

    ``without`` names a metadata key the copy leaves out (a tenant index's tenant key).
    """
    metadata = {key: value for key, value in doc.metadata.items() if key != without}
    return Document(id=doc.id, page_content=doc.page_content, metadata=copy.deepcopy(metadata))
