"""Ingestion: cleaning, loading files (with skips) and splitting into chunks."""

from __future__ import annotations

import copy
import itertools
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import regex
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from pypdf import PdfReader, PdfWriter

from langchain_fusion import FusionIndex
from langchain_fusion import metadata as keys
from langchain_fusion.ingest.loading import (
    LoadResult,
    SkippedFile,
    SkippedFileWarning,
    chunk_id,
    clean_text,
    load_files,
    load_pdf,
    merge_chunks,
    split_documents,
)

DATA = Path(__file__).resolve().parent.parent / "data"
SAMPLE_PDF = DATA / "arden-microgrids-report.pdf"
SAMPLE_MD = DATA / "maintenance-handbook.md"
PDF_PAGES = 14


class _no_warnings:
    """Fail if a SkippedFileWarning is emitted inside the block."""

    def __enter__(self) -> None:
        import warnings

        self._catcher = warnings.catch_warnings(record=True)
        self._records = self._catcher.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: object) -> None:
        self._catcher.__exit__(*exc)
        skipped = [w for w in self._records if issubclass(w.category, SkippedFileWarning)]
        assert not skipped, [str(w.message) for w in skipped]


@pytest.fixture(scope="module")
def sample_pages() -> list[Document]:
    with _no_warnings():
        return load_files([SAMPLE_PDF]).documents


@pytest.fixture(scope="module")
def sample_chunks(sample_pages: list[Document]) -> list[Document]:
    return split_documents(sample_pages)


def _write_pdf(path: Path, writer: PdfWriter) -> Path:
    with path.open("wb") as handle:
        writer.write(handle)
    return path


def _blank_pdf(path: Path) -> Path:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    return _write_pdf(path, writer)


def _encrypted_pdf(path: Path) -> Path:
    writer = PdfWriter()
    writer.add_page(PdfReader(SAMPLE_PDF).pages[0])
    writer.encrypt("secret")
    return _write_pdf(path, writer)


class TestCleanText:
    def test_tabs_become_single_spaces(self) -> None:
        assert clean_text("a\tb\t\tc") == "a b c"

    def test_runs_of_spaces_collapse(self) -> None:
        assert clean_text("one    two \t three") == "one two three"

    def test_other_unicode_spaces_collapse(self) -> None:
        assert clean_text("a\u00a0\u00a0b\u2009c") == "a b c"

    def test_line_breaks_lose_surrounding_spaces(self) -> None:
        assert clean_text("end of line   \n   start of next") == "end of line\nstart of next"

    def test_paragraph_break_is_kept(self) -> None:
        assert clean_text("para one\n\npara two") == "para one\n\npara two"

    def test_single_line_break_is_kept(self) -> None:
        assert clean_text("line one\nline two") == "line one\nline two"

    def test_three_or_more_newlines_become_two(self) -> None:
        assert clean_text("a\n\n\nb\n\n\n\n\n\nc") == "a\n\nb\n\nc"

    def test_blank_lines_made_of_spaces_count_as_paragraph_breaks(self) -> None:
        assert clean_text("a\n   \n \t \n b") == "a\n\nb"

    def test_crlf_and_cr_become_newlines(self) -> None:
        assert clean_text("a\r\nb\r\n\r\nc\rd") == "a\nb\n\nc\nd"

    def test_crlf_runs_become_one_paragraph_break(self) -> None:
        assert clean_text("a\r\n\r\n\r\n\r\nb") == "a\n\nb"

    def test_ends_are_stripped(self) -> None:
        assert clean_text("\n\n  \t hello world \n\n ") == "hello world"

    @pytest.mark.parametrize("text", ["", "   ", "\n\n\t\r\n"])
    def test_blank_text_becomes_empty(self, text: str) -> None:
        assert clean_text(text) == ""

    def test_idempotent(self) -> None:
        text = " x\t\ty \r\n\r\n\r\n  z  \n w\n\n\n\n"
        once = clean_text(text)
        assert once == "x y\n\nz\nw"
        assert clean_text(once) == once

    def test_input_without_whitespace_issues_is_unchanged(self) -> None:
        text = "Chapter 1.\nThe cooperative runs six microgrids.\n\nChapter 2."
        assert clean_text(text) == text


