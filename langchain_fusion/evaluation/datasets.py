"""Evaluation datasets: BEIR folders and small labelled query sets.

A dataset is a corpus (Documents whose ``id`` is the corpus id), queries, and graded
relevance judgements (qrels) mapping each query id to ``{document id: grade}``.
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.errors import FusionError
from langchain_fusion.evaluation.files import parse_json, read_text

Qrels = dict[str, dict[str, int]]
"""Query id -> {document id: relevance grade (> 0 means relevant)}."""

TITLE_KEY = "title"
"""Metadata key holding a BEIR record's title."""


@dataclass
class EvalDataset:
    """Queries with relevance judgements, and optionally the corpus they refer to."""

    name: str
    """A short name for reports."""
    queries: dict[str, str]
    """Query id -> query text (only queries that have judgements)."""
    qrels: Qrels
    """Relevance judgements per query id."""
    corpus: list[Document] = field(default_factory=list)
    """The documents to index (BEIR); empty for sets resolved against an existing index."""
    kinds: dict[str, str] = field(default_factory=dict)
    """Query id -> the kind of query its label gives (e.g. ``keyword``, ``paraphrase``, ``mixed``).

    Only queries whose label has a ``kind`` appear; reports break results down by it
    (:meth:`~langchain_fusion.evaluation.harness.Report.by_kind`).
    """
    no_answer: dict[str, str] = field(default_factory=dict)
    """Query id -> text of queries the corpus does not answer (a good retriever returns nothing for them).

    They are not in ``queries`` and take no part in the metrics; see
    :func:`~langchain_fusion.evaluation.harness.sweep_floors`."""
    corpus_ids: frozenset[str] = frozenset()
    """The ids of the documents the labels were resolved against (:func:`load_labelled`); empty when unknown.

    A retrieved document whose id is not among them cannot be one the labels name (it comes from
    another index, or another chunking): the harness counts it as not relevant and says so."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FusionError(f"{path} is missing; a BEIR folder has corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    records = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise FusionError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
                    except RecursionError:
                        raise FusionError(f"{path}, line {number}: not valid JSON (nested too deeply)") from None
                    if not (
                        isinstance(record, dict)
                        and isinstance(record.get("_id"), str | int)
                        and isinstance(record.get("text"), str | None)
                    ):
                        raise FusionError(f"{path}, line {number}: expected an object with an '_id' and a 'text'")
                    records.append(record)
    except UnicodeDecodeError:
        raise FusionError(f"{path}: not UTF-8 text") from None
    return records


def beir_text(title: str, text: str) -> str:
    """The text indexed for a BEIR record: the title, a blank line, then the body."""
    return f"{title}\n\n{text}" if title else text


def load_beir(folder: str | Path, split: str = "test", *, include_title: bool = True) -> EvalDataset:
    """Load a BEIR-format folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

    Each corpus record becomes one Document with ``id`` = its ``_id`` and ``source`` = that
    id; with ``include_title`` the title is prepended to the text (and kept in metadata).
    Only queries with judgements in the split are kept.
    """
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise FusionError(f"{qrels_path} is missing; splits available: {', '.join(available) or 'none'}")
    qrels: Qrels = {}
    with qrels_path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            try:
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
            except (KeyError, ValueError, TypeError):
                raise FusionError(f"{qrels_path}: expected columns query-id, corpus-id, score") from None
    queries = {
        str(rec["_id"]): rec.get("text") or ""
        for rec in _read_jsonl(folder / "queries.jsonl")
        if str(rec["_id"]) in qrels
    }
    corpus = []
    for rec in _read_jsonl(folder / "corpus.jsonl"):
        doc_id, title = str(rec["_id"]), rec.get("title") or ""
        text = beir_text(title, rec.get("text") or "") if include_title else rec.get("text") or ""
        corpus.append(Document(id=doc_id, page_content=text, metadata={keys.SOURCE: doc_id, TITLE_KEY: title}))
    return EvalDataset(
        name=f"{folder.name}/{split}", queries=queries, qrels={q: qrels[q] for q in queries}, corpus=corpus
    )


def _is_relevant(record: dict[str, Any], doc: Document) -> bool:
    source = Path(str(doc.metadata.get(keys.SOURCE, ""))).name
    for place in record.get("relevant") or []:
        if place.get("id") is not None:
            if place["id"] == doc.id:
                return True
        elif (
            place.get("source") is not None
            and Path(str(place["source"])).name == source
            and (place.get("page") is None or place["page"] == doc.metadata.get(keys.PAGE))
        ):
            return True
    answer = record.get("answer")
    if record.get("match_answer") and answer:
        return " ".join(answer.split()).lower() in " ".join(doc.page_content.split()).lower()
    return False


LABELS_EXPECTED = "a labelled set: a JSON list of {'query': ..., 'relevant': [...]} records, or a CSV file"
"""What a labelled set is, as errors say it."""
QUERIES_EXPECTED = "a query file: a JSON list of queries, or one query per line"
"""What a query file is, as errors say it."""


def _read_labels_text(path: Path) -> str:
    return read_text(path, "labelled file", f"{path} is missing", LABELS_EXPECTED)


def _csv_page(path: Path, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise FusionError(f"{path}: 'page' {value!r:.40} is not a whole number") from None


def _read_labelled_records(path: Path) -> list[dict[str, Any]]:
    text = _read_labels_text(path)
    if path.suffix.lower() == ".csv":
        grouped: dict[str, dict[str, Any]] = {}
        try:
            with io.StringIO(text, newline="") as handle:
                for row in csv.DictReader(handle):
                    if not row.get("query"):
                        raise FusionError(f"{path}: a CSV labelled set needs a non-empty 'query' column")
                    record = grouped.setdefault(
                        row["query"],
                        {"id": row.get("id") or None, "query": row["query"], "kind": row.get("kind") or None},
                    )
                    record.setdefault("relevant", []).append(
                        {
                            "id": row.get("chunk_id") or None,
                            "source": row.get("source") or None,
                            "page": _csv_page(path, row["page"]) if row.get("page") else None,
                        }
                    )
        except csv.Error as exc:
            raise FusionError(f"{path}: not a readable CSV file ({exc})") from None
        return list(grouped.values())
    records = parse_json(text, path)
    if not isinstance(records, list):
        raise FusionError(f"{path}: expected a JSON list of {{'query': ..., 'relevant': [...]}} records")
    return records


def _check_record(path: Path, number: int, record: Any) -> None:
    """A one-line FusionError unless ``record`` has the documented shape (see :func:`load_labelled`)."""
    if not isinstance(record, dict) or not isinstance(record.get("query"), str) or not record["query"].strip():
        raise FusionError(f"{path}: record {number} has no 'query' (a non-empty string)")
    where = f"{path}: record {number}"
    record_id = record.get("id")
    if record_id is not None and (isinstance(record_id, bool) or not isinstance(record_id, str | int)):
        raise FusionError(f"{where} has 'id' {record_id!r:.40}; expected a string or a whole number")
    answer = record.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise FusionError(f"{where} has 'answer' {answer!r:.40}; expected text")
    relevant = record.get("relevant")
    if relevant is None:
        return
    if not isinstance(relevant, list):
        raise FusionError(f"{where} has 'relevant' {relevant!r:.40}; expected a list of places")
    for place in relevant:
        if not isinstance(place, dict) or not any(place.get(name) is not None for name in ("id", "source")):
            raise FusionError(
                f"{where} has the relevant place {place!r:.40}; expected {{'source': FILE, 'page': N}} or {{'id': ID}}"
            )
        for name in ("id", "source"):
            if place.get(name) is not None and not isinstance(place[name], str):
                raise FusionError(f"{where} has a relevant place whose {name!r} is {place[name]!r:.40}; expected text")
        page = place.get("page")
        if page is not None and (isinstance(page, bool) or not isinstance(page, int)):
            raise FusionError(f"{where} has a relevant place whose 'page' is {page!r:.40}; expected a whole number")


def load_labelled(path: str | Path, documents: Sequence[Document]) -> EvalDataset:
    """Load a labelled query set (JSON or CSV) and resolve it against indexed ``documents``.

    JSON: a list of records with ``query``, an optional ``id``, an optional ``kind`` (a short
    label such as ``keyword`` or ``paraphrase`` that reports break results down by), and
    ``relevant``: a list of ``{"source": file name or path, "page": n}`` (page optional) or
    ``{"id": chunk id}``; or ``"answer": text`` with ``"match_answer": true`` to count every
    chunk containing that text as relevant; or ``"no_answer": true`` for a query the corpus
    does not answer (kept in :attr:`EvalDataset.no_answer`). Other keys (an ``answer`` kept for
    people) are ignored. CSV: columns ``id, query, source, page, chunk_id`` and optionally
    ``kind``, one row per relevant place. Every chunk at a relevant place is relevant (grade 1).
    """
    path = Path(path)
    queries: dict[str, str] = {}
    qrels: Qrels = {}
    kinds: dict[str, str] = {}
    no_answer: dict[str, str] = {}
    unmatched = []
    for number, record in enumerate(_read_labelled_records(path), 1):
        _check_record(path, number, record)
        if record.get("no_answer") is True:
            if record.get("relevant") or record.get("answer"):
                raise FusionError(f"{path}: record {number} is marked no_answer but names relevant places or an answer")
            no_answer[str(record.get("id") or f"q{number}")] = record["query"]
            continue
        if not record.get("relevant") and not (record.get("match_answer") and record.get("answer")):
            raise FusionError(f"{path}: record {number} has neither 'relevant' places nor an answer to match")
        kind = record.get("kind")
        if kind is not None and not (isinstance(kind, str) and kind.strip()):
            raise FusionError(f"{path}: record {number} has 'kind' {kind!r:.40}; expected a non-empty string or none")
        query_id = str(record.get("id") or f"q{number}")
        if kind is not None:
            kinds[query_id] = kind.strip()
        relevant = {doc.id: 1 for doc in documents if doc.id is not None and _is_relevant(record, doc)}
        if not relevant:
            unmatched.append(query_id)
            continue
        queries[query_id], qrels[query_id] = record["query"], relevant
    if unmatched and not queries:
        raise FusionError(f"{path}: no label matches a chunk of this index; is it the right index?")
    if unmatched:
        warnings.warn(
            f"{path}: {len(unmatched)} queries match no indexed chunk and are left out: {', '.join(unmatched[:10])}",
            stacklevel=2,
        )
    return EvalDataset(
        name=path.stem,
        queries=queries,
        qrels=qrels,
        kinds={q: k for q, k in kinds.items() if q in queries},
        no_answer=no_answer,
        corpus_ids=frozenset(doc.id for doc in documents if doc.id is not None),
    )


def load_queries(path: str | Path) -> dict[str, str]:
    """Queries from a file, id -> text: a JSON list of strings or of ``{"id", "query"}`` records, or text lines.

    For queries with no answer in a corpus (:attr:`EvalDataset.no_answer`). Lines of a text
    file are queries (blank lines and lines starting with ``#`` are skipped); ids are ``n1``,
    ``n2``... unless a record gives one.
    """
    path = Path(path)
    text = read_text(path, "query file", f"{path} is missing", QUERIES_EXPECTED)
    if path.suffix.lower() != ".json":
        lines = [line.strip() for line in text.splitlines()]
        return {f"n{i}": line for i, line in enumerate((x for x in lines if x and not x.startswith("#")), 1)}
    records = parse_json(text, path)
    if not isinstance(records, list):
        raise FusionError(f"{path}: expected a JSON list of queries (strings, or {{'id': ..., 'query': ...}})")
    queries: dict[str, str] = {}
    for number, record in enumerate(records, 1):
        if isinstance(record, str) and record.strip():
            queries[f"n{number}"] = record
        elif isinstance(record, dict) and isinstance(record.get("query"), str) and record["query"].strip():
            queries[str(record.get("id") or f"n{number}")] = record["query"]
        else:
            raise FusionError(f"{path}: record {number} is neither a query string nor a record with a 'query'")
    return queries
