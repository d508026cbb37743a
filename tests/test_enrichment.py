"""Contextual enrichment: prompt shape, indexing of the context, cache, retries, failures, concurrency."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate

from langchain_fusion import BM25Retriever, ContextualEnricher, FusionIndex, RetryPolicy, with_context
from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.ingest.enrichment import (
    CONTEXT_PROMPT_VERSION,
    TRUNCATION_MARK,
    document_part,
    estimate_tokens,
    window_start,
)
from langchain_fusion.ingest.loading import split_documents
from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, indexed_text
from langchain_fusion.models.answer_cache import ResultCache, cache_key, chat_model_id
from langchain_fusion.models.retries import is_transient
from langchain_fusion.stores.local.store import LocalStore
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import Gate, HTTPStatusError, RateLimitError, RatingModel, flaky

PAGE_1 = (
    "Arden Valley Field Report, chapter one. The cooperative runs eleven village microgrids.\n\n"
    "Each microgrid has a solar array, a battery cabinet and a controller in a locked hut. "
    "The batteries are lithium iron phosphate cells rated for six thousand cycles.\n\n"
    "Villagers pay a flat monthly fee that covers lighting, phone charging and one fridge."
)
PAGE_2 = (
    "Chapter two covers the July monsoon. Two hundred millimetres of rain fell in one night.\n\n"
    "The river overflowed and flooded three huts. The battery cabinets stood on raised racks, "
    "so the water never reached them and no cell was lost.\n\n"
    "Repairs took nine days and were paid from the reserve fund."
)
NOTES = (
    "Maintenance handbook. Torque the busbar bolts to twelve newton metres.\n\n"
    "Inspect the inverter fans every quarter and replace filters when grey.\n\n"
    "Log every lockout with the date, the hut and the technician's initials."
)


def source_documents() -> list[Document]:
    return [
        Document(page_content=PAGE_1, metadata={keys.SOURCE: "report.pdf", keys.PAGE: 1}),
        Document(page_content=PAGE_2, metadata={keys.SOURCE: "report.pdf", keys.PAGE: 2}),
        Document(page_content=NOTES, metadata={keys.SOURCE: "notes.md"}),
    ]


def corpus(chunk_size: int = 160, chunk_overlap: int = 30) -> tuple[list[Document], list[Document]]:
    documents = source_documents()
    return documents, split_documents(documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap)


def chunk_in(prompt: str) -> str:
    return prompt.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]


def document_in(prompt: str) -> str:
    return prompt.split("<document>\n", 1)[1].split("\n</document>", 1)[0]


def context_for(chunk: str) -> str:
    return f"Situated: {' '.join(chunk.split()[:4])}."


def context_rule(prompt: str) -> str:
    return context_for(chunk_in(prompt))


def model(rule: Any = context_rule, **kwargs: Any) -> RatingModel:
    return RatingModel(rule=rule, structured=False, **kwargs)


def no_wait(delays: list[float] | None = None) -> RetryPolicy:
    """A retry policy that records its waits instead of sleeping."""
    record = delays if delays is not None else []

    async def asleep(seconds: float) -> None:
        record.append(seconds)

    return RetryPolicy(sleep=record.append, asleep=asleep, seed=7)


def enricher(llm: Any, **kwargs: Any) -> ContextualEnricher:
    kwargs.setdefault("retry", no_wait())
    return ContextualEnricher(llm=llm, **kwargs)


class TestPromptShape:
    def test_document_first_and_identical_for_every_chunk_of_a_document(self) -> None:
        documents, chunks = corpus()
        llm = model()
        enricher(llm).enrich(chunks, documents)
        prompts = llm.calls
        assert len(prompts) == len(chunks) > 6
        prefixes: dict[str, set[str]] = {}
        for prompt in prompts:
            assert prompt.startswith("You write short contexts that situate a chunk")  # the system message
            assert prompt.index("<document>") < prompt.index("</document>") < prompt.index("<chunk>")
            prefix = prompt[: prompt.index("</document>")]  # everything before the chunk-specific part
            source = "notes.md" if "Maintenance handbook" in prompt else "report.pdf"
            prefixes.setdefault(source, set()).add(prefix)
        assert {source: len(p) for source, p in prefixes.items()} == {"report.pdf": 1, "notes.md": 1}
        # The whole document: the pages of a PDF joined, in page order.
        report_prompt = next(p for p in prompts if "Arden" in p)
        assert document_in(report_prompt) == PAGE_1 + "\n\n" + PAGE_2
        assert {chunk_in(p) for p in prompts} == {c.page_content for c in chunks}

    def test_pages_in_any_order_are_joined_in_page_order(self) -> None:
        documents, chunks = corpus()
        llm = model()
        enricher(llm).enrich(chunks[::-1], documents[::-1])
        assert {document_in(p) for p in llm.calls if "Arden" in p} == {PAGE_1 + "\n\n" + PAGE_2}

    def test_without_documents_each_source_is_rebuilt_from_its_chunks(self) -> None:
        _, chunks = corpus(chunk_size=120, chunk_overlap=40)
        llm = model()
        enricher(llm).enrich(chunks)
        # The splitter's overlap is removed: the rebuilt document is the original text.
        assert {document_in(p) for p in llm.calls if "Arden" in p} == {PAGE_1 + "\n\n" + PAGE_2}
        assert {document_in(p) for p in llm.calls if "handbook" in p} == {NOTES}

    def test_long_document_is_cut_to_the_budget_around_the_chunk(self) -> None:
        long_text = "\n\n".join(f"Paragraph {i} talks about subject number {i} at some length." for i in range(120))
        documents = [Document(page_content=long_text, metadata={keys.SOURCE: "long.txt"})]
        chunks = split_documents(documents, chunk_size=200, chunk_overlap=0)
        llm = model()
        enricher(llm, document_token_budget=250).enrich(chunks, documents)  # 1000 characters
        parts = {}
        for prompt in llm.calls:
            part, chunk = document_in(prompt), chunk_in(prompt)
            body = part.removeprefix(f"{TRUNCATION_MARK}\n").removesuffix(f"\n{TRUNCATION_MARK}")
            assert len(body) == 1000
            assert chunk in body
            assert body in long_text
            assert part.startswith(TRUNCATION_MARK) or part.endswith(TRUNCATION_MARK)
            parts[chunk] = part
        # Windows snap to a grid, so neighbouring chunks share an identical document part.
        assert len(set(parts.values())) < len(chunks) / 2
        ordered = [parts[c.page_content] for c in chunks]
        assert sum(a == b for a, b in itertools.pairwise(ordered)) > len(chunks) / 2
        assert ordered[0].startswith("Paragraph 0") and ordered[-1].endswith("length.")

    def test_window_start(self) -> None:
        assert window_start(500, 10, 20, 1000) == 0
        # Candidate windows start at multiples of budget // 2, or at the end.
        assert window_start(10_000, 0, 100, 1000) == 0
        assert window_start(10_000, 9_900, 10_000, 1000) == 9_000
        assert window_start(10_000, 5_100, 5_300, 1000) in {4_500, 5_000}
        for start in range(0, 9_800, 137):
            s = window_start(10_000, start, start + 200, 1000)
            assert s <= start and start + 200 <= s + 1000
            assert s % 500 == 0 or s == 9_000
        assert document_part("short", 0, 5, 1000) == "short"
        assert estimate_tokens("x" * 9) == 3

    def test_custom_prompt_must_take_document_and_chunk(self) -> None:
        bad = ChatPromptTemplate.from_messages([("human", "{chunk}")])
        with pytest.raises(InvalidParameterError, match="document"):
            ContextualEnricher(llm=model(), prompt=bad)
        good = ChatPromptTemplate.from_messages(
            [("human", "<document>\n{document}\n</document>\n<chunk>\n{chunk}\n</chunk>")]
        )
        custom = ContextualEnricher(llm=model(), prompt=good)
        assert custom._version().startswith("custom-")
        assert ContextualEnricher(llm=model())._version() == CONTEXT_PROMPT_VERSION

    @pytest.mark.parametrize("field", ["max_concurrency", "document_token_budget"])
    def test_invalid_parameters(self, field: str) -> None:
        with pytest.raises(InvalidParameterError, match=field):
            ContextualEnricher(llm=model(), **{field: 0})


class TestResults:
    def test_context_in_metadata_text_unchanged_inputs_untouched(self) -> None:
        documents, chunks = corpus()
        before = [c.model_copy(deep=True) for c in chunks]
        enriched, report = enricher(model()).enrich(chunks, documents)
        assert chunks == before
        assert [d.id for d in enriched] == [c.id for c in chunks]
        for doc, chunk in zip(enriched, chunks, strict=True):
            assert doc.page_content == chunk.page_content
            assert doc.metadata[keys.CONTEXT] == context_for(chunk.page_content)
            assert {k: v for k, v in doc.metadata.items() if k != keys.CONTEXT} == chunk.metadata
        assert report.items == report.requests == report.calls == len(chunks)
        assert (report.cached, report.retries, report.failed) == (0, 0, [])
        assert report.summary() == (
            f"contextual enrichment (rating-fake): {len(chunks)} chunks, {len(chunks)} model calls (0 retries), "
            "0 cached, 0 failed"
        )
        assert json.loads(json.dumps(report.to_dict()))["calls"] == len(chunks)

    def test_blank_chunks_are_not_sent(self) -> None:
        chunks = [
            Document(id="a", page_content="Solar arrays charge the batteries.", metadata={keys.SOURCE: "x"}),
            Document(id="b", page_content="   ", metadata={keys.SOURCE: "x"}),
        ]
        llm = model()
        ticks: list[int] = []
        enriched, report = enricher(llm).enrich(chunks, progress=ticks.append)
        assert len(llm.calls) == 1
        assert keys.CONTEXT in enriched[0].metadata and keys.CONTEXT not in enriched[1].metadata
        assert sum(ticks) == 2
        assert report.requests == 1

    def test_identical_prompts_are_sent_once(self) -> None:
        chunks = [
            Document(id=str(i), page_content="The same sentence.", metadata={keys.SOURCE: "same.txt"}) for i in range(3)
        ]
        llm = model()
        enriched, report = enricher(llm).enrich(chunks)
        assert len(llm.calls) == 1
        assert {d.metadata[keys.CONTEXT] for d in enriched} == {context_for("The same sentence.")}
        assert (report.calls, report.cached) == (1, 2)

    def test_transformer_interface(self) -> None:
        documents, chunks = corpus()
        enrich = enricher(model())
        transformed = enrich.transform_documents(chunks, sources=documents)
        assert [d.metadata[keys.CONTEXT] for d in transformed] == [context_for(c.page_content) for c in chunks]
        assert enrich.last_report is not None and enrich.last_report.items == len(chunks)
        again = asyncio.run(enrich.atransform_documents(chunks, sources=documents))
        assert list(again) == list(transformed)


def stored_vectors(index: FusionIndex) -> np.ndarray:
    """The stored (normalised) vectors of every row, in row order (nothing deleted)."""
    store = index.store
    assert isinstance(store, LocalStore)
    return store.snapshot.vectors_of(np.arange(len(index)))


def bm25_scores(index: FusionIndex, query: str) -> np.ndarray:
    """BM25 scores of every row for ``query``, in row order (nothing deleted)."""
    store = index.store
    assert isinstance(store, LocalStore)
    return store.snapshot.bm25_scores_all(query)


class TestIndexingTheContext:
    DOC = Document(
        id="c1",
        page_content="The cabinets stood on raised racks.",
        metadata={keys.SOURCE: "r.pdf", keys.CONTEXT: "From the zephyrine flood chapter of the Arden report."},
    )
    OTHER = Document(id="c2", page_content="Inverter fans need new filters.", metadata={keys.SOURCE: "h.md"})

    def test_indexed_text(self) -> None:
        assert indexed_text(self.DOC) == f"{self.DOC.metadata[keys.CONTEXT]}\n\n{self.DOC.page_content}"
        assert indexed_text(self.DOC, ("content",)) == self.DOC.page_content
        assert indexed_text(self.DOC, ("content", "context")).endswith(
            "\n\nFrom the zephyrine flood chapter of the Arden report."
        )
        # Without a context: exactly the page content, whatever the fields.
        for fields in [("context", "content"), ("content",), ("context",)]:
            assert indexed_text(self.OTHER, fields) == self.OTHER.page_content  # type: ignore[arg-type]
        blank = Document(page_content="text", metadata={keys.CONTEXT: "  "})
        assert indexed_text(blank) == "text"

    def test_both_sides_see_the_context_and_results_show_the_original(self, embeddings: HashingEmbeddings) -> None:
        index = FusionIndex.from_documents([self.DOC, self.OTHER], embeddings)
        expected = np.asarray(embeddings.embed_documents([indexed_text(self.DOC), self.OTHER.page_content]))
        np.testing.assert_allclose(stored_vectors(index), expected, atol=1e-6)
        hits = BM25Retriever(index=index).invoke("zephyrine")
        assert [d.id for d in hits] == ["c1"]
        assert hits[0].page_content == self.DOC.page_content
        assert hits[0].metadata[keys.CONTEXT] == self.DOC.metadata[keys.CONTEXT]
        fused = index.as_retriever(k=1).invoke("zephyrine flood chapter")
        assert fused[0].id == "c1" and fused[0].page_content == self.DOC.page_content

    def test_choosing_what_each_side_sees(self, embeddings: HashingEmbeddings) -> None:
        index = FusionIndex.from_documents([self.DOC, self.OTHER], embeddings, bm25_fields=("content",))
        assert BM25Retriever(index=index).invoke("zephyrine") == []
        np.testing.assert_allclose(
            stored_vectors(index)[:1], embeddings.embed_documents([indexed_text(self.DOC)]), atol=1e-6
        )
        content_only = FusionIndex.from_documents([self.DOC], embeddings, embed_fields=("content",))
        np.testing.assert_allclose(
            stored_vectors(content_only), embeddings.embed_documents([self.DOC.page_content]), atol=1e-6
        )
        context_only = FusionIndex.from_documents([self.DOC], embeddings, bm25_fields=("context",))
        assert BM25Retriever(index=context_only).invoke("racks") == []
        assert len(BM25Retriever(index=context_only).invoke("zephyrine")) == 1

    def test_documents_without_context_are_indexed_as_before(self, animal_docs, embeddings) -> None:
        default = FusionIndex.from_documents(animal_docs, embeddings)
        content = FusionIndex.from_documents(
            animal_docs, embeddings, embed_fields=("content",), bm25_fields=("content",)
        )
        assert len(default) == len(content) == len(animal_docs)
        assert np.array_equal(stored_vectors(default), stored_vectors(content))
        for query in ["cat", "quantum waves", "dog barking"]:
            assert np.array_equal(bm25_scores(default, query), bm25_scores(content, query))

    @pytest.mark.parametrize("fields", [(), ("title",), ("content", "content"), "content", 7])
    def test_invalid_fields(self, fields: Any, embeddings: HashingEmbeddings) -> None:
        with pytest.raises(InvalidParameterError, match="embed_fields"):
            FusionIndex(embeddings, embed_fields=fields)
        with pytest.raises(InvalidParameterError, match="bm25_fields"):
            FusionIndex(embeddings, bm25_fields=fields)

    def test_none_fields_mean_the_default(self, embeddings: HashingEmbeddings) -> None:
        index = FusionIndex(embeddings, embed_fields=None, bm25_fields=None)
        assert index.embed_fields == index.bm25_fields == DEFAULT_TEXT_FIELDS

    def test_with_context_shows_the_indexed_text(self) -> None:
        shown = with_context([self.DOC, self.OTHER])
        assert shown[0].page_content == indexed_text(self.DOC)
        assert shown[1].page_content == self.OTHER.page_content
        assert shown[0].metadata == self.DOC.metadata and shown[0].metadata is not self.DOC.metadata
        assert self.DOC.page_content == "The cabinets stood on raised racks."

    def test_enriched_chunks_end_to_end(self, embeddings: HashingEmbeddings) -> None:
        documents, chunks = corpus()

        def rule(prompt: str) -> str:  # the context names the chapter, which the chunk itself may not
            return "Chapter on the monsoon flood." if "flooded" in chunk_in(prompt) else "General chapter."

        enriched, _ = enricher(model(rule)).enrich(chunks, documents)
        index = FusionIndex.from_documents(enriched, embeddings)
        hits = BM25Retriever(index=index, k=10).invoke("monsoon")
        flooded = {c.id for c in chunks if "flooded" in c.page_content}
        assert flooded <= {d.id for d in hits}
        plain = FusionIndex.from_documents(chunks, embeddings)
        assert not flooded <= {d.id for d in BM25Retriever(index=plain, k=10).invoke("monsoon")}


class TestCache:
    def test_second_run_makes_no_calls(self, tmp_path: Path) -> None:
        documents, chunks = corpus()
        first_model = model()
        first, report = enricher(first_model, cache_dir=tmp_path / "cache").enrich(chunks, documents)
        assert len(first_model.calls) == report.calls == len(chunks)
        second_model = model(rule=lambda prompt: AssertionError("called despite the cache"))
        ticks: list[int] = []
        second, again = enricher(second_model, cache_dir=tmp_path / "cache").enrich(
            chunks, documents, progress=ticks.append
        )
        assert second_model.calls == []
        assert (again.calls, again.cached, again.failed) == (0, len(chunks), [])
        assert second == first
        assert sum(ticks) == len(chunks)

    def test_only_new_and_changed_documents_pay(self, tmp_path: Path) -> None:
        documents, chunks = corpus()
        enricher(model(), cache_dir=tmp_path).enrich(chunks, documents)
        extra = Document(page_content="A new memo about spare fuses.", metadata={keys.SOURCE: "memo.txt"})
        changed_notes = Document(page_content=NOTES.replace("twelve", "fourteen"), metadata={keys.SOURCE: "notes.md"})
        new_documents = [documents[0], documents[1], changed_notes, extra]
        new_chunks = split_documents(new_documents, chunk_size=160, chunk_overlap=30)
        llm = model()
        _, report = enricher(llm, cache_dir=tmp_path).enrich(new_chunks, new_documents)
        # The report's chunks come from the cache; the notes (changed document) and the memo are asked again.
        asked = {chunk_in(p) for p in llm.calls}
        expected = {c.page_content for c in new_chunks if c.metadata[keys.SOURCE] in {"notes.md", "memo.txt"}}
        assert asked == expected
        assert report.cached == sum(1 for c in new_chunks if c.metadata[keys.SOURCE] == "report.pdf")

    def test_long_document_edit_re_asks_only_chunks_whose_window_changed(self, tmp_path: Path) -> None:
        paragraphs = [f"Paragraph {i} talks about subject number {i} at some length." for i in range(120)]
        original = [Document(page_content="\n\n".join(paragraphs), metadata={keys.SOURCE: "long.txt"})]
        chunks = split_documents(original, chunk_size=200, chunk_overlap=0)
        enricher(model(), cache_dir=tmp_path, document_token_budget=250).enrich(chunks, original)
        edited_paragraphs = [*paragraphs[:-1], "Paragraph 119 was edited."]
        edited = [Document(page_content="\n\n".join(edited_paragraphs), metadata={keys.SOURCE: "long.txt"})]
        edited_chunks = split_documents(edited, chunk_size=200, chunk_overlap=0)
        llm = model()
        enricher(llm, cache_dir=tmp_path, document_token_budget=250).enrich(edited_chunks, edited)
        assert 0 < len(llm.calls) < len(edited_chunks) / 4

    def test_key_covers_model_prompt_version_document_and_chunk(self, tmp_path: Path) -> None:
        base = cache_key("contextual enrichment", "m", "v1", {"document": "d", "chunk": "c"})
        assert base == cache_key("contextual enrichment", "m", "v1", {"chunk": "c", "document": "d"})
        for other in [
            cache_key("contextual enrichment", "m2", "v1", {"document": "d", "chunk": "c"}),
            cache_key("contextual enrichment", "m", "v2", {"document": "d", "chunk": "c"}),
            cache_key("contextual enrichment", "m", "v1", {"document": "d2", "chunk": "c"}),
            cache_key("contextual enrichment", "m", "v1", {"document": "d", "chunk": "c2"}),
            cache_key("summaries", "m", "v1", {"document": "d", "chunk": "c"}),
        ]:
            assert other != base
        documents, chunks = corpus()
        enricher(model(), cache_dir=tmp_path).enrich(chunks, documents)
        for changes in [{"model_id": "another-model"}, {"prompt_version": "contextual-v2"}]:
            llm = model()
            enricher(llm, cache_dir=tmp_path, **changes).enrich(chunks, documents)
            assert len(llm.calls) == len(chunks), changes

    def test_cache_files_are_json_written_atomically(self, tmp_path: Path) -> None:
        documents, chunks = corpus()
        enricher(model(), cache_dir=tmp_path / "c").enrich(chunks, documents)
        files = sorted((tmp_path / "c").rglob("*"))
        entries = [f for f in files if f.is_file()]
        assert len(entries) == len(chunks) == len(ResultCache(tmp_path / "c"))
        assert all(f.suffix == ".json" and f.parent.name == f.stem[:2] for f in entries)
        record = json.loads(entries[0].read_text(encoding="utf-8"))
        assert set(record) == {"key", "text", "about"}
        assert record["about"] == {
            "task": "contextual enrichment",
            "model": "rating-fake",
            "prompt_version": CONTEXT_PROMPT_VERSION,
        }

    def test_unreadable_entry_is_a_miss(self, tmp_path: Path) -> None:
        cache = ResultCache(tmp_path)
        key = "ab" + "0" * 62
        cache.put(key, "hello")
        assert cache.get(key) == "hello"
        (tmp_path / "ab" / f"{key}.json").write_text("{not json", encoding="utf-8")
        assert cache.get(key) is None
        assert cache.get("cd" + "1" * 62) is None
        with pytest.raises(ValueError, match="sha256"):
            cache.get("../escape")

    def test_in_memory_cache_without_a_folder(self) -> None:
        documents, chunks = corpus()
        llm = model()
        enrich = enricher(llm)
        enrich.enrich(chunks, documents)
        _, report = enrich.enrich(chunks, documents)
        assert len(llm.calls) == len(chunks)
        assert report.cached == len(chunks)

    def test_failures_are_not_cached(self, tmp_path: Path) -> None:
        documents, chunks = corpus()

        def rule(prompt: str) -> Any:
            return ValueError("refused") if "lockout" in chunk_in(prompt) else context_rule(prompt)

        _, report = enricher(model(rule), cache_dir=tmp_path).enrich(chunks, documents)
        assert len(report.failed) == 1
        llm = model()
        enriched, again = enricher(llm, cache_dir=tmp_path).enrich(chunks, documents)
        assert [chunk_in(p) for p in llm.calls] == [c.page_content for c in chunks if "lockout" in c.page_content]
        assert again.failed == [] and all(keys.CONTEXT in d.metadata for d in enriched)

    def test_model_id(self) -> None:
        assert chat_model_id(model()) == "rating-fake"
        from langchain_openai import ChatOpenAI

        assert chat_model_id(ChatOpenAI(model="gpt-4o-mini", api_key="sk-not-used")) == "openai-chat:gpt-4o-mini"


class TestRetries:
    def test_rate_limits_are_retried_as_fresh_calls(self) -> None:
        documents, chunks = corpus()
        llm = model(flaky(context_rule, failures=2))
        delays: list[float] = []
        enriched, report = enricher(llm, retry=no_wait(delays)).enrich(chunks, documents)
        assert report.failed == []
        assert all(d.metadata[keys.CONTEXT] == context_for(d.page_content) for d in enriched)
        assert len(llm.calls) == report.calls == 3 * len(chunks)
        assert report.retries == 2 * len(chunks)
        for chunk in chunks:  # each retry is a new call with the same prompt
            assert sum(chunk_in(p) == chunk.page_content for p in llm.calls) == 3
        assert len(delays) == 2 * len(chunks)
        policy = RetryPolicy()
        assert all(0 <= d <= policy.bound(2) for d in delays)
        assert any(d > policy.bound(1) for d in delays)  # second retries may wait longer than the first bound

    def test_status_code_errors_are_retried(self) -> None:
        _, chunks = corpus()
        llm = model(flaky(context_rule, failures=1, error=lambda: HTTPStatusError(503, "overloaded")))
        _, report = enricher(llm).enrich(chunks[:3])
        assert (report.retries, report.failed) == (3, [])

    def test_other_errors_fail_at_once_and_are_reported(self, caplog: pytest.LogCaptureFixture) -> None:
        documents, chunks = corpus()

        def rule(prompt: str) -> Any:
            if "lockout" in chunk_in(prompt):
                return HTTPStatusError(400, "bad request: context length exceeded")
            return context_rule(prompt)

        llm = model(rule)
        enriched, report = enricher(llm).enrich(chunks, documents)
        bad = next(i for i, c in enumerate(chunks) if "lockout" in c.page_content)
        assert keys.CONTEXT not in enriched[bad].metadata
        assert enriched[bad].page_content == chunks[bad].page_content
        assert all(keys.CONTEXT in d.metadata for i, d in enumerate(enriched) if i != bad)
        assert len(llm.calls) == len(chunks)  # not retried
        [failure] = report.failed
        assert failure.item == chunks[bad].id
        assert failure.label == f"notes.md, chunk {chunks[bad].metadata[keys.CHUNK_INDEX]}"
        assert failure.error == "HTTPStatusError: bad request: context length exceeded"
        assert failure.attempts == 1
        assert "1 failed" in report.summary()
        assert "contextual enrichment failed for 1 of" in caplog.text

    def test_exhausted_retries_are_reported_not_raised(self) -> None:
        _, chunks = corpus()
        llm = model(lambda prompt: RateLimitError("slow down"))
        delays: list[float] = []
        policy = RetryPolicy(max_attempts=3, sleep=delays.append, seed=1)
        enriched, report = enricher(llm, retry=policy).enrich(chunks[:2])
        assert len(llm.calls) == 6
        assert [f.attempts for f in report.failed] == [3, 3]
        assert [f.error for f in report.failed] == ["RateLimitError: slow down"] * 2
        assert all(keys.CONTEXT not in d.metadata for d in enriched)
        assert len(delays) == 4

    def test_a_stale_context_does_not_survive_a_failure(self) -> None:
        stale = Document(id="s", page_content="Text.", metadata={keys.SOURCE: "s.txt", keys.CONTEXT: "old"})
        enriched, report = enricher(model(lambda p: ValueError("no"))).enrich([stale])
        assert keys.CONTEXT not in enriched[0].metadata and stale.metadata[keys.CONTEXT] == "old"
        assert len(report.failed) == 1

    def test_empty_answers_are_failures(self) -> None:
        _, chunks = corpus()
        _, report = enricher(model(lambda p: "   ")).enrich(chunks[:1])
        assert report.failed[0].error == "ValueError: the model gave an empty answer"

    def test_timeouts_are_retried_then_reported(self) -> None:
        chunks = [Document(id="slow", page_content="a slow chunk", metadata={keys.SOURCE: "s.txt"})]
        llm = model(slow={"slow chunk": 2.0})
        policy = RetryPolicy(max_attempts=2, sleep=lambda s: None)
        _, report = enricher(llm, retry=policy, timeout=0.05).enrich(chunks)
        assert report.failed[0].attempts == 2
        assert report.failed[0].error.startswith("TimeoutError: no answer within 0.05 s")

    @pytest.mark.parametrize(
        ("error", "transient"),
        [
            (RateLimitError("x"), True),
            (HTTPStatusError(429), True),
            (HTTPStatusError(500), True),
            (HTTPStatusError(503), True),
            (HTTPStatusError(529), True),
            (HTTPStatusError(408), True),
            (HTTPStatusError(400), False),
            (HTTPStatusError(401), False),
            (HTTPStatusError(404), False),
            (TimeoutError(), True),
            (ConnectionResetError(), True),
            (type("APIConnectionError", (Exception,), {})(), True),
            (type("APITimeoutError", (Exception,), {})(), True),
            (type("InternalServerError", (Exception,), {})(), True),
            (type("ServiceUnavailableError", (Exception,), {})(), True),
            (type("OverloadedError", (Exception,), {})(), True),
            (type("AuthenticationError", (Exception,), {})(), False),
            (ValueError("bad"), False),
            (KeyError("x"), False),
        ],
    )
    def test_transient_errors(self, error: BaseException, transient: bool) -> None:
        assert is_transient(error) is transient

    def test_subclass_of_a_rate_limit_error_and_response_status(self) -> None:
        class ProviderQuota(RateLimitError):
            pass

        class Response:
            status_code = 502
            headers: ClassVar[dict[str, str]] = {}

        wrapped = Exception("gateway")
        wrapped.response = Response()  # type: ignore[attr-defined]
        assert is_transient(ProviderQuota()) and is_transient(wrapped)

    def test_backoff_is_exponential_with_full_jitter(self) -> None:
        policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=10.0)
        assert [policy.bound(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
        rng = random.Random(3)
        for retry in range(1, 7):
            samples = [policy.delay(retry, rng) for _ in range(300)]
            assert 0 <= min(samples) < 0.2 * policy.bound(retry)
            assert 0.8 * policy.bound(retry) < max(samples) <= policy.bound(retry)

    def test_retry_after_header_is_honoured(self) -> None:
        class Response:
            status_code = 429
            headers: ClassVar[dict[str, str]] = {"retry-after": "7"}

        error = Exception("rate limited")
        error.response = Response()  # type: ignore[attr-defined]
        policy = RetryPolicy(initial_delay=0.1, max_delay=5.0)
        assert policy.delay(1, random.Random(0), error) == 5.0  # capped at max_delay
        assert RetryPolicy(max_delay=60).delay(1, random.Random(0), error) == 7.0

    def test_invalid_policy(self) -> None:
        with pytest.raises(InvalidParameterError):
            RetryPolicy(max_attempts=0)


class TestConcurrency:
    def test_calls_run_concurrently_within_the_bound(self) -> None:
        chunks = [
            Document(id=str(i), page_content=f"chunk number {i}", metadata={keys.SOURCE: f"{i}.txt"}) for i in range(12)
        ]
        llm = model(gates={"<chunk>": Gate(crowd=3)})  # opens only once three calls are in flight together
        enricher(llm, max_concurrency=3).enrich(chunks)
        assert llm.max_active == 3
        llm = model(delay=0.02)  # the pause gives a call past the bound the chance to overlap
        enricher(llm, max_concurrency=1).enrich(chunks)
        assert llm.max_active == 1

    def test_retries_hold_their_slot(self) -> None:
        chunks = [
            Document(id=str(i), page_content=f"chunk number {i}", metadata={keys.SOURCE: f"{i}.txt"}) for i in range(8)
        ]
        llm = model(flaky(context_rule, failures=1), delay=0.02)
        _, report = enricher(llm, max_concurrency=2).enrich(chunks)
        assert llm.max_active <= 2 and report.retries == 8

    async def test_async_twin(self) -> None:
        documents, chunks = corpus()
        sync_model, async_model = model(), model(gates={"<chunk>": Gate(crowd=2)})
        expected, _ = enricher(sync_model).enrich(chunks, documents)
        ticks: list[int] = []
        got, report = await enricher(async_model, max_concurrency=2).aenrich(chunks, documents, progress=ticks.append)
        assert got == expected
        assert async_model.async_calls == len(chunks) and async_model.sync_calls == 0
        assert async_model.max_active == 2
        assert sum(ticks) == len(chunks)
        assert report.calls == len(chunks)

    async def test_async_retries_and_failures(self) -> None:
        _, chunks = corpus()
        delays: list[float] = []

        def rule(prompt: str) -> Any:
            return ValueError("refused") if "lockout" in chunk_in(prompt) else context_rule(prompt)

        llm = model(flaky(rule, failures=1))
        enriched, report = await enricher(llm, retry=no_wait(delays)).aenrich(chunks)
        assert len(report.failed) == 1 and report.failed[0].attempts == 2  # a rate limit, then the refusal
        assert len(delays) == len(chunks)
        assert sum(keys.CONTEXT in d.metadata for d in enriched) == len(chunks) - 1

    def test_progress_counts_every_chunk(self, tmp_path: Path) -> None:
        documents, chunks = corpus()
        ticks: list[int] = []
        enricher(model(delay=0.01), max_concurrency=4).enrich(chunks, documents, progress=ticks.append)
        assert sum(ticks) == len(chunks)


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
def test_real_model_writes_contexts(tmp_path: Path) -> None:
    from langchain_fusion.models.chat import default_chat_model

    documents, chunks = corpus()
    enriched, report = ContextualEnricher(llm=default_chat_model(), cache_dir=tmp_path).enrich(chunks[:3], documents)
    assert report.failed == [] and report.calls == 3
    for doc in enriched:
        context = doc.metadata[keys.CONTEXT]
        assert 10 < len(context) < 800
    _, again = ContextualEnricher(llm=default_chat_model(), cache_dir=tmp_path).enrich(chunks[:3], documents)
    assert again.calls == 0 and again.cached == 3


class TestAnswerBound:
    """A misbehaving model's huge answer is a reported failure: never stored, cached or indexed."""

    def test_a_huge_context_fails_only_its_chunk(self, tmp_path: Any) -> None:
        documents, chunks = corpus()
        victim = chunks[1].page_content

        def rule(prompt: str) -> str:
            return "x" * 1_000_000 if chunk_in(prompt) == victim else context_rule(prompt)

        enriched, report = enricher(model(rule), cache_dir=tmp_path).enrich(chunks, documents)
        assert keys.CONTEXT not in enriched[1].metadata
        assert all(keys.CONTEXT in d.metadata for i, d in enumerate(enriched) if i != 1)
        assert [f.error for f in report.failed] == [
            "AnswerTooLongError: the answer has 1,000,000 characters, more than max_answer_chars=8,000"
        ]
        assert max(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 100_000  # not cached

    def test_the_bound_can_be_raised_and_is_checked(self) -> None:
        documents, chunks = corpus()
        enriched, report = enricher(model(lambda p: "y" * 9000), max_answer_chars=10_000).enrich(chunks, documents)
        assert not report.failed and enriched[0].metadata[keys.CONTEXT] == "y" * 9000
        for bad in (0, True, 2.5, "100"):
            with pytest.raises(InvalidParameterError):
                enricher(model(), max_answer_chars=bad)