class TestLoadFiles:
    def test_pdf_gives_one_document_per_page(self, sample_pages: list[Document]) -> None:
        assert len(sample_pages) == PDF_PAGES
        assert [d.metadata for d in sample_pages] == [
            {keys.SOURCE: str(SAMPLE_PDF), keys.PAGE: n} for n in range(1, PDF_PAGES + 1)
        ]

    def test_pdf_page_is_pypdf_index_plus_one(self, sample_pages: list[Document]) -> None:
        reader = PdfReader(SAMPLE_PDF)
        for doc in sample_pages:
            expected = clean_text(reader.pages[doc.metadata[keys.PAGE] - 1].extract_text())
            assert doc.page_content == expected

    def test_pdf_page_numbers_match_printed_page_labels(self, sample_pages: list[Document]) -> None:
        # Every page of the sample report prints "Page N" in its header.
        for doc in sample_pages:
            assert doc.page_content.splitlines()[1] == f"Page {doc.metadata[keys.PAGE]}"
        assert sample_pages[1].page_content.splitlines()[2].startswith("Chapter 1. ")

    def test_pdf_pages_are_cleaned(self, sample_pages: list[Document]) -> None:
        for doc in sample_pages:
            assert doc.page_content == clean_text(doc.page_content)
            assert "\t" not in doc.page_content
            assert "  " not in doc.page_content

    def test_load_result_for_one_pdf(self) -> None:
        result = load_files([SAMPLE_PDF])
        assert isinstance(result, LoadResult)
        assert result.files == [str(SAMPLE_PDF)]
        assert result.skipped == []

    def test_markdown_is_one_document_without_page(self) -> None:
        result = load_files([str(SAMPLE_MD)])
        assert result.files == [str(SAMPLE_MD)]
        assert result.skipped == []
        assert len(result.documents) == 1
        doc = result.documents[0]
        assert doc.metadata == {keys.SOURCE: str(SAMPLE_MD)}
        assert doc.page_content == clean_text(SAMPLE_MD.read_text(encoding="utf-8"))
        assert doc.page_content.startswith("# AVREC Field Maintenance Handbook\n\nArden Valley Rural Energy")

    def test_text_file_with_bom_and_crlf(self, tmp_path: Path) -> None:
        path = tmp_path / "notes.txt"
        path.write_bytes("\ufeffFirst line\r\nsecond\tline\r\n\r\n\r\nNext paragraph\r\n".encode())
        result = load_files([path])
        assert [d.page_content for d in result.documents] == ["First line\nsecond line\n\nNext paragraph"]

    def test_suffix_match_is_case_insensitive(self, tmp_path: Path) -> None:
        shutil.copy(SAMPLE_PDF, tmp_path / "REPORT.PDF")
        (tmp_path / "README.MD").write_text("# Title\n\nBody.", encoding="utf-8")
        result = load_files([tmp_path])
        assert result.files == [str(tmp_path / "README.MD"), str(tmp_path / "REPORT.PDF")]
        assert len(result.documents) == PDF_PAGES + 1

    def test_directories_are_read_recursively_in_sorted_order(self, tmp_path: Path) -> None:
        (tmp_path / "b.txt").write_text("bee", encoding="utf-8")
        (tmp_path / "a.md").write_text("ay", encoding="utf-8")
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "c.txt").write_text("sea", encoding="utf-8")
        (tmp_path / "ignored.docx").write_bytes(b"PK\x03\x04 not really a docx")
        (tmp_path / "image.png").write_bytes(b"\x89PNG")
        with pytest.warns(SkippedFileWarning) as caught:
            result = load_files([tmp_path])
        assert result.files == [str(tmp_path / "a.md"), str(tmp_path / "b.txt"), str(tmp_path / "sub" / "c.txt")]
        assert [d.page_content for d in result.documents] == ["ay", "bee", "sea"]
        # Unsupported files inside a directory are not read, and never left out silently: listed and warned about.
        assert result.skipped == []
        assert result.unsupported == [str(tmp_path / "ignored.docx"), str(tmp_path / "image.png")]
        assert [str(w.message) for w in caught] == [
            f"2 file(s) not indexed: their type is not read (.docx, .png; PDF, .txt and .md files are): "
            f"{tmp_path / 'ignored.docx'}, {tmp_path / 'image.png'}"
        ]

    def test_mixed_directory_skips_bad_files_and_loads_the_rest(self, tmp_path: Path) -> None:
        folder = tmp_path / "docs"
        folder.mkdir()
        shutil.copy(SAMPLE_PDF, folder / "report.pdf")
        shutil.copy(SAMPLE_MD, folder / "handbook.md")
        (folder / "notes.txt").write_text("Plain notes about the GC-9 controller.", encoding="utf-8")
        (folder / "corrupt.pdf").write_bytes(os.urandom(2048))
        _blank_pdf(folder / "blank.pdf")
        _encrypted_pdf(folder / "locked.pdf")
        (folder / "empty.txt").write_bytes(b"")
        (folder / "blank.md").write_text(" \n\t\n", encoding="utf-8")
        (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
        docx = tmp_path / "letter.docx"
        docx.write_bytes(b"PK\x03\x04 a word document")
        missing = tmp_path / "missing.md"

        with pytest.warns(SkippedFileWarning) as record:
            result = load_files([folder, docx, missing])

        reasons = {Path(s.path).name: s.reason for s in result.skipped}
        assert set(reasons) == {
            "corrupt.pdf",
            "blank.pdf",
            "locked.pdf",
            "empty.txt",
            "blank.md",
            "latin1.txt",
            "letter.docx",
            "missing.md",
        }
        assert reasons["corrupt.pdf"].startswith("not a readable PDF (")
        assert "no extractable text" in reasons["blank.pdf"]
        assert "encrypted" in reasons["locked.pdf"] and "password" in reasons["locked.pdf"]
        assert reasons["empty.txt"] == "the file is empty"
        assert reasons["blank.md"] == "the file is empty"
        assert reasons["latin1.txt"] == "not UTF-8 text"
        assert reasons["letter.docx"].startswith("unsupported file type (supported: ")
        assert ".pdf" in reasons["letter.docx"] and ".md" in reasons["letter.docx"]
        assert reasons["missing.md"] == "no such file or directory"
        assert all(isinstance(s, SkippedFile) for s in result.skipped)
        assert {s.path for s in result.skipped} >= {str(docx), str(missing), str(folder / "corrupt.pdf")}

        # One warning per skipped file, naming the file and the reason.
        messages = [str(w.message) for w in record if issubclass(w.category, SkippedFileWarning)]
        assert sorted(messages) == sorted(f"skipped {s.path}: {s.reason}" for s in result.skipped)

        # Every good file is loaded completely.
        assert result.files == [str(folder / "handbook.md"), str(folder / "notes.txt"), str(folder / "report.pdf")]
        assert len(result.documents) == 1 + 1 + PDF_PAGES
        assert [d.metadata.get(keys.PAGE) for d in result.documents] == [None, None, *range(1, PDF_PAGES + 1)]
        assert result.documents[1].page_content == "Plain notes about the GC-9 controller."

    def test_only_bad_files_gives_no_documents(self, tmp_path: Path) -> None:
        (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(512))
        with pytest.warns(SkippedFileWarning, match="corrupt.pdf"):
            result = load_files([tmp_path])
        assert result.documents == []
        assert result.files == []
        assert [Path(s.path).name for s in result.skipped] == ["corrupt.pdf"]

    def test_good_files_emit_no_warning(self) -> None:
        with _no_warnings():
            result = load_files([SAMPLE_PDF, SAMPLE_MD])
        assert len(result.documents) == PDF_PAGES + 1

    def test_empty_input(self) -> None:
        result = load_files([])
        assert (result.documents, result.files, result.skipped) == ([], [], [])

    def test_unsupported_filter_pdf_is_skipped(self, tmp_path: Path) -> None:
        # A damaged or exotic PDF whose content streams name a filter pypdf does not know:
        # pypdf raises NotImplementedError("Unsupported filter ..."), which must become a skip.
        data = SAMPLE_PDF.read_bytes()
        assert b"/FlateDecode" in data
        (tmp_path / "odd.pdf").write_bytes(data.replace(b"/FlateDecode", b"/FlateDecodX"))
        shutil.copy(SAMPLE_MD, tmp_path / "handbook.md")
        with pytest.warns(SkippedFileWarning, match="odd.pdf"):
            result = load_files([tmp_path])
        assert result.files == [str(tmp_path / "handbook.md")]
        assert [Path(s.path).name for s in result.skipped] == ["odd.pdf"]
        assert "PDF" in result.skipped[0].reason

    def test_load_pdf_of_encrypted_file_raises_fusion_error(self, tmp_path: Path) -> None:
        from langchain_fusion.errors import FusionError

        path = _encrypted_pdf(tmp_path / "locked.pdf")
        with pytest.raises(FusionError, match="encrypted with a password"):
            load_pdf(path)


class TestSplitDocuments:
    def test_metadata_contract_on_the_sample_pdf(self, sample_chunks: list[Document]) -> None:
        assert len(sample_chunks) > PDF_PAGES
        for chunk in sample_chunks:
            assert set(chunk.metadata) == {keys.SOURCE, keys.PAGE, keys.CHUNK_INDEX, keys.START_INDEX}
            assert chunk.metadata[keys.SOURCE] == str(SAMPLE_PDF)
            assert 1 <= chunk.metadata[keys.PAGE] <= PDF_PAGES
        assert {c.metadata[keys.PAGE] for c in sample_chunks} == set(range(1, PDF_PAGES + 1))

    def test_chunk_index_counts_across_pages_in_order(self, sample_chunks: list[Document]) -> None:
        assert [c.metadata[keys.CHUNK_INDEX] for c in sample_chunks] == list(range(len(sample_chunks)))
        pages = [c.metadata[keys.PAGE] for c in sample_chunks]
        assert pages == sorted(pages)

    def test_start_index_locates_every_chunk_exactly(
        self, sample_pages: list[Document], sample_chunks: list[Document]
    ) -> None:
        page_text = {d.metadata[keys.PAGE]: d.page_content for d in sample_pages}
        for chunk in sample_chunks:
            start = chunk.metadata[keys.START_INDEX]
            text = page_text[chunk.metadata[keys.PAGE]]
            assert start >= 0
            assert text[start : start + len(chunk.page_content)] == chunk.page_content

    def test_start_index_increases_within_a_page_and_restarts_per_page(self, sample_chunks: list[Document]) -> None:
        by_page: dict[int, list[int]] = {}
        for chunk in sample_chunks:
            by_page.setdefault(chunk.metadata[keys.PAGE], []).append(chunk.metadata[keys.START_INDEX])
        for starts in by_page.values():
            assert starts[0] == 0
            assert starts == sorted(set(starts))

    def test_chunks_cover_each_page(self, sample_pages: list[Document], sample_chunks: list[Document]) -> None:
        # Apart from whitespace at the cut points, no text is lost between chunks.
        for page in sample_pages:
            chunks = [c for c in sample_chunks if c.metadata[keys.PAGE] == page.metadata[keys.PAGE]]
            covered = [False] * len(page.page_content)
            for chunk in chunks:
                start = chunk.metadata[keys.START_INDEX]
                covered[start : start + len(chunk.page_content)] = [True] * len(chunk.page_content)
            missing = "".join(ch for ch, hit in zip(page.page_content, covered, strict=True) if not hit)
            assert missing.strip() == ""

    def test_chunk_size_is_respected(self, sample_pages: list[Document]) -> None:
        chunks = split_documents(sample_pages, chunk_size=300, chunk_overlap=50)
        assert max(len(c.page_content) for c in chunks) <= 300
        assert len(chunks) > len(split_documents(sample_pages))

    def test_text_chunks_have_no_page(self) -> None:
        doc = Document(page_content="alpha beta gamma. " * 100, metadata={keys.SOURCE: "notes.txt"})
        chunks = split_documents([doc], chunk_size=200, chunk_overlap=20)
        assert len(chunks) > 1
        for position, chunk in enumerate(chunks):
            assert set(chunk.metadata) == {keys.SOURCE, keys.CHUNK_INDEX, keys.START_INDEX}
            assert chunk.metadata[keys.CHUNK_INDEX] == position

    def test_extra_page_metadata_is_carried_over(self) -> None:
        doc = Document(page_content="word " * 100, metadata={keys.SOURCE: "a.txt", "author": "AVREC", "tags": ["x"]})
        chunks = split_documents([doc], chunk_size=100, chunk_overlap=0)
        assert all(c.metadata["author"] == "AVREC" and c.metadata["tags"] == ["x"] for c in chunks)

    def test_chunk_index_is_per_source_across_interleaved_documents(self) -> None:
        docs = [
            Document(page_content="one two three four five six", metadata={keys.SOURCE: "a.pdf", keys.PAGE: 1}),
            Document(page_content="red green blue cyan magenta", metadata={keys.SOURCE: "b.md"}),
            Document(page_content="seven eight nine ten eleven", metadata={keys.SOURCE: "a.pdf", keys.PAGE: 2}),
        ]
        chunks = split_documents(docs, chunk_size=12, chunk_overlap=0)
        got = [(c.metadata[keys.SOURCE], c.metadata.get(keys.PAGE), c.metadata[keys.CHUNK_INDEX]) for c in chunks]
        a_chunks = [g for g in got if g[0] == "a.pdf"]
        b_chunks = [g for g in got if g[0] == "b.md"]
        assert [g[2] for g in a_chunks] == list(range(len(a_chunks)))
        assert [g[2] for g in b_chunks] == list(range(len(b_chunks)))
        assert [g[1] for g in a_chunks] == sorted(g[1] for g in a_chunks)
        assert a_chunks[-1][1] == 2
        # The order of the output follows the input.
        assert [g[0] for g in got] == ["a.pdf"] * 3 + ["b.md"] * 3 + ["a.pdf"] * 3

    def test_ids_are_stable(self, sample_pages: list[Document], sample_chunks: list[Document]) -> None:
        again = split_documents(copy.deepcopy(sample_pages))
        assert [c.id for c in again] == [c.id for c in sample_chunks]

    def test_ids_are_hex_and_unique(self, sample_chunks: list[Document]) -> None:
        ids = [c.id for c in sample_chunks]
        assert all(isinstance(i, str) and re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
        assert len(set(ids)) == len(ids)

    def test_ids_are_unique_across_the_sample_data(self) -> None:
        chunks = split_documents(load_files([SAMPLE_PDF, SAMPLE_MD]).documents)
        assert len({c.id for c in chunks}) == len(chunks)

    def test_id_is_the_documented_hash(self, sample_chunks: list[Document]) -> None:
        chunk = sample_chunks[5]
        meta = chunk.metadata
        assert chunk.id == chunk_id(meta[keys.SOURCE], meta[keys.PAGE], meta[keys.START_INDEX], chunk.page_content)

    def test_changed_text_changes_only_that_pages_ids(self, sample_pages: list[Document]) -> None:
        before = split_documents(sample_pages)
        edited = copy.deepcopy(sample_pages)
        edited[2].page_content = edited[2].page_content.replace("Chapter 2.", "Chapter Two.")
        after = split_documents(edited)
        assert len(after) == len(before)
        for old, new in zip(before, after, strict=True):
            if old.metadata[keys.PAGE] == 3 and old.page_content != new.page_content:
                assert new.id != old.id
            else:
                assert new.id == old.id
        assert sum(o.id != n.id for o, n in zip(before, after, strict=True)) >= 1

    def test_same_text_in_another_source_gets_another_id(self) -> None:
        text = "The GC-9 site controller logs every fault."
        chunks = split_documents(
            [Document(page_content=text, metadata={keys.SOURCE: "a.md"}), Document(text, metadata={"source": "b.md"})]
        )
        assert len(chunks) == 2
        assert chunks[0].id != chunks[1].id

    def test_ids_are_unique_for_repeated_text_without_source(self, embeddings: Embeddings) -> None:
        docs = [Document(page_content="Restart the inverter."), Document(page_content="Restart the inverter.")]
        chunks = split_documents(docs)
        assert [c.metadata[keys.CHUNK_INDEX] for c in chunks] == [0, 1]
        assert chunks[0].id != chunks[1].id
        FusionIndex.from_documents(chunks, embeddings)

    def test_inputs_are_not_mutated(self, sample_pages: list[Document]) -> None:
        docs = copy.deepcopy(sample_pages[:3])
        docs[0].metadata["extra"] = {"nested": [1, 2]}
        docs[1].id = "caller-id"
        snapshot = copy.deepcopy(docs)
        chunks = split_documents(docs, chunk_size=200, chunk_overlap=40)
        assert docs == snapshot
        assert [d.id for d in docs] == [d.id for d in snapshot]
        # Chunks own their metadata: changing it does not reach back into the inputs.
        chunks[0].metadata["extra"]["nested"].append(3)
        chunks[0].metadata[keys.SOURCE] = "changed"
        assert docs == snapshot

    @pytest.mark.parametrize(
        ("chunk_size", "chunk_overlap"),
        [(0, 0), (-5, 0), (100, -1), (100, 100), (100, 150)],
    )
    def test_invalid_sizes_raise_value_error(self, chunk_size: int, chunk_overlap: int) -> None:
        doc = Document(page_content="text", metadata={keys.SOURCE: "a.txt"})
        expected = re.escape(
            f"need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size; got {chunk_size} and {chunk_overlap}"
        )
        with pytest.raises(ValueError, match=expected):
            split_documents([doc], chunk_size=chunk_size, chunk_overlap=chunk_overlap)

    def test_overlap_makes_neighbours_share_text(self) -> None:
        words = " ".join(f"w{i:03d}" for i in range(300))  # no separators but spaces
        doc = Document(page_content=words, metadata={keys.SOURCE: "words.txt"})
        chunks = split_documents([doc], chunk_size=100, chunk_overlap=30)
        assert len(chunks) > 5
        for prev, nxt in itertools.pairwise(chunks):
            prev_start = prev.metadata[keys.START_INDEX]
            prev_end = prev_start + len(prev.page_content)
            next_start = nxt.metadata[keys.START_INDEX]
            assert prev_start < next_start < prev_end
            shared = words[next_start:prev_end]
            assert len(shared.strip()) >= 20
            assert prev.page_content.endswith(shared.rstrip())
            assert nxt.page_content.startswith(shared.lstrip())

    def test_no_overlap_means_disjoint_neighbours(self) -> None:
        words = " ".join(f"w{i:03d}" for i in range(300))
        doc = Document(page_content=words, metadata={keys.SOURCE: "words.txt"})
        chunks = split_documents([doc], chunk_size=100, chunk_overlap=0)
        for prev, nxt in itertools.pairwise(chunks):
            assert nxt.metadata[keys.START_INDEX] >= prev.metadata[keys.START_INDEX] + len(prev.page_content)
        assert " ".join(c.page_content for c in chunks) == words

    def test_max_tokens_splits_only_the_chunks_with_more_tokens(self) -> None:
        def count(texts: Sequence[str]) -> list[int]:  # one token per Han character or per other word
            return [len(regex.findall(r"\p{Han}|[^\s\p{Han}]+", text)) for text in texts]

        english = " ".join(f"word{i}" for i in range(120))  # about 7 characters per token
        chinese = "电池在洪水中完好无损因为它们被安装在高处的机架上" * 20  # one character per token
        docs = [
            Document(page_content=english, metadata={keys.SOURCE: "en.txt"}),
            Document(page_content=chinese, metadata={keys.SOURCE: "zh.txt"}),
        ]
        plain = split_documents(docs, chunk_size=300, chunk_overlap=60)
        bounded = split_documents(docs, chunk_size=300, chunk_overlap=60, max_tokens=50, count_tokens=count)
        assert [c for c in bounded if c.metadata[keys.SOURCE] == "en.txt"] == [
            c for c in plain if c.metadata[keys.SOURCE] == "en.txt"
        ]  # English chunks of 300 characters have fewer than 50 tokens: untouched
        zh = [c for c in bounded if c.metadata[keys.SOURCE] == "zh.txt"]
        assert max(count([c.page_content for c in zh])) <= 50 < max(count([c.page_content for c in plain]))
        assert [c.metadata[keys.CHUNK_INDEX] for c in zh] == list(range(len(zh)))
        for chunk in zh:  # offsets still point into the page
            start = chunk.metadata[keys.START_INDEX]
            assert chinese[start : start + len(chunk.page_content)] == chunk.page_content
        assert merge_chunks(zh) == chinese  # neighbours overlap; nothing is lost
        assert len({c.id for c in bounded}) == len(bounded)

    def test_max_tokens_needs_a_counter(self) -> None:
        doc = Document(page_content="text", metadata={keys.SOURCE: "a.txt"})
        with pytest.raises(ValueError, match="max_tokens needs count_tokens"):
            split_documents([doc], max_tokens=10)
        with pytest.raises(ValueError, match="max_tokens must be a positive whole number"):
            split_documents([doc], max_tokens=0, count_tokens=lambda texts: [1] * len(texts))

    def test_short_document_is_one_chunk(self) -> None:
        doc = Document(page_content="Short text.", metadata={keys.SOURCE: "s.txt", keys.PAGE: 3})
        (chunk,) = split_documents([doc])
        assert chunk.page_content == "Short text."
        assert chunk.metadata == {keys.SOURCE: "s.txt", keys.PAGE: 3, keys.CHUNK_INDEX: 0, keys.START_INDEX: 0}

    def test_empty_inputs(self) -> None:
        assert split_documents([]) == []
        assert split_documents([Document(page_content="", metadata={keys.SOURCE: "e.txt"})]) == []
